// covers: R1, R2, R3, R5, R6, I3, K2, N4
package model

import (
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// converge applies plans until nothing is left to write (at most a few rounds).
func converge(t *testing.T, s Snapshot, gates Gates) Snapshot {
	t.Helper()
	for range 4 {
		p := Compute(s, gates)
		if len(writes(p)) == 0 {
			return s
		}
		s = applyPlan(s, p)
	}
	t.Fatalf("no convergence: still %v", writes(Compute(s, gates)))
	return s
}

// The default ledger is one ServiceRecord per Service, with every served port and its backends,
// and no IptablesDnatRule at all: kube-ovn-controller acts on those (SPEC R6, K2).
func TestServiceRecordLedger(t *testing.T) {
	web := service("web", t0, func(s *corev1.Service) {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP})
	})
	snap := baseSnapshot(web)
	snap.EndpointSlices = append(snap.EndpointSlices, slice("web", "web-dns", discoveryv1.AddressTypeIPv4, 5353, "dns", corev1.ProtocolUDP,
		ep{ip: "10.0.1.11", ready: ptr.To(true)}))
	sp := servicePlan(Compute(snap, srGates), "web")
	if len(sp.Records) != 0 || len(sp.CreateRecords) != 0 || len(sp.StatusRecords) != 0 {
		t.Fatalf("IptablesDnatRules planned in the ServiceRecord form: %+v", sp.Records)
	}
	if sp.Record == nil || !sp.WriteRecord {
		t.Fatalf("no ServiceRecord to write: %+v", sp)
	}
	r := sp.Record
	if r.Name != ServiceRecordName("ns", "web", "uid-web") || len(r.Name) > 63 {
		t.Fatalf("record name %q", r.Name)
	}
	wantLabels := map[string]string{
		LabelRecordNamespace: "ns", LabelRecordName: "web", LabelRecordUID: "uid-web", LabelRecord: "true",
		LabelGateway: "gw1", LabelEIPAddress: "172.18.0.10", LabelEIPUID: "uid-eip1",
	}
	if !reflect.DeepEqual(r.Labels, wantLabels) || r.OwnerReferences != nil {
		t.Fatalf("labels = %v, want %v and no owner reference", r.Labels, wantLabels)
	}
	want := vpcgwv1alpha1.ServiceRecordSpec{
		Service: vpcgwv1alpha1.ServiceReference{Namespace: "ns", Name: "web", UID: "uid-web"},
		Gateway: "gw1", EIP: "eip1", EIPUID: "uid-eip1", EIPAddress: "172.18.0.10", ClusterIP: "10.96.0.10",
		Ports: []vpcgwv1alpha1.RecordPort{
			{Port: 80, Protocol: "tcp", Backends: []string{"10.0.1.11:8080", "10.0.1.12:8080"}},
			{Port: 53, Protocol: "udp", Backends: []string{"10.0.1.11:5353"}},
		},
	}
	if !reflect.DeepEqual(r.Spec, want) {
		t.Fatalf("spec = %+v\nwant %+v", r.Spec, want)
	}
	if r.Status != (vpcgwv1alpha1.ServiceRecordStatus{Ready: true, Ports: "80/tcp,53/udp", Backends: 2}) {
		t.Fatalf("status = %+v", r.Status)
	}

	// In sync: nothing to write. A backend change is one write of the one record.
	snap = converge(t, snap, srGates)
	if len(snap.ServiceRecords) != 1 || len(snap.Records) != 0 {
		t.Fatalf("ledger after convergence: %d ServiceRecords, %d IptablesDnatRules", len(snap.ServiceRecords), len(snap.Records))
	}
	snap.EndpointSlices = slices.Clone(snap.EndpointSlices)
	snap.EndpointSlices[0] = slice("web", "web-a", discoveryv1.AddressTypeIPv4, 8080, "http", corev1.ProtocolTCP, ep{ip: "10.0.1.11", ready: ptr.To(true)})
	w := writes(Compute(snap, srGates))
	if !reflect.DeepEqual(w, []string{"ns/web: write service record " + r.Name}) {
		t.Fatalf("a backend change writes %v, want one write of the record", w)
	}

	// An edit by someone else is repaired (SPEC R4).
	snap = converge(t, snap, srGates)
	snap.ServiceRecords = slices.Clone(snap.ServiceRecords)
	snap.ServiceRecords[0].Spec.Ports = nil
	if sp := servicePlan(Compute(snap, srGates), "web"); !sp.WriteRecord {
		t.Fatal("an edited record is not rewritten")
	}
	snap = converge(t, snap, srGates)

	// Released: the record goes with the finalizer (SPEC L2, T2).
	snap.Services = slices.Clone(snap.Services)
	snap.Services[0].Annotations = map[string]string{}
	sp = servicePlan(Compute(snap, srGates), "web")
	if sp.Record != nil || !reflect.DeepEqual(sp.DeleteServiceRecords, []string{r.Name}) || !sp.ReleaseFinalizer {
		t.Fatalf("release: record %v, deletes %v, release finalizer %v", sp.Record, sp.DeleteServiceRecords, sp.ReleaseFinalizer)
	}
	snap = converge(t, snap, srGates)
	if len(snap.ServiceRecords) != 0 {
		t.Fatalf("records left after release: %v", snap.ServiceRecords)
	}
}

// A Service deleted and recreated with the same name gets its own record; the old one is an
// orphan (SPEC I3, R5).
func TestServiceRecordOwnerByUID(t *testing.T) {
	snap := converge(t, baseSnapshot(service("web", t0)), srGates)
	old := snap.ServiceRecords[0].Name
	snap.Services = []corev1.Service{service("web", t0.Add(1), func(s *corev1.Service) { s.UID = "uid-web-2" })}
	p := Compute(snap, srGates)
	sp := servicePlan(p, "web")
	if !reflect.DeepEqual(p.OrphanServiceRecords, []string{old}) || sp.Record == nil || sp.Record.Name == old || !sp.WriteRecord {
		t.Fatalf("orphans %v, new record %+v", p.OrphanServiceRecords, sp.Record)
	}
	if sp.Record.Labels[LabelRecordUID] != "uid-web-2" {
		t.Fatalf("new record owned by %q", sp.Record.Labels[LabelRecordUID])
	}
}

// Switching forms releases the records of the other form once the gateway is programmed, and a
// Service's gateway is still known from records of either form (SPEC R5, R6).
func TestLedgerFormMigration(t *testing.T) {
	seed := converge(t, baseSnapshot(service("web", t0)), bothGates)
	if len(seed.Records) != 2 || len(seed.ServiceRecords) != 0 {
		t.Fatalf("seed form: %d IptablesDnatRules, %d ServiceRecords", len(seed.Records), len(seed.ServiceRecords))
	}
	sp := servicePlan(Compute(seed, srGates), "web")
	if len(sp.DeleteRecords) != 2 || !sp.WriteRecord {
		t.Fatalf("to the ServiceRecord form: deletes %v, write %v", sp.DeleteRecords, sp.WriteRecord)
	}
	moved := converge(t, seed, srGates)
	if len(moved.Records) != 0 || len(moved.ServiceRecords) != 1 {
		t.Fatalf("after the move: %d IptablesDnatRules, %d ServiceRecords", len(moved.Records), len(moved.ServiceRecords))
	}
	back := converge(t, moved, bothGates)
	if len(back.Records) != 2 || len(back.ServiceRecords) != 0 {
		t.Fatalf("back to the seed form: %d IptablesDnatRules, %d ServiceRecords", len(back.Records), len(back.ServiceRecords))
	}

	// The gateway annotation is gone but a record remains: the record says which gateway.
	moved.Services = slices.Clone(moved.Services)
	moved.Services[0].Annotations = nil
	if sp := servicePlan(Compute(moved, srGates), "web"); sp.Gateway != "gw1" {
		t.Fatalf("gateway from the record = %q", sp.Gateway)
	}
}

// covers: F1
func TestParseLedgerForm(t *testing.T) {
	for in, want := range map[string]LedgerForm{"": LedgerServiceRecord, "service-record": LedgerServiceRecord, "iptables-dnat-rule": LedgerDnatRule} {
		if got, err := ParseLedgerForm(in); err != nil || got != want {
			t.Errorf("ParseLedgerForm(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseLedgerForm("share"); err == nil {
		t.Error("an unknown form is accepted")
	}
}

// covers: R6, N4
// The ServiceRecords say exactly what the gateway serves: read back, they give the gateway's
// state (identities with backends, affinity and source ranges, and the ClusterIPs held), which
// is what the ledger promises (SPEC R3: the records follow the data plane).
func TestRecordedStateIsTheGatewayState(t *testing.T) {
	web := service("web", t0, func(s *corev1.Service) {
		s.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/24"}
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP})
	})
	other := service("other", t0.Add(time.Second), func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeClusterIP
		delete(s.Annotations, AnnotationEIP)
	})
	s := baseSnapshot(web, other)
	s.EndpointSlices = append(s.EndpointSlices, slice("web", "web-dns", discoveryv1.AddressTypeIPv4, 5353, "dns", corev1.ProtocolUDP, ep{ip: "10.0.1.21", ready: ptr.To(true)}))
	p := Compute(s, srGates)
	want := p.Gateway("gw1").State
	if len(want.Identities) != 5 || len(want.ClusterIPs) != 2 {
		t.Fatalf("fixture: want 5 identities and 2 ClusterIPs, have %+v", want)
	}
	s = applyPlan(s, p)
	got := recordedState(s.ServiceRecords, "gw1")
	if !reflect.DeepEqual(got.Identities, want.Identities) || !slices.Equal(got.ClusterIPs, want.ClusterIPs) {
		t.Fatalf("records read back:\n%+v\nthe gateway's state:\n%+v", got, want)
	}
	if n := len(recordedState(s.ServiceRecords, "gw2").Identities); n != 0 {
		t.Fatalf("another gateway's records gave %d identities", n)
	}
}

// recordedState is what the ServiceRecords of gateway gw say it serves: every port of each
// record on its EIP address (with the record's source ranges) and on its ClusterIP, and the
// ClusterIPs held. Records that are not the controller's, name another gateway or do not parse are
// left out. Each identity's group is its owner's (IdentityGroup of the record's UID label).
func recordedState(recs []vpcgwv1alpha1.ServiceRecord, gw string) gwstate.State {
	st := gwstate.State{Identities: []gwstate.Identity{}}
	for i := range recs {
		r := &recs[i]
		if !IsServiceRecord(r) || r.Spec.Gateway != gw {
			continue
		}
		group := IdentityGroup(types.UID(r.Labels[LabelRecordUID]))
		eip, eipErr := netip.ParseAddr(r.Spec.EIPAddress)
		cip, cipErr := netip.ParseAddr(r.Spec.ClusterIP)
		for _, p := range r.Spec.Ports {
			proto, ok := ServedProtocol(corev1.Protocol(strings.ToUpper(p.Protocol)))
			if !ok {
				continue
			}
			var backends []gwstate.Backend
			for _, be := range p.Backends {
				ap, err := netip.ParseAddrPort(be)
				if err != nil {
					continue
				}
				backends = append(backends, gwstate.Backend{IP: ap.Addr(), Port: int32(ap.Port())})
			}
			if eipErr == nil {
				st.Identities = append(st.Identities, gwstate.Identity{VIP: eip, Port: p.Port, Protocol: proto, Backends: backends,
					AffinityTimeoutSeconds: r.Spec.SessionAffinityTimeoutSeconds, SourceRanges: r.Spec.SourceRanges, Group: group})
			}
			if cipErr == nil {
				st.Identities = append(st.Identities, gwstate.Identity{VIP: cip, Port: p.Port, Protocol: proto, Backends: slices.Clone(backends),
					AffinityTimeoutSeconds: r.Spec.SessionAffinityTimeoutSeconds, Group: group})
			}
		}
		if cipErr == nil {
			st.ClusterIPs = append(st.ClusterIPs, cip)
		}
	}
	st.Normalize()
	return st
}
