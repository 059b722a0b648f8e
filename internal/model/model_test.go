package model

import (
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	"github.com/vpcgw/vpcgw/internal/gwstate"
)

var twoBackends = []gwstate.Backend{{IP: netip.MustParseAddr("10.0.1.11"), Port: 8080}, {IP: netip.MustParseAddr("10.0.1.12"), Port: 8080}}

// covers: S1, S2, I1, B1, D2, D5, D7, R1, R2, T1, T2, V1
func TestServedLoadBalancerWithBothGates(t *testing.T) {
	p := Compute(baseSnapshot(service("web", t0)), bothGates)
	sp := servicePlan(p, "web")
	if !sp.EIPServed || !sp.ClusterIPServed || sp.EIPReason != "" || len(sp.Events) != 0 {
		t.Fatalf("plan = %+v, want both parts served without events", sp)
	}
	if !sp.AddFinalizer || sp.ReleaseFinalizer || !sp.IngressWrite || !reflect.DeepEqual(sp.Ingress, []corev1.LoadBalancerIngress{{IP: "172.18.0.10"}}) {
		t.Fatalf("finalizer/ingress: %+v", sp)
	}
	gp := p.Gateway("gw1")
	g := IdentityGroup(sp.UID) // one Service: programmed or refused together (SPEC D8)
	want := []gwstate.Identity{
		{VIP: netip.MustParseAddr("10.96.0.10"), Port: 80, Protocol: gwstate.TCP, Backends: twoBackends, Group: g},
		{VIP: netip.MustParseAddr("172.18.0.10"), Port: 80, Protocol: gwstate.TCP, Backends: twoBackends, Group: g},
	}
	if !reflect.DeepEqual(gp.State.Identities, want) || !reflect.DeepEqual(gp.State.ClusterIPs, []netip.Addr{netip.MustParseAddr("10.96.0.10")}) {
		t.Fatalf("gateway state = %+v, want %+v and ClusterIP held", gp.State, want)
	}
	if len(gp.Instances) != 1 || gp.Instances[0].LanIP != "10.0.1.254" {
		t.Fatalf("instances = %+v", gp.Instances)
	}
	wantRoutes := VIPRoutes{Router: "vpc1", Gateway: "gw1", NextHops: []string{"10.0.1.254"}, VIPs: []string{"10.96.0.10", "172.18.0.10"}}
	if !reflect.DeepEqual(gp.Routes, wantRoutes) {
		t.Fatalf("routes = %+v, want %+v", gp.Routes, wantRoutes)
	}
	if len(sp.Records) != 2 || len(sp.CreateRecords) != 2 {
		t.Fatalf("records = %+v, want one per (port, backend)", sp.Records)
	}
	r := sp.Records[0]
	if r.Spec.Type != kubeovnv1.DnatRuleTypeShare || r.Spec.EIP != "eip1" || r.Spec.ExternalPort != "80" || r.Spec.Protocol != "tcp" ||
		r.Spec.InternalPort != "8080" || r.Spec.ClusterIP != "10.96.0.10" || r.Status.V4IP != "172.18.0.10" || r.Status.NatGwDp != "gw1" {
		t.Fatalf("record spec/status = %+v / %+v", r.Spec, r.Status)
	}
	wantLabels := map[string]string{
		LabelRecordNamespace: "ns", LabelRecordName: "web", LabelRecordUID: "uid-web", LabelRecord: "true",
		LabelGateway: "gw1", LabelExternalPort: "80", LabelEIPAddress: "172.18.0.10", LabelEIPUID: "uid-eip1",
	}
	if !reflect.DeepEqual(r.Labels, wantLabels) || r.OwnerReferences != nil {
		t.Fatalf("record labels = %v, want %v and no owner reference", r.Labels, wantLabels)
	}
}

// covers: S2, F1
func TestClusterIPService(t *testing.T) {
	cip := service("web", t0, func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeClusterIP
		delete(s.Annotations, AnnotationEIP)
	})
	sp := servicePlan(Compute(baseSnapshot(cip), bothGates), "web")
	if sp.EIPServed || !sp.ClusterIPServed || len(sp.Events) != 0 || sp.IngressWrite {
		t.Fatalf("ClusterIP Service with both gates: %+v", sp)
	}
	if len(sp.Records) != 2 || sp.Records[0].Spec.EIP != "" || sp.Records[0].Status.V4IP != "10.96.0.10" {
		t.Fatalf("ClusterIP-only records: %+v", sp.Records)
	}
	sp = servicePlan(Compute(baseSnapshot(cip), lbGates), "web")
	if sp.Served() || len(sp.Events) != 0 || !strings.Contains(sp.ClusterIPReason, "--enable-gw-nftable-svc-cluster-ip") {
		t.Fatalf("ClusterIP Service without the ClusterIP gate: %+v", sp)
	}
	// A LoadBalancer Service with only the ClusterIP gate serves its ClusterIP only.
	sp = servicePlan(Compute(baseSnapshot(service("web", t0)), Gates{ClusterIP: true, Ledger: LedgerDnatRule}), "web")
	if sp.EIPServed || !sp.ClusterIPServed || sp.IngressWrite || !strings.Contains(sp.EIPReason, "--enable-gw-nftable-lb-svc") {
		t.Fatalf("LoadBalancer with the ClusterIP gate only: %+v", sp)
	}
}

// With kube-ovn's --enable-lb and the EIP gate alone, the EIP is served and the Service is told,
// once per cause, that kube-ovn's OVN load balancers serve its ClusterIP; without --enable-lb the
// same plan gives no event.
// covers: F2, T3
func TestClusterIPServedByKubeOVNLoadBalancers(t *testing.T) {
	byOVN := func(sp ServicePlan) []Event {
		var evs []Event
		for _, ev := range sp.Events {
			if ev.Reason == ReasonClusterIPByOVN {
				evs = append(evs, ev)
			}
		}
		return evs
	}
	withLB := Gates{LoadBalancer: true, KubeOVNLoadBalancers: true, Ledger: LedgerDnatRule}
	sp := servicePlan(Compute(baseSnapshot(service("web", t0)), withLB), "web")
	evs := byOVN(sp)
	if !sp.EIPServed || sp.ClusterIPServed || len(evs) != 1 {
		t.Fatalf("LoadBalancer with the EIP gate and --enable-lb: %+v", sp)
	}
	if ev := evs[0]; ev.Type != corev1.EventTypeNormal || !strings.Contains(ev.Message, "10.96.0.10") ||
		!strings.Contains(ev.Message, "only the EIP part") || sp.ClusterIPReason != ev.Message {
		t.Fatalf("event %+v, ClusterIP reason %q", ev, sp.ClusterIPReason)
	}
	cip := service("web", t0, func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeClusterIP
		delete(s.Annotations, AnnotationEIP)
	})
	sp = servicePlan(Compute(baseSnapshot(cip), withLB), "web")
	if evs = byOVN(sp); sp.Served() || len(evs) != 1 || !strings.Contains(evs[0].Message, "nothing of this ClusterIP Service") {
		t.Fatalf("ClusterIP Service with --enable-lb: %+v", sp)
	}
	sp = servicePlan(Compute(baseSnapshot(service("web", t0)), Gates{LoadBalancer: true, Ledger: LedgerDnatRule}), "web")
	if !sp.EIPServed || len(byOVN(sp)) != 0 {
		t.Fatalf("LoadBalancer with the EIP gate, without --enable-lb: %+v", sp)
	}
}

// covers: S2, S3, S4, S5, S6, T3, F1, F5, L5
func TestNotServed(t *testing.T) {
	withSvc := func(m func(*corev1.Service)) func() Snapshot {
		return func() Snapshot { return baseSnapshot(service("web", t0, m)) }
	}
	withSnap := func(m func(*Snapshot)) func() Snapshot {
		return func() Snapshot { s := baseSnapshot(service("web", t0)); m(&s); return s }
	}
	cases := []struct {
		name   string
		snap   func() Snapshot
		gates  Gates
		reason string // expected event reason; "" means no event
		inMsg  string
		cipToo bool // the ClusterIP part is not served either
	}{
		{"both gates off", withSvc(nil), Gates{}, "", "", true},
		{"no gateway annotation", withSvc(func(s *corev1.Service) { delete(s.Annotations, AnnotationGateway) }), bothGates, "", "", true},
		{"NodePort type", withSvc(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort }), bothGates, ReasonUnsupported, "NodePort", true},
		{"ExternalName type", withSvc(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeExternalName }), bothGates, ReasonUnsupported, "ExternalName", true},
		{"headless", withSvc(func(s *corev1.Service) {
			s.Spec.Type, s.Spec.ClusterIP, s.Spec.ClusterIPs = corev1.ServiceTypeClusterIP, "None", []string{"None"}
		}), bothGates, ReasonUnsupported, "IPv4 ClusterIP", true},
		{"malformed gateway annotation", withSvc(func(s *corev1.Service) { s.Annotations[AnnotationGateway] = "Bad_Name!" }), bothGates, ReasonInvalidAnnotation, "Bad_Name!", true},
		{"malformed EIP annotation", withSvc(func(s *corev1.Service) { s.Annotations[AnnotationEIP] = "eip one" }), lbGates, ReasonInvalidAnnotation, "eip one", false},
		{"no EIP annotation", withSvc(func(s *corev1.Service) { delete(s.Annotations, AnnotationEIP) }), lbGates, ReasonEIPMissing, AnnotationEIP, false},
		{"empty EIP annotation", withSvc(func(s *corev1.Service) { s.Annotations[AnnotationEIP] = "" }), lbGates, ReasonEIPMissing, AnnotationEIP, false},
		{"EIP does not exist", withSnap(func(s *Snapshot) { s.EIPs = nil }), lbGates, ReasonEIPMissing, "gateway gw1 has no IptablesEIP eip1", false},
		{"EIP being deleted", withSnap(func(s *Snapshot) { s.EIPs[0].DeletionTimestamp = &metav1.Time{Time: t0} }), lbGates, ReasonEIPMissing, "gateway gw1 has no IptablesEIP eip1", false},
		{"EIP not Ready", withSnap(func(s *Snapshot) { s.EIPs[0] = eip("eip1", "gw1", "172.18.0.10", false) }), lbGates, ReasonEIPNotReady, "not Ready", false},
		{"EIP IPv6-only", withSnap(func(s *Snapshot) { s.EIPs[0] = eip("eip1", "gw1", "fd00::10", true) }), lbGates, ReasonEIPNotReady, "IPv4", false},
		// SPEC N8: an EIP of another gateway is answered as a missing one, a missing gateway as one
		// that does not admit the namespace.
		{"EIP on another gateway", withSnap(func(s *Snapshot) { s.EIPs[0] = eip("eip1", "gw2", "172.18.0.10", true) }), lbGates, ReasonEIPMissing, "gateway gw1 has no IptablesEIP eip1", false},
		{"gateway missing", withSnap(func(s *Snapshot) { s.Gateways = nil }), bothGates, ReasonNotAdmitted, "may not use VpcNatGateway gw1: it does not exist, or", true},
		{"gateway being deleted", withSnap(func(s *Snapshot) { s.Gateways[0].DeletionTimestamp = &metav1.Time{Time: t0} }), bothGates, ReasonNotAdmitted, "may not use VpcNatGateway gw1", true},
		{"both ingress annotations", withSvc(func(s *corev1.Service) { s.Annotations[AnnotationExternalIPFromSubnet] = "ext" }), bothGates, ReasonUnsupported, "mutually exclusive", true},
		{"external Local policy", withSvc(func(s *corev1.Service) {
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}), bothGates, ReasonUnsupported, "externalTrafficPolicy", true},
		{"internal Local policy", withSvc(func(s *corev1.Service) {
			s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
		}), bothGates, ReasonUnsupported, "internalTrafficPolicy", true},
		{"IPv6-only Service", withSvc(func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "fd00::1", []string{"fd00::1"} }), bothGates, ReasonUnsupported, "IPv4", true},
		{"being deleted", withSvc(func(s *corev1.Service) { s.DeletionTimestamp = &metav1.Time{Time: t0} }), bothGates, "", "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gates := c.gates
			if !c.cipToo {
				gates.ClusterIP = false
			}
			p := Compute(c.snap(), gates)
			sp := servicePlan(p, "web")
			if sp.Served() || sp.Ingress != nil || len(sp.Identities) != 0 || len(sp.Records) != 0 || sp.EIPReason == "" || sp.AddFinalizer {
				t.Fatalf("plan = %+v, want nothing served, with a reason", sp)
			}
			for _, g := range p.Gateways {
				if len(g.State.Identities) != 0 || len(g.Routes.VIPs) != 0 {
					t.Fatalf("gateway %s serves %+v for an unserved Service", g.Name, g.State)
				}
			}
			if c.reason == "" {
				if len(sp.Events) != 0 {
					t.Fatalf("events = %v, want none", sp.Events)
				}
				return
			}
			if len(sp.Events) != 1 || sp.Events[0].Reason != c.reason || sp.Events[0].Type != corev1.EventTypeWarning ||
				!strings.Contains(sp.Events[0].Message, c.inMsg) {
				t.Fatalf("events = %+v, want one Warning %s mentioning %q", sp.Events, c.reason, c.inMsg)
			}
		})
	}
}

// covers: S5
func TestDualStackServesIPv4Part(t *testing.T) {
	svc := service("web", t0, func(s *corev1.Service) {
		s.Spec.ClusterIP, s.Spec.ClusterIPs = "fd00::10", []string{"fd00::10", "10.96.0.10"}
	})
	sp := servicePlan(Compute(baseSnapshot(svc), bothGates), "web")
	if !sp.EIPServed || sp.ClusterIP != netip.MustParseAddr("10.96.0.10") {
		t.Fatalf("dual-stack: %+v", sp)
	}
}

// covers: S5, T3
func TestSCTPPortSkippedOthersServed(t *testing.T) {
	svc := service("web", t0, func(s *corev1.Service) {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "sctp", Port: 9000, Protocol: corev1.ProtocolSCTP})
	})
	sp := servicePlan(Compute(baseSnapshot(svc), lbGates), "web")
	if !sp.EIPServed || len(sp.Identities) != 1 || sp.Identities[0].Protocol != gwstate.TCP {
		t.Fatalf("plan = %+v, want the TCP port served", sp)
	}
	if len(sp.Events) != 1 || sp.Events[0].Reason != ReasonUnsupported || !strings.Contains(sp.Events[0].Message, "SCTP") {
		t.Fatalf("events = %+v, want one about SCTP", sp.Events)
	}
}

// covers: S7, D3
func TestAffinity(t *testing.T) {
	cases := []struct {
		timeout *int32
		want    int32
	}{{nil, 10800}, {ptr.To[int32](60), 60}, {ptr.To[int32](86400), 86400}, {ptr.To[int32](100000), 86400}}
	for _, c := range cases {
		svc := service("web", t0, func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: c.timeout}}
		})
		sp := servicePlan(Compute(baseSnapshot(svc), bothGates), "web")
		for _, id := range sp.Identities {
			if id.AffinityTimeoutSeconds != c.want {
				t.Fatalf("timeout %v: identity %s has %d, want %d on every identity", c.timeout, id.Key(), id.AffinityTimeoutSeconds, c.want)
			}
		}
		if r := sp.Records[0]; r.Spec.SessionAffinity != kubeovnv1.DnatSessionAffinityClientIP || r.Spec.SessionAffinityTimeoutSeconds != c.want {
			t.Fatalf("record affinity = %q %d", r.Spec.SessionAffinity, r.Spec.SessionAffinityTimeoutSeconds)
		}
	}
	sp := servicePlan(Compute(baseSnapshot(service("web", t0)), lbGates), "web")
	if sp.Identities[0].AffinityTimeoutSeconds != 0 || sp.Records[0].Spec.SessionAffinity != "" {
		t.Fatal("affinity without ClientIP")
	}
}

// covers: B1
func TestEndpointSelection(t *testing.T) {
	s := baseSnapshot(service("web", t0, func(s *corev1.Service) {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP})
	}))
	s.EndpointSlices = append(s.EndpointSlices,
		slice("web", "web-b", discoveryv1.AddressTypeIPv4, 8080, "http", corev1.ProtocolTCP,
			ep{ip: "10.0.1.11"},                        // duplicated across slices: counted once
			ep{ip: "10.0.1.14", terminating: true},     // terminating
			ep{ip: "10.0.1.15", ready: ptr.To(false)}), // not ready
		slice("web", "web-v6", discoveryv1.AddressTypeIPv6, 8080, "http", corev1.ProtocolTCP, ep{ip: "fd00::11"}),
		slice("web", "web-c", discoveryv1.AddressTypeIPv4, 9999, "metrics", corev1.ProtocolTCP, ep{ip: "10.0.1.20"}), // no such Service port
		slice("web", "web-e", discoveryv1.AddressTypeIPv4, 8080, "dns", corev1.ProtocolTCP, ep{ip: "10.0.1.21"}),     // name matches, protocol not
		slice("web", "web-d", discoveryv1.AddressTypeIPv4, 5353, "dns", corev1.ProtocolUDP, ep{ip: "10.0.1.30"}),
		slice("other", "other-a", discoveryv1.AddressTypeIPv4, 8080, "http", corev1.ProtocolTCP, ep{ip: "10.0.1.40"}),
	)
	p := Compute(s, lbGates)
	st := p.Gateway("gw1").State
	g := IdentityGroup(servicePlan(p, "web").UID)
	want := []gwstate.Identity{
		{VIP: netip.MustParseAddr("172.18.0.10"), Port: 53, Protocol: gwstate.UDP, Backends: []gwstate.Backend{{IP: netip.MustParseAddr("10.0.1.30"), Port: 5353}}, Group: g},
		{VIP: netip.MustParseAddr("172.18.0.10"), Port: 80, Protocol: gwstate.TCP, Backends: twoBackends, Group: g},
	}
	if !reflect.DeepEqual(st.Identities, want) {
		t.Fatalf("identities = %+v\nwant %+v", st.Identities, want)
	}
}

// covers: L11, D6
// A terminating endpoint that still serves takes no new flow; on a UDP port it is named as
// draining, so that the agent keeps its flows (a UDP answer in flight reaches its client). An
// address ready in another slice serves, and a terminating endpoint that stopped serving is gone.
func TestDrainingEndpoints(t *testing.T) {
	s := baseSnapshot(service("web", t0, func(s *corev1.Service) {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP})
	}))
	s.EndpointSlices = nil
	drain := func(e ep, serving bool) ep {
		e.terminating, e.ready, e.serving = true, ptr.To(false), ptr.To(serving)
		return e
	}
	for _, proto := range []struct {
		name string
		p    corev1.Protocol
		port int32
	}{{"http", corev1.ProtocolTCP, 8080}, {"dns", corev1.ProtocolUDP, 5353}} {
		s.EndpointSlices = append(s.EndpointSlices,
			slice("web", "web-"+proto.name+"-a", discoveryv1.AddressTypeIPv4, proto.port, proto.name, proto.p,
				ep{ip: "10.0.1.31"},
				drain(ep{ip: "10.0.1.32"}, true),  // in its preStop hook
				drain(ep{ip: "10.0.1.33"}, false), // stopped serving
				drain(ep{ip: "10.0.1.34"}, true)), // ready again below: it serves
			slice("web", "web-"+proto.name+"-b", discoveryv1.AddressTypeIPv4, proto.port, proto.name, proto.p,
				ep{ip: "10.0.1.34"}))
	}
	p := Compute(s, lbGates)
	be := func(ip string, port int32) gwstate.Backend {
		return gwstate.Backend{IP: netip.MustParseAddr(ip), Port: port}
	}
	for _, id := range p.Gateway("gw1").State.Identities {
		wantServing := []gwstate.Backend{be("10.0.1.31", 8080), be("10.0.1.34", 8080)}
		var wantDraining []gwstate.Backend
		if id.Protocol == gwstate.UDP {
			wantServing = []gwstate.Backend{be("10.0.1.31", 5353), be("10.0.1.34", 5353)}
			wantDraining = []gwstate.Backend{be("10.0.1.32", 5353)}
		}
		if !reflect.DeepEqual(id.Backends, wantServing) || !reflect.DeepEqual(id.Draining, wantDraining) {
			t.Errorf("%s: backends %v, draining %v; want %v and %v", id.Key(), id.Backends, id.Draining, wantServing, wantDraining)
		}
	}
	if recs := servicePlan(p, "web").Records; len(recs) == 0 {
		t.Fatal("no records")
	}

	// A gateway with room for the serving backends only keeps the Service served without its
	// draining ones: kept flows give way, never a served Service.
	full := lbGates
	full.MaxBackendsPerGateway = 4
	sp := servicePlan(Compute(soleTenant(s), full), "web")
	if !sp.Served() || sp.Limited {
		t.Fatalf("a gateway with room for the serving backends: served %v, limited %v, events %v", sp.Served(), sp.Limited, sp.Events)
	}
	for _, id := range sp.Identities {
		if len(id.Draining) > 0 || len(id.Backends) != 2 {
			t.Errorf("%s at the bound: backends %v, draining %v; want 2 and none", id.Key(), id.Backends, id.Draining)
		}
	}
}

// covers: B2, T3, N2
func TestBackendNICResolution(t *testing.T) {
	s := baseSnapshot(service("web", t0))
	s.EndpointSlices = []discoveryv1.EndpointSlice{
		slice("web", "web-a", discoveryv1.AddressTypeIPv4, 8080, "http", corev1.ProtocolTCP,
			ep{ip: "192.168.0.5", pod: "single"},     // primary NIC elsewhere, attachment NIC in the VPC
			ep{ip: "192.168.0.6", pod: "two-in-vpc"}, // two NICs in the VPC: lowest wins
			ep{ip: "192.168.0.7", pod: "outside"},    // all NICs outside: skipped
			ep{ip: "192.168.0.8", pod: "missing"},    // Pod not in the snapshot: skipped
			ep{ip: "10.0.1.50", pod: "plain"},        // no kube-ovn annotations: skipped (SPEC N2)
			ep{ip: "10.0.1.60"}),                     // no Pod: endpoint address
		slice("web", "web-b", discoveryv1.AddressTypeIPv4, 8080, "http", corev1.ProtocolTCP,
			ep{ip: "192.168.0.7", pod: "outside"}), // the same skipped Pod again: one event
	}
	s.Pods = []corev1.Pod{
		backendPod("single", map[string][2]string{"ovn": {"192.168.0.5", "ovn-default"}, "net1.ns.ovn": {"10.0.1.31,fd00::31", "vpc1-subnet"}}),
		backendPod("two-in-vpc", map[string][2]string{"ovn": {"10.0.1.90", "vpc1-subnet"}, "net1.ns.ovn": {"10.0.1.9", "vpc1-subnet"}}),
		backendPod("outside", map[string][2]string{"ovn": {"192.168.0.7", "ovn-default"}, "net2.ns.ovn": {"10.9.0.7", "other-subnet"}}),
		{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "ns"}},
	}
	s.PodAddresses = addressesOf(s.Pods...)
	sp := servicePlan(Compute(s, lbGates), "web")
	want := []gwstate.Backend{{IP: netip.MustParseAddr("10.0.1.9"), Port: 8080}, {IP: netip.MustParseAddr("10.0.1.31"), Port: 8080}, {IP: netip.MustParseAddr("10.0.1.60"), Port: 8080}}
	if len(sp.Identities) != 1 || !reflect.DeepEqual(sp.Identities[0].Backends, want) {
		t.Fatalf("backends = %+v, want %+v", sp.Identities, want)
	}
	var skipped []string
	for _, ev := range sp.Events {
		if ev.Reason == ReasonBackendSkipped {
			skipped = append(skipped, ev.Message)
		}
	}
	if len(skipped) != 2 || !strings.Contains(skipped[0], "ns/outside") || !strings.Contains(skipped[1], "ns/plain") {
		t.Fatalf("skip events = %v, want exactly one for ns/outside and one for ns/plain", skipped)
	}
}

// covers: I2, T1, T3
func TestConflictOldestWins(t *testing.T) {
	older := service("zzz-old", t0)
	newer := service("aaa-new", t0.Add(time.Minute), func(s *corev1.Service) {
		s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.96.0.20", []string{"10.96.0.20"}
	})
	p := Compute(baseSnapshot(newer, older), bothGates)
	if sp := servicePlan(p, "zzz-old"); !sp.EIPServed {
		t.Fatalf("older Service not served: %+v", sp)
	}
	loser := servicePlan(p, "aaa-new")
	if loser.EIPServed || loser.Ingress != nil || !loser.ClusterIPServed || len(loser.Events) != 1 || loser.Events[0].Reason != ReasonConflict ||
		!strings.Contains(loser.Events[0].Message, "ns/zzz-old") {
		t.Fatalf("newer Service = %+v, want the ClusterIP kept and a conflict naming ns/zzz-old", loser)
	}
	for _, id := range loser.Identities {
		if id.VIP == netip.MustParseAddr("172.18.0.10") {
			t.Fatalf("loser serves EIP identity %s", id.Key())
		}
	}
	// Different port: no conflict.
	other := service("other-port", t0.Add(time.Hour), func(s *corev1.Service) { s.Spec.Ports[0].Port = 443 })
	if !servicePlan(Compute(baseSnapshot(older, other), lbGates), "other-port").EIPServed {
		t.Fatal("a different port on the same EIP conflicted")
	}
	// Same creation time: namespace/name decides.
	a, b := service("aab", t0.Add(time.Hour)), service("bbb", t0.Add(time.Hour))
	p = Compute(baseSnapshot(b, a), lbGates)
	if !servicePlan(p, "aab").EIPServed || servicePlan(p, "bbb").EIPServed {
		t.Fatalf("tie not broken by name")
	}
	// A contender that cannot serve (EIP annotation on another EIP) does not block the other.
	// The winner leaves: the other takes over.
	if !servicePlan(Compute(baseSnapshot(newer), lbGates), "aaa-new").EIPServed {
		t.Fatal("the remaining Service did not take the identity over")
	}
}

// covers: I2, T3 (a ClusterIP claimed twice, which a real cluster never does, stays deterministic)
func TestDuplicateClusterIP(t *testing.T) {
	a := service("first", t0, func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.96.9.9", []string{"10.96.9.9"} })
	b := service("second", t0.Add(time.Second), func(s *corev1.Service) {
		s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.96.9.9", []string{"10.96.9.9"}
		s.Annotations[AnnotationEIP] = "eip2"
	})
	s := baseSnapshot(b, a)
	s.EIPs = append(s.EIPs, eip("eip2", "gw1", "172.18.0.11", true))
	p := Compute(s, bothGates)
	if first := servicePlan(p, "first"); !first.ClusterIPServed {
		t.Fatalf("first = %+v", first)
	}
	second := servicePlan(p, "second")
	if second.ClusterIPServed || !second.EIPServed || len(second.Events) != 1 || second.Events[0].Reason != ReasonConflict {
		t.Fatalf("second = %+v, want its EIP served and a ClusterIP conflict", second)
	}
	if err := p.Gateway("gw1").State.Validate(); err != nil {
		t.Fatalf("gateway state invalid: %v", err)
	}
}

// covers: R1
func TestRecordNames(t *testing.T) {
	long := strings.Repeat("a", 63)
	for _, name := range []string{"web", long, "a-" + strings.Repeat("b", 50) + "-", "x"} {
		n := RecordName("ns", name, gwstate.TCP, 80, "10.0.1.1", 8080)
		if len(n) > 63 || len(validation.IsDNS1123Label(n)) > 0 || !strings.HasPrefix(n, "lb-") {
			t.Fatalf("RecordName(%q) = %q: not a DNS-1123 label of at most 63 characters", name, n)
		}
	}
	a := RecordName("ns", "web", gwstate.TCP, 80, "10.0.1.1", 8080)
	if a != RecordName("ns", "web", gwstate.TCP, 80, "10.0.1.1", 8080) {
		t.Fatal("not stable")
	}
	for _, b := range []string{
		RecordName("ns2", "web", gwstate.TCP, 80, "10.0.1.1", 8080), RecordName("ns", "web", gwstate.UDP, 80, "10.0.1.1", 8080),
		RecordName("ns", "web", gwstate.TCP, 81, "10.0.1.1", 8080), RecordName("ns", "web", gwstate.TCP, 80, "10.0.1.2", 8080),
		RecordName("ns", "web", gwstate.TCP, 80, "10.0.1.1", 8081),
	} {
		if a == b {
			t.Fatalf("two identities share record name %s", a)
		}
	}
}

// covers: R4, R5, I3, T2, L2, L3, L4, L5, F5
func TestLifecycleWrites(t *testing.T) {
	served := baseSnapshot(service("web", t0))
	served = applyPlan(served, Compute(served, bothGates))
	if len(served.Records) != 2 || !slices.Contains(served.Services[0].Finalizers, Finalizer) {
		t.Fatalf("set-up: %+v", served)
	}

	t.Run("matching cluster asks for no writes", func(t *testing.T) {
		if w := writes(Compute(served, bothGates)); len(w) != 0 {
			t.Fatalf("writes = %v", w)
		}
	})
	t.Run("record deleted by hand is recreated", func(t *testing.T) {
		s := served
		s.Records = s.Records[1:]
		sp := servicePlan(Compute(s, bothGates), "web")
		if len(sp.CreateRecords) != 1 || len(writes(Compute(s, bothGates))) != 2 { // create + status
			t.Fatalf("plan = %v", writes(Compute(s, bothGates)))
		}
	})
	t.Run("record edited by hand is restored", func(t *testing.T) {
		s := served
		s.Records = slices.Clone(s.Records)
		s.Records[0].Spec.InternalPort = "9999"
		if sp := servicePlan(Compute(s, bothGates), "web"); len(sp.UpdateRecords) != 1 {
			t.Fatalf("plan = %v", writes(Compute(s, bothGates)))
		}
	})
	t.Run("backend leaves", func(t *testing.T) {
		s := served
		s.EndpointSlices = []discoveryv1.EndpointSlice{slice("web", "web-a", discoveryv1.AddressTypeIPv4, 8080, "http", corev1.ProtocolTCP, ep{ip: "10.0.1.11"})}
		sp := servicePlan(Compute(s, bothGates), "web")
		if len(sp.DeleteRecords) != 1 || sp.ReleaseFinalizer || sp.IngressWrite {
			t.Fatalf("plan = %v", writes(Compute(s, bothGates)))
		}
	})
	releaseAll := func(t *testing.T, s Snapshot, gates Gates) {
		t.Helper()
		p := Compute(s, gates)
		sp := servicePlan(p, "web")
		if sp.Served() || !sp.ReleaseFinalizer || len(sp.DeleteRecords) != 2 || !sp.IngressWrite || sp.Ingress != nil {
			t.Fatalf("plan = %+v (%v), want everything released", sp, writes(p))
		}
		for _, g := range p.Gateways {
			if len(g.State.Identities)+len(g.State.ClusterIPs)+len(g.Routes.VIPs) != 0 {
				t.Fatalf("gateway %s still serves: %+v", g.Name, g)
			}
		}
		if w := writes(Compute(applyPlan(s, p), gates)); len(w) != 0 {
			t.Fatalf("after the release: writes = %v", w)
		}
	}
	t.Run("both annotations cleared (L2)", func(t *testing.T) {
		s := served
		s.Services = []corev1.Service{*s.Services[0].DeepCopy()}
		s.Services[0].Annotations = nil
		releaseAll(t, s, bothGates)
	})
	t.Run("Service deleted (L3)", func(t *testing.T) {
		s := served
		s.Services = []corev1.Service{*s.Services[0].DeepCopy()}
		s.Services[0].DeletionTimestamp = &metav1.Time{Time: t0}
		releaseAll(t, s, bothGates)
	})
	t.Run("gateway deleted (L5)", func(t *testing.T) {
		s := served
		s.Gateways = nil
		releaseAll(t, s, bothGates)
	})
	t.Run("both gates off (F5)", func(t *testing.T) {
		releaseAll(t, served, Gates{})
	})
	t.Run("only the EIP annotation cleared (L2)", func(t *testing.T) {
		s := served
		s.Services = []corev1.Service{*s.Services[0].DeepCopy()}
		delete(s.Services[0].Annotations, AnnotationEIP)
		p := Compute(s, bothGates)
		sp := servicePlan(p, "web")
		if sp.EIPServed || !sp.ClusterIPServed || sp.ReleaseFinalizer || len(sp.UpdateRecords) != 2 || !sp.IngressWrite || sp.Ingress != nil {
			t.Fatalf("plan = %+v", writes(p))
		}
		if r := sp.UpdateRecords[0]; r.Spec.EIP != "" || r.Labels[LabelEIPAddress] != "" {
			t.Fatalf("record keeps the EIP: %+v", r)
		}
		if vips := p.Gateway("gw1").Routes.VIPs; !reflect.DeepEqual(vips, []string{"10.96.0.10"}) {
			t.Fatalf("VIPs = %v", vips)
		}
	})
	t.Run("EIP deleted (L4)", func(t *testing.T) {
		s := served
		s.EIPs = nil
		sp := servicePlan(Compute(s, lbGates), "web")
		if sp.EIPServed || !sp.ReleaseFinalizer || !sp.IngressWrite || sp.Ingress != nil {
			t.Fatalf("plan = %+v", sp)
		}
	})
	t.Run("Service gone while the controller was down (R5)", func(t *testing.T) {
		s := served
		s.Services = nil
		p := Compute(s, bothGates)
		if len(p.OrphanRecords) != 2 {
			t.Fatalf("orphans = %v", p.OrphanRecords)
		}
	})
	t.Run("recreated with the same name (I3)", func(t *testing.T) {
		s := served
		again := service("web", t0.Add(time.Hour), func(s *corev1.Service) { s.UID = "uid-web-2" })
		s.Services = []corev1.Service{again}
		p := Compute(s, bothGates)
		sp := servicePlan(p, "web")
		if len(p.OrphanRecords) != 2 || len(sp.CreateRecords) != 2 || len(sp.UpdateRecords) != 0 || !sp.AddFinalizer {
			t.Fatalf("plan = %v", writes(p))
		}
		if sp.CreateRecords[0].Labels[LabelRecordUID] != "uid-web-2" {
			t.Fatal("new records not owned by the new UID")
		}
	})
	t.Run("hand-made share rule is not a record", func(t *testing.T) {
		s := served
		s.Records = append(slices.Clone(s.Records), kubeovnv1.IptablesDnatRule{ObjectMeta: metav1.ObjectMeta{Name: "manual",
			Labels: map[string]string{LabelGateway: "gw1"}}, Spec: kubeovnv1.IptablesDnatRuleSpec{Type: kubeovnv1.DnatRuleTypeShare}})
		if w := writes(Compute(s, bothGates)); len(w) != 0 {
			t.Fatalf("writes = %v", w)
		}
	})
}

// covers: D7, V1, N5
func TestGatewayInstances(t *testing.T) {
	s := baseSnapshot(service("web", t0))
	s.GatewayPods = []corev1.Pod{
		gatewayPod("gw1", "vpc-nat-gw-gw1-1", "10.0.1.250", true, true),
		gatewayPod("gw1", "vpc-nat-gw-gw1-0", "10.0.1.251", true, false), // not initialized: programmed, no route
		gatewayPod("gw1", "vpc-nat-gw-gw1-2", "10.0.1.252", false, true), // not running
		gatewayPod("gw2", "vpc-nat-gw-gw2-0", "10.0.1.253", true, true),  // another gateway
		// Look-alikes (SPEC N5): the labels, the annotations and a controller reference to
		// kube-ovn's StatefulSet, but not a name the StatefulSet gives its Pods.
		gatewayPod("gw1", "vpc-nat-gw-gw1-evil", "10.0.1.240", true, true),
		gatewayPod("gw1", "evil-vpc-nat-gw-gw1-3", "10.0.1.241", true, true),
		gatewayPod("gw1", "vpc-nat-gw-gw1-", "10.0.1.242", true, true),
	}
	s.GatewayStatefulSets = []appsv1.StatefulSet{gatewayStatefulSet("gw1", 3), gatewayStatefulSet("gw2", 1)}
	gp := Compute(s, lbGates).Gateway("gw1")
	var names []string
	for _, inst := range gp.Instances {
		names = append(names, inst.Pod.Name)
	}
	if !reflect.DeepEqual(names, []string{"vpc-nat-gw-gw1-0", "vpc-nat-gw-gw1-1"}) || !reflect.DeepEqual(gp.Routes.NextHops, []string{"10.0.1.250"}) {
		t.Fatalf("instances %v, next hops %v", names, gp.Routes.NextHops)
	}
}

// covers: I1, I2, B1, B2 (the Plan does not depend on input order)
func TestComputeIgnoresInputOrder(t *testing.T) {
	s := baseSnapshot(service("web", t0), service("web2", t0.Add(time.Second)), service("web3", t0.Add(time.Second), func(s *corev1.Service) {
		s.Spec.Ports[0].Port = 81
		s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.96.0.30", []string{"10.96.0.30"}
	}))
	s.EIPs = append(s.EIPs, eip("eip2", "gw1", "172.18.0.11", true), eip("eip3", "gw2", "172.18.0.12", true))
	s.Gateways = append(s.Gateways, gateway("gw2", "vpc1"))
	s.GatewayPods = append(s.GatewayPods, gatewayPod("gw1", "vpc-nat-gw-gw1-1", "10.0.1.253", true, true),
		gatewayPod("gw1", "vpc-nat-gw-gw1-2", "10.0.1.252", true, true)) // beyond the replicas: refused
	s.GatewayStatefulSets = []appsv1.StatefulSet{gatewayStatefulSet("gw1", 2), gatewayStatefulSet("gw2", 1)}
	s.EndpointSlices = append(s.EndpointSlices,
		slice("web", "web-b", discoveryv1.AddressTypeIPv4, 8080, "http", corev1.ProtocolTCP, ep{ip: "10.0.1.9"}, ep{ip: "10.0.1.200"}),
		slice("web3", "web3-a", discoveryv1.AddressTypeIPv4, 8080, "http", corev1.ProtocolTCP, ep{ip: "10.0.1.5"}, ep{ip: "9.9.9.9", pod: "outside"}))
	s.Pods = []corev1.Pod{backendPod("outside", map[string][2]string{"ovn": {"9.9.9.9", "other-subnet"}, "x.ns.ovn": {"9.9.9.8", "other-subnet"}})}
	s.PodAddresses = addressesOf(s.Pods...)
	s = applyPlan(s, Compute(s, bothGates))
	s.Records = append(s.Records, kubeovnv1.IptablesDnatRule{ObjectMeta: metav1.ObjectMeta{Name: "orphan", Labels: map[string]string{LabelRecord: "true", LabelRecordUID: "gone"}}})
	want := Compute(s, bothGates)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 50; i++ {
		c := Snapshot{
			Gateways: shuffled(rng, s.Gateways), EIPs: shuffled(rng, s.EIPs), Services: shuffled(rng, s.Services),
			EndpointSlices: shuffled(rng, s.EndpointSlices), Pods: shuffled(rng, s.Pods), PodAddresses: shuffled(rng, s.PodAddresses), Subnets: shuffled(rng, s.Subnets),
			GatewayPods: shuffled(rng, s.GatewayPods), GatewayStatefulSets: shuffled(rng, s.GatewayStatefulSets), Records: shuffled(rng, s.Records), Vpcs: shuffled(rng, s.Vpcs),
		}
		for j := range c.EndpointSlices {
			c.EndpointSlices[j].Endpoints = shuffled(rng, c.EndpointSlices[j].Endpoints)
		}
		for j := range c.Services {
			c.Services[j].Spec.Ports = shuffled(rng, c.Services[j].Spec.Ports)
		}
		got := Compute(c, bothGates)
		// Instances point into the snapshot; compare them by name.
		if !reflect.DeepEqual(stripPods(got), stripPods(want)) {
			t.Fatalf("shuffle %d changed the plan:\n got %+v\nwant %+v", i, got, want)
		}
	}
}

func stripPods(p Plan) Plan {
	p.Gateways = slices.Clone(p.Gateways)
	for i := range p.Gateways {
		insts := slices.Clone(p.Gateways[i].Instances)
		for j := range insts {
			insts[j].Pod = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: insts[j].Pod.Name}}
		}
		p.Gateways[i].Instances = insts
	}
	// Events of a Service with several ports follow port order; compare them as sets.
	p.Services = slices.Clone(p.Services)
	for i := range p.Services {
		evs := slices.Clone(p.Services[i].Events)
		slices.SortFunc(evs, func(a, b Event) int { return strings.Compare(a.Reason+a.Message, b.Reason+b.Message) })
		p.Services[i].Events = evs
		ids := slices.Clone(p.Services[i].Identities)
		slices.SortFunc(ids, func(a, b gwstate.Identity) int { return a.Key().Compare(b.Key()) })
		p.Services[i].Identities = ids
	}
	return p
}

func shuffled[T any](rng *rand.Rand, in []T) []T {
	out := slices.Clone(in)
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// covers: S1, S2, W1 (arbitrary annotation values never break the model)
func FuzzAnnotations(f *testing.F) {
	for _, s := range []string{"gw1", "", "Bad_Name", "a.b", strings.Repeat("x", 300), "eip1", "\x00", "gw1 "} {
		f.Add(s, "eip1", "ext")
		f.Add("gw1", s, "")
	}
	f.Fuzz(func(t *testing.T, gw, eipName, fromSubnet string) {
		svc := service("web", t0, func(s *corev1.Service) {
			s.Annotations = map[string]string{AnnotationGateway: gw, AnnotationEIP: eipName}
			if fromSubnet != "" {
				s.Annotations[AnnotationExternalIPFromSubnet] = fromSubnet
			}
		})
		p := Compute(baseSnapshot(svc), bothGates)
		sp := servicePlan(p, "web")
		if sp.Served() && len(validation.IsDNS1123Subdomain(gw)) > 0 {
			t.Fatalf("served through an invalid gateway name %q", gw)
		}
		for _, r := range sp.Records {
			if len(validation.IsDNS1123Label(r.Name)) > 0 {
				t.Fatalf("record name %q invalid", r.Name)
			}
		}
	})
}

// covers: L10, S5, T1, T2, T3
// A Service whose only port is SCTP has no identity, so nothing is published for it: no ingress,
// no finalizer, no ClusterIP held on the gateway, no VIP route, no record; one event says why.
// Before, it got the EIP as EXTERNAL-IP, the finalizer, its ClusterIP on lo and a route, and
// served nothing. A served Service whose ports turn SCTP-only is released the same way.
func TestSCTPOnlyServiceIsNotHalfPublished(t *testing.T) {
	sctpOnly := func(s *corev1.Service) {
		s.Spec.Ports = []corev1.ServicePort{{Name: "sctp", Port: 9000, Protocol: corev1.ProtocolSCTP}}
	}
	check := func(t *testing.T, p Plan) {
		t.Helper()
		sp := servicePlan(p, "web")
		gp := p.Gateway("gw1")
		if sp.Served() || len(sp.Identities) != 0 || len(sp.Ingress) != 0 || sp.AddFinalizer || sp.Record != nil || sp.Claim == ClaimStamp {
			t.Fatalf("an SCTP-only Service is published: %+v", sp)
		}
		if len(gp.State.Identities) != 0 || len(gp.State.ClusterIPs) != 0 || len(gp.Routes.VIPs) != 0 {
			t.Fatalf("the gateway holds something for an SCTP-only Service: identities %v, ClusterIPs %v, routes %v", gp.State.Identities, gp.State.ClusterIPs, gp.Routes.VIPs)
		}
		if len(sp.Events) != 1 || sp.Events[0].Reason != ReasonUnsupported || !strings.Contains(sp.Events[0].Message, "no TCP or UDP port (9000/SCTP)") {
			t.Fatalf("events = %+v, want one saying the Service has no TCP or UDP port", sp.Events)
		}
	}
	check(t, Compute(baseSnapshot(service("web", t0, sctpOnly)), bothGates))

	// Served first, then SCTP-only: ingress withdrawn, records and finalizer released.
	snap := converge(t, baseSnapshot(service("web", t0)), bothGates)
	if sp := servicePlan(Compute(snap, bothGates), "web"); !sp.EIPServed {
		t.Fatalf("the TCP Service is not served: %s", sp.EIPReason)
	}
	sctpOnly(&snap.Services[0])
	p := Compute(snap, bothGates)
	check(t, p)
	sp := servicePlan(p, "web")
	if !sp.IngressWrite || len(sp.Ingress) != 0 || len(sp.DeleteServiceRecords)+len(sp.DeleteRecords) == 0 || !sp.ReleaseFinalizer {
		t.Fatalf("the Service turned SCTP-only is not released: ingress write %v %v, record deletes %v %v, release finalizer %v",
			sp.IngressWrite, sp.Ingress, sp.DeleteServiceRecords, sp.DeleteRecords, sp.ReleaseFinalizer)
	}
	if final := converge(t, snap, bothGates); HasClaimStamp(&final.Services[0]) || len(final.Services[0].Finalizers) != 0 {
		t.Fatalf("after the release the Service keeps %v, %v", final.Services[0].Finalizers, final.Services[0].Status.Conditions)
	}
}
