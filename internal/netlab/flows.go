package netlab

// The flow protocol: long-lived connections (TCP) and sessions (UDP) that must outlive a
// gateway's conntrack (SPEC D9), with servers that name their backend in every answer, so that a
// flow that moved to another backend is seen as such, and clients that detect every way a flow
// breaks: a reset, wrong bytes (sha256), an answer from another backend, a stall.
//
// A TCP connection's first line chooses its mode:
//
//	rr                          "<backend> ok <peer>", then per line "<n>": "<backend> <n>"
//	up <bytes>                  "<backend> ok <peer>", then reads <bytes> and answers "<backend> <sha256>"
//	down <bytes> <rate> <seed>  "<backend> ok <peer>", then sends <bytes> of FlowBytes(seed) at <rate> B/s
//	who                         "<backend> ok <peer>"
//
// Every mode then reads (and ignores) whatever else the client sends until it closes: a socket
// closed with unread data sends a reset instead of a FIN. UDP: every datagram "<n>" is answered
// "<backend> <n> <peer>".

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The kinds of flows.
const (
	FlowRR   = "rr"   // request/response on one TCP connection
	FlowUp   = "up"   // an upload, checked by the server's sha256
	FlowDown = "down" // a download (server push), checked by sha256
	FlowUDP  = "udp"  // a UDP session
)

// FlowKinds are every kind of flow, in the order tests start them.
var FlowKinds = []string{FlowRR, FlowUp, FlowDown, FlowUDP}

const (
	// FlowTick is the pacing of transfers: a chunk every FlowTick.
	FlowTick = 20 * time.Millisecond
	// FlowExchangeInterval is how often a request/response flow asks and a UDP flow sends.
	FlowExchangeInterval = 50 * time.Millisecond
	// DefaultFlowBytes is a transfer's size unless the flow sets its own.
	DefaultFlowBytes = 4 << 20
	// DefaultFlowRate is a transfer's rate (bytes per second) unless the flow sets its own:
	// DefaultFlowBytes in about 6.5 s.
	DefaultFlowRate = 640 << 10
	// DefaultFlowDeadline bounds a flow's connection unless the flow sets its own: a test ends a
	// stalled flow well before.
	DefaultFlowDeadline = time.Minute
	// flowServerDeadline bounds a served connection.
	flowServerDeadline = 5 * time.Minute
)

// ---- servers ----

// FlowServer serves the flow protocol on TCP listeners and UDP sockets under one backend name.
type FlowServer struct {
	name   string
	mu     sync.Mutex
	open   map[io.Closer]bool
	closed bool
	wg     sync.WaitGroup
}

// NewFlowServer returns a server that answers as backend name.
func NewFlowServer(name string) *FlowServer {
	return &FlowServer{name: name, open: map[io.Closer]bool{}}
}

// Serve serves ln (TCP, may be nil) and pc (UDP, may be nil) until Close.
func (s *FlowServer) Serve(ln net.Listener, pc net.PacketConn) {
	if ln != nil && s.track(ln) {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				if !s.track(c) {
					return
				}
				s.wg.Add(1)
				go func() {
					defer s.wg.Done()
					defer s.untrack(c)
					ServeFlowConn(c, s.name)
				}()
			}
		}()
	}
	if pc != nil && s.track(pc) {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			ServeFlowPackets(pc, s.name)
		}()
	}
}

// Close closes the listeners and every connection being served, and waits for their
// goroutines.
func (s *FlowServer) Close() {
	s.mu.Lock()
	s.closed = true
	for c := range s.open {
		_ = c.Close() // the server's own sockets, at its end
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// track registers c to be closed by Close; false (and c closed) when that already came.
func (s *FlowServer) track(c io.Closer) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = c.Close() // too late to serve: the server is closed
		return false
	}
	s.open[c] = true
	return true
}

func (s *FlowServer) untrack(c io.Closer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.open, c)
}

// ServeFlowConn serves one TCP connection of the flow protocol as backend name, until the
// client closes it.
func ServeFlowConn(c net.Conn, name string) {
	defer func() { _ = c.Close() }() // the client checked what it got before it closed
	_ = c.SetDeadline(time.Now().Add(flowServerDeadline))
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return
	}
	f := strings.Fields(line)
	if len(f) == 0 {
		return
	}
	if _, err := fmt.Fprintf(c, "%s ok %s\n", name, c.RemoteAddr()); err != nil {
		return
	}
	switch {
	case f[0] == FlowRR:
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if _, err := fmt.Fprintf(c, "%s %s\n", name, strings.TrimSpace(line)); err != nil {
				return
			}
		}
	case f[0] == FlowUp && len(f) == 2:
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return
		}
		h := sha256.New()
		if _, err := io.CopyN(h, r, n); err != nil {
			return
		}
		if _, err := fmt.Fprintf(c, "%s %x\n", name, h.Sum(nil)); err != nil {
			return
		}
	case f[0] == FlowDown && len(f) == 4:
		n, err1 := strconv.ParseInt(f[1], 10, 64)
		rate, err2 := strconv.ParseInt(f[2], 10, 64)
		seed, err3 := strconv.ParseUint(f[3], 10, 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return
		}
		drained := make(chan struct{})
		go func() { // the client's next segment (the hairpin nudge) is read and ignored
			_, _ = io.Copy(io.Discard, r)
			close(drained)
		}()
		src := FlowBytes(seed)
		buf := make([]byte, max(1, rate*int64(FlowTick)/int64(time.Second)))
		for sent := int64(0); sent < n; {
			k := min(int64(len(buf)), n-sent)
			_, _ = src.Read(buf[:k]) // ChaCha8 always fills buf
			if _, err := c.Write(buf[:k]); err != nil {
				return
			}
			sent += k
			time.Sleep(FlowTick) // pacing: the rate limit of the download
		}
		<-drained // until the client, having checked the bytes, closes
		return
	}
	_, _ = io.Copy(io.Discard, r) // until the client closes
}

// ServeFlowPackets answers every datagram "<n>" on pc with "<name> <n> <peer>" until pc is
// closed.
func ServeFlowPackets(pc net.PacketConn, name string) {
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		_, _ = pc.WriteTo(fmt.Appendf(nil, "%s %s %s", name, strings.TrimSpace(string(buf[:n])), from), from)
	}
}

// FlowBytes is the deterministic pseudo-random byte stream of a transfer.
func FlowBytes(seed uint64) *rand.ChaCha8 {
	var s [32]byte
	binary.LittleEndian.PutUint64(s[:], seed)
	return rand.NewChaCha8(s)
}

// FlowSum is the sha256 (hex) of the first n bytes of FlowBytes(seed).
func FlowSum(seed uint64, n int64) string {
	h := sha256.New()
	_, _ = io.CopyN(h, FlowBytes(seed), n) // ChaCha8 never fails
	return hex.EncodeToString(h.Sum(nil))
}

// ---- clients ----

// Flow is one long-lived connection (TCP) or session (UDP) from a client network namespace.
// Set its fields, then Start it; it runs until it finishes (a transfer's end, Stop for rr and
// udp), breaks or is failed (Fail).
type Flow struct {
	Kind    string // FlowRR, FlowUp, FlowDown, FlowUDP
	Client  string // who the client is, for reports ("ext", "vcli")
	Via     string // what it reaches, for reports ("EIP", "ClusterIP")
	Netns   string // the client's network namespace
	Target  string // host:port
	Seed    uint64 // a transfer's byte stream
	Hairpin bool   // the client is inside the VPC: its server-push flow waits for a nudge
	// Bytes and Rate are a transfer's size and rate (0: DefaultFlowBytes, DefaultFlowRate);
	// Deadline bounds the connection (0: DefaultFlowDeadline).
	Bytes, Rate int64
	Deadline    time.Duration

	progress atomic.Int64 // answers (rr, udp) or bytes moved (up, down)
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}

	mu      sync.Mutex
	started time.Time
	elapsed time.Duration // from dial to the end, once finished
	conn    net.Conn
	backend string
	peer    string // the client's address as the backend saw it
	err     error  // why the flow broke (nil: intact so far)
}

func (f *Flow) String() string { return fmt.Sprintf("%-4s %s→%s", f.Kind, f.Client, f.Via) }

// ServerSendsToGateway reports whether the flow's backend sends data to the gateway's own
// address: a hairpin request/response or download, whose backend segments go to the hairpin
// SNAT address. A gateway Pod that kube-ovn just recreated answers such a segment with a reset
// when it comes before vpcgw's agent programmed the Pod (the open gap of SPEC D9 that
// docs/connections.md describes).
func (f *Flow) ServerSendsToGateway() bool {
	return f.Hairpin && (f.Kind == FlowRR || f.Kind == FlowDown)
}

// Start runs the flow in a goroutine of its own.
func (f *Flow) Start() {
	f.stop, f.done = make(chan struct{}), make(chan struct{})
	f.mu.Lock()
	f.started = time.Now()
	f.mu.Unlock()
	go f.run()
}

// Transfer says whether the flow is an upload or a download (it ends by itself).
func (f *Flow) Transfer() bool { return f.Kind == FlowUp || f.Kind == FlowDown }

// Size is the transfer's size in bytes.
func (f *Flow) Size() int64 { return cmpOr(f.Bytes, DefaultFlowBytes) }

func (f *Flow) rate() int64 { return cmpOr(f.Rate, DefaultFlowRate) }

// Chunk is the size of a transfer's chunk.
func (f *Flow) Chunk() int64 { return max(1, f.rate()*int64(FlowTick)/int64(time.Second)) }

func cmpOr(v, def int64) int64 {
	if v == 0 {
		return def
	}
	return v
}

// Progress is the answers (rr, udp) or bytes moved (up, down) so far.
func (f *Flow) Progress() int64 { return f.progress.Load() }

// Stop ends a request/response or UDP flow after its current exchange.
func (f *Flow) Stop() { f.stopOnce.Do(func() { close(f.stop) }) }

// Done is closed when the flow's goroutine ended.
func (f *Flow) Done() <-chan struct{} { return f.done }

// Finished says whether the flow's goroutine ended.
func (f *Flow) Finished() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

// UnderWay says whether the flow has its backend and some progress (5 answers or 5 chunks),
// or is over (broken or finished: its Result says which).
func (f *Flow) UnderWay() bool {
	b, err := f.Result()
	if err != nil || f.Finished() {
		return true
	}
	need := int64(5)
	if f.Transfer() {
		need = 5 * f.Chunk()
	}
	return b != "" && f.progress.Load() >= need
}

// Fail records why the flow broke (the first reason stays) and closes its connection, which
// ends the goroutine. A flow that already finished keeps its outcome.
func (f *Flow) Fail(err error) {
	if f.Finished() {
		return
	}
	f.mu.Lock()
	if f.err == nil {
		f.err = err
	}
	c := f.conn
	f.mu.Unlock()
	if c != nil {
		_ = c.Close() // the flow is over: its outcome is recorded
	}
}

// EndFlows ends every flow still running, as broken with why, and waits until each has ended.
func EndFlows(flows []*Flow, why error) {
	for _, f := range flows {
		f.Fail(why)
		<-f.Done()
	}
}

// Result is the backend that served the flow and why it broke (nil: intact so far).
func (f *Flow) Result() (backend string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.backend, f.err
}

// Peer is the client's address as the backend saw it ("" before the server's first answer).
func (f *Flow) Peer() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.peer
}

// Elapsed is the flow's duration: from its start to its end, or until now.
func (f *Flow) Elapsed() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.elapsed != 0 {
		return f.elapsed
	}
	return time.Since(f.started)
}

func (f *Flow) setBackend(b, peer string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.backend, f.peer = b, peer
}

func (f *Flow) run() {
	defer close(f.done)
	defer func() {
		f.mu.Lock()
		f.elapsed = time.Since(f.started)
		f.mu.Unlock()
	}()
	var err error
	switch f.Kind {
	case FlowRR:
		err = f.runRR()
	case FlowUp:
		err = f.runUp()
	case FlowDown:
		err = f.runDown()
	case FlowUDP:
		err = f.runUDP()
	default:
		err = fmt.Errorf("unknown flow kind %q", f.Kind)
	}
	if err == nil {
		err = f.closeConn()
	}
	if err != nil {
		f.Fail(err)
	}
}

func (f *Flow) closeConn() error {
	f.mu.Lock()
	c := f.conn
	f.mu.Unlock()
	if c == nil {
		return nil
	}
	if err := c.Close(); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	return nil
}

func (f *Flow) dial() (net.Conn, error) {
	network := "tcp"
	if f.Kind == FlowUDP {
		network = "udp"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := DialInNetns(ctx, f.Netns, network, f.Target)
	if err != nil {
		return nil, fmt.Errorf("dial %s %s: %w", network, f.Target, err)
	}
	deadline := f.Deadline
	if deadline == 0 {
		deadline = DefaultFlowDeadline
	}
	_ = c.SetDeadline(time.Now().Add(deadline))
	f.mu.Lock()
	f.conn = c
	aborted := f.err != nil
	f.mu.Unlock()
	if aborted {
		_ = c.Close() // the flow was ended while dialing
		return nil, errors.New("ended while dialing")
	}
	return c, nil
}

// hello sends the TCP mode line and reads "<backend> ok <peer>".
func (f *Flow) hello(c net.Conn, r *bufio.Reader, mode string) (string, error) {
	if _, err := fmt.Fprintf(c, "%s\n", mode); err != nil {
		return "", fmt.Errorf("sending %q: %w", mode, err)
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("waiting for the server's hello: %w", err)
	}
	w := strings.Fields(line)
	if len(w) != 3 || w[1] != "ok" {
		return "", fmt.Errorf("hello %q", line)
	}
	f.setBackend(w[0], w[2])
	return w[0], nil
}

func (f *Flow) runRR() error {
	c, err := f.dial()
	if err != nil {
		return err
	}
	r := bufio.NewReader(c)
	backend, err := f.hello(c, r, FlowRR)
	if err != nil {
		return err
	}
	for n := 1; ; n++ {
		select {
		case <-f.stop:
			return nil
		case <-time.After(FlowExchangeInterval): // pacing: the client's request rate
		}
		if _, err := fmt.Fprintf(c, "%d\n", n); err != nil {
			return fmt.Errorf("request %d: %w", n, err)
		}
		line, err := r.ReadString('\n')
		if err != nil {
			return fmt.Errorf("answer %d: %w", n, err)
		}
		if want := fmt.Sprintf("%s %d", backend, n); strings.TrimSpace(line) != want {
			return fmt.Errorf("answer %d is %q, want %q", n, strings.TrimSpace(line), want)
		}
		f.progress.Add(1)
	}
}

func (f *Flow) runUp() error {
	size := f.Size()
	c, err := f.dial()
	if err != nil {
		return err
	}
	r := bufio.NewReader(c)
	backend, err := f.hello(c, r, fmt.Sprintf("%s %d", FlowUp, size))
	if err != nil {
		return err
	}
	src, h := FlowBytes(f.Seed), sha256.New()
	buf := make([]byte, f.Chunk())
	for sent := int64(0); sent < size; {
		k := min(int64(len(buf)), size-sent)
		_, _ = src.Read(buf[:k]) // ChaCha8 always fills buf
		h.Write(buf[:k])
		if _, err := c.Write(buf[:k]); err != nil {
			return fmt.Errorf("upload after %d of %d bytes: %w", sent, size, err)
		}
		sent += k
		f.progress.Add(k)
		time.Sleep(FlowTick) // pacing: the rate limit of the upload
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return fmt.Errorf("all %d bytes sent, waiting for the server's sha256: %w", size, err)
	}
	if want := fmt.Sprintf("%s %x", backend, h.Sum(nil)); strings.TrimSpace(line) != want {
		return fmt.Errorf("upload's answer %q, want %q", strings.TrimSpace(line), want)
	}
	return nil
}

type countWriter struct{ n *atomic.Int64 }

func (w countWriter) Write(p []byte) (int, error) {
	w.n.Add(int64(len(p)))
	return len(p), nil
}

func (f *Flow) runDown() error {
	size := f.Size()
	want := FlowSum(f.Seed, size)
	c, err := f.dial()
	if err != nil {
		return err
	}
	r := bufio.NewReader(c)
	if _, err := f.hello(c, r, fmt.Sprintf("%s %d %d %d", FlowDown, size, f.rate(), f.Seed)); err != nil {
		return err
	}
	h := sha256.New()
	if n, err := io.CopyN(io.MultiWriter(h, countWriter{&f.progress}), r, size); err != nil {
		return fmt.Errorf("download after %d of %d bytes: %w", n, size, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("downloaded bytes differ: sha256 %s, want %s", got, want)
	}
	return nil
}

// Nudge sends the hairpin download's "next segment" of its client after a fault: one byte that
// the server ignores.
func (f *Flow) Nudge() {
	f.mu.Lock()
	c := f.conn
	f.mu.Unlock()
	if c == nil || f.Finished() {
		return
	}
	if _, err := c.Write([]byte{'.'}); err != nil {
		f.Fail(fmt.Errorf("the client's next segment after the fault: %w", err))
	}
}

func (f *Flow) runUDP() error {
	c, err := f.dial()
	if err != nil {
		return err
	}
	backend := ""
	buf := make([]byte, 1500)
	for n := 1; ; n++ {
		select {
		case <-f.stop:
			return nil
		default:
		}
		if _, err := fmt.Fprintf(c, "%d", n); err != nil {
			return fmt.Errorf("datagram %d: %w", n, err)
		}
		// Answers to this datagram or to earlier ones (losses are allowed; the test counts
		// answers after the fault) until the next one is due.
		_ = c.SetReadDeadline(time.Now().Add(FlowExchangeInterval))
		for {
			k, err := c.Read(buf)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				break
			}
			if err != nil {
				return fmt.Errorf("after datagram %d: %w", n, err)
			}
			w := strings.Fields(string(buf[:k]))
			if len(w) != 3 {
				return fmt.Errorf("answer %q", buf[:k])
			}
			if backend == "" {
				backend = w[0]
				f.setBackend(backend, w[2])
			} else if w[0] != backend {
				return fmt.Errorf("answer %q came from %s, the session began on %s", buf[:k], w[0], backend)
			}
			f.progress.Add(1)
		}
	}
}

// FinishFlows lets every flow finish after a fault: request/response and UDP flows stop after
// answers more answers (counted from the call), transfers end by themselves. A flow that does
// neither within the time is failed as stalled. It returns once every flow ended.
func FinishFlows(flows []*Flow, answers int64, within time.Duration) {
	base := make([]int64, len(flows))
	for i, f := range flows {
		base[i] = f.Progress()
	}
	deadline := time.Now().Add(within)
	for {
		pending := 0
		for i, f := range flows {
			if f.Finished() {
				continue
			}
			pending++
			if !f.Transfer() && f.Progress() >= base[i]+answers {
				f.Stop()
			}
		}
		if pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			for i, f := range flows {
				if f.Finished() {
					continue
				}
				n := f.Progress()
				if f.Transfer() {
					f.Fail(fmt.Errorf("stalled after %d of %d bytes (%d since the fault) for %s", n, f.Size(), n-base[i], within))
				} else {
					f.Fail(fmt.Errorf("stalled: %d answers in %s after the fault, want %d", n-base[i], within, answers))
				}
				<-f.done
			}
			return
		}
		time.Sleep(50 * time.Millisecond) // polling the flows' counters
	}
}

// FlowTable is a table of the flows' outcomes (kind, client, target, backend, duration,
// outcome), one line each, and how many broke.
func FlowTable(flows []*Flow) (table string, broken int) {
	var b strings.Builder
	for _, f := range flows {
		be, err := f.Result()
		outcome := "intact"
		if err != nil {
			outcome = "BROKEN: " + err.Error()
			broken++
		}
		fmt.Fprintf(&b, "\n  %-22s backend %-4s %6s  %s", f, be, f.Elapsed().Round(100*time.Millisecond), outcome)
	}
	return b.String(), broken
}
