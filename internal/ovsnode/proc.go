package ovsnode

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// daemon is one process of the chassis, a child of this process (never --detach): its
// stdout/stderr are kept (the first MiB; the daemons log to files, this catches what they print
// before their log is open), and it dies with this process.
type daemon struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	out  bytes.Buffer
}

// spawner is a goroutine locked to its OS thread for the life of the process: every daemon is
// forked from that thread. Pdeathsig fires when the forking *thread* ends, not the process
// (internal/kcm's comment), and the lab ends threads it locked into a namespace; a thread that
// never ends makes Pdeathsig mean "when this process dies", so a crashed test or lab leaves no
// ovs-vswitchd behind.
var spawner struct {
	once sync.Once
	reqs chan spawnReq
	err  error
}

type spawnReq struct {
	cmd *exec.Cmd
	res chan error
}

func startSpawner() {
	spawner.reqs = make(chan spawnReq)
	ready := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: this thread lives as long as the process
		// The thread must be in the process's network namespace (the one /proc/self, the
		// thread group leader, is in): a thread left in a Pod's namespace would start the
		// daemons there.
		self, err1 := os.Readlink("/proc/self/ns/net")
		thread, err2 := os.Readlink(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		switch {
		case err1 != nil || err2 != nil:
			ready <- fmt.Errorf("ovsnode: reading network namespaces: %w", errors.Join(err1, err2))
			return
		case self != thread:
			ready <- fmt.Errorf("ovsnode: the spawner thread is in network namespace %s, the process in %s", thread, self)
			return
		}
		ready <- nil
		for r := range spawner.reqs {
			r.res <- r.cmd.Start()
		}
	}()
	spawner.err = <-ready
}

// startDaemon starts argv with env added to this process's environment.
func startDaemon(name string, env []string, argv ...string) (*daemon, error) {
	spawner.once.Do(startSpawner)
	if spawner.err != nil {
		return nil, spawner.err
	}
	d := &daemon{name: name, cmd: exec.Command(argv[0], argv[1:]...), done: make(chan struct{})}
	d.cmd.Env = append(os.Environ(), env...)
	d.cmd.Stdout, d.cmd.Stderr = d, d
	// Setpgid: a Ctrl-C at the lab's terminal reaches the lab, which stops the chassis in order.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	res := make(chan error, 1)
	spawner.reqs <- spawnReq{cmd: d.cmd, res: res}
	if err := <-res; err != nil {
		return nil, fmt.Errorf("ovsnode: starting %s: %w", name, err)
	}
	go func() { _ = d.cmd.Wait(); close(d.done) }()
	return d, nil
}

func (d *daemon) Write(b []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.out.Len() < 1<<20 {
		d.out.Write(b)
	}
	return len(b), nil
}

func (d *daemon) output() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return strings.TrimSpace(d.out.String())
}

func (d *daemon) pid() int { return d.cmd.Process.Pid }

func (d *daemon) exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// exitError says how the daemon ended, with what it printed.
func (d *daemon) exitError() error {
	out := d.output()
	if out != "" {
		out = ": " + out
	}
	return fmt.Errorf("%s exited (%v)%s", d.name, d.cmd.ProcessState, out)
}

// stop sends sig (SIGTERM for a clean stop), then SIGKILL after grace, and waits.
func (d *daemon) stop(sig syscall.Signal, grace time.Duration) {
	if d == nil || d.exited() {
		return
	}
	_ = d.cmd.Process.Signal(sig)
	select {
	case <-d.done:
	case <-time.After(grace):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

// wait waits up to timeout for the daemon to end by itself (after `exit` through its control
// socket), then kills it.
func (d *daemon) wait(timeout time.Duration) {
	select {
	case <-d.done:
	case <-time.After(timeout):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

// Usage is what one daemon of the chassis costs, read from /proc.
type Usage struct {
	Name string
	PID  int
	// CPU is the user+system time the process used since it started.
	CPU time.Duration
	// Started is how long ago the process started.
	Started time.Duration
	// RSS and PeakRSS are VmRSS and VmHWM in bytes.
	RSS, PeakRSS int64
	// Threads is the number of threads.
	Threads int
}

// clockTick is USER_HZ: /proc reports CPU times in these units (100 on every Linux ABI Go runs
// on; sysconf(_SC_CLK_TCK) would need cgo).
const clockTick = 100

func readUsage(name string, pid int) (Usage, error) {
	u := Usage{Name: name, PID: pid}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	rest := string(stat)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+1:]
	}
	f := strings.Fields(rest)
	// f[0] is field 3 (state): utime is field 14, stime 15, num_threads 20, starttime 22.
	if len(f) < 20 {
		return u, fmt.Errorf("short /proc/%d/stat", pid)
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	u.CPU = time.Duration(utime+stime) * time.Second / clockTick
	u.Threads, _ = strconv.Atoi(f[17])
	if start, err := strconv.ParseInt(f[19], 10, 64); err == nil {
		if up, err := os.ReadFile("/proc/uptime"); err == nil {
			if fields := strings.Fields(string(up)); len(fields) > 0 {
				if secs, err := strconv.ParseFloat(fields[0], 64); err == nil {
					u.Started = time.Duration(secs*float64(time.Second)) - time.Duration(start)*time.Second/clockTick
				}
			}
		}
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			u.RSS = kb << 10
		case "VmHWM:":
			u.PeakRSS = kb << 10
		}
	}
	return u, nil
}
