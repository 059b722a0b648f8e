package cluster

import (
	"fmt"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// What the bench (internal/bench) reads of the lab's own processes: it measures the vpcgw
// controller and kube-ovn-controller from the outside, as an operator would (their /proc entries
// and /metrics), never through a hook inside them.

// ControllerPID is the PID of the running vpcgw controller process (0 when none runs).
func (c *Cluster) ControllerPID() int {
	if c.Controller == nil {
		return 0
	}
	return c.Controller.pid()
}

// ControllerExited reports whether the vpcgw controller process ended (or never started).
func (c *Cluster) ControllerExited() bool {
	return c.Controller == nil || c.Controller.exited()
}

// ControllerEnded is nil while the vpcgw controller process runs; once it ended by itself, an
// error with how it ended and the last lines it printed (a bench run under heavy load once lost
// its controller without saying why).
func (c *Cluster) ControllerEnded() error {
	if c.Controller == nil || !c.Controller.exited() {
		return nil
	}
	return fmt.Errorf("the vpcgw controller process ended (%s); its last lines:\n%s", c.Controller.exitText(), tail(c.Controller.output(), 40))
}

// pid is the process's PID while it runs, else 0.
func (p *process) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	select {
	case <-p.done:
		return 0
	default:
		return p.cmd.Process.Pid
	}
}

// UserKubeconfig is the kubeconfig of a new API server user name in groups. When server is not
// empty it replaces the API server's address (the bench's kube-proxy runs in a network namespace
// of its own and reaches the API server through a forwarder there).
func (c *Cluster) UserKubeconfig(name, server string, groups ...string) ([]byte, error) {
	u, err := c.env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return nil, fmt.Errorf("adding API server user %s: %w", name, err)
	}
	kc, err := u.KubeConfig()
	if err != nil {
		return nil, fmt.Errorf("the kubeconfig of user %s: %w", name, err)
	}
	if server == "" {
		return kc, nil
	}
	cfg, err := clientcmd.Load(kc)
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig of user %s: %w", name, err)
	}
	for _, cl := range cfg.Clusters {
		cl.Server = server
	}
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("writing the kubeconfig of user %s: %w", name, err)
	}
	return out, nil
}
