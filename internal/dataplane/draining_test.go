// covers: L11, D6
package dataplane

import (
	"context"
	"slices"
	"testing"

	"github.com/go-logr/logr"

	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// draining returns id with the draining backends bs (terminating, still serving: SPEC L11).
func draining(id gwstate.Identity, bs ...gwstate.Backend) gwstate.Identity {
	id.Draining = bs
	return id
}

// What flowTarget names for every way a backend enters or leaves Draining: the flows kept are
// those whose reply comes from a backend or a draining one, also when no backend is left; a
// draining backend's flows go once it leaves Draining; TCP is never cleaned by reply.
// covers: L11, D6
func TestDrainingFlowTarget(t *testing.T) {
	a, b, c := be("10.0.1.1", 53), be("10.0.1.2", 53), be("10.0.1.3", 53)
	udp := func(bs ...gwstate.Backend) gwstate.Identity { return ident("10.0.0.1", 53, gwstate.UDP, bs...) }
	tcp := func(bs ...gwstate.Backend) gwstate.Identity { return ident("10.0.0.1", 80, gwstate.TCP, bs...) }
	for _, tc := range []struct {
		name    string
		full    bool
		id, old gwstate.Identity
		had     bool
		want    []string // nil: no target
	}{
		{name: "a backend starts draining", id: draining(udp(a), b), old: udp(a, b), had: true,
			want: []string{"10.0.0.1:udp:10.0.1.1:53,10.0.1.2:53"}},
		{name: "the draining backend leaves", id: udp(a), old: draining(udp(a), b), had: true,
			want: []string{"10.0.0.1:udp:10.0.1.1:53"}},
		{name: "every backend starts draining", id: draining(udp(), a, b), old: udp(a, b), had: true,
			want: []string{"10.0.0.1:udp:10.0.1.1:53,10.0.1.2:53"}},
		{name: "one of the draining backends leaves, none serving", id: draining(udp(), b), old: draining(udp(), a, b), had: true,
			want: []string{"10.0.0.1:udp:10.0.1.2:53"}},
		{name: "the last draining backend leaves, none serving", id: udp(), old: draining(udp(), b), had: true,
			want: []string{"10.0.0.1:udp:"}},
		{name: "backends come back while one drains", id: draining(udp(c), b), old: draining(udp(), b), had: true,
			want: []string{"10.0.0.1:udp:10.0.1.2:53,10.0.1.3:53"}},
		{name: "a draining backend serves again", id: udp(a, b), old: draining(udp(a), b), had: true,
			want: []string{"10.0.0.1:udp:10.0.1.1:53,10.0.1.2:53"}},
		{name: "a new identity with draining backends only", id: draining(udp(), b), had: false},
		{name: "nothing changed", id: draining(udp(a), b), old: draining(udp(a), b), had: true},
		{name: "full sync", full: true, id: draining(udp(a), b), old: udp(a, b, c), had: true,
			want: []string{"10.0.0.1:udp:10.0.1.1:53,10.0.1.2:53"}},
		{name: "full sync, none serving", full: true, id: draining(udp(), b),
			want: []string{"10.0.0.1:udp:10.0.1.2:53"}},
		{name: "TCP backend starts draining", id: draining(tcp(a), b), old: tcp(a, b), had: true},
		{name: "TCP draining backend leaves", id: tcp(a), old: draining(tcp(a), b), had: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tgt, ok := flowTarget(tc.full, tc.id, tc.old, tc.had)
			var got []string
			if ok {
				got = describe([]cleanTarget{tgt})
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("targets %v, want %v", got, tc.want)
			}
		})
	}
}

// The conntrack cleanings of an agent as backends enter and leave Draining, through complete
// states (diff) and through the delta fast path (admission): a backend that starts draining keeps
// its flows; one that leaves Draining loses them, also when the identity has no backend left
// (an identity without backends is committed in present only, not in applied); a removed
// identity loses all its flows, draining ones too; a full sync keeps the draining backends'.
// covers: L11, D6
func TestDrainingConntrackTargets(t *testing.T) {
	a, b, c := be("10.0.1.1", 53), be("10.0.1.2", 53), be("10.0.1.3", 53)
	udp := func(bs ...gwstate.Backend) gwstate.Identity { return ident("10.0.0.1", 53, gwstate.UDP, bs...) }
	states := []gwstate.State{
		state(1, udp(a, b, c)),
		state(2, draining(udp(a, c), b)),
		state(3, udp(a, c)),
		state(4, draining(udp(), a, c)),
		state(5, draining(udp(), c)),
		state(6, udp()),
		state(7, draining(udp(), a)),
		state(8),
	}
	want := [][]string{
		{"10.0.0.1:udp:10.0.1.1:53,10.0.1.2:53,10.0.1.3:53"}, // the first (full) sync
		{"10.0.0.1:udp:10.0.1.1:53,10.0.1.2:53,10.0.1.3:53"},
		{"10.0.0.1:udp:10.0.1.1:53,10.0.1.3:53"},
		{"10.0.0.1:udp:10.0.1.1:53,10.0.1.3:53"},
		{"10.0.0.1:udp:10.0.1.3:53"},
		{"10.0.0.1:udp:"},
		{"10.0.0.1:udp:10.0.1.1:53"},
		{"10.0.0.1:udp:"}, // removed
	}
	for _, path := range []string{"complete", "delta"} {
		t.Run(path, func(t *testing.T) {
			ct := &fakeCT{}
			ag := newAgent(&knftBackend{nft: newFake()}, logr.Discard(), "", nil, ct)
			mustApply(t, ag, states[0])
			if got := lastTargets(ct, 0); !slices.Equal(got, want[0]) {
				t.Errorf("generation 1: conntrack targets %v, want %v", got, want[0])
			}
			for i := 1; i < len(states); i++ {
				n := len(ct.calls)
				if path == "complete" {
					mustApply(t, ag, states[i])
				} else {
					if ack := handleLine(context.Background(), ag, deltaLine(t, states[i-1], states[i]), logr.Discard()); ack.Error != "" {
						t.Fatalf("generation %d: %s", states[i].Generation, ack.Error)
					}
					if ag.last.Generation == states[i].Generation {
						t.Fatalf("generation %d did not take the fast path", states[i].Generation)
					}
				}
				if got := lastTargets(ct, n); !slices.Equal(got, want[i]) {
					t.Errorf("generation %d: conntrack targets %v, want %v", states[i].Generation, got, want[i])
				}
			}
		})
	}

	// A full sync (a new agent, the same state) keeps the draining backends' flows.
	ct := &fakeCT{}
	ag := newAgent(&knftBackend{nft: newFake()}, logr.Discard(), "", nil, ct)
	mustApply(t, ag, state(1, draining(udp(a), b), draining(ident("10.0.0.2", 53, gwstate.UDP), c)))
	if got, w := lastTargets(ct, 0), []string{"10.0.0.1:udp:10.0.1.1:53,10.0.1.2:53", "10.0.0.2:udp:10.0.1.3:53"}; !slices.Equal(got, w) {
		t.Errorf("full sync: conntrack targets %v, want %v", got, w)
	}
}

// An identity whose only change is its draining backends writes nothing to nft (no transaction:
// its chain is not flushed and rewritten), through complete states and deltas, with and without
// backends; the agent books it (present and applied hold the new draining backends) and cleans
// the flows of the backend that left Draining.
// covers: L11, D6
func TestDrainingOnlyChangeWritesNothing(t *testing.T) {
	a, b, c := be("10.0.1.1", 53), be("10.0.1.2", 53), be("10.0.1.3", 53)
	dns := ident("10.0.0.1", 53, gwstate.UDP, a)
	idle := ident("10.0.0.2", 53, gwstate.UDP) // no backends: its Pods all drain
	web := ident("10.0.0.1", 80, gwstate.TCP, be("10.0.1.1", 80))
	states := []gwstate.State{
		state(1, draining(dns, b, c), draining(idle, b, c), web),
		state(2, draining(dns, c), draining(idle, c), web),
		state(3, dns, idle, web),
	}
	wantCT := [][]string{nil, {"10.0.0.1:udp:10.0.1.1:53,10.0.1.3:53", "10.0.0.2:udp:10.0.1.3:53"}, {"10.0.0.1:udp:10.0.1.1:53", "10.0.0.2:udp:"}}
	for _, path := range []string{"complete", "delta"} {
		t.Run(path, func(t *testing.T) {
			f := &scriptedNFT{Fake: newFake()}
			ct := &fakeCT{}
			ag := newAgent(&knftBackend{nft: f}, logr.Discard(), "", nil, ct)
			mustApply(t, ag, states[0])
			dump := f.Dump()
			for i := 1; i < len(states); i++ {
				st, runs, n := states[i], len(f.runs), len(ct.calls)
				if path == "complete" {
					mustApply(t, ag, st)
				} else if ack := handleLine(context.Background(), ag, deltaLine(t, states[i-1], st), logr.Discard()); ack.Error != "" {
					t.Fatalf("generation %d: %s", st.Generation, ack.Error)
				}
				if len(f.runs) != runs {
					t.Errorf("generation %d: a change of draining backends only sent transactions:\n%s", st.Generation, f.runs[runs:])
				}
				if f.Dump() != dump {
					t.Errorf("generation %d: the table changed:\n%s\nwant\n%s", st.Generation, f.Dump(), dump)
				}
				for _, id := range st.Identities {
					if got := ag.present[id.Key()]; !got.Equal(id) {
						t.Errorf("generation %d: present holds %+v, want %+v", st.Generation, got, id)
					}
					if got, ok := ag.applied[id.Key()]; len(id.Backends) > 0 && (!ok || !got.Equal(id)) {
						t.Errorf("generation %d: applied holds %+v, want %+v", st.Generation, got, id)
					}
				}
				if got := lastTargets(ct, n); !slices.Equal(got, wantCT[i]) {
					t.Errorf("generation %d: conntrack targets %v, want %v", st.Generation, got, wantCT[i])
				}
			}
			if drift, err := ag.Verify(context.Background()); drift != "" || err != nil {
				t.Errorf("verify: drift %q, err %v", drift, err)
			}
		})
	}
}
