// Package ovsnode runs one OVN chassis of the lab, as a kube-ovn node runs it (the ovs-ovn Pod):
// Open vSwitch's own ovsdb-server, ovs-vswitchd on the userspace datapath (datapath_type=netdev,
// no kernel module) with the integration bridge, and ovn-controller connected to the lab's OVN SB
// database. Pods are plugged into the bridge as kube-ovn-cni v1.16.2 plugs them (Plug), so that
// OVN's own logical flows, computed by northd from what kube-ovn-controller writes into the NB
// database, switch and route their traffic.
//
// Everything is private to one Chassis: the database, sockets, control sockets and logs live
// under Options.Dir, and ovs-vswitchd runs in a network namespace of its own (the datapath
// namespace, Netns). The userspace datapath creates tap devices named after the bridge and
// "ovs-netdev"; two ovs-vswitchd in one namespace collide on "ovs-netdev" (the second fails with
// "creating tap device failed: Device or resource busy"), so each chassis gets its namespace, and
// two labs (two test packages) can run at once. The host ends of the Pods' veths live there
// too, where kube-ovn-cni leaves them in the node's namespace: this namespace plays the node's
// Open vSwitch side. Deleting it on Stop removes every device the chassis made.
//
// The chassis identity: ovn-controller registers the SB Chassis named SystemID with host name
// Node. kube-ovn-controller's gcChassis (pkg/controller/gc.go) deletes every SB chassis that no
// Node names in its annotation ovn.kubernetes.io/chassis (ChassisAnnotation), and every chassis
// whose host name is not its Node's name: the Node must carry
// ovn.kubernetes.io/chassis=<SystemID> (kube-ovn-cni writes it from the OVS system-id,
// cmd/daemon/cniserver.go initChassisAnno). A chassis that already holds the same encap
// (geneve, EncapIP) in the SB database, such as the one kubeovnrun.AddNode pre-makes with
// ovn-sbctl chassis-add, blocks ovn-controller's registration (the Encap table's (type, ip)
// index), unless its name is SystemID (ovn-controller then adopts the row): Options.TakeOverEncap
// deletes such chassis first.
//
// Faults: RestartOVNController and RestartVswitchd. The daemons are children of this process,
// forked from a thread that lives as long as the process, with Pdeathsig: they never outlive it.
package ovsnode

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vpcgw/vpcgw/internal/netlab"
	"github.com/vpcgw/vpcgw/internal/ovsbuild"
)

// DefaultBridge is the integration bridge's name, kube-ovn's (and the name kube-ovn-cni's
// IsUserspaceDataPath looks up).
const DefaultBridge = "br-int"

// ChassisAnnotation is the Node annotation kube-ovn-cni writes with the chassis's system-id, and
// kube-ovn-controller's chassis GC reads.
const ChassisAnnotation = "ovn.kubernetes.io/chassis"

// DefaultWaitBeforeClear is the lab's ovn-ofctrl-wait-before-clear (Options.WaitBeforeClear):
// enough for ovn-controller's full recompute at the lab's size on a loaded 2-core machine.
const DefaultWaitBeforeClear = 200 * time.Millisecond

// programs are what a chassis runs besides kube-ovn's OVS and OVN build (ovsbuild), with the
// Debian package that has them.
var programs = []struct{ bin, pkg string }{
	{"ip", "iproute2"},
	{"ethtool", "ethtool"},
	{"arping", "iputils-arping"},
}

// Available reports what this machine lacks to run a chassis (root, kube-ovn's OVS and OVN build
// on PATH, a program, the schema), or nil.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("an OVS chassis needs root (network namespaces, tap devices)")
	}
	if err := ovsbuild.Check("ovsdb-tool", "ovsdb-server", "ovs-vsctl", "ovs-vswitchd", "ovn-controller", "ovn-appctl", "ovn-sbctl"); err != nil {
		return err
	}
	var missing []string
	pkgs := map[string]bool{}
	for _, b := range programs {
		if _, err := exec.LookPath(b.bin); err != nil {
			missing = append(missing, b.bin)
			pkgs[b.pkg] = true
		}
	}
	if len(missing) > 0 {
		var names []string
		for p := range pkgs {
			names = append(names, p)
		}
		return fmt.Errorf("missing %s (hack/install-deps.sh, or apt-get install -y %s)", strings.Join(missing, ", "), strings.Join(names, " "))
	}
	if _, err := ovsbuild.Schema("vswitch.ovsschema"); err != nil {
		return err
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return errors.New("no /dev/net/tun: the userspace datapath needs tap devices")
	}
	return nil
}

// Options describe one chassis.
type Options struct {
	// Dir holds the chassis's files: <Dir>/ovs (conf.db, db.sock, vswitchd.ctl,
	// <bridge>.mgmt, logs) and <Dir>/ovn (ovn-controller's log and control socket). Keep it
	// short: unix socket paths must stay under 108 bytes. Start makes the two directories and
	// starts from a new database; Dir and the logs stay after Stop.
	Dir string
	// Node is the Kubernetes node the chassis stands for: Open_vSwitch external_ids:hostname,
	// and so the SB Chassis's hostname.
	Node string
	// SystemID names the SB Chassis (external_ids:system-id). Default: a random UUID, as
	// ovs-ctl writes to system-id.conf on a kube-ovn node.
	SystemID string
	// SBAddr is ovn-remote, the SB database: "tcp:127.0.0.1:<port>" or "unix:<path>".
	SBAddr string
	// EncapIP is ovn-encap-ip (default 127.0.0.1, the lab node's address). A single chassis
	// builds no tunnel.
	EncapIP string
	// Bridge is the integration bridge (default br-int); ovn-bridge names it for ovn-controller.
	Bridge string
	// NetnsPrefix starts the datapath namespace's name (default "ovs"; the name is
	// "<prefix><6 random hex>-dp").
	NetnsPrefix string
	// TakeOverEncap deletes, before ovn-controller starts, every other SB chassis that holds
	// the encap (geneve, EncapIP): ovn-controller cannot register while one does.
	TakeOverEncap bool
	// WaitBeforeClear is ovn-ofctrl-wait-before-clear: how long a starting ovn-controller
	// computes its flows before it replaces those in ovs-vswitchd. Default
	// DefaultWaitBeforeClear; negative: not set (OVN's and kube-ovn's default, 0). Unset, every
	// ovn-controller restart clears the flows and installs them again a few milliseconds later,
	// and traffic in that gap is lost (about one request per restart at 100 requests/s here).
	WaitBeforeClear time.Duration
	// VswitchSchema is the Open_vSwitch schema file (default: the build's, ovsbuild.Schema).
	VswitchSchema string
	// Logf, when set, receives a line per step (start-up, restarts).
	Logf func(format string, args ...any)
}

// Chassis is a running chassis.
type Chassis struct {
	opts           Options
	ovsDir, ovnDir string
	env            []string
	net            *netlab.Lab
	dpns           string
	startup        time.Duration

	mu         sync.Mutex // guards the daemons (restarts replace them)
	db         *daemon
	vswitchd   *daemon
	controller *daemon
	stopped    bool
}

// maxSocketPath is the longest unix socket path (sun_path is 108 bytes with its NUL).
const maxSocketPath = 107

// Start starts a chassis: OVS's ovsdb-server on a new database, ovs-vswitchd in the datapath
// namespace, the bridge (datapath_type=netdev, fail-mode secure, in-band control off), the
// Open_vSwitch external_ids ovn-controller reads (system-id, hostname, ovn-remote,
// ovn-encap-type geneve, ovn-encap-ip, ovn-bridge, ovn-bridge-datapath-type netdev, and
// ovn-ofctrl-wait-before-clear), then ovn-controller. It returns once ovn-controller registered the chassis in the SB database.
// Every process is a child of this one (it dies with it); Stop ends them.
func Start(ctx context.Context, opts Options) (c *Chassis, err error) {
	begin := time.Now()
	if err := Available(); err != nil {
		return nil, err
	}
	if opts.Dir == "" || opts.Node == "" || opts.SBAddr == "" {
		return nil, errors.New("ovsnode: Options.Dir, Node and SBAddr are required")
	}
	if opts.EncapIP == "" {
		opts.EncapIP = "127.0.0.1"
	}
	if net.ParseIP(opts.EncapIP) == nil {
		return nil, fmt.Errorf("ovsnode: EncapIP %q is not an IP address", opts.EncapIP)
	}
	if opts.Bridge == "" {
		opts.Bridge = DefaultBridge
	}
	if len(opts.Bridge) > 15 {
		return nil, fmt.Errorf("ovsnode: bridge name %q is longer than an interface name (15)", opts.Bridge)
	}
	if opts.NetnsPrefix == "" {
		opts.NetnsPrefix = "ovs"
	}
	if opts.VswitchSchema == "" {
		if opts.VswitchSchema, err = ovsbuild.Schema("vswitch.ovsschema"); err != nil {
			return nil, err
		}
	}
	if opts.WaitBeforeClear == 0 {
		opts.WaitBeforeClear = DefaultWaitBeforeClear
	}
	if opts.SystemID == "" {
		if opts.SystemID, err = newUUID(); err != nil {
			return nil, err
		}
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	c = &Chassis{opts: opts, ovsDir: filepath.Join(dir, "ovs"), ovnDir: filepath.Join(dir, "ovn")}
	// The longest sockets: vswitchd's <bridge>.snoop and ovn-controller's
	// ovn-controller.<pid>.ctl (pid up to 7 digits).
	for _, p := range []string{filepath.Join(c.ovsDir, opts.Bridge+".snoop"), filepath.Join(c.ovnDir, "ovn-controller.4194304.ctl")} {
		if len(p) > maxSocketPath {
			return nil, fmt.Errorf("ovsnode: Dir %s is too long: the socket %s would pass the 107-byte limit of unix socket paths", dir, p)
		}
	}
	for _, d := range []string{c.ovsDir, c.ovnDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("ovsnode: %w", err)
		}
	}
	c.env = []string{
		"OVS_RUNDIR=" + c.ovsDir, "OVS_LOGDIR=" + c.ovsDir, "OVS_DBDIR=" + c.ovsDir,
		"OVN_RUNDIR=" + c.ovnDir, "OVN_LOGDIR=" + c.ovnDir, "OVN_DBDIR=" + c.ovnDir,
	}
	defer func() {
		if err != nil {
			_ = c.Stop()
			c = nil
		}
	}()

	if c.net, err = netlab.New(opts.NetnsPrefix); err != nil {
		return c, fmt.Errorf("ovsnode: %w", err)
	}
	if c.dpns, err = c.net.AddNetns("dp"); err != nil {
		return c, fmt.Errorf("ovsnode: datapath namespace: %w", err)
	}

	// OVS's database.
	confDB := filepath.Join(c.ovsDir, "conf.db")
	if err := os.Remove(confDB); err != nil && !errors.Is(err, os.ErrNotExist) {
		return c, fmt.Errorf("ovsnode: %w", err)
	}
	if _, err := netlab.Run("ovsdb-tool", "create", confDB, opts.VswitchSchema); err != nil {
		return c, fmt.Errorf("ovsnode: %w", err)
	}
	if err := c.startDB(ctx); err != nil {
		return c, err
	}
	c.logf("ovsdb-server up (%s)", time.Since(begin).Round(time.Millisecond))

	// ovs-vswitchd, then the bridge and what ovn-controller reads, in one transaction that
	// returns once vswitchd applied it (no --no-wait): the bridge exists when it returns.
	if err := c.startVswitchd(); err != nil {
		return c, err
	}
	br := opts.Bridge
	ids := []string{
		"external_ids:system-id=" + opts.SystemID,
		"external_ids:hostname=" + opts.Node,
		"external_ids:ovn-remote=" + opts.SBAddr,
		"external_ids:ovn-encap-type=geneve",
		"external_ids:ovn-encap-ip=" + opts.EncapIP,
		"external_ids:ovn-bridge=" + br,
		"external_ids:ovn-bridge-datapath-type=netdev",
	}
	if opts.WaitBeforeClear > 0 {
		ids = append(ids, fmt.Sprintf("external_ids:ovn-ofctrl-wait-before-clear=%d", opts.WaitBeforeClear.Milliseconds()))
	}
	args := append([]string{"--", "init", "--", "set", "Open_vSwitch", "."}, ids...)
	args = append(args, "--", "--may-exist", "add-br", br,
		"--", "set", "Bridge", br, "datapath_type=netdev", "fail-mode=secure", "other-config:disable-in-band=true")
	_, err = c.vsctlWatch(ctx, 30*time.Second, []*daemon{c.vswitchd, c.db}, args...)
	if err != nil {
		return c, fmt.Errorf("ovsnode: configuring Open vSwitch: %w%s", err, readTail(c.logFile("ovs-vswitchd")))
	}
	c.logf("ovs-vswitchd up with bridge %s in %s (%s)", br, c.dpns, time.Since(begin).Round(time.Millisecond))

	if opts.TakeOverEncap {
		if err := c.takeOverEncap(ctx); err != nil {
			return c, err
		}
	}
	if err := c.startController(ctx); err != nil {
		return c, err
	}
	c.startup = time.Since(begin)
	c.logf("ovn-controller registered chassis %s (node %s) at %s (%s)", opts.SystemID, opts.Node, opts.SBAddr, c.startup.Round(time.Millisecond))
	return c, nil
}

func (c *Chassis) logf(format string, args ...any) {
	if c.opts.Logf != nil {
		c.opts.Logf("ovsnode: "+format, args...)
	}
}

func (c *Chassis) dbSock() string      { return filepath.Join(c.ovsDir, "db.sock") }
func (c *Chassis) vswitchdCtl() string { return filepath.Join(c.ovsDir, "ovs-vswitchd.ctl") }
func (c *Chassis) logFile(name string) string {
	if name == "ovn-controller" {
		return filepath.Join(c.ovnDir, name+".log")
	}
	return filepath.Join(c.ovsDir, name+".log")
}

// keep records d as the running daemon in *slot, unless Stop came meanwhile (a restart racing
// with Stop): then d is stopped at once.
func (c *Chassis) keep(slot **daemon, d *daemon) error {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		d.stop(syscall.SIGTERM, 10*time.Second)
		return errors.New("ovsnode: the chassis is stopped")
	}
	*slot = d
	c.mu.Unlock()
	return nil
}

// startDB starts OVS's ovsdb-server on <ovsDir>/conf.db and waits until its socket answers.
func (c *Chassis) startDB(ctx context.Context) error {
	d, err := startDaemon("ovsdb-server", c.env, "ovsdb-server", filepath.Join(c.ovsDir, "conf.db"),
		"--remote=punix:"+c.dbSock(),
		"--unixctl="+filepath.Join(c.ovsDir, "ovsdb-server.ctl"),
		"--log-file="+c.logFile("ovsdb-server"),
		"--no-chdir", "-vconsole:off", "-vfile:info")
	if err != nil {
		return err
	}
	if err := c.keep(&c.db, d); err != nil {
		return err
	}
	return poll(ctx, 10*time.Second, "OVS ovsdb-server to listen on "+c.dbSock(), []*daemon{d}, c.logFile("ovsdb-server"), func() bool {
		conn, err := net.DialTimeout("unix", c.dbSock(), time.Second)
		if err != nil {
			return false
		}
		_ = conn.Close() // a probe: it connected, that was the answer
		return true
	})
}

// startVswitchd starts ovs-vswitchd in the datapath namespace (`ip netns exec` execs it: the
// child's pid is vswitchd's).
func (c *Chassis) startVswitchd() error {
	d, err := startDaemon("ovs-vswitchd", c.env, "ip", "netns", "exec", c.dpns, "ovs-vswitchd", "unix:"+c.dbSock(),
		"--unixctl="+c.vswitchdCtl(),
		"--log-file="+c.logFile("ovs-vswitchd"),
		"--no-chdir", "-vconsole:off", "-vfile:info")
	if err != nil {
		return err
	}
	if err := c.keep(&c.vswitchd, d); err != nil {
		return err
	}
	return nil
}

// startController starts ovn-controller and waits until the SB database has its chassis.
func (c *Chassis) startController(ctx context.Context) error {
	d, err := startDaemon("ovn-controller", c.env, "ovn-controller", "unix:"+c.dbSock(),
		"--log-file="+c.logFile("ovn-controller"),
		"--no-chdir", "-vconsole:off", "-vfile:info")
	if err != nil {
		return err
	}
	if err := c.keep(&c.controller, d); err != nil {
		return err
	}
	// ovn-controller creates the Chassis_Private row itself (ovn-sbctl chassis-add makes only
	// Chassis and Encap, which ovn-controller adopts when the name is its system-id).
	if _, err := c.waitCmd(ctx, 30*time.Second, []*daemon{d}, "ovn-sbctl", "--db="+c.opts.SBAddr, "wait-until", "Chassis_Private", c.opts.SystemID); err != nil {
		log := readTail(c.logFile("ovn-controller"))
		hint := ""
		if strings.Contains(log, `"Encap" table to have identical values`) {
			hint = fmt.Sprintf(" (another SB chassis holds encap geneve %s: delete it first, Options.TakeOverEncap)", c.opts.EncapIP)
		}
		return fmt.Errorf("ovsnode: ovn-controller did not register chassis %s in %s%s: %w%s", c.opts.SystemID, c.opts.SBAddr, hint, err, log)
	}
	return poll(ctx, 10*time.Second, "ovn-controller's control socket", []*daemon{d}, c.logFile("ovn-controller"), func() bool {
		_, err := c.controllerCtl(ctx, "version")
		return err == nil
	})
}

// controllerCtl runs `ovn-appctl -t <ovn-controller's socket> args...`. ovn-controller 23.03 has
// no --unixctl: its socket is <OVN_RUNDIR>/ovn-controller.<pid>.ctl.
func (c *Chassis) controllerCtl(ctx context.Context, args ...string) (string, error) {
	c.mu.Lock()
	d := c.controller
	c.mu.Unlock()
	if d == nil {
		return "", errors.New("ovn-controller is not running")
	}
	ctl := filepath.Join(c.ovnDir, fmt.Sprintf("ovn-controller.%d.ctl", d.pid()))
	return c.run(ctx, 10*time.Second, append([]string{"ovn-appctl", "-t", ctl, "--timeout=10"}, args...)...)
}

// takeOverEncap deletes the other SB chassis that hold (geneve, EncapIP).
func (c *Chassis) takeOverEncap(ctx context.Context) error {
	out, err := c.run(ctx, 15*time.Second, "ovn-sbctl", "--db="+c.opts.SBAddr, "--timeout=10",
		"--bare", "--columns=chassis_name", "find", "Encap", "type=geneve", "ip="+quote(c.opts.EncapIP))
	if err != nil {
		return fmt.Errorf("ovsnode: looking up SB chassis with encap %s: %w", c.opts.EncapIP, err)
	}
	for _, name := range strings.Fields(out) {
		if name == c.opts.SystemID {
			continue
		}
		if _, err := c.run(ctx, 15*time.Second, "ovn-sbctl", "--db="+c.opts.SBAddr, "--timeout=10", "--if-exists", "chassis-del", name); err != nil {
			return fmt.Errorf("ovsnode: deleting SB chassis %s (encap geneve %s): %w", name, c.opts.EncapIP, err)
		}
		c.logf("deleted SB chassis %s: it held encap geneve %s", name, c.opts.EncapIP)
	}
	return nil
}

// quote makes s an OVSDB string literal for ovn-sbctl/ovs-vsctl arguments.
func quote(s string) string { return `"` + s + `"` }

// SystemID is the chassis name ovn-controller registered in the SB database. The Node
// (Options.Node) must carry the annotation ovn.kubernetes.io/chassis=<SystemID>, or
// kube-ovn-controller's chassis GC deletes the chassis.
func (c *Chassis) SystemID() string { return c.opts.SystemID }

// Node is the node name (the chassis's hostname).
func (c *Chassis) Node() string { return c.opts.Node }

// Bridge is the integration bridge's name.
func (c *Chassis) Bridge() string { return c.opts.Bridge }

// EncapIP is ovn-encap-ip.
func (c *Chassis) EncapIP() string { return c.opts.EncapIP }

// Netns is the datapath namespace: where ovs-vswitchd runs, with its tap devices (the bridge's,
// "ovs-netdev") and the host ends of the plugged veths.
func (c *Chassis) Netns() string { return c.dpns }

// DBSocket is OVS's database ("unix:<path>"), for ovs-vsctl --db.
func (c *Chassis) DBSocket() string { return "unix:" + c.dbSock() }

// Startup is how long Start took, from its call to the chassis registered.
func (c *Chassis) Startup() time.Duration { return c.startup }

// LogFiles are the daemons' log files by daemon name.
func (c *Chassis) LogFiles() map[string]string {
	return map[string]string{
		"ovsdb-server":   c.logFile("ovsdb-server"),
		"ovs-vswitchd":   c.logFile("ovs-vswitchd"),
		"ovn-controller": c.logFile("ovn-controller"),
	}
}

// VSCtl runs ovs-vsctl against the chassis's database (waiting for ovs-vswitchd to apply a
// change, as ovs-vsctl does without --no-wait) and returns its output.
func (c *Chassis) VSCtl(ctx context.Context, args ...string) (string, error) {
	return c.vsctl(ctx, 30*time.Second, args...)
}

func (c *Chassis) vsctl(ctx context.Context, timeout time.Duration, args ...string) (string, error) {
	return c.run(ctx, timeout, append([]string{"ovs-vsctl", "--db=" + c.DBSocket()}, args...)...)
}

func (c *Chassis) vsctlWatch(ctx context.Context, timeout time.Duration, watch []*daemon, args ...string) (string, error) {
	return c.waitCmd(ctx, timeout, watch, append([]string{"ovs-vsctl", "--db=" + c.DBSocket()}, args...)...)
}

// Check returns an error naming every daemon that has exited (while the chassis is not
// stopped), with what it printed and the tail of its log; nil when all three run.
func (c *Chassis) Check() error {
	c.mu.Lock()
	ds := []*daemon{c.db, c.vswitchd, c.controller}
	stopped := c.stopped
	c.mu.Unlock()
	if stopped {
		return errors.New("ovsnode: the chassis is stopped")
	}
	var errs []error
	for _, d := range ds {
		if d != nil && d.exited() {
			errs = append(errs, fmt.Errorf("%w%s", d.exitError(), readTail(c.logFile(d.name))))
		}
	}
	return errors.Join(errs...)
}

// Usage reads what each running daemon costs (CPU time, RSS) from /proc.
func (c *Chassis) Usage() ([]Usage, error) {
	c.mu.Lock()
	ds := []*daemon{c.db, c.vswitchd, c.controller}
	c.mu.Unlock()
	var out []Usage
	var errs []error
	for _, d := range ds {
		if d == nil || d.exited() {
			continue
		}
		u, err := readUsage(d.name, d.pid())
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", d.name, err))
			continue
		}
		out = append(out, u)
	}
	return out, errors.Join(errs...)
}

// Diagnostics is what helps when a port does not forward: `ovs-vsctl show`, the bridge's
// OpenFlow port list and the tails of the daemons' logs.
func (c *Chassis) Diagnostics(ctx context.Context) string {
	var b strings.Builder
	if out, err := c.vsctl(ctx, 5*time.Second, "show"); err == nil {
		b.WriteString("ovs-vsctl show:\n" + out)
	} else {
		b.WriteString("ovs-vsctl show: " + err.Error() + "\n")
	}
	for _, name := range []string{"ovsdb-server", "ovs-vswitchd", "ovn-controller"} {
		b.WriteString("--- " + name + " log (tail):" + readTail(c.logFile(name)) + "\n")
	}
	return b.String()
}

// Stop ends ovn-controller, ovs-vswitchd and ovsdb-server (SIGTERM; ovn-controller keeps its
// SB chassis, as a node's restart does) and deletes the datapath namespace with every device
// in it. The files under Dir stay. Stop can be called more than once.
func (c *Chassis) Stop() error {
	c.mu.Lock()
	c.stopped = true
	ds := []*daemon{c.controller, c.vswitchd, c.db}
	c.mu.Unlock()
	for _, d := range ds {
		d.stop(syscall.SIGTERM, 10*time.Second)
	}
	if c.net != nil {
		if err := c.net.Cleanup(); err != nil {
			return fmt.Errorf("ovsnode: deleting the datapath namespace: %w", err)
		}
	}
	return nil
}

// run runs argv bounded by ctx and timeout and returns its stdout.
func (c *Chassis) run(ctx context.Context, timeout time.Duration, argv ...string) (string, error) {
	return c.waitCmd(ctx, timeout, nil, argv...)
}

// waitCmd runs argv, bounded by ctx and timeout, and gives up early when one of watch exits
// (a command waiting for a dead daemon would wait until its timeout).
func (c *Chassis) waitCmd(ctx context.Context, timeout time.Duration, watch []*daemon, argv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), c.env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("%s: %w", argv[0], err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var dead *daemon
	for _, d := range watch {
		d := d
		go func() {
			select {
			case <-d.done:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	err := <-done
	for _, d := range watch {
		if d.exited() {
			dead = d
		}
	}
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		switch {
		case dead != nil:
			return stdout.String(), fmt.Errorf("%s: %w", strings.Join(argv, " "), dead.exitError())
		case ctx.Err() != nil:
			return stdout.String(), fmt.Errorf("%s: gave up: %w %s", strings.Join(argv, " "), ctx.Err(), msg)
		}
		return stdout.String(), fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, msg)
	}
	return stdout.String(), nil
}

// poll checks cond every 20 ms until it holds, ctx ends, timeout passes or one of watch exits.
func poll(ctx context.Context, timeout time.Duration, what string, watch []*daemon, log string, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return nil
		}
		for _, d := range watch {
			if d.exited() {
				return fmt.Errorf("ovsnode: waiting for %s: %w%s", what, d.exitError(), readTail(log))
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("ovsnode: no %s within %s%s", what, timeout, readTail(log))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ovsnode: waiting for %s: %w", what, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// readTail returns the last 3 KiB of a log file, for error messages.
func readTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > 3072 {
		b = b[len(b)-3072:]
	}
	return "\n" + path + ":\n" + string(b)
}

func newUUID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}
