package controller_test

import (
	"context"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/transport"
	"github.com/vpcgw/vpcgw/internal/transport/agenttest"
)

// covers: D7, D8 (test double: in-memory agents for controller scenarios)

// fakeAgents is a transport.Dialer whose agents keep the last state they accepted, per pod UID,
// and reject states while failWith is set. It stands in for `vpcgw agent` where the test is about
// the controller, not the data plane (the lab's end-to-end tests run the real agent).
type fakeAgents struct {
	mu       sync.Mutex
	states   map[types.UID]gwstate.State
	dials    map[types.UID]int
	applies  map[types.UID]int
	streams  map[types.UID]func() // ends each instance's current agent
	failWith string
	// rejectKey makes the agents refuse any state that has this identity, as a kernel refuses a
	// transaction one rule of which it cannot take.
	rejectKey string
}

func newFakeAgents() *fakeAgents {
	return &fakeAgents{states: map[types.UID]gwstate.State{}, dials: map[types.UID]int{}, applies: map[types.UID]int{}, streams: map[types.UID]func(){}}
}

func (f *fakeAgents) Dial(_ context.Context, inst transport.Instance) (*transport.Conn, error) {
	conn, stop := agenttest.Pipe(func(st gwstate.State) gwstate.Ack {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.failWith != "" {
			return gwstate.Ack{Error: f.failWith}
		}
		if f.rejectKey != "" && slices.ContainsFunc(st.Identities, func(id gwstate.Identity) bool { return id.Key() == f.rejectKey }) {
			return gwstate.Ack{Error: "applying the ruleset: netlink receive: no space left on device"}
		}
		f.states[inst.UID] = st
		f.applies[inst.UID]++
		return gwstate.Ack{}
	})
	f.mu.Lock()
	f.dials[inst.UID]++
	f.streams[inst.UID] = stop
	delete(f.states, inst.UID) // a new agent starts empty
	f.mu.Unlock()
	return conn, nil
}

func (f *fakeAgents) state(uid types.UID) (gwstate.State, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.states[uid]
	return st, ok
}

// kill ends the instance's agent, as a container restart does.
func (f *fakeAgents) kill(uid types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if stop := f.streams[uid]; stop != nil {
		stop()
	}
	delete(f.states, uid)
}

func (f *fakeAgents) dialsOf(uid types.UID) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dials[uid]
}

func (f *fakeAgents) appliesOf(uid types.UID) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applies[uid]
}

func (f *fakeAgents) reject(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rejectKey = key
}

func (f *fakeAgents) fail(msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failWith = msg
}

// serves reports whether the instance's last state has the identity vip:port:proto.
func (f *fakeAgents) serves(uid types.UID, key string) bool {
	st, _ := f.state(uid)
	for _, id := range st.Identities {
		if id.Key() == key {
			return true
		}
	}
	return false
}
