package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"

	"github.com/vpcgw/vpcgw/internal/cli"
	"github.com/vpcgw/vpcgw/internal/controller"
	"github.com/vpcgw/vpcgw/internal/ovn"
	"github.com/vpcgw/vpcgw/internal/release"
	"github.com/vpcgw/vpcgw/internal/scheme"
	"github.com/vpcgw/vpcgw/internal/status"
	"github.com/vpcgw/vpcgw/internal/transport"
)

// descriptions are the help texts of the commands that take flags.
var descriptions = map[string]string{
	"controller": `Watches Services, EndpointSlices and kube-ovn's objects and programs the VPC NAT gateways:
each gateway's nftables through the vpcgw agent in its pods, the VIP routes in OVN's northbound
database, and the Services' records, ingress and finalizer. Its flags mirror kube-ovn-controller's
gates (--enable-gw-nftable-lb-svc, --enable-gw-nftable-svc-cluster-ip, both off by default) and
how the cluster's kube-ovn runs (--enable-lb, --enable-lb-svc).`,
	"release": `Releases everything vpcgw wrote (uninstall): every gateway's nftables objects and lo VIPs, the
VIP routes, the Services' ingress and finalizer, the records and the agent copies, then exits 0
when nothing is left. It takes the controller's flags, and releases nothing while kube-ovn's own
Service controller serves (SPEC K10).`,
}

func runController(ctx context.Context, args []string) error {
	cfg, opts, log, err := controllerSetup("controller", args, nil)
	if err != nil {
		return err
	}
	if opts.LeaderElection {
		freeEarlierInstallsLease(ctx, cfg, opts, log)
	}
	return controller.Run(ctx, cfg, opts, log)
}

// freeEarlierInstallsLease frees the leader election Lease that an earlier install's release
// still holds (release.FreeEarlierInstallsLease), so that a reinstalled controller serves at once.
// Not fatal: the controller then stands by until the release's hold ends.
func freeEarlierInstallsLease(ctx context.Context, cfg *rest.Config, opts controller.Options, log logr.Logger) {
	podName, podNamespace := os.Getenv("POD_NAME"), os.Getenv("POD_NAMESPACE")
	ns := opts.LeaderElectionNamespace
	if ns == "" {
		ns = podNamespace // controller-runtime's default: the service account's namespace
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err == nil {
		err = release.FreeEarlierInstallsLease(ctx, cs, ns, podNamespace, podName, log)
	}
	if err != nil {
		log.Error(err, "could not tell whether an earlier install's release holds the leader election Lease")
	}
}

// controllerSetup parses the controller's flags (vpcgw controller, and vpcgw release, which takes
// the same), with extra's flags added, and builds the API configuration, the options and the
// logger from them.
func controllerSetup(name string, args []string, extra func(fs *flag.FlagSet)) (*rest.Config, controller.Options, logr.Logger, error) {
	var opts controller.Options
	cfg, log, err := parseControllerFlags(name, args, &opts, extra)
	return cfg, opts, log, err
}

func parseControllerFlags(name string, args []string, opts *controller.Options, extra func(fs *flag.FlagSet)) (*rest.Config, logr.Logger, error) {
	log := logr.Discard()
	if err := controller.CheckRemovedFlags(args); err != nil {
		return nil, log, err
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	if extra != nil {
		extra(fs)
	}
	var cf controllerFlags
	cf.register(fs, opts)
	if err := cli.Parse(fs, args, "vpcgw "+name, descriptions[name], os.Stdout); err != nil {
		return nil, log, err
	}
	cf.complete(opts)
	log, err := cf.logging.Logger()
	if err != nil {
		return nil, log, err
	}
	if err := opts.Flags.Validate(); err != nil {
		return nil, log, err
	}
	if _, err := controller.MetricsServerOptions(opts.MetricsAddr, opts.MetricsSecure, opts.MetricsCertDir); err != nil {
		return nil, log, err
	}
	cfg, err := restConfig(cf.kubeconfig)
	if err != nil {
		return nil, log, err
	}
	d, err := cf.dialer(fs, cfg, log)
	if err != nil {
		return nil, log, err
	}
	opts.Dialer = d
	return cfg, log, nil
}

// controllerFlags are the controller's flags that are not fields of controller.Options: complete
// and dialer turn them into Options.
type controllerFlags struct {
	kubeconfig     string
	transport      string
	agentContainer string
	agentCommand   string
	agentBinaries  string
	backendPick    string
	tlsFiles       ovn.TLSFiles
	logging        cli.Logging
}

// register adds the controller's flags to fs: those of opts, then cf's.
func (cf *controllerFlags) register(fs *flag.FlagSet, opts *controller.Options) {
	opts.Flags.Register(fs)
	fs.StringVar(&cf.kubeconfig, "kubeconfig", "", "path to a kubeconfig (default: in-cluster or $KUBECONFIG)")
	fs.StringVar(&cf.transport, "transport", "exec", "how to reach gateway agents: exec (the Kubernetes exec API into the gateway pods) or local (ip netns exec, for tests and the benchmark lab)")
	fs.StringVar(&cf.agentContainer, "agent-container", transport.DefaultExecContainer, "container of the gateway pods that runs the agent (exec transport)")
	fs.StringVar(&cf.agentCommand, "agent-command", strings.Join(transport.DefaultExecCommand, " "),
		"the agent's command (the vpcgw-agent binary and its flags), words separated by spaces, no shell: with --transport exec run in that container; with --transport local run under 'ip netns exec' (default there: vpcgw-agent beside this binary)")
	fs.StringVar(&cf.agentBinaries, "agent-binaries", transport.AgentBinariesDir,
		"with --transport exec: directory of the agent builds (vpcgw-agent-linux-<GOARCH>) the controller copies into each gateway container, verified by SHA-256, before it starts the agent there; the first word of --agent-command is then replaced by the copy's path. Empty: no copy, --agent-command must name an agent the gateway image has")
	fs.StringVar(&cf.backendPick, "backend-pick", "hash",
		"how the gateways pick a backend for a new connection: hash (a hash of its addresses and ports: the same backend on every gateway instance and after a gateway restart, so that established connections survive the loss of the gateway's conntrack, SPEC D2) or random (numgen random, kube-ovn's own ruleset); passed to the agents as --pick")
	fs.DurationVar(&opts.AgentKeepalive, "agent-keepalive", controller.DefaultAgentKeepalive,
		"ping an agent stream idle this long, and break it when the agent does not answer within as long (idle timeouts of the kubelet and proxies never cut a live stream; a dead one is noticed within twice this); 0: off")
	fs.StringVar(&opts.MetricsAddr, "metrics-bind-address", controller.DefaultMetricsAddr,
		`metrics listen address ("0" turns it off); without --metrics-secure a loopback address only`)
	fs.BoolVar(&opts.MetricsSecure, "metrics-secure", false,
		"serve metrics over HTTPS, each request authenticated and authorized by the API server (get on /metrics); required on a non-loopback address")
	fs.StringVar(&opts.MetricsCertDir, "metrics-cert-dir", "", "directory with tls.crt and tls.key for --metrics-secure (reloaded when they change; empty: a self-signed certificate)")
	fs.StringVar(&opts.HealthAddr, "health-probe-bind-address", ":8081", `health probe listen address ("0" turns it off)`)
	fs.StringVar(&opts.PprofAddr, "pprof-bind-address", "", `net/http/pprof listen address (empty: off)`)
	fs.BoolVar(&opts.LeaderElection, "leader-elect", false, "elect a leader among controller replicas")
	fs.StringVar(&opts.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader election lease")
	fs.StringVar(&opts.NB.Address, "ovn-nb-addr", "", `OVN northbound DB ("tcp:ip:6641", "ssl:ip:6641", "unix:/path", comma-separated for a cluster); empty: VIP routes are not written`)
	fs.StringVar(&cf.tlsFiles.CertFile, "ovn-nb-cert", "", "client certificate for an ssl: NB address")
	fs.StringVar(&cf.tlsFiles.KeyFile, "ovn-nb-key", "", "client key for an ssl: NB address")
	fs.StringVar(&cf.tlsFiles.CAFile, "ovn-nb-ca", "", "CA certificate for an ssl: NB address")
	fs.IntVar(&opts.GatewayWorkers, "gateway-workers", controller.DefaultGatewayWorkers, "how many gateways are synced at once (one gateway is never synced twice at once)")
	fs.DurationVar(&opts.MinSyncInterval, "min-sync-interval", controller.DefaultMinSyncInterval, "least time between two syncs of one gateway: bursts of changes are coalesced, a lone change is not delayed")
	fs.DurationVar(&opts.SyncStaleAfter, "sync-stale-after", controller.DefaultSyncStaleAfter,
		"/readyz fails while a gateway has changes that no sync applied for longer than this (a gateway where nothing changed is never stale); 0: off")
	fs.StringVar(&opts.StatusNamespace, "status-namespace", defaultStatusNamespace(),
		"namespace where the leader publishes what the controller runs (version, gates, flags) and what it knows of each gateway, ConfigMap "+status.ConfigMapName+
			", for 'kubectl vpcgw'; default: $POD_NAMESPACE, else "+status.DefaultNamespace+`; "" turns it off`)
	cf.logging.Register(fs)
}

// complete sets what the parsed flags imply in opts beyond their own fields.
func (cf *controllerFlags) complete(opts *controller.Options) {
	opts.StatusHolder = statusHolder()
	opts.BackendPick = cf.backendPick
	if opts.AgentKeepalive == 0 {
		opts.AgentKeepalive = -1 // Options: negative is off, 0 the default
	}
	if opts.SyncStaleAfter == 0 {
		opts.SyncStaleAfter = -1 // Options: negative is off, 0 the default
	}
	if cf.tlsFiles != (ovn.TLSFiles{}) {
		tlsFiles := cf.tlsFiles
		opts.NB.TLS = &tlsFiles
	}
}

// restConfig loads the API configuration: from kubeconfig when it is set, else in-cluster or
// $KUBECONFIG.
func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		if err := os.Setenv("KUBECONFIG", kubeconfig); err != nil {
			return nil, err
		}
	}
	cfg, err := config.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	return cfg, nil
}

// dialer is how the controller reaches the gateway agents (--transport).
func (cf *controllerFlags) dialer(fs *flag.FlagSet, cfg *rest.Config, log logr.Logger) (transport.Dialer, error) {
	argv := strings.Fields(cf.agentCommand)
	if len(argv) == 0 {
		return nil, errors.New("--agent-command is empty")
	}
	agentArgs, err := cf.agentArgs()
	if err != nil {
		return nil, err
	}
	switch cf.transport {
	case "exec":
		return cf.execDialer(cfg, append(argv, agentArgs...), log)
	case "local":
		return localDialer(fs, cfg, argv, agentArgs, log)
	}
	return nil, fmt.Errorf("unknown --transport %q (supported: exec, local)", cf.transport)
}

// agentArgs are the agent flags that controller flags set. The default pick adds none, so that
// an agent the gateway image has (empty --agent-binaries) need not know --pick.
func (cf *controllerFlags) agentArgs() ([]string, error) {
	switch cf.backendPick {
	case "hash":
		return nil, nil
	case "random":
		return []string{"--pick=random"}, nil
	}
	return nil, fmt.Errorf("--backend-pick=%q: want hash or random", cf.backendPick)
}

// execDialer runs argv in the gateway pods' agent container through the exec API, after copying
// the agent build into it when --agent-binaries names a directory.
func (cf *controllerFlags) execDialer(cfg *rest.Config, argv []string, log logr.Logger) (transport.Dialer, error) {
	execOpts := []transport.ExecOption{transport.WithExecContainer(cf.agentContainer), transport.WithExecCommand(argv...)}
	if cf.agentBinaries != "" {
		bins, err := transport.LoadAgentBinaries(cf.agentBinaries)
		if err != nil {
			return nil, fmt.Errorf("--agent-binaries: %w (empty --agent-binaries runs an agent the gateway image has)", err)
		}
		log.Info("agent delivery on", "dir", cf.agentBinaries, "archs", bins.Archs())
		execOpts = append(execOpts, transport.WithAgentDelivery(bins))
	}
	d, err := transport.NewExec(cfg, log.WithName("transport"), execOpts...)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// localDialer runs argv and agentArgs under 'ip netns exec' in the gateway pods' network
// namespaces; without --agent-command, the agent beside this binary.
func localDialer(fs *flag.FlagSet, cfg *rest.Config, argv, agentArgs []string, log logr.Logger) (transport.Dialer, error) {
	if !flagSet(fs, "agent-command") {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("finding own executable for the local transport: %w", err)
		}
		argv = []string{filepath.Join(filepath.Dir(exe), transport.DefaultAgentBinary)}
	}
	argv = append(argv, agentArgs...)
	sch, err := scheme.New()
	if err != nil {
		return nil, err
	}
	pods, err := client.New(cfg, client.Options{Scheme: sch})
	if err != nil {
		return nil, fmt.Errorf("API client for the local transport: %w", err)
	}
	return &transport.LocalNetns{AgentCommand: argv, Netns: transport.NetnsFromPods(pods), Log: log.WithName("transport")}, nil
}

// flagSet reports whether the command line set the flag.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// defaultStatusNamespace is the controller's own namespace (the chart sets POD_NAMESPACE from the
// downward API), or vpcgw-system.
func defaultStatusNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	return status.DefaultNamespace
}

// statusHolder names this controller in its published status: its pod (POD_NAME from the
// downward API, else the host name, which is the pod's name in a cluster).
func statusHolder() string {
	if n := os.Getenv("POD_NAME"); n != "" {
		return n
	}
	h, _ := os.Hostname()
	return h
}
