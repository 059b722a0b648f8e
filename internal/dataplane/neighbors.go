package dataplane

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// neighborForgetter deletes the gateway's neighbour (ARP) entries of addresses that just became
// backends. kube-ovn's IPAM gives a freed address to the next Pod (at once after a restart of
// kube-ovn-controller, whose IPAM is rebuilt from the lowest free address), so a new backend may
// have the address of a Pod that is gone. The gateway's entry then still names the old Pod's MAC,
// OVN's logical switch drops frames to a MAC no port has, and the kernel keeps the entry for up to
// a minute (reachable time, the delay, then unicast probes to that MAC) before it asks by
// broadcast: every request sent to the new backend meanwhile is lost. Without the entry, the
// first packet asks at once.
type neighborForgetter interface {
	forget(addrs map[netip.Addr]bool) (int, error)
}

// rtnlNeighbors are the neighbour entries of the VPC interface, over rtnetlink in the network
// namespace of the thread that created it.
type rtnlNeighbors struct {
	h     *netlink.Handle
	iface string
}

func newRtnlNeighbors(iface string) (*rtnlNeighbors, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("opening rtnetlink socket: %w", err)
	}
	return &rtnlNeighbors{h: h, iface: iface}, nil
}

// forget deletes the dynamic entries of addrs on the interface; permanent and NOARP entries
// are someone's configuration and stay.
func (n *rtnlNeighbors) forget(addrs map[netip.Addr]bool) (int, error) {
	if len(addrs) == 0 {
		return 0, nil
	}
	link, err := n.h.LinkByName(n.iface)
	if err != nil {
		return 0, fmt.Errorf("finding %s: %w", n.iface, err)
	}
	entries, err := n.h.NeighList(link.Attrs().Index, netlink.FAMILY_V4)
	if err != nil {
		return 0, fmt.Errorf("listing the neighbours of %s: %w", n.iface, err)
	}
	deleted := 0
	for i := range entries {
		e := &entries[i]
		ip, ok := netip.AddrFromSlice(e.IP.To4())
		if !ok || !addrs[ip] || e.State&(netlink.NUD_PERMANENT|netlink.NUD_NOARP) != 0 {
			continue
		}
		if err := n.h.NeighDel(e); err != nil && err != unix.ENOENT {
			return deleted, fmt.Errorf("deleting the neighbour entry of %s on %s: %w", ip, n.iface, err)
		}
		deleted++
	}
	return deleted, nil
}

// newBackendAddrs are the backend addresses of upserts that the identity did not have in its
// committed state: those the gateway may have cached a neighbour entry of for another Pod.
func (a *Agent) newBackendAddrs(upserts []gwstate.Identity) map[netip.Addr]bool {
	var out map[netip.Addr]bool
	for _, id := range upserts {
		old := a.applied[id.Key()]
		for _, b := range id.Backends {
			if containsBackendIP(old.Backends, b.IP) {
				continue
			}
			if out == nil {
				out = map[netip.Addr]bool{}
			}
			out[b.IP] = true
		}
	}
	return out
}

func containsBackendIP(bs []gwstate.Backend, ip netip.Addr) bool {
	for _, b := range bs {
		if b.IP == ip {
			return true
		}
	}
	return false
}

// forgetNeighbors deletes the neighbour entries of addrs before the commit that sends traffic
// to them. A failure is logged: the entry then ages out as it would have without the agent.
func (a *Agent) forgetNeighbors(addrs map[netip.Addr]bool) {
	if a.neigh == nil || len(addrs) == 0 {
		return
	}
	n, err := a.neigh.forget(addrs)
	if n > 0 {
		a.log.V(1).Info("forgot the neighbour entries of new backends", "count", n)
	}
	if err != nil {
		a.log.Error(err, "forgetting neighbour entries of new backends")
	}
}
