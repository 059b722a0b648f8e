// covers: L11, D6
package dataplane

import (
	"testing"
	"time"

	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/netlab"
)

// onlyAnswer returns the one backend that answered every datagram of res, "" when not so.
func onlyAnswer(res netlab.ProbeResult, count int) string {
	if res.Errors != 0 || len(res.Answers) != 1 {
		return ""
	}
	for b, n := range res.Answers {
		if n == count {
			return b
		}
	}
	return ""
}

// A UDP flow (one client source port) keeps its backend while that backend drains (SPEC L11):
// new flows go to the others only, and once the backend leaves Draining its flow is deleted
// (D6), so the next datagram of the same flow reaches a remaining backend. With no backend left
// the draining one still keeps its flow, and loses it when it leaves Draining.
// covers: L11, D6
func TestRealUDPFlowKeepsDrainingBackend(t *testing.T) {
	g := newGWLab(t, 3)
	names := []string{"be1", "be2", "be3"}
	index := func(name string) int {
		for i, n := range names {
			if n == name {
				return i
			}
		}
		t.Fatalf("unknown backend %q", name)
		return -1
	}
	others := func(i int) []int {
		var out []int
		for j := range names {
			if j != i {
				out = append(out, j)
			}
		}
		return out
	}
	dns := ident(eip, 53, gwstate.UDP, g.bes(8080, 0, 1, 2)...)
	a := startAgent(t, g.l, g.gw)
	mustSend(t, a, state(1, dns))
	flow := netlab.ProbeOptions{Target: eip + ":53", Proto: "udp", Source: extIP + ":40053", Count: 5, Timeout: time.Second}
	first := onlyAnswer(g.probe(t, g.ext, flow), 5)
	if first == "" {
		t.Fatal("one UDP flow: want 5 answers from one backend")
	}
	fi := index(first)

	// The flow's backend drains: the flow stays on it, new flows (other source ports) never
	// reach it.
	dns.Backends, dns.Draining = g.bes(8080, others(fi)...), g.bes(8080, fi)
	mustSend(t, a, state(2, dns))
	if res := g.probe(t, g.ext, flow); onlyAnswer(res, 5) != first {
		t.Errorf("while %s drains, its flow: %+v, want 5 answers from %s", first, res, first)
	}
	res := g.probe(t, g.ext, netlab.ProbeOptions{Target: eip + ":53", Proto: "udp", Count: 30, Timeout: time.Second})
	if res.Errors != 0 || res.Answers[first] != 0 || res.Total() != 30 {
		t.Errorf("while %s drains, 30 new flows: %+v, want every one answered, none by %s", first, res, first)
	}

	// It leaves Draining: the very next datagram of its flow reaches a remaining backend.
	dns.Draining = nil
	mustSend(t, a, state(3, dns))
	res = g.probe(t, g.ext, flow)
	if next := onlyAnswer(res, 5); next == "" || next == first {
		t.Errorf("after %s left Draining, its flow: %+v, want 5 answers from one remaining backend", first, res)
	}

	// Everything scaled away while the Pods drain: a flow stays on its backend with no backend
	// left, and goes when its backend leaves Draining (the identity has no backends then: the
	// agent finds the change in what it committed for it all the same).
	dns.Backends = g.bes(8080, 0, 1, 2)
	mustSend(t, a, state(4, dns))
	flow2 := flow
	flow2.Source = extIP + ":40054"
	second := onlyAnswer(g.probe(t, g.ext, flow2), 5)
	if second == "" {
		t.Fatal("a second UDP flow: want 5 answers from one backend")
	}
	dns.Backends, dns.Draining = nil, g.bes(8080, 0, 1, 2)
	mustSend(t, a, state(5, dns))
	if res := g.probe(t, g.ext, flow2); onlyAnswer(res, 5) != second {
		t.Errorf("with every backend draining, the flow: %+v, want 5 answers from %s", res, second)
	}
	dns.Draining = g.bes(8080, others(index(second))...)
	mustSend(t, a, state(6, dns))
	flow2.Count = 2
	if res := g.probe(t, g.ext, flow2); res.Total() != 0 {
		t.Errorf("after %s left Draining with no backend left, its flow: %+v, want no answer", second, res)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("agent at EOF: %v", err)
	}
}
