// Package latency measures network programming latency as kube-proxy does: from an
// EndpointSlice change (the EndpointSlice controller's trigger time) to the acknowledgement of
// the first gateway state that carries it, once per change (SPEC O3).
package latency

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Histogram is vpcgw_network_programming_latency_seconds: every change a gateway acknowledged,
// by its latency. Its buckets hold kube-proxy's (network_programming_duration_seconds: 0.25 s,
// 0.5 s, then seconds up to 5 min), so that the two compare bucket by bucket, and finer ones
// below 0.25 s, where a gateway's programming takes milliseconds: a p50 or p99 of a few ms
// resolves.
var Histogram = prometheus.NewHistogram(prometheus.HistogramOpts{
	Name:    "vpcgw_network_programming_latency_seconds",
	Help:    "From an EndpointSlice change (endpoints.kubernetes.io/last-change-trigger-time) to the gateway's acknowledgement.",
	Buckets: Buckets(),
})

// Buckets are Histogram's upper bounds: fine below kube-proxy's first bound, then kube-proxy's.
func Buckets() []float64 {
	fine := []float64{0.0005, 0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2}
	return append(fine, KubeProxyBuckets()...)
}

// KubeProxyBuckets are kube-proxy's network programming latency buckets (k8s.io/kubernetes
// pkg/proxy/metrics, NetworkProgrammingLatency).
func KubeProxyBuckets() []float64 {
	var b []float64
	b = append(b, prometheus.LinearBuckets(0.25, 0.25, 2)...) // 0.25s, 0.50s
	b = append(b, prometheus.LinearBuckets(1, 1, 59)...)      // 1s, 2s, ... 59s
	b = append(b, prometheus.LinearBuckets(60, 5, 12)...)     // 60s, 65s, ... 115s
	return append(b, prometheus.LinearBuckets(120, 30, 7)...) // 2min, 2.5min, ... 5min
}

// TriggerAnnotation is set by the EndpointSlice controller to the time of the change that caused
// the slice's last update (kube-proxy measures network programming latency from it).
const TriggerAnnotation = "endpoints.kubernetes.io/last-change-trigger-time"

// Tracker remembers, per EndpointSlice, the last trigger time it observed, so that each
// change is measured once, when the gateway that serves it first acknowledges it.
type Tracker struct {
	mu   sync.Mutex
	seen map[types.UID]time.Time
}

// Pending returns the trigger times of slices changed since they were last observed.
func (l *Tracker) Pending(slices []discoveryv1.EndpointSlice) map[types.UID]time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[types.UID]time.Time{}
	for _, es := range slices {
		v := es.Annotations[TriggerAnnotation]
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

// Forget drops what the tracker knows of a deleted slice.
func (l *Tracker) Forget(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.seen, uid)
}

// ForgetOnDelete is an event handler that also tells Forget about each deleted object.
type ForgetOnDelete struct {
	handler.EventHandler
	Forget func(types.UID)
}

// Delete tells Forget the object's UID, then passes the event on.
func (h ForgetOnDelete) Delete(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.Forget(e.Object.GetUID())
	h.EventHandler.Delete(ctx, e, q)
}

// Observe records the latency of the changes that a sync acknowledged at now, and returns them.
func (l *Tracker) Observe(changed map[types.UID]time.Time, now time.Time) []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[types.UID]time.Time{}
	}
	out := make([]time.Duration, 0, len(changed))
	for uid, t := range changed {
		l.seen[uid] = t
		Histogram.Observe(now.Sub(t).Seconds())
		out = append(out, now.Sub(t))
	}
	return out
}
