package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// NetnsAnnotation on a gateway pod names the network namespace that plays that pod in the
// benchmark lab (internal/lab); NetnsFromPods reads it for the local transport.
const NetnsAnnotation = "lab.vpcgw.io/netns"

// LocalNetns starts the agent as a subprocess inside a named network namespace:
// `ip netns exec <netns> <AgentCommand...>`. The tests and the benchmark lab use it; the
// controller knows nothing of it (an Instance is a Pod, wherever it runs).
type LocalNetns struct {
	// AgentCommand is the agent's argv, e.g. {"/usr/local/bin/vpcgw-agent"}.
	AgentCommand []string
	// Netns finds the network namespace that plays an instance.
	Netns func(ctx context.Context, inst Instance) (string, error)
	Log   logr.Logger
}

var _ Dialer = (*LocalNetns)(nil)

// NetnsFromPods finds an instance's namespace in its Pod's NetnsAnnotation, read through r (the
// Pod must still be the instance's: same UID).
func NetnsFromPods(r client.Reader) func(context.Context, Instance) (string, error) {
	return func(ctx context.Context, inst Instance) (string, error) {
		var pod corev1.Pod
		if err := r.Get(ctx, types.NamespacedName{Namespace: inst.Namespace, Name: inst.Pod}, &pod); err != nil {
			return "", fmt.Errorf("instance %s: reading its pod: %w", inst, err)
		}
		if pod.UID != inst.UID {
			return "", fmt.Errorf("instance %s: its pod was replaced", inst)
		}
		return pod.Annotations[NetnsAnnotation], nil
	}
}

// Dial starts the agent in inst's network namespace and returns the stream on its stdin and
// stdout.
func (l *LocalNetns) Dial(ctx context.Context, inst Instance) (*Conn, error) {
	if l.Netns == nil {
		return nil, errors.New("local transport: no way to find an instance's network namespace configured")
	}
	netns, err := l.Netns(ctx, inst)
	if err != nil {
		return nil, err
	}
	if netns == "" {
		return nil, fmt.Errorf("instance %s has no network namespace (%s annotation): the local transport cannot reach it", inst, NetnsAnnotation)
	}
	if len(l.AgentCommand) == 0 {
		return nil, errors.New("local transport: no agent command configured")
	}
	argv := append([]string{"netns", "exec", netns}, l.AgentCommand...)
	// Not CommandContext: the agent must outlive the reconcile that dialled it.
	cmd := exec.Command("ip", argv...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("agent stdin: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("agent stdout: %w", err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("agent stderr: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting agent in netns %s: %w", netns, err)
	}
	log := l.Log.WithValues("instance", inst.String(), "netns", netns, "pid", cmd.Process.Pid)
	log.Info("agent started")
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		forwardLines(stderr, log)
		_, _ = io.Copy(io.Discard, stderr) // past a line longer than the scanner's bound: keep the agent from blocking on stderr
	}()
	return NewConn(stdin, stdout, &process{cmd: cmd, stdin: stdin, logDone: logDone, log: log}), nil
}

// process ends an agent subprocess: closing stdin asks it to exit; it is killed if it does not.
type process struct {
	cmd     *exec.Cmd
	stdin   io.Closer
	logDone chan struct{}
	log     logr.Logger
	once    sync.Once
	err     error
}

func (p *process) Close() error {
	p.once.Do(func() {
		_ = p.stdin.Close()
		exited := make(chan error, 1)
		go func() {
			<-p.logDone // Wait must not run before the stderr reader finished.
			exited <- p.cmd.Wait()
		}()
		select {
		case err := <-exited:
			p.err = err
		case <-time.After(5 * time.Second):
			_ = p.cmd.Process.Kill()
			p.err = <-exited
		}
		p.log.Info("agent stopped", "result", fmt.Sprint(p.err))
	})
	return nil
}

func forwardLines(r io.Reader, log logr.Logger) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		log.Info("agent: " + sc.Text())
	}
}
