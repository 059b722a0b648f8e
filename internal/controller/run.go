package controller

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	"github.com/vpcgw/vpcgw/internal/transport"
)

// Options configure one controller process.
type Options struct {
	Flags  Flags
	Dialer transport.Dialer
	// MetricsAddr and HealthAddr are listen addresses; "0" turns the server off.
	MetricsAddr             string
	HealthAddr              string
	LeaderElection          bool
	LeaderElectionNamespace string
}

// Scheme knows the Kubernetes built-ins and kube-ovn's types.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := kubeovnv1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// Run starts the controller and blocks until ctx ends.
func Run(ctx context.Context, cfg *rest.Config, opts Options, log logr.Logger) error {
	if err := opts.Flags.Validate(); err != nil {
		return err
	}
	scheme, err := Scheme()
	if err != nil {
		return fmt.Errorf("building scheme: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Logger:                  log,
		Cache:                   CacheOptions(),
		Metrics:                 metricsserver.Options{BindAddress: defaultAddr(opts.MetricsAddr)},
		HealthProbeBindAddress:  defaultAddr(opts.HealthAddr),
		LeaderElection:          opts.LeaderElection,
		LeaderElectionID:        "vpcgw-controller",
		LeaderElectionNamespace: opts.LeaderElectionNamespace,
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	r := &GatewayReconciler{
		Client:   mgr.GetClient(),
		Recorder: mgr.GetEventRecorder("vpcgw-controller"),
		Flags:    opts.Flags,
		Dialer:   opts.Dialer,
		Log:      log.WithName("gateway"),
	}
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		return err
	}
	log.Info("starting controller", "enableGwNftableLbSvc", opts.Flags.EnableGwNftableLbSvc,
		"enableGwNftableSvcClusterIP", opts.Flags.EnableGwNftableSvcClusterIP)
	return mgr.Start(ctx)
}

func defaultAddr(a string) string {
	if a == "" {
		return "0"
	}
	return a
}
