package release_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/controller"
	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/kcm"
	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/release"
	"github.com/vpcgw/vpcgw/internal/testutil"
	"github.com/vpcgw/vpcgw/internal/transport"
	"github.com/vpcgw/vpcgw/internal/transport/agenttest"
)

// agents are in-memory agents that keep the last state each instance acknowledged.
type agents struct {
	mu   sync.Mutex
	last map[types.UID]gwstate.State
}

func (a *agents) Dial(_ context.Context, inst transport.Instance) (*transport.Conn, error) {
	conn, _ := agenttest.Pipe(func(st gwstate.State) gwstate.Ack {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.last[inst.UID] = st
		return gwstate.Ack{}
	})
	return conn, nil
}

func (a *agents) state(uid types.UID) (gwstate.State, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st, ok := a.last[uid]
	return st, ok
}

// vpcgw release, against the API server with agents in memory: beside kube-ovn's own Service
// controller it releases nothing and says so (K10); otherwise it programs every instance with the
// release state, and clears ingress, claim stamp, records and finalizer, and Remains finds nothing.
// covers: O4, K10, T1, T2, N8
func TestRelease(t *testing.T) {
	if cfg == nil {
		testutil.Skip(t, envSkip)
	}
	ctx := context.Background()
	const deployment, gw, ns = "kovn-release", "gw-rel", "ns-rel"
	pod := makeGateway(t, gw, ns)
	must(t, k8s.Create(ctx, &kubeovnv1.IptablesEIP{ObjectMeta: metav1.ObjectMeta{Name: "eip-rel"}, Spec: kubeovnv1.IptablesEIPSpec{NatGwDp: gw, V4ip: "172.18.9.30"}}))
	var eip kubeovnv1.IptablesEIP
	must(t, k8s.Get(ctx, client.ObjectKey{Name: "eip-rel"}, &eip))
	eip.Status.Ready, eip.Status.IP = true, "172.18.9.30"
	must(t, k8s.Status().Update(ctx, &eip))
	serveService(t, ns, gw, "web", "eip-rel", "10.0.1.31")

	a := &agents{last: map[types.UID]gwstate.State{}}
	flags := controller.Flags{EnableGwNftableLbSvc: true, EnableGwNftableSvcClusterIP: true, KubeOVNControllerDeployment: deployment}
	stop := startController(t, controller.Options{Flags: flags, Dialer: a, MetricsAddr: "0", HealthAddr: "0", Name: "vpcgw-gateway-release-test"})
	eventually(t, "served", func() bool {
		s := get(t, ns, "web")
		return ingressIs(s, "172.18.9.30") && len(records(t, ns, "web")) > 0 && model.HasClaimStamp(s)
	})
	stop() // as the chart's hook runs after the controller stood by

	opts := controller.Options{Flags: flags, Dialer: a, Name: "vpcgw-gateway-release"}
	d := kubeOVNDeployment(deployment, "--enable-lb=false", "--enable-gw-nftable-lb-svc=true")
	must(t, k8s.Create(ctx, d))
	res, err := release.Run(ctx, cfg, opts, release.Options{Timeout: time.Minute}, logr.Discard())
	if err != nil || res.Released || res.Message == "" {
		t.Fatalf("release beside kube-ovn's own controller = %+v, %v; want nothing released, and why", res, err)
	}
	if s := get(t, ns, "web"); !slices.Contains(s.Finalizers, model.Finalizer) || !ingressIs(s, "172.18.9.30") || len(records(t, ns, "web")) == 0 {
		t.Fatalf("release beside kube-ovn's own controller touched the Service: %v, %d records", s, len(records(t, ns, "web")))
	}
	must(t, k8s.Delete(ctx, d))

	// Hostile review R1: the tenant strips vpcgw's finalizer from its served Service (a plain
	// edit), and a look-alike LoadBalancer Service names a gateway it may not use and carries
	// another implementation's ingress. Neither stalls the release, and the look-alike's ingress
	// stays as that implementation wrote it.
	web := get(t, ns, "web")
	web.Finalizers = slices.DeleteFunc(web.Finalizers, func(f string) bool { return f == model.Finalizer })
	must(t, k8s.Update(ctx, web))
	lookalike := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lookalike", Annotations: map[string]string{model.AnnotationGateway: "gw-not-mine"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}}
	must(t, k8s.Create(ctx, lookalike))
	lookalike.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.7"}}
	must(t, k8s.Status().Update(ctx, lookalike))

	opts.Name = "vpcgw-gateway-release-2"
	res, err = release.Run(ctx, cfg, opts, release.Options{Timeout: 2 * time.Minute}, logr.Discard())
	if err != nil || !res.Released {
		t.Fatalf("release = %+v, %v", res, err)
	}
	if s := get(t, ns, "web"); slices.Contains(s.Finalizers, model.Finalizer) || !ingressIs(s, "") || len(records(t, ns, "web")) != 0 || model.HasClaimStamp(s) {
		t.Errorf("after release: finalizers %v, ingress %v, %d records, conditions %v", s.Finalizers, s.Status.LoadBalancer.Ingress, len(records(t, ns, "web")), s.Status.Conditions)
	}
	st, ok := a.state(pod)
	if !ok || !st.Release || len(st.Identities) != 0 {
		t.Errorf("the instance's last state = %+v (%v), want the release state", st, ok)
	}
	if s := get(t, ns, "lookalike"); !ingressIs(s, "198.51.100.7") {
		t.Errorf("the release wrote another implementation's ingress: %v", s.Status.LoadBalancer.Ingress)
	}
	left, err := release.Remains(ctx, k8s, nil, nil)
	if err != nil || len(left) != 0 {
		t.Errorf("Remains after release = %v, %v", left, err)
	}
}

// startController runs the controller until the returned func stops it.
func startController(t *testing.T, opts controller.Options) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- controller.Run(ctx, cfg, opts, logr.Discard()) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("controller stopped with %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// makeGateway creates, as a kube-ovn user and kube-ovn would, namespace ns bound to Vpc
// <gw>-vpc, its Subnet, VpcNatGateway gw and its running instance, and returns the instance's UID.
func makeGateway(t *testing.T, gw, ns string) types.UID {
	ctx := context.Background()
	must(t, kcm.EnsureNode(ctx, k8s, "node-1"))
	must(t, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	must(t, k8s.Create(ctx, &kubeovnv1.Vpc{ObjectMeta: metav1.ObjectMeta{Name: gw + "-vpc"}, Spec: kubeovnv1.VpcSpec{Namespaces: []string{ns}}}))
	must(t, k8s.Create(ctx, &kubeovnv1.Subnet{ObjectMeta: metav1.ObjectMeta{Name: gw + "-subnet"},
		Spec: kubeovnv1.SubnetSpec{Vpc: gw + "-vpc", CIDRBlock: "10.0.1.0/24", Provider: "ovn"}}))
	must(t, k8s.Create(ctx, &kubeovnv1.VpcNatGateway{ObjectMeta: metav1.ObjectMeta{Name: gw},
		Spec: kubeovnv1.VpcNatGatewaySpec{Vpc: gw + "-vpc", Subnet: gw + "-subnet", LanIP: "10.0.1.254", Replicas: 1}}))
	// kube-ovn's StatefulSet of the gateway: its Pod is an instance as one of its replicas (SPEC N5).
	gwLabels := map[string]string{"app": model.GatewayAppPrefix + gw, model.LabelGatewayPod: "true"}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: model.GatewayAppPrefix + gw, Namespace: model.DefaultGatewayNamespace, Labels: gwLabels},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: gwLabels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: gwLabels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "vpc-nat-gw", Image: "x"}}}}}}
	must(t, k8s.Create(ctx, sts))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "vpc-nat-gw-" + gw + "-0", Namespace: model.DefaultGatewayNamespace,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts.Name, UID: sts.UID, Controller: ptr.To(true)}},
		Labels:          map[string]string{"app": model.GatewayAppPrefix + gw, model.LabelGatewayPod: "true"},
		Annotations:     map[string]string{model.AnnotationGatewayPod: gw, model.AnnotationGwInit: "true"}},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "vpc-nat-gw", Image: "x"}}}}
	must(t, k8s.Create(ctx, pod))
	pod.Status.Phase, pod.Status.PodIP = corev1.PodRunning, "10.0.1.250"
	must(t, k8s.Status().Update(ctx, pod))
	return pod.UID
}

// serveService creates LoadBalancer Service name on eip with one backend Pod at ip, its kube-ovn
// allocation and its EndpointSlice (no EndpointSlice controller runs here).
func serveService(t *testing.T, ns, gw, name, eip, ip string) {
	ctx := context.Background()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
		Annotations: map[string]string{model.AnnotationGateway: gw, model.AnnotationEIP: eip}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, AllocateLoadBalancerNodePorts: ptr.To(false),
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}
	must(t, k8s.Create(ctx, svc))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name + "-0", Namespace: ns, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "app", Image: "x"}}}}
	must(t, k8s.Create(ctx, pod))
	must(t, k8s.Create(ctx, kubeovnv1.NewIP(pod.Name, ns, kubeovnv1.DefaultProvider, gw+"-subnet", ip)))
	must(t, kcm.SetPodRunning(ctx, k8s, pod, ip, true))
	must(t, k8s.Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name + "-1", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod.Name, UID: pod.UID}}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(80)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}))
}

// kubeOVNDeployment is kube-ovn-controller's Deployment with args (SPEC K10).
func kubeOVNDeployment(name string, args ...string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: model.DefaultGatewayNamespace, Name: name},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "kube-ovn-controller", Image: "docker.io/kubeovn/kube-ovn:v1.16.2", Args: args}}}}},
	}
}

func get(t *testing.T, ns, name string) *corev1.Service {
	var svc corev1.Service
	must(t, k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &svc))
	return &svc
}

func records(t *testing.T, ns, name string) []vpcgwv1alpha1.ServiceRecord {
	var rs vpcgwv1alpha1.ServiceRecordList
	must(t, k8s.List(context.Background(), &rs, client.MatchingLabels{model.LabelRecordNamespace: ns, model.LabelRecordName: name}))
	return rs.Items
}

func ingressIs(svc *corev1.Service, ip string) bool {
	ing := svc.Status.LoadBalancer.Ingress
	if ip == "" {
		return len(ing) == 0
	}
	return len(ing) == 1 && ing[0].IP == ip
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
