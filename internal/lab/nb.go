package lab

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/vpcgw/vpcgw/internal/netlab"
)

const nbSchema = "/usr/share/ovn/ovn-nb.ovsschema"

// nbServer is the lab's OVN northbound DB: Debian's ovsdb-server on a unix socket, as a child
// process of the lab.
type nbServer struct {
	dir    string
	cmd    *exec.Cmd
	done   chan struct{}
	stderr bytes.Buffer
}

func (s *nbServer) addr() string { return "unix:" + filepath.Join(s.dir, "nb.sock") }

func startNB(dir string) (*nbServer, error) {
	for _, bin := range []string{"ovsdb-server", "ovsdb-tool", "ovn-nbctl"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("%s is not installed (apt-get install -y ovn-central)", bin)
		}
	}
	s := &nbServer{dir: dir}
	db := filepath.Join(dir, "nb.db")
	if _, err := netlab.Run("ovsdb-tool", "create", db, nbSchema); err != nil {
		return nil, err
	}
	s.cmd = exec.Command("ovsdb-server", db,
		"--remote=punix:"+filepath.Join(dir, "nb.sock"),
		"--unixctl="+filepath.Join(dir, "nb.ctl"),
		"--log-file="+filepath.Join(dir, "nb.log"),
		"--no-chdir", "-vconsole:off")
	s.cmd.Stdout, s.cmd.Stderr = &s.stderr, &s.stderr
	// No Pdeathsig: it fires when the forking *thread* ends, and the bench's baseline ends the
	// threads it locks into a namespace (internal/bench/baseline.go), which killed this process
	// whenever that thread was the one that had started it. Stop ends it.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting ovsdb-server: %w", err)
	}
	s.done = make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("unix", filepath.Join(dir, "nb.sock")); err == nil {
			c.Close()
			return s, nil
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("ovsdb-server exited: %s", s.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, errors.New("ovsdb-server did not listen within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// nbctl runs ovn-nbctl against the lab's DB.
func (s *nbServer) nbctl(args ...string) (string, error) {
	out, err := netlab.Run(append([]string{"ovn-nbctl", "--db=" + s.addr()}, args...)...)
	return string(out), err
}

func (s *nbServer) stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	_ = os.Remove(filepath.Join(s.dir, "nb.sock"))
}
