package controller

import (
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// covers: N4, O3
// The latency tracker reports each EndpointSlice change once, and holds nothing of a slice once
// it is deleted: a tenant creating and deleting slices cannot grow the controller's memory.
func TestLatencyTrackerForgetsDeletedSlices(t *testing.T) {
	var l latencyTracker
	t0 := time.Now().Add(-time.Second)
	slice := func(uid types.UID, at time.Time) discoveryv1.EndpointSlice {
		return discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{UID: uid, Annotations: map[string]string{triggerAnnotation: at.Format(time.RFC3339Nano)}}}
	}
	changed := l.pending([]discoveryv1.EndpointSlice{slice("a", t0), slice("b", t0)})
	if len(changed) != 2 {
		t.Fatalf("pending %v, want both slices", changed)
	}
	if lat := l.observe(changed, time.Now()); len(lat) != 2 {
		t.Fatalf("observed %v, want two latencies", lat)
	}
	if again := l.pending([]discoveryv1.EndpointSlice{slice("a", t0)}); len(again) != 0 {
		t.Fatalf("an observed change is pending again: %v", again)
	}
	l.forget("a")
	l.forget("b")
	if n := len(l.seen); n != 0 {
		t.Fatalf("the tracker holds %d deleted slices", n)
	}
}
