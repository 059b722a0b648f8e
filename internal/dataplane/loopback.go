package dataplane

import (
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
)

// VIPLabel is the address label of the ClusterIPs the agent holds on lo (SPEC D5).
const VIPLabel = "lo:ko-vip"

// vipHolder converges the set of labelled /32 addresses on lo.
type vipHolder interface {
	// list returns the addresses on lo that carry VIPLabel, sorted.
	list() ([]netip.Addr, error)
	// converge adds the missing addresses and deletes labelled ones not in want; unlabelled
	// addresses are never touched. It returns what it added and deleted.
	converge(want []netip.Addr) (added, deleted []netip.Addr, err error)
}

// loVIPs manages lo through rtnetlink in the namespace of the thread that created it.
type loVIPs struct {
	h *netlink.Handle
}

func newLoVIPs() (*loVIPs, error) {
	h, err := netlink.NewHandle()
	if err != nil {
		return nil, fmt.Errorf("opening rtnetlink socket: %w", err)
	}
	return &loVIPs{h: h}, nil
}

func (l *loVIPs) lo() (netlink.Link, error) {
	link, err := l.h.LinkByName("lo")
	if err != nil {
		return nil, fmt.Errorf("finding lo: %w", err)
	}
	return link, nil
}

func (l *loVIPs) labelled(link netlink.Link) (map[netip.Addr]netlink.Addr, error) {
	addrs, err := l.h.AddrList(link, netlink.FAMILY_V4)
	if err != nil {
		return nil, fmt.Errorf("listing addresses of lo: %w", err)
	}
	out := map[netip.Addr]netlink.Addr{}
	for _, a := range addrs {
		if a.Label != VIPLabel || a.IPNet == nil {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.IP.To4())
		if !ok {
			continue
		}
		out[ip] = a
	}
	return out, nil
}

func (l *loVIPs) list() ([]netip.Addr, error) {
	link, err := l.lo()
	if err != nil {
		return nil, err
	}
	have, err := l.labelled(link)
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(have))
	for a := range have {
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}

func (l *loVIPs) converge(want []netip.Addr) (added, deleted []netip.Addr, err error) {
	link, err := l.lo()
	if err != nil {
		return nil, nil, err
	}
	have, err := l.labelled(link)
	if err != nil {
		return nil, nil, err
	}
	wantSet := make(map[netip.Addr]bool, len(want))
	for _, a := range want {
		wantSet[a] = true
		if _, ok := have[a]; ok {
			continue
		}
		ip := a.As4()
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: net.IP(ip[:]), Mask: net.CIDRMask(32, 32)}, Label: VIPLabel}
		if err := l.h.AddrReplace(link, addr); err != nil {
			return added, deleted, fmt.Errorf("adding %s/32 to lo: %w", a, err)
		}
		added = append(added, a)
	}
	for a, addr := range have {
		if wantSet[a] {
			continue
		}
		if err := l.h.AddrDel(link, &addr); err != nil {
			return added, deleted, fmt.Errorf("deleting %s/32 from lo: %w", a, err)
		}
		deleted = append(deleted, a)
	}
	slices.SortFunc(deleted, netip.Addr.Compare)
	return added, deleted, nil
}
