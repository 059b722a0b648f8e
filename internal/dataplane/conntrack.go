package dataplane

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/ti-mo/conntrack"

	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// flowCleaner deletes conntrack entries (SPEC D6).
type flowCleaner interface {
	// clean deletes every IPv4 flow whose original destination is one of the targets' VIP,
	// port and protocol and that the target calls stale (cleanTarget.stale). It returns the
	// number of deleted flows.
	clean(targets []cleanTarget) (int, error)
}

type cleanTarget struct {
	vip   netip.Addr
	port  uint16
	proto uint8
	// byReply: a flow whose reply source is not in keep is stale (empty keep: every flow).
	byReply bool
	keep    map[netip.AddrPort]bool // backends that stay; reply source is ip:port of the backend
	// allow, when not empty: a flow whose original source is in none of them is stale (the
	// identity's source ranges were narrowed, SPEC N7).
	allow []netip.Prefix
}

// newCleanTarget names the flows of an identity whose reply comes from none of keep's backend
// lists (none: all its flows).
func newCleanTarget(k gwstate.IdentityKey, keep ...[]gwstate.Backend) cleanTarget {
	t := cleanTarget{vip: k.VIP, port: uint16(k.Port), proto: protoNumber(k.Protocol), byReply: true, keep: map[netip.AddrPort]bool{}}
	for _, bs := range keep {
		for _, b := range bs {
			t.keep[netip.AddrPortFrom(b.IP, uint16(b.Port))] = true
		}
	}
	return t
}

// flowTarget says which conntrack entries of the identity id, as just committed, must go
// (ok false: none). old is what was committed before it, had whether old was in the committed
// state at all (with or without backends); full says the commit was a full sync, after which the
// agent trusts no earlier flow.
//   - UDP, when the backends or the draining backends changed, or the backends went to or from
//     zero (SPEC D6, L11): flows whose reply comes from neither a backend nor a draining one.
//     A draining backend keeps its flows until it leaves Draining, also when no backend is left
//     (hence had counts identities without backends: the last draining one's departure is the
//     change that deletes its flows). TCP flows to backends that stay are never named.
//   - With source ranges, when they changed (SPEC N7): flows, TCP or UDP, whose original source
//     is outside them. The firewall rule sees only the first packet of a connection (nat hook),
//     so without this a client whose range was removed would keep its established flows; once
//     its entry is gone, its next packet is a new connection and dropped.
func flowTarget(full bool, id, old gwstate.Identity, had bool) (cleanTarget, bool) {
	has, hadBackends := len(id.Backends) > 0, had && len(old.Backends) > 0
	changed := had && (!slices.Equal(old.Backends, id.Backends) || !slices.Equal(old.Draining, id.Draining))
	byReply := id.Protocol == gwstate.UDP && (full || hadBackends != has || changed)
	byRange := len(id.SourceRanges) > 0 && (full || (had && !slices.Equal(old.SourceRanges, id.SourceRanges)))
	if !byReply && !byRange {
		return cleanTarget{}, false
	}
	t := newCleanTarget(id.Key(), id.Backends, id.Draining)
	t.byReply = byReply
	if byRange {
		t.allow = sourcePrefixes(slices.Clone(id.SourceRanges))
	}
	return t, true
}

// stale reports whether a flow of the target's identity must go, given its original source
// and its reply source.
func (t cleanTarget) stale(origSrc netip.Addr, replySrc netip.AddrPort) bool {
	if t.byReply && !t.keep[replySrc] {
		return true
	}
	if len(t.allow) == 0 {
		return false
	}
	for _, p := range t.allow {
		if p.Contains(origSrc) {
			return false
		}
	}
	return true
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
		if !t.stale(o.IP.SourceAddress, netip.AddrPortFrom(r.IP.SourceAddress, r.Proto.SourcePort)) {
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
