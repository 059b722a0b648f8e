// Package transport carries desired gateway states from the controller to the agent that runs in
// each gateway instance, and the agent's acknowledgements back. The protocol (gwstate, version
// gwstate.ProtocolVersion) is one JSON gwstate.State per line towards the agent, complete or a
// delta, and one JSON gwstate.Ack per line back, naming the identities the agent refused. How the
// bytes travel is a Dialer: the Kubernetes exec API into kube-ovn's gateway container (Exec, the
// product's way, which also delivers the agent), or a local `ip netns exec` subprocess
// (LocalNetns, for tests of the controller against real agents in network namespaces).
package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/transport/lineio"
)

// Instance is one running instance (pod) of a VpcNatGateway.
type Instance struct {
	Gateway   string
	Namespace string
	Pod       string
	UID       types.UID
	// Workload is the name of kube-ovn's StatefulSet (or Deployment) of the gateway,
	// "<natGwNamePrefix>-<gateway>"; empty means kube-ovn's default prefix. The exec transport
	// starts an agent only in a Pod that workload owns (SPEC N5).
	Workload string
	// WorkloadNamespace is where kube-ovn runs the gateway's workload (its POD_NAMESPACE, or
	// spec.namespace on master). Required by the exec transport: a workload of the same name
	// and labels in any other namespace is anyone's (SPEC N5).
	WorkloadNamespace string
}

func (i Instance) String() string {
	return fmt.Sprintf("%s/%s (gateway %s)", i.Namespace, i.Pod, i.Gateway)
}

// Dialer opens a stream to the agent of one gateway instance.
type Dialer interface {
	Dial(ctx context.Context, inst Instance) (*Conn, error)
}

// Conn is an open stream to one agent. Send and Apply are safe for concurrent use but serialise
// callers: the agent answers states in order.
type Conn struct {
	mu      sync.Mutex
	w       io.Writer
	limits  Limits
	closer  io.Closer
	acks    chan gwstate.Ack
	readErr chan error // receives the reader's terminal error once
	done    chan struct{}
	ended   chan struct{} // closed when the agent's output ends (stream broken or closed)
	onAck   func(gwstate.Ack)
	once    sync.Once
	err     error // terminal error, set when the stream broke
	// acked is what the agent last acknowledged, and deltas whether it accepts deltas against it
	// (it says so in its acks). Then Send and Apply send only what changed.
	acked  ackedState
	deltas bool
	// sameClusterIPs: the agent accepts deltas that keep their base's ClusterIPs (its acks say).
	sameClusterIPs bool
	// version is what the agent said it is (gwstate.Ack.AgentVersion), set by the reader.
	version atomic.Pointer[string]
	// keepalive: the agent answers pings (it said so in an ack); active is when the stream last
	// carried a line either way. Both under mu.
	keepalive bool
	active    time.Time
	pings     int64
}

// Limits bound the lines of the stream (SPEC N6); zero fields take the lineio defaults.
type Limits struct {
	// MaxAckLine bounds one line from the agent (default lineio.MaxAckLine). A longer line is an
	// error that breaks the Conn: the caller redials and sends a complete state.
	MaxAckLine int
	// MaxStateLine bounds one state towards the agent (default lineio.MaxStateLine, the agent's
	// own bound): a larger state is refused before it is sent, with the Conn left usable.
	MaxStateLine int
}

func (l Limits) withDefaults() Limits {
	if l.MaxAckLine <= 0 {
		l.MaxAckLine = lineio.MaxAckLine
	}
	if l.MaxStateLine <= 0 {
		l.MaxStateLine = lineio.MaxStateLine
	}
	return l
}

// NewConn wraps the agent's stdin (w) and stdout (r) with the default Limits. closer ends the
// stream (and its process).
func NewConn(w io.Writer, r io.Reader, closer io.Closer) *Conn {
	return NewConnWithLimits(w, r, closer, Limits{})
}

// NewConnWithLimits is NewConn with explicit line bounds.
func NewConnWithLimits(w io.Writer, r io.Reader, closer io.Closer, limits Limits) *Conn {
	c := &Conn{
		w:       w,
		limits:  limits.withDefaults(),
		closer:  closer,
		acks:    make(chan gwstate.Ack),
		readErr: make(chan error, 1),
		done:    make(chan struct{}),
		ended:   make(chan struct{}),
	}
	go c.read(r)
	return c
}

func (c *Conn) read(r io.Reader) {
	defer close(c.ended)
	lr := lineio.NewReader(r, c.limits.MaxAckLine)
	for {
		line, err := lr.ReadLine()
		if errors.Is(err, lineio.ErrTooLong) {
			c.readErr <- fmt.Errorf("agent sent an acknowledgement line longer than the limit: %w", err)
			return
		}
		if len(line) > 0 {
			var ack gwstate.Ack
			if jerr := json.Unmarshal(line, &ack); jerr != nil {
				c.readErr <- fmt.Errorf("agent sent a line that is not an acknowledgement: %q: %w", truncate(line), jerr)
				return
			}
			if ack.AgentVersion != "" {
				v := ack.AgentVersion
				c.version.Store(&v)
			}
			select {
			case c.acks <- ack:
			case <-c.done:
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("agent closed its output")
			}
			c.readErr <- fmt.Errorf("reading acknowledgements: %w", err)
			return
		}
	}
}

// ackedState is the state an agent acknowledged last: its wire generation, and the planner's
// version of it (gwstate.Update.Version) or, for a state sent by Apply, the state itself.
type ackedState struct {
	generation int64
	version    uint64
	state      *gwstate.State
}

// Apply sends one complete, normalized state and waits for the acknowledgement of its
// generation: Send of gwstate.Complete(st). To an agent that accepts deltas it sends only the
// difference from the state it acknowledged last, diffed whole (O(n)); st must not be modified
// afterwards (it is kept as that reference). The controller's planner knows what changed and
// uses Send.
func (c *Conn) Apply(ctx context.Context, st gwstate.State) error {
	return c.Send(ctx, gwstate.Complete(st))
}

// Send sends one state of a gateway and waits for the acknowledgement of its generation
// (u.Generation). To an agent that accepts deltas and acknowledged the state u's delta is based
// on (u.Base), it sends the delta, built in O(changed) by the planner; to any other (a new
// stream, a failed or refused message, another base) the whole state, built then. An agent that
// programmed the state without some identities answers with their names: Send then returns a
// *RefusedError, and the state is applied otherwise. A transport failure breaks the Conn for
// good (the caller redials and resends the whole state); an error the agent reports in its Ack
// is returned as *AgentError and leaves the Conn usable.
func (c *Conn) Send(ctx context.Context, u gwstate.Update) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	gen := u.Generation
	msg, whole := c.message(u)
	line, err := c.encode(gen, msg)
	if err != nil {
		return err
	}
	// Until this state is acknowledged, the agent's state is unknown: a failure sends the next
	// one whole.
	c.acked = ackedState{}
	c.active = time.Now()
	if _, err := c.w.Write(append(line, '\n')); err != nil {
		return c.fail(fmt.Errorf("sending state generation %d: %w", gen, err))
	}
	return c.awaitAck(ctx, ackedState{generation: gen, version: u.Version, state: whole})
}

// message is what Send sends for u: the delta against the state the agent acknowledged last
// when it takes one and u (or, from Apply, a diff) has it, else the whole state. whole is the
// complete state kept as the reference of Apply's next diff (nil for the planner's states).
func (c *Conn) message(u gwstate.Update) (msg gwstate.State, whole *gwstate.State) {
	gen := u.Generation
	switch acked := c.acked; {
	case !c.deltas || acked.generation == 0 || u.Release: // a release is always complete
		msg = u.Whole()
	case u.HasDelta() && acked.version == u.Base:
		msg = u.Delta
		msg.Generation, msg.Base = gen, acked.generation
		if u.SameClusterIPs && c.sameClusterIPs {
			msg.ClusterIPs, msg.SameClusterIPs = nil, true
		}
	case u.Version == 0 && acked.state != nil:
		st := u.Whole()
		whole = &st
		msg = gwstate.Delta(*acked.state, st)
		msg.Generation, msg.Base = gen, acked.generation
	default:
		msg = u.Whole()
	}
	if u.Version == 0 && whole == nil {
		st := msg // complete: Apply's state itself
		whole = &st
	}
	return msg, whole
}

// encode is msg's line (without its newline), refused when longer than the agent reads.
func (c *Conn) encode(gen int64, msg gwstate.State) ([]byte, error) {
	line, err := json.Marshal(msg)
	if err != nil {
		return nil, fmt.Errorf("encoding state generation %d: %w", gen, err)
	}
	if len(line)+1 > c.limits.MaxStateLine {
		// The agent would refuse the line and end the stream; nothing is sent, the agent keeps
		// the state it has.
		return nil, fmt.Errorf("state generation %d encodes to %d bytes, more than the agent's limit of %d: %w",
			gen, len(line)+1, c.limits.MaxStateLine, lineio.ErrTooLong)
	}
	return line, nil
}

// awaitAck waits for the acknowledgement of the state sent, which becomes c.acked once the
// agent programmed it.
func (c *Conn) awaitAck(ctx context.Context, sent ackedState) error {
	gen := sent.generation
	for {
		select {
		case ack := <-c.acks:
			if c.onAck != nil {
				c.onAck(ack)
			}
			if ack.Generation != gen && ack.Error == "" {
				// An ack of an older state that outlived its caller's context; skip it.
				continue
			}
			return c.acknowledged(ack, sent)
		case err := <-c.readErr:
			return c.fail(err)
		case <-ctx.Done():
			// The agent may still answer; the stream's order is unknown now, so start over.
			return c.fail(fmt.Errorf("waiting for acknowledgement of generation %d: %w", gen, ctx.Err()))
		}
	}
}

// acknowledged takes the agent's answer to the state sent.
func (c *Conn) acknowledged(ack gwstate.Ack, sent ackedState) error {
	gen := sent.generation
	c.active, c.keepalive = time.Now(), ack.Keepalive
	if ack.Error != "" {
		return &AgentError{Generation: gen, Message: ack.Error}
	}
	// A state with refused identities is the agent's desired state all the same (the next delta
	// is against it); the agent keeps trying the refused ones.
	c.acked, c.deltas, c.sameClusterIPs = sent, ack.Deltas, ack.SameClusterIPs
	if len(ack.Refused) > 0 {
		return &RefusedError{Generation: gen, Refused: ack.Refused}
	}
	return nil
}

// StartKeepalive keeps an idle stream alive and watched: once the agent said it answers pings,
// a stream that carried nothing for interval gets a ping, and one whose agent does not answer
// within timeout is broken (Ended closes, the caller redials). Idle timeouts on the way (the
// kubelet's streaming idle timeout, proxies) then never cut a live stream, which would cost a
// new agent and a complete state, and a dead one is noticed within interval + timeout instead of
// at the next state. Call it once; it ends with the Conn.
func (c *Conn) StartKeepalive(interval, timeout time.Duration) {
	if interval <= 0 {
		return
	}
	if timeout <= 0 {
		timeout = interval
	}
	go func() {
		t := time.NewTicker(interval / 2)
		defer t.Stop()
		for {
			select {
			case <-c.done:
				return
			case <-t.C:
			}
			if !c.ping(interval, timeout) {
				return
			}
		}
	}()
}

// ping sends one keepalive if the stream was idle for interval; false once the Conn is broken.
func (c *Conn) ping(interval, timeout time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.err != nil:
		return false
	case !c.keepalive || time.Since(c.active) < interval:
		return true
	}
	c.pings++
	seq := c.pings
	line, _ := json.Marshal(gwstate.State{Ping: seq}) // plain data: cannot fail
	if _, err := c.w.Write(append(line, '\n')); err != nil {
		_ = c.fail(fmt.Errorf("sending keepalive %d: %w", seq, err))
		return false
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case ack := <-c.acks:
			if ack.Pong != seq {
				continue // a late answer to an earlier state or ping
			}
			c.active = time.Now()
			return true
		case err := <-c.readErr:
			_ = c.fail(err)
			return false
		case <-timer.C:
			_ = c.fail(fmt.Errorf("the agent answered no keepalive within %s: the stream is dead", timeout))
			return false
		case <-c.done:
			return false
		}
	}
}

// AgentVersion is the version the agent reported in its first acknowledgement, or "" before
// that acknowledgement arrived or from an agent too old to report one.
func (c *Conn) AgentVersion() string {
	if v := c.version.Load(); v != nil {
		return *v
	}
	return ""
}

// OnAck sets a function that sees every acknowledgement (metrics); call it before the first Apply.
func (c *Conn) OnAck(f func(gwstate.Ack)) { c.onAck = f }

// Ended is closed when the agent's output ends: the agent exited, the stream broke, or the Conn
// was closed. The controller uses it to resync an instance whose agent went away while idle.
func (c *Conn) Ended() <-chan struct{} { return c.ended }

// Err is why the stream failed (nil while it works).
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Broken reports whether the stream failed and must be redialled.
func (c *Conn) Broken() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err != nil
}

func (c *Conn) fail(err error) error {
	c.err = err
	_ = c.shutdown() // the stream is already broken by err; closing it can only add noise
	return err
}

// Close ends the stream.
func (c *Conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = errors.New("connection closed")
	}
	return c.shutdown()
}

func (c *Conn) shutdown() error {
	var err error
	c.once.Do(func() {
		close(c.done)
		err = c.closer.Close()
	})
	return err
}

// AgentError is an error the agent reported for a state it could not apply.
type AgentError struct {
	Generation int64
	Message    string
}

func (e *AgentError) Error() string {
	return fmt.Sprintf("agent rejected generation %d: %s", e.Generation, e.Message)
}

// RefusedError says that the agent programmed a state except the identities it names (its
// validation or its kernel refused them, SPEC D8): for those it keeps what it had. It is not a
// failure of the state as a whole.
type RefusedError struct {
	Generation int64
	Refused    []gwstate.Refusal
}

func (e *RefusedError) Error() string {
	if len(e.Refused) == 1 {
		return fmt.Sprintf("agent programmed generation %d without identity %s: %s", e.Generation, e.Refused[0].IdentityKey, e.Refused[0].Reason)
	}
	return fmt.Sprintf("agent programmed generation %d without %d identities, the first %s: %s", e.Generation, len(e.Refused), e.Refused[0].IdentityKey, e.Refused[0].Reason)
}

func truncate(b []byte) []byte {
	if len(b) > 200 {
		return b[:200]
	}
	return b
}
