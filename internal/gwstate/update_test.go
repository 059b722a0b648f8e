package gwstate

// covers: P1, P3 (the planner's update: its change, and the whole state on demand)

import (
	"net/netip"
	"reflect"
	"testing"
)

// The whole state of an update is built once, whoever asks, and carries the update's
// generation; a state made without a planner has no delta and its own counts.
func TestUpdateBuildsTheWholeStateOnce(t *testing.T) {
	st := State{Identities: []Identity{{VIP: netip.MustParseAddr("10.96.0.1"), Port: 80, Protocol: TCP,
		Backends: []Backend{{IP: netip.MustParseAddr("10.0.1.1"), Port: 80}, {IP: netip.MustParseAddr("10.0.1.2"), Port: 80}}}},
		ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.1")}}
	builds := 0
	u := NewUpdate(7, 6, State{Identities: []Identity{}}, false, st.ClusterIPs, 1, 2, func() State { builds++; return st })
	u.Generation = 42
	for range 3 {
		if w := u.Whole(); w.Generation != 42 || !reflect.DeepEqual(w.Identities, st.Identities) {
			t.Fatalf("whole state %+v", w)
		}
	}
	if builds != 1 || !u.HasDelta() {
		t.Fatalf("built %d times, delta %v; want once, with a delta", builds, u.HasDelta())
	}

	c := Complete(st)
	if c.HasDelta() || c.Identities != 1 || c.Backends != 2 || !reflect.DeepEqual(c.Whole(), st) {
		t.Fatalf("Complete: delta %v, %d identities, %d backends, whole %+v", c.HasDelta(), c.Identities, c.Backends, c.Whole())
	}
	if z := (Update{Generation: 3}).Whole(); z.Generation != 3 || z.Identities == nil || len(z.Identities) != 0 {
		t.Fatalf("the zero update's whole state is %#v, want the empty state", z)
	}
	if (Update{Version: 5}).HasDelta() {
		t.Fatal("an update without a base has a delta")
	}
}

// A delta that keeps its base's ClusterIPs merges into a state with them.
func TestMergeKeepsTheBasesClusterIPs(t *testing.T) {
	held := State{Generation: 1, Identities: []Identity{}, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.1")}}
	got, err := held.Merge(State{Generation: 2, Base: 1, SameClusterIPs: true})
	if err != nil || got.Generation != 2 || !reflect.DeepEqual(got.ClusterIPs, held.ClusterIPs) {
		t.Fatalf("merged %+v (%v), want generation 2 with ClusterIPs %v", got, err, held.ClusterIPs)
	}
}
