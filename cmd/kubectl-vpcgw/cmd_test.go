package main

// covers: O2 (the plugin's command layer against a real API server: kubectl's flag placement and
// defaults, -A, --context, -o json|yaml|wide, --help, exit codes, the controller's published
// gates, and what it says when no controller runs)

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/controller"
	"github.com/vpcgw/vpcgw/internal/inspect"
	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/status"
	"github.com/vpcgw/vpcgw/internal/testutil"
	"github.com/vpcgw/vpcgw/internal/transport"
	"github.com/vpcgw/vpcgw/internal/version"
)

var (
	k8s        client.Client
	kubeconfig string // contexts: demo (namespace demo, the current one), other (namespace other), plain (no namespace)
	envSkip    string
)

const (
	gwName   = "gw1"
	eipName  = "eip1"
	eipAddr  = "172.18.0.10"
	lanIP    = "10.0.1.254"
	backend  = "10.0.1.10"
	gwPod    = "vpc-nat-gw-gw1-0"
	ackedGen = 5
)

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	env, _, skip, err := testutil.StartKubeOVNEnvtest()
	if skip != "" {
		envSkip = skip
		return m.Run()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg := env.Config
	defer func() { _ = env.Stop() }()
	scheme, err := controller.Scheme()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if k8s, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, err := os.MkdirTemp("", "kubectl-vpcgw-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }() // a temporary directory: what is left is harmless
	if kubeconfig, err = writeKubeconfig(env, dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := populate(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "creating the test's objects:", err)
		return 1
	}
	return m.Run()
}

// writeKubeconfig writes an admin kubeconfig with three contexts, as kubectl users have them.
func writeKubeconfig(env *envtest.Environment, dir string) (string, error) {
	u, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", err
	}
	data, err := u.KubeConfig()
	if err != nil {
		return "", err
	}
	kc, err := clientcmd.Load(data)
	if err != nil {
		return "", err
	}
	base := kc.Contexts[kc.CurrentContext]
	for name, ns := range map[string]string{"demo": "demo", "other": "other", "plain": ""} {
		c := base.DeepCopy()
		c.Namespace = ns
		kc.Contexts[name] = c
	}
	kc.CurrentContext = "demo"
	path := filepath.Join(dir, "kubeconfig")
	return path, clientcmd.WriteToFile(*kc, path)
}

func lbService(ns, name, eip string, port int32) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		Annotations: map[string]string{model.AnnotationGateway: gwName, model.AnnotationEIP: eip}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, AllocateLoadBalancerNodePorts: ptr.To(false), Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Name: "http", Port: port, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}}}
}

// populate creates a kube-ovn VPC with a gateway and an EIP, the Services the tests explain, and
// the state a running controller leaves for a served Service (finalizer, record, ingress) and
// publishes (ConfigMap vpcgw-system/vpcgw-controller, where the plugin looks by default).
func populate(ctx context.Context) error {
	create := func(objs ...client.Object) error {
		for _, o := range objs {
			if err := k8s.Create(ctx, o); err != nil {
				return fmt.Errorf("%T %s: %w", o, o.GetName(), err)
			}
		}
		return nil
	}
	if err := create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}}, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "stale"}}, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "unrouted"}},
		&kubeovnv1.Vpc{ObjectMeta: metav1.ObjectMeta{Name: "vpc1"}, Spec: kubeovnv1.VpcSpec{Namespaces: []string{"demo"}}},
		&kubeovnv1.Subnet{ObjectMeta: metav1.ObjectMeta{Name: "vpc1-subnet"}, Spec: kubeovnv1.SubnetSpec{Vpc: "vpc1", CIDRBlock: "10.0.1.0/24", Provider: "ovn"}},
		&kubeovnv1.VpcNatGateway{ObjectMeta: metav1.ObjectMeta{Name: gwName}, Spec: kubeovnv1.VpcNatGatewaySpec{Vpc: "vpc1", Subnet: "vpc1-subnet", LanIP: lanIP, Replicas: 1}},
	); err != nil {
		return err
	}
	eip := &kubeovnv1.IptablesEIP{ObjectMeta: metav1.ObjectMeta{Name: eipName}, Spec: kubeovnv1.IptablesEIPSpec{NatGwDp: gwName, V4ip: eipAddr}}
	if err := create(eip); err != nil {
		return err
	}
	eip.Status.Ready, eip.Status.IP = true, eipAddr
	if err := k8s.Status().Update(ctx, eip); err != nil {
		return err
	}
	// kube-ovn's StatefulSet of the gateway: its Pod is an instance as one of its replicas (SPEC N5).
	gwLabels := map[string]string{"app": model.GatewayAppPrefix + gwName, model.LabelGatewayPod: "true"}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: model.GatewayAppPrefix + gwName, Namespace: "kube-system", Labels: gwLabels},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: gwLabels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: gwLabels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "vpc-nat-gw", Image: "x"}}}}}}
	if err := create(sts); err != nil {
		return err
	}
	gw := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: gwPod, Namespace: "kube-system",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts.Name, UID: sts.UID, Controller: ptr.To(true)}},
		Labels:          map[string]string{"app": model.GatewayAppPrefix + gwName, model.LabelGatewayPod: "true"},
		// The benchmark lab's annotation (a network namespace plays the pod): the plugin must
		// not act on it (TestRulesetOnlyThroughTheExecAPI).
		Annotations: map[string]string{model.AnnotationGatewayPod: gwName, model.AnnotationGwInit: "true", transport.NetnsAnnotation: "vpcgw-test-gw"}},
		Spec: corev1.PodSpec{NodeName: "n", Containers: []corev1.Container{{Name: "vpc-nat-gw", Image: "x"}}}}
	be := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "demo", Labels: map[string]string{"app": "web"},
		Annotations: map[string]string{"ovn.kubernetes.io/ip_address": backend, "ovn.kubernetes.io/logical_switch": "vpc1-subnet", "ovn.kubernetes.io/allocated": "true"}},
		Spec: corev1.PodSpec{NodeName: "n", Containers: []corev1.Container{{Name: "app", Image: "x"}}}}
	if err := create(gw, be, kubeovnv1.NewIP(be.Name, be.Namespace, kubeovnv1.DefaultProvider, "vpc1-subnet", backend)); err != nil {
		return err
	}
	for pod, ip := range map[*corev1.Pod]string{gw: lanIP, be: backend} {
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		if err := k8s.Status().Update(ctx, pod); err != nil {
			return err
		}
	}
	// Labels for -l: tier=front on both of demo's, app=web on both webs.
	web, noeip, otherWeb := lbService("demo", "web", eipName, 80), lbService("demo", "noeip", "missing", 81), lbService("other", "web", eipName, 82)
	web.Labels, noeip.Labels, otherWeb.Labels = map[string]string{"app": "web", "tier": "front"}, map[string]string{"app": "noeip", "tier": "front"}, map[string]string{"app": "web"}
	if err := create(web, noeip, otherWeb,
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "plain"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}},
		&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{backend}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "demo", Name: "web-0"}}}},
	); err != nil {
		return err
	}
	// What the controller writes once the gateway serves demo/web, by its own rules: the
	// finalizer, the ServiceRecord (Ready), the ingress.
	info := inspect.ControllerInfo{Gates: status.Gates{EnableGwNftableLbSvc: true, EnableGwNftableSvcClusterIP: true, Ledger: "service-record"}}
	rd, err := inspect.Snapshot(ctx, k8s, inspect.SnapshotOptions{})
	if err != nil {
		return err
	}
	sp := inspect.NewView(rd, info, nil).ServicePlan("demo", "web")
	if sp == nil || sp.Record == nil || !sp.EIPServed || !sp.ClusterIPServed {
		return fmt.Errorf("demo/web is not planned as served: %+v", sp)
	}
	rec := &vpcgwv1alpha1.ServiceRecord{ObjectMeta: metav1.ObjectMeta{Name: sp.Record.Name, Labels: sp.Record.Labels}, Spec: sp.Record.Spec, Status: sp.Record.Status}
	if err := create(rec); err != nil {
		return err
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(web), web); err != nil {
		return err
	}
	web.Finalizers = []string{model.Finalizer}
	if err := k8s.Update(ctx, web); err != nil {
		return err
	}
	web.Status.LoadBalancer.Ingress = sp.Ingress
	if err := k8s.Status().Update(ctx, web); err != nil {
		return err
	}
	// The running controller's status, fresh; a stale one elsewhere.
	pub := status.Published{Version: "v1.2.3-test", Holder: "vpcgw-controller-abc", Heartbeat: time.Now(),
		Gates: info.Gates, Flags: status.Flags{KubeOVNNamespace: "kube-system", MaxPortsPerService: 64, MaxBackendsPerIdentity: 512, MaxIdentitiesPerGateway: 65536, VIPRoutes: true},
		Gateways: map[string]status.Gateway{gwName: {Generation: ackedGen, Identities: 2, LastSyncTime: time.Now(),
			Instances: []status.Instance{{Pod: "kube-system/" + gwPod, UID: "u", AckedGeneration: ackedGen, LastAckTime: time.Now(), AgentVersion: "v1.2.3-test"}},
			Routes:    &status.Routes{NextHops: []string{lanIP}, VIPs: 2, Synced: true, LastSyncTime: time.Now()}}}}
	data, err := status.Encode(pub)
	if err != nil {
		return err
	}
	// A running controller that found a VIP of the gateway the Vpc's routes drop (SPEC V3).
	withUnrouted := pub.Gateways[gwName]
	rt := *withUnrouted.Routes
	rt.UnroutedVIPs, rt.Unrouted = 1, "the Vpc has no route covering them (test)"
	withUnrouted.Routes = &rt
	withUnroutedPub := pub
	withUnroutedPub.Gateways = map[string]status.Gateway{gwName: withUnrouted}
	unrouted, err := status.Encode(withUnroutedPub)
	if err != nil {
		return err
	}
	pub.Heartbeat, pub.Gates = time.Now().Add(-5*time.Minute), status.Gates{EnableGwNftableLbSvc: true, Ledger: "service-record"}
	stale, err := status.Encode(pub)
	if err != nil {
		return err
	}
	return create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: status.DefaultNamespace}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: status.DefaultNamespace, Name: status.ConfigMapName}, Data: data},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "unrouted", Name: status.ConfigMapName}, Data: unrouted},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "stale", Name: status.ConfigMapName}, Data: stale})
}

type result struct {
	code           int
	stdout, stderr string
}

// plugin runs the command in this process, as `kubectl vpcgw <args>` with the test's kubeconfig
// (KUBECONFIG, as kubectl passes it to a plugin).
func plugin(t *testing.T, args ...string) result {
	t.Helper()
	if k8s == nil {
		testutil.Skip(t, envSkip)
	}
	t.Setenv("KUBECONFIG", kubeconfig)
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	return result{code, out.String(), errOut.String()}
}

func (r result) want(t *testing.T, code int) result {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
	return r
}

func decode[T any](t *testing.T, r result) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, r.stdout)
	}
	return v
}

func item(t *testing.T, l inspect.ServiceStatusList, ns, name string) inspect.ServiceStatus {
	t.Helper()
	for _, it := range l.Items {
		if it.Namespace == ns && it.Name == name {
			return it
		}
	}
	t.Fatalf("no %s/%s in %+v", ns, name, l.Items)
	return inspect.ServiceStatus{}
}

func names(l inspect.ServiceStatusList) []string {
	var out []string
	for _, it := range l.Items {
		out = append(out, it.Namespace+"/"+it.Name)
	}
	return out
}

// Flags work before and after the verb and its argument, as kubectl's do.
// covers: O2
func TestFlagsAnywhere(t *testing.T) {
	// JSON: the text says "5s ago", which moves between the runs.
	a := plugin(t, "explain", "svc/web", "-n", "demo", "-o", "json").want(t, exitOK)
	b := plugin(t, "-n", "demo", "explain", "svc/web", "-o", "json").want(t, exitOK)
	c := plugin(t, "explain", "--namespace=demo", "-o", "json", "svc/web", "--controller-namespace", status.DefaultNamespace).want(t, exitOK)
	if a.stdout != b.stdout || a.stdout != c.stdout || !strings.Contains(a.stdout, `"summary": "Service demo/web is served by gateway gw1 through EIP `+eipAddr) {
		t.Errorf("explain with flags after, before and between:\n%s\n---\n%s\n---\n%s", a.stdout, b.stdout, c.stdout)
	}
	x := plugin(t, "status", "-o", "json", "-A").want(t, exitOK)
	// Global flags (kubectl's: --context, -n, --kubeconfig, ...) go before the verb as well; a
	// verb's own flags (-A, -o) after it, as with kubectl.
	y := plugin(t, "--context", "plain", "status", "-o", "json", "-A").want(t, exitOK)
	if len(decode[inspect.ServiceStatusList](t, x).Items) != 3 || len(decode[inspect.ServiceStatusList](t, y).Items) != 3 {
		t.Errorf("status -A, flags after or before the verb:\n%s\n---\n%s", x.stdout, y.stdout)
	}
}

// The namespace is the kubeconfig context's (demo here) unless -n says otherwise; --context
// selects another context; -A lists every namespace.
// covers: O2
func TestNamespaceDefaultsContextAndAllNamespaces(t *testing.T) {
	l := decode[inspect.ServiceStatusList](t, plugin(t, "status", "-o", "json").want(t, exitOK))
	if got := names(l); !slices.Equal(got, []string{"demo/noeip", "demo/web"}) {
		t.Errorf("status in the context's namespace: %v, want demo's Services that name a gateway", got)
	}
	l = decode[inspect.ServiceStatusList](t, plugin(t, "status", "--context", "other", "-o", "json").want(t, exitOK))
	if got := names(l); !slices.Equal(got, []string{"other/web"}) {
		t.Errorf("status --context other: %v", got)
	}
	r := plugin(t, "status", "--context", "plain").want(t, exitOK)
	if r.stdout != "" || !strings.Contains(r.stderr, "No Services name a gateway in namespace default.") {
		t.Errorf("status in a context without namespace: stdout %q stderr %q", r.stdout, r.stderr)
	}
	l = decode[inspect.ServiceStatusList](t, plugin(t, "status", "-A", "-o", "json", "--context", "plain").want(t, exitOK))
	if got := names(l); !slices.Equal(got, []string{"demo/noeip", "demo/web", "other/web"}) {
		t.Errorf("status -A: %v", got)
	}
	// -n wins over the context.
	plugin(t, "explain", "svc/web", "--context", "other", "-n", "demo").want(t, exitOK)
	plugin(t, "explain", "svc/web", "--context", "other").want(t, exitNotServed) // other/web is not admitted
}

// `status -o json` field by field, for a served Service and one whose EIP does not exist.
// covers: O2, I1, T1, R6
func TestStatusJSON(t *testing.T) {
	l := decode[inspect.ServiceStatusList](t, plugin(t, "status", "-A", "-o", "json").want(t, exitOK))
	if l.APIVersion != "vpcgw.io/v1alpha1" || l.Kind != "ServiceStatusList" {
		t.Errorf("apiVersion %q kind %q", l.APIVersion, l.Kind)
	}
	c := l.Controller
	if !c.Running || c.Version != "v1.2.3-test" || c.Holder != "vpcgw-controller-abc" || c.ConfigMap != "vpcgw-system/vpcgw-controller" ||
		c.GatesAssumed || c.GatesSource != "controller" || !c.Gates.EnableGwNftableLbSvc || !c.Gates.EnableGwNftableSvcClusterIP || c.Flags == nil || !c.Flags.VIPRoutes {
		t.Errorf("controller %+v", c)
	}
	if len(l.Warnings) != 0 {
		t.Errorf("warnings %v", l.Warnings)
	}
	web := item(t, l, "demo", "web")
	var svc corev1.Service
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: "demo", Name: "web"}, &svc); err != nil {
		t.Fatal(err)
	}
	cip := svc.Spec.ClusterIP
	if web.Type != "LoadBalancer" || web.Gateway != gwName || web.EIP != eipName || web.ClusterIP != cip || !slices.Equal(web.Ingress, []string{eipAddr}) ||
		web.State != inspect.StateServed || !web.Ready || web.Affinity != "None" {
		t.Errorf("demo/web %+v", web)
	}
	if web.EIPPart != (inspect.Part{State: "Served", VIP: eipAddr}) || web.ClusterIPPart != (inspect.Part{State: "Served", VIP: cip}) {
		t.Errorf("parts %+v %+v", web.EIPPart, web.ClusterIPPart)
	}
	wantIDs := []inspect.Identity{
		{Part: "EIP", VIP: eipAddr, Port: 80, Protocol: "tcp", Backends: []string{backend + ":8080"}},
		{Part: "ClusterIP", VIP: cip, Port: 80, Protocol: "tcp", Backends: []string{backend + ":8080"}},
	}
	if fmt.Sprint(web.Identities) != fmt.Sprint(wantIDs) {
		t.Errorf("identities %+v, want %+v", web.Identities, wantIDs)
	}
	if r := web.Record; r == nil || r.Kind != "ServiceRecord" || len(r.Names) != 1 || !r.Ready || r.Message != "" {
		t.Errorf("record %+v", r)
	}
	noeip := item(t, l, "demo", "noeip")
	if noeip.State != inspect.StatePartiallyServed || noeip.Ready || noeip.EIPPart.State != "NotServed" || noeip.EIPPart.EventReason != model.ReasonEIPMissing ||
		!strings.Contains(noeip.EIPPart.Reason, "gateway gw1 has no IptablesEIP missing") || !strings.Contains(noeip.EIPPart.Fix, "create IptablesEIP missing with spec.natGwDp: gw1") ||
		noeip.ClusterIPPart.State != "Served" || len(noeip.Identities) != 1 || noeip.Identities[0].Part != "ClusterIP" {
		t.Errorf("demo/noeip %+v", noeip)
	}
	if noeip.Record == nil || noeip.Record.Ready || !strings.Contains(noeip.Record.Message, "not written yet") {
		t.Errorf("demo/noeip record %+v", noeip.Record)
	}
	if len(noeip.Events) == 0 || noeip.Events[0].Reason != model.ReasonEIPMissing {
		t.Errorf("demo/noeip events %+v", noeip.Events)
	}
	other := item(t, l, "other", "web")
	if other.State != inspect.StateNotServed || other.EIPPart.EventReason != model.ReasonNotAdmitted || other.ClusterIPPart.EventReason != model.ReasonNotAdmitted ||
		!strings.Contains(other.EIPPart.Fix, "adds it to spec.namespaces of Vpc vpc1") {
		t.Errorf("other/web %+v", other)
	}
}

// `explain -o json` of a served Service: identities, backends, record Ready, the gateway's
// instances with the generation each acknowledged, the routes of its VIPs; exit code 0.
// covers: O2, D7, V1
func TestExplainServedJSON(t *testing.T) {
	ex := decode[inspect.ServiceExplanation](t, plugin(t, "explain", "svc/web", "-o", "json").want(t, exitOK))
	if ex.APIVersion != "vpcgw.io/v1alpha1" || ex.Kind != "ServiceExplanation" || !ex.Served || ex.Service.State != "Served" || !ex.Controller.Running {
		t.Errorf("explanation %+v", ex)
	}
	if !strings.HasPrefix(ex.Summary, "Service demo/web is served by gateway gw1 through EIP "+eipAddr+" and ClusterIP ") {
		t.Errorf("summary %q", ex.Summary)
	}
	if len(ex.Service.Identities) != 2 || ex.Service.Record == nil || !ex.Service.Record.Ready {
		t.Errorf("service %+v", ex.Service)
	}
	g := ex.Gateway
	// 3 identities by the rules (demo/noeip's ClusterIP too); the controller last programmed 2.
	if g == nil || g.Name != gwName || !g.Exists || g.Vpc != "vpc1" || g.LanIP != lanIP || g.Identities != 3 || g.Programmed == nil ||
		g.Programmed.Generation != ackedGen || g.Programmed.Identities != 2 || g.Programmed.LastError != "" {
		t.Fatalf("gateway %+v", g)
	}
	if len(g.Instances) != 1 {
		t.Fatalf("instances %+v", g.Instances)
	}
	in := g.Instances[0]
	if in.Pod != "kube-system/"+gwPod || in.LanIP != lanIP || !in.Initialized || !in.Reported || in.AckedGeneration != ackedGen || !in.Current ||
		in.AgentVersion != "v1.2.3-test" || in.LastAckTime.IsZero() || in.LastError != "" {
		t.Errorf("instance %+v", in)
	}
	rt := ex.Routes
	if rt == nil || !rt.Written || rt.Router != "vpc1" || !slices.Equal(rt.NextHops, []string{lanIP}) || len(rt.VIPs) != 2 || rt.VIPs[0] != eipAddr ||
		rt.Synced == nil || !*rt.Synced || rt.LastSyncTime.IsZero() {
		t.Errorf("routes %+v", rt)
	}
	// The text form says the same for a person.
	r := plugin(t, "explain", "svc/web").want(t, exitOK)
	for _, s := range []string{"State:      Served", "Controller: vpcgw v1.2.3-test running", "EIP        Served on " + eipAddr,
		"-> " + backend + ":8080", "Record:     ServiceRecord", "Ready", "kube-system/" + gwPod, "Routes of the Service's VIPs: router vpc1"} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("explain text lacks %q:\n%s", s, r.stdout)
		}
	}
}

// VIPs of the gateway that the Vpc's routes drop, as the controller published them (a count and
// its text, never the VIPs, SPEC N8): in the routes of `explain` and of `status gw/`, in -o json
// and for a person. The Service stays served by the controller's rules (exit code 0).
// covers: V3, O2
func TestExplainUnroutedVIPs(t *testing.T) {
	ex := decode[inspect.ServiceExplanation](t, plugin(t, "explain", "svc/web", "--controller-namespace", "unrouted", "-o", "json").want(t, exitOK))
	if rt := ex.Routes; rt == nil || rt.UnroutedVIPs != 1 || rt.Unrouted != "the Vpc has no route covering them (test)" {
		t.Errorf("routes %+v", rt)
	}
	r := plugin(t, "explain", "svc/web", "--controller-namespace", "unrouted").want(t, exitOK)
	if want := "Warning: OVN drops 1 VIP of gateway gw1 before their VIP route applies: the Vpc has no route covering them (test)"; !strings.Contains(r.stdout, want) {
		t.Errorf("explain text lacks %q:\n%s", want, r.stdout)
	}
	gs := decode[inspect.GatewayStatus](t, plugin(t, "status", "gw/gw1", "--controller-namespace", "unrouted", "-o", "json").want(t, exitOK))
	if gs.Routes.UnroutedVIPs != 1 {
		t.Errorf("gateway routes %+v", gs.Routes)
	}
	r = plugin(t, "status", "gw/gw1", "--controller-namespace", "unrouted").want(t, exitOK)
	if !strings.Contains(r.stdout, "Warning: OVN drops 1 VIP of the gateway before their VIP route applies") {
		t.Errorf("status gw/gw1:\n%s", r.stdout)
	}
	// The controller of the default namespace found none: no warning.
	if r := plugin(t, "explain", "svc/web").want(t, exitOK); strings.Contains(r.stdout, "Warning: OVN drops") {
		t.Errorf("explain warns without unrouted VIPs:\n%s", r.stdout)
	}
}

// A Service that is not served gets the controller's reason, its event reason and the fix, and
// exit code 3; one that does not exist is an error.
// covers: O2, T3, S2, N1
func TestExplainNotServed(t *testing.T) {
	for _, tc := range []struct {
		args               []string
		state, reason, fix string
	}{
		{[]string{"explain", "svc/noeip"}, "PartiallyServed", model.ReasonEIPMissing, "create IptablesEIP missing"},
		{[]string{"explain", "svc/web", "-n", "other"}, "NotServed", model.ReasonNotAdmitted, "admits namespace other"},
		{[]string{"explain", "service/plain"}, "NotServed", inspect.ReasonNotOptedIn, "kubectl annotate service plain -n demo " + model.AnnotationGateway + "=<gateway>"},
	} {
		ex := decode[inspect.ServiceExplanation](t, plugin(t, append(tc.args, "-o", "json")...).want(t, exitNotServed))
		p := ex.Service.EIPPart
		if p.State == "NotApplicable" || p.State == "Served" {
			p = ex.Service.ClusterIPPart
		}
		if ex.Served || ex.Service.State != tc.state || p.EventReason != tc.reason || !strings.Contains(p.Fix, tc.fix) || p.Reason == "" {
			t.Errorf("%v: served %v state %s part %+v; want %s, %s, a fix with %q", tc.args, ex.Served, ex.Service.State, p, tc.state, tc.reason, tc.fix)
		}
		txt := plugin(t, tc.args...).want(t, exitNotServed)
		if !strings.Contains(txt.stdout, "fix: ") || !strings.Contains(txt.stdout, "["+tc.reason+"]") {
			t.Errorf("%v text:\n%s", tc.args, txt.stdout)
		}
	}
	r := plugin(t, "explain", "svc/nothere").want(t, exitError)
	if !strings.Contains(r.stderr, "Service demo/nothere not found") {
		t.Errorf("stderr %q", r.stderr)
	}
}

// -o yaml is the same document; -o wide adds columns; a bad -o is a usage error that names the
// formats.
// covers: O2
func TestOutputFormats(t *testing.T) {
	var l inspect.ServiceStatusList
	if err := yaml.Unmarshal([]byte(plugin(t, "status", "-o", "yaml").want(t, exitOK).stdout), &l); err != nil {
		t.Fatal(err)
	}
	if l.Kind != "ServiceStatusList" || len(l.Items) != 2 || item(t, l, "demo", "web").State != "Served" {
		t.Errorf("yaml %+v", l)
	}
	plain := plugin(t, "status").want(t, exitOK).stdout
	wide := plugin(t, "status", "-o", "wide").want(t, exitOK).stdout
	if !strings.HasPrefix(plain, "SERVICE  ") || !strings.Contains(plain, "WHY NOT") || strings.Contains(plain, "STATE") {
		t.Errorf("status:\n%s", plain)
	}
	if !strings.Contains(wide, "TYPE") || !strings.Contains(wide, "CLUSTER-IP") || !strings.Contains(wide, "RECORD") {
		t.Errorf("status -o wide:\n%s", wide)
	}
	for _, line := range strings.Split(wide, "\n") {
		if strings.HasPrefix(line, "demo/web ") && (!strings.Contains(line, "LoadBalancer") || !strings.Contains(line, " Served ") || !strings.Contains(line, " Ready ")) {
			t.Errorf("wide line %q", line)
		}
	}
	for _, args := range [][]string{{"status", "-o", "table"}, {"explain", "svc/web", "-o", "bogus"}, {"version", "-o", "wide"}, {"version", "-o", "name"},
		{"version", "-o", "custom-columns=A:.plugin"}} {
		r := plugin(t, args...).want(t, exitUsage)
		if !strings.Contains(r.stderr, "unable to match a printer suitable for the output format") || !strings.Contains(r.stderr, "allowed formats are: json,yaml") {
			t.Errorf("%v: stderr %q", args, r.stderr)
		}
	}
	// A template format without its template, or a bad template or column spec, is a usage
	// error too (kubectl's words), found before the cluster is read.
	for args, want := range map[*[]string]string{
		{"explain", "svc/web", "-o", "jsonpath"}:                                   "template format specified but no template given",
		{"status", "-o", "go-template"}:                                            "template format specified but no template given",
		{"status", "-o", "jsonpath={.items[", "--server", "https://127.0.0.1:1"}:   "error parsing jsonpath",
		{"status", "-o", "custom-columns=NAME", "--server", "https://127.0.0.1:1"}: "unexpected custom-columns spec: NAME, expected <header>:<json-path-expr>",
		{"status", "-o", "custom-columns="}:                                        "no custom columns given",
		{"status", "-l", "app in (web", "--server", "https://127.0.0.1:1"}:         "-l \"app in (web\"",
	} {
		r := plugin(t, *args...).want(t, exitUsage)
		if !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "See 'kubectl vpcgw") {
			t.Errorf("%v: stderr %q, want %q", *args, r.stderr, want)
		}
	}
}

// kubectl's output formats through cli-runtime's printers, on the same documents as -o json:
// jsonpath, jsonpath-file, go-template, --template, name, custom-columns (a row per Service of a
// list), custom-columns-file, and --no-headers on the tables.
// covers: O2
func TestKubectlOutputFormats(t *testing.T) {
	if k8s == nil { // it reads the Services itself before the first plugin run skips
		testutil.Skip(t, envSkip)
	}
	var svc, noeip corev1.Service
	for name, s := range map[string]*corev1.Service{"web": &svc, "noeip": &noeip} {
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: "demo", Name: name}, s); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	items := `{range .items[*]}{.namespace}/{.name}={.state}{"\n"}{end}`
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "-A", "-o", "jsonpath=" + items}, "demo/noeip=PartiallyServed\ndemo/web=Served\nother/web=NotServed\n"},
		{[]string{"status", "-A", "-o=jsonpath=" + items}, "demo/noeip=PartiallyServed\ndemo/web=Served\nother/web=NotServed\n"},
		{[]string{"status", "-o", "jsonpath-file=" + write("items.jsonpath", items)}, "demo/noeip=PartiallyServed\ndemo/web=Served\n"},
		{[]string{"status", "-o", "jsonpath={.apiVersion} {.kind} {.controller.version}"}, "vpcgw.io/v1alpha1 ServiceStatusList v1.2.3-test"},
		{[]string{"explain", "svc/web", "-o", "jsonpath={.service.ingress[0]} {.service.identities[*].part} {.gateway.instances[0].ackedGeneration}"}, eipAddr + " EIP ClusterIP 5"},
		{[]string{"status", "gw/gw1", "-o", "jsonpath={.kind} {.name} {.services[*].name}"}, "GatewayStatus gw1 noeip web web"},
		{[]string{"version", "-o", "jsonpath={.plugin}"}, version.Version},
		{[]string{"status", "-o", "go-template={{range .items}}{{.name}} {{.eipPart.state}};{{end}}"}, "noeip NotServed;web Served;"},
		{[]string{"status", "--template", "{{len .items}}"}, "2"},
		{[]string{"status", "-o", "go-template-file=" + write("t.tmpl", "{{.kind}}")}, "ServiceStatusList"},
		{[]string{"status", "-A", "-o", "name"}, "service/noeip\nservice/web\nservice/web\n"},
		{[]string{"status", "gw/gw1", "-o", "name"}, "vpcnatgateway.kubeovn.io/gw1\n"},
		{[]string{"explain", "svc/web", "-o", "name"}, "service/web\n"},
		// custom-columns: a row per Service, columns aligned (compared here with single spaces).
		{[]string{"status", "-o", "custom-columns=NAME:.name,STATE:{.state},CIP:clusterIP,PORTS:.identities[*].port,NONE:.nothere"},
			"NAME STATE CIP PORTS NONE\nnoeip PartiallyServed " + noeip.Spec.ClusterIP + " 81 <none>\nweb Served " + svc.Spec.ClusterIP + " 80,80 <none>\n"},
		{[]string{"explain", "svc/web", "-o", "custom-columns=SERVED:.served,STATE:.service.state", "--no-headers"}, "true Served\n"},
		{[]string{"status", "-o", "custom-columns-file=" + write("cols", "NAME STATE\n.name .state\n"), "--no-headers", "-l", "app=web"}, "web Served\n"},
	} {
		r := plugin(t, tc.args...)
		if r.code == exitOK {
			got := r.stdout
			if strings.Contains(strings.Join(tc.args, " "), "custom-columns") {
				if !strings.Contains(got, "   ") && strings.Count(tc.want, " ") > 1 {
					t.Errorf("%q: columns not aligned:\n%s", tc.args, got)
				}
				got = singleSpaced(got)
			}
			if got != tc.want {
				t.Errorf("%q: stdout\n%q\nwant\n%q", tc.args, r.stdout, tc.want)
			}
			continue
		}
		t.Errorf("%q: exit %d, stderr %q", tc.args, r.code, r.stderr)
	}
	// explain keeps its exit codes with every format: 3 for a Service that is not served.
	if r := plugin(t, "explain", "svc/noeip", "-o", "jsonpath={.served}").want(t, exitNotServed); r.stdout != "false" {
		t.Errorf("explain svc/noeip -o jsonpath: %q", r.stdout)
	}
	// -o json and -o yaml are cli-runtime's printers of the same document: apiVersion, kind and
	// the field names of internal/inspect/types.go.
	var doc map[string]any
	if err := json.Unmarshal([]byte(plugin(t, "explain", "svc/web", "-o", "json").want(t, exitOK).stdout), &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"apiVersion", "kind", "controller", "served", "summary", "service", "gateway", "routes"} {
		if _, ok := doc[k]; !ok {
			t.Errorf("explain -o json has no %q: %v", k, doc)
		}
	}
	if y := plugin(t, "explain", "svc/web", "-o", "yaml").want(t, exitOK).stdout; !strings.Contains(y, "apiVersion: vpcgw.io/v1alpha1\n") || !strings.Contains(y, "kind: ServiceExplanation\n") || !strings.Contains(y, "  eipPart:\n") {
		t.Errorf("explain -o yaml:\n%s", y)
	}
}

// singleSpaced is s with each line's fields separated by one space.
func singleSpaced(s string) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(s, "\n") {
		nl := strings.HasSuffix(line, "\n")
		b.WriteString(strings.Join(strings.Fields(line), " "))
		if nl {
			b.WriteString("\n")
		}
	}
	return b.String()
}

// -l selects the Services status lists by label, as kubectl get's; --no-headers drops the
// table's header, also with -o wide and for a gateway's Services.
// covers: O2
func TestSelectorAndNoHeaders(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"status", "-A", "-l", "app=web"}, []string{"demo/web", "other/web"}},
		{[]string{"status", "-A", "--selector", "tier=front,app!=web"}, []string{"demo/noeip"}},
		{[]string{"status", "-l", "app in (web,noeip)"}, []string{"demo/noeip", "demo/web"}},
		{[]string{"status", "-A", "-l", "tier"}, []string{"demo/noeip", "demo/web"}},
		{[]string{"status", "-l", "!tier", "--context", "other"}, []string{"other/web"}},
	} {
		if got := names(decode[inspect.ServiceStatusList](t, plugin(t, append(tc.args, "-o", "json")...).want(t, exitOK))); !slices.Equal(got, tc.want) {
			t.Errorf("%q: %v, want %v", tc.args, got, tc.want)
		}
	}
	// A gateway's Services, selected too.
	gs := decode[inspect.GatewayStatus](t, plugin(t, "status", "gw/gw1", "-l", "app=web", "-o", "json").want(t, exitOK))
	if len(gs.Services) != 2 || gs.Services[0].Name != "web" || gs.Services[1].Name != "web" || gs.Name != gwName {
		t.Errorf("status gw/gw1 -l app=web: %+v", gs.Services)
	}
	// Nothing matches: nothing on stdout, and stderr says so.
	r := plugin(t, "status", "-l", "app=nothere").want(t, exitOK)
	if r.stdout != "" || !strings.Contains(r.stderr, "No Services name a gateway and match -l app=nothere in namespace demo.") {
		t.Errorf("status -l app=nothere: stdout %q stderr %q", r.stdout, r.stderr)
	}
	// --no-headers: the same lines as the table without its first one.
	for _, args := range [][]string{{"status"}, {"status", "-o", "wide"}, {"status", "-A", "-l", "app=web"}} {
		full := plugin(t, args...).want(t, exitOK).stdout
		bare := plugin(t, append(args, "--no-headers")...).want(t, exitOK).stdout
		header, rest, _ := strings.Cut(full, "\n")
		first := "SERVICE " // -A: a NAMESPACE column first, as kubectl's
		if slices.Contains(args, "-A") {
			first = "NAMESPACE "
		}
		if !strings.HasPrefix(header, first) || strings.Contains(bare, "SERVICE") || len(strings.Split(strings.TrimSpace(bare), "\n")) != len(strings.Split(strings.TrimSpace(rest), "\n")) {
			t.Errorf("%q --no-headers:\n%s\nwithout:\n%s", args, bare, full)
		}
		for _, line := range strings.Split(strings.TrimSpace(bare), "\n") {
			if f := strings.Fields(line); len(f) == 0 || !strings.Contains(rest, f[0]+" ") {
				t.Errorf("%q --no-headers: line %q is not a line of the table", args, line)
			}
		}
	}
	if r := plugin(t, "status", "gw/gw1", "--no-headers").want(t, exitOK); strings.Contains(r.stdout, "SERVICE ") || !strings.Contains(singleSpaced(r.stdout), "\ndemo web ") {
		t.Errorf("status gw/gw1 --no-headers:\n%s", r.stdout)
	}
}

// Usage errors exit 2 with kubectl's hint; --help per verb exits 0.
// covers: O2
func TestUsageAndHelp(t *testing.T) {
	for _, args := range [][]string{
		{"bogus"}, {"status", "--bogus"}, {"explain"}, {"explain", "web"}, {"explain", "svc/a", "svc/b"}, {"status", "gw/a", "gw/b"},
		{"status", "pod/x"}, {"ruleset"}, {"version", "extra"}, {"explain", "svc/web", "-A"},
	} {
		r := plugin(t, args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "See 'kubectl vpcgw") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a usage hint", args, r.code, r.stderr)
		}
	}
	for verb, want := range map[string]string{"": "Exit codes:", "status": "kubectl vpcgw status [gw/<gateway>]", "explain": "kubectl vpcgw explain svc/<name>",
		"ruleset": "kubectl vpcgw ruleset <gateway>", "version": "kubectl vpcgw version"} {
		args := []string{"--help"}
		if verb != "" {
			args = []string{verb, "--help"}
		}
		r := plugin(t, args...).want(t, exitOK)
		if !strings.Contains(r.stdout, want) || !strings.Contains(r.stdout, "--kubeconfig") {
			t.Errorf("%s --help lacks %q:\n%s", verb, want, r.stdout)
		}
	}
	// Shell completion: the verbs, Services and gateways of the cluster.
	if r := plugin(t, "__complete", "explain", "svc/").want(t, exitOK); !strings.Contains(r.stdout, "svc/web\tgateway gw1") || !strings.Contains(r.stdout, "svc/plain") {
		t.Errorf("completion of explain: %q", r.stdout)
	}
	if r := plugin(t, "__complete", "status", "gw/").want(t, exitOK); !strings.Contains(r.stdout, "gw/gw1") {
		t.Errorf("completion of status: %q", r.stdout)
	}
	if r := plugin(t, "__complete", "status", "--context", "").want(t, exitOK); !strings.Contains(r.stdout, "other") || !strings.Contains(r.stdout, "plain") {
		t.Errorf("completion of --context: %q", r.stdout)
	}
	if r := plugin(t, "completion", "bash").want(t, exitOK); !strings.Contains(r.stdout, "bash completion") {
		t.Errorf("completion bash: %.200s", r.stdout)
	}
}

// One gateway: its instances, programming, routes and Services.
// covers: O2, D7, V1
func TestGatewayStatus(t *testing.T) {
	gs := decode[inspect.GatewayStatus](t, plugin(t, "status", "gw/gw1", "-o", "json").want(t, exitOK))
	if gs.Kind != "GatewayStatus" || gs.Name != gwName || !gs.Exists || gs.Programmed == nil || gs.Programmed.Generation != ackedGen ||
		len(gs.Instances) != 1 || !gs.Instances[0].Current || gs.Routes.Synced == nil || !*gs.Routes.Synced || len(gs.Routes.VIPs) != 3 {
		t.Errorf("gateway %+v", gs)
	}
	var svcs []string
	for _, s := range gs.Services {
		svcs = append(svcs, s.Namespace+"/"+s.Name)
	}
	if !slices.Equal(svcs, []string{"demo/noeip", "demo/web", "other/web"}) {
		t.Errorf("gateway's Services %v (every namespace, whatever -n)", svcs)
	}
	r := plugin(t, "status", "gateway/gw1").want(t, exitOK)
	if !strings.Contains(r.stdout, "Gateway gw1 (Vpc vpc1, lanIp "+lanIP+")") || !strings.Contains(r.stdout, "kube-system/"+gwPod) ||
		!strings.Contains(singleSpaced(r.stdout), "\nNAMESPACE SERVICE GATEWAY ") || !strings.Contains(singleSpaced(r.stdout), "\ndemo web gw1 ") {
		t.Errorf("status gateway/gw1:\n%s", r.stdout)
	}
	plugin(t, "status", "gw/nothere").want(t, exitError)
}

// Without a running controller the plugin never guesses: the controller's rules are not applied,
// a Service whose ingress holds its EIP's address is served (its basis says so), one that nothing
// shows served is Unknown (exit code 4), and the plugin says what it lacks: a fresh heartbeat, or
// the ConfigMap, which may be in another namespace (--controller-namespace).
// covers: O2, F1, T1
func TestNoControllerRunning(t *testing.T) {
	r := plugin(t, "status", "-o", "json", "--controller-namespace", "stale").want(t, exitUnknown)
	l := decode[inspect.ServiceStatusList](t, r)
	if l.Controller.Running || !l.Controller.GatesAssumed || l.Controller.GatesSource != "last-published" || l.Controller.Gates.EnableGwNftableSvcClusterIP {
		t.Errorf("stale controller %+v", l.Controller)
	}
	want := "no vpcgw controller is running (ConfigMap stale/vpcgw-controller: its heartbeat is "
	if !strings.Contains(r.stderr, "Warning: "+want) || !strings.Contains(l.Controller.Message, want) || len(l.Warnings) == 0 ||
		len(l.Unknown) != 1 || !strings.Contains(l.Unknown[0], want) {
		t.Errorf("stderr %q, message %q, unknown %q", r.stderr, l.Controller.Message, l.Unknown)
	}
	// demo/web's ingress holds its EIP's address: served, the ClusterIP part unknown. demo/noeip:
	// nothing shows it (envtest has no events of the controller): Unknown, not false.
	if web := item(t, l, "demo", "web"); web.State != inspect.StateServed || web.ReadyStatus != "True" || !web.Ready || web.EIPPart.State != "Served" ||
		web.EIPPart.VIP != eipAddr || web.ClusterIPPart.State != "Unknown" || !strings.Contains(web.Basis, "its ingress holds "+eipAddr+", the address of IptablesEIP "+eipName) {
		t.Errorf("demo/web without a running controller %+v", web)
	}
	if noeip := item(t, l, "demo", "noeip"); noeip.State != inspect.StateUnknown || noeip.ReadyStatus != "Unknown" || noeip.Ready ||
		noeip.EIPPart.State != "Unknown" || !strings.Contains(noeip.Basis, "nothing you may read shows whether it is served") {
		t.Errorf("demo/noeip without a running controller %+v", noeip)
	}
	table := singleSpaced(plugin(t, "status", "--controller-namespace", "stale").want(t, exitUnknown).stdout)
	if !strings.Contains(table, " READY WHY NOT BASIS\n") || !strings.Contains(table, "\nweb gw1 eip1 "+eipAddr+" ") || !strings.Contains(table, " True ") ||
		!strings.Contains(table, "\nnoeip gw1 missing - ") || !strings.Contains(table, " Unknown EIP: the controller's status is unknown, and nothing you may read of the Service shows whether it is served ") {
		t.Errorf("status table without a running controller:\n%s", table)
	}
	// The staleness threshold is a flag.
	l = decode[inspect.ServiceStatusList](t, plugin(t, "status", "-o", "json", "--controller-namespace", "stale", "--stale-after", "1h").want(t, exitOK))
	if !l.Controller.Running || len(l.Unknown) != 0 || item(t, l, "demo", "web").Basis != inspect.BasisRules {
		t.Errorf("with --stale-after 1h: %+v", l)
	}
	// Nothing published: the gates are unknown, not assumed off.
	r = plugin(t, "explain", "svc/web", "--controller-namespace", "nowhere", "-o", "json").want(t, exitOK)
	ex := decode[inspect.ServiceExplanation](t, r)
	wantMissing := "ConfigMap vpcgw-controller not found in namespace nowhere (no controller runs there; if it runs in another namespace, pass --controller-namespace <its namespace>)"
	if ex.Controller.Running || ex.Controller.GatesSource != "unknown" || !ex.Served || ex.Service.EIPPart.State != "Served" ||
		!strings.Contains(ex.Controller.Message, wantMissing) || !strings.Contains(ex.Summary, "Service demo/web is served through EIP "+eipAddr+": its ingress holds") {
		t.Errorf("no status at all: %+v", ex)
	}
	r = plugin(t, "explain", "svc/noeip", "--controller-namespace", "nowhere").want(t, exitUnknown)
	for _, s := range []string{"Whether Service demo/noeip is served is unknown", "State:      Unknown", "Ready:      Unknown", "Gates:      unknown", "Unknown:\n  - the vpcgw controller's status is unknown: " + wantMissing} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("explain svc/noeip without a controller lacks %q:\n%s", s, r.stdout)
		}
	}
	if !strings.Contains(r.stderr, wantMissing) {
		t.Errorf("stderr %q", r.stderr)
	}
	v := decode[inspect.VersionInfo](t, plugin(t, "version", "-o", "json", "--controller-namespace", "nowhere").want(t, exitOK))
	if v.Kind != "Version" || v.Plugin != version.Version || v.Controller.Running {
		t.Errorf("version %+v", v)
	}
}

// version: the plugin's and the running controller's.
// covers: O2, O5
func TestVersion(t *testing.T) {
	v := decode[inspect.VersionInfo](t, plugin(t, "version", "-o", "json").want(t, exitOK))
	if v.APIVersion != "vpcgw.io/v1alpha1" || v.Kind != "Version" || v.Plugin != version.Version || v.Controller.Version != "v1.2.3-test" || !v.Controller.Running {
		t.Errorf("version %+v", v)
	}
	r := plugin(t, "version").want(t, exitOK)
	if !strings.Contains(r.stdout, "kubectl-vpcgw: "+version.Version) || !strings.Contains(r.stdout, "controller:    v1.2.3-test") {
		t.Errorf("version:\n%s", r.stdout)
	}
	// --client needs no cluster (as kubectl version --client).
	v = decode[inspect.VersionInfo](t, plugin(t, "version", "--client", "-o", "json", "--server", "https://127.0.0.1:1").want(t, exitOK))
	if v.Kind != "Version" || v.Plugin != version.Version || v.Controller != nil {
		t.Errorf("version --client %+v", v)
	}
	// Without a reachable API server every verb that needs it is an error (exit 1).
	plugin(t, "status", "--server", "https://127.0.0.1:1", "--request-timeout", "2s").want(t, exitError)
}

// ruleset reads a gateway's table only through the exec API, also for a pod with the benchmark
// lab's network-namespace annotation: it runs nothing on the user's machine. Here ip and nft on
// the PATH record that they ran; envtest has no kubelet, so the exec is an error naming the pod.
// covers: O2
func TestRulesetOnlyThroughTheExecAPI(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	for _, name := range []string{"ip", "nft", "sudo"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\necho \"$0 $*\" >> \"$VPCGW_TEST_MARKER\"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("VPCGW_TEST_MARKER", marker)
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	r := plugin(t, "ruleset", gwName).want(t, exitError)
	if !strings.Contains(r.stdout, "# kube-system/"+gwPod) || !strings.Contains(r.stderr, "kube-system/"+gwPod+": ") {
		t.Errorf("ruleset without a kubelet: stdout %q stderr %q; want the instance named", r.stdout, r.stderr)
	}
	if b, err := os.ReadFile(marker); err == nil {
		t.Errorf("ruleset ran a command on this machine: %s", b)
	} else if !os.IsNotExist(err) {
		t.Fatal(err)
	}
}
