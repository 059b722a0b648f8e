// covers: N6 (both ends of the agent stream are bounded; agent error texts are made safe for Events)
package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/transport/lineio"
)

// hugeAck is an agent that answers any state with an acknowledgement line that never ends.
type hugeAck struct {
	started chan struct{}
	read    int64
}

func (h *hugeAck) Read(p []byte) (int, error) {
	<-h.started
	for i := range p {
		p[i] = ' ' // valid JSON whitespace: only the bound stops it
	}
	h.read += int64(len(p))
	return len(p), nil
}

// covers: N6
func TestConnBreaksOnAnOversizedAck(t *testing.T) {
	agent := &hugeAck{started: make(chan struct{})}
	toAgentR, toAgentW := io.Pipe()
	go func() {
		buf := make([]byte, 4096)
		if _, err := toAgentR.Read(buf); err == nil {
			close(agent.started) // the agent answers once it got a state
		}
		_, _ = io.Copy(io.Discard, toAgentR)
	}()
	closed := make(chan struct{})
	c := NewConnWithLimits(toAgentW, agent, closerFunc(func() error { close(closed); return toAgentW.Close() }), Limits{MaxAckLine: 1 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := c.Apply(ctx, gwstate.State{Generation: 1})
	if !errors.Is(err, lineio.ErrTooLong) {
		t.Fatalf("Apply with an endless ack line: %v, want an error wrapping lineio.ErrTooLong", err)
	}
	if !c.Broken() {
		t.Fatal("the Conn is not broken after an oversized ack: the controller would not redial")
	}
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("the stream was not closed after an oversized ack")
	}
	if agent.read > 2<<20 {
		t.Fatalf("read %d bytes of one ack line with a bound of 1 MiB", agent.read)
	}
	t.Logf("error: %v", err)
}

// covers: N6
func TestConnRefusesToSendAnOversizedState(t *testing.T) {
	var got []gwstate.State
	c := fakeAgent(t, func(st gwstate.State) *gwstate.Ack {
		got = append(got, st)
		return &gwstate.Ack{Generation: st.Generation}
	})
	c.limits.MaxStateLine = 10 << 10
	ctx := context.Background()
	big := testState(1, 200, 10, 1000) // ~130 KiB
	err := c.Apply(ctx, big)
	if !errors.Is(err, lineio.ErrTooLong) || !strings.Contains(err.Error(), "generation 1") {
		t.Fatalf("Apply of a state over the agent's limit: %v, want a clear error wrapping lineio.ErrTooLong", err)
	}
	if c.Broken() {
		t.Fatal("refusing an oversized state broke the Conn")
	}
	if err := c.Apply(ctx, testState(2, 2, 1, 1000)); err != nil {
		t.Fatalf("a state under the limit after the refused one: %v", err)
	}
	if len(got) != 1 || got[0].Generation != 2 {
		t.Fatalf("the agent received %d states (%v), want only generation 2", len(got), got)
	}
}

// covers: N6 (the default state bound holds SPEC's largest gateway with room to spare)
func TestMaxStateLineHoldsTheLargestState(t *testing.T) {
	st := testState(1, 10000, 10, 1000)
	st.Normalize()
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("10,000 identities x 10 backends: %d bytes (%.1f MiB); bound %d MiB", len(b), float64(len(b))/(1<<20), lineio.MaxStateLine>>20)
	if len(b)*4 > lineio.MaxStateLine {
		t.Fatalf("the largest state is %d bytes: less than 4x headroom under lineio.MaxStateLine (%d)", len(b), lineio.MaxStateLine)
	}
	if lineio.MaxAckLine < 64<<10 {
		t.Fatalf("lineio.MaxAckLine %d is too small for an ack with an error text", lineio.MaxAckLine)
	}
}

// covers: N6, N8
func TestEventText(t *testing.T) {
	const prefix = "the gateway agent rejected the state: "
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"agent error without its generation", &AgentError{Generation: 7, Message: "nft: Could not process rule"}, prefix + "nft: Could not process rule"},
		{"wrapped agent error", fmt.Errorf("instance x: %w", &AgentError{Message: "boom"}), prefix + "boom"},
		{"newlines, tabs and runs of spaces", &AgentError{Message: "line one\n\tline two  \r\n"}, prefix + "line one line two"},
		{"control and bidi characters dropped", &AgentError{Message: "a\x1b[31mred\x00\u202eevil\x7f"}, prefix + "a[31mredevil"},
		{"invalid UTF-8 dropped", &AgentError{Message: "ok\xff\xfe!"}, prefix + "ok!"},
		// The state is every tenant's: no address of it reaches a Service's events (SPEC N8).
		{"addresses redacted", &AgentError{Message: "identity 10.96.0.5:80:tcp appears twice; backend 10.0.1.9:8080, range 192.0.2.0/24"},
			prefix + "identity <address>:tcp appears twice; backend <address>, range <address>"},
		// A transport error names pods and exec details of the gateway namespace (SPEC N8).
		{"transport error", errors.New("exec into kube-system/vpc-nat-gw-gw1-0 container vpc-nat-gw: forbidden"), "the gateway agent cannot be reached (the controller's log has the details)"},
	} {
		if got := EventText(tc.err); got != tc.want {
			t.Errorf("%s: EventText = %q, want %q", tc.name, got, tc.want)
		}
	}
	for _, err := range []error{&AgentError{Message: "identity 10.96.0.5:80:tcp appears twice"}, errors.New("exec into kube-system/vpc-nat-gw-gw1-0: forbidden")} {
		if got := StatusText(err); strings.ContainsAny(got, "0123456789") || !strings.HasSuffix(got, "(the controller's log has the details)") {
			t.Errorf("StatusText(%v) = %q: want fixed text only", err, got)
		}
	}
	long := EventText(&AgentError{Message: strings.Repeat("é", 1000)}) // 2 bytes each
	if len(long) > MaxEventText || !strings.HasSuffix(long, "…") || !utf8.ValidString(long) {
		t.Fatalf("a 2000-byte text: %d bytes, valid UTF-8 %v, ends %q; want at most %d, valid, ending in an ellipsis",
			len(long), utf8.ValidString(long), long[len(long)-6:], MaxEventText)
	}
	if len(long) < MaxEventText-4 {
		t.Fatalf("a 2000-byte text cut to %d bytes, want close to %d", len(long), MaxEventText)
	}
	exact := prefix + strings.Repeat("a", MaxEventText-len(prefix))
	if got := EventText(&AgentError{Message: exact[len(prefix):]}); got != exact {
		t.Fatalf("a text of exactly %d bytes was changed to %d bytes", MaxEventText, len(got))
	}
}
