// covers: D7, L6, L7 (harness: an API server and a kubelet speaking the real exec protocols)
package transport

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	upgradeproxy "k8s.io/apimachinery/pkg/util/proxy"
	apiproxy "k8s.io/apiserver/pkg/util/proxy"
	"k8s.io/client-go/rest"
	kubeletexec "k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/streaming/pkg/httpstream/wsstream"
	utilexec "k8s.io/utils/exec"
)

// The harness has the two real server sides of `kubectl exec`:
//
//   - testKubelet serves /exec/{ns}/{pod}/{container} with the kubelet's own implementation
//     (k8s.io/cri-streaming remotecommand.ServeExec: SPDY v1-v4 and WebSocket v1-v4); its
//     Executor plays the container runtime and runs an agent function on the stream's pipes.
//   - testAPIServer (HTTPS) serves /api/v1/namespaces/{ns}/pods/{pod}/exec as kube-apiserver
//     does: it checks the pod and the container, then either proxies the upgrade to the kubelet
//     (k8s.io/apimachinery UpgradeAwareHandler) or, for a WebSocket v5 request on a "modern" API
//     server, terminates WebSocket v5 and speaks SPDY to the kubelet (k8s.io/apiserver
//     StreamTranslatorHandler). With translate off it behaves like an API server that predates
//     the translator, and the client has to fall back to SPDY.

// agentFunc runs one agent on an exec's stdin/stdout/stderr; pod is "<ns>/<pod>".
type agentFunc func(ctx context.Context, pod string, cmd []string, in io.Reader, out, errw io.Writer) error

type execCall struct {
	Pod       string
	Container string
	Cmd       []string
}

type testKubelet struct {
	srv   *httptest.Server
	agent agentFunc

	mu      sync.Mutex
	calls   []execCall
	running map[int]context.CancelFunc
	next    int
	results []error // what each finished agent returned, in order of finishing
	conns   []net.Conn
}

func newTestKubelet(t *testing.T, agent agentFunc) *testKubelet {
	t.Helper()
	k := &testKubelet{agent: agent, running: map[int]context.CancelFunc{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/exec/{ns}/{pod}/{container}", func(w http.ResponseWriter, req *http.Request) {
		opts, err := kubeletexec.NewOptions(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		pod := req.PathValue("ns") + "/" + req.PathValue("pod")
		kubeletexec.ServeExec(w, req, k, pod, "uid-"+req.PathValue("pod"), req.PathValue("container"),
			req.URL.Query()["command"], opts, time.Minute, kubeletexec.DefaultStreamCreationTimeout,
			kubeletexec.SupportedStreamingProtocols)
	})
	k.srv = httptest.NewUnstartedServer(mux)
	k.srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			k.mu.Lock()
			k.conns = append(k.conns, c)
			k.mu.Unlock()
		}
	}
	k.srv.Start()
	t.Cleanup(k.srv.Close)
	return k
}

// ExecInContainer is the container runtime: it runs the agent on the stream until the agent
// returns or the pod is "restarted" (killAgents), which ends it with exit code 137.
func (k *testKubelet) ExecInContainer(ctx context.Context, name, _, container string, cmd []string, in io.Reader, out, errw io.WriteCloser, tty bool, _ <-chan kubeletexec.TerminalSize, _ time.Duration) error {
	if tty {
		return fmt.Errorf("the agent must not get a tty")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	k.mu.Lock()
	id := k.next
	k.next++
	k.calls = append(k.calls, execCall{Pod: name, Container: container, Cmd: cmd})
	k.running[id] = cancel
	agent := k.agent
	k.mu.Unlock()

	err := agent(ctx, name, cmd, in, out, errw)
	killed := ctx.Err() != nil

	k.mu.Lock()
	delete(k.running, id)
	k.results = append(k.results, err)
	k.mu.Unlock()
	if killed {
		return utilexec.CodeExitError{Err: fmt.Errorf("container %s of %s was killed", container, name), Code: 137}
	}
	return err
}

// setAgent replaces what later execs run.
func (k *testKubelet) setAgent(agent agentFunc) {
	k.mu.Lock()
	k.agent = agent
	k.mu.Unlock()
}

// killAgents ends every running agent as a container restart would.
func (k *testKubelet) killAgents() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, cancel := range k.running {
		cancel()
	}
	return len(k.running)
}

// dropConnections closes every connection the kubelet accepted, as a node that vanished.
func (k *testKubelet) dropConnections() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, c := range k.conns {
		_ = c.Close()
	}
	k.conns = nil
}

func (k *testKubelet) runningAgents() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.running)
}

func (k *testKubelet) execCalls() []execCall {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]execCall(nil), k.calls...)
}

func (k *testKubelet) agentResults() []error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]error(nil), k.results...)
}

// waitIdle waits until no agent runs.
func (k *testKubelet) waitIdle(t *testing.T, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for k.runningAgents() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d agent(s) still running after %s", k.runningAgents(), within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type testAPIServer struct {
	srv       *httptest.Server
	kubelet   *testKubelet
	translate bool
	// pods that exist, "<ns>/<pod>", each with the one container vpc-nat-gw.
	pods map[string]bool

	mu       sync.Mutex
	requests []string      // "<METHOD> <websocket|spdy|plain> <translated|proxied|rejected>"
	hang     chan struct{} // when set, exec requests wait for it to close and fail
}

// hangUntil makes exec requests hang until release is closed.
func (a *testAPIServer) hangUntil(release chan struct{}) {
	a.mu.Lock()
	a.hang = release
	a.mu.Unlock()
}

func newTestAPIServer(t *testing.T, k *testKubelet, translate bool, pods ...string) *testAPIServer {
	t.Helper()
	a := &testAPIServer{kubelet: k, translate: translate, pods: map[string]bool{}}
	for _, p := range pods {
		a.pods[p] = true
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/api/v1/namespaces/{ns}/pods/{pod}/exec", a.exec)
	a.srv = httptest.NewUnstartedServer(mux)
	a.srv.StartTLS()
	t.Cleanup(a.srv.Close)
	return a
}

func (a *testAPIServer) restConfig() *rest.Config {
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.srv.Certificate().Raw})
	return &rest.Config{Host: a.srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}}
}

func (a *testAPIServer) log(req *http.Request, how string) {
	kind := "plain"
	switch {
	case wsstream.IsWebSocketRequest(req):
		kind = "websocket"
	case strings.Contains(strings.ToLower(req.Header.Get("Upgrade")), "spdy"):
		kind = "spdy"
	}
	a.mu.Lock()
	a.requests = append(a.requests, req.Method+" "+kind+" "+how)
	a.mu.Unlock()
}

func (a *testAPIServer) requestLog() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.requests...)
}

func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Message: msg, Reason: reason, Code: int32(code),
	})
}

// exec is the pods/exec subresource: the checks kube-apiserver makes, then the proxy.
func (a *testAPIServer) exec(w http.ResponseWriter, req *http.Request) {
	ns, pod := req.PathValue("ns"), req.PathValue("pod")
	a.mu.Lock()
	hang := a.hang
	a.mu.Unlock()
	if hang != nil {
		a.log(req, "hung")
		select {
		case <-hang:
		case <-req.Context().Done():
		}
		writeStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, "gave up")
		return
	}
	if req.Method != http.MethodGet && req.Method != http.MethodPost {
		a.log(req, "rejected")
		writeStatus(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, "method not allowed")
		return
	}
	if !a.pods[ns+"/"+pod] {
		a.log(req, "rejected")
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, fmt.Sprintf("pods %q not found", pod))
		return
	}
	q := req.URL.Query()
	container := q.Get("container")
	if container != DefaultExecContainer {
		a.log(req, "rejected")
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest,
			fmt.Sprintf("container %s is not valid for pod %s", container, pod))
		return
	}
	if len(q["command"]) == 0 {
		a.log(req, "rejected")
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "you must specify at least 1 command")
		return
	}
	opts := apiproxy.Options{
		Stdin: q.Get("stdin") == "true", Stdout: q.Get("stdout") == "true",
		Stderr: q.Get("stderr") == "true", Tty: q.Get("tty") == "true",
	}
	// The kubelet's URL, with the parameters the API server sends it.
	kq := url.Values{"command": q["command"]}
	for param, on := range map[string]bool{"input": opts.Stdin, "output": opts.Stdout, "error": opts.Stderr, "tty": opts.Tty} {
		if on {
			kq.Set(param, "1")
		}
	}
	loc, err := url.Parse(a.kubelet.srv.URL + "/exec/" + ns + "/" + pod + "/" + container + "?" + kq.Encode())
	if err != nil {
		writeStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error())
		return
	}
	proxied := upgradeproxy.NewUpgradeAwareHandler(loc, nil, false, true, responder{})
	if a.translate && wsstream.IsWebSocketRequestWithStreamCloseProtocol(req) {
		a.log(req, "translated")
		apiproxy.NewStreamTranslatorHandler(loc, nil, 0, opts).ServeHTTP(w, req)
		return
	}
	a.log(req, "proxied")
	proxied.ServeHTTP(w, req)
}

type responder struct{}

func (responder) Error(w http.ResponseWriter, _ *http.Request, err error) {
	writeStatus(w, http.StatusBadGateway, metav1.StatusReasonServiceUnavailable, err.Error())
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// logSink collects log lines for assertions.
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (s *logSink) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		s.mu.Lock()
		s.lines = append(s.lines, prefix+" "+args)
		s.mu.Unlock()
	}, funcr.Options{})
}

// waitFor waits until a collected line contains sub.
func (s *logSink) waitFor(t *testing.T, sub string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		s.mu.Lock()
		for _, l := range s.lines {
			if strings.Contains(l, sub) {
				s.mu.Unlock()
				return
			}
		}
		n := len(s.lines)
		s.mu.Unlock()
		if time.Now().After(deadline) {
			s.mu.Lock()
			defer s.mu.Unlock()
			t.Fatalf("no log line contains %q after %s; %d lines:\n%s", sub, within, n, strings.Join(s.lines, "\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
