package transport_test

// covers: P1, P3 (what the controller sends for one changed Service)

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/transport/agenttest"
)

// benchState is n identities × 10 backends, and, with clusterIPs, each identity's VIP held as a
// ClusterIP (a gateway with the ClusterIP gate).
func benchState(n int, clusterIPs bool) gwstate.State {
	st := gwstate.State{Identities: make([]gwstate.Identity, n)}
	for i := range n {
		vip := netip.AddrFrom4([4]byte{10, 96, byte(i / 250), byte(i%250 + 1)})
		id := gwstate.Identity{VIP: vip, Port: 80, Protocol: gwstate.TCP}
		for j := range 10 {
			id.Backends = append(id.Backends, gwstate.Backend{IP: netip.AddrFrom4([4]byte{10, 1, byte(j), byte(i%250 + 1)}), Port: 8080})
		}
		st.Identities[i] = id
		if clusterIPs {
			st.ClusterIPs = append(st.ClusterIPs, vip)
		}
	}
	st.Normalize()
	return st
}

// withOneChange is st with identity k's first backend gone (a new Identities slice, as a new
// plan is).
func withOneChange(st gwstate.State, k int) gwstate.State {
	out := st
	out.Identities = append([]gwstate.Identity(nil), st.Identities...)
	out.Identities[k].Backends = out.Identities[k].Backends[1:]
	return out
}

// BenchmarkSendOneChange: an agent (in memory, acknowledging every line) holds n identities;
// one op sends the next state, one identity's backends changed, and waits for the
// acknowledgement. "apply" is Conn.Apply of the whole state (the transport diffs it against
// the one acknowledged, as the controller sent before issue 33); "send" is Conn.Send of the
// planner's update (its delta, made by the planner, without the unchanged ClusterIPs to an agent
// that accepts that, as the agent does). The agent's side decodes each line.
func BenchmarkSendOneChange(b *testing.B) {
	for _, cips := range []bool{false, true} {
		for _, n := range []int{1000, 10000} {
			states := [2]gwstate.State{benchState(n, cips), withOneChange(benchState(n, cips), n/2)}
			// The planner's deltas, made before the clock runs: its work is BenchmarkPartialPlanOneService's.
			deltas := [2]gwstate.State{gwstate.Delta(states[1], states[0]), gwstate.Delta(states[0], states[1])}
			for _, how := range []string{"apply", "send"} {
				b.Run(fmt.Sprintf("%s/clusterIPs=%v/identities=%d", how, cips, n), func(b *testing.B) {
					conn, stop := agenttest.Pipe(func(gwstate.State) gwstate.Ack { return gwstate.Ack{Deltas: true, SameClusterIPs: true} })
					defer stop()
					ctx := context.Background()
					send := func(gen int64) error {
						st := states[gen%2]
						st.Generation = gen
						if how == "apply" {
							return conn.Apply(ctx, st)
						}
						u := gwstate.NewUpdate(uint64(gen), uint64(gen-1), deltas[gen%2], false, st.ClusterIPs, n, 10*n, func() gwstate.State { return st })
						u.Generation, u.SameClusterIPs = gen, true // one endpoint changed: the ClusterIPs did not
						return conn.Send(ctx, u)
					}
					if err := send(1); err != nil {
						b.Fatal(err)
					}
					gen := int64(1)
					b.ReportAllocs()
					for b.Loop() {
						gen++
						if err := send(gen); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}
