package controller_test

// covers: T1, T2, L2, L3, L6 (harness: envtest, kube-controller-manager, agents in memory or in namespaces)

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/controller"
	"github.com/vpcgw/vpcgw/internal/kcm"
	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/netlab"
	"github.com/vpcgw/vpcgw/internal/testutil"
	"github.com/vpcgw/vpcgw/internal/transport"
)

var (
	cfg     *rest.Config
	k8s     client.Client
	envSkip string
	// agentExe is the vpcgw-agent binary for the real-agent runs ("" when this machine cannot run them;
	// agentSkip says why).
	agentExe  string
	agentSkip string
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	env, assets, skip, err := testutil.StartKubeOVNEnvtest(kcm.Binary)
	if skip != "" {
		envSkip = skip
		return m.Run()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg = env.Config
	defer func() { _ = env.Stop() }()
	// EndpointSlices come from the real EndpointSlice controller.
	user, err := env.AddUser(envtest.User{Name: "kcm", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	kc, err := user.KubeConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	kcmDir, err := os.MkdirTemp("", "vpcgw-kcm-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer removeTempDir(kcmDir)
	proc, err := kcm.Start(assets, kc, kcmDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		proc.Stop()
		if os.Getenv("VPCGW_TEST_LOGS") == "1" {
			fmt.Fprintln(os.Stderr, proc.Output())
		}
	}()
	scheme, err := controller.Scheme()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if k8s, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := kcm.EnsureNode(context.Background(), k8s, nodeName); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, err := os.MkdirTemp("", "vpcgw-ctrl-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer removeTempDir(dir)
	if agentSkip = realAgentsMissing(); agentSkip == "" {
		agentExe = filepath.Join(dir, "vpcgw-agent")
		build := exec.Command("go", "build", "-o", agentExe, "github.com/vpcgw/vpcgw/cmd/vpcgw-agent")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building vpcgw-agent for the real-agent runs:", err)
			return 1
		}
	}
	return m.Run()
}

// removeTempDir removes a directory TestMain made; a failure leaves it behind, which is said.
func removeTempDir(dir string) {
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintln(os.Stderr, "removing", dir+":", err)
	}
}

func realAgentsMissing() string {
	if err := netlab.Available(); err != nil {
		return err.Error()
	}
	if _, err := exec.LookPath("nft"); err != nil {
		return "nft is not installed (apt-get install -y nftables)"
	}
	return ""
}

// dataplaneView is what the scenarios ask of the gateway instances: does one serve an identity
// ("vip:port:proto"), and end its agent as a container restart would.
type dataplaneView interface {
	serves(uid types.UID, key string) bool
	kill(uid types.UID)
}

// agentMode says how gateway instances run in a scenario.
type agentMode string

const (
	inMemory agentMode = "memory" // fakeAgents: fast, lets a test inject failures
	inNetns  agentMode = "netns"  // the real `vpcgw agent` in a network namespace per instance
)

// bothModes runs a scenario with in-memory agents and with real agents in namespaces.
func bothModes(t *testing.T, scenario func(t *testing.T, mode agentMode)) {
	for _, mode := range []agentMode{inMemory, inNetns} {
		t.Run(string(mode), func(t *testing.T) { scenario(t, mode) })
	}
}

// netnsAgents runs the real agent, one network namespace per gateway instance.
type netnsAgents struct {
	t    *testing.T
	net  *netlab.Lab
	mu   sync.Mutex
	nsOf map[types.UID]string
}

func (a *netnsAgents) alias(uid types.UID, ns string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.nsOf[uid] = ns
}

func (a *netnsAgents) serves(uid types.UID, key string) bool {
	a.mu.Lock()
	ns := a.nsOf[uid]
	a.mu.Unlock()
	parts := strings.Split(key, ":") // vip:port:proto
	out, err := a.net.Exec(ns, "nft", "list", "map", "ip", "kube-ovn", "service-ips")
	if err != nil || len(parts) != 3 {
		return false
	}
	return strings.Contains(string(out), parts[0]+" . "+parts[2]+" . "+parts[1]+" : goto dnat-")
}

// kill ends the agent processes in the instance's namespace (they are this test's own).
func (a *netnsAgents) kill(uid types.UID) {
	a.mu.Lock()
	ns := a.nsOf[uid]
	a.mu.Unlock()
	out, err := netlab.Run("ip", "netns", "pids", ns)
	if err != nil {
		a.t.Fatal(err)
	}
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// nodeName is the Node every test Pod runs on.
const nodeName = "node-1"

// fixture is one gateway with its objects, in a namespace of its own.
type fixture struct {
	t      *testing.T
	ns     string
	gw     string
	agents *fakeAgents   // in-memory mode only
	real   *netnsAgents  // netns mode only
	data   dataplaneView // either
	dialer transport.Dialer
	pods   []types.UID
	stop   context.CancelFunc
	done   chan error
	// minSync is the controller's MinSyncInterval (0: none).
	minSync time.Duration
	// options, when set, adjusts the controller's options at every start.
	options func(*controller.Options)
}

func newFixture(t *testing.T, gw string, instances int) *fixture {
	return newFixtureIn(t, inMemory, gw, instances)
}

// newFixtureIn makes a fixture whose gateway instances run as mode says; in netns mode the
// gateway is named <gw>-n so that both modes of one scenario share nothing.
func newFixtureIn(t *testing.T, mode agentMode, gw string, instances int) *fixture {
	t.Helper()
	return newFixtureWith(t, mode, gw, instances, nil)
}

// newFixtureWith is newFixtureIn with the controller's options adjusted by options.
func newFixtureWith(t *testing.T, mode agentMode, gw string, instances int, options func(*controller.Options)) *fixture {
	t.Helper()
	if cfg == nil {
		testutil.Skip(t, envSkip)
	}
	f := &fixture{t: t, options: options}
	switch mode {
	case inMemory:
		f.agents = newFakeAgents()
		f.data, f.dialer = f.agents, f.agents
	case inNetns:
		if agentExe == "" {
			testutil.Skip(t, "real agents: "+agentSkip)
		}
		gw += "-n"
		net, err := netlab.New("ct")
		must(t, err)
		t.Cleanup(func() {
			if err := net.Cleanup(); err != nil {
				t.Error(err)
			}
		})
		f.real = &netnsAgents{t: t, net: net, nsOf: map[types.UID]string{}}
		f.data = f.real
		agents := f.real
		f.dialer = &transport.LocalNetns{AgentCommand: []string{agentExe}, Log: logr.Discard(),
			Netns: func(_ context.Context, inst transport.Instance) (string, error) {
				agents.mu.Lock()
				defer agents.mu.Unlock()
				return agents.nsOf[inst.UID], nil
			}}
	}
	f.makeGateway(gw, instances)
	f.start(model.Gates{LoadBalancer: true, ClusterIP: true})
	t.Cleanup(f.stopController)
	return f
}

// makeGateway creates, as a kube-ovn user and kube-ovn would, namespace ns-<gw> bound to Vpc
// <gw>-vpc, its Subnet, VpcNatGateway gw and its running instance Pods, and points f at them.
func (f *fixture) makeGateway(gw string, instances int) {
	t := f.t
	t.Helper()
	f.ns, f.gw = "ns-"+gw, gw
	ctx := context.Background()
	must(t, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}))
	// The test's namespace is bound to the gateway's Vpc, as kube-ovn users bind tenants (SPEC N1).
	must(t, k8s.Create(ctx, &kubeovnv1.Vpc{ObjectMeta: metav1.ObjectMeta{Name: gw + "-vpc"}, Spec: kubeovnv1.VpcSpec{Namespaces: []string{f.ns}}}))
	must(t, k8s.Create(ctx, &kubeovnv1.Subnet{ObjectMeta: metav1.ObjectMeta{Name: gw + "-subnet"},
		Spec: kubeovnv1.SubnetSpec{Vpc: gw + "-vpc", CIDRBlock: "10.0.1.0/24", Provider: "ovn"}}))
	must(t, k8s.Create(ctx, &kubeovnv1.VpcNatGateway{ObjectMeta: metav1.ObjectMeta{Name: gw},
		Spec: kubeovnv1.VpcNatGatewaySpec{Vpc: gw + "-vpc", Subnet: gw + "-subnet", LanIP: "10.0.1.254", Replicas: int32(instances)}}))
	sts := makeGatewayStatefulSet(t, gw, instances)
	for i := 0; i < instances; i++ {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("vpc-nat-gw-%s-%d", gw, i), Namespace: model.DefaultGatewayNamespace,
			// As kube-ovn's StatefulSet makes it (SPEC N5).
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts.Name, UID: sts.UID, Controller: ptr.To(true)}},
			Labels:          map[string]string{"app": model.GatewayAppPrefix + gw, model.LabelGatewayPod: "true"},
			Annotations:     map[string]string{model.AnnotationGatewayPod: gw, model.AnnotationGwInit: "true", "ovn.kubernetes.io/ip_address": fmt.Sprintf("10.0.1.%d", 250+i)}},
			Spec: corev1.PodSpec{NodeName: "n", Containers: []corev1.Container{{Name: "vpc-nat-gw", Image: "x"}}}}
		if f.real != nil {
			ns, err := f.real.net.AddNetns(strconv.Itoa(i))
			must(t, err)
			pod.Annotations[transport.NetnsAnnotation] = ns
		}
		must(t, k8s.Create(ctx, pod))
		pod.Status.Phase, pod.Status.PodIP = corev1.PodRunning, pod.Annotations["ovn.kubernetes.io/ip_address"]
		must(t, k8s.Status().Update(ctx, pod))
		f.pods = append(f.pods, pod.UID)
		if f.real != nil {
			f.real.alias(pod.UID, pod.Annotations[transport.NetnsAnnotation])
		}
	}
}

// makeGatewayStatefulSet creates kube-ovn's StatefulSet of gateway gw with replicas Pods, as
// kube-ovn makes it (its labels, the gateway named in its Pod template). No StatefulSet
// controller runs here: the tests make its Pods, with its owner reference.
func makeGatewayStatefulSet(t *testing.T, gw string, replicas int) *appsv1.StatefulSet {
	t.Helper()
	labels := map[string]string{"app": model.GatewayAppPrefix + gw, model.LabelGatewayPod: "true"}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: model.GatewayAppPrefix + gw, Namespace: model.DefaultGatewayNamespace, Labels: labels},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(int32(replicas)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{model.AnnotationGatewayPod: gw}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "vpc-nat-gw", Image: "x"}}}}}}
	must(t, k8s.Create(context.Background(), sts))
	return sts
}

// tenant is another tenant of f's gateway: namespace ns, bound to the gateway's Vpc as f's own,
// with f's controller, agents and gateway. Its helpers (service, get, hasEvent) work in ns.
func (f *fixture) tenant(ns string) *fixture {
	f.t.Helper()
	ctx := context.Background()
	must(f.t, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	var vpc kubeovnv1.Vpc
	must(f.t, k8s.Get(ctx, client.ObjectKey{Name: f.gw + "-vpc"}, &vpc))
	patch := client.MergeFrom(vpc.DeepCopy())
	vpc.Spec.Namespaces = append(vpc.Spec.Namespaces, ns)
	must(f.t, k8s.Patch(ctx, &vpc, patch))
	g := *f
	g.ns, g.stop, g.done = ns, nil, nil
	return &g
}

// sibling is a second gateway served by f's controller and agents (in memory), with its own
// namespace, Vpc, Subnet and instances.
func (f *fixture) sibling(gw string, instances int) *fixture {
	f.t.Helper()
	if f.agents == nil {
		f.t.Fatal("sibling gateways are for in-memory agents")
	}
	g := &fixture{t: f.t, agents: f.agents, data: f.data, dialer: f.dialer}
	g.makeGateway(gw, instances)
	return g
}

// controllerStarts numbers the controllers the tests start.
var controllerStarts atomic.Int64

func (f *fixture) start(gates model.Gates) {
	ctx, cancel := context.WithCancel(context.Background())
	f.stop, f.done = cancel, make(chan error, 1)
	log := zap.New(zap.WriteTo(testWriter{f.t}), zap.UseDevMode(true))
	opts := controller.Options{
		Flags: controller.Flags{EnableGwNftableLbSvc: gates.LoadBalancer, EnableGwNftableSvcClusterIP: gates.ClusterIP, Ledger: string(gates.Ledger),
			MaxIdentitiesPerGateway: gates.MaxIdentitiesPerGateway},
		Dialer: f.dialer, MetricsAddr: "0", HealthAddr: "0", MinSyncInterval: f.minSync,
		Name: fmt.Sprintf("vpcgw-gateway-%d", controllerStarts.Add(1)), // controller-runtime: one name per controller in a process
	}
	if f.options != nil {
		f.options(&opts)
	}
	go func() { f.done <- controller.Run(ctx, cfg, opts, log) }()
}

func (f *fixture) stopController() {
	if f.stop != nil {
		f.stop()
		if err := <-f.done; err != nil {
			f.t.Errorf("controller stopped with %v", err)
		}
		f.stop = nil
		f.t.Logf("plans so far: %v full, %v partial", metricValue(f.t, "vpcgw_full_plans_total", nil), metricValue(f.t, "vpcgw_partial_plans_total", nil))
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	if os.Getenv("VPCGW_TEST_LOGS") == "1" {
		w.t.Log(strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

// eipName is the cluster-wide name of the fixture's EIP name (both modes of a scenario run in
// one API server).
func (f *fixture) eipName(name string) string {
	if f.real != nil && name != "" {
		return name + "-n"
	}
	return name
}

func (f *fixture) eip(name, ip string, ready bool) {
	f.t.Helper()
	e := &kubeovnv1.IptablesEIP{ObjectMeta: metav1.ObjectMeta{Name: f.eipName(name)}, Spec: kubeovnv1.IptablesEIPSpec{NatGwDp: f.gw, V4ip: ip}}
	must(f.t, k8s.Create(context.Background(), e))
	if ready {
		e.Status.Ready, e.Status.IP = true, ip
		must(f.t, k8s.Status().Update(context.Background(), e))
	}
}

// service creates a LoadBalancer Service with one TCP port and an EndpointSlice of backends.
// service creates a LoadBalancer Service with one TCP port selecting app=<name>, and one Running,
// Ready backend Pod per address (named <name>-<i>); kube-controller-manager makes the slices.
func (f *fixture) service(name, eipName string, port int32, backends ...string) *corev1.Service {
	f.t.Helper()
	ctx := context.Background()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns,
		Annotations: map[string]string{model.AnnotationGateway: f.gw, model.AnnotationEIP: f.eipName(eipName)}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, AllocateLoadBalancerNodePorts: ptr.To(false),
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Name: "http", Port: port, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}}}
	must(f.t, k8s.Create(ctx, svc))
	for i, ip := range backends {
		f.backend(name, i, ip)
	}
	return svc
}

// backend creates backend Pod <app>-<i> with address ip, Running and Ready.
func (f *fixture) backend(app string, i int, ip string) *corev1.Pod {
	f.t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", app, i), Namespace: f.ns, Labels: map[string]string{"app": app},
		Annotations: map[string]string{"ovn.kubernetes.io/ip_address": ip, "ovn.kubernetes.io/logical_switch": f.gw + "-subnet", "ovn.kubernetes.io/allocated": "true"}},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "app", Image: "x", Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}}}}
	must(f.t, k8s.Create(context.Background(), pod))
	// kube-ovn's IPAM, played: the allocation a backend's address comes from (SPEC N2).
	allocate(f.t, kubeovnv1.NewIP(pod.Name, pod.Namespace, kubeovnv1.DefaultProvider, f.gw+"-subnet", ip))
	must(f.t, kcm.SetPodRunning(context.Background(), k8s, pod, ip, true))
	return pod
}

// setReady flips backend Pod <app>-<i>'s readiness, as a kubelet's probe would.
func (f *fixture) setReady(app string, i int, ready bool) {
	f.t.Helper()
	var pod corev1.Pod
	must(f.t, k8s.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: fmt.Sprintf("%s-%d", app, i)}, &pod))
	must(f.t, kcm.SetPodRunning(context.Background(), k8s, &pod, pod.Status.PodIP, ready))
}

func (f *fixture) get(name string) *corev1.Service {
	var svc corev1.Service
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: f.ns, Name: name}, &svc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		f.t.Fatal(err)
	}
	return &svc
}

// records are the Service's ServiceRecords, as an operator lists them (SPEC R6).
func (f *fixture) records(name string) []vpcgwv1alpha1.ServiceRecord {
	var rs vpcgwv1alpha1.ServiceRecordList
	must(f.t, k8s.List(context.Background(), &rs, client.MatchingLabels{model.LabelRecordNamespace: f.ns, model.LabelRecordName: name}))
	return rs.Items
}

// dnatRules are the IptablesDnatRules carrying the Service's record labels: none in the default
// ledger form (kube-ovn-controller would program them, SPEC K2).
func (f *fixture) dnatRules(name string) []kubeovnv1.IptablesDnatRule {
	var rs kubeovnv1.IptablesDnatRuleList
	must(f.t, k8s.List(context.Background(), &rs, client.MatchingLabels{model.LabelRecordNamespace: f.ns, model.LabelRecordName: name}))
	return rs.Items
}

func (f *fixture) eventually(what string, cond func() bool) {
	f.t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 20*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		f.t.Fatalf("waiting for %s: %v", what, err)
	}
}

func (f *fixture) hasEvent(svc, reason, inMessage string) bool {
	var evs corev1.EventList
	must(f.t, k8s.List(context.Background(), &evs, client.InNamespace(f.ns)))
	for _, ev := range evs.Items {
		if ev.InvolvedObject.Name == svc && ev.Reason == reason && strings.Contains(ev.Message, inMessage) {
			return true
		}
	}
	return false
}

func ingressIs(svc *corev1.Service, ip string) bool {
	if svc == nil {
		return false
	}
	ing := svc.Status.LoadBalancer.Ingress
	if ip == "" {
		return len(ing) == 0
	}
	return len(ing) == 1 && ing[0].IP == ip
}

func hasFinalizer(svc *corev1.Service) bool {
	return svc != nil && slices.Contains(svc.Finalizers, model.Finalizer)
}

// allReady: the Service has one record, Ready, serving vip (its EIP, or its ClusterIP when the
// EIP part is not served).
func allReady(rs []vpcgwv1alpha1.ServiceRecord, vip string) bool {
	if len(rs) != 1 {
		return false
	}
	r := rs[0]
	served := r.Spec.EIPAddress
	if served == "" {
		served = r.Spec.ClusterIP
	}
	return r.Status.Ready && served == vip
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// allocate plays kube-ovn's IPAM: it writes the IP object of an allocation, as kube-ovn does for
// a new Pod and again for a recreated Pod of the same name.
func allocate(t *testing.T, ip *kubeovnv1.IP) {
	t.Helper()
	ctx := context.Background()
	err := k8s.Create(ctx, ip)
	if apierrors.IsAlreadyExists(err) {
		var cur kubeovnv1.IP
		must(t, k8s.Get(ctx, client.ObjectKeyFromObject(ip), &cur))
		cur.Spec = ip.Spec
		err = k8s.Update(ctx, &cur)
	}
	must(t, err)
}
