package cluster_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	opts.Bins, opts.AssetsDir, opts.KubeOVNDir, opts.Log = base.Bins, base.AssetsDir, base.KubeOVNDir, base.Log
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

// covers: O1, K5, N5
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

	// The controller served the demo (finalizer, ingress) bounded by the shipped admission policy
	// (SPEC N5): as its user it may not change anything else of the Service.
	as := rest.CopyConfig(c.Config)
	as.Impersonate = rest.ImpersonationConfig{UserName: cluster.ControllerUser, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}}
	ctrl, err := client.New(as, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.DemoNamespace, Name: cluster.DemoService}}
	// The API server picks policies up asynchronously; the lab applied it before the controller
	// started, so this normally holds at once.
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		last = ctrl.Patch(ctx, svc, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"example.com/x":"y"}}}`)), client.DryRunAll)
		return apierrors.IsForbidden(last) && strings.Contains(last.Error(), "the vpcgw controller may only change a Service's finalizers"), nil
	}); err != nil {
		t.Errorf("the controller's user changing the demo Service's annotations: %v (%v), want the admission policy's refusal", last, err)
	}
}
