package inspect

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/status"
)

const (
	testNS  = "t1"
	testEIP = "172.18.0.10"
)

// tenantClient is a fake API server holding a served LoadBalancer Service (its ingress holds its
// EIP's address), one that nothing shows served and, with published, the controller's status; it
// refuses reads of what is in refuse (a kind's list name, or "configmaps" for the status) as
// Forbidden, and cluster-wide lists of namespaced kinds, as it does for a tenant bound in testNS.
func tenantClient(t *testing.T, published bool, refuse ...string) client.Client {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, kubeovnv1.AddToScheme, vpcgwv1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	lb := func(name, eip string, ingress ...string) *corev1.Service {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, UID: k8stypes.UID("uid-" + name),
			Annotations: map[string]string{model.AnnotationGateway: "gw1", model.AnnotationEIP: eip}},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.10",
				Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}}
		for _, ip := range ingress {
			svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
		}
		return svc
	}
	objs := []client.Object{lb("web", "eip1", testEIP), lb("quiet", "eip2"),
		&kubeovnv1.IptablesEIP{ObjectMeta: metav1.ObjectMeta{Name: "eip1"}, Spec: kubeovnv1.IptablesEIPSpec{NatGwDp: "gw1", V4ip: testEIP},
			Status: kubeovnv1.IptablesEIPStatus{Ready: true, IP: testEIP}}}
	if published {
		data, err := status.Encode(status.Published{Version: "v-test", Holder: "h", Heartbeat: time.Now(),
			Gates: status.Gates{EnableGwNftableLbSvc: true, Ledger: "service-record"}})
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: status.DefaultNamespace, Name: status.ConfigMapName}, Data: data})
	}
	forbid := func(what string) error {
		return apierrors.NewForbidden(schema.GroupResource{Resource: what}, "", errors.New("test"))
	}
	return fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).
		WithIndex(&corev1.Event{}, "involvedObject.kind", func(o client.Object) []string { return []string{o.(*corev1.Event).InvolvedObject.Kind} }).
		WithInterceptorFuncs(interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if _, ok := obj.(*corev1.ConfigMap); ok && slices.Contains(refuse, "configmaps") {
					return forbid("configmaps")
				}
				return c.Get(ctx, key, obj, opts...)
			},
			List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
				gvk, err := c.GroupVersionKindFor(list)
				if err != nil {
					return err
				}
				lo := (&client.ListOptions{}).ApplyOptions(opts)
				kind := strings.TrimSuffix(gvk.Kind, "List")
				namespaced := slices.Contains([]string{"Service", "Pod", "EndpointSlice", "Event", "StatefulSet"}, kind)
				if slices.Contains(refuse, kind) || namespaced && lo.Namespace != testNS {
					return forbid(kind)
				}
				return c.List(ctx, list, opts...)
			},
		}).Build()
}

// tenantView reads as the plugin does: the controller's status, then the snapshot.
func tenantView(t *testing.T, c client.Client) *View {
	t.Helper()
	info, pub, err := ReadController(context.Background(), c, status.DefaultNamespace, status.DefaultStaleAfter, time.Now())
	if err != nil {
		t.Fatalf("ReadController: %v", err)
	}
	rd, err := Snapshot(context.Background(), c, SnapshotOptions{Namespace: testNS, Events: !info.Running})
	if err != nil {
		t.Fatalf("Snapshot fails for what the user may not read: %v", err)
	}
	return NewView(rd, info, pub)
}

func statusOf(t *testing.T, v *View, name string) ServiceStatus {
	t.Helper()
	for _, st := range v.Services(testNS) {
		if st.Name == name {
			return st
		}
	}
	t.Fatalf("no %s/%s in %+v", testNS, name, v.Services(testNS))
	return ServiceStatus{}
}

// The controller's status forbidden or missing, and kube-ovn's kinds not listable: no gate is
// assumed, the plugin says which permission or flag is missing, a Service whose ingress holds
// its EIP's address is served on that basis, one that nothing shows served is Unknown (never
// false), and no refused read fails the snapshot.
// covers: O2, T1
func TestUnknownWhenTheStatusCannotBeRead(t *testing.T) {
	kubeOVN := []string{"VpcNatGateway", "IptablesEIP", "Subnet", "Vpc", "IP", "ServiceRecord", "IptablesDnatRule"}
	for _, tc := range []struct {
		name      string
		published bool
		refuse    []string
		message   string // in ControllerInfo.Message and in Unknown
		basis     string // demo/web's basis
	}{
		{"status forbidden, kube-ovn's kinds forbidden", true, append([]string{"configmaps"}, kubeOVN...),
			"get configmaps vpcgw-controller in namespace vpcgw-system: forbidden", "(you may not read the EIP to compare)"},
		{"status missing (another namespace?), kube-ovn's kinds readable", false, nil,
			"ConfigMap vpcgw-controller not found in namespace vpcgw-system (no controller runs there; if it runs in another namespace, pass --controller-namespace", "the address of IptablesEIP eip1"},
		{"a running controller, kube-ovn's kinds forbidden", true, kubeOVN, "", "(you may not read the EIP to compare)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := tenantView(t, tenantClient(t, tc.published, tc.refuse...))
			if !v.RulesUnknown() {
				t.Fatalf("the rules are applied with %v refused", tc.refuse)
			}
			if tc.message != "" && (!strings.Contains(v.Controller.Message, tc.message) || v.Controller.GatesSource != GatesUnknown || !v.Controller.GatesAssumed ||
				v.Controller.Gates.EnableGwNftableLbSvc || !slices.ContainsFunc(v.Unknown(), func(u string) bool { return strings.Contains(u, tc.message) })) {
				t.Errorf("controller %+v, unknown %q: want %q and the gates unknown", v.Controller, v.Unknown(), tc.message)
			}
			web := statusOf(t, v, "web")
			if web.ReadyStatus != ReadyTrue || !web.Ready || web.State != StateServed || web.EIPPart != (Part{State: PartServed, VIP: testEIP}) ||
				!strings.Contains(web.Basis, "its ingress holds "+testEIP) || !strings.Contains(web.Basis, tc.basis) {
				t.Errorf("web (ingress %s): %+v", testEIP, web)
			}
			quiet := statusOf(t, v, "quiet")
			if quiet.ReadyStatus != ReadyUnknown || quiet.Ready || quiet.State != StateUnknown || quiet.EIPPart.State != PartUnknown || quiet.ClusterIPPart.State != PartUnknown {
				t.Errorf("quiet (nothing shows it served): %+v", quiet)
			}
			ex, err := v.Explain(testNS, "quiet")
			if err != nil || ex.Served || !strings.HasPrefix(ex.Summary, "Whether Service t1/quiet is served is unknown") {
				t.Errorf("explain quiet: %+v, %v", ex, err)
			}
		})
	}
}

// A forbidden list of each of kube-ovn's kinds, of the records, of the gateway pods and
// StatefulSets and of events: the snapshot is read, and one warning names every refused read and
// what it costs.
// covers: O2
func TestRefusedReadsDegrade(t *testing.T) {
	refuse := []string{"VpcNatGateway", "IptablesEIP", "Subnet", "Vpc", "IP", "ServiceRecord", "IptablesDnatRule", "Event"}
	c := tenantClient(t, true, refuse...)
	rd, err := Snapshot(context.Background(), c, SnapshotOptions{Namespace: testNS})
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	want := []string{"list vpc-nat-gateways.kubeovn.io", "list iptables-eips.kubeovn.io", "list subnets.kubeovn.io", "list vpcs.kubeovn.io", "list ips.kubeovn.io"}
	if !slices.Equal(rd.Unknown, want) || !rd.RecordsUnknown || !rd.GatewaysUnknown() || !rd.EIPsUnknown() || rd.EventsUnknown == "" {
		t.Errorf("unknown %q, records unknown %v, events %q", rd.Unknown, rd.RecordsUnknown, rd.EventsUnknown)
	}
	w := strings.Join(rd.Warnings, "\n")
	for _, s := range []string{"you may not list vpc-nat-gateways.kubeovn.io, iptables-eips.kubeovn.io, subnets.kubeovn.io, vpcs.kubeovn.io, ips.kubeovn.io (the controller's rules cannot",
		"list servicerecords.vpcgw.io, iptables-dnat-rules.kubeovn.io (whether the records are Ready is unknown)",
		"list pods in namespace kube-system, statefulsets.apps in namespace kube-system (the instances shown are those the controller reports)",
		"list events in namespace t1 (the controller's events on the Services are not read)", "ClusterRole vpcgw-view grants these reads"} {
		if !strings.Contains(w, s) {
			t.Errorf("warnings lack %q:\n%s", s, w)
		}
	}
	// The gateway is unknown, not missing.
	if gs := NewView(rd, ControllerInfo{Running: true, GatesSource: GatesFromController}, nil).GatewayState("gw1"); gs.Exists || !gs.ExistsUnknown {
		t.Errorf("gateway %+v", gs)
	}
}

// With everything readable and a running controller, the rules apply: the basis says so.
// covers: O2
func TestRulesWhenEverythingIsRead(t *testing.T) {
	v := tenantView(t, tenantClient(t, true))
	if v.RulesUnknown() || len(v.Unknown()) != 0 {
		t.Fatalf("rules unknown: %q", v.Unknown())
	}
	if web := statusOf(t, v, "web"); web.Basis != BasisRules || web.ReadyStatus == ReadyUnknown {
		t.Errorf("web %+v", web)
	}
}
