package dataplane

import (
	"net/netip"
	"testing"

	"github.com/mdlayher/netlink"
	"github.com/ti-mo/netfilter"
)

// ctMessage is a conntrack dump entry as the kernel sends it: struct nfgenmsg, then the
// original and reply tuples (nested, big-endian payloads) and the zone.
func ctMessage(t *testing.T, orig, reply ctTuple, zone uint16) netlink.Message {
	t.Helper()
	tuple := func(typ uint16, tp ctTuple) netfilter.Attribute {
		ip := netfilter.Attribute{Type: ctaTupleIP, Nested: true, Children: []netfilter.Attribute{
			{Type: ctaIPv4Src, Data: tp.src.AsSlice()}, {Type: ctaIPv4Dst, Data: tp.dst.AsSlice()}}}
		num := netfilter.Attribute{Type: ctaProtoNum, Data: []byte{tp.proto}}
		sport, dport := netfilter.Attribute{Type: ctaProtoSrc}, netfilter.Attribute{Type: ctaProtoDst}
		sport.PutUint16(tp.sport)
		dport.PutUint16(tp.dport)
		proto := netfilter.Attribute{Type: ctaTupleProto, Nested: true, Children: []netfilter.Attribute{num, sport, dport}}
		return netfilter.Attribute{Type: typ, Nested: true, Children: []netfilter.Attribute{ip, proto}}
	}
	z := netfilter.Attribute{Type: ctaZone}
	z.PutUint16(zone)
	m, err := netfilter.MarshalNetlink(netfilter.Header{SubsystemID: netfilter.NFSubsysCTNetlink, Family: netfilter.ProtoIPv4},
		[]netfilter.Attribute{tuple(ctaTupleOrig, orig), tuple(ctaTupleReply, reply), z})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// The cleaner's own decoding of a dump entry reads both tuples and the zone, and refuses a
// truncated or malformed entry with an error instead of reading past it.
// covers: D6
func TestDecodeCTEntry(t *testing.T) {
	a := netip.MustParseAddr
	orig := ctTuple{src: a("192.0.2.1"), dst: a("172.31.0.10"), sport: 40001, dport: 53, proto: 17}
	reply := ctTuple{src: a("10.0.1.2"), dst: a("192.0.2.1"), sport: 5353, dport: 40001, proto: 17}
	m := ctMessage(t, orig, reply, 7)
	e, err := decodeCTEntry(m)
	if err != nil || e.orig != orig || e.reply != reply || e.zone != 7 {
		t.Fatalf("decoded %+v, %v; want orig %+v, reply %+v, zone 7", e, err, orig, reply)
	}
	f := e.flow()
	if f.TupleOrig.IP.SourceAddress != orig.src || f.TupleOrig.Proto.DestinationPort != 53 || f.Zone != 7 {
		t.Errorf("the flow to delete: %+v, want the original tuple in zone 7", f.TupleOrig)
	}

	// (len-3 cuts into the zone's value; only the last attribute's padding may be missing.)
	for _, n := range []int{0, 3, 4 + 3, len(m.Data) - 3} {
		cut := netlink.Message{Header: m.Header, Data: m.Data[:n]}
		if _, err := decodeCTEntry(cut); err == nil {
			t.Errorf("an entry cut to %d of %d bytes was decoded without an error", n, len(m.Data))
		}
	}
	bad := netlink.Message{Header: m.Header, Data: append([]byte(nil), m.Data...)}
	bad.Data[4] = 2 // the first attribute's length below its header's
	if _, err := decodeCTEntry(bad); err == nil {
		t.Error("an attribute shorter than its header was decoded without an error")
	}
}
