package dataplane

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// ApplyMessage applies one message of the controller: a complete state, or a delta against the
// last state the agent accepted (gwstate.State.Base). A delta carries only the identities that
// changed, so a change at 10,000 identities is a line of a few hundred bytes instead of
// megabytes to decode (SPEC P1, P3). msg must be normalized and valid.
//
// A delta to a synced agent takes the fast path (applyDelta): O(changed) work, the same
// transaction the full path would write. Anything the agent does not trust (no full sync yet, a
// failed apply or lo convergence, staged leftovers, more new identities than one staging chunk)
// sends it through the full path: merge into the complete state and converge.
func (a *Agent) ApplyMessage(ctx context.Context, msg gwstate.State) error {
	if !msg.IsDelta() {
		return a.Apply(ctx, msg)
	}
	if err := msg.ValidateShape(); err != nil {
		return fmt.Errorf("invalid state: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.last == nil {
		return errors.New("delta state before any complete state: send a complete state")
	}
	if msg.Base != a.lastGen {
		return fmt.Errorf("delta against generation %d, but the state held is generation %d: send a complete state", msg.Base, a.lastGen)
	}
	if a.synced && a.vipsSynced && len(a.staged) == 0 {
		if done, err := a.applyDelta(ctx, msg); done {
			var kr *kernelRefusal
			if !errors.As(err, &kr) {
				return err
			}
			// The delta is the desired state now; program it without what the kernel refused.
			a.log.Info("the kernel refused identities; programming the state without them", "refused", len(kr.reasons), "generation", msg.Generation, "error", kr.err.Error())
			return a.converge(ctx, *a.desired(), false, kr.reasons)
		}
	}
	st, err := a.desired().Merge(msg)
	if err != nil {
		return fmt.Errorf("%w: send a complete state", err)
	}
	return a.converge(ctx, st, true, nil)
}

// pendingID is one entry of Agent.pending: an identity upserted or removed by a delta since
// Agent.last.
type pendingID struct {
	id      gwstate.Identity
	removed bool
}

// setLast makes st the desired state (complete, normalized).
func (a *Agent) setLast(st *gwstate.State) {
	a.last, a.pending = st, nil
	a.lastGen, a.lastClusterIPs = st.Generation, st.ClusterIPs
}

// desired returns the complete desired state: last with the pending deltas merged in (O(n),
// done only when the complete state is needed, and then kept).
func (a *Agent) desired() *gwstate.State {
	if a.last == nil || (len(a.pending) == 0 && a.last.Generation == a.lastGen) {
		return a.last
	}
	d := gwstate.State{Generation: a.lastGen, Base: a.last.Generation, ClusterIPs: a.lastClusterIPs}
	for k, p := range a.pending {
		if p.removed {
			d.Removed = append(d.Removed, k)
		} else {
			d.Identities = append(d.Identities, p.id)
		}
	}
	d.Normalize() // sorts by key; backends and ClusterIPs are normalized already
	st, err := a.last.Merge(d)
	if err != nil {
		panic(fmt.Sprintf("merging pending deltas: %v", err)) // Base is last's generation
	}
	a.setLast(&st)
	return a.last
}

// recordDelta records the accepted delta msg in the desired state in O(len(msg)).
func (a *Agent) recordDelta(msg gwstate.State) {
	if a.pending == nil {
		a.pending = make(map[gwstate.IdentityKey]pendingID, len(msg.Identities)+len(msg.Removed))
	}
	for _, k := range msg.Removed {
		a.pending[k] = pendingID{removed: true}
	}
	for _, id := range msg.Identities {
		a.pending[id.ID()] = pendingID{id: id}
	}
	a.lastGen, a.lastClusterIPs = msg.Generation, msg.ClusterIPs
}

// applyDelta is the fast path of a delta (SPEC P1): the agent is synced, so what it committed
// (applied, present) is the desired state the delta is based on, and the work follows from the
// delta alone. It validates the upserted identities that differ from the committed ones, writes
// the transaction incremental would write for the merged state (removals first, then the
// changed identities, both in the states' order), commits it, and updates the committed maps,
// the pending deltas, lo (only when the ClusterIPs changed) and conntrack (SPEC D6) in
// O(changed). It reports done = false, having changed nothing, when the delta creates more new
// identity chains than one staging chunk (the full path stages them, SPEC P2).
//
// A failed transaction leaves the table and the committed maps as they were, records the delta
// as the desired state and marks the agent unsynced: Retry, or the next message through the full
// path, converges (SPEC D8).
func (a *Agent) applyDelta(ctx context.Context, msg gwstate.State) (done bool, err error) {
	// Identities refused before are tried again with every message, unless this one changes or
	// removes them (admit.go).
	upserts := msg.Identities
	refused := a.refused
	if len(refused) > 0 {
		refused = maps.Clone(refused)
		for _, k := range msg.Removed {
			delete(refused, k)
		}
		for _, id := range msg.Identities {
			delete(refused, id.ID())
		}
		if len(refused) > 0 {
			upserts = slices.Clone(upserts)
			for _, r := range refused {
				upserts = append(upserts, r.id)
			}
			slices.SortFunc(upserts, func(x, y gwstate.Identity) int { return gwstate.CompareKeys(x.ID(), y.ID()) })
			clear(refused)
		}
	}
	var candidates []gwstate.Identity // upserts that differ from the committed identities
	for _, id := range upserts {
		if old, ok := a.present[id.ID()]; ok && identityEqual(old, id) {
			continue
		}
		candidates = append(candidates, id)
	}
	reasons, err := a.screen(candidates)
	if err == nil {
		err = holdGroups(candidates, reasons)
	}
	if err != nil {
		return true, fmt.Errorf("invalid state: %w", err)
	}

	var changed []gwstate.Identity // candidates the agent programs
	var gone []gwstate.Identity    // committed identities with backends that lose their objects
	var removed []gwstate.Identity // committed identities that leave the state
	var added []gwstate.Identity   // upserts with backends that were not applied
	newChains := 0
	for _, id := range candidates {
		k := id.ID()
		if reason, no := reasons[k]; no {
			if refused == nil {
				refused = map[gwstate.IdentityKey]refusal{}
			}
			refused[k] = refusal{id: id, reason: reason}
			continue
		}
		changed = append(changed, id)
		old, had := a.applied[k]
		switch {
		case len(id.Backends) == 0 && had:
			gone = append(gone, old)
		case len(id.Backends) > 0 && !had:
			newChains++
			added = append(added, id)
		}
	}
	for _, k := range msg.Removed {
		if old, ok := a.present[k]; ok {
			removed = append(removed, old)
			if len(old.Backends) > 0 {
				gone = append(gone, old)
			}
		}
	}
	if a.stageChunk > 0 && newChains > a.stageChunk {
		return false, nil
	}
	a.refused = refused
	prevClusterIPs := a.lastClusterIPs
	a.recordDelta(msg)

	tx := a.be.begin()
	slices.SortFunc(gone, func(x, y gwstate.Identity) int { return gwstate.CompareKeys(x.ID(), y.ID()) })
	for i := range gone {
		writeIdentity(tx, &gone[i], nil)
	}
	vipDelta := vipChanges(tx, a.vipRefs, gone, added)
	for i := range changed {
		id := &changed[i]
		if len(id.Backends) == 0 {
			continue
		}
		if old, ok := a.applied[id.ID()]; ok {
			writeIdentity(tx, &old, id)
		} else {
			writeIdentity(tx, nil, id)
		}
	}
	a.commitTime = 0
	ops := tx.size()
	if ops > 0 {
		start := time.Now()
		err := a.be.commit(ctx, tx)
		a.commitTime = time.Since(start)
		if err != nil {
			a.synced = false
			return true, fmt.Errorf("%s transaction (%d operations) failed: %w", a.be.name(), ops, err)
		}
	}

	targets := a.deltaCleanTargets(changed, removed)
	applyVIPDelta(a.vipRefs, vipDelta)
	for _, old := range removed {
		k := old.ID()
		delete(a.present, k)
		delete(a.applied, k)
	}
	for _, id := range changed {
		k := id.ID()
		a.present[k] = id
		if len(id.Backends) > 0 {
			a.applied[k] = id
		} else {
			delete(a.applied, k)
		}
	}
	a.log.V(1).Info("applied delta", "generation", msg.Generation, "base", msg.Base, "changed", len(changed),
		"removed", len(removed), "identities", len(a.applied), "operations", ops, "kernelTime", a.commitTime.String())

	var errs []error
	if a.vips != nil && !slices.Equal(prevClusterIPs, msg.ClusterIPs) {
		added, deleted, err := a.vips.converge(wantVIPs(msg.ClusterIPs))
		a.vipsSynced = err == nil
		if len(added)+len(deleted) > 0 {
			a.log.V(1).Info("lo VIPs converged", "added", added, "deleted", deleted)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	a.cleanConntrack(targets)
	return true, errors.Join(errs...)
}

// deltaCleanTargets is cleanTargets for a delta, before the committed maps are updated:
// changed are the upserts that differ from the committed identities, removed the committed
// identities the delta removes (SPEC D6).
func (a *Agent) deltaCleanTargets(changed, removed []gwstate.Identity) []cleanTarget {
	if a.ct == nil {
		return nil
	}
	var out []cleanTarget
	for _, id := range changed {
		old, had := a.applied[id.ID()]
		if t, ok := flowTarget(false, id, old, had); ok {
			out = append(out, t)
		}
	}
	for _, old := range removed {
		out = append(out, newCleanTarget(old.VIP, old.Port, old.Protocol, nil))
	}
	return out
}

// cleanConntrack deletes the flows targets name (SPEC D6). A failure is logged, not returned:
// the entries expire, and the next change retries.
func (a *Agent) cleanConntrack(targets []cleanTarget) {
	if a.ct == nil || len(targets) == 0 {
		return
	}
	n, err := a.ct.clean(targets)
	a.ctDeleted += n
	if n > 0 {
		a.log.V(1).Info("deleted stale conntrack entries", "count", n)
	}
	if err != nil {
		a.log.Error(err, "conntrack cleanup")
	}
}
