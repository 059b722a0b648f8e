package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
)

// Defaults of the exec transport.
const (
	// DefaultExecContainer is the container of a kube-ovn VPC NAT gateway pod.
	DefaultExecContainer = "vpc-nat-gw"
	// DefaultExecDialTimeout bounds how long Dial waits for the exec stream to open.
	DefaultExecDialTimeout = 30 * time.Second
	// DefaultExecCloseGrace is how long Close waits for the agent to exit after its stdin closed
	// before it tears the stream down.
	DefaultExecCloseGrace = 2 * time.Second
)

// DefaultAgentBinary is the name of the agent's binary (cmd/vpcgw-agent).
const DefaultAgentBinary = "vpcgw-agent"

// DefaultExecCommand is the agent's argv inside the gateway container: the vpcgw-agent binary
// (cmd/vpcgw-agent), expected on the gateway container's PATH. The controller's --agent-command
// replaces it.
var DefaultExecCommand = []string{DefaultAgentBinary}

// ExecProtocol selects how the exec stream is carried.
type ExecProtocol int

const (
	// ExecAuto tries WebSocket (v5.channel.k8s.io) first and falls back to SPDY when the API
	// server cannot upgrade to it, as kubectl exec does.
	ExecAuto ExecProtocol = iota
	// ExecWebSocket uses WebSocket only.
	ExecWebSocket
	// ExecSPDY uses SPDY only.
	ExecSPDY
)

func (p ExecProtocol) String() string {
	switch p {
	case ExecAuto:
		return "auto"
	case ExecWebSocket:
		return "websocket"
	case ExecSPDY:
		return "spdy"
	}
	return fmt.Sprintf("ExecProtocol(%d)", int(p))
}

// Exec reaches the agent of a gateway instance through the Kubernetes exec API: one long-lived
// `pods/exec` stream per Dial into the gateway container, running the agent with stdin and stdout
// as the state/ack line protocol and stderr forwarded to the logger line by line. When the stream
// ends (the pod restarted or went away, the API server or the kubelet dropped it) the Conn's
// reader sees the end and the Conn becomes Broken; the caller redials and resends the full state.
type Exec struct {
	rest        rest.Interface
	cfg         *rest.Config
	log         logr.Logger
	container   string
	command     []string
	protocol    ExecProtocol
	dialTimeout time.Duration
	closeGrace  time.Duration
	verifier    PodVerifier
	// binaries, when set, are copied into the container before the agent starts (deliver.go).
	binaries *AgentBinaries

	// dialed are the instances agents were delivered to, for RemoveDelivered.
	dialedMu sync.Mutex
	dialed   map[string]Instance
}

var _ Dialer = (*Exec)(nil)

// ExecOption configures an Exec.
type ExecOption func(*Exec)

// WithExecContainer sets the container the agent runs in (default DefaultExecContainer).
func WithExecContainer(name string) ExecOption { return func(e *Exec) { e.container = name } }

// WithExecCommand sets the agent's argv in the container (default DefaultExecCommand). It is passed
// as an argv through the exec API; no shell is involved.
func WithExecCommand(argv ...string) ExecOption {
	return func(e *Exec) { e.command = append([]string(nil), argv...) }
}

// WithExecProtocol selects the stream protocol (default ExecAuto).
func WithExecProtocol(p ExecProtocol) ExecOption { return func(e *Exec) { e.protocol = p } }

// WithExecDialTimeout bounds how long Dial waits for the stream to open (default
// DefaultExecDialTimeout); the Dial context can only shorten it.
func WithExecDialTimeout(d time.Duration) ExecOption { return func(e *Exec) { e.dialTimeout = d } }

// WithExecCloseGrace sets how long Close lets the agent exit after its stdin closed before the
// stream is cancelled (default DefaultExecCloseGrace).
func WithExecCloseGrace(d time.Duration) ExecOption { return func(e *Exec) { e.closeGrace = d } }

// WithExecPodVerifier replaces the check that a Pod is an instance of its gateway before an agent
// is started in it (default: an OwnerChainVerifier reading through cfg). Tests of the stream
// itself, against an API server that serves only pods/exec, pass their own.
func WithExecPodVerifier(v PodVerifier) ExecOption { return func(e *Exec) { e.verifier = v } }

// NewExec returns an exec-API Dialer that talks to the API server of cfg. cfg needs permission to
// `create` `pods/exec` (and `get` for the WebSocket upgrade) in the gateways' namespaces, and, for
// the default PodVerifier, `get` on pods, statefulsets, replicasets and deployments there.
func NewExec(cfg *rest.Config, log logr.Logger, opts ...ExecOption) (*Exec, error) {
	if cfg == nil {
		return nil, errors.New("exec transport: no rest config")
	}
	e := &Exec{
		cfg:         rest.CopyConfig(cfg),
		log:         log,
		container:   DefaultExecContainer,
		command:     append([]string(nil), DefaultExecCommand...),
		protocol:    ExecAuto,
		dialTimeout: DefaultExecDialTimeout,
		closeGrace:  DefaultExecCloseGrace,
	}
	for _, o := range opts {
		o(e)
	}
	if e.container == "" {
		return nil, errors.New("exec transport: empty container name")
	}
	if len(e.command) == 0 || e.command[0] == "" {
		return nil, errors.New("exec transport: empty agent command")
	}
	if e.protocol < ExecAuto || e.protocol > ExecSPDY {
		return nil, fmt.Errorf("exec transport: unknown protocol %v", e.protocol)
	}
	if e.dialTimeout <= 0 {
		e.dialTimeout = DefaultExecDialTimeout
	}
	if e.closeGrace < 0 {
		e.closeGrace = 0
	}
	// A REST client for the core group, only used to build pods/exec URLs.
	rc := rest.CopyConfig(cfg)
	rc.APIPath = "/api"
	rc.GroupVersion = &corev1.SchemeGroupVersion
	rc.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	if rc.UserAgent == "" {
		rc.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	client, err := rest.RESTClientFor(rc)
	if err != nil {
		return nil, fmt.Errorf("exec transport: %w", err)
	}
	e.rest = client
	if e.verifier == nil {
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, fmt.Errorf("exec transport: %w", err)
		}
		e.verifier = &OwnerChainVerifier{Client: cs}
	}
	return e, nil
}

// URL is the pods/exec URL Dial opens for inst (exported for logs and tests).
func (e *Exec) URL(inst Instance) *url.URL { return e.urlFor(inst, e.command, true) }

// urlFor is the pods/exec URL running argv in inst's container.
func (e *Exec) urlFor(inst Instance, argv []string, stdin bool) *url.URL {
	return e.rest.Post().
		Namespace(inst.Namespace).
		Resource("pods").
		Name(inst.Pod).
		SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: e.container,
			Command:   argv,
			Stdin:     stdin,
			Stdout:    true,
			Stderr:    true,
			TTY:       false,
		}, scheme.ParameterCodec).
		URL()
}

func (e *Exec) executor(u *url.URL) (remotecommand.Executor, error) {
	var ws, spdy remotecommand.Executor
	var err error
	if e.protocol != ExecSPDY {
		// WebSocket must be GET (RFC 6455 4.1); the API server authorises it as create pods/exec.
		if ws, err = remotecommand.NewWebSocketExecutor(e.cfg, "GET", u.String()); err != nil {
			return nil, fmt.Errorf("websocket executor: %w", err)
		}
	}
	if e.protocol != ExecWebSocket {
		if spdy, err = remotecommand.NewSPDYExecutor(e.cfg, "POST", u); err != nil {
			return nil, fmt.Errorf("spdy executor: %w", err)
		}
	}
	switch e.protocol {
	case ExecWebSocket:
		return ws, nil
	case ExecSPDY:
		return spdy, nil
	}
	return remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
}

// Dial opens an exec stream into inst's gateway container, starting the agent there, and returns
// once the stream is established (or fails). The stream outlives ctx: it ends when the Conn is
// closed or the stream breaks.
func (e *Exec) Dial(ctx context.Context, inst Instance) (*Conn, error) {
	u, exe, err := e.prepare(ctx, inst)
	if err != nil {
		return nil, err
	}
	log := e.log.WithValues("instance", inst.String(), "container", e.container)

	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	stderrR, stderrW := io.Pipe()
	// Not derived from ctx: the stream must outlive the reconcile that dialled it.
	streamCtx, cancel := context.WithCancel(context.Background())
	s := &execStream{
		stdin:   stdinW,
		stdout:  stdoutR,
		cancel:  cancel,
		grace:   e.closeGrace,
		ended:   make(chan struct{}),
		logDone: make(chan struct{}),
		log:     log,
	}
	opened := make(chan struct{})
	var openOnce sync.Once
	in := &notifyReader{r: stdinR, first: func() { openOnce.Do(func() { close(opened) }) }}

	go func() {
		defer close(s.logDone)
		forwardLines(stderrR, log)
		_, _ = io.Copy(io.Discard, stderrR) // a line longer than the scanner's limit
	}()
	go func() {
		err := exe.StreamWithContext(streamCtx, remotecommand.StreamOptions{
			Stdin:  in,
			Stdout: stdoutW,
			Stderr: stderrW,
		})
		s.result = err
		if err == nil {
			err = errors.New("the agent exited")
		}
		err = fmt.Errorf("exec stream to %s ended: %w", inst, err)
		// Unblock whoever still waits on a pipe: the Conn's writer and reader, and the
		// executor's own copy goroutines that may outlive StreamWithContext.
		_ = stdinR.CloseWithError(err)
		_ = stdoutW.CloseWithError(err)
		_ = stderrW.Close()
		close(s.ended)
	}()

	failure := e.awaitOpen(ctx, opened, s)
	if failure == nil {
		log.Info("agent stream opened", "url", u.Path)
		return NewConn(stdinW, stdoutR, s), nil
	}
	// Not waiting for the stream's goroutine: a WebSocket handshake does not heed cancellation
	// (gorilla/websocket reads the upgrade response without a deadline), so an API server that
	// never answers would hold Dial forever. The goroutine ends when the connection does.
	s.abort()
	return nil, fmt.Errorf("exec into %s container %s: %w", inst, e.container, failure)
}

// prepare is what Dial does before it opens the stream: it verifies inst's Pod, delivers the
// agent's binary when the transport carries one, and returns the exec URL and its executor.
func (e *Exec) prepare(ctx context.Context, inst Instance) (*url.URL, remotecommand.Executor, error) {
	if inst.Namespace == "" || inst.Pod == "" {
		return nil, nil, fmt.Errorf("exec transport: instance %s has no namespace or pod name", inst)
	}
	// The Pod's identity first: exec is a shell-equivalent privilege, and a Pod that merely
	// carries the gateway's labels must not get an agent (nor the gateway's state).
	vctx, vcancel := context.WithTimeout(ctx, e.dialTimeout)
	err := e.verifier.VerifyPod(vctx, inst, e.container)
	vcancel()
	if err != nil {
		return nil, nil, fmt.Errorf("exec transport: refusing to start the agent: %w", err)
	}
	command := e.command
	if e.binaries != nil {
		installed, err := e.deliver(ctx, inst)
		if err != nil {
			return nil, nil, fmt.Errorf("exec transport: instance %s: %w", inst, err)
		}
		e.noteDelivered(inst)
		command = append([]string{installed}, e.command[1:]...)
	}
	u := e.urlFor(inst, command, true)
	exe, err := e.executor(u)
	if err != nil {
		return nil, nil, fmt.Errorf("exec transport: %w", err)
	}
	return u, exe, nil
}

// awaitOpen waits until the stream s is open (opened closes: nil), ends, or ctx or the dial
// timeout expires (the failure).
func (e *Exec) awaitOpen(ctx context.Context, opened <-chan struct{}, s *execStream) error {
	timer := time.NewTimer(e.dialTimeout)
	defer timer.Stop()
	select {
	case <-opened:
		return nil
	case <-s.ended:
		if s.result == nil {
			return errors.New("the agent exited before reading its input")
		}
		return s.result
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return fmt.Errorf("stream not open after %s", e.dialTimeout)
	}
}

// notifyReader calls first before the first Read: the executor reads stdin only once every
// stream is set up, which is the moment the exec is established.
type notifyReader struct {
	r     io.Reader
	first func()
}

func (n *notifyReader) Read(p []byte) (int, error) {
	n.first()
	return n.r.Read(p)
}

// execStream ends one exec stream: closing stdin asks the agent to exit (it exits at EOF); after
// the grace period the stream's context is cancelled.
type execStream struct {
	stdin   *io.PipeWriter
	stdout  *io.PipeReader
	cancel  context.CancelFunc
	grace   time.Duration
	ended   chan struct{}
	logDone chan struct{}
	result  error // StreamWithContext's result; read after ended is closed
	log     logr.Logger
	once    sync.Once
}

func (s *execStream) Close() error {
	s.once.Do(func() {
		_ = s.stdin.Close()
		t := time.NewTimer(s.grace)
		defer t.Stop()
		select {
		case <-s.ended:
		case <-t.C:
			s.abort()
			t.Reset(execAbortWait)
			select {
			case <-s.ended:
			case <-t.C:
				s.log.Info("agent stream did not end after cancellation; leaving it")
				return
			}
		}
		<-s.logDone
		s.log.Info("agent stream closed", "result", fmt.Sprint(s.result))
	})
	return nil
}

// execAbortWait bounds how long Close waits for a cancelled stream to end.
const execAbortWait = 5 * time.Second

// abort cancels the stream and unblocks every pipe without waiting for the stream to end.
func (s *execStream) abort() {
	s.cancel()
	_ = s.stdin.CloseWithError(errStreamClosed)
	_ = s.stdout.CloseWithError(errStreamClosed)
}

var errStreamClosed = errors.New("exec stream closed")
