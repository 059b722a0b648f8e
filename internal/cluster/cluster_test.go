package cluster_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/vpcgw/vpcgw/internal/cluster"
	"github.com/vpcgw/vpcgw/internal/kcm"
	"github.com/vpcgw/vpcgw/internal/kubeovnrun"
	"github.com/vpcgw/vpcgw/internal/labnode"
	"github.com/vpcgw/vpcgw/internal/netlab"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

var (
	exe      string
	buildErr error
)

func TestMain(m *testing.M) {
	// The lab node runs containers and execs by re-executing this binary as its helper.
	if labnode.MaybeRunExecHelper() {
		return
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "vcl-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	exe = filepath.Join(dir, "vpcgw")
	build := exec.Command("go", "build", "-o", exe, "github.com/vpcgw/vpcgw/cmd/vpcgw")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	buildErr = build.Run()
	return m.Run()
}

func logger() logr.Logger {
	if os.Getenv("VPCGW_TEST_LOGS") == "1" {
		return zap.New(zap.UseDevMode(true))
	}
	return logr.Discard()
}

// startCluster brings the whole lab cluster up, or skips (through testutil) when this machine
// cannot run it.
func startCluster(t *testing.T, opts cluster.Options) *cluster.Cluster {
	t.Helper()
	if err := netlab.Available(); err != nil {
		testutil.Skip(t, err.Error())
	}
	assets, missing := testutil.EnvtestAssets("kube-apiserver", "etcd", kcm.Binary)
	if missing != "" {
		testutil.Skip(t, missing)
	}
	kubeOVN, missing := testutil.KubeOVNAssets(append(slices.Clone(kubeovnrun.AssetFiles), "nat-gateway.sh")...)
	if missing != "" {
		testutil.Skip(t, missing)
	}
	if buildErr != nil {
		t.Fatalf("building vpcgw: %v", buildErr)
	}
	opts.Exe, opts.AssetsDir, opts.KubeOVNDir, opts.Log = exe, assets, kubeOVN, logger()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, opts)
	if err != nil {
		t.Fatalf("starting the lab cluster: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("VPCGW_TEST_LOGS") == "1" {
			t.Log(c.Logs())
		}
		if err := c.Stop(); err != nil {
			t.Errorf("stopping the lab cluster: %v", err)
		}
	})
	return c
}

// covers: O1, K5
func TestClusterServesDemo(t *testing.T) {
	c := startCluster(t, cluster.Options{})
	ctx := context.Background()
	ip, err := c.WaitIngress(ctx, cluster.DemoNamespace, cluster.DemoService, 90*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ip != cluster.EIPAddress {
		t.Fatalf("EXTERNAL-IP %s, want the EIP %s", ip, cluster.EIPAddress)
	}
	if err := c.WaitReachable(ctx, c.ExternalClient(), "tcp", ip+":80", 30*time.Second); err != nil {
		t.Fatal(err)
	}
}
