package netlab

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"time"

	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// AgentProc is a gateway agent running in a namespace, spoken to over its stdin/stdout with the
// gwstate line protocol.
type AgentProc struct {
	*Proc
	stdin io.WriteCloser
	acks  chan string
}

// StartAgent starts `<argv...>` in ns (e.g. {"/usr/bin/vpcgw-agent"}) with pipes on stdin and
// stdout.
func (l *Lab) StartAgent(ns string, argv ...string) (*AgentProc, error) {
	a := &AgentProc{acks: make(chan string, 16)}
	var stdout io.ReadCloser
	p, err := l.start(ns, argv, func(c *exec.Cmd, closers *[]io.Closer) error {
		var err error
		if a.stdin, err = c.StdinPipe(); err != nil {
			return err
		}
		stdout, err = stdoutPipe(c, closers)
		return err
	})
	if err != nil {
		return nil, err
	}
	a.Proc = p
	go func() {
		r := bufio.NewReader(stdout)
		for {
			line, err := r.ReadString('\n')
			if line != "" {
				a.acks <- line
			}
			if err != nil {
				close(a.acks)
				_ = stdout.Close()
				return
			}
		}
	}()
	return a, nil
}

// SendLine writes one raw line (a newline is added) and waits up to timeout for one ack.
func (a *AgentProc) SendLine(line []byte, timeout time.Duration) (gwstate.Ack, error) {
	var ack gwstate.Ack
	if _, err := a.stdin.Write(append(append([]byte(nil), line...), '\n')); err != nil {
		return ack, fmt.Errorf("writing to agent: %w (stderr: %s)", err, a.Stderr())
	}
	select {
	case s, ok := <-a.acks:
		if !ok {
			return ack, fmt.Errorf("agent exited without an ack (stderr: %s)", a.Stderr())
		}
		if err := json.Unmarshal([]byte(s), &ack); err != nil {
			return ack, fmt.Errorf("bad ack %q: %w", s, err)
		}
		return ack, nil
	case <-time.After(timeout):
		return ack, fmt.Errorf("no ack within %s (stderr: %s)", timeout, a.Stderr())
	}
}

// Send writes st as one JSON line and returns the agent's ack (waiting up to 30s).
func (a *AgentProc) Send(st gwstate.State) (gwstate.Ack, error) {
	b, err := json.Marshal(st)
	if err != nil {
		return gwstate.Ack{}, err
	}
	return a.SendLine(b, 30*time.Second)
}

// Close closes the agent's stdin (EOF: the agent exits) and waits up to 10s, then kills it.
func (a *AgentProc) Close() error {
	_ = a.stdin.Close()
	select {
	case <-a.done:
		return a.err
	case <-time.After(10 * time.Second):
		a.Stop()
		return fmt.Errorf("agent did not exit at EOF (stderr: %s)", a.Stderr())
	}
}
