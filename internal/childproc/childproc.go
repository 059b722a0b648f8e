// Package childproc starts the lab's long-lived child processes (API server helpers, OVN,
// kube-ovn-controller, kube-controller-manager) so that they die with this process and only then.
//
// Pdeathsig is delivered when the *thread* that forked the child ends, not the process. Go ends a
// thread whenever a goroutine exits while locked to it (runtime.LockOSThread), which code that
// enters network namespaces does on purpose (internal/bench's baseline), and the children forked
// earlier from that thread were killed at random. Start forks every child from one thread that is
// locked for the life of the process, so Pdeathsig means "when this process ends".
package childproc

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

type request struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	once     sync.Once
	requests chan request
)

func forker() {
	runtime.LockOSThread() // never unlocked: this thread lives as long as the process
	for r := range requests {
		r.done <- r.cmd.Start()
	}
}

// Start starts cmd with Pdeathsig SIGKILL (kept with any other SysProcAttr the caller set) from
// the process's forking thread, and returns Start's error.
func Start(cmd *exec.Cmd) error {
	once.Do(func() {
		requests = make(chan request)
		go forker()
	})
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	r := request{cmd: cmd, done: make(chan error, 1)}
	requests <- r
	return <-r.done
}
