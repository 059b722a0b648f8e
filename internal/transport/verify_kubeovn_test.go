// covers: N5 (the owner-chain check accepts the gateway Pod the real kube-ovn-controller v1.16.2
// and kube-controller-manager make)
package transport

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/vpcgw/vpcgw/internal/kcm"
	"github.com/vpcgw/vpcgw/internal/kubeovnrun"
	"github.com/vpcgw/vpcgw/internal/testutil"
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
	if os.Geteuid() != 0 {
		testutil.Skip(t, "needs root: kube-ovn-controller runs in a private mount namespace")
	}
	for _, bin := range []string{"ovsdb-server", "ovsdb-tool", "ovn-northd", "ovn-nbctl", "ovn-sbctl"} {
		if _, err := exec.LookPath(bin); err != nil {
			testutil.Skip(t, bin+" is not installed (apt-get install -y ovn-central)")
		}
	}
	assets, missing := testutil.EnvtestAssets("kube-apiserver", "etcd", kcm.Binary)
	if missing != "" {
		testutil.Skip(t, missing)
	}
	kubeOVN, missing := testutil.KubeOVNAssets(append(slices.Clone(kubeovnrun.AssetFiles), "VERSION")...)
	if missing != "" {
		testutil.Skip(t, missing)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	kubeovnrun.ConfigureEnvtest(env, kubeOVN, "")
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting the API server: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	k, err := client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := kubeovnrun.InstallCluster(ctx, k, kubeOVN); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "tvk-") // short: unix socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	o, err := kubeovnrun.StartOVN(dir, kubeOVN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Stop)
	const node = "transport-node"
	if err := kubeovnrun.AddNode(ctx, k, o, kubeovnrun.Node{Name: node, Address: "127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	kc, err := kubeovnrun.AdminKubeconfig(env, "cluster-admin")
	if err != nil {
		t.Fatal(err)
	}
	kcmProc, err := kcm.StartWith(assets, kc, dir, kcm.Options{Controllers: kcm.WorkloadControllers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kcmProc.Stop)
	ctrl, err := kubeovnrun.Start(kubeovnrun.Options{
		KubeOVNDir: kubeOVN, Dir: dir, Kubeconfig: kc, NBAddr: o.NBAddr(), SBAddr: o.SBAddr(),
		NodeName: node, ServiceCIDR: kubeovnrun.ServiceCIDR(env),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctrl.Stop()
		if t.Failed() {
			logs := ctrl.Logs()
			t.Logf("kube-ovn-controller output (last 8 KiB):\n%s", logs[max(0, len(logs)-8<<10):])
		}
	})
	if err := ctrl.WaitLeading(ctx, k); err != nil {
		t.Fatal(err)
	}
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
