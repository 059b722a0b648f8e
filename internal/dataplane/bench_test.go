// covers: P1, P2, P4
package dataplane

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netns"

	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/netlab"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

// Benchmarks run inside network namespaces created by netlab. The calling goroutine's thread
// enters the namespace (runtime.LockOSThread + setns) and is never unlocked, so Go discards
// that thread when the benchmark function returns. Netlink sockets stay bound to the namespace
// they were opened in; the nft binary (text path) runs in the namespace of the thread that
// starts it.

func benchLab(b *testing.B) *netlab.Lab {
	b.Helper()
	if err := netlab.Available(); err != nil {
		testutil.Skip(b, fmt.Sprintf("skipping benchmark: %v", err))
	}
	l, err := netlab.New("bn")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := l.Cleanup(); err != nil {
			b.Errorf("lab cleanup: %v", err)
		}
	})
	return l
}

// enter moves the calling goroutine, locked to its thread for good, into namespace ns.
// enterBenchGateway runs the rest of the benchmark in a new lab's gateway namespace.
func enterBenchGateway(b *testing.B) {
	b.Helper()
	ns, err := benchLab(b).AddNetns("gw")
	if err != nil {
		b.Fatal(err)
	}
	enter(b, ns)
}

func enter(b *testing.B, ns string) {
	b.Helper()
	runtime.LockOSThread()
	h, err := netns.GetFromName(ns)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = h.Close() }()
	if err := netns.Set(h); err != nil {
		b.Fatal(err)
	}
}

// scaleState is n identities (VIP 10.200.x.y:80/tcp), each with `backends` backends.
func scaleState(gen int64, n, backends int) gwstate.State {
	st := gwstate.State{Generation: gen, Identities: make([]gwstate.Identity, n)}
	for i := range n {
		id := gwstate.Identity{VIP: netip.MustParseAddr(fmt.Sprintf("10.200.%d.%d", i/250, i%250+1)), Port: 80, Protocol: gwstate.TCP}
		for j := range backends {
			id.Backends = append(id.Backends, be(fmt.Sprintf("10.1.%d.%d", j, i%250+1), 8080))
		}
		st.Identities[i] = id
	}
	st.Normalize()
	return st
}

// uniqueScaleState is scaleState with every backend its own: 10.(16+j).(i/250).(i%250+1).
func uniqueScaleState(gen int64, n, backends int) gwstate.State {
	st := scaleState(gen, n, backends)
	for i := range st.Identities {
		for j := range st.Identities[i].Backends {
			st.Identities[i].Backends[j] = be(fmt.Sprintf("10.%d.%d.%d", 16+j, i/250, i%250+1), 8080)
		}
	}
	st.Normalize()
	return st
}

// withChangedIdentity returns st with identity k's backends replaced (variant v: drop backend
// v%len), sharing everything else.
func withChangedIdentity(st gwstate.State, k, v int) gwstate.State {
	out := st
	out.Identities = append([]gwstate.Identity(nil), st.Identities...)
	id := out.Identities[k]
	bes := append([]gwstate.Backend(nil), id.Backends...)
	drop := v % len(bes)
	id.Backends = append(bes[:drop], bes[drop+1:]...)
	out.Identities[k] = id
	return out
}

func newBenchAgent(b *testing.B, text bool) *Agent {
	b.Helper()
	return newBenchAgentConfig(b, Config{TextPath: text, NoLoopback: true, NoConntrack: true, NoWatch: true})
}

func newBenchAgentConfig(b *testing.B, cfg Config) *Agent {
	b.Helper()
	a, err := NewKernelAgent(cfg, logr.Discard())
	if err != nil {
		testutil.Skip(b, fmt.Sprintf("skipping benchmark: %v", err))
	}
	return a
}

var benchSizes = []int{10, 1000, 10000}

// programmedAgent enters a fresh gateway namespace and returns an agent (text path or netlink)
// that has programmed n identities × 10 backends, and that state.
func programmedAgent(b *testing.B, textPath bool, n int) (*Agent, gwstate.State) {
	b.Helper()
	return programmedAgentState(b, textPath, n, false)
}

// programmedAgentState is programmedAgent, with every backend its own when unique.
func programmedAgentState(b *testing.B, textPath bool, n int, unique bool) (*Agent, gwstate.State) {
	b.Helper()
	ns, err := benchLab(b).AddNetns("gw")
	if err != nil {
		b.Fatal(err)
	}
	enter(b, ns)
	a := newBenchAgent(b, textPath)
	base := scaleState(1, n, 10)
	if unique {
		base = uniqueScaleState(1, n, 10)
	}
	if err := a.Apply(context.Background(), base); err != nil {
		b.Fatal(err)
	}
	return a, base
}

// BenchmarkP1OneIdentityChange: with n identities × 10 backends programmed, one identity's
// backends change; one op = Agent.Apply of the new complete state (diff in memory + one
// kernel transaction). SPEC P1: ≤ 10 ms at 10,000 and flat.
func BenchmarkP1OneIdentityChange(b *testing.B) {
	for _, path := range []string{"netlink", "nft-text"} {
		for _, n := range benchSizes {
			b.Run(fmt.Sprintf("%s/identities=%d", path, n), func(b *testing.B) {
				a, base := programmedAgent(b, path == "nft-text", n)
				ctx := context.Background()
				k := n / 2
				variants := [2]gwstate.State{withChangedIdentity(base, k, 3), base}
				b.ResetTimer()
				var kernel time.Duration
				for i := range b.N {
					st := variants[i%2]
					st.Generation = int64(i + 2)
					if err := a.Apply(ctx, st); err != nil {
						b.Fatal(err)
					}
					kernel += a.commitTime
				}
				b.ReportMetric(float64(kernel.Microseconds())/1000/float64(b.N), "kernel-ms/op")
			})
		}
	}
}

// BenchmarkP1DecodeAndApply is the same change measured from the JSON line on: decode,
// normalize, validate and apply (what the agent does per state line on stdin).
func BenchmarkP1DecodeAndApply(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("netlink/identities=%d", n), func(b *testing.B) {
			a, base := programmedAgent(b, false, n)
			ctx := context.Background()
			lines := [2][]byte{mustJSON(b, withChangedIdentity(base, n/2, 3)), mustJSON(b, base)}
			b.ResetTimer()
			for i := range b.N {
				if ack := handleLine(ctx, a, lines[i%2], logr.Discard()); ack.Error != "" {
					b.Fatal(ack.Error)
				}
			}
		})
	}
}

// BenchmarkP1DeltaDecodeAndApply is the same change as it reaches the agent today: a delta
// line (gwstate.State.Base: the changed identity only) through handleLine, i.e. decode,
// normalize, validate and Agent.ApplyMessage. The lines alternate between the changed and the
// original backends, each against the generation before it; they are encoded before the timer
// starts (that is the controller's work).
func BenchmarkP1DeltaDecodeAndApply(b *testing.B) {
	for _, n := range append(benchSizes, -10000) {
		name, unique := fmt.Sprintf("netlink/identities=%d", n), n < 0
		if unique {
			// Every backend its own, so that the change moves the guard's elements too (SPEC D9).
			n = -n
			name = fmt.Sprintf("netlink/identities=%d-unique", n)
		}
		b.Run(name, func(b *testing.B) {
			a, base := programmedAgentState(b, false, n, unique)
			ctx := context.Background()
			k := n / 2
			variants := [2]gwstate.Identity{withChangedIdentity(base, k, 3).Identities[k], base.Identities[k]}
			lines := make([][]byte, b.N)
			for i := range b.N {
				lines[i] = mustJSON(b, gwstate.State{Generation: int64(i + 2), Base: int64(i + 1), Identities: []gwstate.Identity{variants[i%2]}})
			}
			b.ResetTimer()
			var kernel time.Duration
			for i := range b.N {
				if ack := handleLine(ctx, a, lines[i], logr.Discard()); ack.Error != "" {
					b.Fatal(ack.Error)
				}
				kernel += a.commitTime
			}
			b.ReportMetric(float64(kernel.Microseconds())/1000/float64(b.N), "kernel-ms/op")
		})
	}
}

// BenchmarkP2ColdSync: an empty table, a new agent, one state of 10,000 identities × 10
// backends. SPEC P2: ≤ 5 s. Reports the Go heap the agent holds afterwards. "netlink+watch" is
// the agent as it runs (SPEC L8): subscribed to the kernel's change notifications and reading
// them, so the kernel also builds a notification of every object the transactions write.
func BenchmarkP2ColdSync(b *testing.B) {
	for _, c := range []struct {
		path string
		n    int
	}{{"netlink", 2500}, {"netlink", 5000}, {"netlink", 10000}, {"netlink+watch", 10000}, {"nft-text", 10000}, {"netlink", -10000}} {
		path, n := c.path, c.n
		name := fmt.Sprintf("%s/identities=%dx10", path, n)
		if n < 0 {
			// Every backend its own: 100,000 endpoints (the guard's elements, SPEC D9), where
			// scaleState shares each among 40 identities.
			n = -n
			name = fmt.Sprintf("%s/identities=%dx10-unique", path, n)
		}
		b.Run(name, func(b *testing.B) {
			enterBenchGateway(b)
			st := scaleState(1, n, 10)
			if strings.HasSuffix(name, "-unique") {
				st = uniqueScaleState(1, n, 10)
			}
			ctx := context.Background()
			var heap uint64
			var kernel time.Duration
			for range b.N {
				b.StopTimer()
				_, _ = netlab.Run("nft", "delete", "table", "ip", TableName)
				runtime.GC()
				var before runtime.MemStats
				runtime.ReadMemStats(&before)
				var a *Agent
				watchCtx, stopWatch := context.WithCancel(ctx)
				if path == "netlink+watch" {
					a = newBenchAgentConfig(b, Config{NoLoopback: true, NoConntrack: true})
					a.watch.start(watchCtx, func(err error) { b.Error(err) })
				} else {
					a = newBenchAgent(b, path == "nft-text")
				}
				b.StartTimer()
				if err := a.Apply(ctx, st); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				stopWatch()
				kernel += a.commitTime
				runtime.GC()
				var after runtime.MemStats
				runtime.ReadMemStats(&after)
				heap = after.HeapAlloc - min(after.HeapAlloc, before.HeapAlloc)
				runtime.KeepAlive(a)
				b.StartTimer()
			}
			b.ReportMetric(float64(heap)/(1<<20), "agent-heap-MiB")
			b.ReportMetric(kernel.Seconds()/float64(b.N), "kernel-s/op")
		})
	}
}

// BenchmarkP2StageChunk is the cold sync of 10,000 identities × 10 backends (netlink) with K
// new identities per staging transaction; K=0 is one transaction. It chose defaultStageChunk.
func BenchmarkP2StageChunk(b *testing.B) {
	for _, k := range []int{0, 100, 250, 500, 1000} {
		b.Run(fmt.Sprintf("netlink/identities=10000x10/K=%d", k), func(b *testing.B) {
			enterBenchGateway(b)
			st := scaleState(1, 10000, 10)
			var kernel time.Duration
			for range b.N {
				b.StopTimer()
				_, _ = netlab.Run("nft", "delete", "table", "ip", TableName)
				a := newBenchAgent(b, false)
				a.stageChunk = k
				b.StartTimer()
				if err := a.Apply(context.Background(), st); err != nil {
					b.Fatal(err)
				}
				kernel += a.commitTime
			}
			b.ReportMetric(kernel.Seconds()/float64(b.N), "kernel-s/op")
		})
	}
}

// BenchmarkP2Restart: 10,000 identities × 10 backends are programmed (untimed); one op = a new
// agent's first Apply of the same state (SPEC L7, P7): it lists the table with its content and
// adopts every identity whose objects hold what it would write. "unchanged": the table holds the
// state, nothing is written. "one-differs": before each op (untimed) the previous agent changes
// one identity's backends, so that the new agent rewrites that identity only. kernel-s/op is the
// transactions, read-s/op the listing of the table (kernel dumps and their decoding); the rest
// is Go (planning, comparing). ops/op are the operations written.
func BenchmarkP2Restart(b *testing.B) {
	for _, variant := range []string{"unchanged", "one-differs"} {
		b.Run("netlink/identities=10000x10/"+variant, func(b *testing.B) {
			enterBenchGateway(b)
			st := scaleState(1, 10000, 10)
			ctx := context.Background()
			b.StopTimer()
			prev := newBenchAgent(b, false)
			if err := prev.Apply(ctx, st); err != nil {
				b.Fatal(err)
			}
			var kernel, read time.Duration
			var ops int
			for i := range b.N {
				b.StopTimer()
				if variant == "one-differs" {
					if err := prev.Apply(ctx, withChangedIdentity(st, 5000, i)); err != nil {
						b.Fatal(err)
					}
				}
				a := newBenchAgent(b, false)
				count := &countingBackend{backend: a.be}
				a.be = count
				b.StartTimer()
				if err := a.Apply(ctx, st); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				kernel += a.commitTime
				read += a.readTime
				ops += count.ops
				a.be = count.backend
				prev = a
			}
			b.ReportMetric(kernel.Seconds()/float64(b.N), "kernel-s/op")
			b.ReportMetric(read.Seconds()/float64(b.N), "read-s/op")
			b.ReportMetric(float64(ops)/float64(b.N), "ops/op")
		})
	}
}

// BenchmarkP2AgentProcessMemory starts the real agent process in a namespace, sends it 10,000
// identities × 10 backends as one JSON line and reports its peak and current RSS.
func BenchmarkP2AgentProcessMemory(b *testing.B) {
	l := benchLab(b)
	ns, err := l.AddNetns("gw")
	if err != nil {
		b.Fatal(err)
	}
	st := scaleState(1, 10000, 10)
	var hwm, rss float64
	for i := range b.N {
		a, err := l.StartAgent(ns, append(helperCmd(b, "agent"), "--verify-interval", "0")...)
		if err != nil {
			b.Fatal(err)
		}
		st.Generation = int64(i + 1)
		ack, err := a.Send(st)
		if err != nil || ack.Error != "" {
			b.Fatalf("ack %+v, err %v", ack, err)
		}
		hwm, rss = procMemMiB(b, a.Cmd.Process.Pid)
		if err := a.Close(); err != nil {
			b.Fatal(err)
		}
		_, _ = netlab.Run("ip", "netns", "exec", ns, "nft", "delete", "table", "ip", TableName)
	}
	b.ReportMetric(hwm, "peak-RSS-MiB")
	b.ReportMetric(rss, "RSS-MiB")
}

func procMemMiB(b *testing.B, pid int) (hwm, rss float64) {
	b.Helper()
	hwm, rss, err := netlab.ProcMemory(pid)
	if err != nil {
		b.Fatal(err)
	}
	return hwm, rss
}

// BenchmarkP4NewConnectionRate: new TCP connections (connect + RST close, each a new
// conntrack entry dispatched through the vmap) from a client to one VIP, with 10 or 10,000
// identities programmed. SPEC P4: the rates are within 10%. One op = one connection.
func BenchmarkP4NewConnectionRate(b *testing.B) {
	for _, n := range []int{10, 10000} {
		b.Run(fmt.Sprintf("identities=%d", n), func(b *testing.B) {
			l := benchLab(b)
			must := func(err error) {
				if err != nil {
					b.Fatal(err)
				}
			}
			ext, err := l.AddNetns("ext")
			must(err)
			gw, err := l.AddNetns("gw")
			must(err)
			be1, err := l.AddNetns("be1")
			must(err)
			must(l.Veth(ext, "eth0", gw, "net1"))
			must(l.Veth(be1, "eth0", gw, "eth0"))
			must(l.AddAddr(ext, "eth0", "172.31.0.2/24"))
			must(l.AddAddr(gw, "net1", "172.31.0.1/24"))
			must(l.AddAddr(gw, "eth0", "10.77.1.254/24"))
			must(l.AddAddr(be1, "eth0", "10.77.1.11/24"))
			must(l.AddRoute(ext, "default", "via", "172.31.0.1"))
			must(l.AddRoute(be1, "default", "via", "10.77.1.254"))
			must(l.Sysctl(gw, "net.ipv4.ip_forward", "1"))
			if _, err := l.StartEcho(be1, helperCmd(b, "echo"), "be1", "10.77.1.11:8080"); err != nil {
				b.Fatal(err)
			}
			st := scaleState(1, n, 10)
			target := st.Identities[n/2]
			target.Backends = []gwstate.Backend{be("10.77.1.11", 8080)}
			st.Identities[n/2] = target
			func() {
				enter(b, gw)
				a := newBenchAgent(b, false)
				if err := a.Apply(context.Background(), st); err != nil {
					b.Fatal(err)
				}
			}()
			// Warm up (ARP, listener).
			if _, err := l.Probe(ext, helperCmd(b, "probe"), netlab.ProbeOptions{Target: target.VIP.String() + ":80", Proto: "connect", Count: 100}); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			res, err := l.Probe(ext, helperCmd(b, "probe"), netlab.ProbeOptions{Target: target.VIP.String() + ":80", Proto: "connect", Count: b.N, Timeout: 5 * time.Second})
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			if res.Errors != 0 {
				b.Fatalf("%d of %d connections failed: %s", res.Errors, b.N, res.LastError)
			}
			b.ReportMetric(float64(b.N)/res.Seconds, "conns/s")
		})
	}
}

func mustJSON(b *testing.B, st gwstate.State) []byte {
	b.Helper()
	data, err := json.Marshal(st)
	if err != nil {
		b.Fatal(err)
	}
	return data
}
