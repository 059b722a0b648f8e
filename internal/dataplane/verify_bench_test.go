package dataplane

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/nftables"
)

// BenchmarkL6Verify: the drift check at n identities × 10 backends, on the netlink path. "quiet":
// no one committed since the last check (one GETGEN round trip). "foreign-commit": another
// writer (kube-ovn, iptables-nft) committed in between, so the whole table is read and compared
// (SPEC L6, K8).
// covers: L6, K8
func BenchmarkL6Verify(b *testing.B) {
	for _, n := range benchSizes {
		for _, foreign := range []bool{false, true} {
			name := fmt.Sprintf("identities=%d/quiet", n)
			if foreign {
				name = fmt.Sprintf("identities=%d/foreign-commit", n)
			}
			b.Run(name, func(b *testing.B) {
				a, _ := programmedAgent(b, false, n)
				ctx := context.Background()
				other, err := nftables.New()
				if err != nil {
					b.Fatal(err)
				}
				t := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: "other"}
				if drift, err := a.Verify(ctx); drift != "" || err != nil {
					b.Fatalf("verify: drift %q, err %v", drift, err)
				}
				b.ResetTimer()
				for range b.N {
					if foreign {
						b.StopTimer()
						other.AddTable(t) // a commit of someone else's
						if err := other.Flush(); err != nil {
							b.Fatal(err)
						}
						b.StartTimer()
					}
					if drift, err := a.Verify(ctx); drift != "" || err != nil {
						b.Fatalf("verify: drift %q, err %v", drift, err)
					}
				}
			})
		}
	}
}
