package kubeovn

// These tests change the shared cluster for good (a gateway Pod replaced, kube-ovn restarted with a
// Vpc gone): they run after the others (Go runs test files in name order).

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/cluster"
	"github.com/vpcgw/vpcgw/internal/controller"
	"github.com/vpcgw/vpcgw/internal/kubeovnrun"
	"github.com/vpcgw/vpcgw/internal/model"
)

// withdrawals watches the demo Service and its ServiceRecord until stop and reports every moment
// something served was withdrawn: ingress emptied, finalizer removed, record deleted.
func withdrawals(t *testing.T, c *cluster.Cluster, stop <-chan struct{}) <-chan []string {
	t.Helper()
	scheme, err := controller.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	wc, err := client.NewWithWatch(c.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	svcW, err := wc.Watch(ctx, &corev1.ServiceList{}, client.InNamespace(cluster.DemoNamespace))
	if err != nil {
		t.Fatal(err)
	}
	recW, err := wc.Watch(ctx, &vpcgwv1alpha1.ServiceRecordList{}, client.MatchingLabels{model.LabelRecordName: cluster.DemoService})
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan []string, 1)
	go func() {
		defer cancel()
		var seen []string
		for {
			select {
			case <-stop:
				svcW.Stop()
				recW.Stop()
				out <- seen
				return
			case ev := <-svcW.ResultChan():
				svc, ok := ev.Object.(*corev1.Service)
				if !ok || svc.Name != cluster.DemoService {
					continue
				}
				if len(svc.Status.LoadBalancer.Ingress) == 0 {
					seen = append(seen, "ingress withdrawn")
				}
				if !slices.Contains(svc.Finalizers, model.Finalizer) {
					seen = append(seen, "finalizer removed")
				}
			case ev := <-recW.ResultChan():
				if ev.Type == watch.Deleted {
					seen = append(seen, "record deleted")
				}
			}
		}
	}()
	return out
}

// A gateway Pod deleted by hand comes back through kube-ovn (its StatefulSet, then init and the
// redo of its EIPs, which kube-ovn marks ready=false meanwhile), and the Service's traffic returns
// without its ingress, record or finalizer being withdrawn on the way.
// covers: K6, K5, L6 (clash C10)
func TestGatewayPodReplaced(t *testing.T) {
	c := lab(t)
	ctx := context.Background()
	var old corev1.Pod
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: kubeovnrun.Namespace, Name: c.GatewayPodName()}, &old); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	seen := withdrawals(t, c, stop)
	redos := len(c.KubeOVN.LogLines("redo eip"))
	if err := c.Client.Delete(ctx, &old); err != nil {
		t.Fatal(err)
	}
	waitGatewayReplaced(t, c, old.UID)
	if err := c.WaitReachable(ctx, c.ExternalClient(), "tcp", cluster.EIPAddress+":80", 60*time.Second); err != nil {
		t.Fatal(err)
	}
	cip := service(t, c, cluster.DemoNamespace, cluster.DemoService).Spec.ClusterIP
	if err := c.WaitReachable(ctx, c.VPCClient(), "tcp", cip+":80", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	close(stop)
	if w := <-seen; len(w) > 0 {
		t.Fatalf("withdrawn while kube-ovn replaced the gateway: %v", w)
	}
	if len(c.KubeOVN.LogLines("redo eip")) <= redos {
		t.Log("kube-ovn logged no EIP redo for the new Pod (the redo may have been folded into init)")
	}
}

// waitGatewayReplaced waits until kube-ovn's new gateway Pod (not of UID old) runs and is
// initialised, and the EIP is Ready again (kube-ovn's redo on the new Pod).
func waitGatewayReplaced(t *testing.T, c *cluster.Cluster, old types.UID) {
	t.Helper()
	eventually(t, 90*time.Second, "kube-ovn's new gateway Pod initialised", func(ctx context.Context) (bool, error) {
		var p corev1.Pod
		if err := c.Client.Get(ctx, client.ObjectKey{Namespace: kubeovnrun.Namespace, Name: c.GatewayPodName()}, &p); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return p.UID != old && p.Status.Phase == corev1.PodRunning && p.Annotations["ovn.kubernetes.io/vpc_nat_gw_init"] == "true", nil
	})
	if err := c.EIPReady(context.Background(), cluster.EIPName, 60*time.Second); err != nil {
		t.Fatalf("kube-ovn's redo of the EIP: %v", err)
	}
}

// kube-ovn-controller's start-up GC deletes the VpcNatGateway of a deleted Vpc. vpcgw's webhook
// would deny that while a Service is bound (W6) and kube-ovn exits when its GC fails; it must be
// admitted, kube-ovn keep running, and vpcgw release the Service of the deleted gateway.
// covers: K7, W6, L5 (clash C9)
func TestKubeOVNGarbageCollectionNotBlocked(t *testing.T) {
	c := lab(t)
	ctx := context.Background()
	objs := []client.Object{
		&kubeovnv1.Vpc{ObjectMeta: metav1.ObjectMeta{Name: "gc-vpc"}, Spec: kubeovnv1.VpcSpec{Namespaces: []string{cluster.DemoNamespace}}},
		&kubeovnv1.Subnet{ObjectMeta: metav1.ObjectMeta{Name: "gc-subnet"}, Spec: kubeovnv1.SubnetSpec{
			Vpc: "gc-vpc", CIDRBlock: "10.78.0.0/24", Gateway: "10.78.0.1", Protocol: "IPv4", Provider: "ovn"}},
		&kubeovnv1.VpcNatGateway{ObjectMeta: metav1.ObjectMeta{Name: "gc-gw"}, Spec: kubeovnv1.VpcNatGatewaySpec{
			Vpc: "gc-vpc", Subnet: "gc-subnet", LanIP: "10.78.0.254", ExternalSubnets: []string{cluster.ExternalSubnetName}}},
	}
	for _, o := range objs {
		if err := c.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "gc-web", Namespace: cluster.DemoNamespace, Annotations: map[string]string{model.AnnotationGateway: "gc-gw"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Selector: map[string]string{"app": cluster.DemoDeployment},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(cluster.BackendPort)}}},
	}
	if err := c.Client.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "vpcgw serves the Service on gc-gw", func(ctx context.Context) (bool, error) {
		var s corev1.Service
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(svc), &s); err != nil {
			return false, err
		}
		return slices.Contains(s.Finalizers, model.Finalizer), nil
	})
	// A user cannot delete the gateway while the Service is bound (W6) ...
	if err := c.Client.Delete(ctx, objs[2]); err == nil || !strings.Contains(err.Error(), "still serves ") {
		t.Fatalf("deleting a bound gateway as a user: %v", err)
	}
	// ... its Vpc goes, and kube-ovn's GC at its next start deletes the gateway.
	for _, o := range []client.Object{objs[1], objs[0]} {
		if err := c.Client.Delete(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 60*time.Second, "the Vpc is gone", func(ctx context.Context) (bool, error) {
		err := c.Client.Get(ctx, client.ObjectKey{Name: "gc-vpc"}, &kubeovnv1.Vpc{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if err := c.KubeOVN.Restart(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "kube-ovn's GC deletes the gateway of the deleted Vpc", func(ctx context.Context) (bool, error) {
		if c.KubeOVN.Exited() {
			t.Fatalf("kube-ovn-controller exited: %v", c.KubeOVN.LogLines("failed to run gc"))
		}
		err := c.Client.Get(ctx, client.ObjectKey{Name: "gc-gw"}, &kubeovnv1.VpcNatGateway{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if err := c.KubeOVN.WaitReady(ctx, c.Client, c.OVN); err != nil {
		t.Fatalf("kube-ovn-controller after its GC: %v", err)
	}
	if ls := c.KubeOVN.LogLines("failed to delete vpc nat gateway"); len(ls) > 0 {
		t.Fatalf("kube-ovn's GC was refused: %v", ls)
	}
	eventually(t, 60*time.Second, "vpcgw releases the Service of the deleted gateway", func(ctx context.Context) (bool, error) {
		var s corev1.Service
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(svc), &s); err != nil {
			return false, err
		}
		var recs vpcgwv1alpha1.ServiceRecordList
		if err := c.Client.List(ctx, &recs, client.MatchingLabels{model.LabelRecordName: "gc-web"}); err != nil {
			return false, err
		}
		return !slices.Contains(s.Finalizers, model.Finalizer) && len(recs.Items) == 0, nil
	})
}
