// covers: O1 (the harness of the K tests: the lab cluster beside the real kube-ovn-controller)

// Package kubeovn proves vpcgw beside the real kube-ovn-controller v1.16.2 (SPEC K1-K9): every test
// here runs against the lab cluster (internal/cluster) with kube-ovn-controller, its CRDs, OVN
// NB/SB and northd, kube-controller-manager, the lab node playing the kubelet, and vpcgw's
// controller and webhook as their own processes under the shipped RBAC. Each test names the clash
// of ../shared/reference/kubeovn-interop.md it proves fixed.
package kubeovn

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vpcgw/vpcgw/internal/cluster"
	"github.com/vpcgw/vpcgw/internal/cluster/clustertest"
	"github.com/vpcgw/vpcgw/internal/netlab"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

// shared is the lab cluster most tests use (kube-ovn with --enable-lb=false, vpcgw with both
// gates, the demo served); tests run in file order and the destructive ones come last.
var shared testutil.Lazy[*cluster.Cluster]

func TestMain(m *testing.M) {
	os.Exit(clustertest.Main(m, func() error {
		if c := shared.Value(); c != nil {
			if err := c.Stop(); err != nil {
				return fmt.Errorf("stopping the lab cluster: %w", err)
			}
		}
		return nil
	}))
}

func startCluster(opts cluster.Options) (*cluster.Cluster, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	if err := c.WaitSettled(ctx, 2*time.Minute); err != nil {
		_ = c.Stop()
		return nil, err
	}
	return c, nil
}

// lab returns the shared lab cluster, started on first use.
func lab(t *testing.T) *cluster.Cluster {
	t.Helper()
	c := shared.Get(t, func() (*cluster.Cluster, string, error) {
		opts, skip, err := clustertest.Options()
		if skip != "" || err != nil {
			return nil, skip, err
		}
		c, err := startCluster(opts)
		return c, "", err
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(tail(c.Logs(), 150))
		}
	})
	// Every test starts from a settled lab, never from the previous test's aftermath (a gateway
	// kube-ovn is still re-initialising, a controller still opening its streams).
	if err := c.WaitSettled(context.Background(), 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	return c
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func service(t *testing.T, c *cluster.Cluster, ns, name string) *corev1.Service {
	t.Helper()
	var svc corev1.Service
	if err := c.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &svc); err != nil {
		t.Fatal(err)
	}
	return &svc
}

// inGateway runs argv in the gateway Pod's network namespace (what `kubectl exec` into
// kube-ovn's container would show).
func inGateway(t *testing.T, c *cluster.Cluster, argv ...string) string {
	t.Helper()
	ns, ok := c.GatewayNetns()
	if !ok {
		t.Fatal("the gateway Pod runs in no namespace")
	}
	out, err := netlab.Run(append([]string{"ip", "netns", "exec", ns}, argv...)...)
	if err != nil {
		t.Fatalf("%v in the gateway: %v", argv, err)
	}
	return string(out)
}
