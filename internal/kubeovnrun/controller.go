package kubeovnrun

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// LeaseName is the Lease (in Namespace) kube-ovn-controller holds while it is the leader
// (cmd/controller/controller.go, ovnLeaderResource).
const LeaseName = "kube-ovn-controller"

// Options says how to run kube-ovn-controller.
type Options struct {
	// KubeOVNDir is the kube-ovn assets directory ($VPCGW_KUBEOVN) holding kube-ovn-controller.
	KubeOVNDir string
	// Dir is a directory of this run: the kubeconfig and kube-ovn's log directory go there.
	Dir string
	// Kubeconfig is an admin (system:masters) kubeconfig of the API server.
	Kubeconfig []byte
	// NBAddr and SBAddr are the OVN databases, "tcp:127.0.0.1:<port>" (OVN.NBAddr, OVN.SBAddr).
	NBAddr, SBAddr string
	// NodeName is the node the controller runs on (NODE_NAME).
	NodeName string
	// PodName is the controller's pod name and its leader-election identity (POD_NAME);
	// default "kube-ovn-controller-0".
	PodName string
	// ServiceCIDR is the API server's --service-cluster-ip-range (ServiceCIDR(env)).
	ServiceCIDR string
	// DefaultCIDR and NodeSwitchCIDR are the ovn-default and join subnets; defaults are kube-ovn's
	// own, 10.16.0.0/16 and 100.64.0.0/16.
	DefaultCIDR, NodeSwitchCIDR string
	// ExtraArgs are appended to the controller's flags.
	ExtraArgs []string
	// HelperExe is the executable that calls MaybeRunMountHelper first thing (default: this
	// process's own executable, e.g. the test binary whose TestMain calls it).
	HelperExe string
}

// Controller is a running kube-ovn-controller.
type Controller struct {
	opts    Options
	bin     string
	kubecfg string
	logDir  string
	port    int

	mu        sync.Mutex
	proc      *exec.Cmd
	done      chan struct{}
	startedAt time.Time // of the running process
	logs      bytes.Buffer
	// gen counts launches and stops: the supervisor of a process restarts it only while no
	// launch or stop came after it.
	gen int
}

// restartBackoff is how long the lab waits before it starts kube-ovn-controller again after it
// exited by itself (its Deployment's kubelet restarts it; kube-ovn exits when it loses its
// Lease, as during an API server outage longer than its renew deadline).
const restartBackoff = 2 * time.Second

// maxLogs bounds the captured output (kube-ovn logs every reconcile).
const maxLogs = 64 << 20

// Start runs kube-ovn-controller with opts and returns once its health endpoint answers (it may
// still be waiting for its Lease: see WaitLeading).
func Start(opts Options) (*Controller, error) {
	if opts.PodName == "" {
		opts.PodName = "kube-ovn-controller-0"
	}
	if opts.DefaultCIDR == "" {
		opts.DefaultCIDR = DefaultCIDR
	}
	if opts.NodeSwitchCIDR == "" {
		opts.NodeSwitchCIDR = "100.64.0.0/16"
	}
	switch {
	case opts.Dir == "", len(opts.Kubeconfig) == 0, opts.NodeName == "", opts.ServiceCIDR == "":
		return nil, errors.New("kubeovnrun: Options need Dir, Kubeconfig, NodeName and ServiceCIDR")
	case !strings.HasPrefix(opts.NBAddr, "tcp:") || !strings.HasPrefix(opts.SBAddr, "tcp:"):
		return nil, fmt.Errorf("kubeovnrun: kube-ovn needs tcp: OVN addresses, got NB %q SB %q", opts.NBAddr, opts.SBAddr)
	}
	if opts.HelperExe == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("kubeovnrun: finding the mount helper: %w", err)
		}
		opts.HelperExe = exe
	}
	c := &Controller{
		opts:    opts,
		bin:     filepath.Join(opts.KubeOVNDir, ControllerBinary),
		kubecfg: filepath.Join(opts.Dir, "kube-ovn-controller.kubeconfig"),
		// Named like kube-ovn's directory: the helper mounts its parent on /var/log when the
		// host has no /var/log/kube-ovn.
		logDir: filepath.Join(opts.Dir, "log", filepath.Base(kubeOVNLogDir)),
	}
	if st, err := os.Stat(c.bin); err != nil || st.IsDir() {
		return nil, fmt.Errorf("kubeovnrun: %s not found in %q (hack/tools/kubeovn/build.sh builds it)", ControllerBinary, opts.KubeOVNDir)
	}
	if err := os.MkdirAll(c.logDir, 0o755); err != nil {
		return nil, fmt.Errorf("kubeovnrun: %w", err)
	}
	if err := os.WriteFile(c.kubecfg, opts.Kubeconfig, 0o600); err != nil {
		return nil, fmt.Errorf("kubeovnrun: writing kubeconfig: %w", err)
	}
	if err := c.launch(); err != nil {
		return nil, err
	}
	return c, nil
}

// launch starts the process on a free port (another port on a clash) and waits for its health
// endpoint.
func (c *Controller) launch() error {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		if c.port == 0 || attempt > 0 {
			p, err := freePort()
			if err != nil {
				return err
			}
			c.port = p
		}
		err := c.launchOnce()
		if err == nil {
			return nil
		}
		lastErr = err
		if !strings.Contains(err.Error(), "address already in use") {
			return err
		}
	}
	return lastErr
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("kubeovnrun: finding a free port: %w", err)
	}
	defer func() { _ = l.Close() }() // only its port was wanted
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (c *Controller) args() []string {
	return append([]string{
		c.bin,
		"--kubeconfig=" + c.kubecfg,
		"--ovn-nb-addr=" + c.opts.NBAddr,
		"--ovn-sb-addr=" + c.opts.SBAddr,
		"--default-cidr=" + c.opts.DefaultCIDR,
		"--node-switch-cidr=" + c.opts.NodeSwitchCIDR,
		"--service-cluster-ip-range=" + c.opts.ServiceCIDR,
		"--enable-lb-svc=false",
		// Only silences a warning about a ConfigMap this harness does not install.
		"--enable-eip-snat=false",
		// The only port it serves: health and metrics on POD_IPS (below), pprof off.
		"--pprof-port=" + strconv.Itoa(c.port),
		"--logtostderr=true",
	}, c.opts.ExtraArgs...)
}

func (c *Controller) launchOnce() error {
	cmd := exec.Command(c.opts.HelperExe, c.args()...)
	cmd.Env = append(os.Environ(),
		helperEnv+"="+c.logDir,
		"POD_NAME="+c.opts.PodName,
		"POD_NAMESPACE="+Namespace,
		"NODE_NAME="+c.opts.NodeName,
		// syncFinalizers uses controller-runtime's GetConfigOrDie, which ignores --kubeconfig.
		"KUBECONFIG="+c.kubecfg,
		// Serve health and metrics on loopback, not 0.0.0.0 (pkg/util/net.go).
		"ENABLE_BIND_LOCAL_IP=true",
		"POD_IPS=127.0.0.1",
	)
	w := &logWriter{c: c}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	c.mu.Lock()
	fmt.Fprintf(&c.logs, "=== kubeovnrun: starting %s (pod %s, port %d) at %s\n", ControllerBinary, c.opts.PodName, c.port, time.Now().UTC().Format(time.RFC3339Nano))
	c.mu.Unlock()
	// Lease times have microsecond precision.
	started := time.Now().Truncate(time.Microsecond)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("kubeovnrun: starting %s: %w", ControllerBinary, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	c.mu.Lock()
	c.proc, c.done, c.startedAt = cmd, done, started
	c.gen++
	gen := c.gen
	mark := c.logs.Len()
	c.mu.Unlock()
	go c.supervise(done, gen)

	url := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)) + "/healthz"
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if resp, err := hc.Get(url); err == nil {
			_ = resp.Body.Close() // only the status is wanted
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-done:
			c.mu.Lock()
			c.gen++ // a failed start is the caller's to retry or report, not the supervisor's
			c.mu.Unlock()
			return fmt.Errorf("kubeovnrun: %s exited (%s) during start-up: %s", ControllerBinary, cmd.ProcessState, c.logsSince(mark, 4096))
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.Stop()
			return fmt.Errorf("kubeovnrun: %s did not answer %s within 60s: %s", ControllerBinary, url, c.logsSince(mark, 4096))
		}
	}
}

// supervise starts the controller again when the process of launch gen exits by itself, as the
// kubelet restarts a crashed container.
func (c *Controller) supervise(done chan struct{}, gen int) {
	<-done
	time.Sleep(restartBackoff)
	c.mu.Lock()
	current := c.gen == gen
	if current {
		fmt.Fprintf(&c.logs, "=== kubeovnrun: %s exited by itself; starting it again, as its Deployment would\n", ControllerBinary)
	}
	c.mu.Unlock()
	if !current {
		return
	}
	if err := c.launch(); err != nil {
		c.mu.Lock()
		fmt.Fprintf(&c.logs, "=== kubeovnrun: starting %s again: %v\n", ControllerBinary, err)
		c.mu.Unlock()
	}
}

type logWriter struct{ c *Controller }

func (w *logWriter) Write(b []byte) (int, error) {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	if w.c.logs.Len() < maxLogs {
		w.c.logs.Write(b)
	}
	return len(b), nil
}

// logsSince returns the output from offset mark on, its last limit bytes.
func (c *Controller) logsSince(mark, limit int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.logs.Bytes()[mark:]
	if len(b) > limit {
		b = b[len(b)-limit:]
	}
	return string(b)
}

// Logs is everything the controller printed, across restarts (each start marked by a
// "=== kubeovnrun: starting" line), up to 64 MiB.
func (c *Controller) Logs() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.logs.String()
}

// LogLines returns the lines of Logs that contain substr.
func (c *Controller) LogLines(substr string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(c.Logs()))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), substr) {
			out = append(out, sc.Text())
		}
	}
	return out
}

// LogFile is where kube-ovn-controller's hard-coded log file really is: in Options.Dir, mounted
// at /var/log/kube-ovn only in the controller's own mount namespace.
func (c *Controller) LogFile() string { return filepath.Join(c.logDir, ControllerBinary+".log") }

// Port is the controller's health and metrics port on 127.0.0.1.
func (c *Controller) Port() int { return c.port }

// PID is the process id of the running controller (0 when stopped).
func (c *Controller) PID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil || c.proc.Process == nil || c.exitedLocked() {
		return 0
	}
	return c.proc.Process.Pid
}

// Exited reports whether the controller process is gone.
func (c *Controller) Exited() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exitedLocked()
}

func (c *Controller) exitedLocked() bool {
	if c.done == nil {
		return true
	}
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// RSS is the controller's resident set size in bytes, from /proc.
func (c *Controller) RSS() (int64, error) {
	pid := c.PID()
	if pid == 0 {
		return 0, errors.New("kubeovnrun: kube-ovn-controller is not running")
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, fmt.Errorf("kubeovnrun: %w", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("kubeovnrun: parsing %q: %w", l, err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("kubeovnrun: no VmRSS in /proc status")
}

// WaitLeading waits until the running controller process holds kube-ovn's leader Lease: only
// then does it reconcile. The Lease must name PodName and have been renewed since this process
// started (a killed predecessor with the same identity leaves a Lease that names it too).
func (c *Controller) WaitLeading(ctx context.Context, k client.Client) error {
	c.mu.Lock()
	started := c.startedAt
	c.mu.Unlock()
	for {
		var l coordinationv1.Lease
		err := k.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: LeaseName}, &l)
		if err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == c.opts.PodName &&
			l.Spec.RenewTime != nil && !l.Spec.RenewTime.Time.Before(started) {
			return nil
		}
		if c.Exited() {
			return fmt.Errorf("kubeovnrun: %s exited before leading", ControllerBinary)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubeovnrun: waiting for Lease %s/%s held by %s: %w (last error: %v)", Namespace, LeaseName, c.opts.PodName, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WaitReady waits until the running controller leads (WaitLeading) and has finished its start:
// the default Vpc is standby and the default and join logical switches are in the NB DB, which
// kube-ovn-controller waits for before it starts its other workers, among them those that
// handle deleted Subnets, Pods and Nodes (v1.16.2 pkg/controller/controller.go:1313-1321). A test
// that starts before then sees some of kube-ovn's reconciles and not others.
func (c *Controller) WaitReady(ctx context.Context, k client.Client, o *OVN) error {
	if err := c.WaitLeading(ctx, k); err != nil {
		return err
	}
	for {
		why := c.notReady(ctx, k, o)
		if why == "" {
			return nil
		}
		if c.Exited() {
			return fmt.Errorf("kubeovnrun: %s exited before it was ready (%s)", ControllerBinary, why)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubeovnrun: waiting for %s to finish its start: %w (%s)", ControllerBinary, ctx.Err(), why)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// notReady says what kube-ovn-controller's start still waits for, or "" when nothing.
func (c *Controller) notReady(ctx context.Context, k client.Client, o *OVN) string {
	vpc := &unstructured.Unstructured{}
	vpc.SetAPIVersion("kubeovn.io/v1")
	vpc.SetKind("Vpc")
	if err := k.Get(ctx, client.ObjectKey{Name: DefaultVpc}, vpc); err != nil {
		return fmt.Sprintf("reading Vpc %s: %v", DefaultVpc, err)
	}
	if standby, _, _ := unstructured.NestedBool(vpc.Object, "status", "standby"); !standby {
		return "Vpc " + DefaultVpc + " is not standby"
	}
	out, err := o.NBCtl("--bare", "--columns=name", "list", "Logical_Switch")
	if err != nil {
		return fmt.Sprintf("listing logical switches: %v", err)
	}
	have := strings.Fields(out)
	for _, ls := range []string{DefaultLogicalSwitch, JoinSwitch} {
		if !slices.Contains(have, ls) {
			return "no logical switch " + ls
		}
	}
	return ""
}

// Stop ends the controller (SIGTERM: it releases its Lease; SIGKILL after 15s) and waits.
func (c *Controller) Stop() {
	c.mu.Lock()
	proc, done := c.proc, c.done
	c.gen++ // its supervisor must not start it again
	c.mu.Unlock()
	if proc == nil || proc.Process == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	_ = proc.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = proc.Process.Kill()
		<-done
	}
}

// Restart stops the controller and starts it again with the same options and pod name, so that
// it takes its Lease back at once.
func (c *Controller) Restart() error {
	c.Stop()
	return c.launch()
}
