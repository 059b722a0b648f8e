// covers: W1, W2, W3, W4, W5, W6
//
// The admission handlers, called with AdmissionRequests as the API server sends them, reading a
// fake client with the same indexes as the cache. The envtest tests cover the same rules through
// a real API server; here also what the matchConditions keep from the webhook there (the
// controller's own writes).
package webhook

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/model"
	vpcgwscheme "github.com/vpcgw/vpcgw/internal/scheme"
)

// builderIndexer registers IndexFields' indexes on a fake client builder.
type builderIndexer struct{ b *fake.ClientBuilder }

func (i builderIndexer) IndexField(_ context.Context, obj client.Object, field string, fn client.IndexerFunc) error {
	i.b.WithIndex(obj, field, fn)
	return nil
}

func newTestHandlers(t testing.TB, objs ...client.Object) *Handlers {
	t.Helper()
	scheme, err := vpcgwscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	b := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...)
	if err := IndexFields(context.Background(), builderIndexer{b}); err != nil {
		t.Fatal(err)
	}
	return NewHandlers(b.Build(), scheme, ctrlUser)
}

func raw(t *testing.T, obj runtime.Object) runtime.RawExtension {
	t.Helper()
	if obj == nil {
		return runtime.RawExtension{}
	}
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return runtime.RawExtension{Raw: data}
}

func request(t *testing.T, op admissionv1.Operation, user, name string, old, obj runtime.Object) admission.Request {
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: op, Name: name, UserInfo: authenticationv1.UserInfo{Username: user},
		Object: raw(t, obj), OldObject: raw(t, old),
	}}
}

func expect(t *testing.T, resp admission.Response, allowed bool, fragment string) {
	t.Helper()
	if resp.Allowed != allowed {
		t.Fatalf("allowed=%v (%+v), want %v", resp.Allowed, resp.Result, allowed)
	}
	if fragment != "" && (resp.Result == nil || !strings.Contains(resp.Result.Message, fragment)) {
		t.Fatalf("message %+v does not contain %q", resp.Result, fragment)
	}
}

func TestServiceHandler(t *testing.T) {
	lb := corev1.ServiceTypeLoadBalancer
	holder := svc("old", lb, a(gwAnn, "gw1", eipAnn, "eip1"), created(10))
	// gw2 admits ns too (its Vpc is vpc1); gw3's Vpc binds no namespace.
	gw2 := &kubeovnv1.VpcNatGateway{ObjectMeta: metav1.ObjectMeta{Name: "gw2"}, Spec: kubeovnv1.VpcNatGatewaySpec{Vpc: "vpc1"}}
	gw3 := &kubeovnv1.VpcNatGateway{ObjectMeta: metav1.ObjectMeta{Name: "gw3"}, Spec: kubeovnv1.VpcNatGatewaySpec{Vpc: "vpc3"}}
	closed := eipObj("eip-closed", "gw1")
	closed.Annotations = map[string]string{model.AnnotationAllowedNamespaces: "tenant-b"}
	h := newTestHandlers(t, holder, eipObj("eip1", "gw1"), eipObj("eip2", "gw2"), eipObj("eip3", "gw3"), closed, gw2, gw3, admittedGW.DeepCopy(), admittedVpc.DeepCopy())
	ctx := context.Background()

	expect(t, h.Service(ctx, request(t, admissionv1.Create, "alice", "new", nil, svc("new", lb, a(gwAnn, "gw1", eipAnn, "eip1")))),
		false, "IptablesEIP eip1 port 80/TCP is already held by Service ns/old")
	expect(t, h.Service(ctx, request(t, admissionv1.Create, "alice", "new", nil, svc("new", lb, a(gwAnn, "gw1", eipAnn, "eip2")))),
		false, `IptablesEIP eip2 is not an EIP of gateway gw1`)
	expect(t, h.Service(ctx, request(t, admissionv1.Create, "alice", "new", nil, svc("new", lb, a(gwAnn, "gw1", eipAnn, "missing")))), true, "")
	// An EIP the namespace may not use (of a gateway that does not admit it, or whose allow-list
	// does not name it) is answered as a missing one (SPEC N8).
	expect(t, h.Service(ctx, request(t, admissionv1.Create, "alice", "new", nil, svc("new", lb, a(gwAnn, "gw1", eipAnn, "eip3")))), true, "")
	expect(t, h.Service(ctx, request(t, admissionv1.Create, "alice", "new", nil, svc("new", lb, a(gwAnn, "gw1", eipAnn, "eip-closed")))), true, "")
	expect(t, h.Service(ctx, request(t, admissionv1.Create, "alice", "new", nil, svc("new", lb, a(gwAnn, "gw1")))),
		false, "also needs annotation ovn.kubernetes.io/eip")
	// The holder itself, updated without touching its annotations, and even with them unchanged
	// but now in conflict: admitted.
	expect(t, h.Service(ctx, request(t, admissionv1.Update, "alice", "old", holder, with(holder, func(s *corev1.Service) { s.Labels = a("x", "y") }))), true, "")
	expect(t, h.Service(ctx, request(t, admissionv1.Update, "alice", "old", holder, svc("old", lb, a(gwAnn, "gw2", eipAnn, "eip1")))),
		false, "cannot change from \"gw1\" to \"gw2\"")
	expect(t, h.Service(ctx, request(t, admissionv1.Create, "alice", "x", nil, nil)), false, "the request carries no Service")
	// SPEC N4: the port bound comes first.
	var many []corev1.ServicePort
	for i := range 100 {
		many = append(many, corev1.ServicePort{Port: int32(1000 + i), Protocol: corev1.ProtocolTCP})
	}
	expect(t, h.Service(ctx, request(t, admissionv1.Create, "alice", "huge", nil, svc("huge", lb, a(gwAnn, "gw1", eipAnn, "eip1"), ports(many...)))),
		false, "the Service has 100 TCP/UDP ports")
}

func TestRecordHandler(t *testing.T) {
	h := newTestHandlers(t)
	ctx := context.Background()
	share := rule("lb-web-0123456789ab", kubeovnv1.DnatRuleTypeShare, map[string]string{model.LabelRecordName: "web", model.LabelRecord: "true", model.LabelRecordUID: "uid-web"})
	excl := rule("e1", kubeovnv1.DnatRuleTypeExclusive, nil)
	for _, op := range []admissionv1.Operation{admissionv1.Create, admissionv1.Update, admissionv1.Delete} {
		var old, obj runtime.Object = share, share
		if op == admissionv1.Create {
			old = nil
		}
		if op == admissionv1.Delete {
			obj = nil
		}
		expect(t, h.Record(ctx, request(t, op, ctrlUser, share.Name, old, obj)), true, "")
		expect(t, h.Record(ctx, request(t, op, "alice", share.Name, old, obj)), false, "controller-owned accounting record")
		var eold, eobj runtime.Object = excl, excl
		if op == admissionv1.Create {
			eold = nil
		}
		if op == admissionv1.Delete {
			eobj = nil
		}
		expect(t, h.Record(ctx, request(t, op, "alice", excl.Name, eold, eobj)), true, "")
	}
}

// covers: W5, W6, N1
func TestDeleteHandlers(t *testing.T) {
	eip := eipObj("eip1", "gw1")
	r := record("r1", "ns", "web", "gw1", string(eip.UID))
	vpc := &kubeovnv1.Vpc{ObjectMeta: metav1.ObjectMeta{Name: "vpc1"}, Spec: kubeovnv1.VpcSpec{Namespaces: []string{"ns"}}}
	// A Service of a namespace the Vpc does not admit does not bind the gateway (SPEC N1).
	intruder := svc("squat", corev1.ServiceTypeClusterIP, a(gwAnn, "gw2"))
	intruder.Namespace = "tenant-b"
	h := newTestHandlers(t, &r, svc("db", corev1.ServiceTypeClusterIP, a(gwAnn, "gw1")), vpc, intruder)
	ctx := context.Background()
	expect(t, h.EIP(ctx, request(t, admissionv1.Delete, "alice", "eip1", eip, nil)), false, "IptablesEIP eip1 is in use by 1 Service")
	expect(t, h.EIP(ctx, request(t, admissionv1.Delete, "alice", "eip2", eipObj("eip2", "gw1"), nil)), true, "")
	gw := &kubeovnv1.VpcNatGateway{}
	gw.Name, gw.Spec.Vpc = "gw1", "vpc1"
	expect(t, h.Gateway(ctx, request(t, admissionv1.Delete, "alice", "gw1", gw, nil)), false, "VpcNatGateway gw1 still serves 2 Services")
	gw2 := gw.DeepCopy()
	gw2.Name = "gw2"
	expect(t, h.Gateway(ctx, request(t, admissionv1.Delete, "alice", "gw2", gw2, nil)), true, "")
}

// covers: K7
// kube-ovn-controller's own requests are admitted whatever vpcgw would say: its start-up GC deletes
// the gateways of deleted Vpcs (and exits when that fails), it updates Services.
func TestKubeOVNExempt(t *testing.T) {
	const kubeOVN = "system:serviceaccount:kube-system:ovn"
	bound := svc("web", corev1.ServiceTypeLoadBalancer, a(gwAnn, "gw1", eipAnn, "eip1"))
	h := newTestHandlers(t, bound)
	h.KubeOVNUser = kubeOVN
	ctx := context.Background()
	gwDelete := func(user string) admission.Request {
		r := request(t, admissionv1.Delete, user, "gw1", nil, nil)
		return r
	}
	expect(t, h.exemptKubeOVN(h.Gateway)(ctx, gwDelete("alice")), false, "still serves 1 Service")
	expect(t, h.exemptKubeOVN(h.Gateway)(ctx, gwDelete(kubeOVN)), true, "")
	// Its full Update adding service_external_ip_from_subnet, whatever the Subnet says.
	updated := bound.DeepCopy()
	updated.Annotations[model.AnnotationExternalIPFromSubnet] = "elsewhere"
	expect(t, h.exemptKubeOVN(h.Service)(ctx, request(t, admissionv1.Update, "alice", "web", bound, updated)), false, "mutually exclusive")
	expect(t, h.exemptKubeOVN(h.Service)(ctx, request(t, admissionv1.Update, kubeOVN, "web", bound, updated)), true, "")
	// Without the setting nobody is exempt.
	h.KubeOVNUser = ""
	expect(t, h.exemptKubeOVN(h.Gateway)(ctx, gwDelete(kubeOVN)), false, "still serves 1 Service")
}

// covers: K4, S6
// The annotation kube-ovn writes on vpcgw's own ingress (the EIP's Subnet) is admitted, from anyone
// (kube-ovn's identity may differ from the configured one); another Subnet is S6's second address.
func TestServiceSubnetAnnotation(t *testing.T) {
	external := &kubeovnv1.Subnet{ObjectMeta: metav1.ObjectMeta{Name: "ovn-vpc-external-network"}, Spec: kubeovnv1.SubnetSpec{CIDRBlock: "172.18.0.0/24"}}
	other := &kubeovnv1.Subnet{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"}, Spec: kubeovnv1.SubnetSpec{CIDRBlock: "192.168.5.0/24"}}
	served := svc("web", corev1.ServiceTypeLoadBalancer, a(gwAnn, "gw1", eipAnn, "eip1"))
	served.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "172.18.0.10"}}
	h := newTestHandlers(t, external, other, eipObj("eip1", "gw1"))
	ctx := context.Background()
	for subnet, allowed := range map[string]bool{"ovn-vpc-external-network": true, "elsewhere": false, "missing": false} {
		u := served.DeepCopy()
		u.Annotations[model.AnnotationExternalIPFromSubnet] = subnet
		frag := ""
		if !allowed {
			frag = "mutually exclusive"
		}
		expect(t, h.Service(ctx, request(t, admissionv1.Update, "kube-ovn", "web", served, u)), allowed, frag)
	}
	// Without an ingress there is nothing kube-ovn could have derived it from.
	bare := svc("web", corev1.ServiceTypeLoadBalancer, a(gwAnn, "gw1", eipAnn, "eip1"))
	u := bare.DeepCopy()
	u.Annotations[model.AnnotationExternalIPFromSubnet] = "ovn-vpc-external-network"
	expect(t, h.Service(ctx, request(t, admissionv1.Update, "alice", "web", bare, u)), false, "mutually exclusive")
}

// covers: W4, W5, R6
func TestServiceRecordHandlers(t *testing.T) {
	rec := &vpcgwv1alpha1.ServiceRecord{ObjectMeta: metav1.ObjectMeta{Name: "lb-web-0123456789ab", Labels: map[string]string{
		model.LabelRecord: "true", model.LabelRecordUID: "uid-web", model.LabelRecordNamespace: "ns", model.LabelRecordName: "web",
		model.LabelGateway: "gw1", model.LabelEIPUID: "uid-eip1",
	}}}
	e := eipObj("eip1", "gw1")
	e.UID = "uid-eip1"
	h := newTestHandlers(t, rec, e)
	ctx := context.Background()
	for _, op := range []admissionv1.Operation{admissionv1.Create, admissionv1.Update, admissionv1.Delete} {
		var old, obj runtime.Object = rec, rec
		if op == admissionv1.Create {
			old = nil
		}
		if op == admissionv1.Delete {
			obj = nil
		}
		expect(t, h.ServiceRecord(ctx, request(t, op, ctrlUser, rec.Name, old, obj)), true, "")
		expect(t, h.ServiceRecord(ctx, request(t, op, "alice", rec.Name, old, obj)), false, "kubectl get servicerecords -l ovn.kubernetes.io/nftable-lb-svc-name=web")
	}
	expect(t, h.EIP(ctx, request(t, admissionv1.Delete, "alice", "eip1", e, nil)), false, "in use by 1 Service")
	expect(t, h.Gateway(ctx, request(t, admissionv1.Delete, "alice", "gw1", nil, nil)), false, "still serves 1 Service")
}

// covers: N1, N8
// A Service that newly names a gateway is admitted only from a namespace bound to the gateway's
// Vpc or named by the gateway's allow-list; the rejection names only its own namespace.
func TestServiceAdmission(t *testing.T) {
	vpc := &kubeovnv1.Vpc{ObjectMeta: metav1.ObjectMeta{Name: "vpc1"}, Spec: kubeovnv1.VpcSpec{Namespaces: []string{"ns"}}}
	gw := &kubeovnv1.VpcNatGateway{ObjectMeta: metav1.ObjectMeta{Name: "gw1"}, Spec: kubeovnv1.VpcNatGatewaySpec{Vpc: "vpc1"}}
	open := &kubeovnv1.VpcNatGateway{ObjectMeta: metav1.ObjectMeta{Name: "gw-open", Annotations: map[string]string{model.AnnotationAllowedNamespaces: "tenant-b"}},
		Spec: kubeovnv1.VpcNatGatewaySpec{Vpc: "vpc1"}}
	h := newTestHandlers(t, vpc, gw, open)
	ctx := context.Background()
	own := svc("web", corev1.ServiceTypeClusterIP, a(gwAnn, "gw1"))
	expect(t, h.Service(ctx, request(t, admissionv1.Create, "alice", "web", nil, own)), true, "")
	other := svc("web", corev1.ServiceTypeClusterIP, a(gwAnn, "gw1"))
	other.Namespace = "tenant-b"
	resp := h.Service(ctx, request(t, admissionv1.Create, "bob", "web", nil, other))
	expect(t, resp, false, "namespace tenant-b may not use VpcNatGateway gw1: it does not exist, or neither its Vpc's spec.namespaces nor its "+
		model.AnnotationAllowedNamespaces+" annotation names the namespace")
	if strings.Contains(resp.Result.Message, "vpc1") || strings.Contains(resp.Result.Message, " ns") {
		t.Errorf("the rejection reveals more than the user named: %q", resp.Result.Message)
	}
	other.Annotations[gwAnn] = "gw-open"
	expect(t, h.Service(ctx, request(t, admissionv1.Create, "bob", "web", nil, other)), true, "")
	// A gateway that does not exist gets the same answer as one that does not admit the
	// namespace: the webhook is no oracle of gateways (SPEC N8).
	other.Annotations[gwAnn] = "gw-later"
	later := h.Service(ctx, request(t, admissionv1.Create, "bob", "web", nil, other))
	expect(t, later, false, "")
	if got, want := later.Result.Message, strings.ReplaceAll(resp.Result.Message, "gw1", "gw-later"); got != want {
		t.Errorf("a missing gateway is answered\n %q\nand one that does not admit the namespace\n %q", got, want)
	}
	// A Service bound before its namespace lost the gateway may still change (and clear it).
	kept := svc("web", corev1.ServiceTypeClusterIP, a(gwAnn, "gw1"))
	kept.Namespace = "tenant-b"
	changed := kept.DeepCopy()
	changed.Spec.Ports[0].Port = 81
	expect(t, h.Service(ctx, request(t, admissionv1.Update, "bob", "web", kept, changed)), true, "")
}

// covers: N3, W3
// Hostile tenant: a Service may not claim EIP ports that kube-ovn's own NAT forwards (an
// IptablesDnatRule that is not a record) or an EIP that is a kube-ovn floating IP: vpcgw's DNAT
// would shadow kube-ovn's. A record of vpcgw's own on the port holds nothing here (the claim
// check covers Services).
func TestHostileTenantCannotClaimKubeOVNsOwnNAT(t *testing.T) {
	lb := corev1.ServiceTypeLoadBalancer
	ssh := rule("ssh-in", kubeovnv1.DnatRuleTypeExclusive, nil)
	ssh.Spec.EIP, ssh.Spec.ExternalPort, ssh.Spec.Protocol = "eip1", "22", "tcp"
	record := rule("lb-web-0123456789ab", kubeovnv1.DnatRuleTypeShare, map[string]string{model.LabelRecord: "true", model.LabelRecordUID: "uid-web"})
	record.Spec.EIP, record.Spec.ExternalPort, record.Spec.Protocol = "eip1", "80", "tcp"
	fip := &kubeovnv1.IptablesFIPRule{ObjectMeta: metav1.ObjectMeta{Name: "fip"}, Spec: kubeovnv1.IptablesFIPRuleSpec{EIP: "eip3", InternalIP: "10.0.1.9"}}
	h := newTestHandlers(t, eipObj("eip1", "gw1"), eipObj("eip3", "gw1"), admittedGW.DeepCopy(), admittedVpc.DeepCopy(), ssh, record, fip)
	ctx := context.Background()
	expect(t, h.Service(ctx, request(t, admissionv1.Create, "alice", "ssh", nil, svc("ssh", lb, a(gwAnn, "gw1", eipAnn, "eip1"), ports(port(22, "TCP"))))),
		false, "IptablesEIP eip1 port 22/TCP is forwarded by kube-ovn's own NAT")
	expect(t, h.Service(ctx, request(t, admissionv1.Create, "alice", "web", nil, svc("web", lb, a(gwAnn, "gw1", eipAnn, "eip3")))),
		false, "IptablesEIP eip3 is a floating IP of kube-ovn")
	expect(t, h.Service(ctx, request(t, admissionv1.Create, "alice", "web", nil, svc("web", lb, a(gwAnn, "gw1", eipAnn, "eip1")))), true, "")
	expect(t, h.Service(ctx, request(t, admissionv1.Create, "alice", "dns", nil, svc("dns", lb, a(gwAnn, "gw1", eipAnn, "eip1"), ports(port(22, "UDP"))))), true, "")
}
