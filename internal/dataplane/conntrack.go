package dataplane

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/mdlayher/netlink"
	"github.com/ti-mo/conntrack"
	"github.com/ti-mo/netfilter"
	"golang.org/x/sys/unix"

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

// ctCleaner talks to the kernel's conntrack table over netlink, in the network namespace of
// the thread that created it. It lists the IPv4 entries itself and decodes only their tuples,
// in place: github.com/ti-mo/conntrack's Dump decodes every entry whole, 2.5 KiB allocated per
// entry against 0.6 KiB here (BenchmarkRealConntrackClean: 103 against 23 MB for a table of
// 40,000, which a busy gateway holds in TIME_WAIT alone, on every backend removal). It deletes
// through github.com/ti-mo/conntrack.
type ctCleaner struct {
	conn *conntrack.Conn
	list *netfilter.Conn
}

func newCTCleaner() (*ctCleaner, error) {
	c, err := conntrack.Dial(nil)
	if err != nil {
		return nil, fmt.Errorf("opening conntrack netlink socket: %w", err)
	}
	list, err := netfilter.Dial(nil)
	if err != nil {
		_ = c.Close() // just opened, nothing sent on it
		return nil, fmt.Errorf("opening conntrack netlink socket: %w", err)
	}
	return &ctCleaner{conn: c, list: list}, nil
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
	msgs, err := c.list.Query(ctDumpIPv4)
	if err != nil {
		return 0, fmt.Errorf("listing conntrack: %w", err)
	}
	deleted := 0
	var firstErr error
	for _, m := range msgs {
		e, err := decodeCTEntry(m)
		if err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("listing conntrack: %w", err)
			}
			continue
		}
		o, r := e.orig, e.reply
		if !o.dst.Is4() {
			continue
		}
		t, ok := byKey[key{o.dst, o.dport, o.proto}]
		if !ok || !t.stale(o.src, netip.AddrPortFrom(r.src, r.sport)) {
			continue
		}
		if err := c.conn.Delete(e.flow()); err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("deleting conntrack entry %s: %w", o.dst, err)
			}
			continue
		}
		deleted++
	}
	return deleted, firstErr
}

// ctDumpIPv4 asks for every IPv4 conntrack entry (IPCTNL_MSG_CT_GET as a dump, family AF_INET).
var ctDumpIPv4 = func() netlink.Message {
	m, err := netfilter.MarshalNetlink(netfilter.Header{
		SubsystemID: netfilter.NFSubsysCTNetlink,
		MessageType: ctMsgGet,
		Family:      netfilter.ProtoIPv4,
		Flags:       netlink.Request | netlink.Dump,
	}, nil)
	if err != nil {
		panic(fmt.Sprintf("conntrack dump request: %v", err)) // a constant message
	}
	return m
}()

// The attributes of a conntrack entry that the cleaner reads (linux/netfilter/nfnetlink_conntrack.h).
const (
	ctMsgGet netfilter.MessageType = 1 // IPCTNL_MSG_CT_GET

	ctaTupleOrig  = 1 // CTA_TUPLE_ORIG
	ctaTupleReply = 2 // CTA_TUPLE_REPLY
	ctaZone       = 18

	ctaTupleIP    = 1 // CTA_TUPLE_IP
	ctaTupleProto = 2 // CTA_TUPLE_PROTO
	ctaIPv4Src    = 1 // CTA_IP_V4_SRC
	ctaIPv4Dst    = 2 // CTA_IP_V4_DST
	ctaProtoNum   = 1 // CTA_PROTO_NUM
	ctaProtoSrc   = 2 // CTA_PROTO_SRC_PORT
	ctaProtoDst   = 3 // CTA_PROTO_DST_PORT
)

// ctTuple is one direction of a conntrack entry.
type ctTuple struct {
	src, dst     netip.Addr
	sport, dport uint16
	proto        uint8
}

// ctEntry is what the cleaner reads of a conntrack entry: its tuples and its zone.
type ctEntry struct {
	orig, reply ctTuple
	zone        uint16
}

// flow is the entry as github.com/ti-mo/conntrack deletes it: the kernel finds it by its
// original tuple in its zone.
func (e ctEntry) flow() conntrack.Flow {
	var f conntrack.Flow
	f.TupleOrig.IP.SourceAddress, f.TupleOrig.IP.DestinationAddress = e.orig.src, e.orig.dst
	f.TupleOrig.Proto.Protocol = e.orig.proto
	f.TupleOrig.Proto.SourcePort, f.TupleOrig.Proto.DestinationPort = e.orig.sport, e.orig.dport
	f.Zone = e.zone
	return f
}

// decodeCTEntry reads the tuples and the zone of one entry of a conntrack dump and skips the
// rest of its attributes, without allocating: the attributes are walked in place (a decoder
// per nested attribute cost 1 KiB an entry).
func decodeCTEntry(m netlink.Message) (ctEntry, error) {
	var e ctEntry
	if len(m.Data) < 4 { // struct nfgenmsg, then the attributes
		return e, fmt.Errorf("decoding a conntrack entry: a message of %d bytes", len(m.Data))
	}
	ok := walkAttrs(m.Data[4:], func(typ uint16, v []byte) bool {
		switch typ {
		case ctaTupleOrig:
			return e.orig.decode(v)
		case ctaTupleReply:
			return e.reply.decode(v)
		case ctaZone:
			if len(v) != 2 {
				return false
			}
			e.zone = binary.BigEndian.Uint16(v)
		}
		return true
	})
	if !ok {
		return e, errors.New("decoding a conntrack entry: a malformed attribute")
	}
	return e, nil
}

// decode reads a CTA_TUPLE_* attribute's IPv4 addresses, protocol and ports.
func (t *ctTuple) decode(b []byte) bool {
	return walkAttrs(b, func(typ uint16, v []byte) bool {
		switch typ {
		case ctaTupleIP:
			return walkAttrs(v, func(typ uint16, v []byte) bool {
				switch typ {
				case ctaIPv4Src:
					t.src = addr4(v)
				case ctaIPv4Dst:
					t.dst = addr4(v)
				}
				return true
			})
		case ctaTupleProto:
			return walkAttrs(v, func(typ uint16, v []byte) bool {
				switch {
				case typ == ctaProtoNum && len(v) == 1:
					t.proto = v[0]
				case typ == ctaProtoSrc && len(v) == 2:
					t.sport = binary.BigEndian.Uint16(v)
				case typ == ctaProtoDst && len(v) == 2:
					t.dport = binary.BigEndian.Uint16(v)
				}
				return true
			})
		}
		return true
	})
}

// walkAttrs calls f with the type (its flags masked) and the payload of each netlink attribute
// in b, in order, until f returns false. It reports whether every attribute was whole and f
// returned true for each. Attribute headers are in host byte order; netfilter's payloads are
// big-endian.
func walkAttrs(b []byte, f func(typ uint16, v []byte) bool) bool {
	for len(b) > 0 {
		if len(b) < unix.NLA_HDRLEN {
			return false
		}
		n := int(binary.NativeEndian.Uint16(b[0:2]))
		if n < unix.NLA_HDRLEN || n > len(b) {
			return false
		}
		if !f(binary.NativeEndian.Uint16(b[2:4])&^(unix.NLA_F_NESTED|unix.NLA_F_NET_BYTEORDER), b[unix.NLA_HDRLEN:n]) {
			return false
		}
		n = (n + unix.NLA_ALIGNTO - 1) &^ (unix.NLA_ALIGNTO - 1)
		if n >= len(b) {
			return true
		}
		b = b[n:]
	}
	return true
}

// addr4 is an IPv4 address attribute's value (the zero Addr when it is not 4 bytes).
func addr4(b []byte) netip.Addr {
	if len(b) != 4 {
		return netip.Addr{}
	}
	return netip.AddrFrom4([4]byte(b))
}
