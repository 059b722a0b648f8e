// Package kubeovnrun runs the real kube-ovn-controller v1.16.2 beside a local API server, as a
// cluster runs it: OVN NB and SB ovsdb-servers created from kube-ovn's own schemas with
// ovn-northd between them, the objects a kube-ovn install puts in the API server (CRDs,
// ConfigMaps, the external network's NetworkAttachmentDefinition, a Node and its SB Chassis), and
// the controller process itself with the start-up fixes of the interop reference (§4).
package kubeovnrun

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vpcgw/vpcgw/internal/ovsbuild"
)

// Schema files in the kube-ovn assets directory (hack/tools/kubeovn/build.sh extracts them from
// the schema kube-ovn's models were generated from).
const (
	NBSchemaFile = "ovnnb.ovsschema"
	SBSchemaFile = "ovnsb.ovsschema"
)

// OVN is a running OVN central: NB and SB ovsdb-servers on loopback TCP and unix sockets, and
// ovn-northd translating between them. Everything runs as children of this process.
type OVN struct {
	dir    string
	nb, sb *dbServer
	northd *child
}

// dbServer is one ovsdb-server.
type dbServer struct {
	name string // "nb" or "sb"
	dir  string
	sock string
	port int
	proc *child
}

// StartOVN creates NB and SB databases in dir from kube-ovn's schemas (in kubeOVNDir) and starts
// their ovsdb-servers and ovn-northd. dir should be short: unix socket paths are limited to 108
// bytes.
func StartOVN(dir, kubeOVNDir string) (o *OVN, err error) {
	if err := ovsbuild.Check("ovsdb-server", "ovsdb-tool", "ovn-nbctl", "ovn-sbctl", "ovn-appctl"); err != nil {
		return nil, err
	}
	o = &OVN{dir: dir}
	defer func() {
		if err != nil {
			o.Stop()
		}
	}()
	if o.nb, err = startDB(dir, "nb", filepath.Join(kubeOVNDir, NBSchemaFile)); err != nil {
		return nil, err
	}
	if o.sb, err = startDB(dir, "sb", filepath.Join(kubeOVNDir, SBSchemaFile)); err != nil {
		return nil, err
	}
	if err := o.startNorthd(); err != nil {
		return nil, err
	}
	return o, nil
}

// startNorthd starts ovn-northd and waits until it is the active northd and has written SB_Global
// from NB_Global, so callers start from a working pipeline.
func (o *OVN) startNorthd() (err error) {
	ctlSock := filepath.Join(o.dir, "northd.ctl")
	logFile := filepath.Join(o.dir, "northd.log")
	o.northd, err = startChild("ovn-northd", nil,
		"--ovnnb-db=unix:"+o.nb.sock,
		"--ovnsb-db=unix:"+o.sb.sock,
		"--unixctl="+ctlSock,
		"--log-file="+logFile,
		"--no-chdir", "-vconsole:off")
	if err != nil {
		return err
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		if active(ctlSock) {
			if out, err := o.SBCtl("--bare", "--columns=_uuid", "list", "SB_Global"); err == nil && strings.TrimSpace(out) != "" {
				if nbg, err := o.NBCtl("--bare", "--columns=_uuid", "list", "NB_Global"); err == nil && strings.TrimSpace(nbg) != "" {
					return nil
				}
			}
		}
		if o.northd.exited() {
			return fmt.Errorf("ovn-northd exited: %s%s", o.northd.output(), readTail(logFile))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("ovn-northd did not become active and initialise the SB database within 15s: %s", readTail(logFile))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// active reports whether the ovn-northd behind control socket ctl holds the SB lock ("Status:
// active"): only then does it write logical flows.
func active(ctl string) bool {
	out, err := exec.Command("ovn-appctl", "-t", ctl, "--timeout=5", "status").Output()
	return err == nil && strings.Contains(string(out), "active")
}

// RestartNorthd stops ovn-northd and starts it again, as when an OVN central Pod's northd
// restarts: the logical flows in the SB database stay, and the new northd recomputes them.
func (o *OVN) RestartNorthd() error {
	o.northd.stop()
	if err := o.startNorthd(); err != nil {
		return fmt.Errorf("restarting ovn-northd: %w", err)
	}
	return nil
}

// listeningPort is ovsdb-server's log line for a "ptcp:0:..." remote once the kernel chose a port.
var listeningPort = regexp.MustCompile(`listening on port (\d+)`)

// startDB creates <dir>/<name>.db from schema and serves it on <dir>/<name>.sock and a loopback
// TCP port the kernel picks (ptcp:0), read back from the server's log: no port can clash with
// another run.
func startDB(dir, name, schema string) (*dbServer, error) {
	db := filepath.Join(dir, name+".db")
	if out, err := exec.Command("ovsdb-tool", "create", db, schema).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ovsdb-tool create %s from %s: %w: %s", db, schema, err, out)
	}
	s := &dbServer{name: name, dir: dir, sock: filepath.Join(dir, name+".sock")}
	return s, s.serve()
}

// serve starts the ovsdb-server of s's database on its socket and TCP port (the kernel's pick
// on the first start, the same port again after a restart) and waits until both answer.
func (s *dbServer) serve() error {
	db := filepath.Join(s.dir, s.name+".db")
	logFile := filepath.Join(s.dir, s.name+".log")
	logged := 0
	if b, err := os.ReadFile(logFile); err == nil {
		logged = len(b) // a restart: read only what the new server logs
	}
	var err error
	s.proc, err = startChild("ovsdb-server", nil, db,
		"--remote=punix:"+s.sock,
		"--remote=ptcp:"+strconv.Itoa(s.port)+":127.0.0.1",
		"--unixctl="+filepath.Join(s.dir, s.name+".ctl"),
		"--log-file="+logFile,
		"--no-chdir", "-vconsole:off", "-vfile:info")
	if err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if s.port == 0 {
			if b, err := os.ReadFile(logFile); err == nil && len(b) > logged {
				if m := listeningPort.FindSubmatch(b[logged:]); m != nil {
					s.port, _ = strconv.Atoi(string(m[1]))
				}
			}
		}
		if s.port != 0 && dialable("unix", s.sock) && dialable("tcp", s.tcpHostPort()) {
			return nil
		}
		if s.proc.exited() {
			return fmt.Errorf("%s ovsdb-server exited: %s%s", s.name, s.proc.output(), readTail(logFile))
		}
		if time.Now().After(deadline) {
			s.proc.stop()
			return fmt.Errorf("%s ovsdb-server did not listen within 10s: %s", s.name, readTail(logFile))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// RestartNB stops the NB ovsdb-server and starts it again on the same database, socket and port:
// every NB client (kube-ovn-controller, vpcgw's controller, ovn-northd) sees its connection cut and
// must reconnect, as when an OVN central pod restarts.
func (o *OVN) RestartNB() error {
	o.nb.proc.stop()
	if err := o.nb.serve(); err != nil {
		return fmt.Errorf("restarting the NB ovsdb-server: %w", err)
	}
	return nil
}

func (s *dbServer) tcpHostPort() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

func dialable(network, addr string) bool {
	c, err := net.DialTimeout(network, addr, time.Second)
	if err != nil {
		return false
	}
	_ = c.Close() // a probe: it connected, that was the answer
	return true
}

// NBAddr is the NB address in kube-ovn's --ovn-nb-addr form (tcp:127.0.0.1:<port>).
func (o *OVN) NBAddr() string { return "tcp:" + o.nb.tcpHostPort() }

// SBAddr is the SB address in kube-ovn's --ovn-sb-addr form (tcp:127.0.0.1:<port>).
func (o *OVN) SBAddr() string { return "tcp:" + o.sb.tcpHostPort() }

// NBSocket is the NB database's unix socket address (unix:/path).
func (o *OVN) NBSocket() string { return "unix:" + o.nb.sock }

// SBSocket is the SB database's unix socket address (unix:/path).
func (o *OVN) SBSocket() string { return "unix:" + o.sb.sock }

// NBCtl runs ovn-nbctl with args against the NB database and returns its output.
func (o *OVN) NBCtl(args ...string) (string, error) {
	return ctl("ovn-nbctl", o.NBSocket(), args)
}

// SBCtl runs ovn-sbctl with args against the SB database and returns its output.
func (o *OVN) SBCtl(args ...string) (string, error) {
	return ctl("ovn-sbctl", o.SBSocket(), args)
}

func ctl(bin, db string, args []string) (string, error) {
	full := append([]string{"--db=" + db, "--timeout=10"}, args...)
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, full...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", bin, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// Stop ends ovn-northd and both ovsdb-servers and waits for them.
func (o *OVN) Stop() {
	if o == nil {
		return
	}
	if o.northd != nil {
		o.northd.stop()
	}
	for _, s := range []*dbServer{o.nb, o.sb} {
		if s != nil && s.proc != nil {
			s.proc.stop()
		}
	}
}

// child is a process started by this package: it never outlives its parent (Pdeathsig), and
// its output is kept (the first MiB).
type child struct {
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	out  bytes.Buffer
}

func startChild(bin string, env []string, args ...string) (*child, error) {
	c := &child{cmd: exec.Command(bin, args...), done: make(chan struct{})}
	c.cmd.Env = env
	c.cmd.Stdout, c.cmd.Stderr = c, c
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	go func() { _ = c.cmd.Wait(); close(c.done) }()
	return c, nil
}

func (c *child) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.out.Len() < 1<<20 {
		c.out.Write(b)
	}
	return len(b), nil
}

func (c *child) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, then SIGKILL after 10s, and waits.
func (c *child) stop() {
	if c.exited() {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// readTail returns the last 4 KiB of a log file, for error messages.
func readTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return ""
		}
		return err.Error()
	}
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return "\n" + string(b)
}
