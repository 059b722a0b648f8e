// covers: D7, L6, L7 (the exec transport: states and acks through pods/exec, reconnect and full
// resync after the stream breaks, order, large states)
package transport

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	utilexec "k8s.io/utils/exec"
	"sigs.k8s.io/knftables"

	"github.com/vpcgw/vpcgw/internal/dataplane"
	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

const (
	testNS  = "gw-ns"
	testPod = "vpc-nat-gw-gw1-0"
)

var testInst = Instance{Gateway: "gw1", Namespace: testNS, Pod: testPod, UID: "uid-1"}

// fakePods runs dataplane.RunAgent on knftables' Fake, one table per pod incarnation: an agent
// started again in the same pod finds the table its predecessor left; a restarted pod starts empty.
type fakePods struct {
	mu     sync.Mutex
	tables map[string]*knftables.Fake
}

func newFakePods() *fakePods { return &fakePods{tables: map[string]*knftables.Fake{}} }

func (p *fakePods) table(pod string) *knftables.Fake {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.tables[pod]
	if f == nil {
		f = knftables.NewFake(knftables.IPv4Family, dataplane.TableName)
		p.tables[pod] = f
	}
	return f
}

// restart gives the pod a new, empty table.
func (p *fakePods) restart(pod string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.tables, pod)
}

func (p *fakePods) run(ctx context.Context, pod string, cmd []string, in io.Reader, out, errw io.Writer) error {
	if !slices.Equal(cmd, DefaultExecCommand) {
		return utilexec.CodeExitError{Err: fmt.Errorf("exec: %q: executable file not found in $PATH", cmd), Code: 127}
	}
	return dataplane.RunAgent(ctx, in, out, p.table(pod), dataplane.NewLogger(errw, 0))
}

// wantDump is the table a fresh agent programs for st.
func wantDump(t *testing.T, st gwstate.State) string {
	t.Helper()
	st.Normalize()
	f := knftables.NewFake(knftables.IPv4Family, dataplane.TableName)
	if err := dataplane.NewAgent(f, logr.Discard()).Apply(context.Background(), st); err != nil {
		t.Fatalf("reference apply of generation %d: %v", st.Generation, err)
	}
	return f.Dump()
}

// testState has n identities starting at port base, each with backends backends.
func testState(gen int64, n, backends int, base int32) gwstate.State {
	st := gwstate.State{Generation: gen}
	for i := range n {
		id := gwstate.Identity{
			VIP:      netip.MustParseAddr(fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)),
			Port:     base + int32(i%1000),
			Protocol: gwstate.TCP,
		}
		if i%2 == 1 {
			id.Protocol = gwstate.UDP
		}
		if i%3 == 0 {
			id.AffinityTimeoutSeconds = 10800
		}
		for b := range backends {
			id.Backends = append(id.Backends, gwstate.Backend{IP: netip.MustParseAddr(fmt.Sprintf("10.244.%d.%d", (i+b)/250%250, (i+b)%250+1)), Port: 8080 + int32(b)})
		}
		st.Identities = append(st.Identities, id)
	}
	st.ClusterIPs = []netip.Addr{netip.MustParseAddr("10.96.255.1")}
	return st
}

// acceptPods takes every Pod for a gateway Pod: the harness's API server serves pods/exec only
// (the owner chain check has its own tests against the real API server, verify_test.go).
type acceptPods struct{}

func (acceptPods) VerifyPod(context.Context, Instance, string) error { return nil }

type execEnv struct {
	pods    *fakePods
	kubelet *testKubelet
	api     *testAPIServer
	logs    *logSink
	exec    *Exec
}

func newExecEnv(t *testing.T, translate bool, opts ...ExecOption) *execEnv {
	t.Helper()
	e := &execEnv{pods: newFakePods(), logs: &logSink{}}
	e.kubelet = newTestKubelet(t, e.pods.run)
	e.api = newTestAPIServer(t, e.kubelet, translate, testNS+"/"+testPod)
	ex, err := NewExec(e.api.restConfig(), e.logs.logger(), append([]ExecOption{WithExecCloseGrace(10 * time.Second), WithExecPodVerifier(acceptPods{})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	e.exec = ex
	return e
}

func (e *execEnv) dial(t *testing.T) *Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel() // the stream must outlive the dial's context
	c, err := e.exec.Dial(ctx, testInst)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func mustApplyConn(t *testing.T, c *Conn, st gwstate.State) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.Apply(ctx, st); err != nil {
		t.Fatalf("apply generation %d: %v", st.Generation, err)
	}
}

func (e *execEnv) wantTable(t *testing.T, st gwstate.State) {
	t.Helper()
	// knftables' Fake lists a set's elements in the order they were added, which differs
	// between a fresh agent and one that got there by changes (the guard's elements, SPEC D9).
	if got, want := testutil.SortElements(e.pods.table(testNS+"/"+testPod).Dump()), testutil.SortElements(wantDump(t, st)); got != want {
		t.Fatalf("gateway table after generation %d:\n%s\nwant:\n%s", st.Generation, got, want)
	}
}

type execMode struct {
	name      string
	proto     ExecProtocol
	translate bool
	requests  []string // what the API server saw for one Dial
}

var execModes = []execMode{
	{"websocket v5 translated by the API server", ExecAuto, true, []string{"GET websocket translated"}},
	{"spdy fallback on an API server without the translator", ExecAuto, false, []string{"GET websocket proxied", "POST spdy proxied"}},
	{"spdy only", ExecSPDY, true, []string{"POST spdy proxied"}},
	{"websocket only", ExecWebSocket, true, []string{"GET websocket translated"}},
}

// covers: D7 (the agent of one instance programmed through the exec stream), D8 (agent errors)
func TestExecStreamsStatesToTheAgent(t *testing.T) {
	for _, m := range execModes {
		t.Run(m.name, func(t *testing.T) {
			e := newExecEnv(t, m.translate, WithExecProtocol(m.proto))
			c := e.dial(t)

			st1 := testState(1, 3, 2, 80)
			mustApplyConn(t, c, st1)
			e.wantTable(t, st1)

			// An invalid identity is refused by name (SPEC D8), the rest of the state applied.
			bad := testState(2, 1, 1, 80)
			bad.Identities[0].VIP = netip.MustParseAddr("fd00::300") // not IPv4
			err := c.Apply(context.Background(), bad)
			var refused *RefusedError
			if !errors.As(err, &refused) || refused.Generation != 2 || len(refused.Refused) != 1 || refused.Refused[0].VIP != netip.MustParseAddr("fd00::300") {
				t.Fatalf("invalid identity: got %v, want a RefusedError naming it for generation 2", err)
			}
			// A malformed state is refused whole.
			dup := testState(2, 1, 1, 80)
			dup.Generation = 3
			dup.Identities = append(dup.Identities, dup.Identities[0])
			err = c.Apply(context.Background(), dup)
			var agentErr *AgentError
			if !errors.As(err, &agentErr) || agentErr.Generation != 3 || !strings.Contains(err.Error(), "invalid state") {
				t.Fatalf("malformed state: got %v, want an AgentError for generation 3", err)
			}
			if c.Broken() {
				t.Fatal("an error reported by the agent broke the stream")
			}
			e.logs.waitFor(t, "agent: ", 5*time.Second)
			e.logs.waitFor(t, "invalid state", 5*time.Second) // the agent's stderr reached the logger

			st3 := testState(4, 5, 3, 443)
			mustApplyConn(t, c, st3)
			e.wantTable(t, st3)

			if got := e.api.requestLog(); !slices.Equal(got, m.requests) {
				t.Errorf("API server requests = %q, want %q", got, m.requests)
			}
			calls := e.kubelet.execCalls()
			want := execCall{Pod: testNS + "/" + testPod, Container: "vpc-nat-gw", Cmd: []string{"vpcgw-agent"}}
			if len(calls) != 1 || calls[0].Pod != want.Pod || calls[0].Container != want.Container || !slices.Equal(calls[0].Cmd, want.Cmd) {
				t.Errorf("kubelet execs = %+v, want one %+v", calls, want)
			}

			// Close: stdin ends, the agent exits cleanly, the stream ends.
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			e.kubelet.waitIdle(t, 10*time.Second)
			if res := e.kubelet.agentResults(); len(res) != 1 || res[0] != nil {
				t.Errorf("agent results = %v, want one clean exit at EOF", res)
			}
			if err := c.Apply(context.Background(), testState(4, 1, 1, 80)); err == nil {
				t.Error("Apply on a closed Conn succeeded")
			}
		})
	}
}

// covers: D7
func TestExecDialErrors(t *testing.T) {
	ctx := context.Background()
	t.Run("pod not found", func(t *testing.T) {
		e := newExecEnv(t, true)
		_, err := e.exec.Dial(ctx, Instance{Gateway: "gw1", Namespace: testNS, Pod: "vpc-nat-gw-gone-0"})
		if err == nil || !strings.Contains(err.Error(), "not found") {
			t.Fatalf("dial to a missing pod: %v, want not found", err)
		}
		if n := len(e.kubelet.execCalls()); n != 0 {
			t.Errorf("%d execs reached the kubelet", n)
		}
	})
	t.Run("wrong container", func(t *testing.T) {
		e := newExecEnv(t, true, WithExecContainer("other"))
		_, err := e.exec.Dial(ctx, testInst)
		if err == nil || !strings.Contains(err.Error(), "is not valid for pod") {
			t.Fatalf("dial into a missing container: %v", err)
		}
	})
	t.Run("websocket only without the translator", func(t *testing.T) {
		e := newExecEnv(t, false, WithExecProtocol(ExecWebSocket))
		if _, err := e.exec.Dial(ctx, testInst); err == nil {
			t.Fatal("a WebSocket v5 exec through an API server that only proxies to the kubelet succeeded")
		}
	})
	t.Run("agent missing from the image", func(t *testing.T) {
		// The exec opens, the command fails at once: the first Apply reports it and breaks the Conn.
		e := newExecEnv(t, true, WithExecCommand("no-such-agent"))
		c, err := e.exec.Dial(ctx, testInst)
		if err != nil {
			// Acceptable too: the stream may already have ended when Dial looks.
			if !strings.Contains(err.Error(), "127") {
				t.Fatalf("dial: %v", err)
			}
			return
		}
		defer func() { _ = c.Close() }()
		err = c.Apply(ctx, testState(1, 1, 1, 80))
		if err == nil || !c.Broken() || !strings.Contains(err.Error(), "127") {
			t.Fatalf("apply to a missing agent: %v (broken %v), want exit code 127 and a broken Conn", err, c.Broken())
		}
	})
	t.Run("bad configuration", func(t *testing.T) {
		if _, err := NewExec(nil, logr.Discard()); err == nil {
			t.Error("NewExec(nil) succeeded")
		}
		cfg := &rest.Config{Host: "https://127.0.0.1:1"}
		if _, err := NewExec(cfg, logr.Discard(), WithExecCommand()); err == nil {
			t.Error("an empty command was accepted")
		}
		if _, err := NewExec(cfg, logr.Discard(), WithExecContainer("")); err == nil {
			t.Error("an empty container was accepted")
		}
		ex, err := NewExec(cfg, logr.Discard())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ex.Dial(ctx, Instance{Gateway: "gw1", Pod: "p"}); err == nil {
			t.Error("an instance without namespace was dialled")
		}
		u := ex.URL(testInst)
		if u.Path != "/api/v1/namespaces/gw-ns/pods/vpc-nat-gw-gw1-0/exec" ||
			!slices.Equal(u.Query()["command"], []string{"vpcgw-agent"}) || u.Query().Get("container") != "vpc-nat-gw" ||
			u.Query().Get("stdin") != "true" || u.Query().Get("stdout") != "true" || u.Query().Get("stderr") != "true" || u.Query().Has("tty") {
			t.Errorf("exec URL = %s", u)
		}
	})
	t.Run("dial timeout", func(t *testing.T) {
		// An API server that accepts the connection and never answers.
		e := newExecEnv(t, true)
		hang := make(chan struct{})
		defer close(hang)
		e.api.hangUntil(hang)
		ex, err := NewExec(e.api.restConfig(), logr.Discard(), WithExecDialTimeout(300*time.Millisecond), WithExecPodVerifier(acceptPods{}))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := ex.Dial(ctx, testInst); err == nil || !strings.Contains(err.Error(), "not open after") {
			t.Fatalf("dial to a hanging API server: %v", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("dial took %s", d)
		}
	})
}

// covers: L6 (instance restarted: the stream breaks, a new one gets the full state), L7
func TestExecReconnectAfterTheStreamBreaks(t *testing.T) {
	cases := []struct {
		name     string
		mode     execMode
		brk      func(e *execEnv)
		freshPod bool   // the pod restarted: the new agent starts on an empty table
		errHas   string // in the failed Apply's error
	}{
		{"container restarted, websocket", execModes[0], func(e *execEnv) {
			e.pods.restart(testNS + "/" + testPod)
			e.kubelet.killAgents()
		}, true, "137"},
		{"container restarted, spdy", execModes[2], func(e *execEnv) {
			e.pods.restart(testNS + "/" + testPod)
			e.kubelet.killAgents()
		}, true, "137"},
		{"kubelet connection lost, websocket", execModes[0], func(e *execEnv) { e.kubelet.dropConnections() }, false, ""},
		{"kubelet connection lost, spdy fallback", execModes[1], func(e *execEnv) { e.kubelet.dropConnections() }, false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newExecEnv(t, tc.mode.translate, WithExecProtocol(tc.mode.proto))
			c := e.dial(t)
			st1 := testState(1, 4, 2, 80)
			mustApplyConn(t, c, st1)
			e.wantTable(t, st1)

			tc.brk(e)
			e.kubelet.waitIdle(t, 10*time.Second)

			st2 := testState(2, 6, 3, 80)
			err := c.Apply(context.Background(), st2)
			var agentErr *AgentError
			if err == nil || errors.As(err, &agentErr) || !c.Broken() {
				t.Fatalf("apply after the stream broke: %v (broken %v), want a transport error and a broken Conn", err, c.Broken())
			}
			if !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("error %q does not mention %q", err, tc.errHas)
			}
			if tc.freshPod {
				if got := e.pods.table(testNS + "/" + testPod).Dump(); strings.Contains(got, "dnat-") {
					t.Fatalf("the restarted pod's table is not empty:\n%s", got)
				}
			}

			// What sessions.go does: redial and send the full state.
			c2 := e.dial(t)
			mustApplyConn(t, c2, st2)
			e.wantTable(t, st2)
			if n := len(e.kubelet.execCalls()); n != 2 {
				t.Errorf("%d execs, want 2 (one per stream)", n)
			}
		})
	}
}

// covers: L7 (states keep their order on one stream)
func TestExecManyStatesInOrder(t *testing.T) {
	for _, m := range execModes[:3] {
		t.Run(m.name, func(t *testing.T) {
			e := newExecEnv(t, m.translate, WithExecProtocol(m.proto))
			c := e.dial(t)
			var last gwstate.State
			for g := int64(1); g <= 200; g++ {
				// Every state differs from the one before; Apply returns only on the ack of
				// its own generation, so an ack out of order would stall it.
				last = testState(g, int(g%7)+1, int(g%3)+1, int32(1000+g))
				mustApplyConn(t, c, last)
			}
			e.wantTable(t, last)
		})
	}
}

// lineAgent acknowledges every state line and remembers its SHA-256, for checking that a line
// arrived byte for byte (knftables' Fake takes minutes for 10,000 identities under -race; the
// real kernel test programs such a state for real).
type lineAgent struct {
	mu     sync.Mutex
	hashes []string
}

func (a *lineAgent) run(_ context.Context, _ string, _ []string, in io.Reader, out, _ io.Writer) error {
	r := bufio.NewReader(in)
	enc := json.NewEncoder(out)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			sum := sha256.Sum256(line)
			a.mu.Lock()
			a.hashes = append(a.hashes, hex.EncodeToString(sum[:]))
			a.mu.Unlock()
			var st gwstate.State
			ack := gwstate.Ack{}
			if jerr := json.Unmarshal(line, &st); jerr != nil {
				ack.Error = jerr.Error()
			} else if verr := st.Validate(); verr != nil {
				ack.Error = verr.Error()
			}
			ack.Generation = st.Generation
			if werr := enc.Encode(ack); werr != nil {
				return werr
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

func (a *lineAgent) received() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.hashes...)
}

// covers: D7 (a large gateway: 10,000 identities, several MB on one line)
func TestExecLargeState(t *testing.T) {
	for _, m := range []execMode{execModes[0], execModes[2]} {
		t.Run(m.name, func(t *testing.T) {
			e := newExecEnv(t, m.translate, WithExecProtocol(m.proto))
			agent := &lineAgent{}
			e.kubelet.setAgent(agent.run)
			c := e.dial(t)
			st := testState(1, 10000, 8, 1)
			line := append(mustJSON(t, st), '\n')
			if len(line) < 3<<20 {
				t.Fatalf("state is only %d bytes", len(line))
			}
			start := time.Now()
			mustApplyConn(t, c, st)
			t.Logf("%.1f MB state line sent and acknowledged in %s", float64(len(line))/(1<<20), time.Since(start))
			st2 := testState(2, 3, 1, 1)
			mustApplyConn(t, c, st2)
			sum1, sum2 := sha256.Sum256(line), sha256.Sum256(append(mustJSON(t, st2), '\n'))
			want := []string{hex.EncodeToString(sum1[:]), hex.EncodeToString(sum2[:])}
			if got := agent.received(); !slices.Equal(got, want) {
				t.Fatalf("the agent received lines with hashes %q, want %q", got, want)
			}
		})
	}
}
