package ovsnode

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"syscall"
	"time"
)

// RestartOVNController restarts ovn-controller as `ovn-ctl restart_controller` does: `ovn-appctl
// exit --restart` (it leaves its SB chassis, port bindings and the flows in ovs-vswitchd in
// place), then a new ovn-controller. Forwarding goes on meanwhile: the flows stay in
// ovs-vswitchd. It returns once the new ovn-controller is connected to the SB database.
func (c *Chassis) RestartOVNController(ctx context.Context) error {
	if err := c.stopController(ctx); err != nil {
		return err
	}
	return c.startControllerConnected(ctx)
}

// stopController asks ovn-controller to exit for a restart and waits for it (killing it after
// 10 s, or at once when it does not answer).
func (c *Chassis) stopController(ctx context.Context) error {
	c.mu.Lock()
	d, stopped := c.controller, c.stopped
	c.mu.Unlock()
	if stopped {
		return errors.New("ovsnode: the chassis is stopped")
	}
	if d == nil || d.exited() {
		return nil
	}
	if _, err := c.controllerCtl(ctx, "exit", "--restart"); err != nil {
		c.logf("ovn-appctl exit --restart: %v; killing ovn-controller", err)
		d.stop(syscall.SIGKILL, 10*time.Second)
		return nil
	}
	d.wait(10 * time.Second)
	return nil
}

func (c *Chassis) startControllerConnected(ctx context.Context) error {
	if err := c.startController(ctx); err != nil {
		return err
	}
	c.mu.Lock()
	d := c.controller
	c.mu.Unlock()
	return poll(ctx, 30*time.Second, "ovn-controller's SB connection", []*daemon{d}, c.logFile("ovn-controller"), func() bool {
		out, err := c.controllerCtl(ctx, "connection-status")
		return err == nil && out == "connected\n"
	})
}

// RestartVswitchd stops ovs-vswitchd (SIGTERM) and starts it again on the same database and
// datapath namespace; it returns once the new ovs-vswitchd has applied the database (bridges
// and ports back). Forwarding stops until ovn-controller has installed its flows again:
// ovn-controller's OpenFlow reconnection backs off 1, 2, 4 s, so it is restarted right after
// (ovn-appctl exit --restart and a new one), which brings traffic back in about half a second
// instead of about four (docs: ../shared/reference/ovn-datapath-here.md).
func (c *Chassis) RestartVswitchd(ctx context.Context) error {
	c.mu.Lock()
	d, stopped := c.vswitchd, c.stopped
	c.mu.Unlock()
	if stopped {
		return errors.New("ovsnode: the chassis is stopped")
	}
	begin := time.Now()
	d.stop(syscall.SIGTERM, 10*time.Second)
	if err := c.startVswitchd(); err != nil {
		return err
	}
	if err := c.syncVswitchd(ctx); err != nil {
		return err
	}
	c.logf("ovs-vswitchd restarted (%s)", time.Since(begin).Round(time.Millisecond))
	if err := c.stopController(ctx); err != nil {
		return err
	}
	if err := c.startControllerConnected(ctx); err != nil {
		return err
	}
	c.logf("ovn-controller restarted after ovs-vswitchd (%s since the stop)", time.Since(begin).Round(time.Millisecond))
	return nil
}

// syncVswitchd waits until the new ovs-vswitchd serves the bridge's OpenFlow management socket
// (<bridge>.mgmt, which ovn-controller connects to): it opens it once the bridge and its ports
// are configured. (An ovs-vsctl write that changes nothing does not wait for ovs-vswitchd.)
func (c *Chassis) syncVswitchd(ctx context.Context) error {
	c.mu.Lock()
	watch := []*daemon{c.vswitchd, c.db}
	c.mu.Unlock()
	mgmt := filepath.Join(c.ovsDir, c.opts.Bridge+".mgmt")
	return poll(ctx, 30*time.Second, "OpenFlow socket "+mgmt+" of the new ovs-vswitchd", watch, c.logFile("ovs-vswitchd"), func() bool {
		conn, err := net.DialTimeout("unix", mgmt, time.Second)
		if err != nil {
			return false
		}
		_ = conn.Close() // a probe: it connected, that was the answer
		return true
	})
}
