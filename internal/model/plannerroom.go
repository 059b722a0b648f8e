package model

import (
	"slices"

	"k8s.io/apimachinery/pkg/types"
)

// A partial plan while a Service waits for room (SPEC N4, issue 34). A full plan serves a
// gateway's Services in budget order: the programmed ones first, held only to the gateway's
// bounds, then the others by claim, each also held to its namespace's share (bounds.go), every
// Service with its draining backends' flows if they fit, else without. A first pass finds who
// asks for room; when a Service waits, or a namespace passes its share, a second pass plans
// every Service again with the shares.
//
// While a Service waits for room, or for its draining flows, a partial plan replans, besides the
// changed Services, every Service whose room a change elsewhere may change: those left waiting
// and those served without the draining flows they ask for (room a change releases may go to
// them), and those that hold room without being programmed (a waiting Service may come before
// them in the budget order). Every Service it does not replan is then programmed, and holds all
// it asks. Its Services are planned after what the others hold, in all and per namespace (what
// the planner keeps), in budget order, through both passes. As long as every programmed Service
// it replans gets all it asks, the programmed Services all fit the bounds whatever their order:
// each Service it replans then finds, in each pass, what it would find in a full plan's order
// (every programmed Service before it, and the others of it that come before it), the namespaces
// that ask for room are the full plan's, and so are the shares and whether a second pass is
// needed. So the plan is the full plan's, in O(changed + waiting + unprogrammed) (the Services
// that hold room without being programmed are those served since their records were last
// written: few, but in the seed's ledger form also those without backends, which have none).
//
// A full plan is still made, while a Service waits, when
//
//   - a programmed Service it replans would not get all it asks: who fits then depends on the
//     order of every programmed Service;
//   - a record changed whose owner, by UID, is a kept Service that is not replanned (its labels
//     name another Service): whether that Service is programmed, and with it its place in the
//     budget order and its share, changed unseen. This is what once planned every change to a
//     record in full while a Service waited; its owner is replanned otherwise.
//
// When no Service waits, a partial plan is a full one when each Service it replans gets all it
// asks and stays within its namespace's share, and the shares are the same (Planner.decides):
// a Service it replans that does not get all it asks finds a gateway that fills up, and who
// fits then depends on the order of Services it does not replan.

// room is who waits for room, and whose room a change elsewhere may change, of the kept
// Services.
type room struct {
	// waiting are the Services left waiting for room (Limited), squeezed those served without
	// the draining flows they ask for, unprogrammed those that hold room without being
	// programmed. uids names the kept Services by UID.
	waiting, squeezed, unprogrammed map[types.NamespacedName]bool
	uids                            map[types.UID]types.NamespacedName
}

func (r *room) add(k types.NamespacedName, kp *keptPlan) {
	if r.uids == nil {
		r.waiting, r.squeezed, r.unprogrammed = map[types.NamespacedName]bool{}, map[types.NamespacedName]bool{}, map[types.NamespacedName]bool{}
		r.uids = map[types.UID]types.NamespacedName{}
	}
	r.uids[kp.uid] = k
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
	delete(r.waiting, k)
	delete(r.squeezed, k)
	delete(r.unprogrammed, k)
}

// settled reports whether every kept Service holds all it asks: none waits for room or for its
// draining flows.
func (r *room) settled() bool { return len(r.waiting) == 0 && len(r.squeezed) == 0 }

// unsettled are the Services a partial plan replans, beyond those of except, while the room is
// not settled (above).
func (r *room) unsettled(except map[types.NamespacedName]bool) []types.NamespacedName {
	if r.settled() {
		return nil
	}
	var out []types.NamespacedName
	seen := make(map[types.NamespacedName]bool, len(except))
	for k := range except {
		seen[k] = true
	}
	for _, m := range []map[types.NamespacedName]bool{r.waiting, r.squeezed, r.unprogrammed} {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	return out
}

// decidesUnsettled reports whether a partial plan of gateway gw made while the room is not
// settled decides what a full plan would (above).
func (p *Planner) decidesUnsettled(sc Scope, plan Plan, replanned map[types.NamespacedName]bool, gw string) bool {
	for _, uid := range sc.Owners {
		if k, ok := p.room.uids[uid]; ok && !replanned[k] {
			return false
		}
	}
	return !slices.ContainsFunc(plan.Services, func(sp ServicePlan) bool {
		return sp.Gateway == gw && sp.programmed && !sp.getsAll()
	})
}

// getsAll reports whether the Service holds all it asks of its gateway's bounds.
func (sp *ServicePlan) getsAll() bool { return !sp.Limited && sp.Demand == sp.asks }
