package model

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// tenants makes LoadBalancer Services of gw1/eip1, each on a port of its own (no claim
// conflicts) with its own ClusterIP, created a second apart: one port is 2 identities (EIP and
// ClusterIP), each with the Service's backends.
type tenants struct{ n int }

func (tn *tenants) add(s *Snapshot, ns, name string, backends int) {
	tn.n++
	port, cip := int32(1000+tn.n), fmt.Sprintf("10.96.%d.%d", 100+tn.n/250, 1+tn.n%250)
	s.Services = append(s.Services, service(name, t0.Add(time.Duration(tn.n)*time.Second), func(svc *corev1.Service) {
		svc.Namespace, svc.UID = ns, types.UID(fmt.Sprintf("uid-%s-%s-%d", ns, name, tn.n))
		svc.Spec.Ports[0].Port = port
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = cip, []string{cip}
	}))
	eps := make([]ep, backends)
	for i := range eps {
		eps[i] = ep{ip: fmt.Sprintf("10.0.1.%d", 11+i), ready: ptr.To(true)}
	}
	es := slice(name, name+"-a", discoveryv1.AddressTypeIPv4, 8080, "http", corev1.ProtocolTCP, eps...)
	es.Namespace = ns
	s.EndpointSlices = append(s.EndpointSlices, es)
}

// remove deletes Service ns/name (and its endpoints) from s.
func remove(s *Snapshot, ns, name string) {
	s.Services = slices.DeleteFunc(slices.Clone(s.Services), func(x corev1.Service) bool { return x.Namespace == ns && x.Name == name })
	s.EndpointSlices = slices.DeleteFunc(slices.Clone(s.EndpointSlices), func(es discoveryv1.EndpointSlice) bool {
		return es.Namespace == ns && es.Labels[discoveryv1.LabelServiceName] == name
	})
}

// servedIn lists the Services of namespace ns that p serves, by name.
func servedIn(p Plan, ns string) []string {
	var out []string
	for _, sp := range p.Services {
		if sp.Key.Namespace == ns && sp.Served() {
			out = append(out, sp.Key.Name)
		}
	}
	return out
}

// shareEvent reports whether sp waits for its namespace's share, with an event that names the
// share and no other namespace.
func shareEvent(sp ServicePlan, share string, others ...string) bool {
	return sp.Limited && !sp.Served() && slices.ContainsFunc(sp.Events, func(e Event) bool {
		return e.Reason == ReasonLimit && strings.Contains(e.Message, share) &&
			!slices.ContainsFunc(others, func(o string) bool { return strings.Contains(e.Message, o) })
	})
}

// covers: N4
// The probe of issue 34 (R2): one namespace fills an idle gateway, asking more than its bounds,
// then a second namespace the gateway's Vpc admits asks for 2 identities. The first never took
// more than its share (half the gateway: two namespaces are admitted), so the second gets its 2
// without anything served being taken away, and the first cannot grow past its share although
// the gateway has room left.
func TestShareHoldsBeforeOthersArrive(t *testing.T) {
	gates := srGates
	gates.MaxIdentitiesPerGateway = 8 // four one-port Services; each namespace's share is 4
	var tn tenants
	s := baseSnapshot() // vpc1 admits ns and tenant-b
	s.EndpointSlices = nil
	for i := range 6 {
		tn.add(&s, "ns", fmt.Sprintf("g%d", i), 1)
	}
	p := Compute(s, gates)
	if got := servedIn(p, "ns"); !slices.Equal(got, []string{"g0", "g1"}) {
		t.Fatalf("the first namespace, alone, is served %v; want its share, g0 and g1 (4 identities)", got)
	}
	for _, name := range []string{"g2", "g5"} {
		if sp := servicePlanIn(p, "ns", name); !shareEvent(sp, "namespace ns's share of gateway gw1 is 4 identities and 250000 backends", "tenant-b") {
			t.Errorf("%s: limited %v, events %v; want the share's event, naming no other namespace", name, sp.Limited, sp.Events)
		}
	}
	s = applyPlan(s, p)

	tn.add(&s, "tenant-b", "o0", 1)
	p = Compute(s, gates)
	if got := servedIn(p, "tenant-b"); !slices.Equal(got, []string{"o0"}) {
		t.Errorf("the newcomer is served %v, want o0 (its 2 identities are within its share)", got)
	}
	if got := servedIn(p, "ns"); !slices.Equal(got, []string{"g0", "g1"}) {
		t.Errorf("after the newcomer the first namespace is served %v, want g0 and g1: nothing taken away, nothing past its share", got)
	}
	if n := len(p.Gateway("gw1").State.Identities); n != 6 {
		t.Errorf("gateway state has %d identities, want 6: the room the newcomer leaves is not lent", n)
	}
	s = applyPlan(s, p)

	// The first namespace lets one go: its own next Service takes the room, nobody else's.
	remove(&s, "ns", "g0")
	p = Compute(s, gates)
	if got := servedIn(p, "ns"); !slices.Equal(got, []string{"g1", "g2"}) {
		t.Errorf("after g0 let go the first namespace is served %v, want g1 and g2", got)
	}
}

// covers: N4
// A gateway open to every namespace ("*"): its bounds are split between the namespaces its Vpc
// names and every other namespace that asks it for room, plus one for a newcomer. The first
// namespace takes half; each newcomer finds room for its share as long as the others' served
// Services leave it; nothing served is taken away when the share shrinks, and a namespace past
// its (new) share gets nothing new.
func TestShareOfAnOpenGateway(t *testing.T) {
	gates := srGates
	gates.MaxIdentitiesPerGateway = 12
	var tn tenants
	s := baseSnapshot()
	s.EndpointSlices = nil
	s.Vpcs[0].Spec.Namespaces = nil
	s.Gateways[0].Annotations = map[string]string{AnnotationAllowedNamespaces: "*"}
	step := func(what string, want map[string][]string) {
		t.Helper()
		p := Compute(s, gates)
		for ns, names := range want {
			if got := servedIn(p, ns); !slices.Equal(got, names) {
				t.Errorf("%s: namespace %s served %v, want %v", what, ns, got, names)
			}
		}
		s = applyPlan(s, p)
	}
	for i := range 8 {
		tn.add(&s, "ns", fmt.Sprintf("a%d", i), 1)
	}
	// One namespace asks: 12 / (1 + 1) = 6 identities, three Services.
	step("alone", map[string][]string{"ns": {"a0", "a1", "a2"}})
	// A second: 12 / 3 = 4 identities each; ns keeps its 6.
	tn.add(&s, "tenant-b", "b0", 1)
	tn.add(&s, "tenant-b", "b1", 1)
	tn.add(&s, "tenant-b", "b2", 1)
	step("second namespace", map[string][]string{"ns": {"a0", "a1", "a2"}, "tenant-b": {"b0", "b1"}})
	p := Compute(s, gates)
	if sp := servicePlanIn(p, "ns", "a3"); !shareEvent(sp, "namespace ns's share of gateway gw1 is 4 identities", "tenant-b") {
		t.Errorf("a3: limited %v, events %v; want the share's event", sp.Limited, sp.Events)
	}
	// A third: 12 / 4 = 3 identities: one Service, the last room of the gateway.
	tn.add(&s, "tenant-c", "c0", 1)
	tn.add(&s, "tenant-c", "c1", 1)
	step("third namespace", map[string][]string{"ns": {"a0", "a1", "a2"}, "tenant-b": {"b0", "b1"}, "tenant-c": {"c0"}})
	// ns lets one go: it is still past its share of 3 and gets nothing new; the room is not lent.
	remove(&s, "ns", "a0")
	step("ns lets one go", map[string][]string{"ns": {"a1", "a2"}, "tenant-b": {"b0", "b1"}, "tenant-c": {"c0"}})
	// The gateway named with others: a namespace of the Vpc counts although it asks nothing.
	s.Vpcs[0].Spec.Namespaces = []string{"tenant-d", "tenant-e"}
	s.Gateways[0].Annotations[AnnotationAllowedNamespaces] = "tenant-f, *"
	p = Compute(s, gates)
	if sp := servicePlanIn(p, "tenant-c", "c1"); !shareEvent(sp, "namespace tenant-c's share of gateway gw1 is 1 identities", "tenant-b", "tenant-d") {
		t.Errorf("c1 with 7 namespaces named or asking (12 / 7): limited %v, events %v", sp.Limited, sp.Events)
	}
}

// covers: N4
// Churn: Services of four namespaces come and go at random on one gateway, with the
// controller's writes applied after every plan. After every step: the gateway's bounds hold;
// nothing served is taken away; no namespace gets new load past its share; a Service that waits
// for room does so because of its namespace's share or (only when the shares changed under
// programmed Services) the gateway's bound, never while both have room for it. On a gateway
// whose namespaces are named (the Vpc's three) every namespace can always reach its share: only
// the share keeps a Service waiting.
func TestShareUnderChurn(t *testing.T) {
	for seed := range uint64(16) {
		open := seed%2 == 1
		t.Run(fmt.Sprintf("seed=%d,open=%v", seed, open), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 34))
			gates := srGates
			gates.MaxIdentitiesPerGateway, gates.MaxBackendsPerGateway = 24+r.IntN(12), 40+r.IntN(30)
			bounds := gates.Bounds()
			nss := []string{"ns", "tenant-b", "tenant-c", "tenant-d"}
			s := baseSnapshot()
			s.EndpointSlices = nil
			s.Vpcs[0].Spec.Namespaces = nss[:3]
			if open {
				s.Vpcs[0].Spec.Namespaces = nil
				s.Gateways[0].Annotations = map[string]string{AnnotationAllowedNamespaces: "*"}
			}
			var tn tenants
			served := map[types.UID]bool{} // served at the last plan, so programmed now
			waited := 0
			for step := range 150 {
				ns := nss[r.IntN(len(nss))]
				var mine []string
				for _, svc := range s.Services {
					if svc.Namespace == ns {
						mine = append(mine, svc.Name)
					}
				}
				if len(mine) > 0 && r.IntN(3) == 0 {
					remove(&s, ns, mine[r.IntN(len(mine))])
				} else {
					tn.add(&s, ns, fmt.Sprintf("s%d", step), r.IntN(5))
				}
				p := Compute(s, gates)
				waited += checkShares(t, step, p, bounds, served, open)
				s = applyPlan(s, p)
				clear(served)
				for _, sp := range p.Services {
					if sp.Served() {
						served[sp.UID] = true
					}
				}
			}
			if waited == 0 {
				t.Fatal("no Service waited for room: the sequence does not exercise the shares")
			}
		})
	}
}

// checkShares asserts the invariants of TestShareUnderChurn on plan p; served are
// the Services served (programmed) before. It returns how many Services wait for room.
func checkShares(t *testing.T, step int, p Plan, bounds Load, served map[types.UID]bool, open bool) (waiting int) {
	t.Helper()
	load, total := map[string]Load{}, Load{}
	asking := map[string]bool{}
	for _, sp := range p.Services {
		if sp.Demand.Identities > 0 {
			asking[sp.Key.Namespace] = true
		}
		l := LoadOf(sp.Identities)
		load[sp.Key.Namespace] = load[sp.Key.Namespace].plus(l)
		total = total.plus(l)
		if served[sp.UID] && !sp.Served() {
			t.Fatalf("step %d: %s was served and is taken away: %v", step, sp.Key, sp.Events)
		}
	}
	sharers := 3 // the Vpc's namespaces
	if open {
		sharers = len(asking) + 1
	}
	share := Load{max(1, bounds.Identities/sharers), max(1, bounds.Backends/sharers)}
	if !total.fits(bounds) {
		t.Fatalf("step %d: the gateway holds %+v, past its bounds %+v", step, total, bounds)
	}
	for _, sp := range p.Services {
		ns := sp.Key.Namespace
		switch {
		case sp.Served() && !served[sp.UID] && !load[ns].fits(share):
			t.Fatalf("step %d: %s is served anew, taking namespace %s to %+v past its share %+v", step, sp.Key, ns, load[ns], share)
		case !sp.Limited:
		case load[ns].plus(sp.Demand).fits(share) && total.plus(sp.Demand).fits(bounds):
			t.Fatalf("step %d: %s (%+v) waits although its namespace (%+v of %+v) and the gateway (%+v of %+v) have room for it",
				step, sp.Key, sp.Demand, load[ns], share, total, bounds)
		case !open && load[ns].plus(sp.Demand).fits(share):
			t.Fatalf("step %d: %s (%+v) waits within its namespace's share (%+v of %+v) on a gateway whose namespaces are named", step, sp.Key, sp.Demand, load[ns], share)
		default:
			waiting++
		}
	}
	return waiting
}

// covers: N4
// A partial plan decides what a full one would also when the shares change under a Service that
// is served but whose records the cache does not hold yet (it is not programmed, so the share
// holds it back): a newcomer namespace on a gateway open to all shrinks every share, and a
// programmed Service that grows takes its namespace past its share. Neither change replans that
// Service, yet the full plan no longer serves it: the planner plans in full.
func TestPartialPlanWhenSharesChange(t *testing.T) {
	gates := srGates
	gates.MaxIdentitiesPerGateway = 12
	for _, c := range []struct {
		name   string
		open   bool
		change func(w *world, tn *tenants) types.NamespacedName
	}{
		{"newcomer on an open gateway", true, func(w *world, tn *tenants) types.NamespacedName {
			tn.add(&w.s, "tenant-b", "b0", 1)
			return types.NamespacedName{Namespace: "tenant-b", Name: "b0"}
		}},
		{"a programmed Service grows", false, func(w *world, _ *tenants) types.NamespacedName {
			svc := &w.s.Services[0]
			svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "more", Port: svc.Spec.Ports[0].Port + 500, Protocol: corev1.ProtocolTCP})
			return types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var tn tenants
			w := &world{s: baseSnapshot()}
			w.s.EndpointSlices = nil
			if c.open { // 12 / (1 + 1): three Services of ns
				w.s.Vpcs[0].Spec.Namespaces = nil
				w.s.Gateways[0].Annotations = map[string]string{AnnotationAllowedNamespaces: "*"}
			} else { // 12 / 2: three one-port Services of ns
				w.s.Vpcs[0].Spec.Namespaces = []string{"ns", "tenant-b"}
			}
			tn.add(&w.s, "ns", "a0", 1)
			tn.add(&w.s, "ns", "a1", 1)
			var p Planner
			sync := func(changed ...types.NamespacedName) (Plan, bool) {
				ch := Changes{Services: map[types.NamespacedName]bool{}}
				for _, k := range changed {
					ch.Services[k] = true
				}
				plan, _, _, full, err := p.Sync(w, w.base("gw1"), "gw1", ch, gates)
				if err != nil {
					t.Fatal(err)
				}
				return plan, full
			}
			plan, _ := sync()
			w.s = applyPlan(w.s, plan) // a0 and a1 are programmed
			tn.add(&w.s, "ns", "a2", 1)
			a2 := types.NamespacedName{Namespace: "ns", Name: "a2"}
			if plan, _ := sync(a2); !slices.Contains(servedIn(plan, "ns"), "a2") {
				t.Fatalf("a2 not served within the share: %v", servicePlanIn(plan, "ns", "a2").Events)
			}
			// a2's records are not in the cache yet when the change comes.
			_, full := sync(c.change(w, &tn))
			whole, _, _ := ReadScope(w, w.base("gw1"), "gw1", Scope{Full: true})
			if sp := servicePlanIn(Compute(whole, gates), "ns", "a2"); sp.Served() {
				t.Fatalf("the full plan still serves a2, past the share: the case does not test the planner")
			}
			if !full {
				t.Fatal("a partial plan kept a2, which a full plan no longer serves")
			}
		})
	}
}
