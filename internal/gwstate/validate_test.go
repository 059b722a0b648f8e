package gwstate

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// covers: N2, N7, L11
// The agent refuses what the model must never send: backends that are not unicast addresses of a
// network (the metadata address, loopback, multicast ...) and malformed source ranges.
func TestValidateRefusesUnsafeBackendsAndRanges(t *testing.T) {
	base := func(mut func(*Identity)) State {
		id := Identity{VIP: netip.MustParseAddr("172.18.0.10"), Port: 80, Protocol: TCP, Backends: []Backend{{IP: netip.MustParseAddr("10.0.1.11"), Port: 8080}}}
		mut(&id)
		return State{Identities: []Identity{id}}
	}
	if err := base(func(*Identity) {}).Validate(); err != nil {
		t.Fatalf("a good state: %v", err)
	}
	if err := base(func(id *Identity) { id.SourceRanges = []string{"10.1.0.0/16", "192.168.0.0/24"} }).Validate(); err != nil {
		t.Fatalf("good source ranges: %v", err)
	}
	for name, c := range map[string]struct {
		mut  func(*Identity)
		want string
	}{
		"metadata address":     {func(id *Identity) { id.Backends[0].IP = netip.MustParseAddr("169.254.169.254") }, "link-local"},
		"loopback":             {func(id *Identity) { id.Backends[0].IP = netip.MustParseAddr("127.0.0.1") }, "loopback"},
		"multicast":            {func(id *Identity) { id.Backends[0].IP = netip.MustParseAddr("239.1.1.1") }, "multicast"},
		"broadcast":            {func(id *Identity) { id.Backends[0].IP = netip.MustParseAddr("255.255.255.255") }, "broadcast"},
		"unspecified":          {func(id *Identity) { id.Backends[0].IP = netip.MustParseAddr("0.0.0.0") }, "unspecified"},
		"IPv6":                 {func(id *Identity) { id.Backends[0].IP = netip.MustParseAddr("fd00::1") }, "not an IPv4"},
		"range not masked":     {func(id *Identity) { id.SourceRanges = []string{"10.1.2.3/16"} }, "canonical"},
		"range IPv6":           {func(id *Identity) { id.SourceRanges = []string{"fd00::/8"} }, "canonical"},
		"range garbage":        {func(id *Identity) { id.SourceRanges = []string{"any"} }, "canonical"},
		"ranges duplicated":    {func(id *Identity) { id.SourceRanges = []string{"10.0.0.0/8", "10.0.0.0/8"} }, "sorted"},
		"ranges out of order":  {func(id *Identity) { id.SourceRanges = []string{"192.168.0.0/24", "10.0.0.0/8"} }, "sorted"},
		"draining metadata":    {func(id *Identity) { id.Draining = []Backend{{IP: netip.MustParseAddr("169.254.169.254"), Port: 80}} }, "draining backend"},
		"draining port 0":      {func(id *Identity) { id.Draining = []Backend{{IP: netip.MustParseAddr("10.0.1.12"), Port: 0}} }, "draining backend"},
		"draining and serving": {func(id *Identity) { id.Draining = []Backend{id.Backends[0]} }, "both serving and draining"},
		"draining out of order": {func(id *Identity) {
			id.Draining = []Backend{{IP: netip.MustParseAddr("10.0.1.13"), Port: 8080}, {IP: netip.MustParseAddr("10.0.1.12"), Port: 8080}}
		}, "not sorted"},
	} {
		err := base(c.mut).Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, c.want)
		}
	}
}

// covers: N7, D2
// An identity whose source ranges change is in the delta, like one whose backends change.
func TestDeltaSeesSourceRanges(t *testing.T) {
	id := Identity{VIP: netip.MustParseAddr("172.18.0.10"), Port: 80, Protocol: TCP, Backends: []Backend{{IP: netip.MustParseAddr("10.0.1.11"), Port: 8080}}}
	old := State{Identities: []Identity{id}}
	id.SourceRanges = []string{"10.0.0.0/8"}
	d := Delta(old, State{Identities: []Identity{id}})
	if len(d.Identities) != 1 || len(d.Identities[0].SourceRanges) != 1 {
		t.Fatalf("delta %+v", d)
	}
}

// covers: N4, N6
// MaxEncodedSize is a true bound: a complete state whose every identity, backend and source
// range takes the longest form the contract allows encodes to no more than it says.
func TestMaxEncodedSize(t *testing.T) {
	const ids, perID = 200, 7
	st := State{Generation: 1<<62 + 1, Identities: make([]Identity, 0, ids)}
	for i := range ids {
		id := Identity{VIP: netip.MustParseAddr(fmt.Sprintf("255.255.%d.%d", 100+i/100, 100+i%100)), Port: 65535, Protocol: UDP,
			AffinityTimeoutSeconds: 86400, Group: "ffffffffffff"}
		for j := range perID {
			id.Backends = append(id.Backends, Backend{IP: netip.MustParseAddr(fmt.Sprintf("255.255.%d.%d", 100+j, 100+i%100)), Port: 65535})
			id.SourceRanges = append(id.SourceRanges, fmt.Sprintf("255.255.%d.%d/32", 100+j, 100+i%100))
		}
		st.Identities = append(st.Identities, id)
		st.ClusterIPs = append(st.ClusterIPs, id.VIP)
	}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if bound := MaxEncodedSize(ids, ids*2*perID); len(b) > bound {
		t.Fatalf("a worst-case state encodes to %d bytes, more than MaxEncodedSize's %d", len(b), bound)
	}
	// And the bound is not loose by more than a third (it sizes the controller's defaults).
	if bound := MaxEncodedSize(ids, ids*2*perID); len(b) < bound*2/3 {
		t.Errorf("a worst-case state encodes to %d bytes, far under MaxEncodedSize's %d", len(b), bound)
	}
}

// covers: L11, D6
// A backend that starts draining changes the identity (the agent must keep its UDP flows), and
// a state without draining backends encodes as before (agents of the last release read it).
func TestDrainingIsPartOfTheIdentity(t *testing.T) {
	be := func(last byte) Backend { return Backend{IP: netip.AddrFrom4([4]byte{10, 0, 1, last}), Port: 8080} }
	id := Identity{VIP: netip.MustParseAddr("172.18.0.10"), Port: 53, Protocol: UDP, Backends: []Backend{be(11), be(12)}}
	old := State{Identities: []Identity{id}}
	drained := id
	drained.Backends, drained.Draining = []Backend{be(11)}, []Backend{be(12)}
	if id.Equal(drained) {
		t.Fatal("an identity whose backend drains equals the one before")
	}
	gone := drained
	gone.Draining = nil
	if drained.Equal(gone) {
		t.Fatal("an identity whose draining backend left equals the one before")
	}
	if d := Delta(State{Identities: []Identity{drained}}, State{Identities: []Identity{gone}}); len(d.Identities) != 1 {
		t.Fatalf("the draining backend's leave is not in the delta: %+v", d)
	}
	b, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "draining") {
		t.Errorf("a state without draining backends names them: %s", b)
	}
	st := State{Identities: []Identity{{VIP: id.VIP, Port: 53, Protocol: UDP, Backends: []Backend{be(11)}, Draining: []Backend{be(13), be(12), be(13)}}}}
	st.Normalize()
	if got := st.Identities[0].Draining; len(got) != 2 || got[0] != be(12) || got[1] != be(13) {
		t.Errorf("normalized draining backends %v, want sorted and unique", got)
	}
	if err := st.Validate(); err != nil {
		t.Errorf("a normalized state with draining backends: %v", err)
	}
}
