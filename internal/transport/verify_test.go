// covers: N5 (the exec transport starts an agent only in a Pod kube-ovn's gateway workload owns)
package transport

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/vpcgw/vpcgw/internal/gwinstance"
	"github.com/vpcgw/vpcgw/internal/kcm"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

// workloadEnv is a real API server with the real kube-controller-manager's workload controllers:
// Pods come from StatefulSets and Deployments with the owner references a cluster sets.
type workloadEnv struct {
	cfg *rest.Config
	cs  kubernetes.Interface
}

var sharedWorkloadEnv testutil.Lazy[*workloadEnv]

func startWorkloadEnv(t *testing.T) *workloadEnv {
	return sharedWorkloadEnv.Get(t, func() (*workloadEnv, string, error) {
		assets, missing := testutil.EnvtestAssets("kube-apiserver", "etcd", kcm.Binary)
		if missing != "" {
			return nil, missing, nil
		}
		env := &envtest.Environment{BinaryAssetsDirectory: assets}
		cfg, err := env.Start()
		if err != nil {
			return nil, "", err
		}
		stops = append(stops, func() { _ = env.Stop() })
		user, err := env.AddUser(envtest.User{Name: "kcm", Groups: []string{"system:masters"}}, nil)
		if err != nil {
			return nil, "", err
		}
		kc, err := user.KubeConfig()
		if err != nil {
			return nil, "", err
		}
		dir, err := os.MkdirTemp("", "vpcgw-transport-kcm-")
		if err != nil {
			return nil, "", err
		}
		proc, err := kcm.StartWith(assets, kc, dir, kcm.Options{Controllers: kcm.WorkloadControllers})
		if err != nil {
			return nil, "", err
		}
		stops = append(stops, proc.Stop, func() { _ = os.RemoveAll(dir) })
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, "", err
		}
		return &workloadEnv{cfg: cfg, cs: cs}, "", nil
	})
}

// stops are run by TestMain after the tests (exec_main_test.go).
var stops []func()

// kubeOVNLabels are the labels kube-ovn v1.16.2 puts on a gateway's StatefulSet, its selector and
// its Pod template (pkg/util/vpc_nat_gateway.go GenNatGwLabels).
func kubeOVNLabels(gw string) map[string]string {
	return map[string]string{"app": "vpc-nat-gw-" + gw, "ovn.kubernetes.io/vpc-nat-gw": "true"}
}

// kubeOVNTemplate is a gateway Pod template as kube-ovn v1.16.2 makes it (genNatGwStatefulSet):
// its labels, the vpc_nat_gw annotation and the vpc-nat-gw container.
func kubeOVNTemplate(gw string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: kubeOVNLabels(gw), Annotations: map[string]string{"ovn.kubernetes.io/vpc_nat_gw": gw}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers:                    []corev1.Container{{Name: "vpc-nat-gw", Image: "docker.io/kubeovn/vpc-nat-gateway:v1.16.2", Command: []string{"sleep", "infinity"}}},
		},
	}
}

func waitPod(t *testing.T, cs kubernetes.Interface, ns string, selector map[string]string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	sel := metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: selector})
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil || len(pods.Items) == 0 {
			return false, nil
		}
		pod = &pods.Items[0]
		return metav1.GetControllerOf(pod) != nil, nil
	})
	if err != nil {
		t.Fatalf("kube-controller-manager made no Pod %v in %s: %v", selector, ns, err)
	}
	return pod
}

func createNS(t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func inst(pod *corev1.Pod, gw, workloadNS string) Instance {
	return Instance{Gateway: gw, Namespace: pod.Namespace, Pod: pod.Name, UID: pod.UID, WorkloadNamespace: workloadNS}
}

// covers: N5
func TestOwnerChainVerifier(t *testing.T) {
	e := startWorkloadEnv(t)
	ctx := context.Background()
	cs := e.cs
	const gwNS, tenant = "verify-gw", "verify-tenant"
	createNS(t, cs, gwNS)
	createNS(t, cs, tenant)
	v := &OwnerChainVerifier{Client: cs}

	// kube-ovn's gateway: its StatefulSet as kube-ovn builds it, its Pod as the real StatefulSet
	// controller makes it.
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "vpc-nat-gw-gw1", Namespace: gwNS, Labels: kubeOVNLabels("gw1")},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: kubeOVNLabels("gw1")},
			Template: kubeOVNTemplate("gw1")},
	}
	if _, err := cs.AppsV1().StatefulSets(gwNS).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gwPod := waitPod(t, cs, gwNS, kubeOVNLabels("gw1"))
	if gwPod.Name != "vpc-nat-gw-gw1-0" {
		t.Fatalf("StatefulSet Pod %s, want vpc-nat-gw-gw1-0", gwPod.Name)
	}

	// kube-ovn master with spec.replicas > 1: a Deployment of the same name, Pods through a ReplicaSet.
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "vpc-nat-gw-gw2", Namespace: gwNS, Labels: kubeOVNLabels("gw2")},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: kubeOVNLabels("gw2")},
			Template: kubeOVNTemplate("gw2")},
	}
	if _, err := cs.AppsV1().Deployments(gwNS).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	depPod := waitPod(t, cs, gwNS, kubeOVNLabels("gw2"))

	// A tenant's look-alike: a StatefulSet of the same name and labels in its own namespace,
	// whose Pod has the same owner chain there.
	lookalike := sts.DeepCopy()
	lookalike.Namespace = tenant
	if _, err := cs.AppsV1().StatefulSets(tenant).Create(ctx, lookalike, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tenantPod := waitPod(t, cs, tenant, kubeOVNLabels("gw1"))

	// Pods that only carry the gateway's labels, in the gateway's namespace.
	forged := func(name string, owners []metav1.OwnerReference) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: gwNS, Labels: kubeOVNLabels("gw1"), OwnerReferences: owners},
			Spec: kubeOVNTemplate("gw1").Spec}
		p, err := cs.CoreV1().Pods(gwNS).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	noOwner := forged("labelled-only", nil)

	for _, tc := range []struct {
		name string
		inst Instance
		want string // "" accepted, else a fragment of the refusal
	}{
		{"kube-ovn's StatefulSet Pod", inst(gwPod, "gw1", gwNS), ""},
		{"kube-ovn master's Deployment Pod", inst(depPod, "gw2", gwNS), ""},
		{"a labelled Pod without an owner", inst(noOwner, "gw1", gwNS), "has no controller"},
		{"a tenant's look-alike StatefulSet Pod", inst(tenantPod, "gw1", gwNS), "not in verify-gw"},
		{"kube-ovn's Pod dialled for another gateway", inst(gwPod, "gw2", gwNS), "labels"},
		{"kube-ovn's Pod under another prefix", func() Instance { i := inst(gwPod, "gw1", gwNS); i.Workload = "custom-gw1"; return i }(), "labels"},
		{"a replaced Pod (another UID)", func() Instance { i := inst(gwPod, "gw1", gwNS); i.UID = "old"; return i }(), "was replaced"},
		{"no workload namespace", inst(gwPod, "gw1", ""), "names no namespace"},
	} {
		err := v.VerifyPod(ctx, tc.inst, DefaultExecContainer)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want != "" && (!errors.Is(err, ErrNotAGatewayPod) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want a refusal (ErrNotAGatewayPod) saying %q", tc.name, err, tc.want)
		case tc.want != "":
			t.Logf("%s: %v", tc.name, err)
		}
	}
	if err := v.VerifyPod(ctx, inst(gwPod, "gw1", gwNS), "other-container"); !errors.Is(err, ErrNotAGatewayPod) {
		t.Errorf("kube-ovn's Pod without the agent's container: %v, want a refusal", err)
	}

	// Owner references a user may write on a Pod of their own: to another StatefulSet, or to the
	// gateway's by name with another UID. In a cluster the StatefulSet controller releases the
	// first and the garbage collector deletes the second within moments, so they are checked on
	// copies of the real objects through a fake clientset, which holds them still.
	realSts, err := cs.AppsV1().StatefulSets(gwNS).Get(ctx, "vpc-nat-gw-gw1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	web := realSts.DeepCopy()
	web.Name, web.UID, web.Labels = "web", "web-uid", map[string]string{"app": "web"}
	for _, tc := range []struct {
		name  string
		owner metav1.OwnerReference
		want  string
	}{
		{"a labelled Pod controlled by another StatefulSet", metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "web", UID: "web-uid", Controller: ptr.To(true)}, "not vpc-nat-gw-gw1"},
		{"an owner reference to the gateway's StatefulSet with another UID", metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "vpc-nat-gw-gw1", UID: "forged", Controller: ptr.To(true)}, "has UID"},
		{"a labelled Pod controlled by a Job", metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: "vpc-nat-gw-gw1", UID: "job", Controller: ptr.To(true)}, "not kube-ovn's StatefulSet"},
	} {
		p := gwPod.DeepCopy()
		p.Name, p.UID, p.OwnerReferences = "forged-owner", "forged-pod", []metav1.OwnerReference{tc.owner}
		fv := &OwnerChainVerifier{Client: fake.NewClientset(realSts, web, p)}
		err := fv.VerifyPod(ctx, inst(p, "gw1", gwNS), DefaultExecContainer)
		if !errors.Is(err, ErrNotAGatewayPod) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a refusal saying %q", tc.name, err, tc.want)
		} else {
			t.Logf("%s: %v", tc.name, err)
		}
	}

	// The exec transport asks its verifier before it opens any stream: the forged Pod gets no
	// exec at all; kube-ovn's passes and the dial fails only later (envtest has no kubelet).
	ex, err := NewExec(e.cfg, logr.Discard(), WithExecDialTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ex.Dial(ctx, inst(noOwner, "gw1", gwNS)); !errors.Is(err, ErrNotAGatewayPod) {
		t.Errorf("Exec.Dial into a labelled Pod: %v, want a refusal before any exec", err)
	}
	if _, err := ex.Dial(ctx, inst(gwPod, "gw1", gwNS)); err == nil || errors.Is(err, ErrNotAGatewayPod) {
		t.Errorf("Exec.Dial into kube-ovn's Pod: %v, want it past the check (and failing for want of a kubelet)", err)
	}
}

// covers: N5
// A hostile tenant who may create Pods in the gateway's namespace forges a Pod with kube-ovn's
// labels, the agent's container and an owner reference to the gateway's StatefulSet as it reads
// it. The transport reads the StatefulSet itself before any exec and accepts only one of its
// replicas: controlled (Controller=true) by it, same UID, named "<statefulset>-<ordinal>" with the
// ordinal below spec.replicas (unset: 1) and spelled as the StatefulSet controller spells it.
// Every refusal is ErrNotAGatewayPod with the reason, and kube-ovn's own Pod still passes after.
func TestOwnerChainVerifierRefusesLookAlikeReplicas(t *testing.T) {
	ctx := context.Background()
	const ns = "gw-ns"
	sts := func(replicas *int32) *appsv1.StatefulSet {
		return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "vpc-nat-gw-gw1", Namespace: ns, UID: "sts-uid", Labels: kubeOVNLabels("gw1")},
			Spec: appsv1.StatefulSetSpec{Replicas: replicas, Selector: &metav1.LabelSelector{MatchLabels: kubeOVNLabels("gw1")}, Template: kubeOVNTemplate("gw1")}}
	}
	pod := func(name string, mutate func(*metav1.OwnerReference)) *corev1.Pod {
		ref := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "vpc-nat-gw-gw1", UID: "sts-uid", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
		if mutate != nil {
			mutate(&ref)
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name), Labels: kubeOVNLabels("gw1"),
			OwnerReferences: []metav1.OwnerReference{ref}}, Spec: kubeOVNTemplate("gw1").Spec}
	}
	kubeOVNs := pod("vpc-nat-gw-gw1-0", nil)
	for _, tc := range []struct {
		name     string
		pod      *corev1.Pod
		replicas *int32
		want     string // "" accepted, else a fragment of the refusal
	}{
		{"kube-ovn's Pod", kubeOVNs, ptr.To[int32](1), ""},
		{"kube-ovn's Pod, replicas unset (1)", kubeOVNs, nil, ""},
		{"the last of three replicas", pod("vpc-nat-gw-gw1-2", nil), ptr.To[int32](3), ""},
		{"no controller owner reference", pod("vpc-nat-gw-gw1-1", func(r *metav1.OwnerReference) { r.Controller = nil }), ptr.To[int32](3), "has no controller"},
		{"an owner reference that is not the controller", pod("vpc-nat-gw-gw1-1", func(r *metav1.OwnerReference) { r.Controller = ptr.To(false) }), ptr.To[int32](3), "has no controller"},
		{"owner reference with the wrong UID", pod("vpc-nat-gw-gw1-1", func(r *metav1.OwnerReference) { r.UID = "tenant-uid" }), ptr.To[int32](3), "has UID sts-uid"},
		{"owner reference of another API version", pod("vpc-nat-gw-gw1-1", func(r *metav1.OwnerReference) { r.APIVersion = "apps/v1beta2" }), ptr.To[int32](3), "not kube-ovn's StatefulSet"},
		{"the finding: ordinal 7 of a one-replica StatefulSet", pod("vpc-nat-gw-gw1-7", nil), ptr.To[int32](1), "ordinal 7 is not below the 1 replicas"},
		{"ordinal 1, replicas unset (1)", pod("vpc-nat-gw-gw1-1", nil), nil, "ordinal 1 is not below the 1 replicas"},
		{"ordinal equal to replicas", pod("vpc-nat-gw-gw1-3", nil), ptr.To[int32](3), "ordinal 3 is not below"},
		{"StatefulSet scaled to zero", kubeOVNs, ptr.To[int32](0), "ordinal 0 is not below the 0 replicas"},
		{"ordinal with a leading zero", pod("vpc-nat-gw-gw1-01", nil), ptr.To[int32](3), "no leading zeros"},
		{"ordinal with a letter", pod("vpc-nat-gw-gw1-1a", nil), ptr.To[int32](3), "is not vpc-nat-gw-gw1-<ordinal>"},
		{"ordinal with a sign", pod("vpc-nat-gw-gw1--1", nil), ptr.To[int32](3), "is not vpc-nat-gw-gw1-<ordinal>"},
		{"no ordinal", pod("vpc-nat-gw-gw1-", nil), ptr.To[int32](3), "is not vpc-nat-gw-gw1-<ordinal>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := []runtime.Object{sts(tc.replicas), tc.pod}
			if tc.pod != kubeOVNs {
				objs = append(objs, kubeOVNs)
			}
			v := &OwnerChainVerifier{Client: fake.NewClientset(objs...)}
			err := v.VerifyPod(ctx, inst(tc.pod, "gw1", ns), DefaultExecContainer)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (!errors.Is(err, ErrNotAGatewayPod) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("%v, want a refusal (ErrNotAGatewayPod) saying %q", err, tc.want)
			}
			// Refusing a look-alike costs kube-ovn's own Pod nothing.
			if tc.pod != kubeOVNs && gwinstance.Replicas(sts(tc.replicas)) > 0 {
				if err := v.VerifyPod(ctx, inst(kubeOVNs, "gw1", ns), DefaultExecContainer); err != nil {
					t.Errorf("kube-ovn's Pod after the look-alike: %v", err)
				}
			}
		})
	}

	// Without the StatefulSet nothing is accepted: the error says which object is missing.
	v := &OwnerChainVerifier{Client: fake.NewClientset(kubeOVNs)}
	if err := v.VerifyPod(ctx, inst(kubeOVNs, "gw1", ns), DefaultExecContainer); err == nil || !strings.Contains(err.Error(), "its StatefulSet") {
		t.Errorf("a Pod whose StatefulSet is gone: %v, want an error naming its StatefulSet", err)
	}
}
