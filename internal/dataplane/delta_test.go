package dataplane

// covers: P1, P3 (delta states), D8 (a delta the agent cannot place is refused, nothing changes)

import (
	"context"
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// A sequence of deltas leaves exactly the ruleset a fresh agent makes from the complete state,
// and every ack says the agent accepts deltas.
func TestDeltaLinesConverge(t *testing.T) {
	f := newFake()
	a := NewAgent(f, logr.Discard())
	send := func(msg gwstate.State) gwstate.Ack {
		t.Helper()
		line, err := json.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		return handleLine(context.Background(), a, line, logr.Discard())
	}
	web := ident("10.0.0.1", 80, gwstate.TCP, be("10.0.1.1", 8080), be("10.0.1.2", 8080))
	dns := ident("10.0.0.2", 53, gwstate.UDP, be("10.0.1.3", 53))
	aff := ident("10.0.0.3", 443, gwstate.TCP, be("10.0.1.4", 8443))
	aff.AffinityTimeoutSeconds = 60
	states := []gwstate.State{
		state(1, web, dns),
		state(2, ident("10.0.0.1", 80, gwstate.TCP, be("10.0.1.2", 8080), be("10.0.1.5", 8080)), dns, aff),
		state(3, ident("10.0.0.1", 80, gwstate.TCP, be("10.0.1.2", 8080), be("10.0.1.5", 8080)), aff),
		state(4, aff),
		state(5),
		state(6, web, dns, aff),
	}
	if ack := send(states[0]); ack.Error != "" || !ack.Deltas {
		t.Fatalf("complete state: ack %+v, want success with Deltas", ack)
	}
	for i := 1; i < len(states); i++ {
		d := gwstate.Delta(states[i-1], states[i])
		d.Generation, d.Base = states[i].Generation, states[i-1].Generation
		if ack := send(d); ack.Error != "" || !ack.Deltas || ack.Generation != states[i].Generation {
			t.Fatalf("delta to generation %d: ack %+v", states[i].Generation, ack)
		}
		if got, want := f.Dump(), freshDump(t, states[i]); got != want {
			t.Fatalf("after the delta to generation %d the table is\n%s\nwant (fresh agent, complete state)\n%s", states[i].Generation, got, want)
		}
	}

	// A delta against a generation the agent does not hold is refused and changes nothing.
	before := f.Dump()
	d := gwstate.Delta(states[5], states[0])
	d.Generation, d.Base = 8, 7
	if ack := send(d); !strings.Contains(ack.Error, "send a complete state") {
		t.Fatalf("delta on a wrong base: ack %+v, want a refusal asking for a complete state", ack)
	}
	if f.Dump() != before {
		t.Fatal("a refused delta changed the table")
	}
}

// A new agent (after a restart) refuses a delta: it holds no state to apply it to.
func TestDeltaBeforeCompleteStateRefused(t *testing.T) {
	a := NewAgent(newFake(), logr.Discard())
	line, _ := json.Marshal(gwstate.State{Generation: 2, Base: 1})
	if ack := handleLine(context.Background(), a, line, logr.Discard()); !strings.Contains(ack.Error, "before any complete state") {
		t.Fatalf("ack = %+v, want a refusal", ack)
	}
}

// covers: P1, P3, D5
// A delta that keeps its base's ClusterIPs (gwstate.State.SameClusterIPs) leaves the desired
// ClusterIPs as they were; the agent says it accepts such deltas; one that both keeps and
// carries ClusterIPs is refused whole, and so is a complete state that keeps them.
func TestDeltaKeepsItsBasesClusterIPs(t *testing.T) {
	a := NewAgent(newFake(), logr.Discard())
	send := func(msg gwstate.State) gwstate.Ack {
		t.Helper()
		line, err := json.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		return handleLine(context.Background(), a, line, logr.Discard())
	}
	cips := []netip.Addr{netip.MustParseAddr("10.96.0.1"), netip.MustParseAddr("10.96.0.2")}
	first := state(1, ident("10.96.0.1", 80, gwstate.TCP, be("10.0.1.1", 8080)))
	first.ClusterIPs = cips
	if ack := send(first); ack.Error != "" || !ack.SameClusterIPs {
		t.Fatalf("complete state: ack %+v, want success with SameClusterIPs", ack)
	}
	d := gwstate.State{Generation: 2, Base: 1, SameClusterIPs: true, Identities: []gwstate.Identity{ident("10.96.0.1", 80, gwstate.TCP, be("10.0.1.2", 8080))}}
	if ack := send(d); ack.Error != "" {
		t.Fatalf("delta keeping the ClusterIPs: ack %+v", ack)
	}
	desired, err := a.desired()
	if err != nil || desired.Generation != 2 || !slices.Equal(desired.ClusterIPs, cips) || desired.Identities[0].Backends[0] != be("10.0.1.2", 8080) {
		t.Fatalf("desired state %+v (%v), want generation 2 with ClusterIPs %v and the new backend", desired, err, cips)
	}
	// The same through the full path (an agent that does not trust its memory merges).
	a.synced = false
	d.Generation, d.Base = 3, 2
	if ack := send(d); ack.Error != "" {
		t.Fatalf("delta keeping the ClusterIPs, full path: ack %+v", ack)
	}
	if desired, err := a.desired(); err != nil || desired.Generation != 3 || !slices.Equal(desired.ClusterIPs, cips) {
		t.Fatalf("desired state after the full path %+v (%v), want generation 3 with ClusterIPs %v", desired, err, cips)
	}
	for name, c := range map[string]struct {
		msg  gwstate.State
		want string
	}{
		"keeps and carries": {gwstate.State{Generation: 4, Base: 3, SameClusterIPs: true, ClusterIPs: cips[:1]}, "carries 1 ClusterIPs"},
		"complete":          {gwstate.State{Generation: 4, SameClusterIPs: true}, "cannot keep its base's ClusterIPs"},
	} {
		if ack := send(c.msg); !strings.Contains(ack.Error, c.want) {
			t.Errorf("%s: ack %+v, want an error with %q", name, ack, c.want)
		}
	}
}

// covers: D8
// An agent without a desired state says so instead of failing on its memory: the caller
// refuses the message, and the controller sends a complete state.
func TestDesiredStateBeforeAnyState(t *testing.T) {
	a := NewAgent(newFake(), logr.Discard())
	if st, err := a.desired(); err == nil || st != nil || !strings.Contains(err.Error(), "send a complete state") {
		t.Fatalf("desired() = %v, %v; want an error asking for a complete state", st, err)
	}
}
