package labnode

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// containerRunner runs one container as a process: started through the exec helper inside the
// pod's namespaces, restarted per restartPolicy with a back-off, stopped as the kubelet stops one
// (its preStop hook, SIGTERM, SIGKILL: lifecycle.go).
type containerRunner struct {
	w    *podWorker
	pod  *corev1.Pod
	spec corev1.Container

	stopOnce sync.Once
	stopCh   chan struct{}
	grace    time.Duration
	preStop  bool // run the preStop hook when stopping
	exited   chan struct{}

	mu           sync.Mutex
	id           string
	proc         *os.Process
	env          []string
	helper       helperSpec
	image        *pulledImage // nil: the host's filesystem plays the image
	running      bool
	started      bool // postStart done
	ready        bool
	startedAt    time.Time
	restartCount int32
	last         *corev1.ContainerStateTerminated
	terminated   *corev1.ContainerStateTerminated
	waitReason   string
	waitMessage  string
	// execs are the process groups of the commands exec'd into the running container: they end
	// with it, as every process of a container's PID namespace ends with its first process.
	execs map[int]bool
}

func newContainerRunner(w *podWorker, pod *corev1.Pod, c *corev1.Container) *containerRunner {
	return &containerRunner{w: w, pod: pod, spec: *c.DeepCopy(), stopCh: make(chan struct{}), exited: make(chan struct{}),
		waitReason: "ContainerCreating"}
}

func newContainerID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "labnode://" + hex.EncodeToString(b[:])
}

func (c *containerRunner) notify() { c.w.poke() }

func (c *containerRunner) start() {
	go func() {
		defer close(c.exited)
		c.loop()
	}()
}

func (c *containerRunner) stopping() bool {
	select {
	case <-c.stopCh:
		return true
	default:
		return false
	}
}

func (c *containerRunner) loop() {
	backoff := c.w.n.cfg.RestartBackoff
	for first := true; ; first = false {
		if !first {
			c.mu.Lock()
			c.restartCount++
			c.mu.Unlock()
		}
		began := time.Now()
		exit, err := c.runOnce()
		if c.stopping() {
			return
		}
		if err != nil {
			c.w.log.Error(err, "container failed to start", "container", c.spec.Name)
		}
		if !c.shouldRestart(exit) {
			c.notify()
			<-c.stopCh
			return
		}
		if time.Since(began) > 10*time.Minute {
			backoff = c.w.n.cfg.RestartBackoff // ran long enough: the kubelet resets the back-off
		}
		c.mu.Lock()
		if c.terminated != nil {
			c.last, c.terminated = c.terminated, nil
		}
		if err == nil {
			c.waitReason = "CrashLoopBackOff"
			c.waitMessage = fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", backoff, c.spec.Name, c.pod.Name, c.pod.Namespace, c.pod.UID)
		}
		c.mu.Unlock()
		c.notify()
		select {
		case <-c.stopCh:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, c.w.n.cfg.MaxRestartBackoff)
	}
}

func (c *containerRunner) shouldRestart(exit int) bool {
	switch c.pod.Spec.RestartPolicy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return exit != 0
	default:
		return true
	}
}

// runOnce starts the container, runs its postStart hook, and waits for it to exit. It returns
// the exit code, or an error when the container could not start (a waiting reason is set then).
func (c *containerRunner) runOnce() (int, error) {
	fail := func(reason string, err error) (int, error) {
		c.mu.Lock()
		c.waitReason, c.waitMessage, c.running, c.ready = reason, err.Error(), false, false
		c.mu.Unlock()
		c.notify()
		return -1, err
	}
	img, err := c.w.n.imageFor(c.spec.Image)
	if err != nil {
		return fail("ErrImagePull", err)
	}
	if img == nil && len(c.spec.Command) == 0 {
		return fail("CreateContainerConfigError", errors.New("the lab node runs only containers with a command, unless their image is one of the node's (Config.Images): the host filesystem plays other images"))
	}
	ips := c.w.podIPs()
	podIP := ""
	if len(ips) > 0 {
		podIP = ips[0]
	}
	var imageEnv []string
	if img != nil {
		imageEnv = append([]string{}, img.Config.Env...)
	}
	env, vars, err := containerEnv(c.w.n.ctx, c.w.n.cs, c.w.n.services, c.pod, &c.spec, c.w.n.cfg.InternalIP.String(), podIP, imageEnv)
	if err != nil {
		return fail("CreateContainerConfigError", err)
	}
	var hs helperSpec
	var argv []string
	if img != nil {
		if hs, err = c.w.imageHelperSpec(c.pod, &c.spec, img); err != nil {
			return fail("CreateContainerConfigError", err)
		}
		if argv = imageArgv(&c.spec, img, vars); len(argv) == 0 {
			return fail("CreateContainerConfigError", fmt.Errorf("image %s has no entrypoint and the container no command", c.spec.Image))
		}
	} else {
		if hs, err = c.w.helperSpec(c.spec.Image, c.spec.WorkingDir); err != nil {
			return fail("CreateContainerError", err)
		}
		argv = containerArgv(&c.spec, vars)
	}
	logPath := filepath.Join(c.w.stateDir(), c.spec.Name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fail("CreateContainerError", err)
	}
	first := hs
	first.StartedFD = 3 // cmd.ExtraFiles[0], below
	cmd, err := helperCommand(first, argv, env)
	if err != nil {
		_ = logFile.Close()
		return fail("CreateContainerError", err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group, so that stopping it reaches what it started. No Pdeathsig: it
	// fires when the forking *thread* ends, and Go ends threads whose goroutine exits locked (as
	// dialInPod's do), which killed containers at random; Stop ends them instead.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// The container is running once its program runs, not while the helper still builds its
	// root (an exec joining it then would find no root): the helper holds the write end of this
	// pipe close-on-exec, so the read ends when it execs the program, or exits failing.
	started, startedW, err := os.Pipe()
	if err != nil {
		_ = logFile.Close()
		return fail("RunContainerError", err)
	}
	cmd.ExtraFiles = []*os.File{startedW}
	err = cmd.Start()
	_ = startedW.Close()
	if err != nil {
		_ = started.Close()
		_ = logFile.Close()
		return fail("RunContainerError", err)
	}
	_, _ = io.Copy(io.Discard, started)
	_ = started.Close()
	_ = logFile.Close()
	c.mu.Lock()
	previous := c.helper
	c.id, c.proc, c.env, c.helper, c.image = newContainerID(), cmd.Process, env, hs, img
	c.running, c.ready, c.started, c.startedAt = true, false, false, time.Now().Truncate(time.Second)
	c.waitReason, c.waitMessage = "", ""
	c.mu.Unlock()
	c.w.log.Info("container started", "container", c.spec.Name, "pid", cmd.Process.Pid, "argv", argv)
	// The previous run's /run (or writable layer) goes with it: a restarted container starts
	// afresh.
	if previous.Run != "" {
		_ = os.RemoveAll(previous.Run)
	}
	if previous.Image != "" {
		_ = os.RemoveAll(filepath.Dir(previous.Root))
	}

	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()

	hookOK := true
	// killed closes once a kill started here (the kubelet's killContainer) is done.
	var killed chan struct{}
	if h := c.spec.Lifecycle; h != nil && h.PostStart != nil {
		ctx, cancel := context.WithTimeout(c.w.n.ctx, 2*time.Minute)
		err := c.runHook(ctx, h.PostStart)
		cancel()
		if err != nil {
			hookOK = false
			c.w.log.Info("postStart hook failed; killing the container", "container", c.spec.Name, "error", err.Error())
			c.w.event(c.pod, c.spec.Name, corev1.EventTypeWarning, "FailedPostStartHook", err.Error())
			// As the kubelet: killed as for any other reason, its preStop hook and grace included.
			killed = c.startKill(cmd.Process, podGracePeriod(c.pod), true, "FailedPostStartHook")
		}
	}
	probeCtx, stopProbe := context.WithCancel(c.w.n.ctx)
	defer stopProbe()
	switch {
	case !hookOK:
	case c.spec.ReadinessProbe != nil:
		// Started, and ready once the probe says so.
		c.mu.Lock()
		c.started = true
		c.mu.Unlock()
		c.notify()
		go c.runReadiness(probeCtx, c.spec.ReadinessProbe)
	default:
		c.mu.Lock()
		c.started, c.ready = true, c.running
		c.mu.Unlock()
		c.notify()
	}

	var werr error
	select {
	case werr = <-waitErr:
	case <-c.stopCh:
		if killed == nil {
			c.mu.Lock()
			grace, preStop := c.grace, c.preStop
			c.mu.Unlock()
			killed = c.startKill(cmd.Process, grace, preStop, "")
		}
		werr = <-waitErr
	}
	stopProbe()
	code, signal := exitStatus(cmd.ProcessState, werr)
	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	if !hookOK {
		reason = "FailedPostStartHook"
	}
	c.mu.Lock()
	c.running, c.ready, c.started, c.proc = false, false, false, nil
	for pgid := range c.execs {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	c.execs = nil
	c.terminated = &corev1.ContainerStateTerminated{
		ExitCode: int32(code), Signal: int32(signal), Reason: reason,
		StartedAt: metav1.NewTime(c.startedAt), FinishedAt: metav1.NewTime(time.Now().Truncate(time.Second)), ContainerID: c.id,
	}
	c.mu.Unlock()
	c.w.log.Info("container exited", "container", c.spec.Name, "exitCode", code, "signal", signal)
	c.notify()
	if killed != nil {
		<-killed // the kubelet's kill returns once the preStop hook did too
	}
	return code, nil
}

// hasExited reports whether the runner saw p exit (a zombie still answers kill(pid, 0)).
func (c *containerRunner) hasExited(p *os.Process) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.proc != p
}

// stop ends the container within grace, after its preStop hook when preStop (a graceful stop,
// not the node's shutdown or a forced deletion), and waits for it.
func (c *containerRunner) stop(grace time.Duration, preStop bool) {
	c.stopOnce.Do(func() {
		c.mu.Lock()
		c.grace, c.preStop = grace, preStop
		c.mu.Unlock()
		close(c.stopCh)
	})
	<-c.exited
}

func (c *containerRunner) runningPID() (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil || !c.running {
		return 0, false
	}
	return c.proc.Pid, true
}

// trackExec registers the process group of a command exec'd into the container; the returned
// func forgets it. It fails when the container no longer runs (the command must not outlive it).
func (c *containerRunner) trackExec(pgid int) (func(), error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		return nil, fmt.Errorf("container %s: %w", c.spec.Name, errNotRunning)
	}
	if c.execs == nil {
		c.execs = map[int]bool{}
	}
	c.execs[pgid] = true
	return func() {
		c.mu.Lock()
		delete(c.execs, pgid)
		c.mu.Unlock()
	}, nil
}

// execTarget is what an exec into this container needs, or errNotRunning.
func (c *containerRunner) execTarget() (helperSpec, []string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running {
		return helperSpec{}, nil, fmt.Errorf("container %s: %w", c.spec.Name, errNotRunning)
	}
	hs := c.helper
	if hs.Image != "" {
		// Into the container's own root, as a runtime's exec joins the container's mount
		// namespace: a second overlay on the same writable layer is refused by the kernel, and
		// the exec must see what the container wrote.
		hs.JoinMountsOf = c.proc.Pid
	}
	return hs, c.env, nil
}

// execCapture runs argv in the container and returns its exit code and combined output.
func (c *containerRunner) execCapture(ctx context.Context, argv []string) (int, string, error) {
	var out strings.Builder
	code, err := c.exec(ctx, argv, nil, nopCloser{&out}, nopCloser{&out}, false, nil)
	return code, out.String(), err
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

func (c *containerRunner) status() corev1.ContainerStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := corev1.ContainerStatus{
		Name: c.spec.Name, Image: c.spec.Image, RestartCount: c.restartCount, Ready: c.ready,
	}
	if c.id != "" {
		st.ImageID = "labnode://" + c.spec.Image
		if c.image != nil {
			st.ImageID = c.image.RepoDigest
		}
		st.ContainerID = c.id
	}
	started := c.running && c.started
	st.Started = &started
	switch {
	case c.running:
		st.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(c.startedAt)}
	case c.terminated != nil:
		t := *c.terminated
		st.State.Terminated = &t
	default:
		st.State.Waiting = &corev1.ContainerStateWaiting{Reason: c.waitReason, Message: c.waitMessage}
	}
	if c.last != nil {
		t := *c.last
		st.LastTerminationState.Terminated = &t
	}
	return st
}

// helperCommand is `<this binary> <argv...>` with the helper's spec in the environment.
func helperCommand(hs helperSpec, argv, env []string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(hs)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, argv...)
	cmd.Env = append(append([]string(nil), env...), helperEnv+"="+string(raw))
	return cmd, nil
}

// exitStatus is the exit code a container runtime reports (128+n for a signal n).
func exitStatus(ps *os.ProcessState, _ error) (code, signal int) {
	if ps == nil {
		return -1, 0
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), int(ws.Signal())
	}
	return ps.ExitCode(), 0
}
