package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"

	"github.com/vpcgw/vpcgw/internal/ovn"
	vpcgwscheme "github.com/vpcgw/vpcgw/internal/scheme"
	"github.com/vpcgw/vpcgw/internal/status"
	"github.com/vpcgw/vpcgw/internal/transport"
)

// DefaultMinSyncInterval is --min-sync-interval's default. A sync replans only what changed
// (partial plans) and the agent gets a delta, so syncs are cheap; changes that arrive while a sync
// runs are coalesced into the next one anyway (the work queue holds a gateway once). The interval
// only bounds the rate of syncs per gateway (50/s); at 100 ms, a steady 20 changes/s waited ~50 ms
// each for nothing (docs/benchmarks.md).
const DefaultMinSyncInterval = 20 * time.Millisecond

// Options configure one controller process.
type Options struct {
	Flags  Flags
	Dialer transport.Dialer
	// MetricsAddr and HealthAddr are listen addresses; "" or "0" turns the server off.
	// MetricsSecure serves metrics over HTTPS with authentication and authorization, and is
	// required for a non-loopback MetricsAddr (see MetricsServerOptions); MetricsCertDir holds
	// its certificate (empty or without tls.crt/tls.key: self-signed).
	// MinSyncInterval is the least time between two syncs of one gateway (0: no limit).
	MinSyncInterval time.Duration
	// GatewayWorkers is how many gateways are synced at once (0: DefaultGatewayWorkers). One
	// gateway is never synced twice at once (SPEC L9).
	GatewayWorkers int
	// OnProgrammed: see GatewayReconciler.OnProgrammed.
	OnProgrammed func(gateway string, latencies []time.Duration)
	// OnSynced: see GatewayReconciler.OnSynced.
	OnSynced func(gateway string)
	// SyncStaleAfter is how long a gateway's changes may wait unapplied before /readyz fails
	// (0: DefaultSyncStaleAfter; negative: never).
	SyncStaleAfter time.Duration
	// AgentKeepalive is how long an agent stream may be idle before it is pinged, and how long
	// the agent has to answer (0: DefaultAgentKeepalive; negative: no keepalives).
	AgentKeepalive time.Duration
	// NB configures the VIP route writer; an empty address turns route writing off (SPEC V1).
	NB             ovn.Config
	MetricsAddr    string
	MetricsSecure  bool
	MetricsCertDir string
	HealthAddr     string
	// PprofAddr serves net/http/pprof ("" or "0": off).
	PprofAddr               string
	LeaderElection          bool
	LeaderElectionNamespace string
	// PodName and PodNamespace are the controller's own Pod (POD_NAME and POD_NAMESPACE from
	// the downward API; empty outside a Pod): a Pod created after an uninstall's release took the
	// leader election Lease frees it (freeEarlierInstallsLease).
	PodName, PodNamespace string
	// StatusNamespace is where the leader publishes what the controller runs and what it knows of
	// each gateway, ConfigMap vpcgw-controller (internal/status, SPEC O2); "" turns that off.
	// StatusHolder names this process there (its pod). StatusMinInterval and StatusHeartbeat
	// bound the writes (0: status.DefaultMinInterval, status.DefaultHeartbeat).
	StatusNamespace, StatusHolder      string
	StatusMinInterval, StatusHeartbeat time.Duration
}

// DefaultGatewayWorkers is --gateway-workers' default: each gateway is synced by one worker at a
// time, so a gateway whose agent hangs (until its keepalive or apply timeout) holds one worker,
// not the others' syncs (SPEC L9). A sync mostly waits on its agents and the API server, so more
// workers than cores pay.
const DefaultGatewayWorkers = 8

// DefaultAgentKeepalive is --agent-keepalive's default: far below the idle timeouts of proxies
// (tens of seconds and up) and the kubelet's (4 h), and a dead stream is noticed within 10 s.
const DefaultAgentKeepalive = 5 * time.Second

// Scheme knows the Kubernetes built-ins, kube-ovn's types and vpcgw's own (internal/scheme).
func Scheme() (*runtime.Scheme, error) { return vpcgwscheme.New() }

// Run starts the controller and blocks until ctx ends.
func Run(ctx context.Context, cfg *rest.Config, opts Options, log logr.Logger) error {
	if opts.LeaderElection {
		ns := opts.LeaderElectionNamespace
		if ns == "" {
			ns = opts.PodNamespace // controller-runtime's default: the service account's namespace
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return fmt.Errorf("client for the leader election Lease: %w", err)
		}
		if err := freeEarlierInstallsLease(ctx, cs, ns, opts.PodNamespace, opts.PodName, log); err != nil {
			// Not fatal: the controller then stands by until the release's hold ends.
			log.Error(err, "could not tell whether an earlier install's release holds the leader election Lease")
		}
	}
	mgr, _, closeNB, err := newManager(ctx, cfg, opts, log, nil)
	if err != nil {
		return err
	}
	defer closeNB()
	log.Info("starting controller", "enableGwNftableLbSvc", opts.Flags.EnableGwNftableLbSvc,
		"enableGwNftableSvcClusterIP", opts.Flags.EnableGwNftableSvcClusterIP)
	return mgr.Start(ctx)
}

// controllerParts is what newManager built besides the manager.
type controllerParts struct {
	reconciler *GatewayReconciler
	nb         *ovn.Writer // nil without --ovn-nb-addr
}

// newManager builds the controller's manager and reconciler (Run and Release share it); adjust,
// when set, changes the manager's options. The returned func closes the NB connection.
func newManager(ctx context.Context, cfg *rest.Config, opts Options, log logr.Logger, adjust func(*ctrl.Options)) (ctrl.Manager, controllerParts, func(), error) {
	var parts controllerParts
	noop := func() {}
	if err := opts.Flags.Validate(); err != nil {
		return nil, parts, noop, err
	}
	if err := CheckLedgerForm(ctx, cfg, opts.Flags.Gates().Ledger); err != nil {
		return nil, parts, noop, err
	}
	metrics, err := MetricsServerOptions(opts.MetricsAddr, opts.MetricsSecure, opts.MetricsCertDir)
	if err != nil {
		return nil, parts, noop, err
	}
	scheme, err := Scheme()
	if err != nil {
		return nil, parts, noop, fmt.Errorf("building scheme: %w", err)
	}
	mo := ctrl.Options{
		Scheme:                  scheme,
		Logger:                  log,
		Cache:                   CacheOptions(opts.Flags),
		Metrics:                 metrics,
		HealthProbeBindAddress:  defaultAddr(opts.HealthAddr),
		PprofBindAddress:        pprofAddr(opts.PprofAddr),
		LeaderElection:          opts.LeaderElection,
		LeaderElectionID:        LeaderElectionID,
		LeaderElectionNamespace: opts.LeaderElectionNamespace,
		// Tests and the lab run several controllers in one process, one after another.
		Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
	}
	if adjust != nil {
		adjust(&mo)
	}
	mgr, err := ctrl.NewManager(cfg, mo)
	if err != nil {
		return nil, parts, noop, fmt.Errorf("creating manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, parts, noop, err
	}
	// Ready once the caches have synced; the gateway syncs' check is added with the reconciler.
	if err := mgr.AddReadyzCheck("informers", cacheSynced(mgr.GetCache())); err != nil {
		return nil, parts, noop, fmt.Errorf("adding the informers' readiness check: %w", err)
	}
	var routes RouteWriter
	closeNB := noop
	if opts.NB.Address != "" {
		w, err := ovn.NewWriter(ctx, opts.NB, log.WithName("ovn"))
		if err != nil {
			return nil, parts, noop, fmt.Errorf("OVN northbound DB %s: %w", opts.NB.Address, err)
		}
		closeNB = w.Close
		routes, parts.nb = w, w
	} else {
		log.Info("no --ovn-nb-addr: VIP routes are not written; route the VIPs to the gateway by hand")
	}
	r := &GatewayReconciler{
		Routes:          routes,
		MinSyncInterval: opts.MinSyncInterval,
		Workers:         opts.GatewayWorkers,
		OnProgrammed:    opts.OnProgrammed,
		OnSynced:        opts.OnSynced,
		AgentKeepalive:  opts.AgentKeepalive,
		SyncStaleAfter:  opts.SyncStaleAfter,
		Client:          mgr.GetClient(),
		Recorder:        mgr.GetEventRecorder("vpcgw-controller"),
		Flags:           opts.Flags,
		Dialer:          opts.Dialer,
		Log:             log.WithName("gateway"),
	}
	parts.reconciler = r
	fail := func(err error) (ctrl.Manager, controllerParts, func(), error) {
		closeNB()
		return nil, parts, noop, err
	}
	if opts.StatusNamespace != "" {
		rec := status.NewRecorder()
		r.Status = rec
		if err := mgr.Add(statusPublisher(mgr, opts, rec, routes != nil, log)); err != nil {
			return fail(err)
		}
	}
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		return fail(err)
	}
	// Not ready while a gateway's changes wait unapplied for too long (kube-proxy's healthz).
	if err := mgr.AddReadyzCheck("gateway-syncs", r.health.check); err != nil {
		return fail(fmt.Errorf("adding the gateway syncs' readiness check: %w", err))
	}
	return mgr, parts, closeNB, nil
}

// LeaderElectionID is the controller's leader election Lease (vpcgw release takes it too).
const LeaderElectionID = "vpcgw-controller"

func pprofAddr(a string) string {
	if a == "0" {
		return ""
	}
	return a
}

func defaultAddr(a string) string {
	if a == "" {
		return "0"
	}
	return a
}
