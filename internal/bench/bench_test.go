// covers: P2, P3
package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vpcgw/vpcgw/internal/cluster/clustertest"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

func TestMain(m *testing.M) {
	os.Exit(clustertest.Main(m, nil))
}

// TestBenchSmoke runs the whole bench small in the lab beside the real kube-ovn-controller: two
// sizes, a few seconds of churn, the baseline, kube-proxy beside vpcgw (its default
// --min-sync-period and 0) and the cold start. It checks that the bench produces sane output
// (every Service programmed, every change measured by the controller's histogram, both
// controllers' usage read, kube-proxy's figures there, plot and JSON written), never how fast
// anything is.
// covers: P2, P3
func TestBenchSmoke(t *testing.T) {
	opts, skip, err := clustertest.Options()
	if skip != "" {
		testutil.Skip(t, "skipping the bench smoke test: "+skip)
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("nft"); err != nil {
		testutil.Skip(t, "skipping the bench smoke test: nft is not installed (apt-get install -y nftables)")
	}
	if _, missing := testutil.EnvtestAssets("kube-proxy"); missing != "" {
		testutil.Skip(t, "skipping the bench smoke test: "+missing)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	var out bytes.Buffer
	cfg := Config{
		Bins: opts.Bins, AssetsDir: opts.AssetsDir, KubeOVNDir: opts.KubeOVNDir, Log: opts.Log,
		// 20 changes over 20 Services at the first size: each Service changes once, so no change
		// is coalesced with another of its slice and every one is measured.
		Sizes: []int{20, 40}, Endpoints: 3, EIPs: 2, Rate: 5, Duration: 4 * time.Second,
		Baseline: true, ColdStart: true, Workers: 4, KubeProxy: []string{KubeProxyDefault, "0s"},
		Plot: filepath.Join(dir, "latency.png"), JSON: filepath.Join(dir, "result.json"), Out: &out,
	}
	res, err := Run(ctx, cfg)
	t.Logf("bench output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Sizes) != 2 {
		t.Fatalf("want 2 sizes, got %d", len(res.Sizes))
	}
	for _, s := range res.Sizes {
		want := int(cfg.Rate * cfg.Duration.Seconds())
		if s.Changes != want {
			t.Errorf("N=%d: %d changes written, want %d", s.Services, s.Changes, want)
		}
		if s.Latency.Count != s.Changes {
			t.Errorf("N=%d: the controller's histogram measured %d changes of %d", s.Services, s.Latency.Count, s.Changes)
		}
		if s.Latency.P50 <= 0 || s.Latency.P50 > s.Latency.P99 || s.Latency.P99 > s.Latency.Max && !s.Latency.MaxAboveBuckets {
			t.Errorf("N=%d: percentiles out of order: %+v", s.Services, s.Latency)
		}
		if kb := s.LatencyInKubeProxyBuckets; kb.Count != s.Latency.Count || kb.P99 < kb.P50 || kb.P50 <= 0 {
			t.Errorf("N=%d: vpcgw's latency in kube-proxy's buckets not read: %+v", s.Services, kb)
		}
		if s.PhaseMeanMs["program"] <= 0 || s.PhaseMeanMs["plan"] <= 0 {
			t.Errorf("N=%d: the sync phases not read: %v", s.Services, s.PhaseMeanMs)
		}
		if a, k := s.AgentApply, s.AgentKernel; a.Count == 0 || a.Count != k.Count || a.P50 <= 0 || k.P50 <= 0 || k.P99 > a.Max {
			t.Errorf("N=%d: the agent's own time per state not read: apply %+v, kernel %+v", s.Services, a, k)
		}
		if s.CreateAPIWrites <= 0 {
			t.Errorf("N=%d: the controller's API writes while the Services were created not counted", s.Services)
		}
		if s.Syncs == 0 {
			t.Errorf("N=%d: no acknowledged sync during the churn", s.Services)
		}
		if s.Controller.CPUSeconds <= 0 || s.Controller.RSSMiB <= 0 || s.KubeOVN.RSSMiB <= 0 || s.CreateKubeOVN.HWMMiB <= 0 {
			t.Errorf("N=%d: the controllers' usage was not read: vpcgw %+v, kube-ovn %+v", s.Services, s.Controller, s.KubeOVN)
		}
		if b := s.Baseline; b == nil || b.Latency.Count != s.Changes || b.Apply.Count != s.Changes {
			t.Errorf("N=%d: baseline did not apply every change: %+v", s.Services, b)
		}
		checkKubeProxy(t, s, cfg.KubeProxy)
	}
	c := res.Cold
	if c == nil || c.Services != 40 || c.ProgrammedS <= 0 || c.AgentApplyS <= 0 || c.HWMMiB <= 0 || c.AnonMiB <= 0 || c.FileMiB <= 0 || c.LiveHeapMiB <= 0 || c.LiveHeapMiB > c.AnonMiB {
		t.Errorf("cold start result not sane: %+v", c)
	}
	for _, f := range []string{cfg.Plot, cfg.JSON} {
		if st, err := os.Stat(f); err != nil || st.Size() == 0 {
			t.Errorf("%s not written: %v", f, err)
		}
	}
	if !bytes.Contains(out.Bytes(), []byte("| 40 |")) {
		t.Error("the summary table has no row for N=40")
	}
	if !bytes.Contains(out.Bytes(), []byte("| 40 | 0s |")) {
		t.Error("the kube-proxy table has no row for N=40 with --min-sync-period 0s")
	}
}

// checkKubeProxy checks that each kube-proxy's figures of the churn at one size are there: its
// network programming and sync histograms moved, its CPU time and memory were read. Measurements,
// never compared with a speed.
func checkKubeProxy(t *testing.T, s SizeResult, minSync []string) {
	t.Helper()
	if len(s.KubeProxy) != len(minSync) {
		t.Fatalf("N=%d: %d kube-proxy results, want %d", s.Services, len(s.KubeProxy), len(minSync))
	}
	for i, k := range s.KubeProxy {
		if k.MinSyncPeriod != minSync[i] {
			t.Errorf("N=%d: kube-proxy %d ran with --min-sync-period %q, want %q", s.Services, i, k.MinSyncPeriod, minSync[i])
		}
		if k.Latency.Count == 0 || k.Latency.Count > s.Changes || k.Latency.P50 <= 0 || k.Latency.P99 < k.Latency.P50 {
			t.Errorf("N=%d: kube-proxy (%s) network programming not measured: %+v (%d changes)", s.Services, k.MinSyncPeriod, k.Latency, s.Changes)
		}
		if k.Sync.Count == 0 || k.Sync.P50 <= 0 || k.Sync.P99 < k.Sync.P50 {
			t.Errorf("N=%d: kube-proxy (%s) syncs not measured: %+v", s.Services, k.MinSyncPeriod, k.Sync)
		}
		if k.Usage.CPUSeconds <= 0 || k.Usage.RSSMiB <= 0 || k.Usage.HWMMiB < k.Usage.RSSMiB {
			t.Errorf("N=%d: kube-proxy (%s) usage not read: %+v", s.Services, k.MinSyncPeriod, k.Usage)
		}
	}
}

func TestPercentiles(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	p := percentiles(ds)
	if p.Count != 100 || p.P50 != 50 || p.P90 != 90 || p.P99 != 99 || p.Max != 100 {
		t.Errorf("percentiles(1..100 ms) = %+v", p)
	}
	if p := percentiles(nil); p.Count != 0 {
		t.Errorf("percentiles(nil) = %+v", p)
	}
}

// The latency percentiles come from the controller's histogram, read as Prometheus's
// histogram_quantile reads it: the bucket difference of two scrapes, interpolated linearly within
// the bucket the rank falls in.
func TestHistogramQuantileFromScrapes(t *testing.T) {
	scrape := func(counts ...float64) samples {
		les := []string{"0.001", "0.002", "0.004", "0.008", "+Inf"}
		s := samples{latencyMetric + "_count": counts[len(counts)-1], latencyMetric + "_sum": 1}
		for i, le := range les {
			s[latencyMetric+`_bucket{le="`+le+`"}`] = counts[i]
		}
		// Another histogram with labels is not mixed in.
		s[syncMetric+`_bucket{result="ok",le="+Inf"}`] = 99
		return s
	}
	before, err := readHistogram(scrape(5, 5, 5, 5, 5), latencyMetric, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Since before: 10 in (0, 1 ms], 60 in (1, 2], 20 in (2, 4], 10 in (4, 8].
	after, err := readHistogram(scrape(15, 75, 95, 105, 105), latencyMetric, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := after.sub(before)
	if err != nil {
		t.Fatal(err)
	}
	p := percentilesOf(h)
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-9 }
	// p50: rank 50, 40 into the (1, 2] bucket of 60: 1 + 1·40/60 ms. p90: rank 90, all 20 of
	// (2, 4]: 4 ms. p99: rank 99, 9 of the 10 in (4, 8]: 4 + 4·0.9 ms.
	if p.Count != 100 || !near(p.P50, 1+40.0/60) || !near(p.P90, 4) || !near(p.P99, 7.6) || p.Max != 8 || p.MaxAboveBuckets {
		t.Errorf("percentiles = %+v", p)
	}
	// Observations above every finite bound: the quantile is the highest finite bound.
	over, err := readHistogram(scrape(15, 75, 95, 105, 205), latencyMetric, nil)
	if err != nil {
		t.Fatal(err)
	}
	if h, err = over.sub(before); err != nil {
		t.Fatal(err)
	}
	if p := percentilesOf(h); !near(p.P99, 8) || !p.MaxAboveBuckets || p.Max != 8 {
		t.Errorf("with observations in +Inf: %+v", p)
	}
	if _, err := readHistogram(samples{}, latencyMetric, nil); err == nil {
		t.Error("a scrape without the histogram was read")
	}
}

// vpcgw's latency read through kube-proxy's coarser buckets: the counts at the bounds both have,
// interpolated within the wider buckets, as kube-proxy's own figures are.
// covers: P3
func TestHistogramWithinCoarserBuckets(t *testing.T) {
	h := histogram{count: 100, sum: 1, buckets: []bucket{{0.001, 10}, {0.002, 70}, {0.004, 90}, {0.008, 100}, {math.Inf(1), 100}}}
	c, err := h.within([]float64{0.002, 0.008})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.buckets) != 3 || c.buckets[0] != (bucket{0.002, 70}) || c.buckets[1] != (bucket{0.008, 100}) {
		t.Fatalf("coarse buckets = %+v", c.buckets)
	}
	// p50: rank 50 of the 70 in (0, 2 ms]: 2·50/70 ms; in the fine histogram it is 1 + 40/60 ms.
	if p := percentilesOf(c); math.Abs(p.P50-2*50.0/70) > 1e-9 || p.Count != 100 {
		t.Errorf("coarse percentiles = %+v", p)
	}
	if _, err := h.within([]float64{0.002, 0.003}); err == nil {
		t.Error("a bound the histogram does not have (3 ms) was accepted")
	}
}

func TestEndpointWindowMoves(t *testing.T) {
	a, b := endpointIPs(3, 0, 10), endpointIPs(3, 1, 10)
	seen := map[string]bool{}
	for _, ip := range a {
		if seen[ip] {
			t.Fatalf("duplicate endpoint %s in %v", ip, a)
		}
		seen[ip] = true
	}
	common := 0
	for _, ip := range b {
		if seen[ip] {
			common++
		}
	}
	if common != 9 {
		t.Errorf("one change must replace exactly one endpoint: %v -> %v", a, b)
	}
}

// covers: P3
// The plot is drawn again from a run's JSON: vpcgw, each kube-proxy and the baseline; a file
// that is not a result is refused with its name.
func TestReplotFromJSON(t *testing.T) {
	dir := t.TempDir()
	pc := func(p50, p99 float64) Percentiles { return Percentiles{Count: 10, P50: p50, P99: p99, Max: p99} }
	r := Result{Config: "test", Sizes: []SizeResult{
		{Services: 100, Latency: pc(10, 30), Baseline: &BaselineResult{Latency: pc(20, 40)},
			KubeProxy: []KubeProxyResult{{MinSyncPeriod: KubeProxyDefault, Latency: pc(1000, 2000)}, {MinSyncPeriod: "0s", Latency: pc(300, 900)}}},
		{Services: 1000, Latency: pc(12, 45), Baseline: &BaselineResult{Latency: pc(30, 90)},
			KubeProxy: []KubeProxyResult{{MinSyncPeriod: KubeProxyDefault, Latency: pc(1500, 3000)}, {MinSyncPeriod: "0s", Latency: pc(500, 1500)}}},
	}}
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	in, png := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.png")
	if err := os.WriteFile(in, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Replot(in, png); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(png); err != nil || st.Size() < 1000 {
		t.Fatalf("plot not written: %v", err)
	}
	var back Result
	if err := json.Unmarshal(data, &back); err != nil || back.Sizes[1].KubeProxy[1].Latency != r.Sizes[1].KubeProxy[1].Latency || back.Sizes[0].Latency != r.Sizes[0].Latency {
		t.Errorf("the JSON result does not read back: %v, %+v", err, back.Sizes)
	}
	if got := kubeProxyModes(&r); !slices.Equal(got, []string{KubeProxyDefault, "0s"}) {
		t.Errorf("kube-proxy modes %v", got)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Replot(bad, png); err == nil || !strings.Contains(err.Error(), "bad.json") {
		t.Errorf("a file that is not a result: %v", err)
	}
}
