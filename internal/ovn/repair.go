package ovn

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ovn-kubernetes/libovsdb/cache"
	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/vpcgw/vpcgw/internal/ovn/nbdb"
)

// Repair timing. A repair waits until the events of one burst are in (kube-ovn deletes policies
// one transaction each, a few milliseconds apart), at most repairMaxWait after the first. A
// gateway repaired again within repairQuiet of its previous repair waits twice as long as the
// last time (repairMinBackoff up to repairMaxBackoff): something keeps undoing the routes, and
// the writer must not fight it in a busy loop.
const (
	repairDebounce   = 20 * time.Millisecond
	repairMaxWait    = 200 * time.Millisecond
	repairMinBackoff = 100 * time.Millisecond
	repairMaxBackoff = 30 * time.Second
	repairQuiet      = 30 * time.Second
	repairTimeout    = 10 * time.Second
)

// repairsTotal counts repairs that changed the NB database, on the controller's /metrics.
var repairsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "vpcgw_vip_route_repairs_total",
	Help: "VIP policies re-applied because someone else deleted or changed them in the OVN NB database.",
}, []string{"gateway"})

func init() { ctrlmetrics.Registry.MustRegister(repairsTotal) }

// Collectors are the metrics this package registers (the controller lists them, SPEC O3).
func Collectors() []prometheus.Collector { return []prometheus.Collector{repairsTotal} }

// repairer is the writer's memory of each gateway's last desired routes and its pending repairs.
type repairer struct {
	mu      sync.Mutex
	last    map[string]desired      // gateway -> routes of its last Sync (only gateways with any)
	pending map[string]*pendingFix  // gateway -> repair to run
	backoff map[string]*backoffInfo // gateway -> repair history
	kick    chan struct{}           // wakes repairLoop (buffered, never blocks the sender)
	// Router add events: those of the writer's initial load are no reason to check anything.
	// routersAdded holds the routers whose add was seen, initialLoad those of the initial load
	// whose add is still to come (libovsdb delivers events after Monitor returns).
	routersAdded, initialLoad map[string]bool
	count                     atomic.Uint64 // repairs that changed something, for tests
}

type pendingFix struct {
	gateway     string
	reason      string
	first, last time.Time // events
}

type backoffInfo struct {
	lastRepair time.Time
	delay      time.Duration
	notBefore  time.Time
}

func (r *repairer) init() {
	r.last = map[string]desired{}
	r.pending = map[string]*pendingFix{}
	r.backoff = map[string]*backoffInfo{}
	r.kick = make(chan struct{}, 1)
	r.routersAdded = map[string]bool{}
	r.initialLoad = map[string]bool{}
}

// loaded records the routers of the initial load (in the cache when Monitor returned).
func (r *repairer) loaded(routerUUIDs []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, u := range routerUUIDs {
		if !r.routersAdded[u] {
			r.initialLoad[u] = true
		}
	}
}

// setLast records d as the gateway's routes to restore.
func (r *repairer) setLast(d desired) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d.wantAny() {
		r.last[d.gateway] = d
	} else {
		delete(r.last, d.gateway)
		delete(r.pending, d.gateway)
	}
}

// note schedules a repair of gw when the event is about a policy gw still wants.
func (r *repairer) note(gw, vip string, still func(desired) bool, reason string) {
	r.mu.Lock()
	d, ok := r.last[gw]
	if !ok || !d.wants(vip) || still(d) {
		r.mu.Unlock()
		return
	}
	now := time.Now()
	if p := r.pending[gw]; p != nil {
		p.last = now
	} else {
		r.pending[gw] = &pendingFix{gateway: gw, reason: reason, first: now, last: now}
	}
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// eventHandler watches the writer's policies in the libovsdb cache. It runs on libovsdb's event
// goroutine, so it only records what to repair.
func (w *Writer) eventHandler() cache.EventHandler {
	policy := func(table string, m model.Model) *nbdb.LogicalRouterPolicy {
		if table != nbdb.LogicalRouterPolicyTable {
			return nil
		}
		p, _ := m.(*nbdb.LogicalRouterPolicy)
		if p == nil || !isVIPPolicy(p) {
			return nil
		}
		return p
	}
	return &cache.EventHandlerFuncs{
		AddFunc: func(table string, m model.Model) {
			if lr, _ := m.(*nbdb.LogicalRouter); table == nbdb.LogicalRouterTable && lr != nil {
				w.rep.routerAdded(lr.UUID, lr.Name)
			}
		},
		DeleteFunc: func(table string, m model.Model) {
			if lr, _ := m.(*nbdb.LogicalRouter); table == nbdb.LogicalRouterTable && lr != nil {
				w.rep.mu.Lock()
				delete(w.rep.routersAdded, lr.UUID)
				delete(w.rep.initialLoad, lr.UUID)
				w.rep.mu.Unlock()
			}
			if p := policy(table, m); p != nil {
				w.rep.note(p.ExternalIDs[ExternalIDGateway], matchVIP(p.Match),
					func(desired) bool { return false }, "policy "+p.UUID+" deleted")
			}
		},
		UpdateFunc: func(table string, old, cur model.Model) {
			if p := policy(table, old); p != nil {
				gw, vip := p.ExternalIDs[ExternalIDGateway], matchVIP(p.Match)
				n, _ := cur.(*nbdb.LogicalRouterPolicy)
				w.rep.note(gw, vip, func(d desired) bool {
					return n != nil && isGatewayPolicy(n, gw) && policyOK(n, vip, d)
				}, "policy "+p.UUID+" changed")
			}
		},
	}
}

// repairLoop runs the pending repairs when they are due, one at a time, until Close.
func (w *Writer) repairLoop() {
	defer w.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		var due <-chan time.Time
		if wait, ok := w.rep.nextDue(time.Now()); ok {
			t.Reset(wait)
			due = t.C
		}
		select {
		case <-w.stop:
			return
		case <-w.rep.kick:
			t.Stop()
			continue
		case <-due:
		}
		for _, f := range w.rep.takeDue(time.Now()) {
			w.repair(f)
		}
	}
}

// when is the time a pending repair is due.
func (r *repairer) when(gw string, p *pendingFix) time.Time {
	at := p.last.Add(repairDebounce)
	if limit := p.first.Add(repairMaxWait); limit.Before(at) {
		at = limit
	}
	if b := r.backoff[gw]; b != nil && b.notBefore.After(at) {
		at = b.notBefore
	}
	return at
}

// nextDue says how long until the first pending repair is due (false: none pending).
func (r *repairer) nextDue(now time.Time) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var first time.Time
	for gw, p := range r.pending {
		if at := r.when(gw, p); first.IsZero() || at.Before(first) {
			first = at
		}
	}
	if first.IsZero() {
		return 0, false
	}
	return max(first.Sub(now), 0), true
}

// takeDue removes and returns the repairs that are due.
func (r *repairer) takeDue(now time.Time) []*pendingFix {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*pendingFix
	for _, gw := range slices.Sorted(maps.Keys(r.pending)) {
		if p := r.pending[gw]; !r.when(gw, p).After(now) {
			out = append(out, p)
			delete(r.pending, gw)
		}
	}
	return out
}

// backOff records a repair (or a failed one) of gw and returns the delay before the next may run.
func (r *repairer) backOff(gw string, now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.backoff[gw]
	if b == nil {
		b = &backoffInfo{}
		r.backoff[gw] = b
	}
	if !b.lastRepair.IsZero() && now.Sub(b.lastRepair) < repairQuiet {
		b.delay = min(max(2*b.delay, repairMinBackoff), repairMaxBackoff)
	} else {
		b.delay = 0
	}
	b.lastRepair = now
	b.notBefore = now.Add(b.delay)
	return b.delay
}

// routerAdded schedules a check of every gateway with routes on router: it appeared in the cache,
// either created again or reloaded after a reconnect (a reload brings no delete events for what
// changed while the writer was away).
func (r *repairer) routerAdded(uuid, router string) {
	r.mu.Lock()
	r.routersAdded[uuid] = true
	if r.initialLoad[uuid] {
		delete(r.initialLoad, uuid)
		r.mu.Unlock()
		return
	}
	now := time.Now()
	n := 0
	for gw, d := range r.last {
		if d.router == router && r.pending[gw] == nil {
			r.pending[gw] = &pendingFix{gateway: gw, reason: "router " + router + " (re)loaded", first: now, last: now}
			n++
		}
	}
	r.mu.Unlock()
	if n > 0 {
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
}

// retry schedules gw again (after a failed repair).
func (r *repairer) retry(gw, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.last[gw]; !ok {
		return
	}
	now := time.Now()
	if r.pending[gw] == nil {
		r.pending[gw] = &pendingFix{gateway: gw, reason: reason, first: now, last: now}
	}
}

// repair re-applies the gateway's last routes.
func (w *Writer) repair(f *pendingFix) {
	gw := f.gateway
	ctx, cancel := context.WithTimeout(w.life, repairTimeout)
	defer cancel()
	w.mu.Lock()
	// Read under the sync lock: a Sync that ran meanwhile may have changed the routes.
	w.rep.mu.Lock()
	d, ok := w.rep.last[gw]
	w.rep.mu.Unlock()
	var changes string
	var err error
	if ok {
		changes, err = w.converge(ctx, d)
	}
	w.mu.Unlock()
	switch {
	case !ok:
		return // the gateway's routes were removed meanwhile: nothing to restore
	case errors.Is(err, ErrRouterNotFound):
		// The VPC is gone; the controller's next Sync decides what to do.
		w.log.Info("not repairing VIP routes: the router is gone", "gateway", gw, "router", d.router, "cause", f.reason)
		return
	case err != nil:
		delay := w.rep.backOff(gw, time.Now())
		w.log.Error(err, "repairing VIP routes failed, retrying", "gateway", gw, "router", d.router,
			"cause", f.reason, "retryIn", delay.String())
		w.rep.retry(gw, f.reason)
		return
	case changes == "":
		return // someone (a concurrent Sync, another writer) already put them back
	}
	w.rep.count.Add(1)
	repairsTotal.WithLabelValues(gw).Inc()
	delay := w.rep.backOff(gw, time.Now())
	w.log.Info("VIP routes repaired after someone else removed or changed them", "gateway", gw, "router", d.router,
		"cause", f.reason, "changes", changes, "sinceEvent", time.Since(f.first).String(), "nextRepairNotBefore", delay.String())
}
