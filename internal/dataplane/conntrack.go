package dataplane

import (
	"fmt"
	"net/netip"

	"github.com/ti-mo/conntrack"

	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// flowCleaner deletes conntrack entries (SPEC D6).
type flowCleaner interface {
	// clean deletes every IPv4 flow whose original destination is one of the targets' VIP,
	// port and protocol and whose reply source is not one of that target's keep addresses
	// (nil keep: every flow of the target). It returns the number of deleted flows.
	clean(targets []cleanTarget) (int, error)
}

type cleanTarget struct {
	vip   netip.Addr
	port  uint16
	proto uint8
	keep  map[netip.AddrPort]bool // backends that stay; reply source is ip:port of the backend
}

func newCleanTarget(vip string, port int32, proto gwstate.Protocol, backends []gwstate.Backend) cleanTarget {
	t := cleanTarget{vip: netip.MustParseAddr(vip), port: uint16(port), proto: protoNumber(proto), keep: map[netip.AddrPort]bool{}}
	for _, b := range backends {
		t.keep[netip.AddrPortFrom(netip.MustParseAddr(b.IP), uint16(b.Port))] = true
	}
	return t
}

// ctCleaner talks to the kernel's conntrack table over netlink (github.com/ti-mo/conntrack), in
// the network namespace of the thread that created it.
type ctCleaner struct{ conn *conntrack.Conn }

func newCTCleaner() (*ctCleaner, error) {
	c, err := conntrack.Dial(nil)
	if err != nil {
		return nil, fmt.Errorf("opening conntrack netlink socket: %w", err)
	}
	return &ctCleaner{conn: c}, nil
}

func (c *ctCleaner) clean(targets []cleanTarget) (int, error) {
	if len(targets) == 0 {
		return 0, nil
	}
	type key struct {
		vip   netip.Addr
		port  uint16
		proto uint8
	}
	byKey := make(map[key]cleanTarget, len(targets))
	for _, t := range targets {
		byKey[key{t.vip, t.port, t.proto}] = t
	}
	flows, err := c.conn.Dump(&conntrack.DumpOptions{})
	if err != nil {
		return 0, fmt.Errorf("listing conntrack: %w", err)
	}
	deleted := 0
	var firstErr error
	for _, f := range flows {
		o := f.TupleOrig
		if !o.IP.DestinationAddress.Is4() {
			continue
		}
		t, ok := byKey[key{o.IP.DestinationAddress, o.Proto.DestinationPort, o.Proto.Protocol}]
		if !ok {
			continue
		}
		r := f.TupleReply
		if t.keep[netip.AddrPortFrom(r.IP.SourceAddress, r.Proto.SourcePort)] {
			continue
		}
		if err := c.conn.Delete(f); err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("deleting conntrack entry %s: %w", o.IP.DestinationAddress, err)
			}
			continue
		}
		deleted++
	}
	return deleted, firstErr
}
