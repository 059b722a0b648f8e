package model

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// covers: N4, N3
// A full gateway is shared fairly between the namespaces that use it: one namespace's many old
// Services cannot take every identity from another namespace's newer ones. What is programmed
// keeps its place (a newcomer waits); room that is freed goes to the namespace that has had less.
func TestGatewayFairShare(t *testing.T) {
	gates := srGates
	gates.MaxIdentitiesPerGateway = 8 // four one-port Services: EIP and ClusterIP each
	port := int32(80)
	svc := func(ns, name string, created time.Time) corev1.Service {
		port++
		p := port
		return service(name, created, func(s *corev1.Service) {
			s.Namespace, s.UID, s.Spec.Ports[0].Port = ns, types.UID("uid-"+ns+"-"+name), p
		})
	}
	var greedy, other []corev1.Service
	for i := range 6 {
		greedy = append(greedy, svc("ns", fmt.Sprintf("g%d", i), t0.Add(time.Duration(i)*time.Second)))
	}
	for i := range 2 {
		other = append(other, svc("tenant-b", fmt.Sprintf("o%d", i), t0.Add(time.Hour+time.Duration(i)*time.Second)))
	}
	served := func(p Plan, svcs []corev1.Service) []string {
		var out []string
		for _, s := range svcs {
			for _, sp := range p.Services {
				if sp.UID == s.UID && sp.Served() {
					out = append(out, s.Name)
				}
			}
		}
		return out
	}

	// Both arrive at once: the older namespace does not take it all.
	s := baseSnapshot(append(slices.Clone(greedy), other...)...)
	p := Compute(s, gates)
	if got := served(p, greedy); !slices.Equal(got, []string{"g0", "g1"}) {
		t.Errorf("greedy namespace served %v, want its two oldest (half the gateway)", got)
	}
	if got := served(p, other); !slices.Equal(got, []string{"o0", "o1"}) {
		t.Errorf("other namespace served %v, want both", got)
	}
	for _, name := range []string{"g2", "g5"} {
		sp := servicePlanIn(p, "ns", name)
		if !sp.Limited || !slices.ContainsFunc(sp.Events, func(e Event) bool {
			return e.Reason == ReasonLimit && strings.Contains(e.Message, "fair share") && !strings.Contains(e.Message, "tenant-b")
		}) {
			t.Errorf("%s: limited %v, events %v; want the bound's event, naming no other namespace", name, sp.Limited, sp.Events)
		}
	}
	if n := len(p.Gateway("gw1").State.Identities); n != 8 {
		t.Errorf("gateway state has %d identities, want the bound's 8", n)
	}

	// The greedy namespace came first and is programmed: the newcomers wait, nothing programmed
	// is pushed out.
	s = baseSnapshot(greedy...)
	p = Compute(s, gates)
	if got := served(p, greedy); !slices.Equal(got, []string{"g0", "g1", "g2", "g3"}) {
		t.Fatalf("greedy namespace alone served %v, want the four oldest", got)
	}
	s = applyPlan(s, p)
	s.Services = append(s.Services, other...)
	p = Compute(s, gates)
	if got := served(p, greedy); !slices.Equal(got, []string{"g0", "g1", "g2", "g3"}) {
		t.Errorf("after the newcomers: greedy namespace served %v, want its programmed four kept", got)
	}
	if got := served(p, other); len(got) != 0 {
		t.Errorf("newcomers served %v on a full gateway", got)
	}
	// One programmed Service goes: the room goes to the namespace that has had none.
	s = applyPlan(s, p)
	s.Services = slices.DeleteFunc(s.Services, func(x corev1.Service) bool { return x.Name == "g0" })
	p = Compute(s, gates)
	if got := served(p, other); !slices.Equal(got, []string{"o0"}) {
		t.Errorf("after g0 let go: other namespace served %v, want o0", got)
	}
	if got := served(p, greedy); !slices.Equal(got, []string{"g1", "g2", "g3"}) {
		t.Errorf("after g0 let go: greedy namespace served %v, want g1..g3 (not g4)", got)
	}
}

// covers: N4
// The backends of all a gateway's Services are bounded too: a Service whose backends (source
// ranges count) would pass --max-backends-per-gateway is not served, with an event.
func TestGatewayBackendBound(t *testing.T) {
	gates := srGates
	gates.MaxBackendsPerGateway = 3 // web: two backends on each of its two identities
	p := Compute(baseSnapshot(service("web", t0)), gates)
	sp := servicePlan(p, "web")
	if sp.Served() || !sp.Limited || sp.Demand != (Load{Identities: 2, Backends: 4}) || !slices.ContainsFunc(sp.Events, func(e Event) bool {
		return e.Reason == ReasonLimit && strings.Contains(e.Message, "--max-backends-per-gateway")
	}) {
		t.Fatalf("web past the backend bound: served %v, limited %v, demand %+v, events %v", sp.Served(), sp.Limited, sp.Demand, sp.Events)
	}
	gates.MaxBackendsPerGateway = 4
	if sp := servicePlan(Compute(baseSnapshot(service("web", t0)), gates), "web"); !sp.Served() {
		t.Fatalf("web at the backend bound is not served: %v", sp.Events)
	}
}

func servicePlanIn(p Plan, ns, name string) ServicePlan {
	for _, sp := range p.Services {
		if sp.Key.Namespace == ns && sp.Key.Name == name {
			return sp
		}
	}
	panic(fmt.Sprintf("no plan for Service %s/%s", ns, name))
}
