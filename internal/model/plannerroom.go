package model

import (
	"slices"

	"k8s.io/apimachinery/pkg/types"
)

// A partial plan of a full gateway (SPEC N4). A full plan serves the Services in budget order
// (what is programmed first, then by claim) within the gateway's bounds, each with its draining
// backends' flows if they fit, else without; when a Service does not fit at all, it shares the
// gateway between the namespaces (fairShares, from what each namespace's Services asked in that
// first pass and what of it is programmed) and plans every Service again within its namespace's
// share. While a Service waits for room or for its draining flows, a partial plan decides the
// same from what the planner keeps, in O(changed + unsettled):
//
//   - besides the changed Services it replans the unsettled ones: those left waiting and those
//     served without the draining flows they ask for (room a change releases may go to them),
//     and those that hold room without being programmed (they come after a waiting Service in
//     the budget order, so a full plan may give their room to it). Every Service it does not
//     replan is programmed and holds all it asks;
//   - planned after what those others hold, the replanned Services get what a full plan's first
//     pass gives them as long as every programmed one gets all it asks: the programmed Services
//     then all fit, whatever their order. When none of them waits, that is the full plan;
//   - otherwise each namespace's demand is the kept one with the replanned Services' part
//     planned again, and the shares are those of these demands (computed again only when one
//     changed: O(namespaces)). When the shares add up to no more than the bounds and the others
//     fit their namespace's share, each namespace is served within its share alone, in budget
//     order, and as long as every programmed Service gets all it asks, the others all go before
//     any replanned Service that does not: planned after what the others hold in their
//     namespace, the replanned Services get what a full plan gives them.
//
// A full plan is still needed, while a Service waits, when
//
//   - a record changed whose owner, by UID, is a kept Service that is not replanned (its labels
//     name another Service): whether that Service is programmed, and with it its place in the
//     budget order, changed unseen (the reason every such change was once planned in full);
//   - a programmed Service would not get all it asks, the shares pass the bounds (what is
//     programmed alone does), or a namespace's Services that are not replanned no longer fit its
//     share: the reasoning above does not hold.
//
// When every Service holds all it asks (settled), a partial plan is a full one when the
// replanned Services do too; when one of them does not (it finds no room, or not for its
// draining flows), the order decides, and only a full plan knows every Service before it.

// room is what a Planner keeps of the gateway's bounds: what its Services ask and hold, per
// namespace, and who waits.
type room struct {
	ns     map[string]*nsDemand // per namespace, what its Services ask (keptPlan.asked), and what of it is programmed
	nsHeld map[string]Load      // per namespace, what its served Services hold
	// waiting are the Services left waiting for room (Limited), squeezed those served without
	// the draining flows they ask for, unprogrammed those that hold room without being
	// programmed.
	waiting, squeezed, unprogrammed map[types.NamespacedName]bool
	uids                            map[types.UID]types.NamespacedName
	// shares are the shares of the kept demands with bounds, nil when not known. Every
	// namespace's served Services fit them, and they add up to no more than the bounds.
	shares map[string]Load
	bounds Load
}

func (r *room) add(k types.NamespacedName, kp *keptPlan) {
	if r.ns == nil {
		r.ns, r.nsHeld = map[string]*nsDemand{}, map[string]Load{}
		r.waiting, r.squeezed, r.unprogrammed = map[types.NamespacedName]bool{}, map[types.NamespacedName]bool{}, map[types.NamespacedName]bool{}
		r.uids = map[types.UID]types.NamespacedName{}
	}
	r.uids[kp.uid] = k
	if kp.asked.Identities > 0 {
		d := r.ns[k.Namespace]
		if d == nil {
			d = &nsDemand{}
			r.ns[k.Namespace] = d
		}
		d.add(kp.asked, kp.programmed)
		r.shares = nil
	}
	if kp.load != (Load{}) {
		r.nsHeld[k.Namespace] = r.nsHeld[k.Namespace].plus(kp.load)
	}
	if kp.limited {
		r.waiting[k] = true
	}
	if kp.load.Identities > 0 && kp.load != kp.asks {
		r.squeezed[k] = true
	}
	if kp.load.Identities > 0 && !kp.programmed {
		r.unprogrammed[k] = true
	}
}

func (r *room) remove(k types.NamespacedName, kp *keptPlan) {
	delete(r.uids, kp.uid)
	if d := r.ns[k.Namespace]; d != nil && kp.asked.Identities > 0 {
		d.add(Load{}.minus(kp.asked), kp.programmed)
		if *d == (nsDemand{}) {
			delete(r.ns, k.Namespace) // nothing keyed by a tenant's name outlives its objects
		}
		r.shares = nil
	}
	if kp.load != (Load{}) {
		if r.nsHeld[k.Namespace] = r.nsHeld[k.Namespace].minus(kp.load); r.nsHeld[k.Namespace] == (Load{}) {
			delete(r.nsHeld, k.Namespace)
		}
	}
	delete(r.waiting, k)
	delete(r.squeezed, k)
	delete(r.unprogrammed, k)
}

// settled reports whether no Service waits for room or for its draining flows: then every
// Service holds all it asks, and a partial plan in which the replanned ones do too is a full one.
func (r *room) settled() bool { return len(r.waiting) == 0 && len(r.squeezed) == 0 }

// unsettled are the Services a partial plan replans while the room is not settled (above).
func (r *room) unsettled() []map[types.NamespacedName]bool {
	if r.settled() {
		return nil
	}
	return []map[types.NamespacedName]bool{r.waiting, r.squeezed, r.unprogrammed}
}

// add counts demand l of a Service in the namespace's demand.
func (d *nsDemand) add(l Load, programmed bool) {
	d.asked = d.asked.plus(l)
	if programmed {
		d.programmed = d.programmed.plus(l)
	}
}

// roomChange is what replanning some Services changes of the room: for each namespace the
// replanned Services of the gateway are in, its demand and what the others hold there.
type roomChange struct {
	ns      map[string]nsDemand
	others  map[string]Load
	changed bool // a namespace's demand is not the kept one
}

// change is the room once the Services replanned are planned as plans say (those of gateway gw),
// each asking what its Demand says.
func (r *room) change(kept map[types.NamespacedName]*keptPlan, replanned map[types.NamespacedName]bool, plans []ServicePlan, gw string) roomChange {
	c := roomChange{ns: map[string]nsDemand{}, others: map[string]Load{}}
	touch := func(ns string) nsDemand {
		if d, ok := c.ns[ns]; ok {
			return d
		}
		var d nsDemand
		if old := r.ns[ns]; old != nil {
			d = *old
		}
		c.ns[ns], c.others[ns] = d, r.nsHeld[ns]
		return d
	}
	for k := range replanned {
		if kp := kept[k]; kp != nil {
			d := touch(k.Namespace)
			if kp.asked.Identities > 0 {
				d.add(Load{}.minus(kp.asked), kp.programmed)
				c.ns[k.Namespace] = d
			}
			c.others[k.Namespace] = c.others[k.Namespace].minus(kp.load)
		}
	}
	for i := range plans {
		if sp := &plans[i]; sp.Gateway == gw {
			d := touch(sp.Key.Namespace)
			if sp.Demand.Identities > 0 {
				d.add(sp.Demand, sp.programmed)
				c.ns[sp.Key.Namespace] = d
			}
		}
	}
	for ns, d := range c.ns {
		if old := r.ns[ns]; (old == nil && d != nsDemand{}) || (old != nil && *old != d) {
			c.changed = true
		}
	}
	return c
}

// sharesFor are the namespaces' shares of the gateway once c is planned, and whether the
// reasoning of a partial plan holds with them: they add up to no more than bounds, and what the
// Services that are not replanned hold in each namespace fits its share. O(namespaces) when a
// namespace's demand changed, else O(the namespaces replanned).
func (r *room) sharesFor(c roomChange, bounds Load) (map[string]Load, bool) {
	if r.shares != nil && !c.changed && r.bounds == bounds {
		for ns, held := range c.others {
			if s, ok := r.shares[ns]; ok && !held.fits(s) {
				return nil, false
			}
		}
		return r.shares, true
	}
	dem := make(map[string]*nsDemand, len(r.ns)+len(c.ns))
	for ns, d := range r.ns {
		dem[ns] = d
	}
	for ns, d := range c.ns {
		if d == (nsDemand{}) {
			delete(dem, ns)
		} else {
			dem[ns] = &d
		}
	}
	shares := fairShares(dem, bounds)
	var sum Load
	for ns, s := range shares {
		sum = sum.plus(s)
		held, touched := c.others[ns]
		if !touched {
			held = r.nsHeld[ns]
		}
		if !held.fits(s) {
			return nil, false
		}
	}
	return shares, sum.fits(bounds)
}

// planUnsettled is the partial plan of gateway gw while a Service waits for room: first is
// Compute of snap, whose Services are those replanned, counting only what the others hold
// against the gateway's bounds. It returns the plan, the shares it was made with (nil: the
// gateway is not full) and what each of its Services asked of the first pass, or false when only
// a full plan decides (see above).
func (p *Planner) planUnsettled(sc Scope, snap Snapshot, first Plan, replanned map[types.NamespacedName]bool, gates Gates, gw string) (Plan, map[string]Load, map[types.NamespacedName]Load, bool) {
	for _, uid := range sc.Owners {
		if k, ok := p.room.uids[uid]; ok && !replanned[k] {
			return Plan{}, nil, nil, false
		}
	}
	if !programmedGetAll(first, gw) {
		return Plan{}, nil, nil, false
	}
	if !anyLimited(first, gw) { // a full plan's first pass serves every Service: no shares
		return first, nil, nil, true
	}
	c := p.room.change(p.services, replanned, first.Services, gw)
	shares, ok := p.room.sharesFor(c, gates.Bounds())
	if !ok {
		return Plan{}, nil, nil, false
	}
	snap.NamespaceLoad = map[string]map[string]Load{gw: c.others}
	snap.Shares = map[string]map[string]Load{gw: shares}
	plan := Compute(snap, gates)
	if !programmedGetAll(plan, gw) {
		return Plan{}, nil, nil, false
	}
	asked := make(map[types.NamespacedName]Load, len(first.Services))
	for i := range first.Services {
		asked[first.Services[i].Key] = first.Services[i].Demand
	}
	return plan, shares, asked, true
}

// programmedGetAll reports whether every programmed Service of gateway gw in plan holds all it
// asks.
func programmedGetAll(plan Plan, gw string) bool {
	return !slices.ContainsFunc(plan.Services, func(sp ServicePlan) bool {
		return sp.Gateway == gw && sp.programmed && !sp.getsAll()
	})
}

// allGetAll reports whether every Service of gateway gw in plan holds all it asks.
func allGetAll(plan Plan, gw string) bool {
	return !slices.ContainsFunc(plan.Services, func(sp ServicePlan) bool { return sp.Gateway == gw && !sp.getsAll() })
}

// anyLimited reports whether a Service of gateway gw in plan waits for room.
func anyLimited(plan Plan, gw string) bool {
	return slices.ContainsFunc(plan.Services, func(sp ServicePlan) bool { return sp.Gateway == gw && sp.Limited })
}

// getsAll reports whether the Service holds all it asks of its gateway's bounds.
func (sp *ServicePlan) getsAll() bool { return !sp.Limited && sp.Demand == sp.asks }
