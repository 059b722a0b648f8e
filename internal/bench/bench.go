// Package bench is `vpcgw-lab bench`: end-to-end scale and latency of vpcgw in the lab (SPEC P2, P3),
// beside the real kube-ovn-controller.
//
// It starts the one lab (internal/cluster: kube-apiserver, kube-controller-manager,
// kube-ovn-controller v1.16.2 with --enable-lb=false, OVN NB/SB, the lab node, kube-ovn's gateway
// Pod with the agent the controller delivers, and the vpcgw controller and webhook as their own
// processes), creates N LoadBalancer Services with M endpoints each (EndpointSlices written by the
// bench, no selectors, endpoints without Pod targets in the VPC's Subnet), waits until every one
// is programmed, then changes endpoints at a steady rate. Each EndpointSlice write is stamped
// with endpoints.kubernetes.io/last-change-trigger-time; the latency is what the controller
// exports, its histogram vpcgw_network_programming_latency_seconds, read before and after the
// churn (percentiles interpolated within the buckets, as Prometheus's histogram_quantile does).
// The CPU time and memory of the controller and of kube-ovn-controller come from their /proc
// entries. The same change sequence is then applied, in a namespace of its own, the way upstream
// kube-ovn does it: one `nft -f` transaction per changed identity, serially, no coalescing (the
// baseline). Finally the controller process is stopped, the gateway's agent killed and its table
// deleted, and the controller started again against the Services already in the API (cold
// start, with its memory).
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

	"github.com/vpcgw/vpcgw/internal/cluster"
	"github.com/vpcgw/vpcgw/internal/labbin"
	"github.com/vpcgw/vpcgw/internal/labout"
)

// Config of one bench run.
type Config struct {
	// Bins are the binaries the lab runs (vpcgw, vpcgw-agent, vpcgw-lab); AssetsDir holds
	// kube-apiserver, etcd and kube-controller-manager; KubeOVNDir kube-ovn-controller and its
	// assets (make kubeovn).
	Bins                  labbin.Binaries
	AssetsDir, KubeOVNDir string
	// Sizes are the Service counts, in increasing order; Services are added from one size to
	// the next.
	Sizes     []int
	Endpoints int // M: endpoints per Service
	EIPs      int // EIPs the Services are spread over
	// Rate (changes/s) and Duration of the endpoint churn at each size.
	Rate     float64
	Duration time.Duration
	// MinSyncInterval of the controller (0: its default).
	MinSyncInterval time.Duration
	// GatewayWorkers of the controller (0: its default).
	GatewayWorkers int
	// ControllerMemLimit, when set, is the controller process's GOMEMLIMIT (the chart sets it
	// to the container's memory limit).
	ControllerMemLimit string
	Baseline           bool // run the per-identity `nft -f` baseline
	// KubeProxy: one kube-proxy (nftables mode, a namespace of its own) per entry, with that
	// --min-sync-period (KubeProxyDefault: its own); none when empty.
	KubeProxy []string
	ColdStart bool // run the cold start after the largest size
	// ColdOnly: no churn; stop the controller, write Sizes' largest count of Services, and
	// start the controller against them with an empty ledger (no records yet).
	ColdOnly    bool
	ColdTimeout time.Duration
	// CPUProfile, when set, receives a CPU profile of the controller process (its pprof
	// endpoint) during the churn at the largest size.
	CPUProfile string
	// HeapProfile: where to write the cold-start controller's heap profile ("" none).
	HeapProfile string
	Workers     int // concurrent API writers when creating Services
	// Plot is the PNG written (empty: none); JSON the results file (empty: none).
	Plot, JSON string
	Out        io.Writer
	Log        logr.Logger

	// report writes to Out; set by Run, which checks its error once at the end.
	report *labout.Writer
}

// Percentiles of a set of durations, in milliseconds. The vpcgw latencies come from the
// controller's histogram: P50, P90 and P99 are interpolated within its buckets and Max is the
// upper bound of the highest bucket with an observation (MaxIsBound); MaxAboveBuckets says an
// observation was above every finite bound. The baseline's are exact (nearest rank).
type Percentiles struct {
	Count           int     `json:"count"`
	P50, P90, P99   float64 `json:"-"`
	Max             float64 `json:"max"`
	MaxIsBound      bool    `json:"-"`
	MaxAboveBuckets bool    `json:"-"`
}

// MarshalJSON names the percentiles.
func (p Percentiles) MarshalJSON() ([]byte, error) {
	m := map[string]any{"count": p.Count, "p50_ms": p.P50, "p90_ms": p.P90, "p99_ms": p.P99, "max_ms": p.Max}
	if p.MaxIsBound {
		m["max_is_bucket_bound"] = true
		m["max_above_buckets"] = p.MaxAboveBuckets
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads what MarshalJSON wrote (-replot).
func (p *Percentiles) UnmarshalJSON(data []byte) error {
	var m struct {
		Count            int     `json:"count"`
		P50              float64 `json:"p50_ms"`
		P90              float64 `json:"p90_ms"`
		P99              float64 `json:"p99_ms"`
		Max              float64 `json:"max_ms"`
		MaxIsBucketBound bool    `json:"max_is_bucket_bound"`
		MaxAboveBuckets  bool    `json:"max_above_buckets"`
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	*p = Percentiles{Count: m.Count, P50: m.P50, P90: m.P90, P99: m.P99, Max: m.Max, MaxIsBound: m.MaxIsBucketBound, MaxAboveBuckets: m.MaxAboveBuckets}
	return nil
}

// Usage is what a process of the lab used during a phase: CPU seconds (from /proc/<pid>/stat)
// and its memory at the phase's end (VmRSS, and VmHWM, the peak since it started).
type Usage struct {
	CPUSeconds float64 `json:"cpu_s"`
	RSSMiB     float64 `json:"rss_mib"`
	HWMMiB     float64 `json:"vmhwm_mib"`
}

func (u Usage) String() string {
	return fmt.Sprintf("CPU %.1f s, RSS %.0f MiB (peak %.0f MiB)", u.CPUSeconds, u.RSSMiB, u.HWMMiB)
}

// SizeResult is what one size produced.
type SizeResult struct {
	Services  int     `json:"services"`
	Endpoints int     `json:"endpoints"`
	LoadAvg   string  `json:"loadavg"`
	CreateSec float64 `json:"create_s"`  // writing the new Services and slices
	ProgramS  float64 `json:"program_s"` // from the first write to every Service programmed
	// CreateAPIWrites: the controller's write requests (POST, PUT, PATCH, DELETE) from the first
	// write to every Service programmed (SPEC P6).
	CreateAPIWrites int `json:"create_api_writes"`
	// CreateController and CreateKubeOVN: the vpcgw controller's and kube-ovn-controller's CPU
	// time from the first write until every Service was programmed, and their memory then.
	CreateController Usage   `json:"create_controller"`
	CreateKubeOVN    Usage   `json:"create_kube_ovn_controller"`
	Changes          int     `json:"changes"` // EndpointSlice writes during the churn
	RateAch          float64 `json:"rate_achieved"`
	// Latency: network programming latency of the churn, from the controller's histogram.
	Latency Percentiles `json:"latency"`
	// LatencyInKubeProxyBuckets: the same histogram read through kube-proxy's buckets only
	// (0.25 s, 0.5 s, 1 s, ...), interpolated as kube-proxy's own figures are.
	LatencyInKubeProxyBuckets Percentiles `json:"latency_in_kube_proxy_buckets"`
	// AgentApply and AgentKernel: the agent's own time per state during the churn, and the
	// kernel transactions in it (the floor under Latency), from its acknowledgements.
	AgentApply  Percentiles `json:"agent_apply"`
	AgentKernel Percentiles `json:"agent_kernel"`
	// PhaseMeanMs: the mean time of each phase of a sync pass during the churn (plan,
	// write-before, program, routes, write-after, report), where a pass spends its time.
	PhaseMeanMs map[string]float64 `json:"phase_mean_ms"`
	// Syncs acknowledged during the churn (coalescing: Changes/Syncs per sync).
	Syncs int `json:"syncs"`
	// Where the controller's time went during the churn (its own metrics): reconciles run
	// (throttled ones included), their total time, the mean time from plan to every agent's
	// acknowledgement, and record writes.
	Reconciles    int     `json:"reconciles"`
	ReconcileBusy float64 `json:"reconcile_busy_s"`
	SyncMeanMs    float64 `json:"sync_mean_ms"`
	RecordWrites  int     `json:"record_writes"`
	// APIRequests: the controller's requests to the API server during the churn,
	// "<method> <code>" -> count.
	APIRequests  map[string]int `json:"api_requests"`
	ChurnSeconds float64        `json:"churn_s"`
	// Controller and KubeOVN: the two controllers' CPU time during the churn (and the drain
	// that follows it) and their memory at its end.
	Controller Usage `json:"controller"`
	KubeOVN    Usage `json:"kube_ovn_controller"`
	// Baseline: the same changes, one `nft -f` per changed identity.
	Baseline *BaselineResult `json:"baseline,omitempty"`
	// KubeProxy: what each kube-proxy beside vpcgw measured of the same churn.
	KubeProxy []KubeProxyResult `json:"kube_proxy,omitempty"`
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
	// AnonMiB and FileMiB split the RSS (the highest anonymous part seen, sampled every 100 ms
	// until programmed and every second for 15 s after); LiveHeapMiB is the Go heap the
	// controller keeps, read after a forced collection at the end.
	AnonMiB     float64 `json:"controller_rss_anon_peak_mib"`
	FileMiB     float64 `json:"controller_rss_file_mib"`
	LiveHeapMiB float64 `json:"controller_live_heap_mib"`
	CPUSeconds  float64 `json:"controller_cpu_s"` // the new process's CPU time until programmed
	// EmptyLedger: no records existed (the controller wrote them all before programming);
	// otherwise the controller had programmed the same Services before its restart.
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
	fs.DurationVar(&cfg.MinSyncInterval, "min-sync-interval", 0, "the controller's --min-sync-interval (0: its default)")
	fs.IntVar(&cfg.GatewayWorkers, "gateway-workers", 0, "the controller's --gateway-workers (0: its default)")
	fs.StringVar(&cfg.ControllerMemLimit, "controller-gomemlimit", "", "the controller process's GOMEMLIMIT, e.g. 160MiB (the chart sets it to the container's memory limit; empty: none)")
	fs.BoolVar(&cfg.Baseline, "baseline", true, "also apply the churn as one `nft -f` per changed identity")
	kubeProxy := fs.String("kube-proxy", KubeProxyDefault, "run kube-proxy (nftables mode) beside vpcgw under the same churn, one per comma-separated minSyncPeriod, passed as --iptables-min-sync-period (\""+KubeProxyDefault+"\": its own, 1 s; e.g. \""+KubeProxyDefault+",0\"); empty: none")
	fs.BoolVar(&cfg.ColdStart, "cold-start", true, "after the largest size, restart the controller over an emptied gateway against the Services in the API")
	fs.BoolVar(&cfg.ColdOnly, "cold-only", false, "only the cold start, from nothing: write the largest -n of Services with the controller stopped (no records yet), then start it")
	fs.DurationVar(&cfg.ColdTimeout, "cold-timeout", 20*time.Minute, "how long the cold start may take")
	fs.StringVar(&cfg.HeapProfile, "heapprofile", "", "write a heap profile of the cold-start controller process, 15 s after it programmed everything, to this file")
	fs.StringVar(&cfg.CPUProfile, "cpuprofile", "", "write a CPU profile of the controller process during the churn at the largest size to this file")
	fs.IntVar(&cfg.Workers, "workers", 8, "concurrent API writers when creating Services")
	fs.StringVar(&cfg.Plot, "plot", "docs/bench-latency.png", "PNG plot of latency percentiles against N (empty: none)")
	fs.StringVar(&cfg.JSON, "json", "", "write the results as JSON to this file")
	replot := fs.String("replot", "", "only draw -plot from the JSON result (-json) of an earlier run")
	lf := cluster.LabFlags{Make: "lab"}
	if err := lf.Register(fs); err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *replot != "" {
		return Replot(*replot, cfg.Plot)
	}
	err := lf.Check()
	if err != nil {
		return err
	}
	cfg.Bins, cfg.AssetsDir, cfg.KubeOVNDir = lf.Bins, lf.Assets, lf.KubeOVN
	if cfg.KubeProxy, err = parseKubeProxy(*kubeProxy); err != nil {
		return err
	}
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return fmt.Errorf("bad -n %q", *sizes)
		}
		cfg.Sizes = append(cfg.Sizes, n)
	}
	ctx, stop, components := lf.Setup(ctx)
	defer stop()
	cfg.Log = components
	cfg.Out = os.Stdout
	_, err = Run(ctx, cfg)
	return err
}

// Replot draws the plot of an earlier run from its JSON result.
func Replot(jsonPath, plotPath string) error {
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		return err
	}
	var r Result
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("%s: %w", jsonPath, err)
	}
	if plotPath == "" {
		return errors.New("-replot needs -plot")
	}
	return plotLatency(&r, plotPath)
}

func (c *Config) validate() error {
	if !slices.IsSorted(c.Sizes) || len(c.Sizes) == 0 {
		return errors.New("sizes must be given in increasing order")
	}
	if c.Endpoints < 1 || c.Endpoints > maxEndpoints {
		return fmt.Errorf("endpoints per Service must be 1..%d", maxEndpoints)
	}
	if c.EIPs < 1 || c.EIPs > maxEIPs {
		return fmt.Errorf("EIPs must be 1..%d", maxEIPs)
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

// parseKubeProxy reads -kube-proxy: comma-separated --min-sync-periods.
func parseKubeProxy(v string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(v, ",") {
		p = strings.TrimSpace(p)
		switch p {
		case "":
			continue
		case KubeProxyDefault:
		default:
			d, err := time.ParseDuration(p)
			if err != nil || d < 0 {
				return nil, fmt.Errorf("bad -kube-proxy %q: want %q or durations", v, KubeProxyDefault)
			}
			p = d.String()
		}
		out = append(out, p)
	}
	return out, nil
}

// controllerArgs are the vpcgw controller's flags in the bench: the EIP gate only, so each
// Service is exactly one identity (P2 counts identities), kube-ovn's --enable-lb=false, endpoints
// without Pods (the bench writes EndpointSlices of addresses in the VPC's Subnet), and a pprof
// endpoint for -cpuprofile and -heapprofile.
func (c *Config) controllerArgs(pprofAddr string) []string {
	args := []string{"--enable-gw-nftable-lb-svc", "--enable-lb=false", "--allow-endpoints-without-pods", "--pprof-bind-address", pprofAddr}
	if c.MinSyncInterval > 0 {
		args = append(args, "--min-sync-interval", c.MinSyncInterval.String())
	}
	if c.GatewayWorkers > 0 {
		args = append(args, "--gateway-workers", strconv.Itoa(c.GatewayWorkers))
	}
	return args
}

// controllerEnv is what the controller process adds to its environment: GOMEMLIMIT as the
// chart sets it from the container's memory limit.
func (c *Config) controllerEnv() []string {
	if c.ControllerMemLimit == "" {
		return nil
	}
	return []string{"GOMEMLIMIT=" + c.ControllerMemLimit}
}

// Run runs the whole bench and prints its report to cfg.Out.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	res := &Result{Machine: machine(), Config: fmt.Sprintf("N=%v M=%d EIPs=%d churn=%.0f/s for %s; beside kube-ovn-controller v1.16.2",
		cfg.Sizes, cfg.Endpoints, cfg.EIPs, cfg.Rate, cfg.Duration)}
	if cfg.ControllerMemLimit != "" {
		res.Config += "; controller GOMEMLIMIT=" + cfg.ControllerMemLimit
	}
	cfg.report = labout.New(cfg.Out)
	out := cfg.report
	out.Printf("== vpcgw bench: %s\n== machine: %s\n", res.Config, res.Machine)

	pprofAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	out.Printf("== starting the lab: API server, kube-controller-manager, OVN, kube-ovn-controller, lab node, vpcgw (load %s)\n", loadAvg())
	started := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{
		Bins: cfg.Bins, AssetsDir: cfg.AssetsDir, KubeOVNDir: cfg.KubeOVNDir, Log: cfg.Log,
		NoDemo: true, ControllerArgs: cfg.controllerArgs(pprofAddr), ControllerEnv: cfg.controllerEnv(),
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "lab cleanup:", err)
		}
	}()
	if err := c.WaitSettled(ctx, 3*time.Minute); err != nil {
		return nil, err
	}
	out.Printf("   up after %.1f s: kube-ovn's gateway Pod runs vpcgw's agent (load %s)\n", time.Since(started).Seconds(), loadAvg())
	w, err := newWorkload(ctx, c, cfg, pprofAddr)
	if err != nil {
		return nil, err
	}
	if len(cfg.KubeProxy) > 0 {
		if w.kp, err = startKubeProxies(ctx, c, cfg); err != nil {
			return nil, err
		}
		defer w.kp.stop()
		out.Printf("   kube-proxy (nftables mode) beside it, --min-sync-period %s, each in a namespace of its own (load %s)\n",
			strings.Join(cfg.KubeProxy, ", "), loadAvg())
	}
	// What was measured is reported even when a later size fails.
	err = measure(ctx, w, cfg, res)
	if err != nil && len(c.Errors()) > 0 {
		err = fmt.Errorf("%w (the lab's own loops: %v)", err, errors.Join(c.Errors()...))
	}
	if ferr := finish(cfg, res); ferr != nil {
		err = errors.Join(err, ferr)
	}
	if werr := out.Err(); werr != nil {
		err = errors.Join(err, fmt.Errorf("write the bench report: %w", werr))
	}
	return res, err
}

func measure(ctx context.Context, w *workload, cfg Config, res *Result) error {
	out := cfg.report
	if cfg.ColdOnly {
		n := cfg.Sizes[len(cfg.Sizes)-1]
		w.c.StopController()
		out.Printf("== writing %d Services × %d endpoints, the controller stopped (load %s)\n", n, cfg.Endpoints, loadAvg())
		start := time.Now()
		if err := w.grow(ctx, n); err != nil {
			return err
		}
		out.Printf("   written in %.1f s\n", time.Since(start).Seconds())
		cold, err := runColdStart(ctx, w, cfg, true)
		if err != nil {
			return fmt.Errorf("cold start: %w", err)
		}
		res.Cold = cold
		printCold(out, cold)
		return nil
	}
	for k, n := range cfg.Sizes {
		profile := ""
		if k == len(cfg.Sizes)-1 {
			profile = cfg.CPUProfile
		}
		sr, err := w.runSize(ctx, n, profile)
		if err != nil {
			return fmt.Errorf("at N=%d: %w", n, err)
		}
		if cfg.Baseline {
			out.Printf("   baseline: one `nft -f` per changed identity, %d identities × %d backends (load %s)\n", n, cfg.Endpoints, loadAvg())
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
		cold, err := runColdStart(ctx, w, cfg, false)
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
	out := cfg.report
	if cfg.Plot != "" && len(res.Sizes) > 0 {
		if err := os.MkdirAll(filepath.Dir(cfg.Plot), 0o755); err != nil {
			return err
		}
		if err := plotLatency(res, cfg.Plot); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		out.Printf("== plot: %s\n", cfg.Plot)
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
