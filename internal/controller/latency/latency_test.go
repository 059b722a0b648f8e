package latency

import (
	"slices"
	"sort"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// covers: N4, O3
// The latency tracker reports each EndpointSlice change once, and holds nothing of a slice once
// it is deleted: a tenant creating and deleting slices cannot grow the controller's memory.
func TestLatencyTrackerForgetsDeletedSlices(t *testing.T) {
	var l Tracker
	t0 := time.Now().Add(-time.Second)
	slice := func(uid types.UID, at time.Time) discoveryv1.EndpointSlice {
		return discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{UID: uid, Annotations: map[string]string{TriggerAnnotation: at.Format(time.RFC3339Nano)}}}
	}
	changed := l.Pending([]discoveryv1.EndpointSlice{slice("a", t0), slice("b", t0)})
	if len(changed) != 2 {
		t.Fatalf("pending %v, want both slices", changed)
	}
	if lat := l.Observe(changed, time.Now()); len(lat) != 2 {
		t.Fatalf("observed %v, want two latencies", lat)
	}
	if again := l.Pending([]discoveryv1.EndpointSlice{slice("a", t0)}); len(again) != 0 {
		t.Fatalf("an observed change is pending again: %v", again)
	}
	l.Forget("a")
	l.Forget("b")
	if n := len(l.seen); n != 0 {
		t.Fatalf("the tracker holds %d deleted slices", n)
	}
}

// covers: O3
// Every change a gateway acknowledged is one sample of the histogram the bench scrapes; its
// buckets hold kube-proxy's, and resolve a few milliseconds.
func TestHistogramRecordsEveryChange(t *testing.T) {
	var l Tracker
	count := func() uint64 {
		var m dto.Metric
		if err := Histogram.Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetHistogram().GetSampleCount()
	}
	before := count()
	at := time.Now().Add(-3 * time.Millisecond).Format(time.RFC3339Nano)
	var es []discoveryv1.EndpointSlice
	for _, uid := range []types.UID{"h1", "h2", "h3"} {
		es = append(es, discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{UID: uid, Annotations: map[string]string{TriggerAnnotation: at}}})
	}
	l.Observe(l.Pending(es), time.Now())
	if got := count() - before; got != 3 {
		t.Fatalf("%d samples for 3 changes", got)
	}
	buckets := Buckets()
	for _, b := range KubeProxyBuckets() {
		if !slices.Contains(buckets, b) {
			t.Errorf("kube-proxy's bucket %v is not one of ours", b)
		}
	}
	if !sort.Float64sAreSorted(buckets) || buckets[0] > 0.001 || !slices.Contains(buckets, 0.005) {
		t.Errorf("buckets %v do not resolve a few milliseconds", buckets[:5])
	}
}
