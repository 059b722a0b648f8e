package transport

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// fakeAgent answers each state on the stream with answer(state); nil answer closes the stream.
func fakeAgent(t *testing.T, answer func(gwstate.State) *gwstate.Ack) *Conn {
	t.Helper()
	toAgentR, toAgentW := io.Pipe()
	fromAgentR, fromAgentW := io.Pipe()
	go func() {
		sc := bufio.NewScanner(toAgentR)
		enc := json.NewEncoder(fromAgentW)
		for sc.Scan() {
			var st gwstate.State
			if err := json.Unmarshal(sc.Bytes(), &st); err != nil {
				_ = fromAgentW.CloseWithError(err)
				return
			}
			ack := answer(st)
			if ack == nil {
				_ = fromAgentW.Close()
				return
			}
			_ = enc.Encode(ack)
		}
		_ = fromAgentW.Close()
	}()
	c := NewConn(toAgentW, fromAgentR, closerFunc(func() error { _ = toAgentW.Close(); return fromAgentR.Close() }))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// covers: D8, T1 (programming is acknowledged before anything is published)
func TestConnApplyWaitsForItsAck(t *testing.T) {
	c := fakeAgent(t, func(st gwstate.State) *gwstate.Ack {
		if st.Generation == 2 {
			return &gwstate.Ack{Generation: 2, Error: "nft: Could not process rule"}
		}
		return &gwstate.Ack{Generation: st.Generation}
	})
	ctx := context.Background()
	if err := c.Apply(ctx, gwstate.State{Generation: 1}); err != nil {
		t.Fatalf("generation 1: %v", err)
	}
	err := c.Apply(ctx, gwstate.State{Generation: 2})
	var agentErr *AgentError
	if !errors.As(err, &agentErr) || !strings.Contains(err.Error(), "Could not process rule") {
		t.Fatalf("generation 2: %v, want the agent's error", err)
	}
	if c.Broken() {
		t.Fatal("an error reported by the agent must not break the stream")
	}
	if err := c.Apply(ctx, gwstate.State{Generation: 3}); err != nil {
		t.Fatalf("generation 3 after a rejected one: %v", err)
	}
}

// covers: D8
func TestConnSkipsStaleAcks(t *testing.T) {
	c := fakeAgent(t, func(st gwstate.State) *gwstate.Ack { return &gwstate.Ack{Generation: st.Generation - 1} })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := c.Apply(ctx, gwstate.State{Generation: 5}); err == nil {
		t.Fatal("an ack of generation 4 was taken for generation 5")
	}
	if !c.Broken() {
		t.Fatal("a timed-out stream must be redialled")
	}
}

// covers: D8, L6
func TestConnBreaksWhenAgentDies(t *testing.T) {
	c := fakeAgent(t, func(gwstate.State) *gwstate.Ack { return nil })
	err := c.Apply(context.Background(), gwstate.State{Generation: 1})
	if err == nil || !strings.Contains(err.Error(), "agent closed its output") {
		t.Fatalf("Apply = %v, want the stream's end reported", err)
	}
	if !c.Broken() {
		t.Fatal("stream not marked broken")
	}
	if err := c.Apply(context.Background(), gwstate.State{Generation: 2}); err == nil {
		t.Fatal("a broken stream accepted another state")
	}
}

// covers: D8
func TestConnRejectsGarbageFromAgent(t *testing.T) {
	toAgentR, toAgentW := io.Pipe()
	go func() { _, _ = io.Copy(io.Discard, toAgentR) }()
	c := NewConn(toAgentW, strings.NewReader("Warning: something printed on stdout\n"), io.NopCloser(nil))
	err := c.Apply(context.Background(), gwstate.State{Generation: 1})
	if err == nil || !strings.Contains(err.Error(), "not an acknowledgement") {
		t.Fatalf("Apply = %v, want the garbage line reported", err)
	}
}

// covers: D7
func TestLocalNetnsNeedsNamespace(t *testing.T) {
	d := &LocalNetns{AgentCommand: []string{"/bin/true"}, Netns: func(context.Context, Instance) (string, error) { return "", nil }}
	_, err := d.Dial(context.Background(), Instance{Gateway: "gw1", Namespace: "kube-system", Pod: "vpc-nat-gw-gw1-0"})
	if err == nil || !strings.Contains(err.Error(), NetnsAnnotation) {
		t.Fatalf("Dial = %v, want an error naming %s", err, NetnsAnnotation)
	}
}

// covers: O5 (the controller learns the agent's build from its first acknowledgement)
func TestConnAgentVersion(t *testing.T) {
	c := fakeAgent(t, func(st gwstate.State) *gwstate.Ack {
		ack := &gwstate.Ack{Generation: st.Generation}
		if st.Generation == 1 {
			ack.AgentVersion = "v1.2.3"
		}
		return ack
	})
	if v := c.AgentVersion(); v != "" {
		t.Errorf("before any ack: AgentVersion %q, want empty", v)
	}
	ctx := context.Background()
	for gen := int64(1); gen <= 2; gen++ {
		if err := c.Apply(ctx, gwstate.State{Generation: gen}); err != nil {
			t.Fatal(err)
		}
		if v := c.AgentVersion(); v != "v1.2.3" {
			t.Errorf("after generation %d: AgentVersion %q, want v1.2.3", gen, v)
		}
	}

	// An agent from before the field: no version, and nothing else changes.
	old := fakeAgent(t, func(st gwstate.State) *gwstate.Ack { return &gwstate.Ack{Generation: st.Generation} })
	if err := old.Apply(ctx, gwstate.State{Generation: 1}); err != nil {
		t.Fatal(err)
	}
	if v := old.AgentVersion(); v != "" {
		t.Errorf("agent without a version: AgentVersion %q, want empty", v)
	}
}
