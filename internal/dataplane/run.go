package dataplane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"sigs.k8s.io/knftables"

	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/transport/lineio"
	"github.com/vpcgw/vpcgw/internal/version"
)

// RunAgent reads one JSON gwstate.State per line from in, normalizes, validates and applies it,
// and writes one JSON gwstate.Ack line per input line to out. Blank lines are ignored. A line
// that cannot be decoded (an address text that does not parse among them) is answered with
// Generation 0 and an error; an invalid state or a failed apply is answered with the state's
// generation and the error. None of these stop the loop. RunAgent returns nil at EOF, ctx.Err()
// when ctx ends, or an error when in cannot be read or out cannot be written.
func RunAgent(ctx context.Context, in io.Reader, out io.Writer, nft knftables.Interface, log logr.Logger) error {
	return Serve(ctx, NewAgent(nft, log), in, out, ServeOptions{}, log)
}

// changeSettle is how long the agent waits after a kernel change notification before it checks
// (changes coalesce meanwhile), and minChangeGap the least time between two such checks. With
// the check itself, a foreign change is repaired well within a second (SPEC L8).
const (
	changeSettle = 50 * time.Millisecond
	minChangeGap = 250 * time.Millisecond
)

// ServeOptions tune the agent loop.
type ServeOptions struct {
	// VerifyInterval is how often the agent looks for drift (Agent.Verify); 0 disables it.
	VerifyInterval time.Duration
	// RetryMin and RetryMax bound the backoff with which a failed apply is retried (SPEC D8);
	// RetryMin 0 disables retries.
	RetryMin, RetryMax time.Duration
	// MaxStateLine bounds one state line (default lineio.MaxStateLine).
	MaxStateLine int
	// AgentVersion goes into the first acknowledgement of the stream (gwstate.Ack.AgentVersion);
	// empty leaves it out.
	AgentVersion string
}

func (o ServeOptions) maxStateLine() int {
	if o.MaxStateLine > 0 {
		return o.MaxStateLine
	}
	return lineio.MaxStateLine
}

// Serve is RunAgent's loop for any agent: one ack per state line, plus a drift check every
// VerifyInterval and, after a failed apply, retries of the last state with exponential backoff
// until one succeeds or a new state arrives. Retries and repairs are logged (an ack answers
// one line; the controller resends its state on every reconcile anyway).
func Serve(ctx context.Context, agent *Agent, in io.Reader, out io.Writer, o ServeOptions, log logr.Logger) error {
	if o.RetryMax < o.RetryMin {
		o.RetryMax = o.RetryMin
	}
	s := &server{agent: agent, o: o, log: log, enc: json.NewEncoder(out), first: true}
	var verify <-chan time.Time
	if o.VerifyInterval > 0 {
		t := time.NewTicker(o.VerifyInterval)
		defer t.Stop()
		verify = t.C
	}
	// Kernel change notifications (SPEC L8): a signal starts a short settle delay, so that a
	// burst of changes (nft -f of a whole table, an address flush) costs one check, and checks
	// are at least minChangeGap apart, so that a writer that never stops cannot keep the agent
	// checking. Verify decides whether the change is drift.
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	var changed <-chan struct{}
	if agent.watch != nil {
		changed = agent.watch.start(watchCtx, func(err error) {
			log.Error(err, "kernel change notifications ended; drift is found by the periodic check only")
		})
	}
	s.settle = stoppedTimer()
	defer s.settle.Stop()
	s.retry = stoppedTimer()
	defer s.retry.Stop()

	lines := make(chan line)
	stop := make(chan struct{})
	defer close(stop)
	go readLines(in, o.maxStateLine(), lines, stop)

	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-verify:
			s.verify(ctx)
		case <-changed:
			s.kernelChanged()
		case <-s.settle.C:
			s.verifyAfterChange(ctx)
		case <-s.retry.C:
			s.retryLast(ctx)
		case l := <-lines:
			if done, err := s.handle(ctx, l); done {
				return err
			}
		}
	}
}

// server is the state of Serve's loop.
type server struct {
	agent *Agent
	o     ServeOptions
	log   logr.Logger
	enc   *json.Encoder
	// first: no line has been sent yet.
	first bool

	settle          *time.Timer
	settling        bool
	lastChangeCheck time.Time

	retry   *time.Timer
	backoff time.Duration
}

// line is one line of the stream from the controller, or the error that ended it.
type line struct {
	data []byte
	err  error
}

// stoppedTimer returns a timer that does not run until it is reset.
func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// readLines sends the lines of in to lines until in ends (the error is sent too) or stop is
// closed. Bounded (SPEC N6): a line longer than the bound ends the loop with an error, never an
// unbounded allocation.
func readLines(in io.Reader, maxLine int, lines chan<- line, stop <-chan struct{}) {
	r := lineio.NewReader(in, maxLine)
	for {
		data, err := r.ReadLine()
		if len(data) > 0 || err != nil {
			select {
			case lines <- line{data, err}:
			case <-stop:
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// send writes one ack.
func (s *server) send(ack gwstate.Ack) error {
	if s.first { // the agent's version goes with its first line on the stream
		ack.AgentVersion, s.first = s.o.AgentVersion, false
	}
	return s.enc.Encode(ack)
}

// scheduleRetry starts the retry timer with the next backoff after a failure, and stops it
// (resetting the backoff) otherwise.
func (s *server) scheduleRetry(failed bool) {
	s.retry.Stop()
	if !failed || s.o.RetryMin <= 0 {
		s.backoff = 0
		return
	}
	if s.backoff == 0 {
		s.backoff = s.o.RetryMin
	} else if s.backoff = 2 * s.backoff; s.backoff > s.o.RetryMax {
		s.backoff = s.o.RetryMax
	}
	s.retry.Reset(s.backoff)
}

// verify is the periodic drift check.
func (s *server) verify(ctx context.Context) {
	if _, err := s.agent.Verify(ctx); err != nil {
		s.log.Error(err, "verify")
		s.scheduleRetry(true)
	}
}

// kernelChanged starts the settle delay unless it runs already.
func (s *server) kernelChanged() {
	if s.settling {
		return
	}
	s.settling = true
	d := changeSettle
	if gap := time.Until(s.lastChangeCheck.Add(minChangeGap)); gap > d {
		d = gap
	}
	s.settle.Reset(d)
}

// verifyAfterChange is the drift check once a kernel change has settled.
func (s *server) verifyAfterChange(ctx context.Context) {
	s.settling, s.lastChangeCheck = false, time.Now()
	drift, err := s.agent.Verify(ctx)
	if err != nil {
		s.log.Error(err, "verify after a kernel change")
		s.scheduleRetry(true)
	}
	s.log.V(1).Info("kernel change checked", "drift", drift)
}

// retryLast retries the last state after a failed apply.
func (s *server) retryLast(ctx context.Context) {
	if did, err := s.agent.Retry(ctx); err != nil {
		s.log.Error(err, "retry failed", "next", 2*s.backoff)
		s.scheduleRetry(true)
	} else if did {
		s.log.Info("retry succeeded")
		s.scheduleRetry(false)
	}
}

// handle answers one line; done reports that the stream has ended, with err (nil at its end).
func (s *server) handle(ctx context.Context, l line) (done bool, err error) {
	if data := bytes.TrimSpace(l.data); len(data) > 0 {
		ack := handleLine(ctx, s.agent, data, s.log)
		if ack.Pong == 0 && (ack.Generation != 0 || ack.Error == "") {
			s.backoff = 0 // a new state restarts the backoff
			s.scheduleRetry(ack.Error != "" && !strings.HasPrefix(ack.Error, "invalid state"))
		}
		if err := s.send(ack); err != nil {
			return true, fmt.Errorf("writing ack: %w", err)
		}
	}
	if l.err == nil {
		return false, nil
	}
	if errors.Is(l.err, io.EOF) {
		return true, nil
	}
	if errors.Is(l.err, lineio.ErrTooLong) {
		// Say why before the stream ends: the controller redials and sends a complete state.
		_ = s.send(gwstate.Ack{Error: fmt.Sprintf("cannot read state: %v", l.err)})
	}
	return true, fmt.Errorf("reading states: %w", l.err)
}

// DecodeStateLine decodes one line of the stream from the controller: exactly one JSON object,
// nothing after it (SPEC N6: whatever arrives, the agent answers with an error, never a crash).
func DecodeStateLine(data []byte) (gwstate.State, error) {
	var st gwstate.State
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&st); err != nil {
		return gwstate.State{}, fmt.Errorf("cannot decode state: %w", err)
	}
	if dec.More() {
		return gwstate.State{}, errors.New("cannot decode state: trailing data after the JSON object")
	}
	return st, nil
}

func handleLine(ctx context.Context, agent *Agent, data []byte, log logr.Logger) gwstate.Ack {
	start, kernel := time.Now(), agent.KernelTotal()
	ack := answerLine(ctx, agent, data, log)
	if ack.Generation > 0 {
		ack.ApplyMicros, ack.KernelMicros = time.Since(start).Microseconds(), (agent.KernelTotal() - kernel).Microseconds()
	}
	return ack
}

func answerLine(ctx context.Context, agent *Agent, data []byte, log logr.Logger) gwstate.Ack {
	st, err := DecodeStateLine(data)
	if err != nil {
		log.Error(err, "cannot decode state line")
		return gwstate.Ack{Error: err.Error()}
	}
	if st.Ping > 0 {
		// A keepalive: the stream is alive both ways; nothing to apply.
		return gwstate.Ack{Pong: st.Ping, Keepalive: true, Deltas: true, SameClusterIPs: true, Protocol: gwstate.ProtocolVersion}
	}
	st.Normalize()
	// Only the message's shape refuses it whole (an "invalid state" error); its identities are
	// admitted one by one (admit.go), and the refused ones are named in the acknowledgement.
	if err := agent.ApplyMessage(ctx, st); err != nil {
		log.Error(err, "apply failed", "generation", st.Generation, "delta", st.IsDelta())
		return gwstate.Ack{Generation: st.Generation, Error: err.Error(), ConntrackDeleted: agent.TakeConntrackDeleted(), Deltas: true, SameClusterIPs: true, Keepalive: true, Protocol: gwstate.ProtocolVersion,
			Warning: agent.Warning()}
	}
	refused := agent.Refusals()
	if len(refused) > 0 {
		log.Info("state applied without refused identities", "generation", st.Generation, "refused", len(refused), "first", refused[0].Reason)
	}
	return gwstate.Ack{Generation: st.Generation, ConntrackDeleted: agent.TakeConntrackDeleted(), Deltas: true, SameClusterIPs: true, Keepalive: true, Protocol: gwstate.ProtocolVersion, Refused: refused,
		Warning: agent.Warning()}
}

// NewLogger returns a logr.Logger writing one line per entry to w (stderr for the agent: stdout
// carries acks). verbosity enables V(n) logs up to n.
func NewLogger(w io.Writer, verbosity int) logr.Logger {
	return funcr.New(func(prefix, args string) {
		if prefix != "" {
			_, _ = fmt.Fprintf(w, "%s: %s\n", prefix, args)
		} else {
			_, _ = fmt.Fprintln(w, args)
		}
	}, funcr.Options{Verbosity: verbosity}).WithName("agent")
}

const agentHelp = `vpcgw-agent programs a kube-ovn VPC NAT gateway's nftables table ip kube-ovn (Service
DNAT, ClientIP affinity, hairpin SNAT): it runs in the gateway's vpc-nat-gw container, where the
vpcgw controller starts it through the exec API, reads the gateway's desired state on stdin, one
JSON line each, applies it and answers each on stdout, and repairs drift. Logs go to stderr.

Usage:
  vpcgw-agent [flags]
  vpcgw-agent --version

Flags (one dash or two):
`

func printUsage(fs *flag.FlagSet) {
	_, _ = fmt.Fprint(fs.Output(), agentHelp)
	fs.PrintDefaults()
}

// MainWithArgs is `vpcgw-agent [flags]` (cmd/vpcgw-agent): it reads states on in, writes acks on
// out and logs to stderr. Flags:
//
//	--vpc-interface eth0     the gateway's interface into the VPC (hairpin SNAT, SPEC D4)
//	--verify-interval 10s    how often to look for drift and repair it (SPEC L6); 0 disables
//	--retry-max 30s          longest backoff between retries of a rejected state (SPEC D8)
//	--text-path              program nftables through the nft binary instead of netlink
//	--watch-kernel true      repair foreign changes when the kernel reports them (SPEC L8)
//	--v 0                    log verbosity
//	--version                print the version (internal/version) on out and exit
//
// Its first acknowledgement carries its version (gwstate.Ack.AgentVersion). It fails at once
// when the kernel interfaces are unusable (not root, no nftables support).
func MainWithArgs(ctx context.Context, args []string, in io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("vpcgw-agent", flag.ContinueOnError)
	var cfg Config
	fs.StringVar(&cfg.VPCInterface, "vpc-interface", DefaultVPCInterface, "the gateway's interface into the VPC")
	verify := fs.Duration("verify-interval", 10*time.Second, "how often to look for drift and repair it (0: never)")
	retryMax := fs.Duration("retry-max", 30*time.Second, "longest backoff between retries of a rejected state")
	fs.BoolVar(&cfg.TextPath, "text-path", false, "program nftables through the nft binary instead of netlink")
	pick := fs.String("pick", PickHash.String(), "hash (a connection's backend is the same everywhere) or random (as kube-ovn)")
	watch := fs.Bool("watch-kernel", true, "repair foreign changes when the kernel reports them (false: periodic check only)")
	verbosity := fs.Int("v", 0, "log verbosity")
	showVersion := fs.Bool("version", false, "print the version and exit")
	// --help (-h) prints the help on out and is flag.ErrHelp (exit 0); a wrong flag is an error
	// that points at --help.
	var usage bytes.Buffer
	fs.SetOutput(&usage)
	fs.Usage = func() { printUsage(fs) }
	var err error
	if err = fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			_, werr := usage.WriteTo(out)
			return errors.Join(err, werr)
		}
		return fmt.Errorf("%w (see vpcgw-agent --help)", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("agent: unexpected arguments %q", fs.Args())
	}
	if *showVersion {
		_, err := fmt.Fprintf(out, "vpcgw-agent %s\n", version.Version)
		return err
	}
	cfg.NoWatch = !*watch
	if cfg.Pick, err = ParsePick(*pick); err != nil {
		return fmt.Errorf("--pick: %w", err)
	}
	log := NewLogger(os.Stderr, *verbosity)
	agent, err := NewKernelAgent(cfg, log)
	if err != nil {
		return err
	}
	log.Info("agent started", "version", version.Version, "table", "ip "+TableName, "backend", agent.be.name(), "pick", cfg.Pick.String(), "vpcInterface", agent.iface, "verifyInterval", verify.String(), "watchKernel", *watch)
	return Serve(ctx, agent, in, out, ServeOptions{VerifyInterval: *verify, RetryMin: 200 * time.Millisecond, RetryMax: *retryMax, AgentVersion: version.Version}, log)
}
