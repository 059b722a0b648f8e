// Package bench is `vpcgw-lab bench`: end-to-end scale and latency of vpcgw in the lab (SPEC P2, P3).
//
// It starts the lab (real kube-apiserver, gateway namespace, in-process controller and the real
// agent), creates N LoadBalancer Services with M endpoints each (EndpointSlices written by the
// bench, no selectors, endpoints without Pod targets), waits until every one is programmed, then
// changes endpoints at a steady rate. Each EndpointSlice write is stamped with
// endpoints.kubernetes.io/last-change-trigger-time; the controller's OnProgrammed hook reports the
// exact latency from that time to the agent's acknowledgement. The same change sequence is then
// applied, in a namespace of its own, the way upstream kube-ovn does it: one `nft -f` transaction
// per changed identity, serially, no coalescing (the baseline). Finally the in-process controller is
// stopped, the gateway's table deleted, and `vpcgw controller` started as a separate process
// against the Services already in the API (cold start, with its own memory figures).
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/vpcgw/vpcgw/internal/controller"
	"github.com/vpcgw/vpcgw/internal/lab"
	"github.com/vpcgw/vpcgw/internal/labbin"
)

// Config of one bench run.
type Config struct {
	// Bins are the binaries: vpcgw-agent (agents), vpcgw-lab (echo, probes), vpcgw (the
	// cold-start controller process).
	Bins      labbin.Binaries
	AssetsDir string
	// Sizes are the Service counts, in increasing order; Services are added from one size to
	// the next.
	Sizes     []int
	Endpoints int // M: endpoints per Service
	EIPs      int // EIPs the Services are spread over
	// Rate (changes/s) and Duration of the endpoint churn at each size.
	Rate     float64
	Duration time.Duration
	// MinSyncInterval of the controller (its default is controller.DefaultMinSyncInterval).
	MinSyncInterval time.Duration
	// GatewayWorkers of the controller (0: controller.DefaultGatewayWorkers).
	GatewayWorkers int
	Baseline       bool // run the per-identity `nft -f` baseline
	ColdStart      bool // run the cold start after the largest size
	// ColdOnly: no in-process controller and no churn; write Sizes' largest count of Services
	// and start the controller process against them, with an empty ledger (no records yet).
	ColdOnly    bool
	ColdTimeout time.Duration
	// CPUProfile, when set, receives a CPU profile of the bench process (with the in-process
	// controller) during the churn at the largest size.
	CPUProfile string
	// HeapProfile: where to write the cold-start controller's heap profile ("" none).
	HeapProfile string
	Workers     int // concurrent API writers when creating Services
	// Plot is the PNG written (empty: none); JSON the results file (empty: none).
	Plot, JSON string
	Out        io.Writer
	Log        logr.Logger
}

// Percentiles of a set of durations, in milliseconds.
type Percentiles struct {
	Count         int     `json:"count"`
	P50, P90, P99 float64 `json:"-"`
	Max           float64 `json:"max"`
}

// MarshalJSON names the percentiles.
func (p Percentiles) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]any{"count": p.Count, "p50_ms": p.P50, "p90_ms": p.P90, "p99_ms": p.P99, "max_ms": p.Max})
}

// SizeResult is what one size produced.
type SizeResult struct {
	Services  int     `json:"services"`
	Endpoints int     `json:"endpoints"`
	LoadAvg   string  `json:"loadavg"`
	CreateSec float64 `json:"create_s"`  // writing the new Services and slices
	ProgramS  float64 `json:"program_s"` // from the first write to every Service programmed
	Changes   int     `json:"changes"`   // EndpointSlice writes during the churn
	RateAch   float64 `json:"rate_achieved"`
	// Latency: network programming latency of the churn (OnProgrammed).
	Latency Percentiles `json:"latency"`
	// Syncs acknowledged during the churn (coalescing: Changes/Syncs per sync).
	Syncs int `json:"syncs"`
	// Where the controller's time went during the churn (its own metrics): reconciles run
	// (throttled ones included), their total time, the mean time from plan to every agent's
	// acknowledgement, and record writes.
	Reconciles    int     `json:"reconciles"`
	ReconcileBusy float64 `json:"reconcile_busy_s"`
	SyncMeanMs    float64 `json:"sync_mean_ms"`
	RecordWrites  int     `json:"record_writes"`
	// APIRequests: requests to the API server during the churn, "<method> <code>" -> count
	// (the controller's and the bench's own EndpointSlice PUTs).
	APIRequests  map[string]int `json:"api_requests"`
	ChurnSeconds float64        `json:"churn_s"`
	// Baseline: the same changes, one `nft -f` per changed identity.
	Baseline *BaselineResult `json:"baseline,omitempty"`
}

// BaselineResult is the per-identity `nft -f` baseline at one size.
type BaselineResult struct {
	LoadAvg string      `json:"loadavg"`
	InitS   float64     `json:"init_s"`  // loading the table of N identities (one `nft -f`)
	Apply   Percentiles `json:"apply"`   // one transaction (service time)
	Latency Percentiles `json:"latency"` // from the change's arrival at the same rate to done
}

// ColdResult is the cold start.
type ColdResult struct {
	Services     int     `json:"services"`
	Endpoints    int     `json:"endpoints"`
	LoadAvg      string  `json:"loadavg"`
	ProgrammedS  float64 `json:"programmed_s"`  // process start -> identities programmed
	FirstSyncS   float64 `json:"first_sync_s"`  // the controller's sync (plan -> agent ack)
	AgentApplyS  float64 `json:"agent_apply_s"` // the same state applied by an in-process agent (netlink), alone
	AgentKernelS float64 `json:"agent_kernel_s"`
	HWMMiB       float64 `json:"controller_vmhwm_mib"`
	RSSMiB       float64 `json:"controller_rss_mib"`
	HeapMiB      float64 `json:"controller_heap_inuse_mib"`
	// EmptyLedger: no records existed (the controller wrote them all before programming);
	// otherwise the in-process controller had programmed the same Services before.
	EmptyLedger bool `json:"empty_ledger"`
}

// Result of a run.
type Result struct {
	Machine Machine      `json:"machine"`
	Config  string       `json:"config"`
	Sizes   []SizeResult `json:"sizes"`
	Cold    *ColdResult  `json:"cold_start,omitempty"`
}

// Main is `vpcgw-lab bench`.
func Main(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	sizes := fs.String("n", "100,1000,10000", "Service counts, increasing (Services are added from one to the next)")
	var cfg Config
	fs.IntVar(&cfg.Endpoints, "m", 10, "endpoints per Service")
	fs.IntVar(&cfg.EIPs, "eips", 10, "EIPs of the gateway the Services are spread over")
	fs.Float64Var(&cfg.Rate, "rate", 20, "endpoint changes per second during the churn")
	fs.DurationVar(&cfg.Duration, "duration", 30*time.Second, "churn duration at each size")
	fs.DurationVar(&cfg.MinSyncInterval, "min-sync-interval", controller.DefaultMinSyncInterval, "the controller's --min-sync-interval")
	fs.IntVar(&cfg.GatewayWorkers, "gateway-workers", controller.DefaultGatewayWorkers, "the controller's --gateway-workers")
	fs.BoolVar(&cfg.Baseline, "baseline", true, "also apply the churn as one `nft -f` per changed identity")
	fs.BoolVar(&cfg.ColdStart, "cold-start", true, "after the largest size, restart the controller as a process against the Services in the API")
	fs.BoolVar(&cfg.ColdOnly, "cold-only", false, "only the cold start, from nothing: write the largest -n of Services with no controller running (no records yet), then start the controller process")
	fs.DurationVar(&cfg.ColdTimeout, "cold-timeout", 20*time.Minute, "how long the cold start may take")
	fs.StringVar(&cfg.HeapProfile, "heapprofile", "", "write a heap profile of the cold-start controller process, 15 s after it programmed everything, to this file")
	fs.StringVar(&cfg.CPUProfile, "cpuprofile", "", "write a CPU profile of the churn at the largest size (the in-process controller) to this file")
	fs.IntVar(&cfg.Workers, "workers", 8, "concurrent API writers when creating Services")
	fs.StringVar(&cfg.AssetsDir, "assets", os.Getenv("KUBEBUILDER_ASSETS"), "directory with kube-apiserver and etcd")
	fs.StringVar(&cfg.Plot, "plot", "docs/bench-latency.png", "PNG plot of latency percentiles against N (empty: none)")
	fs.StringVar(&cfg.JSON, "json", "", "write the results as JSON to this file")
	verbose := fs.Bool("v", false, "show the components' logs")
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cfg.Bins = labbin.Beside(self)
	fs.StringVar(&cfg.Bins.Vpcgw, "vpcgw", cfg.Bins.Vpcgw, "the vpcgw binary (the cold-start controller process)")
	fs.StringVar(&cfg.Bins.Agent, "agent", cfg.Bins.Agent, "the vpcgw-agent binary (the gateway's agent)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if cfg.Bins, err = cfg.Bins.Abs(); err != nil {
		return err
	}
	if err := cfg.Bins.Check(); err != nil {
		return err
	}
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return fmt.Errorf("bad -n %q", *sizes)
		}
		cfg.Sizes = append(cfg.Sizes, n)
	}
	logOut := io.Discard
	if *verbose {
		logOut = os.Stderr
	}
	cfg.Log = zap.New(zap.WriteTo(logOut), zap.UseDevMode(true))
	ctrl.SetLogger(cfg.Log)
	cfg.Out = os.Stdout
	_, err = Run(ctx, cfg)
	return err
}

func (c *Config) validate() error {
	if !slices.IsSorted(c.Sizes) || len(c.Sizes) == 0 {
		return errors.New("sizes must be given in increasing order")
	}
	if c.Endpoints < 1 || c.Endpoints > maxEndpoints {
		return fmt.Errorf("endpoints per Service must be 1..%d", maxEndpoints)
	}
	if c.EIPs < 1 || c.EIPs > 80 {
		return errors.New("EIPs must be 1..80")
	}
	if last := c.Sizes[len(c.Sizes)-1]; (last+c.EIPs-1)/c.EIPs > maxPortsPerEIP {
		return fmt.Errorf("%d Services over %d EIPs need more than %d ports per EIP: add EIPs", last, c.EIPs, maxPortsPerEIP)
	}
	if c.Rate <= 0 {
		return errors.New("rate must be > 0")
	}
	if c.ColdTimeout <= 0 {
		c.ColdTimeout = 20 * time.Minute
	}
	if c.Workers < 1 {
		c.Workers = 1
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	return nil
}

// Run runs the whole bench and prints its report to cfg.Out.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	res := &Result{Machine: machine(), Config: fmt.Sprintf("N=%v M=%d EIPs=%d churn=%.0f/s for %s min-sync-interval=%s",
		cfg.Sizes, cfg.Endpoints, cfg.EIPs, cfg.Rate, cfg.Duration, cfg.MinSyncInterval)}
	out := cfg.Out
	fmt.Fprintf(out, "== vpcgw bench: %s\n== machine: %s\n", res.Config, res.Machine)

	rec := &recorder{}
	fmt.Fprintf(out, "== starting the lab (load %s)\n", loadAvg())
	l, err := lab.Start(ctx, lab.Options{
		Bins: cfg.Bins, AssetsDir: cfg.AssetsDir, Log: cfg.Log,
		ServiceCIDR: benchServiceCIDR, NoController: cfg.ColdOnly,
		Controller: func(o *controller.Options) {
			// One identity per Service: the EIP gate only (P2's "10,000 identities").
			o.Flags = controller.Flags{EnableGwNftableLbSvc: true, EndpointsWithoutPods: true} // the bench writes EndpointSlices of addresses in the lab VPC, without Pods
			o.MinSyncInterval = cfg.MinSyncInterval
			o.GatewayWorkers = cfg.GatewayWorkers
			// The controller has no latency hook any more: one-lab-bench's bench reads
			// vpcgw_network_programming_latency_seconds from /metrics instead.
		},
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := l.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "lab cleanup:", err)
		}
	}()
	w, err := newWorkload(ctx, l, cfg)
	if err != nil {
		return nil, err
	}
	// What was measured is reported even when a later size fails.
	err = measure(ctx, l, w, cfg, rec, res)
	if ferr := finish(cfg, res); ferr != nil {
		err = errors.Join(err, ferr)
	}
	return res, err
}

func measure(ctx context.Context, l *lab.Lab, w *workload, cfg Config, rec *recorder, res *Result) error {
	out := cfg.Out
	if cfg.ColdOnly {
		n := cfg.Sizes[len(cfg.Sizes)-1]
		fmt.Fprintf(out, "== writing %d Services × %d endpoints, no controller running (load %s)\n", n, cfg.Endpoints, loadAvg())
		start := time.Now()
		if err := w.grow(ctx, n); err != nil {
			return err
		}
		fmt.Fprintf(out, "   written in %.1f s\n", time.Since(start).Seconds())
		cold, err := runColdStart(ctx, l, w, cfg)
		if err != nil {
			return fmt.Errorf("cold start: %w", err)
		}
		cold.EmptyLedger = true
		res.Cold = cold
		printCold(out, cold)
		return nil
	}
	for k, n := range cfg.Sizes {
		profile := ""
		if k == len(cfg.Sizes)-1 {
			profile = cfg.CPUProfile
		}
		sr, err := w.runSize(ctx, n, rec, profile)
		if err != nil {
			return fmt.Errorf("N=%d: %w (lab errors: %v)", n, err, l.Errors())
		}
		if cfg.Baseline {
			fmt.Fprintf(out, "   baseline: one `nft -f` per changed identity, %d identities × %d backends (load %s)\n", n, cfg.Endpoints, loadAvg())
			b, err := runBaseline(ctx, w.identities(n), w.changes(n, sr.Changes), cfg.Rate)
			if err != nil {
				return fmt.Errorf("baseline at N=%d: %w", n, err)
			}
			sr.Baseline = b
		}
		res.Sizes = append(res.Sizes, sr)
		printSize(out, sr)
	}
	if cfg.ColdStart {
		cold, err := runColdStart(ctx, l, w, cfg)
		if err != nil {
			return fmt.Errorf("cold start: %w", err)
		}
		res.Cold = cold
		printCold(out, cold)
	}
	return nil
}

// finish writes the plot, the JSON and the summary of what was measured.
func finish(cfg Config, res *Result) error {
	out := cfg.Out
	if cfg.Plot != "" && len(res.Sizes) > 0 {
		if err := os.MkdirAll(filepath.Dir(cfg.Plot), 0o755); err != nil {
			return err
		}
		if err := plotLatency(res, cfg.Plot); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		fmt.Fprintf(out, "== plot: %s\n", cfg.Plot)
	}
	if cfg.JSON != "" {
		data, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(cfg.JSON, append(data, '\n'), 0o644); err != nil {
			return err
		}
	}
	printSummary(out, res)
	return nil
}
