// covers: V1, V2

package ovn

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"

	"github.com/vpcgw/vpcgw/internal/testutil"
)

// nbServer is a standalone OVN NB ovsdb-server started by a test, listening on a unix socket and a
// loopback TCP port (and optionally SSL).
type nbServer struct {
	t       testing.TB
	dir     string
	db      string
	sock    string
	port    int
	ssl     *sslFiles // server-side files, nil for no SSL listener
	sslPort int

	mu     sync.Mutex
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	done   chan struct{}
}

const nbSchema = "nbdb/ovn-nb.ovsschema"

// requireOVN skips (via testutil.Skip) when the OVN/OVS tools are missing.
func requireOVN(t testing.TB) {
	t.Helper()
	for _, bin := range []string{"ovsdb-server", "ovsdb-tool", "ovn-nbctl", "ovs-appctl"} {
		if _, err := exec.LookPath(bin); err != nil {
			testutil.Skip(t, bin+" not installed (Debian package ovn-central)")
		}
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return port
}

// startNB creates a fresh NB database and starts ovsdb-server on it; it is stopped at cleanup.
func startNB(t testing.TB, ssl *sslFiles) *nbServer {
	t.Helper()
	requireOVN(t)
	// A short directory: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "vpcgw-nb-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
	})
	s := &nbServer{t: t, dir: dir, db: filepath.Join(dir, "nb.db"), sock: filepath.Join(dir, "nb.sock"), ssl: ssl}
	out, err := exec.Command("ovsdb-tool", "create", s.db, nbSchema).CombinedOutput()
	if err != nil {
		t.Fatalf("ovsdb-tool create: %v: %s", err, out)
	}
	s.port = freePort(t)
	if ssl != nil {
		s.sslPort = freePort(t)
	}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *nbServer) tcpAddr() string  { return "tcp:127.0.0.1:" + strconv.Itoa(s.port) }
func (s *nbServer) unixAddr() string { return "unix:" + s.sock }
func (s *nbServer) sslAddr() string  { return "ssl:127.0.0.1:" + strconv.Itoa(s.sslPort) }

// start runs ovsdb-server in the foreground as our child and waits until it accepts connections.
func (s *nbServer) start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		s.t.Fatal("nb server already running")
	}
	args := []string{
		s.db,
		"--remote=punix:" + s.sock,
		"--remote=ptcp:" + strconv.Itoa(s.port) + ":127.0.0.1",
		"--unixctl=" + filepath.Join(s.dir, "nb.ctl"),
		"--log-file=" + filepath.Join(s.dir, "nb.log"),
		"--no-chdir",
		"-vconsole:off",
	}
	if s.ssl != nil {
		args = append(args,
			"--remote=pssl:"+strconv.Itoa(s.sslPort)+":127.0.0.1",
			"--private-key="+s.ssl.key, "--certificate="+s.ssl.cert, "--ca-cert="+s.ssl.ca)
	}
	cmd := exec.Command("ovsdb-server", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the test binary
	s.stderr = &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = s.stderr, s.stderr
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start ovsdb-server: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done

	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(s.dir, "nb.log"))
			s.cmd = nil
			s.t.Fatalf("ovsdb-server exited: %s\n%s", s.stderr, log)
		default:
		}
		ready := true
		for _, a := range [][2]string{{"unix", s.sock}, {"tcp", "127.0.0.1:" + strconv.Itoa(s.port)}} {
			c, err := net.DialTimeout(a[0], a[1], time.Second)
			if err != nil {
				ready = false
				break
			}
			_ = c.Close() // a probe: connecting was all it needed
		}
		if ready {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("ovsdb-server did not listen within 10s: %s", s.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop terminates the server this test started (and only it) and waits for it.
func (s *nbServer) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
}

// nbctl runs ovn-nbctl against the server's unix socket.
func (s *nbServer) nbctl(args ...string) string {
	s.t.Helper()
	full := append([]string{"--db=" + s.unixAddr(), "--timeout=10"}, args...)
	// stdout alone: ovn-nbctl 25.03 warns on stderr about the columns this older NB schema
	// (Debian's 23.03, the models' source) lacks.
	var stderr strings.Builder
	cmd := exec.Command("ovn-nbctl", full...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		s.t.Fatalf("ovn-nbctl %s: %v: %s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// appctl runs ovs-appctl against the server's control socket.
func (s *nbServer) appctl(args ...string) string {
	s.t.Helper()
	full := append([]string{"-t", filepath.Join(s.dir, "nb.ctl")}, args...)
	out, err := exec.Command("ovs-appctl", full...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("ovs-appctl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// newTestWriter connects a writer to addr and closes it at cleanup.
func newTestWriter(t testing.TB, cfg Config) *Writer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var log logr.Logger
	if tt, ok := t.(*testing.T); ok {
		log = testr.NewWithOptions(tt, testr.Options{Verbosity: 1})
	} else {
		log = logr.Discard()
	}
	w, err := NewWriter(ctx, cfg, log)
	if err != nil {
		t.Fatalf("NewWriter(%s): %v", cfg.Address, err)
	}
	t.Cleanup(w.Close)
	return w
}

func fmtPolicies(ps []Policy) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "%s %s %d %q %s %v\n", p.Router, p.Gateway, p.Priority, p.Match, p.Action, p.NextHops)
	}
	return b.String()
}

func logrDiscard() logr.Logger { return logr.Discard() }
