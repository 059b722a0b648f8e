package soak

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vpcgw/vpcgw/internal/netlab"
)

const (
	// A long-lived transfer moves flowBytes at flowRate: about 10 s, so that one started just
	// before a step spans the gateway's replacement.
	flowBytes = 3 << 20
	flowRate  = 300 << 10
	// After a step converged every request/response and UDP flow must get flowAnswers more
	// answers, and every transfer must end, within flowWithin (TCP's retransmission backoff
	// after an outage, plus what is left of a transfer).
	flowAnswers = 10
	flowWithin  = 90 * time.Second
	// flowsUnderWay bounds the wait for the flows to be under way before the step.
	flowsUnderWay = 30 * time.Second
	// flowDeadline bounds each flow's connection.
	flowDeadline = 5 * time.Minute
)

// longFlows are the long-lived flows (SPEC D9) run across one step: every kind (request/response,
// upload, download, UDP session) from the external client to the EIP and from the VPC client to
// the ClusterIP and to the EIP (hairpin), on the demo Service's flows port
// (cluster.DemoFlows). A flow that finished intact before the step was injected is started
// again, so that every kind spans the step; each connection counts.
type longFlows struct {
	flows []*netlab.Flow
	// ended are the flows that ended before the step (finished intact, or broken).
	ended []*netlab.Flow
}

func (s *Soak) startFlows() *longFlows {
	lf := &longFlows{flows: s.C.DemoFlows(s.svc, flowBytes, flowRate, flowDeadline)}
	for _, f := range lf.flows {
		f.Start()
	}
	return lf
}

// again is a new flow with f's settings (the next seed), not started.
func again(f *netlab.Flow) *netlab.Flow {
	return &netlab.Flow{Kind: f.Kind, Client: f.Client, Via: f.Via, Netns: f.Netns, Target: f.Target, Hairpin: f.Hairpin,
		Seed: f.Seed + 1000, Bytes: f.Bytes, Rate: f.Rate, Deadline: f.Deadline}
}

// waitUnderWay waits until every flow has its backend and made some progress; a flow that
// finished intact meanwhile is replaced by a new one of its kind, and a broken one ends the wait
// (it is counted by end).
func (lf *longFlows) waitUnderWay(ctx context.Context) error {
	if len(lf.flows) == 0 {
		return errors.New("no long-lived flow: the demo Service has neither EIP nor ClusterIP")
	}
	deadline := time.Now().Add(flowsUnderWay)
	for {
		all := true
		for i, f := range lf.flows {
			if _, err := f.Result(); err != nil {
				return fmt.Errorf("long-lived flow %s broke before the step: %w", f, err)
			}
			if f.Finished() {
				lf.ended = append(lf.ended, f)
				lf.flows[i] = again(f)
				lf.flows[i].Start()
				all = false
				continue
			}
			all = all && f.UnderWay()
		}
		if all {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("long-lived flows not under way within %s", flowsUnderWay)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond): // polling the flows' counters
		}
	}
}

// finish gives each hairpin download its client's next segment (after conntrack was lost it
// waits for one, SPEC D9), then lets every flow finish: flowAnswers more answers, transfers to
// their end, within flowWithin; a stalled flow is failed.
func (lf *longFlows) finish() {
	for _, f := range lf.flows {
		if f.Kind == netlab.FlowDown && f.Hairpin {
			f.Nudge()
		}
	}
	netlab.FinishFlows(lf.flows, flowAnswers, flowWithin)
}

// end ends every flow still running (as broken: the step did not let it finish) and counts
// them all; with newGateway, a broken flow the new gateway Pod may reset
// (netlab.Flow.ServerSendsToGateway) counts as Gap.
func (lf *longFlows) end(newGateway bool) FlowCount {
	var n FlowCount
	all := append(lf.ended, lf.flows...)
	netlab.EndFlows(all, errors.New("the step ended before the flow finished"))
	for _, f := range all {
		n.Run++
		b, err := f.Result()
		switch {
		case err == nil:
		case newGateway && f.ServerSendsToGateway():
			n.Gap++
		default:
			n.Broken++
			n.LastBroken = fmt.Sprintf("%s on %s: %v", f, b, err)
		}
	}
	return n
}
