// covers: N2, P1
package dataplane

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// BenchmarkN2OwnAddressRead is what the refusal of the gateway's own addresses costs each apply
// that changes an identity with backends, with n ClusterIPs held on lo (a gateway serving n
// Services holds up to n): refresh-ns/op is the refresh that drains the notification of one
// address changed since the last apply.
func BenchmarkN2OwnAddressRead(b *testing.B) {
	for _, n := range []int{10, 1000, 10000} {
		b.Run(fmt.Sprintf("lo-addresses=%d", n), func(b *testing.B) {
			ns, err := benchLab(b).AddNetns("gw")
			if err != nil {
				b.Fatal(err)
			}
			enter(b, ns)
			lo, err := netlink.LinkByName("lo")
			if err != nil {
				b.Fatal(err)
			}
			for i := range n {
				ip := net.IPv4(10, 96, byte(i/250), byte(i%250+1))
				if err := netlink.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: ip, Mask: net.CIDRMask(32, 32)}, Label: VIPLabel}); err != nil {
					b.Fatal(err)
				}
			}
			r, err := newRtnlAddrs()
			if err != nil {
				b.Fatal(err)
			}
			if err := r.refresh(); err != nil {
				b.Fatal(err)
			}
			if len(r.addrs) < n {
				b.Fatalf("%d addresses, want at least %d", len(r.addrs), n)
			}
			// Each op: one address changes (as a Service comes or goes), then the refresh
			// of the next apply.
			extra := &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(10, 97, 0, 1), Mask: net.CIDRMask(32, 32)}, Label: VIPLabel}
			var refresh time.Duration
			b.ResetTimer()
			for i := range b.N {
				change := netlink.AddrAdd
				if i%2 == 1 {
					change = netlink.AddrDel
				}
				if err := change(lo, extra); err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				if err := r.refresh(); err != nil {
					b.Fatal(err)
				}
				refresh += time.Since(start)
				if _, ok := r.lookup(netip.MustParseAddr("10.97.0.1")); ok != (i%2 == 0) {
					b.Fatalf("op %d: 10.97.0.1 known %v after the change", i, ok)
				}
			}
			// ns/op includes the address change, the kernel's cost (O(addresses on lo)).
			b.ReportMetric(float64(refresh.Nanoseconds())/float64(b.N), "refresh-ns/op")
		})
	}
}
