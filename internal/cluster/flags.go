package cluster

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/vpcgw/vpcgw/internal/labbin"
)

// LabFlags are the flags every vpcgw-lab subcommand that brings the lab up shares: where the
// envtest binaries, kube-ovn and vpcgw's own binaries are, and -v.
type LabFlags struct {
	Assets, KubeOVN string
	Bins            labbin.Binaries
	Verbose         bool
	// Make names the make target that sets the directories, for the error that they are missing.
	Make string
}

// Register adds the flags to fs, with defaults from the environment and the binaries beside the
// running executable.
func (f *LabFlags) Register(fs *flag.FlagSet) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	f.Bins = labbin.Beside(self)
	fs.StringVar(&f.Assets, "assets", os.Getenv("KUBEBUILDER_ASSETS"), "directory with kube-apiserver, etcd, kube-controller-manager (and kubectl)")
	fs.StringVar(&f.KubeOVN, "kube-ovn", os.Getenv("VPCGW_KUBEOVN"), "directory with kube-ovn-controller v1.16.2 and its CRDs, OVN schemas and gateway script (make kubeovn)")
	fs.StringVar(&f.Bins.Vpcgw, "vpcgw", f.Bins.Vpcgw, "the vpcgw binary (controller and webhook processes)")
	fs.StringVar(&f.Bins.Agent, "agent", f.Bins.Agent, "the vpcgw-agent binary (run in kube-ovn's gateway container)")
	fs.BoolVar(&f.Verbose, "v", false, "show the components' logs on stderr")
	return nil
}

// Check verifies the parsed flags: both directories given, the binaries there (made absolute).
func (f *LabFlags) Check() error {
	if f.Assets == "" || f.KubeOVN == "" {
		return errors.New("--assets (or $KUBEBUILDER_ASSETS) and --kube-ovn (or $VPCGW_KUBEOVN) are required; `make " + f.Make + "` sets both")
	}
	bins, err := f.Bins.Abs()
	if err != nil {
		return err
	}
	f.Bins = bins
	return f.Bins.Check()
}

// Setup makes the process end through ctx on SIGHUP, SIGINT and SIGTERM (and ignore SIGPIPE: a
// closed output pipe must not kill it with its namespaces and processes left behind), and sets
// the components' logger (controller-runtime's and klog's), on stderr with -v, else discarded.
func (f *LabFlags) Setup(ctx context.Context) (context.Context, context.CancelFunc, logr.Logger) {
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGHUP, os.Interrupt, syscall.SIGTERM)
	logOut := io.Discard
	if f.Verbose {
		logOut = os.Stderr
	}
	components := zap.New(zap.WriteTo(logOut), zap.UseDevMode(true))
	ctrl.SetLogger(components)
	// client-go's and the streaming server's klog output (e.g. kube-ovn's execs refused while
	// the lab node stops) are the components' logs too.
	klog.SetLogger(components)
	return ctx, stop, components
}
