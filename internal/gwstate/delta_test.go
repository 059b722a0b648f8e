package gwstate

// covers: P1, P3 (delta states: the agent gets only what changed)

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

// randomState draws a normalized state from a small space, so that two draws share identities.
func randomState(r *rand.Rand, gen int64) State {
	st := State{Generation: gen}
	for v := range 6 {
		for _, proto := range []Protocol{TCP, UDP} {
			if r.IntN(3) == 0 {
				continue
			}
			id := Identity{VIP: netip.MustParseAddr(fmt.Sprintf("10.0.0.%d", v+1)), Port: 80, Protocol: proto}
			for b := range r.IntN(4) {
				id.Backends = append(id.Backends, Backend{IP: netip.MustParseAddr(fmt.Sprintf("10.1.0.%d", b+r.IntN(3)+1)), Port: 8080})
			}
			if r.IntN(4) == 0 {
				id.AffinityTimeoutSeconds = 10800
			}
			st.Identities = append(st.Identities, id)
		}
		if r.IntN(2) == 0 {
			st.ClusterIPs = append(st.ClusterIPs, netip.MustParseAddr(fmt.Sprintf("10.96.0.%d", v+1)))
		}
	}
	st.Normalize()
	return st
}

// Merging the delta from old to new into old gives new, for any pair of states.
func TestDeltaMergeRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		old, next := randomState(r, int64(i+1)), randomState(r, int64(i+2))
		d := Delta(old, next)
		d.Generation, d.Base = next.Generation, old.Generation
		d.Normalize()
		if err := d.Validate(); err != nil {
			t.Fatalf("delta %+v does not validate: %v", d, err)
		}
		got, err := old.Merge(d)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Identities, next.Identities) && !(len(got.Identities) == 0 && len(next.Identities) == 0) {
			t.Fatalf("merge differs:\nold %+v\nnew %+v\ndelta %+v\ngot %+v", old.Identities, next.Identities, d, got.Identities)
		}
		if !reflect.DeepEqual(got.ClusterIPs, next.ClusterIPs) || got.Generation != next.Generation {
			t.Fatalf("merge: clusterIPs %v gen %d, want %v gen %d", got.ClusterIPs, got.Generation, next.ClusterIPs, next.Generation)
		}
	}
}

// A change to one identity's backends is a delta of that identity only.
func TestDeltaCarriesOnlyChanges(t *testing.T) {
	old := State{Generation: 1}
	for i := range 1000 {
		old.Identities = append(old.Identities, Identity{VIP: netip.MustParseAddr(fmt.Sprintf("10.0.%d.%d", i/250, i%250+1)), Port: 80, Protocol: TCP,
			Backends: []Backend{{IP: netip.MustParseAddr("10.1.0.1"), Port: 80}, {IP: netip.MustParseAddr("10.1.0.2"), Port: 80}}})
	}
	old.Normalize()
	next := State{Generation: 2, Identities: append([]Identity(nil), old.Identities...)}
	next.Identities[500] = Identity{VIP: next.Identities[500].VIP, Port: 80, Protocol: TCP, Backends: []Backend{{IP: netip.MustParseAddr("10.1.0.3"), Port: 80}}}
	next.Identities = append(next.Identities[:10], next.Identities[11:]...)
	d := Delta(old, next)
	if len(d.Identities) != 1 || d.Identities[0].VIP != old.Identities[500].VIP || len(d.Removed) != 1 || d.Removed[0] != old.Identities[10].Key() {
		t.Fatalf("delta = %d identities, removed %v; want the changed identity and the removed one", len(d.Identities), d.Removed)
	}
}

// A delta against another generation than the one held is refused, and malformed deltas do not
// validate.
func TestDeltaRejected(t *testing.T) {
	held := State{Generation: 7}
	if _, err := held.Merge(State{Generation: 9, Base: 8}); err == nil || !strings.Contains(err.Error(), "generation 7") {
		t.Fatalf("merge against the wrong base: err = %v", err)
	}
	id := Identity{VIP: netip.MustParseAddr("10.0.0.1"), Port: 80, Protocol: TCP}
	for name, c := range map[string]struct {
		st   State
		want string
	}{
		"removal in a complete state": {State{Generation: 2, Removed: []IdentityKey{id.Key()}}, "cannot remove"},
		"set and removed":             {State{Generation: 2, Base: 1, Identities: []Identity{id}, Removed: []IdentityKey{id.Key()}}, "both set and removed"},
		"bad removed vip":             {State{Generation: 2, Base: 1, Removed: []IdentityKey{{VIP: netip.MustParseAddr("fe80::1"), Port: 80, Protocol: TCP}}}, "not an IPv4"},
		"bad removed port":            {State{Generation: 2, Base: 1, Removed: []IdentityKey{{VIP: netip.MustParseAddr("10.0.0.1"), Port: 0, Protocol: TCP}}}, "outside 1..65535"},
		"bad removed protocol":        {State{Generation: 2, Base: 1, Removed: []IdentityKey{{VIP: netip.MustParseAddr("10.0.0.1"), Port: 80, Protocol: "sctp"}}}, "not tcp or udp"},
		"negative base":               {State{Generation: 2, Base: -1}, "negative"},
		"complete keeping ClusterIPs": {State{Generation: 2, SameClusterIPs: true}, "cannot keep its base's ClusterIPs"},
		"keeping and carrying":        {State{Generation: 2, Base: 1, SameClusterIPs: true, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.1")}}, "carries 1 ClusterIPs"},
	} {
		if err := c.st.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Validate() = %v, want an error with %q", name, err, c.want)
		}
	}
}

// Identities sort numerically by address (10.0.0.9 before 10.0.0.10), then port and protocol;
// ClusterIPs likewise, without duplicates; an address Validate refuses (IPv6) sorts after IPv4
// and does not panic.
func TestSortIdentities(t *testing.T) {
	a := netip.MustParseAddr
	st := State{
		Identities: []Identity{
			{VIP: a("10.0.0.10"), Port: 80, Protocol: TCP}, {VIP: a("10.0.0.9"), Port: 443, Protocol: TCP},
			{VIP: a("10.0.0.9"), Port: 80, Protocol: UDP}, {VIP: a("10.0.0.9"), Port: 80, Protocol: TCP}, {VIP: a("fd00::1"), Port: 1, Protocol: TCP},
		},
		ClusterIPs: []netip.Addr{a("10.96.0.10"), a("10.96.0.9"), a("10.96.0.10")},
	}
	st.SortIdentities()
	var got []string
	for _, id := range st.Identities {
		got = append(got, id.Key().String())
	}
	want := []string{"10.0.0.9:80:tcp", "10.0.0.9:80:udp", "10.0.0.9:443:tcp", "10.0.0.10:80:tcp", "fd00::1:1:tcp"}
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(st.ClusterIPs, []netip.Addr{a("10.96.0.9"), a("10.96.0.10")}) {
		t.Fatalf("sorted identities %v, clusterIPs %v; want %v and [10.96.0.9 10.96.0.10]", got, st.ClusterIPs, want)
	}
}
