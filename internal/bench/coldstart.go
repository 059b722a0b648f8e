package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/vpcgw/vpcgw/internal/dataplane"
	"github.com/vpcgw/vpcgw/internal/lab"
	"github.com/vpcgw/vpcgw/internal/netlab"
)

// runColdStart stops the lab's in-process controller (its agent ends with it), deletes the
// gateway's table, and starts `vpcgw controller` as a process of its own against the lab's API
// server, where the Services, slices and records of the largest size already are. It measures
// the time from the process start until its first sync is acknowledged with every identity, and
// the process's memory. Then it applies the same identities once more with an in-process agent
// in an empty namespace (the agent's time alone, SPEC P2).
func runColdStart(ctx context.Context, l *lab.Lab, w *workload, cfg Config) (*ColdResult, error) {
	n := len(w.slices)
	out := cfg.Out
	res := &ColdResult{Services: n, Endpoints: cfg.Endpoints}
	fmt.Fprintf(out, "== cold start: %d Services × %d endpoints in the API; the in-process controller stopped, the gateway's table emptied\n", n, cfg.Endpoints)
	l.StopController()
	if _, err := netlab.Run("ip", "netns", "exec", l.GatewayNetns(), "nft", "list", "table", "ip", dataplane.TableName); err == nil {
		if _, err := netlab.Run("ip", "netns", "exec", l.GatewayNetns(), "nft", "delete", "table", "ip", dataplane.TableName); err != nil {
			return nil, err
		}
	}
	_, kubeconfig, err := l.Describe()
	if err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	logFile, err := os.CreateTemp("", "vpcgw-bench-controller-*.log")
	if err != nil {
		return nil, err
	}
	logPath := logFile.Name()
	keepLog := true // for a failed run
	defer func() {
		logFile.Close()
		if !keepLog {
			_ = os.Remove(logPath)
		}
	}()
	pprofAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(cfg.Bins.Vpcgw, "controller", "--kubeconfig", kubeconfig, "--transport", "local", "--agent-command", cfg.Bins.Agent,
		"--enable-gw-nftable-lb-svc", "--allow-endpoints-without-pods", "--metrics-bind-address", addr, "--health-probe-bind-address", "0",
		"--min-sync-interval", cfg.MinSyncInterval.String(), "--pprof-bind-address", pprofAddr)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	res.LoadAvg = loadAvg()
	fmt.Fprintf(out, "   %s (log %s, load %s)\n", strings.Join(cmd.Args, " "), logPath, res.LoadAvg)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	pid := cmd.Process.Pid
	deadline := start.Add(cfg.ColdTimeout)
	lastReport := start
	for {
		select {
		case err := <-exited:
			return nil, fmt.Errorf("controller exited: %v (see %s)", err, logPath)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		m, err := scrape(addr)
		if err == nil && m[`vpcgw_gateway_sync_duration_seconds_count{result="ok"}`] >= 1 &&
			m[`vpcgw_gateway_identities{gateway="`+lab.GatewayName+`"}`] >= float64(n) {
			res.ProgrammedS = time.Since(start).Seconds()
			res.FirstSyncS = m[`vpcgw_gateway_sync_duration_seconds_sum{result="ok"}`] / m[`vpcgw_gateway_sync_duration_seconds_count{result="ok"}`]
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("not programmed after %s (see %s)", time.Since(start), logPath)
		}
		if time.Since(lastReport) > 30*time.Second {
			lastReport = time.Now()
			hwm, _ := procMem(pid)
			fmt.Fprintf(out, "   ... %.0f s: %.0f records created, %.0f record statuses written, VmHWM %.0f MiB (load %s)\n", time.Since(start).Seconds(),
				m[`vpcgw_records_written_total{op="create"}`], m[`vpcgw_records_written_total{op="status"}`], hwm, loadAvg())
		}
	}
	fmt.Fprintf(out, "   programmed after %.1f s; watching memory for 15 s more\n", res.ProgrammedS)
	for range 15 {
		hwm, rss := procMem(pid)
		res.HWMMiB, res.RSSMiB = max(res.HWMMiB, hwm), max(res.RSSMiB, rss)
		if m, err := scrape(addr); err == nil {
			res.HeapMiB = max(res.HeapMiB, m["go_memstats_heap_inuse_bytes"]/(1<<20))
		}
		time.Sleep(time.Second)
	}
	if m, err := scrape(addr); err == nil {
		fmt.Fprintf(out, "   plans by the cold-start controller: %.0f full, %.0f partial\n", m["vpcgw_full_plans_total"], m["vpcgw_partial_plans_total"])
	}
	if cfg.HeapProfile != "" {
		if err := fetch("http://"+pprofAddr+"/debug/pprof/heap", cfg.HeapProfile); err != nil {
			return nil, fmt.Errorf("controller heap profile: %w", err)
		}
		fmt.Fprintf(out, "   controller heap profile: %s\n", cfg.HeapProfile)
	}
	fmt.Fprintf(out, "   the same %d identities × %d backends applied by a new in-process agent (netlink) in an empty namespace (load %s)\n", n, cfg.Endpoints, loadAvg())
	apply, kernel, err := agentColdApply(ctx, w.identities(n))
	if err != nil {
		return nil, fmt.Errorf("agent cold apply: %w", err)
	}
	res.AgentApplyS, res.AgentKernelS = apply.Seconds(), kernel.Seconds()
	keepLog = false
	return res, nil
}

// fetch writes the body of url to path.
func fetch(url, path string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// scrape reads the controller's /metrics into "name{labels}" -> value.
func scrape(addr string) (map[string]float64, error) {
	return netlab.ScrapeMetrics(context.Background(), "http://"+addr+"/metrics")
}

// procMem is VmHWM and VmRSS of a process, in MiB (0 when it is gone).
func procMem(pid int) (hwm, rss float64) {
	hwm, rss, _ = netlab.ProcMemory(pid)
	return hwm, rss
}
