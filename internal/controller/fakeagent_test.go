package controller_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/transport"
)

// fakeAgents is a transport.Dialer whose agents keep the last state they accepted, per pod UID,
// and reject states while failWith is set. It stands in for `vpcgw agent` where the test is about
// the controller, not the data plane (the lab's end-to-end tests run the real agent).
type fakeAgents struct {
	mu       sync.Mutex
	states   map[types.UID]gwstate.State
	dials    map[types.UID]int
	applies  map[types.UID]int
	streams  map[types.UID]io.Closer // the agent's end of each instance's current stream
	failWith string
}

func newFakeAgents() *fakeAgents {
	return &fakeAgents{states: map[types.UID]gwstate.State{}, dials: map[types.UID]int{}, applies: map[types.UID]int{}, streams: map[types.UID]io.Closer{}}
}

func (f *fakeAgents) Dial(_ context.Context, inst transport.Instance) (*transport.Conn, error) {
	toAgentR, toAgentW := io.Pipe()
	fromAgentR, fromAgentW := io.Pipe()
	f.mu.Lock()
	f.dials[inst.UID]++
	f.streams[inst.UID] = fromAgentW
	delete(f.states, inst.UID) // a new agent starts empty
	f.mu.Unlock()
	go func() {
		sc := bufio.NewScanner(toAgentR)
		sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
		enc := json.NewEncoder(fromAgentW)
		for sc.Scan() {
			var st gwstate.State
			ack := gwstate.Ack{}
			if err := json.Unmarshal(sc.Bytes(), &st); err != nil {
				ack.Error = err.Error()
			}
			ack.Generation = st.Generation
			f.mu.Lock()
			if f.failWith != "" {
				ack.Error = f.failWith
			} else if ack.Error == "" {
				f.states[inst.UID] = st
				f.applies[inst.UID]++
			}
			f.mu.Unlock()
			if err := enc.Encode(ack); err != nil {
				return
			}
		}
		_ = fromAgentW.Close()
	}()
	return transport.NewConn(toAgentW, fromAgentR, closers{toAgentW, fromAgentR}), nil
}

type closers []io.Closer

func (c closers) Close() error {
	for _, x := range c {
		_ = x.Close()
	}
	return nil
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
	if c := f.streams[uid]; c != nil {
		_ = c.Close()
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
