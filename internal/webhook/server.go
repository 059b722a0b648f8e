package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/cli"
	"github.com/vpcgw/vpcgw/internal/controller/metricsserve"
	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/scheme"
)

// DefaultControllerUser is the controller's service account user name in deploy/.
const DefaultControllerUser = "system:serviceaccount:vpcgw-system:vpcgw-controller"

// DefaultKubeOVNUser is kube-ovn-controller's service account user name in kube-ovn's own install
// (service account ovn in kube-system).
const DefaultKubeOVNUser = "system:serviceaccount:kube-system:ovn"

// Options configure one webhook server process.
type Options struct {
	// Host and Port are where the HTTPS server listens ("" = all addresses; 0 = 9443).
	Host string
	Port int
	// CertDir holds tls.crt and tls.key; both are reloaded when they change (certwatcher).
	CertDir string
	// ControllerUser is the user name of the controller's identity (W4). Required.
	ControllerUser string
	// KubeOVNUser is kube-ovn-controller's user name: its requests are always admitted (SPEC K7:
	// its garbage collection, finalizer removals and Service updates are never blocked).
	KubeOVNUser string
	// HealthAddr and MetricsAddr are listen addresses; "0" or "" turns the server off.
	HealthAddr  string
	MetricsAddr string
	// MetricsSecure and MetricsCertDir serve /metrics as the controller does (metricsserve.Options,
	// SPEC N6): HTTPS, each scrape authenticated and authorized by the API server; without
	// MetricsSecure, MetricsAddr must be a loopback address.
	MetricsSecure  bool
	MetricsCertDir string
	// MaxPortsPerService is the controller's --max-ports-per-service (0: the model's default).
	MaxPortsPerService int
	// ClientCAName, when set, names a CA bundle file in CertDir: the server then requires a client
	// certificate it signs, so that only the API server (configured with a client certificate for
	// the webhook in its AdmissionConfiguration) may call it, not any client that reaches the
	// Service (SPEC N8: a request tells what it was asked about).
	ClientCAName string
}

// CacheOptions restrict what the webhook caches: managed fields are dropped. Every
// IptablesDnatRule is cached, the records and kube-ovn's own (a claim check reads those of one
// EIP through an index instead of two cluster-wide lists per review).
func CacheOptions() cache.Options {
	return cache.Options{DefaultTransform: cache.TransformStripManagedFields()}
}

// NewManager builds a manager that serves the webhook with opts: an HTTPS server with the four
// handlers reading through the manager's cache, health (/healthz) and readiness (/readyz: the
// server is up and the cache is synced) probes. Start it with mgr.Start.
func NewManager(ctx context.Context, cfg *rest.Config, opts Options, log logr.Logger) (manager.Manager, error) {
	if opts.ControllerUser == "" {
		return nil, errors.New("the controller's user name is required (--controller-user): without it nobody could write Service records")
	}
	metrics, err := metricsserve.Options(opts.MetricsAddr, opts.MetricsSecure, opts.MetricsCertDir)
	if err != nil {
		return nil, fmt.Errorf("webhook metrics: %w", err)
	}
	sch, err := scheme.New()
	if err != nil {
		return nil, fmt.Errorf("building scheme: %w", err)
	}
	srv := webhook.NewServer(ServerOptions(opts))
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 sch,
		Logger:                 log,
		Cache:                  CacheOptions(),
		WebhookServer:          srv,
		Metrics:                metrics,
		HealthProbeBindAddress: orOff(opts.HealthAddr),
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	if err := Setup(ctx, mgr, opts); err != nil {
		return nil, err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("webhook", srv.StartedChecker()); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("cache", cacheSynced(mgr.GetCache())); err != nil {
		return nil, err
	}
	return mgr, nil
}

// ServerOptions is the HTTPS server of opts (SPEC N6, W7): the certificate is read from CertDir
// and reloaded when it changes (controller-runtime's certwatcher, since GetCertificate is left
// unset), TLS 1.2 is the least version, and HTTP/2 is off, as kubebuilder scaffolds it (the API
// server speaks HTTP/1.1 to webhooks just as well; HTTP/2's stream handling was the way in for
// CVE-2023-44487 and CVE-2023-39325).
func ServerOptions(opts Options) webhook.Options {
	return webhook.Options{
		Host:         opts.Host,
		Port:         opts.Port,
		CertDir:      opts.CertDir,
		ClientCAName: opts.ClientCAName,
		TLSOpts: []func(*tls.Config){func(c *tls.Config) {
			c.MinVersion = tls.VersionTLS12
			c.NextProtos = []string{"http/1.1"}
		}},
	}
}

// Setup registers the indexes, starts the informers the handlers read (so that the first
// request does not wait for a list) and registers the handlers on the manager's webhook server.
func Setup(ctx context.Context, mgr manager.Manager, opts Options) error {
	if err := IndexFields(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	for _, obj := range []client.Object{&corev1.Service{}, &kubeovnv1.IptablesEIP{}, &kubeovnv1.IptablesDnatRule{}, &kubeovnv1.IptablesFIPRule{},
		&vpcgwv1alpha1.ServiceRecord{}, &kubeovnv1.Subnet{}, &kubeovnv1.VpcNatGateway{}, &kubeovnv1.Vpc{}} {
		if _, err := mgr.GetCache().GetInformer(ctx, obj); err != nil {
			return fmt.Errorf("informer for %T: %w", obj, err)
		}
	}
	h := NewHandlers(mgr.GetCache(), mgr.GetScheme(), opts.ControllerUser)
	h.KubeOVNUser = opts.KubeOVNUser
	h.MaxPortsPerService = opts.MaxPortsPerService
	h.Register(mgr.GetWebhookServer())
	return nil
}

func cacheSynced(c cache.Cache) healthz.Checker {
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), time.Second)
		defer cancel()
		if !c.WaitForCacheSync(ctx) {
			return errors.New("cache not synced")
		}
		return nil
	}
}

func orOff(addr string) string {
	if addr == "" {
		return "0"
	}
	return addr
}

// Main is `vpcgw webhook`: it parses its flags from args and serves until ctx ends.
func Main(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("webhook", flag.ContinueOnError)
	var opts Options
	fs.StringVar(&opts.CertDir, "cert-dir", "/var/run/vpcgw/webhook-certs", "directory with tls.crt and tls.key (reloaded when they change)")
	fs.StringVar(&opts.Host, "host", "", "address to listen on (empty: all)")
	fs.IntVar(&opts.Port, "port", webhook.DefaultPort, "HTTPS port")
	fs.StringVar(&opts.ControllerUser, "controller-user", DefaultControllerUser,
		"user name of the controller's identity: the only user that may write Service records (SPEC W4)")
	fs.StringVar(&opts.KubeOVNUser, "kube-ovn-user", DefaultKubeOVNUser,
		"user name of kube-ovn-controller's identity: its requests are always admitted (SPEC K7); empty: none")
	fs.IntVar(&opts.MaxPortsPerService, "max-ports-per-service", model.DefaultMaxPortsPerService,
		"the controller's --max-ports-per-service: a Service naming a gateway with more TCP/UDP ports is rejected before anything else is read (SPEC N4)")
	fs.StringVar(&opts.ClientCAName, "client-ca-name", "",
		"file in --cert-dir with the CA bundle of the API server's client certificate: when set, every caller must present a certificate it signs (SPEC N8); empty: any caller")
	fs.StringVar(&opts.HealthAddr, "health-probe-bind-address", ":8081", `health probe listen address ("0" turns it off)`)
	fs.StringVar(&opts.MetricsAddr, "metrics-bind-address", "0",
		`metrics listen address ("0" turns it off); without --metrics-secure a loopback address only`)
	fs.BoolVar(&opts.MetricsSecure, "metrics-secure", false,
		"serve metrics over HTTPS, each request authenticated and authorized by the API server (get on /metrics); required on a non-loopback address")
	fs.StringVar(&opts.MetricsCertDir, "metrics-cert-dir", "", "directory with tls.crt and tls.key for --metrics-secure (reloaded when they change; empty: a self-signed certificate)")
	kubeconfig := fs.String("kubeconfig", "", "path to a kubeconfig (default: in-cluster or $KUBECONFIG)")
	var logging cli.Logging
	logging.Register(fs)
	if err := cli.Parse(fs, args, "vpcgw webhook", `Serves vpcgw's admission webhook (SPEC W1-W7): it rejects, with a clear message, the Services,
records, EIPs and gateways that cannot work or would take what another Service holds. It repeats
the controller's rules for a clear answer; the controller enforces them whether or not it runs.`, os.Stdout); err != nil {
		return err
	}
	log, err := logging.Logger()
	if err != nil {
		return err
	}
	if *kubeconfig != "" {
		if err := os.Setenv("KUBECONFIG", *kubeconfig); err != nil {
			return err
		}
	}
	cfg, err := config.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	mgr, err := NewManager(ctx, cfg, opts, log.WithName("webhook"))
	if err != nil {
		return err
	}
	log.Info("starting webhook", "port", opts.Port, "certDir", opts.CertDir, "controllerUser", opts.ControllerUser, "kubeOVNUser", opts.KubeOVNUser)
	return mgr.Start(ctx)
}
