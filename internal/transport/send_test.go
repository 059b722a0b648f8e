package transport_test

// covers: P1, P3 (the planner's delta on the stream), D7, D8 (any other state goes whole)

import (
	"context"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/transport/agenttest"
)

// plannerUpdate is the update a planner makes of next after prev (version base): the delta
// gwstate.Delta gives, and next as the whole state.
func plannerUpdate(version, base uint64, prev, next gwstate.State) gwstate.Update {
	var delta gwstate.State
	if base > 0 {
		delta = gwstate.Delta(prev, next)
	}
	return gwstate.NewUpdate(version, base, delta, next.Release, next.ClusterIPs, len(next.Identities), 0, func() gwstate.State { return next })
}

// Send sends the planner's delta to an agent that acknowledged its base, and the whole state to
// one that did not: a new stream, a failed message, a state of another base, a release.
func TestSendSendsThePlannersDeltaOnItsBase(t *testing.T) {
	a := &deltaAgent{accepts: true}
	conn, stop := agenttest.Pipe(a.answer)
	defer stop()
	ctx := context.Background()
	gen := int64(0)
	send := func(u gwstate.Update) error {
		t.Helper()
		gen++
		u.Generation = gen
		return conn.Send(ctx, u)
	}
	check := func(what string, wantDelta bool, want gwstate.State) {
		t.Helper()
		msg, held := a.last()
		if msg.IsDelta() != wantDelta {
			t.Fatalf("%s: delta %v, want %v", what, msg.IsDelta(), wantDelta)
		}
		if wantDelta && msg.Base != gen-1 {
			t.Fatalf("%s: delta on generation %d, want %d", what, msg.Base, gen-1)
		}
		if !reflect.DeepEqual(held.Identities, want.Identities) {
			t.Fatalf("%s: the agent holds another state than the one sent", what)
		}
	}
	s1, s2, s3 := state("10.1.0.1", "10.1.0.2"), state("10.1.0.1", "10.1.0.3"), state("10.1.0.4")

	if err := send(plannerUpdate(10, 9, state("10.1.0.9"), s1)); err != nil {
		t.Fatal(err)
	}
	check("first message of a stream", false, s1)
	if err := send(plannerUpdate(11, 10, s1, s2)); err != nil {
		t.Fatal(err)
	}
	check("delta on the acknowledged version", true, s2)
	if msg, _ := a.last(); len(msg.Identities) != 49 {
		t.Fatalf("the delta carries %d identities, want the 49 changed", len(msg.Identities))
	}
	// A state whose base the agent did not acknowledge (the planner made one this instance
	// never got) goes whole.
	if err := send(plannerUpdate(13, 12, s1, s3)); err != nil {
		t.Fatal(err)
	}
	check("another base", false, s3)

	// A failed message: the next state goes whole, even on the failed one's version.
	a.mu.Lock()
	a.failNext = true
	a.mu.Unlock()
	if err := send(plannerUpdate(14, 13, s3, s1)); err == nil {
		t.Fatal("a failed message returned no error")
	}
	if err := send(plannerUpdate(15, 14, s1, s2)); err != nil {
		t.Fatal(err)
	}
	check("after a failure", false, s2)

	// A release is always whole.
	rel := gwstate.State{Identities: []gwstate.Identity{}, Release: true}
	if err := send(plannerUpdate(16, 15, s2, rel)); err != nil {
		t.Fatal(err)
	}
	check("release", false, rel)
}

// A planner's update to an older agent (no deltas) goes whole.
func TestSendToAnOlderAgentIsWhole(t *testing.T) {
	a := &deltaAgent{}
	conn, stop := agenttest.Pipe(a.answer)
	defer stop()
	prev := state("10.1.0.1")
	for v := uint64(1); v <= 3; v++ {
		next := state("10.1.0.1", "10.1.0."+string(rune('1'+v)))
		u := plannerUpdate(v, v-1, prev, next)
		u.Generation = int64(v)
		if err := conn.Send(context.Background(), u); err != nil {
			t.Fatal(err)
		}
		if msg, _ := a.last(); msg.IsDelta() || len(msg.Identities) != 50 {
			t.Fatalf("version %d: delta %v, %d identities; want whole", v, msg.IsDelta(), len(msg.Identities))
		}
		prev = next
	}
}

// A delta whose ClusterIPs are its base's leaves them out (State.SameClusterIPs) for an agent
// that accepts that, and carries them to one that does not; the agent's merged state is the
// one sent either way.
func TestSendLeavesOutTheBasesClusterIPs(t *testing.T) {
	for _, accepts := range []bool{true, false} {
		a := &deltaAgent{accepts: true}
		conn, stop := agenttest.Pipe(func(st gwstate.State) gwstate.Ack {
			ack := a.answer(st)
			ack.SameClusterIPs = accepts
			return ack
		})
		s1, s2 := state("10.1.0.1"), state("10.1.0.2")
		s1.ClusterIPs = []netip.Addr{netip.MustParseAddr("10.96.0.1")}
		s2.ClusterIPs = s1.ClusterIPs
		for v, st := range []gwstate.State{s1, s2} {
			u := plannerUpdate(uint64(v+1), uint64(v), s1, st)
			u.SameClusterIPs, u.Generation = v > 0, int64(v+1)
			if err := conn.Send(context.Background(), u); err != nil {
				t.Fatal(err)
			}
		}
		msg, held := a.last()
		if !msg.IsDelta() || msg.SameClusterIPs != accepts || (len(msg.ClusterIPs) == 0) != accepts || !slices.Equal(held.ClusterIPs, s1.ClusterIPs) {
			t.Fatalf("agent accepting it %v: delta %v keeping %v with ClusterIPs %v; the agent holds %v", accepts, msg.IsDelta(), msg.SameClusterIPs, msg.ClusterIPs, held.ClusterIPs)
		}
		stop()
	}
}
