// covers: N5 (the owner-chain check accepts the gateway Pod the real kube-ovn-controller v1.16.2
// and kube-controller-manager make)
package transport

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/vpcgw/vpcgw/internal/kubeovnrun"
	"github.com/vpcgw/vpcgw/internal/kubeovnrun/kubeovntest"
)

func kubeOVNObj(kind, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion("kubeovn.io/v1")
	u.SetKind(kind)
	u.SetName(name)
	return u
}

// covers: N5
func TestOwnerChainVerifierAcceptsKubeOVNsPod(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const node = "transport-node"
	e := kubeovntest.Start(ctx, t, node)
	k, cfg := e.Client, e.Config
	const gw = "tv-gw"
	for _, obj := range []*unstructured.Unstructured{
		kubeOVNObj("Vpc", "tv-vpc", map[string]any{}),
		kubeOVNObj("Subnet", "tv-subnet", map[string]any{"vpc": "tv-vpc", "cidrBlock": "10.78.1.0/24", "gateway": "10.78.1.1", "protocol": "IPv4", "namespaces": []any{}}),
		kubeOVNObj("Subnet", kubeovnrun.ExternalNetwork, map[string]any{"cidrBlock": "172.31.101.0/24", "gateway": "172.31.101.1", "protocol": "IPv4",
			"provider": kubeovnrun.ExternalSubnetProvider, "excludeIps": []any{"172.31.101.1..172.31.101.9"}}),
		kubeOVNObj("VpcNatGateway", gw, map[string]any{"vpc": "tv-vpc", "subnet": "tv-subnet", "lanIp": "10.78.1.254", "externalSubnets": []any{kubeovnrun.ExternalNetwork}}),
	} {
		if err := k.Create(ctx, obj); err != nil {
			t.Fatalf("creating %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var pod *corev1.Pod
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(kubeovnrun.Namespace).Get(ctx, "vpc-nat-gw-"+gw+"-0", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		pod = p
		return true, nil
	}); err != nil {
		t.Fatalf("kube-ovn-controller and kube-controller-manager made no gateway Pod: %v", err)
	}
	t.Logf("kube-ovn's gateway Pod: labels %v, owners %+v", pod.Labels, pod.OwnerReferences)

	v := &OwnerChainVerifier{Client: cs}
	ok := Instance{Gateway: gw, Namespace: pod.Namespace, Pod: pod.Name, UID: pod.UID, WorkloadNamespace: kubeovnrun.Namespace}
	if err := v.VerifyPod(ctx, ok, DefaultExecContainer); err != nil {
		t.Fatalf("kube-ovn's own gateway Pod refused: %v", err)
	}
	// Beside it, a Pod with the same labels and kube-ovn's annotations that kube-ovn did not make.
	forged := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "vpc-nat-gw-" + gw + "-forged", Namespace: kubeovnrun.Namespace,
		Labels: pod.Labels, Annotations: map[string]string{"ovn.kubernetes.io/vpc_nat_gw": gw}},
		Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: ptr.To[int64](0), Containers: []corev1.Container{{Name: DefaultExecContainer, Image: "x"}}}}
	if forged, err = cs.CoreV1().Pods(kubeovnrun.Namespace).Create(ctx, forged, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bad := Instance{Gateway: gw, Namespace: forged.Namespace, Pod: forged.Name, UID: forged.UID, WorkloadNamespace: kubeovnrun.Namespace}
	if err := v.VerifyPod(ctx, bad, DefaultExecContainer); err == nil {
		t.Fatal("a labelled Pod beside kube-ovn's was accepted")
	} else {
		t.Logf("forged Pod: %v", err)
	}
}
