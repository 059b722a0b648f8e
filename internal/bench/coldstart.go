package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/vpcgw/vpcgw/internal/cluster"
	"github.com/vpcgw/vpcgw/internal/dataplane"
	"github.com/vpcgw/vpcgw/internal/netlab"
)

// runColdStart measures the controller's start against the Services already in the API: it
// stops the controller process, kills the gateway's agent and deletes its table (unless
// emptyLedger: the controller is already stopped and has never programmed these Services), then
// starts the controller again as the lab does and measures the time from the process start until
// its /metrics show a sync acknowledged with every identity, and the process's memory (/proc).
// Then it applies the same identities once more with an in-process agent in an empty namespace
// (the agent's time alone, SPEC P2).
func runColdStart(ctx context.Context, w *workload, cfg Config, emptyLedger bool) (*ColdResult, error) {
	n := len(w.slices)
	out := cfg.report
	res := &ColdResult{Services: n, Endpoints: cfg.Endpoints, EmptyLedger: emptyLedger}
	c := w.c
	if !emptyLedger {
		out.Printf("== cold start: %d Services × %d endpoints in the API; the controller stopped, the gateway's agent killed and its table deleted\n", n, cfg.Endpoints)
		c.StopController()
		if _, err := c.KillAgents(); err != nil {
			return nil, err
		}
		gw, ok := c.GatewayNetns()
		if !ok {
			return nil, fmt.Errorf("the gateway Pod %s runs in no namespace", c.GatewayPodName())
		}
		if _, err := netlab.Run("ip", "netns", "exec", gw, "nft", "list", "table", "ip", dataplane.TableName); err == nil {
			if _, err := netlab.Run("ip", "netns", "exec", gw, "nft", "delete", "table", "ip", dataplane.TableName); err != nil {
				return nil, fmt.Errorf("deleting the gateway's table: %w", err)
			}
		}
	} else {
		out.Printf("== cold start: %d Services × %d endpoints in the API, no records yet\n", n, cfg.Endpoints)
	}
	res.LoadAvg = loadAvg()
	start := time.Now()
	// StartController returns once the process answers /readyz; programmed is read from its
	// metrics below. A slow /readyz (caches of a large cluster) is not a failure here.
	if err := c.StartController(ctx); err != nil && c.ControllerExited() {
		return nil, fmt.Errorf("the controller process: %w\n%s", err, tailLines(c.ControllerOutput(), 40))
	}
	pid := c.ControllerPID()
	deadline := start.Add(cfg.ColdTimeout)
	lastReport := start
	for {
		if c.ControllerExited() {
			return nil, fmt.Errorf("the controller exited:\n%s", tailLines(c.ControllerOutput(), 40))
		}
		m, err := c.ControllerMetrics(ctx)
		s := samples(m)
		ok := map[string]string{"result": "ok"}
		if err == nil && s.sum(syncMetric+"_count", ok) >= 1 &&
			s.sum(identityMetric, map[string]string{"gateway": cluster.GatewayName}) >= float64(n) {
			res.ProgrammedS = time.Since(start).Seconds()
			res.FirstSyncS = s.sum(syncMetric+"_sum", ok) / s.sum(syncMetric+"_count", ok)
			break
		}
		res.sampleRSS(pid)
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("not programmed after %s", time.Since(start))
		}
		if time.Since(lastReport) > 30*time.Second {
			lastReport = time.Now()
			hwm, _, _ := netlab.ProcMemory(pid)
			out.Printf("   ... %.0f s: %.0f records created, %.0f record statuses written, VmHWM %.0f MiB (load %s)\n", time.Since(start).Seconds(),
				s.sum(recordsMetric, map[string]string{"op": "create"}), s.sum(recordsMetric, map[string]string{"op": "status"}), hwm, loadAvg())
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if cpu, err := procCPU(pid); err == nil {
		res.CPUSeconds = cpu
	}
	out.Printf("   programmed after %.1f s; watching memory for 15 s more\n", res.ProgrammedS)
	for range 15 {
		hwm, rss, _ := netlab.ProcMemory(pid)
		res.HWMMiB, res.RSSMiB = max(res.HWMMiB, hwm), max(res.RSSMiB, rss)
		res.sampleRSS(pid)
		if m, err := c.ControllerMetrics(ctx); err == nil {
			res.HeapMiB = max(res.HeapMiB, m[heapMetric]/(1<<20))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	if m, err := c.ControllerMetrics(ctx); err == nil {
		out.Printf("   plans by the restarted controller: %.0f full, %.0f partial\n", m["vpcgw_full_plans_total"], m["vpcgw_partial_plans_total"])
	}
	// gc=1: the profile, and the heap read after it, show what the controller keeps, not the
	// garbage of its last plan that no collection has freed yet.
	profile := cfg.HeapProfile
	if profile == "" {
		profile = os.DevNull
	}
	if err := fetch(ctx, "http://"+w.pprofAddr+"/debug/pprof/heap?gc=1", profile); err != nil {
		return nil, fmt.Errorf("controller heap profile: %w", err)
	}
	if cfg.HeapProfile != "" {
		out.Printf("   controller heap profile (after a collection): %s\n", cfg.HeapProfile)
	}
	if m, err := c.ControllerMetrics(ctx); err == nil {
		res.LiveHeapMiB = m[heapAllocMetric] / (1 << 20)
	}
	out.Printf("   the same %d identities × %d backends applied by a new in-process agent (netlink) in an empty namespace (load %s)\n", n, cfg.Endpoints, loadAvg())
	apply, kernel, err := agentColdApply(ctx, w.identities(n))
	if err != nil {
		return nil, fmt.Errorf("agent cold apply: %w", err)
	}
	res.AgentApplyS, res.AgentKernelS = apply.Seconds(), kernel.Seconds()
	return res, nil
}

// sampleRSS keeps the highest anonymous RSS seen and the latest file-backed RSS of pid.
func (c *ColdResult) sampleRSS(pid int) {
	if anon, file, err := netlab.ProcRSSParts(pid); err == nil {
		c.AnonMiB, c.FileMiB = max(c.AnonMiB, anon), file
	}
}

// fetch writes the body of url to path.
func fetch(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }() // read to the end or given up on
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return os.WriteFile(path, data, 0o644)
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer func() { _ = ln.Close() }() // only its address was wanted
	return ln.Addr().String(), nil
}
