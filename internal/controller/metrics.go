package controller

import (
	"runtime"
	"runtime/debug"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/vpcgw/vpcgw/internal/controller/kubewrite"
	"github.com/vpcgw/vpcgw/internal/controller/latency"
	"github.com/vpcgw/vpcgw/internal/controller/metricsserve"
	"github.com/vpcgw/vpcgw/internal/ovn"
	"github.com/vpcgw/vpcgw/internal/version"
)

// DefaultMetricsAddr is --metrics-bind-address's default (metricsserve.DefaultAddr).
const DefaultMetricsAddr = metricsserve.DefaultAddr

// MetricsServerOptions is how /metrics is served (metricsserve.Options).
var MetricsServerOptions = metricsserve.Options

// MetricDesc describes one metric the controller serves on /metrics.
type MetricDesc = metricsserve.Desc

// RegisteredMetrics describes the vpcgw metrics the controller's process registers (its own and
// the VIP route writer's), read from the collectors themselves, so that docs, alerts and the
// dashboard can be checked against what is really served.
func RegisteredMetrics() ([]MetricDesc, error) {
	return metricsserve.Describe(append(slices.Clone(collectors), ovn.Collectors()...))
}

// Metrics of SPEC O3, on the controller's /metrics (controller-runtime's registry).
var (
	syncDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "vpcgw_gateway_sync_duration_seconds",
		Help:    "Time to program every instance of a gateway, from the plan to the last acknowledgement.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
	}, []string{"result"})
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
	agentWarnings = perGateway.counter("vpcgw_gateway_agent_warning_acks_total",
		"Acknowledgements of a gateway's agents that carried a warning: the state is programmed, but the gateway cannot give all vpcgw promises (a nf_conntrack_tcp_loose the agent cannot set to 1: connections do not survive the loss of the gateway's conntrack, SPEC D9). The controller's log says which.")
	// agentApply is the agents' own time per state, told by their acknowledgements: beside
	// vpcgw_gateway_sync_duration_seconds it separates the gateway's kernel from the way there.
	agentApply = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "vpcgw_agent_apply_duration_seconds",
		Help:    "Time an instance's agent took for one state, from the line read to its acknowledgement (part=apply), and the kernel transactions in it (part=kernel).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
	}, []string{"part"})
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
	phaseDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "vpcgw_sync_phase_duration_seconds",
		Help:    "Time of each phase of a gateway's sync pass: plan, write-before (claims, finalizers, records), program (every instance acknowledged), routes (VIP routes and their check), write-after (records, ingress, releases), report (status, events).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 20),
	}, []string{"phase"})
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
	syncDuration, latency.Histogram, syncFailures, identities, backends, kubewrite.RecordsWritten, conntrackDeleted, agentApply, agentWarnings,
	fullSyncs, partialSyncs, planDuration, reconcileDuration, phaseDuration,
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
