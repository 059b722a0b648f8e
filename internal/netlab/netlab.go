// Package netlab builds throwaway network-namespace topologies for tests and the local lab:
// named namespaces, veth pairs, addresses, routes, sysctls, and child processes (echo servers,
// probes, agents) running inside them. Everything runs through exec.Command with an argv (no
// shell). A Lab remembers exactly what it created and Cleanup removes exactly that.
package netlab

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Available reports why namespace labs cannot run here (not root, `ip` missing), or nil.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("netlab needs root (network namespaces)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("netlab needs the `ip` command (apt-get install -y iproute2)")
	}
	return nil
}

// Lab is a set of network namespaces and processes created for one run. Names are
// "<prefix><6 random hex>-<short>", unique per run so that parallel test packages do not
// collide. Lab is safe for concurrent use.
type Lab struct {
	id string

	mu         sync.Mutex
	namespaces []string
	procs      []*Proc
}

// New returns an empty lab whose namespace names start with prefix (keep it short, e.g. "vt").
func New(prefix string) (*Lab, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	return &Lab{id: prefix + hex.EncodeToString(b[:])}, nil
}

// ID is the unique prefix of this lab's namespace names.
func (l *Lab) ID() string { return l.id }

// Run runs argv and returns its combined output, or an error that includes it.
func Run(argv ...string) ([]byte, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(out.String()))
	}
	return out.Bytes(), nil
}

// AddNetns creates the namespace "<lab id>-<short>" with lo up and returns its name.
func (l *Lab) AddNetns(short string) (string, error) {
	name := l.id + "-" + short
	if _, err := Run("ip", "netns", "add", name); err != nil {
		return "", err
	}
	l.mu.Lock()
	l.namespaces = append(l.namespaces, name)
	l.mu.Unlock()
	if _, err := Run("ip", "-n", name, "link", "set", "lo", "up"); err != nil {
		return name, err
	}
	return name, nil
}

// Veth creates a veth pair with end ifA in nsA and ifB in nsB (interface names ≤ 15 chars) and
// sets both ends up. The pair disappears with its namespaces.
func (l *Lab) Veth(nsA, ifA, nsB, ifB string) error {
	if _, err := Run("ip", "link", "add", ifA, "netns", nsA, "type", "veth", "peer", "name", ifB, "netns", nsB); err != nil {
		return err
	}
	if _, err := Run("ip", "-n", nsA, "link", "set", ifA, "up"); err != nil {
		return err
	}
	_, err := Run("ip", "-n", nsB, "link", "set", ifB, "up")
	return err
}

// AddBridge creates the bridge br in ns and sets it up.
func (l *Lab) AddBridge(ns, br string) error {
	if _, err := Run("ip", "-n", ns, "link", "add", br, "type", "bridge"); err != nil {
		return err
	}
	_, err := Run("ip", "-n", ns, "link", "set", br, "up")
	return err
}

// VethToBridge creates a veth pair with end ifA in nsA and port in nsB, and enslaves port to
// the bridge br in nsB.
func (l *Lab) VethToBridge(nsA, ifA, nsB, port, br string) error {
	if err := l.Veth(nsA, ifA, nsB, port); err != nil {
		return err
	}
	_, err := Run("ip", "-n", nsB, "link", "set", port, "master", br)
	return err
}

// AddAddr adds cidr (e.g. "10.0.1.1/24") to dev in ns.
func (l *Lab) AddAddr(ns, dev, cidr string) error {
	_, err := Run("ip", "-n", ns, "addr", "add", cidr, "dev", dev)
	return err
}

// AddRoute runs `ip -n <ns> route add <args...>`, e.g. AddRoute(ns, "default", "via", "10.0.1.1").
func (l *Lab) AddRoute(ns string, args ...string) error {
	_, err := Run(append([]string{"ip", "-n", ns, "route", "add"}, args...)...)
	return err
}

// Sysctl sets key=value inside ns (writes /proc/sys while in the namespace).
func (l *Lab) Sysctl(ns, key, value string) error {
	_, err := Run("ip", "netns", "exec", ns, "sysctl", "-qw", key+"="+value)
	return err
}

// Exec runs argv inside ns and returns its combined output.
func (l *Lab) Exec(ns string, argv ...string) ([]byte, error) {
	return Run(append([]string{"ip", "netns", "exec", ns}, argv...)...)
}

// Proc is a child process started by a Lab inside a namespace.
type Proc struct {
	Cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan struct{}
	err    error
}

// Wait waits for the process to exit and returns its exit error.
func (p *Proc) Wait() error { <-p.done; return p.err }

// Exited reports whether the process ended (Wait then returns at once).
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stderr returns what the process wrote to stderr so far.
func (p *Proc) Stderr() string { return p.stderr.String() }

// stdoutPipe attaches an os.Pipe to cmd's stdout and returns the read end. Unlike
// exec.Cmd.StdoutPipe, Wait does not close it, so a reader sees everything up to EOF.
func stdoutPipe(cmd *exec.Cmd, closeAfterStart *[]io.Closer) (io.ReadCloser, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = w
	*closeAfterStart = append(*closeAfterStart, w)
	return r, nil
}

// Stop kills the process (SIGKILL, by pid) and waits for it. Stopping twice is harmless.
func (p *Proc) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// start starts `ip netns exec <ns> <argv...>`; `ip netns exec` execs argv, so the pid is argv's.
// prep may set up stdin/stdout on the not yet started command and register parent-side pipe
// ends to close once it started.
func (l *Lab) start(ns string, argv []string, prep func(*exec.Cmd, *[]io.Closer) error) (*Proc, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...)
	p := &Proc{Cmd: cmd, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	var closeAfterStart []io.Closer
	if prep != nil {
		if err := prep(cmd, &closeAfterStart); err != nil {
			return nil, err
		}
	}
	err := cmd.Start()
	for _, c := range closeAfterStart {
		_ = c.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("starting %s in %s: %w", strings.Join(argv, " "), ns, err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	l.mu.Lock()
	l.procs = append(l.procs, p)
	l.mu.Unlock()
	return p, nil
}

// Start starts argv inside ns with stdout and stderr captured (Stderr()).
func (l *Lab) Start(ns string, argv ...string) (*Proc, error) {
	return l.start(ns, argv, nil)
}

// Cleanup kills the processes the lab started and deletes the namespaces it created, by name.
// It returns the joined errors and can be called more than once.
func (l *Lab) Cleanup() error {
	l.mu.Lock()
	procs, namespaces := l.procs, l.namespaces
	l.procs, l.namespaces = nil, nil
	l.mu.Unlock()
	for _, p := range procs {
		p.Stop()
	}
	var errs []error
	for i := len(namespaces) - 1; i >= 0; i-- {
		if _, err := Run("ip", "netns", "del", namespaces[i]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Namespaces returns the names of the namespaces the lab created and has not deleted.
func (l *Lab) Namespaces() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.namespaces...)
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitLine reads from lines until one arrives or timeout passes.
func waitLine(lines <-chan string, timeout time.Duration) (string, bool) {
	select {
	case s, ok := <-lines:
		return s, ok
	case <-time.After(timeout):
		return "", false
	}
}
