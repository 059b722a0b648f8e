package cluster

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
