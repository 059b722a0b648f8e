package readiness

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// covers: O3
// Readiness goes stale as kube-proxy's healthz does: only while a gateway has work that no pass
// applied, counted from when that work arrived; a gateway where nothing changed for hours is
// fresh, a failed pass keeps the work waiting, and work that arrives during a pass is not
// applied by it.
func TestSyncHealthStaleOnlyWithPendingWork(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	h := New(5*time.Minute, clk)
	shown := map[string]time.Time{}
	h.Gauge = func(gw string, since time.Time) { shown[gw] = since }
	step := func(d time.Duration) { clk.SetTime(clk.Now().Add(d)) }
	wantStale := func(want ...string) {
		t.Helper()
		got := h.Stale()
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("at %s stale %v, want %v", clk.Now().Format(time.TimeOnly), got, want)
		}
		err := h.Check(httptest.NewRequest("GET", "/readyz", nil))
		if (err != nil) != (len(want) > 0) {
			t.Fatalf("check: %v with stale %v", err, want)
		}
		for _, gw := range want {
			if !strings.Contains(err.Error(), gw) {
				t.Fatalf("check error %q does not name %s", err, gw)
			}
		}
	}

	// A synced gateway where nothing changes is never stale.
	h.Queued("quiet")
	h.Started("quiet")
	h.Ended("quiet", true)
	step(10 * time.Hour)
	wantStale()
	if !shown["quiet"].IsZero() {
		t.Fatalf("quiet gateway shows pending since %s", shown["quiet"])
	}

	// Work that waits: fresh up to the bound, stale past it, fresh again once a pass applies it.
	h.Queued("busy")
	queuedAt := clk.Now()
	if !shown["busy"].Equal(queuedAt) {
		t.Fatalf("pending since %s shown, want %s", shown["busy"], queuedAt)
	}
	step(time.Minute)
	h.Queued("busy") // more work: the oldest counts
	step(4 * time.Minute)
	wantStale()
	step(time.Second)
	wantStale("busy")
	h.Started("busy")
	step(time.Second)
	h.Ended("busy", false) // a failed pass applied nothing
	wantStale("busy")
	if !shown["busy"].Equal(queuedAt) {
		t.Fatalf("after a failed pass pending since %s shown, want %s", shown["busy"], queuedAt)
	}
	h.Started("busy")
	step(time.Second)
	h.Ended("busy", true)
	wantStale()
	if !shown["busy"].IsZero() {
		t.Fatalf("applied gateway shows pending since %s", shown["busy"])
	}

	// Work that arrives while a pass runs waits for the next pass, counted from its arrival.
	h.Queued("racy")
	h.Started("racy")
	step(time.Second)
	h.Queued("racy")
	arrived := clk.Now()
	step(time.Second)
	h.Ended("racy", true)
	if !shown["racy"].Equal(arrived) {
		t.Fatalf("work queued during a pass: pending since %s shown, want %s", shown["racy"], arrived)
	}
	step(5*time.Minute - time.Second)
	wantStale()
	step(2 * time.Second)
	wantStale("racy")

	// A pass the queue scheduled without new work (a retry) that fails leaves its work pending.
	h.Forget("racy")
	h.Started("retry")
	startedAt := clk.Now()
	h.Ended("retry", false)
	if !shown["retry"].Equal(startedAt) {
		t.Fatalf("failed retry: pending since %s shown, want %s", shown["retry"], startedAt)
	}
	step(6 * time.Minute)
	wantStale("retry")

	// A gateway forgotten during its pass stays forgotten.
	h.Started("retry")
	h.Forget("retry")
	h.Ended("retry", true)
	wantStale()
	if _, kept := h.gws["retry"]; kept {
		t.Fatal("a forgotten gateway came back when its pass ended")
	}

	// Off: never stale.
	off := New(-1, clk)
	off.Queued("gw")
	step(time.Hour)
	if err := off.Check(nil); err != nil {
		t.Fatalf("check with staleness off: %v", err)
	}
}

// covers: O3
// The readiness message names at most a few gateways: it is one log line (the probe's answer
// withholds it).
func TestSyncHealthCheckIsBounded(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Now())
	h := New(time.Minute, clk)
	for _, gw := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		h.Queued(gw)
	}
	clk.SetTime(clk.Now().Add(2 * time.Minute))
	err := h.Check(nil)
	if err == nil || !strings.Contains(err.Error(), "and 2 more") || strings.Contains(err.Error(), `"f"`) {
		t.Fatalf("check: %v, want five gateways named and 2 more", err)
	}
}

type fakeCache struct {
	mu     sync.Mutex
	synced bool
	calls  int
}

func (c *fakeCache) WaitForCacheSync(ctx context.Context) bool {
	c.mu.Lock()
	c.calls++
	synced := c.synced
	c.mu.Unlock()
	if !synced {
		<-ctx.Done() // as the informers do: wait until synced or the probe's deadline
	}
	return synced
}

// covers: O3
// Readiness fails until the manager's caches have synced, and once they have it asks no more.
func TestCacheSyncedCheck(t *testing.T) {
	c := &fakeCache{}
	check := CacheSynced(c)
	req := httptest.NewRequest("GET", "/readyz", nil)
	if err := check(req); err == nil {
		t.Fatal("ready before the caches synced")
	}
	c.mu.Lock()
	c.synced = true
	c.mu.Unlock()
	for range 3 {
		if err := check(req); err != nil {
			t.Fatalf("not ready with synced caches: %v", err)
		}
	}
	if c.calls != 2 {
		t.Fatalf("the caches were asked %d times, want 2 (synced is remembered)", c.calls)
	}
}

// covers: O3
// The gateway work queue tells readiness of new work (handlers' adds, with or without priority)
// and not of what a pass scheduled for later (throttle, quarantine retry) or a retry after an
// error (that pass kept its work pending).
func TestNoticingQueueNotesNewWorkOnly(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Now())
	h := New(time.Minute, clk)
	q := NewQueue("test", workqueue.DefaultTypedItemBasedRateLimiter[reconcile.Request](), h, logr.Discard())
	defer q.ShutDown()
	req := func(gw string) reconcile.Request {
		return reconcile.Request{NamespacedName: types.NamespacedName{Name: gw}}
	}
	var _ priorityqueue.PriorityQueue[reconcile.Request] = q // handlers keep their priorities

	q.Add(req("added"))
	q.AddWithOpts(priorityqueue.AddOpts{Priority: new(-100)}, req("low"), req("low2"))
	q.AddAfter(req("later"), time.Hour)
	q.AddWithOpts(priorityqueue.AddOpts{After: time.Hour}, req("later2"))
	q.AddWithOpts(priorityqueue.AddOpts{RateLimited: true}, req("retried"))
	q.AddRateLimited(req("retried2"))
	clk.SetTime(clk.Now().Add(2 * time.Minute))
	if got := strings.Join(h.Stale(), ","); got != "added,low,low2" {
		t.Fatalf("pending work of %s, want added,low,low2", got)
	}
}
