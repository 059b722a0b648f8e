package controller_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
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
	"github.com/vpcgw/vpcgw/config/crd"
	"github.com/vpcgw/vpcgw/internal/controller"
	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

var (
	cfg     *rest.Config
	k8s     client.Client
	envSkip string
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, b)); assets == "" || err != nil {
			envSkip = "envtest binaries missing: set KUBEBUILDER_ASSETS to a directory with kube-apiserver and etcd (hack/tools/build-assets.sh)"
			return m.Run()
		}
	}
	crds, err := crd.All()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env := &envtest.Environment{CRDInstallOptions: envtest.CRDInstallOptions{CRDs: crds}}
	if cfg, err = env.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "starting envtest:", err)
		return 1
	}
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
	return m.Run()
}

// fixture is one gateway with its objects, in a namespace of its own.
type fixture struct {
	t      *testing.T
	ns     string
	gw     string
	agents *fakeAgents
	pods   []types.UID
	stop   context.CancelFunc
	done   chan error
	// minSync is the controller's MinSyncInterval (0: none).
	minSync time.Duration
}

func newFixture(t *testing.T, gw string, instances int) *fixture {
	t.Helper()
	if cfg == nil {
		testutil.Skip(t, envSkip)
	}
	f := &fixture{t: t, ns: "ns-" + gw, gw: gw, agents: newFakeAgents()}
	ctx := context.Background()
	must(t, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}))
	must(t, k8s.Create(ctx, &kubeovnv1.Subnet{ObjectMeta: metav1.ObjectMeta{Name: gw + "-subnet"},
		Spec: kubeovnv1.SubnetSpec{Vpc: gw + "-vpc", CIDRBlock: "10.0.1.0/24", Provider: "ovn"}}))
	must(t, k8s.Create(ctx, &kubeovnv1.VpcNatGateway{ObjectMeta: metav1.ObjectMeta{Name: gw},
		Spec: kubeovnv1.VpcNatGatewaySpec{Vpc: gw + "-vpc", Subnet: gw + "-subnet", LanIP: "10.0.1.254", Replicas: int32(instances)}}))
	for i := 0; i < instances; i++ {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("vpc-nat-gw-%s-%d", gw, i), Namespace: model.DefaultGatewayNamespace,
			Labels:      map[string]string{"app": model.GatewayAppPrefix + gw, model.LabelGatewayPod: "true"},
			Annotations: map[string]string{model.AnnotationGatewayPod: gw, model.AnnotationGwInit: "true", "ovn.kubernetes.io/ip_address": fmt.Sprintf("10.0.1.%d", 250+i)}},
			Spec: corev1.PodSpec{NodeName: "n", Containers: []corev1.Container{{Name: "vpc-nat-gw", Image: "x"}}}}
		must(t, k8s.Create(ctx, pod))
		pod.Status.Phase = corev1.PodRunning
		must(t, k8s.Status().Update(ctx, pod))
		f.pods = append(f.pods, pod.UID)
	}
	f.start(model.Gates{LoadBalancer: true, ClusterIP: true})
	t.Cleanup(f.stopController)
	return f
}

func (f *fixture) start(gates model.Gates) {
	ctx, cancel := context.WithCancel(context.Background())
	f.stop, f.done = cancel, make(chan error, 1)
	log := zap.New(zap.WriteTo(testWriter{f.t}), zap.UseDevMode(true))
	go func() {
		f.done <- controller.Run(ctx, cfg, controller.Options{
			Flags:  controller.Flags{EnableGwNftableLbSvc: gates.LoadBalancer, EnableGwNftableSvcClusterIP: gates.ClusterIP},
			Dialer: f.agents, MetricsAddr: "0", HealthAddr: "0", MinSyncInterval: f.minSync,
		}, log)
	}()
}

func (f *fixture) stopController() {
	if f.stop != nil {
		f.stop()
		if err := <-f.done; err != nil {
			f.t.Errorf("controller stopped with %v", err)
		}
		f.stop = nil
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	if os.Getenv("VPCGW_TEST_LOGS") == "1" {
		w.t.Log(strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

func (f *fixture) eip(name, ip string, ready bool) {
	f.t.Helper()
	e := &kubeovnv1.IptablesEIP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kubeovnv1.IptablesEIPSpec{NatGwDp: f.gw, V4ip: ip}}
	must(f.t, k8s.Create(context.Background(), e))
	if ready {
		e.Status.Ready, e.Status.IP = true, ip
		must(f.t, k8s.Status().Update(context.Background(), e))
	}
}

// service creates a LoadBalancer Service with one TCP port and an EndpointSlice of backends.
func (f *fixture) service(name, eipName string, port int32, backends ...string) *corev1.Service {
	f.t.Helper()
	ctx := context.Background()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns,
		Annotations: map[string]string{model.AnnotationGateway: f.gw, model.AnnotationEIP: eipName}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, AllocateLoadBalancerNodePorts: ptr.To(false),
			Ports: []corev1.ServicePort{{Name: "http", Port: port, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}}}
	must(f.t, k8s.Create(ctx, svc))
	es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name + "-1", Namespace: f.ns,
		Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}}}
	for _, b := range backends {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{b}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	must(f.t, k8s.Create(ctx, es))
	return svc
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

func (f *fixture) records(name string) []kubeovnv1.IptablesDnatRule {
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

func allReady(rs []kubeovnv1.IptablesDnatRule, v4ip string) bool {
	for _, r := range rs {
		if !r.Status.Ready || r.Status.V4IP != v4ip {
			return false
		}
	}
	return len(rs) > 0
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
