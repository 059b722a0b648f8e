package transport_test

// covers: P1, P3 (deltas on the stream), D8 (a failure sends the next state complete)

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"sync"
	"testing"

	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/transport"
	"github.com/vpcgw/vpcgw/internal/transport/agenttest"
)

func state(backends ...string) gwstate.State {
	st := gwstate.State{}
	for i := range 50 {
		id := gwstate.Identity{VIP: netip.MustParseAddr(fmt.Sprintf("10.0.0.%d", i+1)), Port: 80, Protocol: gwstate.TCP}
		for _, b := range backends {
			id.Backends = append(id.Backends, gwstate.Backend{IP: netip.MustParseAddr(b), Port: 8080})
		}
		if i == 7 {
			id.Backends = []gwstate.Backend{{IP: netip.MustParseAddr("10.1.9.9"), Port: 8080}}
		}
		st.Identities = append(st.Identities, id)
	}
	st.Normalize()
	return st
}

// deltaAgent holds complete states like the real agent: it merges deltas into what it holds.
type deltaAgent struct {
	mu       sync.Mutex
	accepts  bool
	failNext bool
	held     *gwstate.State
	received []gwstate.State
}

func (a *deltaAgent) answer(msg gwstate.State) gwstate.Ack {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.received = append(a.received, msg)
	st := msg
	if msg.IsDelta() {
		if a.held == nil {
			return gwstate.Ack{Error: "delta without a held state"}
		}
		merged, err := a.held.Merge(msg)
		if err != nil {
			return gwstate.Ack{Error: err.Error()}
		}
		st = merged
	}
	a.held = &st
	if a.failNext {
		a.failNext = false
		return gwstate.Ack{Error: "nft: boom", Deltas: a.accepts}
	}
	return gwstate.Ack{Deltas: a.accepts}
}

func (a *deltaAgent) last() (gwstate.State, gwstate.State) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.received[len(a.received)-1], *a.held
}

func TestDeltasAfterTheAgentAcceptsThem(t *testing.T) {
	a := &deltaAgent{accepts: true}
	conn, stop := agenttest.Pipe(a.answer)
	defer stop()
	ctx := context.Background()
	apply := func(gen int64, st gwstate.State) {
		t.Helper()
		st.Generation = gen
		if err := conn.Apply(ctx, st); err != nil {
			t.Fatalf("generation %d: %v", gen, err)
		}
	}

	apply(1, state("10.1.0.1", "10.1.0.2"))
	if msg, _ := a.last(); msg.IsDelta() || len(msg.Identities) != 50 {
		t.Fatalf("first message: delta %v with %d identities, want the complete state", msg.IsDelta(), len(msg.Identities))
	}
	want := state("10.1.0.1", "10.1.0.3")
	apply(2, want)
	msg, held := a.last()
	if !msg.IsDelta() || msg.Base != 1 || len(msg.Identities) != 49 {
		t.Fatalf("second message: delta %v base %d with %d identities, want a delta on 1 with the 49 changed", msg.IsDelta(), msg.Base, len(msg.Identities))
	}
	if !reflect.DeepEqual(held.Identities, want.Identities) {
		t.Fatal("the agent's merged state differs from the state applied")
	}
	apply(3, want)
	if msg, _ := a.last(); !msg.IsDelta() || len(msg.Identities) != 0 || len(msg.Removed) != 0 {
		t.Fatalf("unchanged state: %d identities, %d removed; want an empty delta", len(msg.Identities), len(msg.Removed))
	}

	// The agent reports a failure: the next state goes complete.
	a.mu.Lock()
	a.failNext = true
	a.mu.Unlock()
	st := state("10.1.0.4")
	st.Generation = 4
	if err := conn.Apply(ctx, st); err == nil {
		t.Fatal("a failed apply returned no error")
	}
	apply(5, state("10.1.0.4"))
	if msg, _ := a.last(); msg.IsDelta() {
		t.Fatal("after a failure the next state was a delta")
	}
}

// An agent that never says it accepts deltas (an older agent) always gets complete states.
func TestNoDeltasToAnOlderAgent(t *testing.T) {
	a := &deltaAgent{}
	conn, stop := agenttest.Pipe(a.answer)
	defer stop()
	for gen := int64(1); gen <= 3; gen++ {
		st := state(fmt.Sprintf("10.1.0.%d", gen))
		st.Generation = gen
		if err := conn.Apply(context.Background(), st); err != nil {
			t.Fatal(err)
		}
		if msg, _ := a.last(); msg.IsDelta() || len(msg.Identities) != 50 {
			t.Fatalf("generation %d: delta %v, %d identities; want complete", gen, msg.IsDelta(), len(msg.Identities))
		}
	}
}

// covers: D8
// An agent that names refused identities has applied the state otherwise: Apply returns a
// *RefusedError with the names, the stream stays usable, and the next state is a delta against
// the one sent (the agent's desired state includes the refused identities).
func TestRefusedIdentitiesKeepTheStream(t *testing.T) {
	refuse := gwstate.IdentityKey{VIP: netip.MustParseAddr("10.96.0.1"), Port: 1, Protocol: gwstate.TCP}
	a := &deltaAgent{accepts: true}
	conn, stop := agenttest.Pipe(func(st gwstate.State) gwstate.Ack {
		ack := a.answer(st)
		ack.Refused = []gwstate.Refusal{{IdentityKey: refuse, Reason: "identity 10.96.0.1:1:tcp: backend 10.0.0.1:80 is an address of the gateway itself (on eth0)"}}
		return ack
	})
	defer stop()
	st := state("10.1.0.1", "10.1.0.2")
	st.Generation = 1
	err := conn.Apply(context.Background(), st)
	var re *transport.RefusedError
	if !errors.As(err, &re) || re.Generation != 1 || len(re.Refused) != 1 || re.Refused[0].IdentityKey != refuse {
		t.Fatalf("apply: %v, want a RefusedError naming %s", err, refuse)
	}
	var ae *transport.AgentError
	if errors.As(err, &ae) || conn.Broken() {
		t.Fatalf("a refusal by name is taken for a failure of the state (%v) or broke the stream (%v)", ae, conn.Broken())
	}
	next := state("10.1.0.1", "10.1.0.3")
	next.Generation = 2
	_ = conn.Apply(context.Background(), next)
	if msg, _ := a.last(); !msg.IsDelta() || msg.Base != 1 {
		t.Fatalf("the state after a refusal: delta %v on %d, want a delta on generation 1", msg.IsDelta(), msg.Base)
	}
}
