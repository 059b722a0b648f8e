package bench

// kube-proxy beside vpcgw (issue 35): the real kube-proxy v1.37.2 (make assets builds it beside
// kube-apiserver) in nftables mode, each instance in a network namespace of its own, against the
// lab's API server, watching the same Services and EndpointSlices under the same churn. Its
// figures are its own metrics (kubeproxy_network_programming_duration_seconds, from the same
// endpoints.kubernetes.io/last-change-trigger-time the bench stamps, and
// kubeproxy_sync_proxy_rules_duration_seconds), read before and after the churn as the vpcgw
// controller's are, and its CPU time and memory from /proc.
//
// Its namespace has only a loopback: the bench listens there on the API server's port and
// forwards each connection to the lab's API server (dialled from the host's namespace), and reads
// kube-proxy's /metrics, bound to that loopback, with connections dialled from inside the
// namespace. Nothing of kube-proxy listens on the host, and its rules stay in its namespace.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vpcgw/vpcgw/internal/cluster"
	"github.com/vpcgw/vpcgw/internal/netlab"
)

const (
	// kubeProxyNode is the Node kube-proxy runs as (--hostname-override): it waits for that
	// Node's addresses before it starts.
	kubeProxyNode = "kube-proxy-bench"
	// kubeProxyNodeIP is its InternalIP (TEST-NET-1: nothing routes it).
	kubeProxyNodeIP = "192.0.2.10"
	// kubeProxyUser is bound to ClusterRole system:node-proxier by the API server's bootstrap
	// policy: kube-proxy runs with what a cluster grants it.
	kubeProxyUser = "system:kube-proxy"
	// In kube-proxy's namespace: where the bench forwards the API server, and its /metrics.
	kubeProxyAPIAddr     = "127.0.0.1:6443"
	kubeProxyMetricsAddr = "127.0.0.1:10249"
	// KubeProxyDefault in Config.KubeProxy runs kube-proxy with its default --min-sync-period
	// (1 s in nftables mode).
	KubeProxyDefault = "default"

	kpLatencyMetric     = "kubeproxy_network_programming_duration_seconds"
	kpSyncMetric        = "kubeproxy_sync_proxy_rules_duration_seconds"
	kpEndpointsPending  = "kubeproxy_sync_proxy_rules_endpoint_changes_pending"
	kpServicesPending   = "kubeproxy_sync_proxy_rules_service_changes_pending"
	kubeProxyStartLimit = 2 * time.Minute
)

// KubeProxyResult is what one kube-proxy instance measured during the churn at one size.
type KubeProxyResult struct {
	// MinSyncPeriod is its --min-sync-period ("default": kube-proxy's own, 1 s).
	MinSyncPeriod string `json:"min_sync_period"`
	// Latency is kubeproxy_network_programming_duration_seconds over the churn (its buckets
	// start at 250 ms: sub-second percentiles are interpolated within (0, 250 ms]).
	Latency Percentiles `json:"network_programming"`
	// Sync is kubeproxy_sync_proxy_rules_duration_seconds over the churn (one per nft transaction).
	Sync Percentiles `json:"sync_proxy_rules"`
	// Usage: kube-proxy's CPU time during the churn and its drain, its memory at the end.
	Usage Usage `json:"usage"`
}

// kubeProxy is one running kube-proxy.
type kubeProxy struct {
	minSync string
	ns      string
	proc    *netlab.Proc
	fwd     net.Listener
}

// kubeProxies are the instances of a run, in their lab of namespaces.
type kubeProxies struct {
	lab  *netlab.Lab
	list []*kubeProxy
}

// kubeProxyArgs is kube-proxy's command line. Conntrack's limits and timeouts are left as they
// are: nf_conntrack_max cannot be written from a namespace other than the host's.
func kubeProxyArgs(bin, kubeconfig, minSync string) []string {
	args := []string{bin, "--kubeconfig", kubeconfig, "--proxy-mode=nftables",
		"--hostname-override", kubeProxyNode, "--cluster-cidr", cluster.DefaultCIDR,
		"--metrics-bind-address", kubeProxyMetricsAddr, "--healthz-bind-address", "127.0.0.1:10256",
		"--conntrack-max-per-core=0", "--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0",
		"--conntrack-udp-timeout=0", "--conntrack-udp-timeout-stream=0", "--v=1"}
	if minSync != KubeProxyDefault {
		// KubeProxyConfiguration's minSyncPeriod: v1.37 has no --min-sync-period flag, and
		// --iptables-min-sync-period sets it in every mode but ipvs (nftables included).
		args = append(args, "--iptables-min-sync-period", minSync)
	}
	return args
}

// startKubeProxies creates kube-proxy's Node and starts one kube-proxy per --min-sync-period of
// cfg.KubeProxy, each in a namespace of its own, and waits until each has synced once.
func startKubeProxies(ctx context.Context, c *cluster.Cluster, cfg Config) (_ *kubeProxies, err error) {
	bin := filepath.Join(cfg.AssetsDir, "kube-proxy")
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("kube-proxy is not built (make assets): %w", err)
	}
	if err := createKubeProxyNode(ctx, c); err != nil {
		return nil, err
	}
	kc, err := c.UserKubeconfig(kubeProxyUser, "https://"+kubeProxyAPIAddr)
	if err != nil {
		return nil, err
	}
	kcFile := filepath.Join(filepath.Dir(c.Kubeconfig), "kube-proxy.kubeconfig")
	if err := os.WriteFile(kcFile, kc, 0o600); err != nil {
		return nil, fmt.Errorf("writing kube-proxy's kubeconfig: %w", err)
	}
	api, err := url.Parse(c.Config.Host)
	if err != nil {
		return nil, fmt.Errorf("the API server's address %q: %w", c.Config.Host, err)
	}
	lab, err := netlab.New("kp")
	if err != nil {
		return nil, err
	}
	kps := &kubeProxies{lab: lab}
	defer func() {
		if err != nil {
			kps.stop()
		}
	}()
	for i, minSync := range cfg.KubeProxy {
		k, err := kps.start(ctx, i, minSync, kubeProxyArgs(bin, kcFile, minSync), api.Host, cfg.Log)
		if err != nil {
			return nil, err
		}
		kps.list = append(kps.list, k)
	}
	for _, k := range kps.list {
		if err := k.waitSynced(ctx, kubeProxyStartLimit); err != nil {
			return nil, err
		}
	}
	return kps, nil
}

// start starts instance i in a new namespace with the API server forwarded into it.
func (kps *kubeProxies) start(ctx context.Context, i int, minSync string, argv []string, apiHost string, log logr.Logger) (*kubeProxy, error) {
	ns, err := kps.lab.AddNetns(fmt.Sprintf("proxy%d", i))
	if err != nil {
		return nil, fmt.Errorf("kube-proxy's namespace: %w", err)
	}
	fwd, err := netlab.ListenInNetns(ns, "tcp", kubeProxyAPIAddr)
	if err != nil {
		return nil, fmt.Errorf("listening for the API server in %s: %w", ns, err)
	}
	k := &kubeProxy{minSync: minSync, ns: ns, fwd: fwd}
	go forward(fwd, func() (net.Conn, error) {
		return (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, "tcp", apiHost)
	}, log.WithValues("netns", ns))
	if k.proc, err = kps.lab.Start(ns, argv...); err != nil {
		_ = fwd.Close() // nothing was accepted yet
		return nil, fmt.Errorf("starting kube-proxy: %w", err)
	}
	log.Info("kube-proxy started", "netns", ns, "pid", k.proc.Cmd.Process.Pid, "minSyncPeriod", minSync)
	return k, nil
}

// stop ends the kube-proxies, their forwarders and namespaces.
func (kps *kubeProxies) stop() {
	if kps == nil {
		return
	}
	for _, k := range kps.list {
		_ = k.fwd.Close() // stops the accept loop; nothing else to report
	}
	_ = kps.lab.Cleanup() // namespaces by name; a leftover shows in `ip netns`
}

// forward accepts on l and copies each connection both ways to one from dial, until l closes.
func forward(l net.Listener, dial func() (net.Conn, error), log logr.Logger) {
	for {
		in, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			out, err := dial()
			if err != nil {
				log.Error(err, "forwarding a kube-proxy connection to the API server")
				_ = in.Close() // the client sees the failure
				return
			}
			done := make(chan struct{}, 2)
			pipe := func(dst, src net.Conn) {
				_, _ = io.Copy(dst, src) // ends when either side closes
				_ = dst.Close()
				_ = src.Close()
				done <- struct{}{}
			}
			go pipe(out, in)
			pipe(in, out)
			<-done
		}()
	}
}

// createKubeProxyNode creates the Node kube-proxy runs as, with an InternalIP and Ready.
func createKubeProxyNode(ctx context.Context, c *cluster.Cluster) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: kubeProxyNode, Labels: map[string]string{
		"kubernetes.io/hostname": kubeProxyNode, "kubernetes.io/os": "linux",
	}}}
	if err := c.Client.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating Node %s: %w", kubeProxyNode, err)
	}
	// kube-ovn-controller annotates a new Node at once: read it again on a conflict.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Client.Get(ctx, client.ObjectKey{Name: kubeProxyNode}, node); err != nil {
			return err
		}
		now := metav1.Now()
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: kubeProxyNodeIP}, {Type: corev1.NodeHostName, Address: kubeProxyNode}}
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}}
		return c.Client.Status().Update(ctx, node)
	})
	if err != nil {
		return fmt.Errorf("setting Node %s status: %w", kubeProxyNode, err)
	}
	return nil
}

// kubeProxyStats is one scrape of a kube-proxy's metrics.
type kubeProxyStats struct {
	latency, sync histogram
	pending       float64 // Service and EndpointSlice changes not yet synced
}

func (k *kubeProxy) stats(ctx context.Context) (kubeProxyStats, error) {
	s, err := netlab.ScrapeMetricsInNetns(ctx, k.ns, "http://"+kubeProxyMetricsAddr+"/metrics")
	if err != nil {
		return kubeProxyStats{}, fmt.Errorf("kube-proxy (--min-sync-period %s): %w", k.minSync, err)
	}
	m := samples(s)
	lat, err := optionalHistogram(m, kpLatencyMetric, kpIPv4)
	if err != nil {
		return kubeProxyStats{}, fmt.Errorf("kube-proxy: %w", err)
	}
	sync, err := optionalHistogram(m, kpSyncMetric, kpIPv4)
	if err != nil {
		return kubeProxyStats{}, fmt.Errorf("kube-proxy: %w", err)
	}
	return kubeProxyStats{latency: lat, sync: sync, pending: m.sum(kpEndpointsPending, nil) + m.sum(kpServicesPending, nil)}, nil
}

// kpIPv4 selects kube-proxy's IPv4 proxier: it runs one per family (dual-stack mode), and the
// bench's Services and endpoints are IPv4.
var kpIPv4 = map[string]string{"ip_family": "IPv4"}

// optionalHistogram is readHistogram of a histogram kube-proxy exports only from its first
// observation on (a vector, by ip_family): none yet is an empty histogram.
func optionalHistogram(m samples, name string, want map[string]string) (histogram, error) {
	for series := range m {
		if n, labels, err := splitSeries(series); err == nil && n == name+"_bucket" && matches(labels, want) {
			return readHistogram(m, name, want)
		}
	}
	return histogram{}, nil
}

// pid is kube-proxy's PID while it runs (`ip netns exec` execs it), else 0.
func (k *kubeProxy) pid() int {
	if k.proc.Exited() {
		return 0
	}
	return k.proc.Cmd.Process.Pid
}

// failed is the error of a kube-proxy that ended, with the end of its log, or nil.
func (k *kubeProxy) failed() error {
	if !k.proc.Exited() {
		return nil
	}
	return fmt.Errorf("kube-proxy (--min-sync-period %s) exited (%v):\n%s", k.minSync, k.proc.Wait(), tailLines(k.proc.Stderr(), 20))
}

// waitSynced waits until kube-proxy has synced its rules at least once.
func (k *kubeProxy) waitSynced(ctx context.Context, timeout time.Duration) error {
	return k.poll(ctx, timeout, 200*time.Millisecond, func(s kubeProxyStats) bool { return s.sync.count > 0 })
}

// poll scrapes every interval until done says so, kube-proxy ends, or timeout passes.
func (k *kubeProxy) poll(ctx context.Context, timeout, interval time.Duration, done func(kubeProxyStats) bool) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if err := k.failed(); err != nil {
			return err
		}
		s, err := k.stats(ctx)
		if err == nil && done(s) {
			return nil
		}
		last = err
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-proxy (--min-sync-period %s) not there after %s (%v); its log:\n%s", k.minSync, timeout, last, tailLines(k.proc.Stderr(), 20))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// kubeProxyMark is one instance's state before the churn.
type kubeProxyMark struct {
	stats kubeProxyStats
	usage procUsage
}

// before waits until every kube-proxy has synced all it was told (nothing pending for a second)
// and reads its metrics and usage.
func (kps *kubeProxies) before(ctx context.Context, timeout time.Duration) ([]kubeProxyMark, error) {
	if kps == nil {
		return nil, nil
	}
	marks := make([]kubeProxyMark, len(kps.list))
	for i, k := range kps.list {
		idleSince := time.Time{}
		err := k.poll(ctx, timeout, 200*time.Millisecond, func(s kubeProxyStats) bool {
			if s.pending > 0 || idleSince.IsZero() {
				idleSince = time.Now()
				return false
			}
			return time.Since(idleSince) >= time.Second
		})
		if err != nil {
			return nil, err
		}
		if marks[i].stats, err = k.stats(ctx); err != nil {
			return nil, err
		}
		if marks[i].usage, err = usage(k.pid()); err != nil {
			return nil, fmt.Errorf("kube-proxy: %w", err)
		}
	}
	return marks, nil
}

// after waits until every kube-proxy has measured want changes since its mark, or has nothing
// pending and measured nothing new for stall (changes of one slice within one sync are measured
// once), or timeout passed; then it reads the figures of the churn.
func (kps *kubeProxies) after(ctx context.Context, marks []kubeProxyMark, want int, stall, timeout time.Duration) ([]KubeProxyResult, error) {
	if kps == nil {
		return nil, nil
	}
	var out []KubeProxyResult
	deadline := time.Now().Add(timeout)
	for i, k := range kps.list {
		lastCount, lastChange := -1.0, time.Now()
		// What was measured when the time is up is the figure: a slow kube-proxy is a result.
		err := k.poll(ctx, timeout+time.Minute, 100*time.Millisecond, func(s kubeProxyStats) bool {
			got := s.latency.count - marks[i].stats.latency.count
			if got != lastCount {
				lastCount, lastChange = got, time.Now()
			}
			return got >= float64(want) || s.pending == 0 && time.Since(lastChange) > stall || time.Now().After(deadline)
		})
		if err != nil {
			return nil, err
		}
		r, err := k.result(ctx, marks[i])
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// result is what kube-proxy measured since mark.
func (k *kubeProxy) result(ctx context.Context, mark kubeProxyMark) (KubeProxyResult, error) {
	r := KubeProxyResult{MinSyncPeriod: k.minSync}
	s, err := k.stats(ctx)
	if err != nil {
		return r, err
	}
	now, err := usage(k.pid())
	if err != nil {
		return r, fmt.Errorf("kube-proxy: %w", err)
	}
	r.Usage = now.since(mark.usage)
	lat, err := s.latency.sub(mark.stats.latency)
	if err != nil {
		return r, fmt.Errorf("kube-proxy: %w", err)
	}
	sync, err := s.sync.sub(mark.stats.sync)
	if err != nil {
		return r, fmt.Errorf("kube-proxy: %w", err)
	}
	r.Latency, r.Sync = percentilesOf(lat), percentilesOf(sync)
	if r.Latency.Count == 0 {
		return r, errors.New("kube-proxy measured none of the churn's changes")
	}
	return r, nil
}
