// covers: P2, P3
package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/vpcgw/vpcgw/internal/labbin"
	"github.com/vpcgw/vpcgw/internal/netlab"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

func missing() string {
	if err := netlab.Available(); err != nil {
		return err.Error()
	}
	for _, bin := range []string{"nft", "ovsdb-server", "ovsdb-tool", "ovn-nbctl"} {
		if _, err := exec.LookPath(bin); err != nil {
			return bin + " is not installed (apt-get install -y nftables ovn-central)"
		}
	}
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		return "KUBEBUILDER_ASSETS is not set (run hack/tools/build-assets.sh, or make test)"
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, b)); err != nil {
			return fmt.Sprintf("%s is missing in KUBEBUILDER_ASSETS=%s", b, assets)
		}
	}
	return ""
}

// TestBenchSmoke runs the whole bench small: two sizes, a few seconds of churn, the baseline and
// the cold start with the controller as a process. It checks that the bench produces sane
// output (every Service programmed, every change measured, plot and JSON written), never how
// fast anything is.
func TestBenchSmoke(t *testing.T) {
	if why := missing(); why != "" {
		testutil.Skip(t, "skipping the bench smoke test: "+why)
	}
	dir := t.TempDir()
	bins, err := labbin.Build(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var out bytes.Buffer
	logPath := filepath.Join(dir, "lab.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	t.Cleanup(func() {
		if t.Failed() {
			data, _ := os.ReadFile(logPath)
			if len(data) > 16<<10 {
				data = data[len(data)-16<<10:]
			}
			t.Logf("lab log (last 16 KiB):\n%s", data)
		}
	})
	cfg := Config{
		Bins: bins, AssetsDir: os.Getenv("KUBEBUILDER_ASSETS"),
		Sizes: []int{10, 20}, Endpoints: 3, EIPs: 2, Rate: 10, Duration: 3 * time.Second,
		MinSyncInterval: 100 * time.Millisecond, Baseline: true, ColdStart: true, Workers: 4,
		Plot: filepath.Join(dir, "latency.png"), JSON: filepath.Join(dir, "result.json"),
		Out: &out, Log: zap.New(zap.WriteTo(logFile), zap.UseDevMode(true)),
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
		// Each Service is changed at most twice, seconds apart: no change is coalesced away.
		if s.Latency.Count != s.Changes {
			t.Errorf("N=%d: %d latencies recorded for %d changes", s.Services, s.Latency.Count, s.Changes)
		}
		if s.Latency.P50 <= 0 || s.Latency.P50 > s.Latency.P99 || s.Latency.P99 > s.Latency.Max {
			t.Errorf("N=%d: percentiles out of order: %+v", s.Services, s.Latency)
		}
		if s.Syncs == 0 {
			t.Errorf("N=%d: no acknowledged sync during the churn", s.Services)
		}
		if b := s.Baseline; b == nil || b.Latency.Count != s.Changes || b.Apply.Count != s.Changes {
			t.Errorf("N=%d: baseline did not apply every change: %+v", s.Services, b)
		}
	}
	c := res.Cold
	if c == nil || c.Services != 20 || c.ProgrammedS <= 0 || c.AgentApplyS <= 0 || c.HWMMiB <= 0 {
		t.Errorf("cold start result not sane: %+v", c)
	}
	for _, f := range []string{cfg.Plot, cfg.JSON} {
		if st, err := os.Stat(f); err != nil || st.Size() == 0 {
			t.Errorf("%s not written: %v", f, err)
		}
	}
	if !bytes.Contains(out.Bytes(), []byte("| 20 |")) {
		t.Error("the summary table has no row for N=20")
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
