// Package clustertest is what the tests that run the lab cluster share: the binaries (vpcgw,
// vpcgw-agent, vpcgw-lab) built once per test binary, the lab node's helper entry point, and the
// options (or what this machine lacks).
package clustertest

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/vpcgw/vpcgw/internal/cluster"
	"github.com/vpcgw/vpcgw/internal/kcm"
	"github.com/vpcgw/vpcgw/internal/kubeovnrun"
	"github.com/vpcgw/vpcgw/internal/labbin"
	"github.com/vpcgw/vpcgw/internal/labnode"
	"github.com/vpcgw/vpcgw/internal/netlab"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

var (
	bins     labbin.Binaries
	buildErr error
)

// Main is the test binary's TestMain body: the lab node runs containers and execs by
// re-executing this binary as its helper; otherwise the binaries are built and the tests run.
// after runs once the tests have (to stop a shared cluster); its error fails the run.
func Main(m *testing.M, after func() error) int {
	if labnode.MaybeRunExecHelper() {
		return 0
	}
	dir, err := os.MkdirTemp("", "vcl-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }() // a temporary directory of binaries; best effort
	bins, buildErr = labbin.Build(context.Background(), dir)
	// The in-process components (envtest's API server start) log through controller-runtime's
	// global logger: set it, to the same place as the lab's, so that its first use prints no
	// "log.SetLogger(...) was never called" stack into the tests' output.
	ctrllog.SetLogger(Logger())
	code := m.Run()
	if after != nil {
		if err := after(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	return code
}

// Options are the lab cluster's options for this machine, or why it cannot run one (a skip
// reason for testutil.Skip) or an error (vpcgw did not build).
func Options() (opts cluster.Options, skip string, err error) {
	if err := netlab.Available(); err != nil {
		return opts, err.Error(), nil
	}
	assets, missing := testutil.EnvtestAssets("kube-apiserver", "etcd", kcm.Binary)
	if missing != "" {
		return opts, missing, nil
	}
	kubeOVN, missing := testutil.KubeOVNAssets(append(slices.Clone(kubeovnrun.AssetFiles), "nat-gateway.sh")...)
	if missing != "" {
		return opts, missing, nil
	}
	if buildErr != nil {
		return opts, "", fmt.Errorf("building the binaries: %w", buildErr)
	}
	return cluster.Options{Bins: bins, AssetsDir: assets, KubeOVNDir: kubeOVN, Log: Logger()}, "", nil
}

// Logger logs the components when VPCGW_TEST_LOGS=1.
func Logger() logr.Logger {
	if os.Getenv("VPCGW_TEST_LOGS") == "1" {
		return zap.New(zap.UseDevMode(true))
	}
	return logr.Discard()
}
