// covers: W1, W2, W3, W4, W5, W6, S2, S3, S4, S6, L1, L2, I2, R4
//
// Table tests of the pure validators: every rule with admitted and rejected cases and the exact
// messages, and a fuzz test on annotation values.
package webhook

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	"github.com/vpcgw/vpcgw/internal/model"
)

const (
	gwAnn     = model.AnnotationGateway
	eipAnn    = model.AnnotationEIP
	subnetAnn = model.AnnotationExternalIPFromSubnet
)

type svcOpt func(*corev1.Service)

func svc(name string, typ corev1.ServiceType, ann map[string]string, opts ...svcOpt) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), Annotations: ann},
		Spec:       corev1.ServiceSpec{Type: typ, Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func ports(ps ...corev1.ServicePort) svcOpt {
	return func(s *corev1.Service) { s.Spec.Ports = ps }
}

func created(sec int64) svcOpt {
	return func(s *corev1.Service) { s.CreationTimestamp = metav1.Unix(sec, 0) }
}

func deleting(s *corev1.Service) {
	now := metav1.NewTime(time.Unix(100, 0))
	s.DeletionTimestamp = &now
}

func port(p int32, proto corev1.Protocol) corev1.ServicePort {
	return corev1.ServicePort{Port: p, Protocol: proto}
}

func with(s *corev1.Service, mutate func(*corev1.Service)) *corev1.Service {
	c := s.DeepCopy()
	mutate(c)
	return c
}

func a(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

const (
	msgNeedsEIP       = "a LoadBalancer Service with annotation ovn.kubernetes.io/vpc_nat_gw=gw1 also needs annotation ovn.kubernetes.io/eip=<IptablesEIP name>"
	msgExclusive      = "annotations ovn.kubernetes.io/vpc_nat_gw and ovn.kubernetes.io/service_external_ip_from_subnet are mutually exclusive (a Service must not publish two ingress addresses): remove one"
	msgGatewayChanged = `annotation ovn.kubernetes.io/vpc_nat_gw cannot change from "gw1" to "gw2": the gateway binding of a Service is immutable; delete and recreate the Service (or remove both ovn.kubernetes.io/vpc_nat_gw and ovn.kubernetes.io/eip to take it off the gateway)`
	msgEIPChanged     = `annotation ovn.kubernetes.io/eip cannot change from "eip1" to "eip2": the EIP binding of a Service is immutable; delete and recreate the Service (or remove ovn.kubernetes.io/eip to release the EIP)`
)

func TestValidateServiceCreate(t *testing.T) {
	lb, cip := corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeClusterIP
	cases := []struct {
		name string
		svc  *corev1.Service
		want []string
	}{
		{"no annotations", svc("a", lb, nil), nil},
		{"LoadBalancer with gateway and EIP", svc("a", lb, a(gwAnn, "gw1", eipAnn, "eip1")), nil},
		{"ClusterIP with gateway only", svc("a", cip, a(gwAnn, "gw1")), nil},
		{"ClusterIP with gateway and EIP", svc("a", cip, a(gwAnn, "gw1", eipAnn, "eip1")), nil},
		{"from-subnet alone", svc("a", lb, a(subnetAnn, "ext")), nil},
		{"empty gateway value is no annotation", svc("a", lb, a(gwAnn, "", subnetAnn, "ext")), nil},
		{"LoadBalancer without EIP", svc("a", lb, a(gwAnn, "gw1")), []string{msgNeedsEIP}},
		{"LoadBalancer with empty EIP", svc("a", lb, a(gwAnn, "gw1", eipAnn, "")), []string{msgNeedsEIP}},
		{"gateway and from-subnet", svc("a", lb, a(gwAnn, "gw1", eipAnn, "eip1", subnetAnn, "ext")), []string{msgExclusive}},
		{"gateway and empty from-subnet", svc("a", cip, a(gwAnn, "gw1", subnetAnn, "")), []string{msgExclusive}},
		{"invalid gateway name", svc("a", cip, a(gwAnn, "GW_1")), []string{
			`annotation ovn.kubernetes.io/vpc_nat_gw="GW_1" is not a valid VpcNatGateway name: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`}},
		{"invalid EIP name", svc("a", lb, a(gwAnn, "gw1", eipAnn, "eip 1")), []string{
			`annotation ovn.kubernetes.io/eip="eip 1" is not a valid IptablesEIP name: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`}},
		{"invalid EIP name without gateway", svc("a", lb, a(eipAnn, "-x")), []string{
			`annotation ovn.kubernetes.io/eip="-x" is not a valid IptablesEIP name: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`}},
		{"every problem at once", svc("a", lb, a(gwAnn, "gw1", subnetAnn, "ext")), []string{msgExclusive, msgNeedsEIP}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := ValidateService(nil, tc.svc); !slices.Equal(got, tc.want) {
				t.Errorf("ValidateService(create)\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestValidateServiceUpdate(t *testing.T) {
	lb, cip := corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeClusterIP
	bound := svc("a", lb, a(gwAnn, "gw1", eipAnn, "eip1"))
	cases := []struct {
		name     string
		old, new *corev1.Service
		want     []string
	}{
		{"untouched annotations, other edits", bound, with(bound, func(s *corev1.Service) {
			s.Labels = map[string]string{"x": "y"}
			s.Spec.Ports = append(s.Spec.Ports, port(443, corev1.ProtocolTCP))
			s.Finalizers = nil
		}), nil},
		// A Service admitted while the webhook was down (or before it was installed) stays
		// editable: its old problems are not the update's.
		{"untouched, already invalid (LB without EIP, from-subnet)", svc("a", lb, a(gwAnn, "gw1", subnetAnn, "x")),
			svc("a", lb, a(gwAnn, "gw1", subnetAnn, "x", "other", "1")), nil},
		{"untouched, invalid names", svc("a", lb, a(gwAnn, "GW", eipAnn, "E")), svc("a", cip, a(gwAnn, "GW", eipAnn, "E")), nil},
		{"type changed to LoadBalancer without EIP", svc("a", cip, a(gwAnn, "gw1")), svc("a", lb, a(gwAnn, "gw1")), nil},
		{"clear both", bound, svc("a", lb, nil), nil},
		{"clear both to empty values", bound, svc("a", lb, a(gwAnn, "", eipAnn, "")), nil},
		{"clear only the EIP", bound, svc("a", lb, a(gwAnn, "gw1")), nil},
		{"clear only the gateway", bound, svc("a", lb, a(eipAnn, "eip1")), nil},
		{"add the EIP to a LoadBalancer that lacked it", svc("a", lb, a(gwAnn, "gw1")), bound, nil},
		{"enter the mode", svc("a", lb, nil), bound, nil},
		{"enter the mode without EIP", svc("a", lb, nil), svc("a", lb, a(gwAnn, "gw1")), []string{msgNeedsEIP}},
		{"change the gateway", bound, svc("a", lb, a(gwAnn, "gw2", eipAnn, "eip1")), []string{msgGatewayChanged}},
		{"change the EIP", bound, svc("a", lb, a(gwAnn, "gw1", eipAnn, "eip2")), []string{msgEIPChanged}},
		{"change both", bound, svc("a", lb, a(gwAnn, "gw2", eipAnn, "eip2")), []string{msgGatewayChanged, msgEIPChanged}},
		{"add from-subnet", bound, svc("a", lb, a(gwAnn, "gw1", eipAnn, "eip1", subnetAnn, "ext")), []string{msgExclusive}},
		{"remove from-subnet of an invalid Service", svc("a", lb, a(gwAnn, "gw1", eipAnn, "eip1", subnetAnn, "ext")), bound, nil},
		{"clear the EIP of a Service that also has from-subnet", svc("a", lb, a(gwAnn, "gw1", eipAnn, "eip1", subnetAnn, "ext")),
			svc("a", lb, a(gwAnn, "gw1", subnetAnn, "ext")), nil},
		{"set an invalid EIP", svc("a", lb, a(gwAnn, "gw1")), svc("a", lb, a(gwAnn, "gw1", eipAnn, "EIP")), []string{
			`annotation ovn.kubernetes.io/eip="EIP" is not a valid IptablesEIP name: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := ValidateService(tc.old, tc.new); !slices.Equal(got, tc.want) {
				t.Errorf("ValidateService(update)\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// covers: W3, N3
func TestNeedsClaimCheck(t *testing.T) {
	lb := corev1.ServiceTypeLoadBalancer
	bound := svc("a", lb, a(gwAnn, "gw1", eipAnn, "eip1"))
	cases := []struct {
		name     string
		old, new *corev1.Service
		want     bool
	}{
		{"create bound", nil, bound, true},
		{"create gateway only", nil, svc("a", lb, a(gwAnn, "gw1")), false},
		{"update keeps the binding", bound, with(bound, func(s *corev1.Service) { s.Spec.Ports = nil }), false},
		{"update adds the EIP", svc("a", lb, a(gwAnn, "gw1")), bound, true},
		{"update enters the mode", svc("a", lb, nil), bound, true},
		{"update clears", bound, svc("a", lb, nil), false},
		// SPEC N3: a new port, a changed port or a type turned into LoadBalancer claims anew.
		{"update adds a port", bound, with(bound, func(s *corev1.Service) {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Port: 8443, Protocol: corev1.ProtocolTCP})
		}), true},
		{"update changes a port's protocol", bound, with(bound, func(s *corev1.Service) {
			for i := range s.Spec.Ports {
				s.Spec.Ports[i].Protocol = corev1.ProtocolUDP
			}
		}), true},
		{"update turns a ClusterIP Service into a LoadBalancer", with(bound, func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeClusterIP }), bound, true},
		{"update keeps ports and type", bound, with(bound, func(s *corev1.Service) { s.Labels = map[string]string{"x": "y"} }), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			gw, eip, ok := NeedsClaimCheck(tc.old, tc.new)
			if ok != tc.want || ok && (gw != "gw1" || eip != "eip1") {
				t.Errorf("NeedsClaimCheck = %q %q %v, want gw1 eip1 %v", gw, eip, ok, tc.want)
			}
		})
	}
}

func eipObj(name, gw string) *kubeovnv1.IptablesEIP {
	return &kubeovnv1.IptablesEIP{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}, Spec: kubeovnv1.IptablesEIPSpec{NatGwDp: gw}}
}

// admittedGW is gateway gw1 of Vpc vpc1, which binds namespaces ns and tenant-a (SPEC N1).
var (
	admittedGW  = &kubeovnv1.VpcNatGateway{ObjectMeta: metav1.ObjectMeta{Name: "gw1"}, Spec: kubeovnv1.VpcNatGatewaySpec{Vpc: "vpc1"}}
	admittedVpc = &kubeovnv1.Vpc{ObjectMeta: metav1.ObjectMeta{Name: "vpc1"}, Spec: kubeovnv1.VpcSpec{Namespaces: []string{"ns", "tenant-a"}}}
)

// heldBy are Services that may hold gw1's identities.
func heldBy(svcs ...corev1.Service) Holders {
	return Holders{Gateway: admittedGW, Vpc: admittedVpc, Services: svcs}
}

// covers: W3, N1, N3
func TestValidateServiceClaims(t *testing.T) {
	lb, cip := corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeClusterIP
	bound := a(gwAnn, "gw1", eipAnn, "eip1")
	me := svc("me", lb, bound, created(50))
	ready := eipObj("eip1", "gw1")
	ready.Status = kubeovnv1.IptablesEIPStatus{Ready: true, IP: "172.18.0.10"}
	held := func(p int32) string {
		return "IptablesEIP eip1 port " + strconv.Itoa(int(p)) + "/TCP is already held by Service ns/old: one (EIP, port, protocol) is served by one Service only; use another port or another EIP"
	}
	cases := []struct {
		name   string
		svc    *corev1.Service
		eip    *kubeovnv1.IptablesEIP
		others []corev1.Service
		want   []string
	}{
		{"EIP missing (S4)", me, nil, nil, nil},
		{"EIP not Ready (S4)", me, eipObj("eip1", "gw1"), nil, nil},
		{"EIP Ready on the gateway", me, ready, nil, nil},
		{"EIP on another gateway (S3)", me, eipObj("eip1", "gw2"), nil, []string{
			`IptablesEIP eip1 is not an EIP of gateway gw1: use an EIP whose spec.natGwDp is gw1`}},
		{"EIP without gateway", me, eipObj("eip1", ""), nil, []string{
			`IptablesEIP eip1 is not an EIP of gateway gw1: use an EIP whose spec.natGwDp is gw1`}},
		{"ClusterIP Service: EIP gateway still checked", svc("me", cip, bound), eipObj("eip1", "gw2"), nil, []string{
			`IptablesEIP eip1 is not an EIP of gateway gw1: use an EIP whose spec.natGwDp is gw1`}},
		{"identity held", me, ready, []corev1.Service{*svc("old", lb, bound, created(10))}, []string{held(80)}},
		{"identity held, EIP missing", me, nil, []corev1.Service{*svc("old", lb, bound, created(10))}, []string{held(80)}},
		{"holder named by I2 order", me, nil, []corev1.Service{
			*svc("zz", lb, bound, created(20)), *svc("old", lb, bound, created(10)), *svc("aa", lb, bound, created(10))},
			[]string{"IptablesEIP eip1 port 80/TCP is already held by Service ns/aa: one (EIP, port, protocol) is served by one Service only; use another port or another EIP"}},
		{"holder named by first claim (I2), before an older Service", me, nil, []corev1.Service{
			*svc("old", lb, bound, created(10)), *svc("claimed", lb, bound, created(30), func(s *corev1.Service) {
				s.Status.Conditions = []metav1.Condition{model.ClaimCondition("gw1", "eip1", time.Unix(40, 0), 1)}
			})},
			[]string{"IptablesEIP eip1 port 80/TCP is already held by Service ns/claimed: one (EIP, port, protocol) is served by one Service only; use another port or another EIP"}},
		{"only the shared ports", svc("me", lb, bound, ports(port(80, "TCP"), port(81, "TCP"), port(53, "UDP"))), nil,
			[]corev1.Service{*svc("old", lb, bound, ports(port(53, "UDP"), port(81, "TCP")))},
			[]string{held(81), "IptablesEIP eip1 port 53/UDP is already held by Service ns/old: one (EIP, port, protocol) is served by one Service only; use another port or another EIP"}},
		{"same port, other protocol", me, nil, []corev1.Service{*svc("old", lb, bound, ports(port(80, "UDP")))}, nil},
		{"protocol defaults to TCP", svc("me", lb, bound, ports(port(80, ""))), nil, []corev1.Service{*svc("old", lb, bound)}, []string{held(80)}},
		{"SCTP claims nothing", svc("me", lb, bound, ports(port(80, "SCTP"))), nil, []corev1.Service{*svc("old", lb, bound, ports(port(80, "SCTP")))}, nil},
		{"other port", me, nil, []corev1.Service{*svc("old", lb, bound, ports(port(8080, "TCP")))}, nil},
		{"other EIP", me, nil, []corev1.Service{*svc("old", lb, a(gwAnn, "gw1", eipAnn, "eip2"))}, nil},
		{"other gateway", me, nil, []corev1.Service{*svc("old", lb, a(gwAnn, "gw2", eipAnn, "eip1"))}, nil},
		{"holder being deleted", me, nil, []corev1.Service{*svc("old", lb, bound, deleting)}, nil},
		{"holder is a ClusterIP Service", me, nil, []corev1.Service{*svc("old", cip, bound)}, nil},
		{"itself (update)", me, nil, []corev1.Service{*me}, nil},
		{"same name, other UID (recreated)", me, nil, []corev1.Service{*svc("me", lb, bound, func(s *corev1.Service) { s.UID = "old-uid" })}, nil},
		{"a ClusterIP Service claims no EIP identity", svc("me", cip, bound), nil, []corev1.Service{*svc("old", lb, bound)}, nil},
		{"no binding", svc("me", lb, a(gwAnn, "gw1")), nil, []corev1.Service{*svc("old", lb, bound)}, nil},
		{"wrong gateway and held", me, eipObj("eip1", "gw2"), []corev1.Service{*svc("old", lb, bound)}, []string{
			`IptablesEIP eip1 is not an EIP of gateway gw1: use an EIP whose spec.natGwDp is gw1`, held(80)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := ValidateServiceClaims(tc.svc, tc.eip, heldBy(tc.others...)); !slices.Equal(got, tc.want) {
				t.Errorf("ValidateServiceClaims\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

const ctrlUser = DefaultControllerUser

func rule(name string, typ kubeovnv1.DnatRuleType, labels map[string]string) *kubeovnv1.IptablesDnatRule {
	return &kubeovnv1.IptablesDnatRule{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       kubeovnv1.IptablesDnatRuleSpec{Type: typ, EIP: "eip1", ExternalPort: "80", Protocol: "tcp", InternalIP: "10.0.1.10", InternalPort: "8080"},
	}
}

// covers: W4, K8
func TestValidateRecordWrite(t *testing.T) {
	recLabels := map[string]string{model.LabelRecordName: "web", model.LabelRecordNamespace: "ns", model.LabelRecord: "true", model.LabelRecordUID: "uid-web"}
	rec := rule("lb-web-0123456789ab", kubeovnv1.DnatRuleTypeShare, recLabels)
	// kube-ovn v1.16.2's CRD prunes spec.type: a record without it is still a record.
	pruned := rule("lb-web-0123456789ab", "", recLabels)
	kubeOVNShare := rule("s1", kubeovnv1.DnatRuleTypeShare, nil) // a user's own share rule (kube-ovn master)
	excl := rule("e1", kubeovnv1.DnatRuleTypeExclusive, nil)
	edited := rec.DeepCopy()
	edited.Spec.InternalIP = "10.0.1.11"
	unmarked := rec.DeepCopy()
	unmarked.Labels = map[string]string{model.LabelRecordName: "web"}
	forged := excl.DeepCopy()
	forged.Labels = recLabels
	denied := func(name, verb, user, svc string) []string {
		return []string{"IptablesDnatRule " + name + " carries label " + model.LabelRecord + "=true: it is a controller-owned accounting record of a Service; " +
			"only the vpcgw controller (" + ctrlUser + ") may " + verb + " it, not \"" + user + "\". Change the Service instead (the controller keeps its records in step), " +
			"and inspect a Service's records with: kubectl get iptables-dnat-rules -l ovn.kubernetes.io/nftable-lb-svc-name=" + svc}
	}
	cases := []struct {
		name     string
		op       admissionv1.Operation
		user     string
		old, new *kubeovnv1.IptablesDnatRule
		want     []string
	}{
		{"controller creates", admissionv1.Create, ctrlUser, nil, rec, nil},
		{"controller updates", admissionv1.Update, ctrlUser, rec, edited, nil},
		{"controller deletes", admissionv1.Delete, ctrlUser, rec, nil, nil},
		{"user creates", admissionv1.Create, "alice", nil, rec, denied(rec.Name, "create", "alice", "web")},
		{"user creates a record without spec.type", admissionv1.Create, "alice", nil, pruned, denied(rec.Name, "create", "alice", "web")},
		{"user updates", admissionv1.Update, "alice", rec, edited, denied(rec.Name, "update", "alice", "web")},
		{"user removes the record label", admissionv1.Update, "alice", rec, unmarked, denied(rec.Name, "update", "alice", "web")},
		{"user forges a record", admissionv1.Update, "alice", excl, forged, denied("e1", "update", "alice", "web")},
		{"user deletes", admissionv1.Delete, "alice", rec, nil, denied(rec.Name, "delete", "alice", "web")},
		{"system:masters user is not the controller", admissionv1.Delete, "kubernetes-admin", rec, nil, denied(rec.Name, "delete", "kubernetes-admin", "web")},
		{"a user's own share rule", admissionv1.Create, "alice", nil, kubeOVNShare, nil},
		{"a user's own share rule deleted", admissionv1.Delete, "alice", kubeOVNShare, nil, nil},
		{"exclusive create", admissionv1.Create, "alice", nil, excl, nil},
		{"exclusive update", admissionv1.Update, "alice", excl, excl, nil},
		{"exclusive delete", admissionv1.Delete, "alice", excl, nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := ValidateRecordWrite(tc.op, tc.user, ctrlUser, tc.old, tc.new); !slices.Equal(got, tc.want) {
				t.Errorf("ValidateRecordWrite\n got %q\nwant %q", got, tc.want)
			}
		})
	}
	// Without a controller identity nobody may write records (Main refuses to start that way).
	if got := ValidateRecordWrite(admissionv1.Create, "", "", nil, rec); len(got) != 1 {
		t.Errorf("empty controller user admitted an empty user: %q", got)
	}
}

// covers: W4, R6
func TestValidateServiceRecordWrite(t *testing.T) {
	labels := map[string]string{model.LabelRecordName: "web"}
	if got := ValidateServiceRecordWrite(admissionv1.Update, ctrlUser, ctrlUser, "lb-web-0123456789ab", labels); got != nil {
		t.Errorf("the controller's write denied: %q", got)
	}
	for _, op := range []admissionv1.Operation{admissionv1.Create, admissionv1.Update, admissionv1.Delete} {
		got := ValidateServiceRecordWrite(op, "alice", ctrlUser, "lb-web-0123456789ab", labels)
		if len(got) != 1 || !strings.Contains(got[0], "only the vpcgw controller") || !strings.Contains(got[0], verb(op)+" it") ||
			!strings.Contains(got[0], "kubectl get servicerecords -l ovn.kubernetes.io/nftable-lb-svc-name=web") {
			t.Errorf("%s by a user: %q", op, got)
		}
	}
}

func record(name, ns, svcName, gw, eipUID string) kubeovnv1.IptablesDnatRule {
	l := map[string]string{
		model.LabelRecord: "true", model.LabelRecordUID: "uid-" + svcName, model.LabelRecordNamespace: ns,
		model.LabelRecordName: svcName, model.LabelGateway: gw,
	}
	if eipUID != "" {
		l[model.LabelEIPUID] = eipUID
	}
	return *rule(name, kubeovnv1.DnatRuleTypeShare, l)
}

func TestValidateEIPDelete(t *testing.T) {
	eip := eipObj("eip1", "gw1")
	gone := record("r9", "ns", "gone", "gw1", "uid-eip1")
	now := metav1.Now()
	gone.DeletionTimestamp = &now
	kubeOVNRule := *rule("kube-ovn-dnat", kubeovnv1.DnatRuleTypeExclusive, map[string]string{model.LabelEIPUID: "uid-eip1"})
	cases := []struct {
		name    string
		records []kubeovnv1.IptablesDnatRule
		want    []string
	}{
		{"no records", nil, nil},
		{"records of another EIP", []kubeovnv1.IptablesDnatRule{record("r1", "ns", "web", "gw1", "uid-eip2")}, nil},
		{"ClusterIP-only records", []kubeovnv1.IptablesDnatRule{record("r1", "ns", "web", "gw1", "")}, nil},
		{"record being deleted", []kubeovnv1.IptablesDnatRule{gone}, nil},
		{"a rule that is not a record", []kubeovnv1.IptablesDnatRule{kubeOVNRule}, nil},
		{"claimed", []kubeovnv1.IptablesDnatRule{
			record("r1", "ns", "web", "gw1", "uid-eip1"), record("r2", "ns", "web", "gw1", "uid-eip1"), record("r3", "a", "dns", "gw1", "uid-eip1")},
			[]string{"IptablesEIP eip1 is in use by 2 Services: delete them or remove their ovn.kubernetes.io/eip annotation first " +
				"(kubectl get servicerecords -A -l ovn.kubernetes.io/eip_uid=uid-eip1 lists the claims)"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := ValidateEIPDelete(eip, tc.records); !slices.Equal(got, tc.want) {
				t.Errorf("ValidateEIPDelete\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestValidateGatewayDelete(t *testing.T) {
	lb, cip := corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeClusterIP
	// Counted, never named (SPEC N8): the answer goes to whoever sent the review.
	msg := func(count string) []string {
		return []string{"VpcNatGateway gw1 still serves " + count +
			": delete those Services or remove their ovn.kubernetes.io/vpc_nat_gw and ovn.kubernetes.io/eip annotations first " +
			"(kubectl get servicerecords -A -l ovn.kubernetes.io/vpc-nat-gw-name=gw1 lists the served ones)"}
	}
	var many []corev1.Service
	for _, n := range []string{"s00", "s01", "s02", "s03", "s04", "s05", "s06", "s07", "s08", "s09", "s10", "s11"} {
		many = append(many, *svc(n, cip, a(gwAnn, "gw1")))
	}
	cases := []struct {
		name     string
		services []corev1.Service
		records  []kubeovnv1.IptablesDnatRule
		want     []string
	}{
		{"nothing bound", nil, nil, nil},
		{"Services of another gateway", []corev1.Service{*svc("a", lb, a(gwAnn, "gw2", eipAnn, "e"))}, []kubeovnv1.IptablesDnatRule{record("r", "ns", "x", "gw2", "")}, nil},
		{"Service being deleted", []corev1.Service{*svc("a", lb, a(gwAnn, "gw1", eipAnn, "e"), deleting)}, nil, nil},
		{"bound through an EIP", []corev1.Service{*svc("web", lb, a(gwAnn, "gw1", eipAnn, "e"))}, nil, msg("1 Service")},
		{"bound through a ClusterIP", []corev1.Service{*svc("db", cip, a(gwAnn, "gw1"))}, nil, msg("1 Service")},
		{"records of a Service whose annotation is gone", nil, []kubeovnv1.IptablesDnatRule{record("r", "other", "old", "gw1", "")}, msg("1 Service")},
		{"both, named once", []corev1.Service{*svc("web", lb, a(gwAnn, "gw1", eipAnn, "e"))},
			[]kubeovnv1.IptablesDnatRule{record("r1", "ns", "web", "gw1", "u"), record("r2", "ns", "web", "gw1", "u")}, msg("1 Service")},
		{"counted", many, nil, msg("12 Services")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := ValidateGatewayDelete("gw1", tc.services, tc.records); !slices.Equal(got, tc.want) {
				t.Errorf("ValidateGatewayDelete\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// FuzzServiceAnnotations: the Service validators never panic on any annotation values, and an
// invalid gateway or EIP name that a create introduces is always rejected, naming the value.
func FuzzServiceAnnotations(f *testing.F) {
	for _, seed := range [][3]string{
		{"gw1", "eip1", ""}, {"GW", "", "x"}, {"", "a..b", ""}, {"-", "eip-", "ext"}, {strings.Repeat("a", 254), "e", ""},
		{"gw.example", "e\x00", "\xff"}, {"gw1", "gw1", "gw1"},
	} {
		f.Add(seed[0], seed[1], seed[2], true, false)
	}
	f.Fuzz(func(t *testing.T, gw, eip, subnet string, lb, hasSubnet bool) {
		ann := map[string]string{gwAnn: gw, eipAnn: eip}
		if hasSubnet {
			ann[subnetAnn] = subnet
		}
		typ := corev1.ServiceTypeClusterIP
		if lb {
			typ = corev1.ServiceTypeLoadBalancer
		}
		s := svc("fuzz", typ, ann)
		problems := ValidateService(nil, s)
		for _, v := range []struct{ ann, value string }{{gwAnn, gw}, {eipAnn, eip}} {
			if v.value == "" || len(validation.IsDNS1123Subdomain(v.value)) == 0 {
				continue
			}
			want := "annotation " + v.ann + "=" + strconv.Quote(v.value) + " is not a valid "
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.HasPrefix(p, want) }) {
				t.Fatalf("invalid %s=%q admitted: %q", v.ann, v.value, problems)
			}
		}
		// Valid everything and a complete binding is admitted.
		if gw != "" && eip != "" && len(validation.IsDNS1123Subdomain(gw)) == 0 && len(validation.IsDNS1123Subdomain(eip)) == 0 && !hasSubnet && len(problems) > 0 {
			t.Fatalf("valid Service rejected: %q", problems)
		}
		// The update rules and the claim check never panic either, in both directions.
		_ = ValidateService(s, svc("fuzz", typ, nil))
		_ = ValidateService(svc("fuzz", typ, a(gwAnn, "gw1", eipAnn, "eip1")), s)
		if g, e, ok := NeedsClaimCheck(nil, s); ok {
			_ = ValidateServiceClaims(s, eipObj(e, g), heldBy(*svc("other", typ, ann)))
		}
	})
}

// covers: W3, N8
// A rejection names the holder only when it is in the claimant's own namespace.
func TestClaimRejectionDoesNotRevealOtherNamespaces(t *testing.T) {
	lb := corev1.ServiceTypeLoadBalancer
	bound := a(gwAnn, "gw1", eipAnn, "eip1")
	holder := svc("web", lb, bound, created(1), func(s *corev1.Service) { s.Namespace = "tenant-a" })
	got := ValidateServiceClaims(svc("shop", lb, bound, created(2)), eipObj("eip1", "gw1"), heldBy(*holder))
	if len(got) != 1 || strings.Contains(got[0], "tenant-a") || strings.Contains(got[0], "web") || !strings.Contains(got[0], "held by a Service of another namespace") {
		t.Fatalf("rejection %q", got)
	}
	holder.Namespace = "ns"
	got = ValidateServiceClaims(svc("shop", lb, bound, created(2)), eipObj("eip1", "gw1"), heldBy(*holder))
	if len(got) != 1 || !strings.Contains(got[0], "held by Service ns/web") {
		t.Fatalf("rejection in the same namespace %q", got)
	}
}

// covers: N1, N3, W3
// Hostile tenant: squatting a port through the webhook. A Service of a namespace the gateway does
// not admit, or that the EIP's allow-list excludes, is never served, so it holds nothing and the
// rightful owner is admitted; without the gateway nobody is served, so nobody holds anything.
func TestHostileTenantCannotSquatAPortThroughTheWebhook(t *testing.T) {
	lb := corev1.ServiceTypeLoadBalancer
	bound := a(gwAnn, "gw1", eipAnn, "eip1")
	owner := svc("web", lb, bound, created(50))
	stranger := svc("squat", lb, bound, created(1), func(s *corev1.Service) { s.Namespace = "stranger" })
	if got := ValidateServiceClaims(owner, eipObj("eip1", "gw1"), heldBy(*stranger)); len(got) != 0 {
		t.Fatalf("a Service of a namespace the gateway does not admit holds the port: %q", got)
	}
	// The EIP's allow-list admits only ns: tenant-a's older Service holds nothing on it.
	listed := eipObj("eip1", "gw1")
	listed.Annotations = map[string]string{model.AnnotationAllowedNamespaces: "ns"}
	excluded := svc("shop", lb, bound, created(1), func(s *corev1.Service) { s.Namespace = "tenant-a" })
	if got := ValidateServiceClaims(owner, listed, heldBy(*excluded)); len(got) != 0 {
		t.Fatalf("a Service the EIP's allow-list excludes holds the port: %q", got)
	}
	// Admitted, it holds the port.
	if got := ValidateServiceClaims(owner, eipObj("eip1", "gw1"), heldBy(*excluded)); len(got) != 1 {
		t.Fatalf("an admitted older Service of another namespace does not hold the port: %q", got)
	}
	// Created before the gateway exists: nobody is served yet, so nobody holds anything.
	if got := ValidateServiceClaims(owner, nil, Holders{Services: []corev1.Service{*excluded}}); len(got) != 0 {
		t.Fatalf("without the gateway a Service holds the port: %q", got)
	}
}

// covers: N4, W3
// Hostile tenant: a Service naming a gateway with 25,000 ports is refused by the bound before
// any claim is read, so the request costs what the bound allows; one already over the bound
// stays editable (its finalizer removable), and the claim check then reads nothing.
func TestHostileTenantHugePortCountIsRefusedFirst(t *testing.T) {
	lb := corev1.ServiceTypeLoadBalancer
	bound := a(gwAnn, "gw1", eipAnn, "eip1")
	var many []corev1.ServicePort
	for i := range 25000 {
		many = append(many, corev1.ServicePort{Port: int32(1 + i), Protocol: corev1.ProtocolTCP})
	}
	huge := svc("huge", lb, bound, ports(many...))
	problems, over := ValidatePortBound(nil, huge, model.DefaultMaxPortsPerService)
	if !over || len(problems) != 1 || !strings.Contains(problems[0], "has 25000 TCP/UDP ports") || !strings.Contains(problems[0], "at most 64") {
		t.Fatalf("25,000 ports: %q over=%v", problems, over)
	}
	edited := with(huge, func(s *corev1.Service) { s.Finalizers = nil })
	if problems, over := ValidatePortBound(huge, edited, model.DefaultMaxPortsPerService); !over || len(problems) != 0 {
		t.Fatalf("an update of a Service already over the bound: %q over=%v, want admitted and over", problems, over)
	}
	if problems, over := ValidatePortBound(nil, svc("plain", lb, nil, ports(many...)), model.DefaultMaxPortsPerService); over || len(problems) != 0 {
		t.Fatalf("a Service without the gateway annotation: %q over=%v, want not vpcgw's business", problems, over)
	}
	// The claim check is linear: 25,000 ports against a holder with 25,000 ports.
	holder := svc("old", lb, bound, created(1), ports(many...))
	if got := ValidateServiceClaims(huge, nil, heldBy(*holder)); len(got) != 25000 {
		t.Fatalf("%d problems, want one per held port", len(got))
	}
}
