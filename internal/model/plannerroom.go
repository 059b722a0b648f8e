package model

import (
	"k8s.io/apimachinery/pkg/types"
)

// A partial plan of a full gateway (SPEC N4). A full plan serves the Services in budget order
// (what is programmed first, then by claim) within the gateway's bounds; when one does not fit,
// it shares the gateway between the namespaces (fairShares, from each namespace's demand and what
// of it is programmed) and plans every Service again within its namespace's share. A partial
// plan decides the same from what the planner keeps, in O(changed + waiting):
//
//   - it replans, besides the changed Services, those left waiting (room a change releases may
//     now take them in) and those that hold room without being programmed (they do not go before
//     a waiting Service in the budget order, so a full plan may give their room to it);
//   - with the replanned Services' new demands, the kept ones of the others give every
//     namespace's demand: when all of it fits the bounds, a full plan serves every Service;
//   - otherwise the namespaces' shares are those of the new demands (computed again only when
//     one changed: O(namespaces)). When the shares add up to no more than the bounds, no
//     namespace passes its share and a programmed Service fits its own: each namespace is served
//     within its share alone, in budget order, and the Services not replanned (programmed and
//     served) all go before the replanned ones that wait. So the replanned Services, planned
//     after what the others hold in their namespace, get what a full plan gives them.
//
// A full plan is still needed, while a Service waits, when
//
//   - a Service of the gateway keeps flows of draining backends: the bounds drop them first, so
//     what it asks depends on where the whole gateway's order puts it;
//   - a record changed whose owner, by UID, is a kept Service that is not replanned (its labels
//     name another Service): whether that Service is programmed, and with it its place in the
//     budget order, changed unseen;
//   - the shares pass the bounds (what is programmed alone does), a namespace's Services that are
//     not replanned no longer fit its share, or a programmed Service would wait: the reasoning
//     above does not hold.
//
// When no Service waits, a partial plan in which a replanned Service finds no room is not
// decided either: only a full plan knows every Service that could need a share of it.

// room is what a Planner keeps of the gateway's bounds: what its Services ask and hold, per
// namespace, and who waits.
type room struct {
	asked  Load                 // what every kept Service asks (its Demand), served or waiting
	ns     map[string]*nsDemand // per namespace, what its Services ask, and what of it is programmed
	nsHeld map[string]Load      // per namespace, what its served Services hold
	// waiting are the Services left waiting for room (Limited); unsettled the Services that hold
	// room but are not programmed.
	waiting, unsettled map[types.NamespacedName]bool
	draining           int // Services that ask for draining backends' flows
	uids               map[types.UID]types.NamespacedName
	// shares are the shares of the kept demands, for bounds, nil when not known: every namespace's
	// served Services fit them, and they add up to no more than the bounds.
	shares map[string]Load
	bounds Load
}

func (r *room) add(k types.NamespacedName, kp *keptPlan) {
	if r.ns == nil {
		r.ns, r.nsHeld = map[string]*nsDemand{}, map[string]Load{}
		r.waiting, r.unsettled, r.uids = map[types.NamespacedName]bool{}, map[types.NamespacedName]bool{}, map[types.UID]types.NamespacedName{}
	}
	r.uids[kp.uid] = k
	r.asked = r.asked.plus(kp.demand)
	if kp.demand.Identities > 0 {
		d := r.ns[k.Namespace]
		if d == nil {
			d = &nsDemand{}
			r.ns[k.Namespace] = d
		}
		d.add(kp.demand, kp.programmed)
		r.shares = nil
	}
	if kp.load != (Load{}) {
		r.nsHeld[k.Namespace] = r.nsHeld[k.Namespace].plus(kp.load)
	}
	r.flags(k, kp, true)
}

func (r *room) remove(k types.NamespacedName, kp *keptPlan) {
	delete(r.uids, kp.uid)
	r.asked = r.asked.minus(kp.demand)
	if d := r.ns[k.Namespace]; d != nil && kp.demand.Identities > 0 {
		d.add(Load{}.minus(kp.demand), kp.programmed)
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
	r.flags(k, kp, false)
}

// flags counts kp in the waiting, unsettled and draining Services, or stops counting it.
func (r *room) flags(k types.NamespacedName, kp *keptPlan, in bool) {
	set := func(m map[types.NamespacedName]bool, on bool) {
		if on && in {
			m[k] = true
		} else if on {
			delete(m, k)
		}
	}
	set(r.waiting, kp.limited)
	set(r.unsettled, kp.load.Identities > 0 && !kp.programmed)
	switch {
	case kp.draining && in:
		r.draining++
	case kp.draining:
		r.draining--
	}
}

// add counts demand l of a Service in the namespace's demand.
func (d *nsDemand) add(l Load, programmed bool) {
	d.asked = d.asked.plus(l)
	if programmed {
		d.programmed = d.programmed.plus(l)
	}
}

// roomChange is the room of the gateway once some Services are replanned: what all ask, and for
// each namespace the replanned Services are in, its demand and what the others hold there.
type roomChange struct {
	asked    Load
	ns       map[string]nsDemand
	others   map[string]Load
	changed  bool // a namespace's demand is not the kept one
	draining bool // a replanned Service asks for draining backends' flows
}

// change is the room once the Services replanned are planned as plans say (those of gateway gw).
func (r *room) change(kept map[types.NamespacedName]*keptPlan, replanned map[types.NamespacedName]bool, plans []ServicePlan, gw string) roomChange {
	c := roomChange{asked: r.asked, ns: map[string]nsDemand{}, others: map[string]Load{}}
	touch := func(ns string) {
		if _, ok := c.ns[ns]; !ok {
			if d := r.ns[ns]; d != nil {
				c.ns[ns] = *d
			} else {
				c.ns[ns] = nsDemand{}
			}
			c.others[ns] = r.nsHeld[ns]
		}
	}
	for k := range replanned {
		if kp := kept[k]; kp != nil {
			touch(k.Namespace)
			c.asked = c.asked.minus(kp.demand)
			if d := c.ns[k.Namespace]; kp.demand.Identities > 0 {
				d.add(Load{}.minus(kp.demand), kp.programmed)
				c.ns[k.Namespace] = d
			}
			c.others[k.Namespace] = c.others[k.Namespace].minus(kp.load)
		}
	}
	for i := range plans {
		sp := &plans[i]
		if sp.Gateway != gw {
			continue
		}
		touch(sp.Key.Namespace)
		c.asked = c.asked.plus(sp.Demand)
		if d := c.ns[sp.Key.Namespace]; sp.Demand.Identities > 0 {
			d.add(sp.Demand, sp.programmed)
			c.ns[sp.Key.Namespace] = d
		}
		c.draining = c.draining || sp.draining
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

// planWhileWaiting is the partial plan of gateway gw while a Service waits for room: first is
// Compute of snap, whose Services are those replanned, counting only what the others hold
// against the gateway's bounds (their demands are what they ask, whatever room is left, as none
// keeps draining flows). It returns the plan and the shares it was made with (nil: the gateway
// is not full), or false when only a full plan decides (see above).
func (p *Planner) planWhileWaiting(sc Scope, snap Snapshot, first Plan, replanned map[types.NamespacedName]bool, gates Gates, gw string) (Plan, map[string]Load, bool) {
	for _, uid := range sc.Owners {
		if k, ok := p.room.uids[uid]; ok && !replanned[k] {
			return Plan{}, nil, false
		}
	}
	c := p.room.change(p.services, replanned, first.Services, gw)
	if c.draining || p.room.draining > 0 {
		return Plan{}, nil, false
	}
	bounds := gates.Bounds()
	if c.asked.fits(bounds) { // room for every Service: a full plan shares nothing
		return first, nil, !anyLimited(first, gw)
	}
	shares, ok := p.room.sharesFor(c, bounds)
	if !ok {
		return Plan{}, nil, false
	}
	snap.NamespaceLoad = map[string]map[string]Load{gw: c.others}
	snap.Shares = map[string]map[string]Load{gw: shares}
	plan := Compute(snap, gates)
	for i := range plan.Services {
		if sp := &plan.Services[i]; sp.Gateway == gw && sp.Limited && sp.programmed {
			return Plan{}, nil, false
		}
	}
	return plan, shares, true
}

// anyLimited reports whether a Service of gateway gw in plan waits for room.
func anyLimited(plan Plan, gw string) bool {
	for i := range plan.Services {
		if plan.Services[i].Limited && plan.Services[i].Gateway == gw {
			return true
		}
	}
	return false
}
