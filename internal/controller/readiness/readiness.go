// Package readiness is the controller's /readyz: not ready until the informer caches synced, nor
// while a gateway's changes wait unapplied longer than a bound (kube-proxy's healthz). The
// gateway work queue (NewQueue) tells it when work arrives; each sync pass, when it starts and
// how it ended.
package readiness

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// DefaultSyncStaleAfter is --sync-stale-after's default: far above a healthy sync (milliseconds,
// SPEC P3) and the agents' apply timeout with its retries, so that only a gateway whose work has
// not been applied for minutes makes the controller unready.
const DefaultSyncStaleAfter = 5 * time.Minute

// Tracker knows, per gateway, since when work has waited that no sync pass has applied. As
// kube-proxy's healthz, a gateway is stale only while it has such work and it has waited longer
// than staleAfter: a gateway where nothing changed for hours is not stale (there are no periodic
// syncs to wait for).
//
// Work arrives through the gateway work queue (every event handler and retry adds to it); a pass
// that ends without error applied what was there when it started.
type Tracker struct {
	staleAfter time.Duration // <= 0: never stale
	clock      clock.PassiveClock
	// Gauge, when set, shows each gateway's pending time (vpcgw_gateway_pending_since_timestamp_seconds).
	Gauge func(gw string, since time.Time)

	mu  sync.Mutex
	gws map[string]*pendingWork
}

type pendingWork struct {
	since   time.Time // oldest work not applied; zero: none
	syncing bool
	// during is when work first arrived while a pass runs: that pass may not have seen it.
	during time.Time
}

// New is a Tracker that calls a gateway stale once its work waited longer than staleAfter (0 or
// less: never), by clock c.
func New(staleAfter time.Duration, c clock.PassiveClock) *Tracker {
	return &Tracker{staleAfter: staleAfter, clock: c, gws: map[string]*pendingWork{}}
}

func (h *Tracker) show(gw string, p *pendingWork) {
	if h.Gauge != nil {
		h.Gauge(gw, p.since)
	}
}

// Queued records that work for gateway gw arrived now.
func (h *Tracker) Queued(gw string) {
	now := h.clock.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.gws[gw]
	if p == nil {
		p = &pendingWork{}
		h.gws[gw] = p
	}
	if p.syncing && p.during.IsZero() {
		p.during = now
	}
	if p.since.IsZero() {
		p.since = now
		h.show(gw, p)
	}
}

// Started records that a sync pass of gw starts.
func (h *Tracker) Started(gw string) {
	now := h.clock.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.gws[gw]
	if p == nil {
		// A pass without queued work (a retry the queue scheduled for later): it is work too.
		p = &pendingWork{since: now}
		h.gws[gw] = p
		h.show(gw, p)
	}
	p.syncing, p.during = true, time.Time{}
}

// Ended records how a sync pass of gw ended: without error it applied what waited when it
// started, and what arrived meanwhile still waits. A gateway forgotten meanwhile stays forgotten.
func (h *Tracker) Ended(gw string, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.gws[gw]
	if p == nil {
		return
	}
	if ok {
		p.since = p.during
		h.show(gw, p)
	}
	p.syncing, p.during = false, time.Time{}
}

// Forget drops a gateway that is gone (nothing keyed by a tenant-chosen name outlives it, SPEC N4).
func (h *Tracker) Forget(gw string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.gws, gw)
}

// Stale lists the gateways whose oldest unapplied work waited longer than staleAfter, sorted.
func (h *Tracker) Stale() []string {
	if h.staleAfter <= 0 {
		return nil
	}
	now := h.clock.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for gw, p := range h.gws {
		if !p.since.IsZero() && now.Sub(p.since) > h.staleAfter {
			out = append(out, gw)
		}
	}
	slices.Sort(out)
	return out
}

// Check is the readiness check of the gateway syncs. The probe's answer withholds the reason
// (controller-runtime's healthz); the error, logged by it, names the gateways.
func (h *Tracker) Check(*http.Request) error {
	gws := h.Stale()
	if len(gws) == 0 {
		return nil
	}
	const shown = 5 // bounded: a log line, not a listing
	more := ""
	if len(gws) > shown {
		more = fmt.Sprintf(" and %d more", len(gws)-shown)
		gws = gws[:shown]
	}
	return fmt.Errorf("changes of gateways %q%s have waited longer than %s without a successful sync", gws, more, h.staleAfter)
}

// cacheSyncWait bounds one readiness probe's wait for the caches: probes time out after 1 s.
const cacheSyncWait = 200 * time.Millisecond

// CacheSynced is the readiness check of the manager's caches: not ready until every informer
// has synced. Once they have, they stay synced (informers never unsync), so that is remembered.
func CacheSynced(c interface{ WaitForCacheSync(context.Context) bool }) healthz.Checker {
	var synced atomic.Bool
	return func(req *http.Request) error {
		if synced.Load() {
			return nil
		}
		ctx, cancel := context.WithTimeout(req.Context(), cacheSyncWait)
		defer cancel()
		if !c.WaitForCacheSync(ctx) {
			return errors.New("the informer caches have not synced yet")
		}
		synced.Store(true)
		return nil
	}
}

// Queue is the gateway work queue that tells Tracker when work arrives. Items to be
// handed out later (a pass's RequeueAfter: the throttle, the quarantine retry) are not new work:
// the throttled work was noted when it arrived, and a pass that errs keeps its work pending.
type Queue struct {
	priorityqueue.PriorityQueue[reconcile.Request]
	health *Tracker
}

// NewQueue is a priority queue named name, rate limited by rl, that tells h of new work.
func NewQueue(name string, rl workqueue.TypedRateLimiter[reconcile.Request], h *Tracker, log logr.Logger) *Queue {
	return &Queue{health: h, PriorityQueue: priorityqueue.New(name, func(o *priorityqueue.Opts[reconcile.Request]) {
		o.Log = log.WithValues("controller", name)
		o.RateLimiter = rl
	})}
}

// Add notes r's gateway as having work, then queues r.
func (q *Queue) Add(r reconcile.Request) {
	q.health.Queued(r.Name)
	q.PriorityQueue.Add(r)
}

// AddWithOpts notes the gateways of rs as having work unless they are handed out later, then
// queues them.
func (q *Queue) AddWithOpts(o priorityqueue.AddOpts, rs ...reconcile.Request) {
	if o.After <= 0 && !o.RateLimited {
		for _, r := range rs {
			q.health.Queued(r.Name)
		}
	}
	q.PriorityQueue.AddWithOpts(o, rs...)
}
