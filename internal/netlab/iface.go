package netlab

import (
	"context"
	"fmt"
	"net"
	"net/netip"
)

// Iface is one interface of a namespace, configured as kube-ovn-cni configures a Pod's NIC
// (configureContainerNic): the lab's chassis (internal/ovsnode) and its bridges configure NICs
// with it alike.
type Iface struct {
	// Netns is the namespace's name (under /run/netns).
	Netns string
	// Name is the interface's name there (default eth0).
	Name string
	// MAC must be the logical switch port's where OVN carries the NIC: OVN delivers by MAC.
	MAC net.HardwareAddr
	// IPs are the addresses with the subnet's prefix length.
	IPs []netip.Prefix
	// Gateways get the default route (one per family) when DefaultRoute is set.
	Gateways     []netip.Addr
	DefaultRoute bool
	// Routes are added after the default route (kube-ovn's <provider>.kubernetes.io/routes; a
	// 0.0.0.0/0 among them replaces the default route, as kube-ovn's CNI does for attachments).
	Routes []Route
	// MTU of the interface; 0 keeps the kernel's default (1500).
	MTU int
	// WaitGateway waits, once the interface is configured, until every IPv4 gateway answers ARP
	// (kube-ovn-cni's gateway check; it pings on overlay subnets, but ping is not installed
	// here). Bounded by the context.
	WaitGateway bool
}

// Route is one route of an Iface.
type Route struct {
	Dst netip.Prefix
	Via netip.Addr // none: on-link
}

// Configure sets the interface's MAC, addresses, link up, the default route via the gateways and
// the routes, then waits for the gateways when asked. The interface must exist in in.Netns.
func Configure(ctx context.Context, in Iface) error {
	name := in.Name
	if name == "" {
		name = "eth0"
	}
	ip := func(args ...string) error {
		_, err := Run(append([]string{"ip", "-n", in.Netns}, args...)...)
		return err
	}
	if in.MAC != nil {
		if err := ip("link", "set", name, "address", in.MAC.String()); err != nil {
			return err
		}
	}
	for _, p := range in.IPs {
		if err := ip("addr", "replace", p.String(), "dev", name); err != nil {
			return err
		}
	}
	if err := ip("link", "set", name, "up"); err != nil {
		return err
	}
	if in.DefaultRoute {
		for _, g := range in.Gateways {
			if err := ip(family(g), "route", "replace", "default", "via", g.String(), "dev", name); err != nil {
				return err
			}
		}
	}
	for _, r := range in.Routes {
		args := []string{family(r.Dst.Addr()), "route", "replace", r.Dst.String()}
		if r.Via.IsValid() {
			args = append(args, "via", r.Via.String())
		}
		if err := ip(append(args, "dev", name)...); err != nil {
			return err
		}
	}
	if in.WaitGateway {
		for _, g := range in.Gateways {
			if err := waitARP(ctx, in.Netns, name, g); err != nil {
				return err
			}
		}
	}
	return nil
}

// waitARP sends an ARP request for gw every second until it is answered or ctx ends.
func waitARP(ctx context.Context, netns, dev string, gw netip.Addr) error {
	if !gw.Is4() {
		return nil
	}
	for {
		// iputils arping: -c 1 -w 1 exits 0 once a reply came.
		_, err := Run("ip", "netns", "exec", netns, "arping", "-q", "-c", "1", "-w", "1", "-I", dev, gw.String())
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("gateway %s did not answer ARP on %s in %s: %w", gw, dev, netns, ctx.Err())
		}
	}
}

func family(a netip.Addr) string {
	if a.Is6() {
		return "-6"
	}
	return "-4"
}
