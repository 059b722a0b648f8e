package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"

	"github.com/vpcgw/vpcgw/internal/controller/readiness"
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
	// OnSynced, when set, learns each pass of a gateway that wrote its whole plan without an
	// error: every instance acknowledged its state (or none runs), and the routes converged
	// (vpcgw release waits for it, SPEC O4).
	OnSynced func(gateway string)
	// Name names the gateway controller (default "vpcgw-gateway"): controller-runtime refuses two
	// controllers of one name in one process, so tests that start several name each.
	Name string
	// SyncStaleAfter is how long a gateway's changes may wait unapplied before /readyz fails
	// (0: DefaultSyncStaleAfter; negative: never).
	SyncStaleAfter time.Duration
	// AgentKeepalive is how long an agent stream may be idle before it is pinged, and how long
	// the agent has to answer (0: DefaultAgentKeepalive; negative: no keepalives).
	AgentKeepalive time.Duration
	// BackendPick is --backend-pick, which the dialer passes to the agents (SPEC D2); the
	// status ConfigMap tells it.
	BackendPick string
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
	// LeaderElectionLock, when set, is the lock of the leader election, held beyond the
	// manager's end (vpcgw release brings the Lease it took and keeps it).
	LeaderElectionLock resourcelock.Interface
	// StatusNamespace is where the leader publishes what the controller runs and what it knows of
	// each gateway, ConfigMap vpcgw-controller (internal/status, SPEC O2); "" turns that off.
	// StatusHolder names this process there (its pod). StatusMinInterval and StatusHeartbeat
	// bound the writes (0: status.DefaultMinInterval, status.DefaultHeartbeat).
	StatusNamespace, StatusHolder      string
	StatusMinInterval, StatusHeartbeat time.Duration
}

// DefaultSyncStaleAfter is --sync-stale-after's default (readiness.DefaultSyncStaleAfter).
const DefaultSyncStaleAfter = readiness.DefaultSyncStaleAfter

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
	c, err := New(ctx, cfg, opts, log)
	if err != nil {
		return err
	}
	defer c.Close()
	log.Info("starting controller", "enableGwNftableLbSvc", opts.Flags.EnableGwNftableLbSvc,
		"enableGwNftableSvcClusterIP", opts.Flags.EnableGwNftableSvcClusterIP)
	return c.Manager.Start(ctx)
}

// Controller is the controller's manager, not started yet, and what it holds open.
type Controller struct {
	Manager ctrl.Manager
	// NB is the VIP route writer (nil without Options.NB); vpcgw release reads what is left.
	NB *ovn.Writer
	// Close closes the NB connection.
	Close func()
}

// New builds the controller's manager and reconciler (Run and vpcgw release share it).
func New(ctx context.Context, cfg *rest.Config, opts Options, log logr.Logger) (*Controller, error) {
	if err := opts.Flags.Validate(); err != nil {
		return nil, err
	}
	if err := CheckLedgerForm(ctx, cfg, opts.Flags.Gates().Ledger); err != nil {
		return nil, err
	}
	mo, err := managerOptions(opts, log)
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(cfg, mo)
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("adding the liveness check: %w", err)
	}
	// Ready once the caches have synced; the gateway syncs' check is added with the reconciler.
	if err := mgr.AddReadyzCheck("informers", readiness.CacheSynced(mgr.GetCache())); err != nil {
		return nil, fmt.Errorf("adding the informers' readiness check: %w", err)
	}
	c := &Controller{Manager: mgr, Close: func() {}}
	var routes RouteWriter
	if opts.NB.Address != "" {
		w, err := ovn.NewWriter(ctx, opts.NB, log.WithName("ovn"))
		if err != nil {
			return nil, fmt.Errorf("OVN northbound DB %s: %w", opts.NB.Address, err)
		}
		c.NB, c.Close, routes = w, w.Close, w
	} else {
		log.Info("no --ovn-nb-addr: VIP routes are not written; route the VIPs to the gateway by hand")
	}
	if err := setup(ctx, mgr, opts, routes, log); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// managerOptions are the manager's options for opts.
func managerOptions(opts Options, log logr.Logger) (ctrl.Options, error) {
	metrics, err := MetricsServerOptions(opts.MetricsAddr, opts.MetricsSecure, opts.MetricsCertDir)
	if err != nil {
		return ctrl.Options{}, err
	}
	scheme, err := Scheme()
	if err != nil {
		return ctrl.Options{}, fmt.Errorf("building scheme: %w", err)
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
	}
	if opts.LeaderElectionLock != nil {
		mo.LeaderElectionResourceLockInterface = opts.LeaderElectionLock
		mo.LeaderElectionReleaseOnCancel = false // its owner keeps it
	}
	return mo, nil
}

// setup adds the reconciler, its status publisher and its readiness check to mgr.
func setup(ctx context.Context, mgr ctrl.Manager, opts Options, routes RouteWriter, log logr.Logger) error {
	r := &GatewayReconciler{
		Routes:          routes,
		MinSyncInterval: opts.MinSyncInterval,
		Workers:         opts.GatewayWorkers,
		OnSynced:        opts.OnSynced,
		Name:            opts.Name,
		AgentKeepalive:  opts.AgentKeepalive,
		SyncStaleAfter:  opts.SyncStaleAfter,
		Client:          mgr.GetClient(),
		Recorder:        mgr.GetEventRecorder("vpcgw-controller"),
		Flags:           opts.Flags,
		Dialer:          opts.Dialer,
		Log:             log.WithName("gateway"),
	}
	if opts.StatusNamespace != "" {
		rec := status.NewRecorder()
		r.Status = rec
		if err := mgr.Add(statusPublisher(mgr, opts, rec, routes != nil, log)); err != nil {
			return fmt.Errorf("adding the status publisher: %w", err)
		}
	}
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		return err
	}
	// Not ready while a gateway's changes wait unapplied for too long (kube-proxy's healthz).
	if err := mgr.AddReadyzCheck("gateway-syncs", r.health.Check); err != nil {
		return fmt.Errorf("adding the gateway syncs' readiness check: %w", err)
	}
	return nil
}

// LeaderElectionID is the controller's leader election Lease (vpcgw release takes it too, and a
// new install frees it from an earlier install's release: internal/release).
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
