package cluster_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/vpcgw/vpcgw/internal/cluster"
	"github.com/vpcgw/vpcgw/internal/cluster/clustertest"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

func TestMain(m *testing.M) {
	os.Exit(clustertest.Main(m, nil))
}

// startCluster brings the whole lab cluster up, or skips (through testutil) when this machine
// cannot run it.
func startCluster(t *testing.T, opts cluster.Options) *cluster.Cluster {
	t.Helper()
	base, skip, err := clustertest.Options()
	if skip != "" {
		testutil.Skip(t, skip)
	}
	if err != nil {
		t.Fatal(err)
	}
	opts.Exe, opts.AssetsDir, opts.KubeOVNDir, opts.Log = base.Exe, base.AssetsDir, base.KubeOVNDir, base.Log
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
