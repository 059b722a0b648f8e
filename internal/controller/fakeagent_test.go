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
	// frozen holds the instances whose agent does not answer (a SIGSTOPped agent): a state sent
	// to one waits until its channel is closed; inFlight counts those waiting.
	frozen   map[types.UID]chan struct{}
	inFlight map[types.UID]int
	// rejectKey makes the agents refuse this identity by name, as the real agent does with one
	// its kernel or its validation refuses (SPEC D8): they keep the version they had of it (or
	// none) and take the rest of the state.
	rejectKey string
}

func newFakeAgents() *fakeAgents {
	return &fakeAgents{states: map[types.UID]gwstate.State{}, dials: map[types.UID]int{}, applies: map[types.UID]int{}, streams: map[types.UID]func(){},
		frozen: map[types.UID]chan struct{}{}, inFlight: map[types.UID]int{}}
}

func (f *fakeAgents) Dial(_ context.Context, inst transport.Instance) (*transport.Conn, error) {
	conn, stop := agenttest.Pipe(func(st gwstate.State) gwstate.Ack {
		f.mu.Lock()
		if wake := f.frozen[inst.UID]; wake != nil {
			f.inFlight[inst.UID]++
			f.mu.Unlock()
			<-wake
			f.mu.Lock()
			f.inFlight[inst.UID]--
		}
		defer f.mu.Unlock()
		if f.failWith != "" {
			return gwstate.Ack{Error: f.failWith}
		}
		var ack gwstate.Ack
		if i := slices.IndexFunc(st.Identities, func(id gwstate.Identity) bool { return f.rejectKey != "" && id.Key().String() == f.rejectKey }); i >= 0 {
			// The refused identity and the rest of its group (its Service) keep what the agent
			// had for them; the rest of the state is taken.
			bad := st.Identities[i]
			prev := map[gwstate.IdentityKey]gwstate.Identity{}
			for _, id := range f.states[inst.UID].Identities {
				prev[id.Key()] = id
			}
			var kept []gwstate.Identity
			for _, id := range st.Identities {
				if id.Group != bad.Group {
					kept = append(kept, id)
					continue
				}
				ack.Refused = append(ack.Refused, gwstate.Refusal{IdentityKey: id.Key(), Reason: "the kernel refused identity " + bad.Key().String() + ": message 7 of 9 (add element): no space left on device"})
				if old, ok := prev[id.Key()]; ok {
					kept = append(kept, old)
				}
			}
			st.Identities = kept
			st.Normalize()
		}
		f.states[inst.UID] = st
		f.applies[inst.UID]++
		return ack
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
		if id.Key().String() == key {
			return true
		}
	}
	return false
}

// freeze makes the instance's agent stop answering, as a SIGSTOPped agent; the returned func
// thaws it.
func (f *fakeAgents) freeze(uid types.UID) (thaw func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	wake := make(chan struct{})
	f.frozen[uid] = wake
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.frozen[uid] == wake {
			delete(f.frozen, uid)
			close(wake)
		}
	}
}

// waiting is how many states sent to the instance wait for its frozen agent.
func (f *fakeAgents) waiting(uid types.UID) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inFlight[uid]
}
