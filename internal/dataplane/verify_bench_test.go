package dataplane

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
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

// BenchmarkL8RepairAfterForeignChange: the agent serving (Serve, in process, with its kernel
// change notifications and no periodic check) holds n identities × 10 backends; someone else
// changes its objects with the nft binary. One op is the time from starting that nft command to
// the end of the agent's check that found and repaired the drift (SPEC L8: within a second). The nft command's own start (ip netns
// exec, a few ms) is inside the figure.
// covers: L8
func BenchmarkL8RepairAfterForeignChange(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		for _, c := range []struct {
			name string
			argv []string
		}{
			{"element-removed", []string{"nft", "delete", "element", "ip", TableName, ServiceMap, "{", "10.200.0.1", ".", "tcp", ".", "80", "}"}},
			{"table-flushed", []string{"nft", "flush", "table", "ip", TableName}},
		} {
			b.Run(fmt.Sprintf("identities=%d/%s", n, c.name), func(b *testing.B) {
				l := benchLab(b)
				ns, err := l.AddNetns("gw")
				if err != nil {
					b.Fatal(err)
				}
				enter(b, ns)
				repaired := make(chan struct{}, 1)
				log := funcr.New(func(_, args string) {
					// Serve logs the check once Verify has repaired what it found.
					if strings.Contains(args, `"msg"="kernel change checked"`) && !strings.Contains(args, `"drift"=""`) {
						repaired <- struct{}{}
					}
				}, funcr.Options{Verbosity: 1}) // the check is logged at V(1)
				a := newBenchAgentConfig(b, Config{NoLoopback: true, NoConntrack: true})
				st := scaleState(1, n, 10)
				if err := a.Apply(context.Background(), st); err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				in, stdin := io.Pipe()
				served := make(chan error, 1)
				go func() { served <- Serve(ctx, a, in, io.Discard, ServeOptions{}, log) }()
				b.Cleanup(func() {
					cancel()
					_ = stdin.Close()
					if err := <-served; err != nil {
						b.Logf("serve: %v", err)
					}
				})
				b.ResetTimer()
				for range b.N {
					if _, err := l.Exec(ns, c.argv...); err != nil {
						b.Fatal(err)
					}
					select {
					case <-repaired:
					case err := <-served:
						b.Fatalf("agent ended: %v", err)
					case <-time.After(time.Minute):
						b.Fatal("no repair within a minute")
					}
				}
			})
		}
	}
}
