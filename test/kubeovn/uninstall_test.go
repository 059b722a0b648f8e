// covers: O4, K10, T1, T2, V1, N8 (uninstall beside the real kube-ovn-controller leaves nothing of vpcgw's)

package kubeovn

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/cluster"
	"github.com/vpcgw/vpcgw/internal/cluster/clustertest"
	"github.com/vpcgw/vpcgw/internal/dataplane"
	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/netlab"
	"github.com/vpcgw/vpcgw/internal/ovn"
	"github.com/vpcgw/vpcgw/internal/testutil"
	"github.com/vpcgw/vpcgw/internal/transport"
)

// The uninstall as the chart runs it: the demo served (EIP and ClusterIP, VIP routes), the
// controller stopped, `vpcgw release` run as the controller's service account with its flags (the
// pre-delete hook), then the CRD deleted (what helm uninstall deletes with crds.keep=false). In
// its own lab: it ends what it serves.
func TestUninstallLeavesNothing(t *testing.T) {
	opts, skip, err := clustertest.Options()
	if skip != "" {
		testutil.Skip(t, skip)
	}
	if err != nil {
		t.Fatal(err)
	}
	c, err := startCluster(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(tail(c.Logs(), 150))
		}
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	nb, err := ovn.NewWriter(ctx, ovn.Config{Address: c.OVN.NBAddr()}, opts.Log.WithName("test-nb"))
	if err != nil {
		t.Fatal(err)
	}
	defer nb.Close()

	// Served first: what the release must remove is there.
	eventually(t, 90*time.Second, "the demo served with its ClusterIP, records and VIP routes", func(ctx context.Context) (bool, error) {
		pols, err := nb.Policies(ctx, "", "")
		if err != nil {
			return false, err
		}
		var srs vpcgwv1alpha1.ServiceRecordList
		if err := c.Client.List(ctx, &srs); err != nil {
			return false, err
		}
		svc := service(t, c, cluster.DemoNamespace, cluster.DemoService)
		return len(pols) > 0 && len(srs.Items) > 0 && len(svc.Status.LoadBalancer.Ingress) > 0 && model.HasClaimStamp(svc) &&
			strings.Contains(inGateway(t, c, "ip", "-4", "addr", "show", "dev", "lo"), dataplane.VIPLabel), nil
	})
	if nft := inGateway(t, c, "nft", "list", "table", "ip", dataplane.TableName); !strings.Contains(nft, dataplane.OwnedSet) {
		t.Fatalf("the gateway serves without vpcgw's objects:\n%s", nft)
	}
	if out, err := execInGateway(ctx, c, "ls", transport.AgentInstallDir); err != nil || !strings.Contains(out, transport.DefaultAgentBinary+"-") {
		t.Fatalf("no agent delivered into the gateway container: %q, %v", out, err)
	}

	// The hook: the controller stands by, release runs as the controller with its flags. Before
	// it, as a hostile tenant may (review R1): the demo's finalizer stripped by a plain edit, and a
	// look-alike LoadBalancer Service naming the gateway but of another implementation's class,
	// with that implementation's ingress (the webhook refuses a look-alike naming a gateway its
	// namespace may not use; internal/release's TestRelease has that one). Neither stalls the
	// release; the look-alike keeps its ingress.
	c.StopController()
	demo := service(t, c, cluster.DemoNamespace, cluster.DemoService)
	demo.Finalizers = slices.DeleteFunc(demo.Finalizers, func(f string) bool { return f == model.Finalizer })
	if err := c.Client.Update(ctx, demo); err != nil {
		t.Fatal(err)
	}
	lookalike := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.DemoNamespace, Name: "lookalike",
		Annotations: map[string]string{model.AnnotationGateway: cluster.GatewayName, model.AnnotationEIP: cluster.EIPName}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: ptr.To("example.com/other-lb"),
			Ports: []corev1.ServicePort{{Port: 8443, Protocol: corev1.ProtocolTCP}}}}
	if err := c.Client.Create(ctx, lookalike); err != nil {
		t.Fatal(err)
	}
	lookalike.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.7"}}
	if err := c.Client.Status().Update(ctx, lookalike); err != nil {
		t.Fatal(err)
	}
	out, err := c.Release(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("vpcgw release: %s", tail(out, 5))

	assertNothingOfVpcgwInGateway(ctx, t, c, nb)
	assertNothingOfVpcgwOnServices(ctx, t, c, lookalike.Name)
	if got := service(t, c, cluster.DemoNamespace, lookalike.Name).Status.LoadBalancer.Ingress; len(got) != 1 || got[0].IP != "198.51.100.7" {
		t.Errorf("the release wrote another implementation's ingress: %v", got)
	}
	var srs vpcgwv1alpha1.ServiceRecordList
	if err := c.Client.List(ctx, &srs); err != nil || len(srs.Items) > 0 {
		t.Errorf("after release ServiceRecords %d, %v", len(srs.Items), err)
	}

	// What helm uninstall then deletes (crds.keep=false): vpcgw's CRD, never kube-ovn's.
	crd := crdObject("servicerecords.vpcgw.io")
	if err := c.Client.Delete(ctx, crd); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the CRD gone", func(ctx context.Context) (bool, error) {
		err := c.Client.Get(ctx, client.ObjectKeyFromObject(crd), crd)
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if err := c.Client.Get(ctx, client.ObjectKey{Name: "vpc-nat-gateways.kubeovn.io"}, crdObject("")); err != nil {
		t.Errorf("kube-ovn's CRD after the uninstall: %v", err)
	}
}

// crdObject is a CRD as unstructured: the lab's scheme has no apiextensions types.
func crdObject(name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	u.SetName(name)
	return u
}

func hasFinalizer(fs []string) bool {
	for _, f := range fs {
		if f == model.Finalizer {
			return true
		}
	}
	return false
}

// assertNothingOfVpcgwInGateway checks that vpcgw left nothing in the gateway and OVN: no nft
// object of its own (the table was vpcgw's alone), no lo VIP, no agent copy in kube-ovn's
// container, no VIP policy in the NB DB.
func assertNothingOfVpcgwInGateway(ctx context.Context, t *testing.T, c *cluster.Cluster, nb *ovn.Writer) {
	t.Helper()
	ns, _ := c.GatewayNetns()
	if nft, err := netlab.Run("ip", "netns", "exec", ns, "nft", "list", "table", "ip", dataplane.TableName); err == nil {
		for _, obj := range []string{dataplane.OwnedSet, dataplane.VIPSet, dataplane.HairpinChain, "dnat-", dataplane.ServiceMap} {
			if strings.Contains(string(nft), obj) {
				t.Errorf("after release the gateway still has %s:\n%s", obj, nft)
			}
		}
	}
	if lo := inGateway(t, c, "ip", "-4", "addr", "show", "dev", "lo"); strings.Contains(lo, dataplane.VIPLabel) {
		t.Errorf("after release lo still holds VIPs:\n%s", lo)
	}
	if out, err := execInGateway(ctx, c, "ls", transport.AgentInstallDir); err == nil && strings.Contains(out, transport.DefaultAgentBinary) {
		t.Errorf("after release the gateway container still holds the agent: %q", out)
	}
	// What the NB DB holds now, read afresh.
	eventually(t, 30*time.Second, "no VIP policy in the NB DB", func(ctx context.Context) (bool, error) {
		pols, err := nb.Policies(ctx, "", "")
		return err == nil && len(pols) == 0, err
	})
}

// assertNothingOfVpcgwOnServices checks that no Service keeps vpcgw's ingress, finalizer or claim
// stamp.
func assertNothingOfVpcgwOnServices(ctx context.Context, t *testing.T, c *cluster.Cluster, others ...string) {
	t.Helper()
	var svcs corev1.ServiceList
	if err := c.Client.List(ctx, &svcs); err != nil {
		t.Fatal(err)
	}
	for _, svc := range svcs.Items {
		if svc.Annotations[model.AnnotationGateway] == "" || slices.Contains(others, svc.Name) {
			continue // not vpcgw's, or another implementation's Service
		}
		if len(svc.Status.LoadBalancer.Ingress) > 0 || hasFinalizer(svc.Finalizers) || model.HasClaimStamp(&svc) {
			t.Errorf("after release Service %s/%s has ingress %v, finalizers %v, conditions %v", svc.Namespace, svc.Name,
				svc.Status.LoadBalancer.Ingress, svc.Finalizers, svc.Status.Conditions)
		}
	}
}
