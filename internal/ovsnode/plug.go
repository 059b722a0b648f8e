package ovsnode

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	"github.com/vpcgw/vpcgw/internal/netlab"
)

// Iface is the inside end of a plugged port: the interface a namespace gets, configured as
// kube-ovn-cni configures a Pod's (netlab.Configure).
type Iface = netlab.Iface

// Route is one route of an Iface.
type Route = netlab.Route

// Port is one Pod NIC, as kube-ovn-cni plugs it.
type Port struct {
	// Pod and Namespace name the Pod; Provider is kube-ovn's provider of the NIC ("" or "ovn"
	// for the default network).
	Pod, Namespace, Provider string
	// ContainerID is the sandbox's ID (at least 12 characters; the veth names come from it).
	ContainerID string
	// IfaceID overrides the logical switch port name (default: kube-ovn's PodNameToPortName,
	// "<pod>.<namespace>" or "<pod>.<namespace>.<provider>").
	IfaceID string
	Iface
}

// HostPort is a port for a namespace that is not a Pod: a client of the lab, or the node's join
// port (kube-ovn's ovn0, logical switch port "node-<node>").
type HostPort struct {
	// IfaceID is the logical switch port's name.
	IfaceID string
	// HostIf names the veth's end on the bridge (at most 15 characters, unique in the
	// chassis).
	HostIf string
	Iface
}

// PortName is kube-ovn's logical switch port name of a Pod NIC (pkg/ovs/util.go
// PodNameToPortName).
func PortName(pod, namespace, provider string) string {
	if provider == "" || provider == "ovn" {
		return pod + "." + namespace
	}
	return pod + "." + namespace + "." + provider
}

// NicNames are the veth names kube-ovn-cni v1.16.2 gives a Pod NIC (pkg/daemon/ovs_linux.go
// generateNicName): "<containerID[:12]>_h" / "_c" for eth0, and for another interface
// "<containerID[:12-len(ifname)]>_<ifname>_h" / "_c" (KubeVirt's 14-character "pod..." names
// are shortened to their middle first).
func NicNames(containerID, ifName string) (host, container string, err error) {
	if ifName == "" || ifName == "eth0" {
		if len(containerID) < 12 {
			return "", "", fmt.Errorf("container ID %q is shorter than 12 characters", containerID)
		}
		return containerID[:12] + "_h", containerID[:12] + "_c", nil
	}
	if strings.HasPrefix(ifName, "pod") && len(ifName) == 14 {
		ifName = ifName[3 : len(ifName)-4]
	}
	keep := 12 - len(ifName)
	if keep < 0 || len(containerID) < keep {
		return "", "", fmt.Errorf("no veth name for interface %q of container %q (kube-ovn keeps 12-len(ifname) characters of the ID)", ifName, containerID)
	}
	return fmt.Sprintf("%s_%s_h", containerID[:keep], ifName), fmt.Sprintf("%s_%s_c", containerID[:keep], ifName), nil
}

// InstallTimeout bounds the wait for ovn-controller to mark a port ovn-installed (kube-ovn-cni's
// limit).
const InstallTimeout = 30 * time.Second

// Plug plugs a Pod NIC as kube-ovn-cni v1.16.2 does (configureNic): a veth pair "<id>_h" /
// "<id>_c", the host end added to the bridge with external_ids iface-id, vendor=kube-ovn,
// pod_name, pod_namespace, ip and pod_netns, set up with txqueuelen 1000; tx checksum offload
// off on the container end (the userspace datapath leaves TCP checksums unfilled otherwise);
// then it waits until ovn-controller marks the interface ovn-installed (30 s at most: a port
// that never gets it has, most often, no logical switch port of that name in the NB database),
// moves the container end into the namespace, renames it, and sets MAC, addresses, link up and
// routes. On an error it removes what it made.
func (c *Chassis) Plug(ctx context.Context, p Port) error {
	if p.Pod == "" || p.Namespace == "" {
		return errors.New("ovsnode: Plug needs the Pod's name and namespace")
	}
	ifName := p.Name
	if ifName == "" {
		ifName = "eth0"
	}
	host, cont, err := NicNames(p.ContainerID, ifName)
	if err != nil {
		return fmt.Errorf("ovsnode: plugging %s/%s: %w", p.Namespace, p.Pod, err)
	}
	ifaceID := p.IfaceID
	if ifaceID == "" {
		ifaceID = PortName(p.Pod, p.Namespace, p.Provider)
	}
	ids := []string{
		"external_ids:iface-id=" + ifaceID,
		"external_ids:vendor=kube-ovn",
		"external_ids:pod_name=" + p.Pod,
		"external_ids:pod_namespace=" + p.Namespace,
		"external_ids:ip=" + ipList(p.IPs),
		"external_ids:pod_netns=" + filepath.Join("/var/run/netns", p.Netns),
	}
	return c.plug(ctx, host, cont, ifaceID, ids, p.Iface)
}

// PlugHost plugs a namespace that is not a Pod under the logical switch port h.IfaceID, the same
// way as Plug (external_ids iface-id and ip only, as kube-ovn-cni's node port has).
func (c *Chassis) PlugHost(ctx context.Context, h HostPort) error {
	if h.IfaceID == "" || h.HostIf == "" {
		return errors.New("ovsnode: PlugHost needs IfaceID and HostIf")
	}
	if len(h.HostIf) > 13 {
		// The container end is named HostIf+"_c" in the datapath namespace.
		return fmt.Errorf("ovsnode: HostIf %q is longer than 13 characters", h.HostIf)
	}
	ids := []string{"external_ids:iface-id=" + h.IfaceID, "external_ids:ip=" + ipList(h.IPs)}
	return c.plug(ctx, h.HostIf, h.HostIf+"_c", h.IfaceID, ids, h.Iface)
}

func (c *Chassis) plug(ctx context.Context, host, cont, ifaceID string, ids []string, in Iface) (err error) {
	if in.Netns == "" {
		return fmt.Errorf("ovsnode: port %s: no namespace to plug", ifaceID)
	}
	if in.Name == "" {
		in.Name = "eth0"
	}
	dp := c.dpns
	ipDP := func(args ...string) error {
		_, err := netlab.Run(append([]string{"ip", "-n", dp}, args...)...)
		return err
	}
	// A pair left by an earlier attempt goes first (kube-ovn-cni's CleanDuplicatePort and
	// rollBackVethPair do the same).
	_, _ = c.vsctl(ctx, 30*time.Second, "--if-exists", "--with-iface", "del-port", c.opts.Bridge, host)
	_ = ipDP("link", "del", host)
	add := []string{"link", "add", host}
	if in.MTU > 0 {
		add = append(add, "mtu", fmt.Sprint(in.MTU))
	}
	add = append(add, "type", "veth", "peer", "name", cont)
	if in.MTU > 0 {
		add = append(add, "mtu", fmt.Sprint(in.MTU))
	}
	if err := ipDP(add...); err != nil {
		return fmt.Errorf("ovsnode: port %s: %w", ifaceID, err)
	}
	defer func() {
		if err != nil {
			_, _ = c.vsctl(context.Background(), 30*time.Second, "--if-exists", "--with-iface", "del-port", c.opts.Bridge, host)
			_ = ipDP("link", "del", host)
			// The container end, if it reached the namespace under its final name, went with
			// the pair.
		}
	}()
	args := append([]string{"--may-exist", "add-port", c.opts.Bridge, host, "--", "set", "Interface", host}, ids...)
	if _, err := c.vsctl(ctx, 30*time.Second, args...); err != nil {
		return fmt.Errorf("ovsnode: port %s: adding %s to %s: %w", ifaceID, host, c.opts.Bridge, err)
	}
	if err := ipDP("link", "set", host, "up", "txqueuelen", "1000"); err != nil {
		return fmt.Errorf("ovsnode: port %s: %w", ifaceID, err)
	}
	if _, err := netlab.Run("ip", "netns", "exec", dp, "ethtool", "-K", cont, "tx", "off"); err != nil {
		return fmt.Errorf("ovsnode: port %s: turning tx checksum offload off: %w", ifaceID, err)
	}
	if err := c.waitInstalled(ctx, host, ifaceID); err != nil {
		return err
	}
	// Move the container end into the namespace and configure it (configureContainerNic).
	steps := [][]string{
		{"ip", "-n", dp, "link", "set", cont, "alias", cont},
		{"ip", "-n", dp, "link", "set", cont, "netns", in.Netns},
		{"ip", "-n", in.Netns, "link", "set", cont, "name", in.Name},
	}
	for _, s := range steps {
		if _, err := netlab.Run(s...); err != nil {
			return fmt.Errorf("ovsnode: port %s: %w", ifaceID, err)
		}
	}
	if err := netlab.Configure(ctx, in); err != nil {
		_, _ = netlab.Run("ip", "-n", in.Netns, "link", "del", in.Name)
		return fmt.Errorf("ovsnode: port %s: %w", ifaceID, err)
	}
	return nil
}

// waitInstalled waits until ovn-controller sets external_ids:ovn-installed="true" on the
// interface: it has bound the logical switch port to this chassis and installed its flows.
// `ovs-vsctl wait-until` watches the database, no polling interval.
func (c *Chassis) waitInstalled(ctx context.Context, host, ifaceID string) error {
	c.mu.Lock()
	watch := []*daemon{c.db}
	c.mu.Unlock()
	begin := time.Now()
	_, err := c.vsctlWatch(ctx, InstallTimeout, watch, "--timeout="+fmt.Sprint(int(InstallTimeout/time.Second)+5),
		"wait-until", "Interface", host, "external_ids:ovn-installed="+quote("true"))
	if err != nil {
		return fmt.Errorf("ovsnode: port %s (interface %s): not marked ovn-installed by ovn-controller after %s; "+
			"is there a logical switch port named %q in the NB database, and is ovn-controller running? (%v)",
			ifaceID, host, time.Since(begin).Round(100*time.Millisecond), ifaceID, err)
	}
	return nil
}

// Unplug removes a Pod NIC plugged by Plug: the bridge port and the veth pair (with it the
// interface in the Pod's namespace).
func (c *Chassis) Unplug(ctx context.Context, p Port) error {
	host, _, err := NicNames(p.ContainerID, p.Name)
	if err != nil {
		return fmt.Errorf("ovsnode: unplugging %s/%s: %w", p.Namespace, p.Pod, err)
	}
	return c.unplug(ctx, host)
}

// UnplugHost removes a port plugged by PlugHost.
func (c *Chassis) UnplugHost(ctx context.Context, h HostPort) error { return c.unplug(ctx, h.HostIf) }

func (c *Chassis) unplug(ctx context.Context, host string) error {
	var errs []error
	if _, err := c.vsctl(ctx, 30*time.Second, "--if-exists", "--with-iface", "del-port", c.opts.Bridge, host); err != nil {
		errs = append(errs, err)
	}
	if out, err := netlab.Run("ip", "-n", c.dpns, "link", "del", host); err != nil && !strings.Contains(string(out), "Cannot find device") {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ovsnode: unplugging %s: %w", host, err)
	}
	return nil
}

func ipList(ps []netip.Prefix) string {
	s := make([]string, 0, len(ps))
	for _, p := range ps {
		s = append(s, p.Addr().String())
	}
	return strings.Join(s, ",")
}
