package dataplane

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/ti-mo/conntrack"

	"github.com/vpcgw/vpcgw/internal/netlab"
)

// ctTable is a conntrack table of a network namespace of its own, with a cleaner opened in it
// and a connection that writes entries into it.
type ctTable struct {
	cleaner *ctCleaner
	writer  *conntrack.Conn
}

func newCTTable(tb testing.TB, l *netlab.Lab) ctTable {
	tb.Helper()
	ns, err := l.AddNetns("ct")
	if err != nil {
		tb.Fatal(err)
	}
	var tab ctTable
	if err := netlab.InNetns(ns, func() error {
		var err error
		if tab.cleaner, err = newCTCleaner(); err != nil {
			return err
		}
		tab.writer, err = conntrack.Dial(nil)
		return err
	}); err != nil {
		tb.Fatal(err)
	}
	return tab
}

// add writes a confirmed entry from client to vip:port, answered by backend (a DNATed flow:
// the reply tuple comes from the backend).
func (tab ctTable) add(tb testing.TB, proto uint8, client netip.AddrPort, vip netip.AddrPort, backend netip.AddrPort) {
	tb.Helper()
	f := conntrack.NewFlow(proto, conntrack.StatusConfirmed|conntrack.StatusDstNAT, client.Addr(), vip.Addr(), client.Port(), vip.Port(), 120, 0)
	f.TupleReply.IP.SourceAddress, f.TupleReply.Proto.SourcePort = backend.Addr(), backend.Port()
	if proto == 6 {
		f.ProtoInfo.TCP = &conntrack.ProtoInfoTCP{State: 3} // ESTABLISHED
	}
	if err := tab.writer.Create(f); err != nil {
		tb.Fatalf("creating conntrack entry %s -> %s (%s): %v", client, vip, backend, err)
	}
}

// originals are the table's entries as "proto client -> vip", sorted.
func (tab ctTable) originals(tb testing.TB) []string {
	tb.Helper()
	flows, err := tab.writer.Dump(nil)
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, f := range flows {
		o := f.TupleOrig
		out = append(out, fmt.Sprintf("%d %s:%d -> %s:%d", o.Proto.Protocol, o.IP.SourceAddress, o.Proto.SourcePort, o.IP.DestinationAddress, o.Proto.DestinationPort))
	}
	slices.Sort(out)
	return out
}

// The cleaner reads the kernel's entries itself (tuples only): it deletes exactly the DNATed
// flows of a target whose reply comes from a backend that is gone, or whose client a narrowed
// source range no longer admits, and leaves the other identities' flows, the kept backends'
// flows and other protocols alone.
// covers: D6, N7
func TestRealConntrackCleanDeletesOnlyStaleFlows(t *testing.T) {
	tab := newCTTable(t, newLab(t))
	ap := netip.MustParseAddrPort
	vip, other := ap("172.31.0.10:53"), ap("172.31.0.11:53")
	kept, gone := ap("10.0.1.2:5353"), ap("10.0.1.3:5353")
	tab.add(t, 17, ap("192.0.2.1:40001"), vip, kept)
	tab.add(t, 17, ap("192.0.2.1:40002"), vip, gone)
	tab.add(t, 6, ap("192.0.2.1:40003"), vip, gone)    // TCP to the same VIP and port: another identity
	tab.add(t, 17, ap("192.0.2.1:40004"), other, gone) // another VIP
	tab.add(t, 17, ap("198.51.100.7:40005"), vip, kept)

	udp := cleanTarget{vip: vip.Addr(), port: vip.Port(), proto: 17, byReply: true, keep: map[netip.AddrPort]bool{kept: true}}
	n, err := tab.cleaner.clean([]cleanTarget{udp})
	if err != nil || n != 1 {
		t.Fatalf("clean of the UDP identity's gone backend: %d deleted, %v; want 1", n, err)
	}
	want := []string{
		"17 192.0.2.1:40001 -> 172.31.0.10:53",
		"17 192.0.2.1:40004 -> 172.31.0.11:53",
		"17 198.51.100.7:40005 -> 172.31.0.10:53",
		"6 192.0.2.1:40003 -> 172.31.0.10:53",
	}
	if got := tab.originals(t); !slices.Equal(got, want) {
		t.Fatalf("after the clean: %q, want %q", got, want)
	}

	// The identity's source ranges narrowed to 192.0.2.0/24: the other client's flow goes.
	ranges := cleanTarget{vip: vip.Addr(), port: vip.Port(), proto: 17, allow: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}}
	if n, err := tab.cleaner.clean([]cleanTarget{ranges}); err != nil || n != 1 {
		t.Fatalf("clean by source range: %d deleted, %v; want 1", n, err)
	}
	if got := tab.originals(t); slices.Contains(got, "17 198.51.100.7:40005 -> 172.31.0.10:53") || len(got) != 3 {
		t.Fatalf("after the source-range clean: %q, want the outside client's flow gone and 3 left", got)
	}
}

// BenchmarkRealConntrackClean: one clean over a table of 40,000 TCP entries (a busy gateway's
// TIME_WAIT), none of them stale: the cost of the list alone, which the agent pays on every
// backend removal of a UDP Service (SPEC D6). B/op is what the list allocates.
func BenchmarkRealConntrackClean(b *testing.B) {
	if err := netlab.Available(); err != nil {
		b.Skipf("skipping real-kernel benchmark: %v", err)
	}
	l, err := netlab.New("ctb")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := l.Cleanup(); err != nil {
			b.Errorf("lab cleanup: %v", err)
		}
	})
	tab := newCTTable(b, l)
	vip, backend := netip.MustParseAddrPort("172.31.0.10:80"), netip.MustParseAddrPort("10.0.1.2:8080")
	const entries = 40000
	for i := range entries {
		client := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 2, byte(i >> 8), byte(i)}), uint16(10000+i%50000))
		tab.add(b, 6, client, vip, backend)
	}
	target := cleanTarget{vip: netip.MustParseAddr("172.31.0.20"), port: 53, proto: 17, byReply: true}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := tab.cleaner.clean([]cleanTarget{target}); err != nil {
			b.Fatal(err)
		}
	}
}
