// covers: N3, N8, I2
package model

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
)

// A programmed identity is never taken over: an older Service that adds the port (or turns into a
// LoadBalancer) later does not get the EIP part of the Service that is serving it; it takes over
// only when the holder lets go.
func TestProgrammedIdentityNotTakenOver(t *testing.T) {
	// "young" is created after "old" but serves 80/TCP on the EIP first.
	young := service("young", t0.Add(10))
	old := service("old", t0, func(s *corev1.Service) { s.Spec.Ports[0].Port = 81 })
	snap := converge(t, baseSnapshot(young, old), srGates)
	if sp := servicePlan(Compute(snap, srGates), "young"); !sp.EIPServed {
		t.Fatalf("young does not serve its port before the change: %s", sp.EIPReason)
	}
	// old now adds 80/TCP: it is older, but young holds the programmed identity.
	for _, s := range snap.Services {
		if s.Name == "young" {
			young = s // as the cluster has it now: finalizer, ingress
		}
	}
	snap.Services = []corev1.Service{young, service("old", t0, func(s *corev1.Service) {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "web", Port: 80, Protocol: corev1.ProtocolTCP})
	})}
	p := Compute(snap, srGates)
	if y := servicePlan(p, "young"); !y.EIPServed || y.IngressWrite || y.WriteRecord {
		t.Fatalf("young lost or rewrote its EIP part: served %v ingress write %v record write %v (%s)", y.EIPServed, y.IngressWrite, y.WriteRecord, y.EIPReason)
	}
	o := servicePlan(p, "old")
	if o.EIPServed || !strings.Contains(o.EIPReason, "is held by Service ns/young") {
		t.Fatalf("old took over a programmed identity: served %v (%s)", o.EIPServed, o.EIPReason)
	}
	// young lets go: old takes over.
	snap.Services = snap.Services[1:]
	if o := servicePlan(Compute(snap, srGates), "old"); !o.EIPServed {
		t.Fatalf("old does not take over after young left: %s", o.EIPReason)
	}
}

// Between claimants of a free identity the older wins (I2), and a conflict event in another
// namespace does not name the holder (N8).
func TestConflictEventDoesNotRevealOtherNamespaces(t *testing.T) {
	holder := service("web", t0)
	other := service("shop", t0.Add(1), func(s *corev1.Service) { s.Namespace = "tenant-b" })
	p := Compute(baseSnapshot(holder, other), srGates)
	sp := servicePlan(p, "shop")
	if sp.EIPServed || len(sp.Events) != 1 {
		t.Fatalf("the younger claimant: served %v events %v", sp.EIPServed, sp.Events)
	}
	if msg := sp.Events[0].Message; strings.Contains(msg, "ns/web") || strings.Contains(msg, "web") || !strings.Contains(msg, "a Service of another namespace") {
		t.Fatalf("the event names another namespace's Service: %q", msg)
	}
}

// covers: N1, W6
// A Service may use a gateway only if its namespace is bound to the gateway's Vpc (spec.namespaces)
// or named by the gateway's allow-list annotation; an EIP's allow-list further restricts its use.
// A Service that is not admitted gets nothing: no identity, no ClusterIP held, no route, no record,
// no finalizer (and so cannot block the gateway's deletion).
func TestTenancyBoundary(t *testing.T) {
	cases := map[string]struct {
		namespaces []string        // of vpc1
		gwAllow    string          // the gateway's annotation ("" = none)
		eipAllow   string          // the EIP's annotation ("" = none)
		wantEIP    bool            // EIP part served
		wantAny    bool            // anything served
		mut        func(*Snapshot) // further changes
	}{
		"namespace bound to the Vpc":          {namespaces: []string{"tenant-a"}, wantEIP: true, wantAny: true},
		"another tenant's Vpc":                {namespaces: []string{"tenant-b"}},
		"Vpc lists no namespace":              {},
		"Vpc missing":                         {namespaces: []string{"tenant-a"}, mut: func(s *Snapshot) { s.Vpcs = nil }},
		"gateway admits the namespace":        {gwAllow: "tenant-c, tenant-a", wantEIP: true, wantAny: true},
		"gateway admits every namespace":      {gwAllow: "*", wantEIP: true, wantAny: true},
		"gateway admits others":               {gwAllow: "tenant-b"},
		"EIP restricted to another namespace": {namespaces: []string{"tenant-a"}, eipAllow: "tenant-b", wantAny: true},
		"EIP admits the namespace":            {namespaces: []string{"tenant-a"}, eipAllow: "tenant-a", wantEIP: true, wantAny: true},
	}
	for name, c := range cases {
		svc := service("web", t0, func(s *corev1.Service) { s.Namespace = "tenant-a" })
		snap := baseSnapshot(svc)
		snap.Vpcs = []kubeovnv1.Vpc{vpc("vpc1", c.namespaces...)}
		snap.EndpointSlices = nil
		if c.gwAllow != "" {
			snap.Gateways[0].Annotations = map[string]string{AnnotationAllowedNamespaces: c.gwAllow}
		}
		if c.eipAllow != "" {
			snap.EIPs[0].Annotations = map[string]string{AnnotationAllowedNamespaces: c.eipAllow}
		}
		if c.mut != nil {
			c.mut(&snap)
		}
		p := Compute(snap, srGates)
		sp := servicePlan(p, "web")
		gp := p.Gateway("gw1")
		if sp.EIPServed != c.wantEIP || sp.Served() != c.wantAny {
			t.Errorf("%s: EIP served %v, served %v; want %v, %v (%s / %s)", name, sp.EIPServed, sp.Served(), c.wantEIP, c.wantAny, sp.EIPReason, sp.ClusterIPReason)
			continue
		}
		if !c.wantAny {
			if len(gp.State.Identities) != 0 || len(gp.State.ClusterIPs) != 0 || len(gp.Routes.VIPs) != 0 || sp.Record != nil || sp.AddFinalizer || len(gp.Services) != 0 {
				t.Errorf("%s: something is published for a Service that is not admitted: %+v", name, gp)
			}
			if len(sp.Events) != 1 || sp.Events[0].Reason != ReasonNotAdmitted || !strings.Contains(sp.Events[0].Message, "namespace tenant-a is not admitted") {
				t.Errorf("%s: events %v", name, sp.Events)
			}
		}
	}
}

// covers: N7
// spec.loadBalancerSourceRanges reach the EIP identities (canonical, sorted, unique), not the
// ClusterIP ones; ranges with no IPv4 one leave the EIP part unserved with an event.
func TestLoadBalancerSourceRanges(t *testing.T) {
	svc := service("web", t0, func(s *corev1.Service) {
		s.Spec.LoadBalancerSourceRanges = []string{"192.168.7.9/24", " 10.0.0.0/8", "10.0.0.0/8", "fd00::/8"}
	})
	gp := Compute(baseSnapshot(svc), srGates).Gateway("gw1")
	for _, id := range gp.State.Identities {
		want := []string(nil)
		if id.VIP == "172.18.0.10" {
			want = []string{"10.0.0.0/8", "192.168.7.0/24"}
		}
		if !slices.Equal(id.SourceRanges, want) {
			t.Errorf("identity %s: source ranges %v, want %v", id.Key(), id.SourceRanges, want)
		}
	}
	if err := gp.State.Validate(); err != nil {
		t.Fatalf("the agent would refuse the state: %v", err)
	}
	v6only := service("web", t0, func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"fd00::/8"} })
	sp := servicePlan(Compute(baseSnapshot(v6only), srGates), "web")
	if sp.EIPServed || !sp.ClusterIPServed || sp.Ingress != nil || len(sp.Events) != 1 || !strings.Contains(sp.Events[0].Message, "no valid IPv4 range") {
		t.Fatalf("IPv6-only ranges: EIP served %v, ClusterIP served %v, events %v", sp.EIPServed, sp.ClusterIPServed, sp.Events)
	}
}
