// covers: K5, L6 (keepalives on the agent stream)
package transport

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/knftables"

	"github.com/vpcgw/vpcgw/internal/dataplane"
	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// recorder passes writes on and keeps a copy, counting the keepalives among them.
type recorder struct {
	w     io.Writer
	mu    sync.Mutex
	buf   bytes.Buffer
	pings atomic.Int64
}

func (r *recorder) Write(p []byte) (int, error) {
	r.pings.Add(int64(bytes.Count(p, []byte(`"ping"`))))
	r.mu.Lock()
	r.buf.Write(p)
	r.mu.Unlock()
	return r.w.Write(p)
}

func (r *recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.String()
}

// gate blocks writes while closed, as an agent that hangs (the stream stays open, nothing comes).
type gate struct {
	w    io.Writer
	mu   sync.Mutex
	shut bool
	cond *sync.Cond
}

func newGate(w io.Writer) *gate {
	g := &gate{w: w}
	g.cond = sync.NewCond(&g.mu)
	return g
}

func (g *gate) Write(p []byte) (int, error) {
	g.mu.Lock()
	for g.shut {
		g.cond.Wait()
	}
	g.mu.Unlock()
	return g.w.Write(p)
}

func (g *gate) close() { g.mu.Lock(); g.shut = true; g.mu.Unlock() }
func (g *gate) open()  { g.mu.Lock(); g.shut = false; g.cond.Broadcast(); g.mu.Unlock() }

// covers: K5, L6
// The real agent (on knftables' fake) answers keepalives: an idle stream is pinged and stays up,
// and its state stays the base of the next delta (no complete resync); an agent that stops
// answering breaks the stream within the keepalive's time, so the controller redials at once
// instead of at its next state; an agent that never said it answers pings gets none.
func TestKeepalive(t *testing.T) {
	toAgentR, toAgentW := io.Pipe()
	fromAgentR, fromAgentW := io.Pipe()
	pings := &recorder{w: toAgentW}
	hang := newGate(fromAgentW)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nft := knftables.NewFake(knftables.IPv4Family, dataplane.TableName)
	go func() {
		_ = dataplane.RunAgent(ctx, toAgentR, hang, nft, dataplane.NewLogger(io.Discard, 0))
		_ = fromAgentW.Close()
	}()
	c := NewConn(pings, fromAgentR, closerFunc(func() error { _ = toAgentW.Close(); return fromAgentR.Close() }))
	defer func() { _ = c.Close() }()
	c.StartKeepalive(40*time.Millisecond, 500*time.Millisecond)

	st := gwstate.State{Generation: 1, Identities: []gwstate.Identity{{VIP: netip.MustParseAddr("172.31.0.10"), Port: 80, Protocol: gwstate.TCP, Backends: []gwstate.Backend{{IP: netip.MustParseAddr("10.0.1.5"), Port: 8080}}}}}
	if err := c.Apply(ctx, st); err != nil {
		t.Fatal(err)
	}
	poll := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
	poll("three keepalives on the idle stream", func() bool { return pings.pings.Load() >= 3 })
	if c.Broken() {
		t.Fatal("a pinged, answering stream broke")
	}
	// The next state is still a delta against the first: nothing was resent in full.
	st2 := st
	st2.Generation = 2
	st2.Identities = append([]gwstate.Identity{}, st.Identities...)
	st2.Identities[0].Backends = []gwstate.Backend{{IP: netip.MustParseAddr("10.0.1.6"), Port: 8080}}
	if err := c.Apply(ctx, st2); err != nil {
		t.Fatal(err)
	}
	if line := lastStateLine(pings.String()); !strings.Contains(line, `"base":1`) {
		t.Fatalf("the state after keepalives was not a delta: %s", line)
	}

	// The agent hangs: its answers stop, the stream stays open.
	hang.close()
	defer hang.open()
	poll("the dead stream noticed", c.Broken)
	select {
	case <-c.Ended():
	case <-time.After(10 * time.Second):
		t.Fatal("Ended not closed after the keepalive failed")
	}

	// An agent that never said it answers pings (an older build) gets none.
	var lines atomic.Int64
	old := fakeAgent(t, func(st gwstate.State) *gwstate.Ack {
		lines.Add(1)
		return &gwstate.Ack{Generation: st.Generation}
	})
	old.StartKeepalive(20*time.Millisecond, 100*time.Millisecond)
	if err := old.Apply(ctx, gwstate.State{Generation: 1}); err != nil {
		t.Fatal(err)
	}
	// Ten keepalive intervals: a ping would be a second line (and an empty state to that agent).
	timer := time.NewTimer(200 * time.Millisecond)
	<-timer.C
	if n := lines.Load(); n != 1 || old.Broken() {
		t.Fatalf("an agent without keepalives got %d lines (broken %v), want its one state", n, old.Broken())
	}
}

func lastStateLine(s string) string {
	var last string
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if l := sc.Text(); !strings.Contains(l, `"ping"`) {
			last = l
		}
	}
	return last
}
