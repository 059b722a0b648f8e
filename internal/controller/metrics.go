package controller

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vpcgw/vpcgw/internal/controller/kubewrite"
	"github.com/vpcgw/vpcgw/internal/ovn"
	"github.com/vpcgw/vpcgw/internal/version"
)

// DefaultMetricsAddr is --metrics-bind-address's default: plain HTTP on the pod's loopback only,
// which nothing outside the controller's own pod can reach (SPEC N6). The chart serves metrics
// on the pod network instead, with --metrics-secure.
const DefaultMetricsAddr = "127.0.0.1:8080"

// MetricsServerOptions is how /metrics is served at addr ("" or "0": off). secure serves HTTPS
// (a self-signed certificate unless certDir holds tls.crt and tls.key, reloaded when they
// change), TLS 1.2 or later, HTTP/1.1 only, and every request is authenticated (TokenReview) and
// authorized (SubjectAccessReview of get on the non-resource URL /metrics) by the API server,
// as kubebuilder scaffolds it. Without secure, only a loopback address is accepted: plain,
// unauthenticated metrics on the pod network would be readable by any workload (SPEC N6).
func MetricsServerOptions(addr string, secure bool, certDir string) (metricsserver.Options, error) {
	if addr == "" || addr == "0" {
		return metricsserver.Options{BindAddress: "0"}, nil
	}
	if !secure {
		if err := checkLoopback(addr); err != nil {
			return metricsserver.Options{}, fmt.Errorf("--metrics-bind-address %q without --metrics-secure: %w", addr, err)
		}
		return metricsserver.Options{BindAddress: addr}, nil
	}
	return metricsserver.Options{
		BindAddress:    addr,
		SecureServing:  true,
		FilterProvider: filters.WithAuthenticationAndAuthorization,
		CertDir:        certDir,
		TLSOpts: []func(*tls.Config){func(c *tls.Config) {
			c.MinVersion = tls.VersionTLS12
			// HTTP/2 off, as kubebuilder does: its stream handling was the way in for
			// CVE-2023-44487 and CVE-2023-39325; a scrape needs nothing of it.
			c.NextProtos = []string{"http/1.1"}
		}},
	}, nil
}

// checkLoopback accepts only host:port with a loopback host (127.0.0.0/8, ::1 or localhost).
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("not a host:port: %w", err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("plain HTTP metrics are served on a loopback address only (like %s); serve them on %q with --metrics-secure", DefaultMetricsAddr, addr)
}

// Metrics of SPEC O3, on the controller's /metrics (controller-runtime's registry).
var (
	syncDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "vpcgw_gateway_sync_duration_seconds",
		Help:    "Time to program every instance of a gateway, from the plan to the last acknowledgement.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
	}, []string{"result"})
	programmingLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "vpcgw_network_programming_latency_seconds",
		Help:    "From an EndpointSlice change (endpoints.kubernetes.io/last-change-trigger-time) to the gateway's acknowledgement.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
	})
	syncFailures = perGateway.counter("vpcgw_gateway_sync_failures_total",
		"Gateway syncs that failed (transport or agent error).")
	identities = perGateway.gauge("vpcgw_gateway_identities",
		"Identities (VIP, port, protocol) programmed on a gateway.")
	backends = perGateway.gauge("vpcgw_gateway_backends",
		"Backends over all identities programmed on a gateway.")
	conntrackDeleted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "vpcgw_conntrack_entries_deleted_total",
		Help: "Conntrack entries the gateway agents deleted (stale UDP flows, removed identities).",
	})
)

var (
	fullSyncs = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "vpcgw_full_plans_total",
		Help: "Syncs that planned every Service of their gateway (start, failure, a gateway-wide change).",
	})
	partialSyncs = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "vpcgw_partial_plans_total",
		Help: "Syncs that replanned only the Services changed since the last sync.",
	})
	// kubeOVNServes is 1 while kube-ovn-controller serves Services through the gateways itself and
	// vpcgw stands aside (SPEC K10).
	kubeOVNServes = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "vpcgw_kube_ovn_serves_services",
		Help: "1 while kube-ovn-controller's own Service controller is on (or may be): vpcgw then serves and releases nothing.",
	})
	planDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "vpcgw_plan_duration_seconds",
		Help:    "Time to read a gateway's snapshot and plan it, by kind: full (every Service) or partial (the changed ones).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
	}, []string{"kind"})
	// The whole pass, as kube-proxy's sync_full/partial_proxy_rules_duration_seconds: the plan's
	// kind decides how much is read and planned, so full and partial passes are told apart.
	reconcileDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "vpcgw_reconcile_duration_seconds",
		Help:    "Time of one sync pass of a gateway (plan, programming of every instance, VIP routes, records, Service status), by the kind of its plan (full, partial) and result (ok, error).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 20),
	}, []string{"kind", "result"})
)

// Operating metrics (SPEC O3): what the alerts and the dashboard read.
var (
	buildInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "vpcgw_build_info",
		Help: "Always 1; its labels say which build of the controller runs (version, Go version, VCS revision or \"unknown\").",
	}, []string{"version", "goversion", "revision"})
	lastSuccessfulSync = perGateway.gauge("vpcgw_gateway_last_successful_sync_timestamp_seconds",
		"Unix time of the last state of a gateway that every instance acknowledged.")
	pendingSince = perGateway.gauge("vpcgw_gateway_pending_since_timestamp_seconds",
		"Unix time of the oldest change of a gateway that no sync pass has applied yet; 0 when nothing waits (readiness fails once it is older than --sync-stale-after).")
	agentsConnected = perGateway.gauge("vpcgw_gateway_agents_connected",
		"Instances of a gateway whose agent stream is up.")
	gatewayInstances = perGateway.gauge("vpcgw_gateway_instances",
		"Running instances (pods) of a gateway that its last plan programs.")
	quarantinedServices = perGateway.gauge("vpcgw_gateway_quarantined_services",
		"Services of a gateway held back at its last sync because an instance refused one of their identities (event NftableLbSvcQuarantined).")
	waitingForRoom = perGateway.gauge("vpcgw_gateway_services_waiting_for_room",
		"Services of a gateway not served because the gateway's identity or backend bound, or their namespace's fair share of it, is reached (event NftableLbSvcLimit).")
)

// collectors are the controller's own metrics, registered with controller-runtime's registry.
var collectors = []prometheus.Collector{
	syncDuration, programmingLatency, syncFailures, identities, backends, kubewrite.RecordsWritten, conntrackDeleted,
	fullSyncs, partialSyncs, planDuration, reconcileDuration,
	buildInfo, lastSuccessfulSync, pendingSince, agentsConnected, gatewayInstances, quarantinedServices, waitingForRoom,
	kubeOVNServes,
}

// perGateway declares the metrics with a gateway label and keeps them: a gateway's series go
// with the gateway (tenants name gateways in annotations, SPEC N4).
var perGateway = &gatewayMetrics{}

type gatewayMetrics struct{ vecs []*prometheus.MetricVec }

func (g *gatewayMetrics) gauge(name, help string) *prometheus.GaugeVec {
	v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"gateway"})
	g.vecs = append(g.vecs, v.MetricVec)
	return v
}

func (g *gatewayMetrics) counter(name, help string) *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"gateway"})
	g.vecs = append(g.vecs, v.MetricVec)
	return v
}

func init() {
	ctrlmetrics.Registry.MustRegister(collectors...)
	buildInfo.WithLabelValues(version.Version, runtime.Version(), buildRevision()).Set(1)
}

// buildRevision is the VCS revision the Go toolchain stamped into the binary, "unknown" when the
// build had none (-buildvcs=false, a source tree without .git).
func buildRevision() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				return s.Value
			}
		}
	}
	return "unknown"
}

// deleteGatewaySeries drops every series of gateway gw.
func deleteGatewaySeries(gw string) {
	for _, v := range perGateway.vecs {
		v.DeletePartialMatch(prometheus.Labels{"gateway": gw})
	}
}

// MetricDesc describes one metric the controller serves on /metrics.
type MetricDesc struct {
	Name string
	// Type is counter, gauge or histogram.
	Type   string
	Labels []string
	Help   string
}

var descFields = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*"), .*variableLabels: \{([^}]*)\}\}$`)

// RegisteredMetrics describes the vpcgw metrics the controller's process registers (its own and
// the VIP route writer's), read from the collectors themselves, so that docs, alerts and the
// dashboard can be checked against what is really served.
func RegisteredMetrics() ([]MetricDesc, error) {
	var out []MetricDesc
	for _, c := range append(slices.Clone(collectors), ovn.Collectors()...) {
		typ, err := metricType(c)
		if err != nil {
			return nil, err
		}
		ch := make(chan *prometheus.Desc, 1)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m := descFields.FindStringSubmatch(d.String())
			if m == nil {
				return nil, fmt.Errorf("unexpected descriptor %s", d)
			}
			name, err1 := strconv.Unquote(m[1])
			help, err2 := strconv.Unquote(m[2])
			if err := errors.Join(err1, err2); err != nil {
				return nil, fmt.Errorf("descriptor %s: %w", d, err)
			}
			md := MetricDesc{Name: name, Type: typ, Help: help}
			if m[3] != "" {
				md.Labels = strings.Split(m[3], ",")
			}
			out = append(out, md)
		}
	}
	slices.SortFunc(out, func(a, b MetricDesc) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// metricType names a collector's type; a Gauge also has a Counter's methods, so it goes first.
func metricType(c prometheus.Collector) (string, error) {
	switch c.(type) {
	case *prometheus.GaugeVec, prometheus.Gauge:
		return "gauge", nil
	case *prometheus.CounterVec, prometheus.Counter:
		return "counter", nil
	case *prometheus.HistogramVec, prometheus.Histogram:
		return "histogram", nil
	}
	return "", fmt.Errorf("metric collector of unknown type %T", c)
}

// triggerAnnotation is set by the EndpointSlice controller to the time of the change that caused
// the slice's last update (kube-proxy measures network programming latency from it).
const triggerAnnotation = "endpoints.kubernetes.io/last-change-trigger-time"

// latencyTracker remembers, per EndpointSlice, the last trigger time it observed, so that each
// change is measured once, when the gateway that serves it first acknowledges it.
type latencyTracker struct {
	mu   sync.Mutex
	seen map[types.UID]time.Time
}

// pending returns the trigger times of slices changed since they were last observed.
func (l *latencyTracker) pending(slices []discoveryv1.EndpointSlice) map[types.UID]time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[types.UID]time.Time{}
	for _, es := range slices {
		v := es.Annotations[triggerAnnotation]
		if v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil || !t.After(l.seen[es.UID]) {
			continue
		}
		out[es.UID] = t
	}
	return out
}

// forget drops what the tracker knows of a deleted slice.
func (l *latencyTracker) forget(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.seen, uid)
}

// forgetOnDelete is an event handler that also tells forget about each deleted object.
type forgetOnDelete struct {
	handler.EventHandler
	forget func(types.UID)
}

func (h forgetOnDelete) Delete(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.forget(e.Object.GetUID())
	h.EventHandler.Delete(ctx, e, q)
}

// observe records the latency of the changes that a sync acknowledged at now, and returns them.
func (l *latencyTracker) observe(changed map[types.UID]time.Time, now time.Time) []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[types.UID]time.Time{}
	}
	out := make([]time.Duration, 0, len(changed))
	for uid, t := range changed {
		l.seen[uid] = t
		programmingLatency.Observe(now.Sub(t).Seconds())
		out = append(out, now.Sub(t))
	}
	return out
}
