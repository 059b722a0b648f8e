package model

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
)

// syncer drives one gateway's Planner over a world as the controller does: every sync is
// compared with a full plan of the same world, its writes are applied, and what they change
// is marked as the controller's handlers mark it (a Service's finalizer or status, a record's
// owner).
type syncer struct {
	t     *testing.T
	w     *world
	p     Planner
	gates Gates
	ch    Changes
}

func newSyncer(t *testing.T, w *world, gates Gates) *syncer {
	s := &syncer{t: t, w: w, gates: gates}
	s.reset()
	return s
}

func (s *syncer) reset() {
	s.ch = Changes{Services: map[types.NamespacedName]bool{}, Owners: map[types.UID]bool{}}
}

func (s *syncer) mark(ns, name string) {
	s.ch.Services[types.NamespacedName{Namespace: ns, Name: name}] = true
}

// sync plans gw1 and reports whether the plan was full and the full plan of the same world.
func (s *syncer) sync(what string) (bool, Plan) {
	s.t.Helper()
	plan, gp, _, full, err := s.p.Sync(s.w, s.w.base("gw1"), "gw1", s.ch, s.gates)
	s.reset()
	if err != nil {
		s.t.Fatal(err)
	}
	whole, _, _ := ReadScope(s.w, s.w.base("gw1"), "gw1", Scope{Full: true})
	fplan := Compute(whole, s.gates)
	if d := gatewayPlanDiff(gp, fplan.Gateway("gw1")); d != "" {
		s.t.Fatalf("%s (full %v): %s", what, full, d)
	}
	for _, sp := range plan.Services {
		if fsp, ok := planOf(fplan, sp.Key); sp.Gateway == "gw1" && (!ok || !reflect.DeepEqual(sp, fsp)) {
			s.t.Fatalf("%s: partial plan of %s differs from the full one:\n%+v\nwant\n%+v", what, sp.Key, sp, fsp)
		}
	}
	if s.p.Limited() != countLimited(fplan) {
		s.t.Fatalf("%s: the planner counts %d Services waiting, the full plan %d", what, s.p.Limited(), countLimited(fplan))
	}
	before := s.w.s
	s.w.s = applyPlan(s.w.s, plan)
	markWrites(before, s.w.s, "gw1", func(k types.NamespacedName, uid types.UID) {
		s.ch.Services[k] = true
		if uid != "" {
			s.ch.Owners[uid] = true
		}
	})
	return full, fplan
}

func countLimited(p Plan) int {
	n := 0
	for _, sp := range p.Services {
		if sp.Limited && sp.Gateway == "gw1" {
			n++
		}
	}
	return n
}

// markWrites marks what the controller's writes between two snapshots change for gateway gw,
// as its handlers do: a Service of gw whose finalizer or status changed, and the owner of every
// record of gw written or deleted (MarkOwner: its Service and its UID).
func markWrites(before, after Snapshot, gw string, mark func(types.NamespacedName, types.UID)) {
	for i := range before.Services {
		b := &before.Services[i]
		k := types.NamespacedName{Namespace: b.Namespace, Name: b.Name}
		a := findService(after, k)
		changed := a == nil || !reflect.DeepEqual(a.Finalizers, b.Finalizers) || !reflect.DeepEqual(a.Status, b.Status)
		if changed && slices.Contains(ServiceGatewayKeys(b), gw) {
			mark(k, "")
		}
	}
	owner := func(l map[string]string) {
		if l[LabelGateway] == gw {
			mark(types.NamespacedName{Namespace: l[LabelRecordNamespace], Name: l[LabelRecordName]}, types.UID(l[LabelRecordUID]))
		}
	}
	changed(before.ServiceRecords, after.ServiceRecords, func(r *vpcgwv1alpha1.ServiceRecord) string { return r.Name },
		func(r *vpcgwv1alpha1.ServiceRecord) { owner(r.Labels) })
	changed(before.Records, after.Records, func(r *kubeovnv1.IptablesDnatRule) string { return r.Name },
		func(r *kubeovnv1.IptablesDnatRule) { owner(r.Labels) })
}

// changed calls f with every object of before or after, by name, that the other lacks or has
// otherwise.
func changed[T any](before, after []T, name func(*T) string, f func(*T)) {
	index := func(objs []T) map[string]*T {
		out := make(map[string]*T, len(objs))
		for i := range objs {
			out[name(&objs[i])] = &objs[i]
		}
		return out
	}
	was, is := index(before), index(after)
	for n, o := range was {
		if now, ok := is[n]; !ok || !reflect.DeepEqual(now, o) {
			f(o)
		}
	}
	for n, o := range is {
		if _, ok := was[n]; !ok {
			f(o)
		}
	}
}

func findService(s Snapshot, k types.NamespacedName) *corev1.Service {
	for i := range s.Services {
		if s.Services[i].Namespace == k.Namespace && s.Services[i].Name == k.Name {
			return &s.Services[i]
		}
	}
	return nil
}

// fullGateway is gw1 with room for four one-port Services (an EIP and a ClusterIP identity
// each), all taken by namespace ns (g0..g3, programmed while ns was the VPC's only namespace),
// and the waiting Services of tenant-b, admitted since (o0 first): the world of the SPEC N4
// partial plan tests.
func fullGateway(t *testing.T, waiting int) *syncer {
	gates := srGates
	gates.MaxIdentitiesPerGateway = 8
	w := &world{s: baseSnapshot()}
	w.s.EndpointSlices = nil
	w.s.Vpcs[0].Spec.Namespaces = []string{"ns"}
	port := int32(80)
	add := func(ns, name string, created time.Time) {
		port++
		svc := service(name, created, func(s *corev1.Service) {
			s.Namespace, s.UID, s.Spec.Ports[0].Port = ns, types.UID("uid-"+ns+"-"+name), port
		})
		w.s.Services = append(w.s.Services, svc)
		es := slice(name, name+"-a", discoveryv1.AddressTypeIPv4, 8080, "http", corev1.ProtocolTCP, ep{ip: "10.0.1.11", ready: ptr.To(true)})
		es.Namespace = ns
		w.s.EndpointSlices = append(w.s.EndpointSlices, es)
	}
	for i := range 4 {
		add("ns", fmt.Sprint("g", i), t0.Add(time.Duration(i)*time.Second))
	}
	s := newSyncer(t, w, gates)
	s.sync("first plan")
	s.sync("records written") // the records' owners are now programmed
	w.s.Vpcs[0].Spec.Namespaces = []string{"ns", "tenant-b"}
	w.s.Vpcs[0].Generation++
	for i := range waiting {
		add("tenant-b", fmt.Sprint("o", i), t0.Add(time.Hour+time.Duration(i)*time.Second))
		s.mark("tenant-b", fmt.Sprint("o", i))
	}
	for range 3 { // the newcomers are planned, stamped, planned again
		s.sync("newcomers")
	}
	if s.p.Limited() != waiting {
		t.Fatalf("%d Services wait, want %d", s.p.Limited(), waiting)
	}
	return s
}

// setEndpoints gives Service ns/name's slice the endpoints ips, all ready.
func (s *syncer) setEndpoints(ns, name string, ips ...string) {
	for i := range s.w.s.EndpointSlices {
		es := &s.w.s.EndpointSlices[i]
		if es.Namespace == ns && es.Labels[discoveryv1.LabelServiceName] == name {
			es.Endpoints = nil
			for _, ip := range ips {
				es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
			}
		}
	}
	s.mark(ns, name)
}

// covers: N4
// One Service waiting for room does not make every sync of its gateway full (issue 34, R6):
// another namespace's endpoint changes, with the record writes they cause, are planned
// partially, with the result of a full plan.
func TestWaitingServiceKeepsOtherChangesPartial(t *testing.T) {
	s := fullGateway(t, 1)
	steps := []struct {
		what   string
		change func()
	}{
		{"g1's endpoint moves", func() { s.setEndpoints("ns", "g1", "10.0.1.12") }},
		{"g1's record rewritten", func() {}}, // its owner was marked by the write of the step before
		{"g1 gets a second endpoint", func() { s.setEndpoints("ns", "g1", "10.0.1.12", "10.0.1.13") }},
		{"g1's record rewritten again", func() {}},
		{"g2 loses its endpoint", func() { s.setEndpoints("ns", "g2") }},
	}
	for _, st := range steps {
		st.change()
		if full, _ := s.sync(st.what); full {
			t.Errorf("%s: the sync was full while tenant-b/o0 waits", st.what)
		}
		if s.p.Limited() != 1 {
			t.Fatalf("%s: %d Services wait, want tenant-b/o0", st.what, s.p.Limited())
		}
	}
}

// covers: N4
// A Service that another namespace releases lets the first waiting Service in, in a partial
// plan that decides what a full plan decides: tenant-b's o0 takes the room, o1 still waits.
func TestReleasedRoomGoesToFirstWaitingPartially(t *testing.T) {
	s := fullGateway(t, 2)
	g0 := findService(s.w.s, types.NamespacedName{Namespace: "ns", Name: "g0"})
	g0.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
	s.mark("ns", "g0")
	full, fplan := s.sync("g0 deleted")
	if full {
		t.Error("the release was planned in full")
	}
	if o0, o1 := servicePlanIn(fplan, "tenant-b", "o0"), servicePlanIn(fplan, "tenant-b", "o1"); !o0.Served() || !o1.Limited {
		t.Fatalf("after g0 let go: o0 served %v, o1 limited %v; want o0 in, o1 waiting", o0.Served(), o1.Limited)
	}
	for i := range 3 { // g0's finalizer is released, o0's record written: all partial
		if full, _ := s.sync(fmt.Sprint("after the release ", i)); full {
			t.Errorf("sync %d after the release was full", i)
		}
	}
	if s.p.Limited() != 1 {
		t.Fatalf("%d Services wait, want tenant-b/o1", s.p.Limited())
	}
}
