package bench

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/vpcgw/vpcgw/internal/labout"
)

// Machine describes where the bench ran.
type Machine struct {
	CPU    string `json:"cpu"`
	CPUs   int    `json:"cpus"`
	Kernel string `json:"kernel"`
	Nft    string `json:"nft"`
	Go     string `json:"go"`
}

func (m Machine) String() string {
	return fmt.Sprintf("%d× %s, kernel %s, %s, %s", m.CPUs, m.CPU, m.Kernel, m.Nft, m.Go)
}

func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(data))
	}
	if out, err := exec.Command("nft", "--version").Output(); err == nil {
		m.Nft = strings.TrimSpace(string(out))
	}
	return m
}

// loadAvg is the 1, 5 and 15 minute load average.
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// tailLines is the last n lines of s.
func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// percentiles by the nearest-rank method.
func percentiles(ds []time.Duration) Percentiles {
	if len(ds) == 0 {
		return Percentiles{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(p float64) time.Duration {
		i := int(p*float64(len(s))+0.999999) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	return Percentiles{Count: len(s), P50: ms(rank(0.50)), P90: ms(rank(0.90)), P99: ms(rank(0.99)), Max: ms(s[len(s)-1])}
}

func (p Percentiles) String() string {
	return fmt.Sprintf("p50 %.1f ms, p90 %.1f ms, p99 %.1f ms, max %s ms (%d samples)", p.P50, p.P90, p.P99, p.maxText(), p.Count)
}

// maxText is the maximum, "≤ b" when only its bucket's bound b is known, "> b" when it is above
// every finite bound.
func (p Percentiles) maxText() string {
	switch {
	case p.MaxAboveBuckets:
		return fmt.Sprintf("> %.0f", p.Max)
	case p.MaxIsBound:
		return fmt.Sprintf("≤ %.0f", p.Max)
	}
	return fmt.Sprintf("%.1f", p.Max)
}

func printSize(out *labout.Writer, sr SizeResult) {
	out.Printf("   N=%d: %d changes at %.1f/s, %d syncs; network programming latency (controller's histogram) %s (load %s)\n",
		sr.Services, sr.Changes, sr.RateAch, sr.Syncs, sr.Latency, sr.LoadAvg)
	out.Printf("   vpcgw controller during the churn: %s; %d reconciles, busy %.1f s of %.1f s, plan→ack %.1f ms per sync, %d record writes\n",
		sr.Controller, sr.Reconciles, sr.ReconcileBusy, sr.ChurnSeconds, sr.SyncMeanMs, sr.RecordWrites)
	out.Printf("   the gateway's agent per state during the churn: %s; of it, kernel transactions %s\n", sr.AgentApply, sr.AgentKernel)
	out.Printf("   a sync pass's phases during the churn, mean ms: %s\n", phaseText(sr.PhaseMeanMs))
	out.Printf("   kube-ovn-controller during the churn: %s\n", sr.KubeOVN)
	out.Printf("   the controller's API requests during the churn: %v\n", sr.APIRequests)
	for _, k := range sr.KubeProxy {
		out.Printf("   kube-proxy (--min-sync-period %s) during the churn: network programming %s; sync_proxy_rules %s; %s\n",
			k.MinSyncPeriod, k.Latency, k.Sync, k.Usage)
	}
	if b := sr.Baseline; b != nil {
		out.Printf("   baseline: table loaded in %.1f s; per transaction %s; latency at the same rate %s (load %s)\n",
			b.InitS, b.Apply, b.Latency, b.LoadAvg)
	}
}

func (c *ColdResult) ledger() string {
	if c.EmptyLedger {
		return "empty ledger: the controller writes every record first"
	}
	return "records already in the API: a controller restart over an emptied gateway"
}

func printCold(out *labout.Writer, c *ColdResult) {
	out.Printf("   (%s)\n", c.ledger())
	out.Printf("   cold start %d × %d: programmed %.1f s after the controller process started (its sync, plan to ack: %.1f s; CPU %.1f s); "+
		"agent alone %.1f s (kernel transaction %.1f s); controller VmHWM %.0f MiB (anonymous at most %.0f, file %.0f), RSS %.0f MiB, Go heap in use %.0f MiB, live heap %.0f MiB (load %s)\n",
		c.Services, c.Endpoints, c.ProgrammedS, c.FirstSyncS, c.CPUSeconds, c.AgentApplyS, c.AgentKernelS, c.HWMMiB, c.AnonMiB, c.FileMiB, c.RSSMiB, c.HeapMiB, c.LiveHeapMiB, c.LoadAvg)
}

// phaseText lists a pass's phases in the order they run.
func phaseText(ms map[string]float64) string {
	var parts []string
	for _, ph := range []string{"plan", "write-before", "program", "routes", "write-after", "report"} {
		if v, ok := ms[ph]; ok {
			parts = append(parts, fmt.Sprintf("%s %.1f", ph, v))
		}
	}
	return strings.Join(parts, ", ")
}

func ratio(a, b float64) string {
	if b <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f×", a/b)
}

// printSummary prints the figures as Markdown tables (docs/benchmarks.md takes them as they are).
func printSummary(out *labout.Writer, r *Result) {
	out.Printf("\n== summary (%s)\n\n", r.Config)
	out.Println("| N | changes (rate/s) | syncs | vpcgw p50 / p90 / p99 / max ms (histogram) | baseline p50 / p90 / p99 ms | baseline per transaction p50 / p99 ms | p99 ratio baseline/vpcgw | load avg |")
	out.Println("|---:|---:|---:|---|---|---|---:|---|")
	for _, s := range r.Sizes {
		base, tx, rt := "–", "–", "–"
		if b := s.Baseline; b != nil {
			base = fmt.Sprintf("%.0f / %.0f / %.0f", b.Latency.P50, b.Latency.P90, b.Latency.P99)
			tx = fmt.Sprintf("%.1f / %.1f", b.Apply.P50, b.Apply.P99)
			rt = ratio(b.Latency.P99, s.Latency.P99)
		}
		out.Printf("| %d | %d (%.1f) | %d | %.1f / %.1f / %.1f / %s | %s | %s | %s | %s |\n",
			s.Services, s.Changes, s.RateAch, s.Syncs, s.Latency.P50, s.Latency.P90, s.Latency.P99, s.Latency.maxText(), base, tx, rt, s.LoadAvg)
	}
	out.Println()
	out.Println("| N | Services written / all programmed | vpcgw controller while creating: CPU, RSS | kube-ovn-controller while creating: CPU, RSS | vpcgw controller in the churn: CPU, busy, plan→ack, RSS (peak) | kube-ovn-controller in the churn: CPU, RSS (peak) |")
	out.Println("|---:|---|---|---|---|---|")
	for _, s := range r.Sizes {
		out.Printf("| %d | %.1f s / %.1f s | %.1f s, %.0f MiB | %.1f s, %.0f MiB | %.1f s of %.1f s, %.1f s, %.1f ms, %.0f (%.0f) MiB | %.1f s, %.0f (%.0f) MiB |\n",
			s.Services, s.CreateSec, s.ProgramS, s.CreateController.CPUSeconds, s.CreateController.RSSMiB, s.CreateKubeOVN.CPUSeconds, s.CreateKubeOVN.RSSMiB,
			s.Controller.CPUSeconds, s.ChurnSeconds, s.ReconcileBusy, s.SyncMeanMs, s.Controller.RSSMiB, s.Controller.HWMMiB,
			s.KubeOVN.CPUSeconds, s.KubeOVN.RSSMiB, s.KubeOVN.HWMMiB)
	}
	out.Println()
	out.Println("| N | vpcgw p50 / p99 ms, end to end | plan→ack per sync ms (mean) | agent per state p50 / p99 ms | of it kernel p50 / p99 ms | a pass's phases, mean ms |")
	out.Println("|---:|---|---:|---|---|---|")
	for _, s := range r.Sizes {
		out.Printf("| %d | %.1f / %.1f | %.1f | %.2f / %.2f | %.2f / %.2f | %s |\n", s.Services, s.Latency.P50, s.Latency.P99, s.SyncMeanMs,
			s.AgentApply.P50, s.AgentApply.P99, s.AgentKernel.P50, s.AgentKernel.P99, phaseText(s.PhaseMeanMs))
	}
	printKubeProxySummary(out, r)
	if c := r.Cold; c != nil {
		out.Printf("\n- cold start (%s) %d × %d: %.1f s to programmed (controller sync %.1f s, CPU %.1f s; agent alone %.1f s, kernel %.1f s); controller VmHWM %.0f MiB (anonymous at most %.0f, file %.0f), RSS %.0f MiB, heap in use %.0f MiB, live heap %.0f MiB (load %s)\n",
			c.ledger(), c.Services, c.Endpoints, c.ProgrammedS, c.FirstSyncS, c.CPUSeconds, c.AgentApplyS, c.AgentKernelS, c.HWMMiB, c.AnonMiB, c.FileMiB, c.RSSMiB, c.HeapMiB, c.LiveHeapMiB, c.LoadAvg)
	}
}

// printKubeProxySummary is the table of kube-proxy beside vpcgw: each kube-proxy's own figures of
// the same churn, and the ratio of vpcgw's p99 to its p99 (below 1: vpcgw programs faster).
// kube-proxy's network programming histogram has buckets of 250 ms, 500 ms, then 1 s and up:
// a percentile below 250 ms is interpolated within that first bucket.
func printKubeProxySummary(out *labout.Writer, r *Result) {
	if !slices.ContainsFunc(r.Sizes, func(s SizeResult) bool { return len(s.KubeProxy) > 0 }) {
		return
	}
	out.Println()
	out.Println("| N | kube-proxy --min-sync-period | kube-proxy network programming p50 / p99 ms (count) | vpcgw p50 / p99 ms (count) | vpcgw in kube-proxy's buckets p50 / p99 ms | p99 ratio vpcgw / kube-proxy | kube-proxy sync_proxy_rules p50 / p99 ms (syncs) | kube-proxy in the churn: CPU, RSS (peak) |")
	out.Println("|---:|---|---|---|---|---:|---|---|")
	for _, s := range r.Sizes {
		for _, k := range s.KubeProxy {
			kb := s.LatencyInKubeProxyBuckets
			out.Printf("| %d | %s | %.1f / %.1f (%d) | %.1f / %.1f (%d) | %.1f / %.1f | %s | %.1f / %.1f (%d) | %.1f s, %.0f (%.0f) MiB |\n",
				s.Services, k.MinSyncPeriod, k.Latency.P50, k.Latency.P99, k.Latency.Count, s.Latency.P50, s.Latency.P99, s.Latency.Count, kb.P50, kb.P99,
				kpRatio(s.Latency.P99, k.Latency.P99), k.Sync.P50, k.Sync.P99, k.Sync.Count, k.Usage.CPUSeconds, k.Usage.RSSMiB, k.Usage.HWMMiB)
		}
	}
}

// kpRatio is a/b with two significant digits (vpcgw's p99 is far below kube-proxy's).
func kpRatio(a, b float64) string {
	if b <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2g×", a/b)
}
