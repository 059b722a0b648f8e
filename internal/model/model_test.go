package model

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	"github.com/vpcgw/vpcgw/internal/gwstate"
)

var (
	lbGates = Gates{LoadBalancer: true}
	t0      = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
)

func gateway(name string) kubeovnv1.VpcNatGateway {
	return kubeovnv1.VpcNatGateway{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: kubeovnv1.VpcNatGatewaySpec{Vpc: "vpc1", Subnet: "vpc1-subnet", LanIP: "10.0.1.254"}}
}

func eip(name, gw, ip string, ready bool) kubeovnv1.IptablesEIP {
	e := kubeovnv1.IptablesEIP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kubeovnv1.IptablesEIPSpec{NatGwDp: gw, V4ip: ip}}
	if ready {
		e.Status.Ready, e.Status.IP = true, ip
	}
	return e
}

func service(name string, created time.Time, mutate ...func(*corev1.Service)) corev1.Service {
	s := corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(created),
			Annotations:       map[string]string{AnnotationGateway: "gw1", AnnotationEIP: "eip1"}},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
		},
	}
	for _, m := range mutate {
		m(&s)
	}
	return s
}

type ep struct {
	ip    string
	ready *bool
}

func slice(svc, name string, addrType discoveryv1.AddressType, port int32, portName string, proto corev1.Protocol, eps ...ep) discoveryv1.EndpointSlice {
	es := discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: addrType,
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Protocol: &proto, Port: &port}},
	}
	for _, e := range eps {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{e.ip}, Conditions: discoveryv1.EndpointConditions{Ready: e.ready}})
	}
	return es
}

func baseSnapshot(svcs ...corev1.Service) Snapshot {
	return Snapshot{
		Gateways: []kubeovnv1.VpcNatGateway{gateway("gw1")},
		EIPs:     []kubeovnv1.IptablesEIP{eip("eip1", "gw1", "172.18.0.10", true)},
		Services: svcs,
		EndpointSlices: []discoveryv1.EndpointSlice{
			slice("web", "web-a", discoveryv1.AddressTypeIPv4, 8080, "http", corev1.ProtocolTCP,
				ep{"10.0.1.12", nil}, ep{"10.0.1.11", ptr.To(true)}, ep{"10.0.1.13", ptr.To(false)}),
		},
	}
}

func servicePlan(t *testing.T, p Plan, name string) ServicePlan {
	t.Helper()
	for _, sp := range p.Services {
		if sp.Key.Name == name {
			return sp
		}
	}
	t.Fatalf("no plan for Service %s", name)
	return ServicePlan{}
}

// covers: S1, S2, B1, I1, T1, D2
func TestServedLoadBalancer(t *testing.T) {
	p := Compute(baseSnapshot(service("web", t0)), lbGates)
	sp := servicePlan(t, p, "web")
	if !sp.EIPServed || sp.Reason != "" || len(sp.Events) != 0 {
		t.Fatalf("plan = %+v, want served without events", sp)
	}
	if !reflect.DeepEqual(sp.Ingress, []corev1.LoadBalancerIngress{{IP: "172.18.0.10"}}) {
		t.Fatalf("ingress = %v", sp.Ingress)
	}
	want := []gwstate.Identity{{VIP: "172.18.0.10", Port: 80, Protocol: gwstate.TCP,
		Backends: []gwstate.Backend{{IP: "10.0.1.11", Port: 8080}, {IP: "10.0.1.12", Port: 8080}}}}
	if len(p.Gateways) != 1 || !reflect.DeepEqual(p.Gateways[0].State.Identities, want) {
		t.Fatalf("gateway state = %+v, want %+v (ready endpoints only, sorted)", p.Gateways, want)
	}
}

// covers: S2, S3, S4, S5, S6, T3, F1
func TestNotServed(t *testing.T) {
	cases := []struct {
		name   string
		snap   func() Snapshot
		gates  Gates
		reason string // expected event reason; "" means no event
		inMsg  string
	}{
		{"gate off", func() Snapshot { return baseSnapshot(service("web", t0)) }, Gates{}, "", ""},
		{"ClusterIP type", func() Snapshot {
			return baseSnapshot(service("web", t0, func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeClusterIP }))
		}, lbGates, ReasonUnsupported, "LoadBalancer"},
		{"NodePort type", func() Snapshot {
			return baseSnapshot(service("web", t0, func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort }))
		}, lbGates, ReasonUnsupported, "NodePort"},
		{"no EIP annotation", func() Snapshot {
			return baseSnapshot(service("web", t0, func(s *corev1.Service) { delete(s.Annotations, AnnotationEIP) }))
		}, lbGates, ReasonEIPMissing, AnnotationEIP},
		{"empty EIP annotation", func() Snapshot {
			return baseSnapshot(service("web", t0, func(s *corev1.Service) { s.Annotations[AnnotationEIP] = "" }))
		}, lbGates, ReasonEIPMissing, AnnotationEIP},
		{"EIP does not exist", func() Snapshot {
			s := baseSnapshot(service("web", t0))
			s.EIPs = nil
			return s
		}, lbGates, ReasonEIPMissing, "does not exist"},
		{"EIP not Ready", func() Snapshot {
			s := baseSnapshot(service("web", t0))
			s.EIPs = []kubeovnv1.IptablesEIP{eip("eip1", "gw1", "172.18.0.10", false)}
			return s
		}, lbGates, ReasonEIPNotReady, "not Ready"},
		{"EIP Ready with an IPv6 address", func() Snapshot {
			s := baseSnapshot(service("web", t0))
			e := eip("eip1", "gw1", "fd00::10", true)
			s.EIPs = []kubeovnv1.IptablesEIP{e}
			return s
		}, lbGates, ReasonEIPNotReady, "IPv4"},
		{"EIP on another gateway", func() Snapshot {
			s := baseSnapshot(service("web", t0))
			s.EIPs = []kubeovnv1.IptablesEIP{eip("eip1", "gw2", "172.18.0.10", true)}
			return s
		}, lbGates, ReasonEIPWrongGateway, "gw2"},
		{"gateway missing", func() Snapshot {
			s := baseSnapshot(service("web", t0))
			s.Gateways = nil
			return s
		}, lbGates, ReasonGatewayMissing, "gw1"},
		{"both ingress annotations", func() Snapshot {
			return baseSnapshot(service("web", t0, func(s *corev1.Service) { s.Annotations[AnnotationExternalIPFromSubnet] = "ext" }))
		}, lbGates, ReasonUnsupported, "mutually exclusive"},
		{"Local traffic policy", func() Snapshot {
			return baseSnapshot(service("web", t0, func(s *corev1.Service) {
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			}))
		}, lbGates, ReasonUnsupported, "Local"},
		{"IPv6-only Service", func() Snapshot {
			return baseSnapshot(service("web", t0, func(s *corev1.Service) {
				s.Spec.ClusterIP, s.Spec.ClusterIPs = "fd00::1", []string{"fd00::1"}
			}))
		}, lbGates, ReasonUnsupported, "IPv4"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := Compute(c.snap(), c.gates)
			sp := servicePlan(t, p, "web")
			if sp.EIPServed || sp.Ingress != nil || len(sp.Identities) != 0 || sp.Reason == "" {
				t.Fatalf("plan = %+v, want not served, with a reason", sp)
			}
			for _, g := range p.Gateways {
				if len(g.State.Identities) != 0 {
					t.Fatalf("gateway %s programs %v for an unserved Service", g.Name, g.State.Identities)
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

// covers: S5, T3
func TestSCTPPortSkippedOthersServed(t *testing.T) {
	svc := service("web", t0, func(s *corev1.Service) {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "sctp", Port: 9000, Protocol: corev1.ProtocolSCTP})
	})
	sp := servicePlan(t, Compute(baseSnapshot(svc), lbGates), "web")
	if !sp.EIPServed || len(sp.Identities) != 1 || sp.Identities[0].Protocol != gwstate.TCP {
		t.Fatalf("plan = %+v, want the TCP port served", sp)
	}
	if len(sp.Events) != 1 || sp.Events[0].Reason != ReasonUnsupported || !strings.Contains(sp.Events[0].Message, "SCTP") {
		t.Fatalf("events = %+v, want one about SCTP", sp.Events)
	}
}

// covers: B1
func TestBackendSelection(t *testing.T) {
	s := baseSnapshot(service("web", t0, func(s *corev1.Service) {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP})
	}))
	s.EndpointSlices = append(s.EndpointSlices,
		// the same endpoint again in a second slice: counted once
		slice("web", "web-b", discoveryv1.AddressTypeIPv4, 8080, "http", corev1.ProtocolTCP, ep{"10.0.1.11", nil}),
		// IPv6 slices are not served
		slice("web", "web-v6", discoveryv1.AddressTypeIPv6, 8080, "http", corev1.ProtocolTCP, ep{"fd00::11", nil}),
		// a port name that matches no Service port
		slice("web", "web-c", discoveryv1.AddressTypeIPv4, 9999, "metrics", corev1.ProtocolTCP, ep{"10.0.1.20", nil}),
		// the UDP port, matched by name and protocol
		slice("web", "web-d", discoveryv1.AddressTypeIPv4, 5353, "dns", corev1.ProtocolUDP, ep{"10.0.1.30", nil}),
		// another Service's slice
		slice("other", "other-a", discoveryv1.AddressTypeIPv4, 8080, "http", corev1.ProtocolTCP, ep{"10.0.1.40", nil}),
	)
	st := Compute(s, lbGates).Gateways[0].State
	want := []gwstate.Identity{
		{VIP: "172.18.0.10", Port: 53, Protocol: gwstate.UDP, Backends: []gwstate.Backend{{IP: "10.0.1.30", Port: 5353}}},
		{VIP: "172.18.0.10", Port: 80, Protocol: gwstate.TCP, Backends: []gwstate.Backend{{IP: "10.0.1.11", Port: 8080}, {IP: "10.0.1.12", Port: 8080}}},
	}
	if !reflect.DeepEqual(st.Identities, want) {
		t.Fatalf("identities = %+v\nwant %+v", st.Identities, want)
	}
}

// covers: I2, T1, T3
func TestConflictOldestWins(t *testing.T) {
	older := service("zzz-old", t0)
	newer := service("aaa-new", t0.Add(time.Minute))
	sameTimeB := service("bbb", t0.Add(time.Hour))
	sameTimeA := service("aab", t0.Add(time.Hour))
	s := baseSnapshot(newer, older)
	p := Compute(s, lbGates)
	if sp := servicePlan(t, p, "zzz-old"); !sp.EIPServed {
		t.Fatalf("older Service not served: %+v", sp)
	}
	loser := servicePlan(t, p, "aaa-new")
	if loser.EIPServed || loser.Ingress != nil || len(loser.Events) != 1 || loser.Events[0].Reason != ReasonConflict ||
		!strings.Contains(loser.Events[0].Message, "ns/zzz-old") {
		t.Fatalf("newer Service plan = %+v, want a conflict naming ns/zzz-old", loser)
	}
	// Same creation time: namespace/name decides.
	p = Compute(baseSnapshot(sameTimeB, sameTimeA), lbGates)
	if !servicePlan(t, p, "aab").EIPServed || servicePlan(t, p, "bbb").EIPServed {
		t.Fatalf("tie not broken by name: %+v", p.Services)
	}
	// The winner leaves: the other takes over.
	p = Compute(baseSnapshot(newer), lbGates)
	if !servicePlan(t, p, "aaa-new").EIPServed {
		t.Fatal("the remaining Service did not take the identity over")
	}
}

// covers: I1, I2, B1 (the Plan does not depend on input order)
func TestComputeIgnoresInputOrder(t *testing.T) {
	s := baseSnapshot(service("web", t0), service("web2", t0.Add(time.Second)), service("web3", t0.Add(time.Second), func(s *corev1.Service) {
		s.Spec.Ports[0].Port = 81
	}))
	s.EIPs = append(s.EIPs, eip("eip2", "gw1", "172.18.0.11", true), eip("eip3", "gw2", "172.18.0.12", true))
	s.Gateways = append(s.Gateways, gateway("gw2"))
	s.EndpointSlices = append(s.EndpointSlices,
		slice("web", "web-b", discoveryv1.AddressTypeIPv4, 8080, "http", corev1.ProtocolTCP, ep{"10.0.1.9", nil}, ep{"10.0.1.200", nil}),
		slice("web3", "web3-a", discoveryv1.AddressTypeIPv4, 8080, "http", corev1.ProtocolTCP, ep{"10.0.1.5", nil}))
	want := Compute(s, lbGates)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 50; i++ {
		c := Snapshot{
			Gateways:       shuffled(rng, s.Gateways),
			EIPs:           shuffled(rng, s.EIPs),
			Services:       shuffled(rng, s.Services),
			EndpointSlices: shuffled(rng, s.EndpointSlices),
		}
		for j := range c.EndpointSlices {
			c.EndpointSlices[j].Endpoints = shuffled(rng, c.EndpointSlices[j].Endpoints)
		}
		if got := Compute(c, lbGates); !reflect.DeepEqual(got, want) {
			t.Fatalf("shuffle %d changed the plan:\n got %+v\nwant %+v", i, got, want)
		}
	}
}

func shuffled[T any](rng *rand.Rand, in []T) []T {
	out := append([]T(nil), in...)
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}
