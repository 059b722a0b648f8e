package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/vpcgw/vpcgw/internal/cluster"
	"github.com/vpcgw/vpcgw/internal/controller/latency"
	"github.com/vpcgw/vpcgw/internal/netlab"
)

// usage reads a process's CPU time and memory now.
func usage(pid int) (procUsage, error) {
	if pid == 0 {
		return procUsage{}, errors.New("the process is not running")
	}
	cpu, err := procCPU(pid)
	if err != nil {
		return procUsage{}, err
	}
	hwm, rss, err := netlab.ProcMemory(pid)
	if err != nil {
		return procUsage{}, fmt.Errorf("reading the memory of process %d: %w", pid, err)
	}
	return procUsage{cpu: cpu, rssMiB: rss, hwmMiB: hwm}, nil
}

// since is the usage between before and now (the memory is now's).
func (now procUsage) since(before procUsage) Usage {
	return Usage{CPUSeconds: now.cpu - before.cpu, RSSMiB: now.rssMiB, HWMMiB: now.hwmMiB}
}

// processes reads both controllers' usage: vpcgw's and kube-ovn-controller's.
func (w *workload) processes() (vpcgw, kubeOVN procUsage, err error) {
	if vpcgw, err = usage(w.c.ControllerPID()); err != nil {
		return vpcgw, kubeOVN, fmt.Errorf("the vpcgw controller: %w", err)
	}
	if kubeOVN, err = usage(w.c.KubeOVN.PID()); err != nil {
		return vpcgw, kubeOVN, fmt.Errorf("kube-ovn-controller: %w", err)
	}
	return vpcgw, kubeOVN, nil
}

// controllerStats are the controller's own metrics, read before and after the churn to split the
// latency into its parts.
type controllerStats struct {
	latency                  histogram
	reconcileSec, reconciles float64 // controller_runtime_reconcile_time_seconds of vpcgw-gateway
	syncSec, syncs           float64 // vpcgw_gateway_sync_duration_seconds{result="ok"}: plan -> every ack
	recordWrites             float64 // vpcgw_records_written_total, every operation
	requests                 map[string]float64
	pending                  float64 // vpcgw_gateway_pending_since_timestamp_seconds of the lab's gateway
	// agentApply and agentKernel: vpcgw_agent_apply_duration_seconds, the agent's own time per
	// state and its kernel transactions (empty before the first acknowledgement that tells them).
	agentApply, agentKernel histogram
	// phaseSec and phases: vpcgw_sync_phase_duration_seconds, the time of each phase of the
	// sync passes, and how many passes each phase ended.
	phaseSec, phases map[string]float64
}

func (w *workload) stats(ctx context.Context) (controllerStats, error) {
	s, err := w.c.ControllerMetrics(ctx)
	if err != nil {
		return controllerStats{}, err
	}
	m := samples(s)
	lat, err := readHistogram(m, latencyMetric, nil)
	if err != nil {
		return controllerStats{}, err
	}
	agentApply, err := optionalHistogram(m, agentApplyMetric, map[string]string{"part": "apply"})
	if err != nil {
		return controllerStats{}, err
	}
	agentKernel, err := optionalHistogram(m, agentApplyMetric, map[string]string{"part": "kernel"})
	if err != nil {
		return controllerStats{}, err
	}
	gw := map[string]string{"controller": "vpcgw-gateway"}
	ok := map[string]string{"result": "ok"}
	return controllerStats{
		agentApply: agentApply, agentKernel: agentKernel,
		phaseSec: m.byLabels(phaseMetric+"_sum", "phase"), phases: m.byLabels(phaseMetric+"_count", "phase"),
		latency:      lat,
		reconcileSec: m.sum(reconcileMetric+"_sum", gw), reconciles: m.sum(reconcileMetric+"_count", gw),
		syncSec: m.sum(syncMetric+"_sum", ok), syncs: m.sum(syncMetric+"_count", ok),
		recordWrites: m.sum(recordsMetric, nil),
		requests:     m.byLabels(requestsMetric, "method", "code"),
		pending:      m.sum(pendingMetric, map[string]string{"gateway": cluster.GatewayName}),
	}, nil
}

// apiWrites counts the write requests (POST, PUT, PATCH, DELETE) of a controller's
// rest_client_requests_total by method and code.
func apiWrites(requests map[string]float64) int {
	n := 0.0
	for k, v := range requests {
		switch strings.Fields(k)[0] {
		case "POST", "PUT", "PATCH", "DELETE":
			n += v
		}
	}
	return int(n)
}

// churnPercentiles are the percentiles of the observations between two scrapes of a histogram
// that may be missing from the first.
func churnPercentiles(after, before histogram) (Percentiles, error) {
	if len(after.buckets) == 0 {
		return Percentiles{}, nil
	}
	d, err := after.sub(before)
	if err != nil {
		return Percentiles{}, err
	}
	return percentilesOf(d), nil
}

// runSize grows the workload to n Services, waits until they are programmed, and measures the
// churn's network programming latency from the controller's histogram, with what the controller
// and kube-ovn-controller spent meanwhile.
func (w *workload) runSize(ctx context.Context, n int, cpuProfile string) (SizeResult, error) {
	sr := SizeResult{Services: n, Endpoints: w.cfg.Endpoints}
	out := w.cfg.report
	out.Printf("== N=%d: creating %d Services × %d endpoints (load %s)\n", n, n-len(w.slices), w.cfg.Endpoints, loadAvg())
	ctrlBefore, kovnBefore, err := w.processes()
	if err != nil {
		return sr, err
	}
	growBefore, err := w.stats(ctx)
	if err != nil {
		return sr, err
	}
	added := n - len(w.slices)
	start := time.Now()
	if err := w.grow(ctx, n); err != nil {
		return sr, err
	}
	sr.CreateSec = time.Since(start).Seconds()
	if err := w.waitProgrammed(ctx, n, max(3*time.Minute, time.Duration(n)*200*time.Millisecond)); err != nil {
		return sr, err
	}
	sr.ProgramS = time.Since(start).Seconds()
	growAfter, err := w.stats(ctx)
	if err != nil {
		return sr, err
	}
	sr.CreateAPIWrites = apiWrites(growAfter.requests) - apiWrites(growBefore.requests)
	out.Printf("   the controller's API writes meanwhile: %d for %d new Services (%.2f each: records, ingress, finalizers, events)\n",
		sr.CreateAPIWrites, added, float64(sr.CreateAPIWrites)/float64(max(1, added)))
	ctrlNow, kovnNow, err := w.processes()
	if err != nil {
		return sr, err
	}
	sr.CreateController, sr.CreateKubeOVN = ctrlNow.since(ctrlBefore), kovnNow.since(kovnBefore)
	out.Printf("   written in %.1f s, all %d programmed after %.1f s; meanwhile vpcgw controller %s, kube-ovn-controller %s\n",
		sr.CreateSec, n, sr.ProgramS, sr.CreateController, sr.CreateKubeOVN)
	// Start from a gateway with nothing pending (the controller's follow-up syncs: record
	// statuses), as the controller's own metric says.
	if err := w.waitIdle(ctx, 2*time.Minute); err != nil {
		return sr, err
	}
	out.Printf("   churn %.0f changes/s for %s (load %s)\n", w.cfg.Rate, w.cfg.Duration, loadAvg())
	sr.LoadAvg = loadAvg()
	var profile chan error
	if cpuProfile != "" {
		profile = make(chan error, 1)
		secs := strconv.Itoa(max(1, int(w.cfg.Duration.Seconds())))
		go func() { profile <- fetch(ctx, "http://"+w.pprofAddr+"/debug/pprof/profile?seconds="+secs, cpuProfile) }()
	}
	kpBefore, err := w.kp.before(ctx, 5*time.Minute)
	if err != nil {
		return sr, err
	}
	before, err := w.stats(ctx)
	if err != nil {
		return sr, err
	}
	if ctrlBefore, kovnBefore, err = w.processes(); err != nil {
		return sr, err
	}
	written, elapsed, err := w.churn(ctx, n)
	if err != nil {
		return sr, err
	}
	after, err := w.drain(ctx, before, written, 15*time.Second, 10*time.Minute)
	if err != nil {
		return sr, err
	}
	if ctrlNow, kovnNow, err = w.processes(); err != nil {
		return sr, err
	}
	sr.Controller, sr.KubeOVN = ctrlNow.since(ctrlBefore), kovnNow.since(kovnBefore)
	if sr.KubeProxy, err = w.kp.after(ctx, kpBefore, written, 5*time.Second, 5*time.Minute); err != nil {
		return sr, err
	}
	lat, err := after.latency.sub(before.latency)
	if err != nil {
		return sr, err
	}
	sr.Latency = percentilesOf(lat)
	coarse, err := lat.within(latency.KubeProxyBuckets())
	if err != nil {
		return sr, fmt.Errorf("vpcgw's latency in kube-proxy's buckets: %w", err)
	}
	sr.LatencyInKubeProxyBuckets = percentilesOf(coarse)
	sr.PhaseMeanMs = map[string]float64{}
	for ph, sec := range after.phaseSec {
		if n := after.phases[ph] - before.phases[ph]; n > 0 {
			sr.PhaseMeanMs[ph] = (sec - before.phaseSec[ph]) / n * 1000
		}
	}
	if sr.AgentApply, err = churnPercentiles(after.agentApply, before.agentApply); err != nil {
		return sr, fmt.Errorf("the agent's apply time: %w", err)
	}
	if sr.AgentKernel, err = churnPercentiles(after.agentKernel, before.agentKernel); err != nil {
		return sr, fmt.Errorf("the agent's kernel time: %w", err)
	}
	sr.Reconciles, sr.ReconcileBusy = int(after.reconciles-before.reconciles), after.reconcileSec-before.reconcileSec
	sr.RecordWrites = int(after.recordWrites - before.recordWrites)
	sr.Syncs = int(after.syncs - before.syncs)
	if sr.Syncs > 0 {
		sr.SyncMeanMs = (after.syncSec - before.syncSec) / float64(sr.Syncs) * 1000
	}
	sr.APIRequests = map[string]int{}
	for k, v := range after.requests {
		if d := int(v - before.requests[k]); d > 0 {
			sr.APIRequests[k] = d
		}
	}
	sr.ChurnSeconds = elapsed.Seconds()
	sr.Changes = written
	sr.RateAch = float64(written) / elapsed.Seconds()
	if profile != nil {
		if err := <-profile; err != nil {
			return sr, fmt.Errorf("the controller's CPU profile: %w", err)
		}
		out.Printf("   controller CPU profile of the churn: %s\n", cpuProfile)
	}
	return sr, nil
}

// waitIdle waits until the controller reports no change of the lab's gateway pending.
func (w *workload) waitIdle(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		s, err := w.stats(ctx)
		if err == nil && s.pending == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the controller still has changes of %s pending after %s (%v)", cluster.GatewayName, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// drain waits until the controller has measured want changes since before, or nothing is pending
// and no latency came in for stall (changes of one slice coalesced into one sync are measured
// once, from the latest trigger time), or maxWait passed. It returns the last stats.
func (w *workload) drain(ctx context.Context, before controllerStats, want int, stall, maxWait time.Duration) (controllerStats, error) {
	deadline := time.Now().Add(maxWait)
	last, lastChange := -1.0, time.Now()
	for {
		s, err := w.stats(ctx)
		if ended := w.c.ControllerEnded(); ended != nil {
			return s, ended
		}
		if err != nil {
			return s, err
		}
		got := s.latency.count - before.latency.count
		if got >= float64(want) {
			return s, nil
		}
		if got != last {
			last, lastChange = got, time.Now()
		} else if s.pending == 0 && time.Since(lastChange) > stall {
			return s, nil
		}
		if time.Now().After(deadline) {
			return s, nil
		}
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
