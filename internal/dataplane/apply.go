package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// One apply path (SPEC D8, P1): a complete state and a delta both become one change set against
// what the agent committed, and applyChanges writes, commits and books it. Only an agent that
// does not trust its memory (no full sync yet, a failed transaction, drift) takes the other way,
// fullApply, which lists the table and reconciles all of it.

// changes is what one message changes against what the agent committed (applied, present):
// the identities that are new or whose content differs, in the states' order, and the committed
// identities that leave the state, in key order.
type changes struct {
	upserts []gwstate.Identity
	removed []gwstate.Identity
}

// diff is the change set that turns what the agent committed into the complete state st: O(n).
func (a *Agent) diff(st gwstate.State) changes {
	var c changes
	for _, id := range st.Identities {
		if old, ok := a.present[id.Key()]; !ok || !sameIdentity(old, id) {
			c.upserts = append(c.upserts, id)
		}
	}
	if len(a.present) > len(st.Identities)-len(c.upserts) {
		keep := make(map[gwstate.IdentityKey]bool, len(st.Identities))
		for _, id := range st.Identities {
			keep[id.Key()] = true
		}
		for k, old := range a.present {
			if !keep[k] {
				c.removed = append(c.removed, old)
			}
		}
		slices.SortFunc(c.removed, func(x, y gwstate.Identity) int { return x.Key().Compare(y.Key()) })
	}
	return c
}

// applyLocked converges the kernel to the complete, admitted state st.
func (a *Agent) applyLocked(ctx context.Context, st gwstate.State) error {
	if !a.synced {
		return a.fullApply(ctx, st)
	}
	return a.applyChanges(ctx, a.diff(st), st.Generation, st.ClusterIPs, true)
}

// applyChanges writes c as one transaction (after staging transactions when it creates more new
// identity chains than one chunk, see stage), commits it and books it: the committed maps, the
// VIP counts, lo (when convergeLo) and conntrack (SPEC D6). Its work is O(changed). A failed
// transaction leaves the table and the committed maps as they were and marks the agent unsynced.
func (a *Agent) applyChanges(ctx context.Context, c changes, generation int64, clusterIPs []netip.Addr, convergeLo bool) error {
	gone, added := a.splitChanges(c)

	a.commitTime = 0
	ready := map[gwstate.IdentityKey]bool{}
	var stage []gwstate.Identity
	if a.stageChunk > 0 && len(added) > a.stageChunk {
		stage = added
	}
	stagedOps, stagedTx, err := a.stage(ctx, stage, ready)
	if err != nil {
		a.synced = false
		return err
	}
	tx := a.be.begin()
	// Removals first: a removed identity's objects never share names with a desired one.
	for i := range gone {
		writeIdentity(tx, &gone[i], nil)
	}
	a.writeUpserts(tx, c.upserts, ready)
	vipDelta := vipChanges(tx, a.vipRefs, gone, added)
	guard := a.guardChanges(c, clusterIPs)
	tx.identity(nil)
	guard.write(tx)
	a.forgetNeighbors(a.newBackendAddrs(c.upserts))
	if err := a.commit(ctx, tx, stagedTx); err != nil {
		return err
	}

	targets := a.targets(false, c)
	applyVIPDelta(a.vipRefs, vipDelta)
	guard.commit()
	a.held, a.heldFrom = guard.held, guard.heldFrom
	a.book(c)
	a.log.V(1).Info("applied changes", "generation", generation, "changed", len(c.upserts), "removed", len(c.removed),
		"identities", len(a.applied), "operations", tx.size()+stagedOps, "stagingTransactions", stagedTx, "kernelTime", a.commitTime.String())
	return a.finish(targets, clusterIPs, convergeLo)
}

// splitChanges sorts out c against what is committed: gone are the committed identities that
// lose their objects (sorted by key), added the new ones with backends.
func (a *Agent) splitChanges(c changes) (gone, added []gwstate.Identity) {
	for _, id := range c.upserts {
		old, had := a.applied[id.Key()]
		switch {
		case len(id.Backends) == 0 && had:
			gone = append(gone, old)
		case len(id.Backends) > 0 && !had:
			added = append(added, id)
		}
	}
	for _, old := range c.removed {
		if len(old.Backends) > 0 {
			gone = append(gone, old)
		}
	}
	slices.SortFunc(gone, func(x, y gwstate.Identity) int { return x.Key().Compare(y.Key()) })
	return gone, added
}

// writeUpserts writes the upserted identities with backends: only the element of a new one
// staged already (ready), all of a new one, a rewrite of a committed one whose kernel objects
// change. One whose only change is its draining backends writes nothing (SPEC L11): a rewrite
// would flush its chain for no reason.
func (a *Agent) writeUpserts(tx txn, upserts []gwstate.Identity, ready map[gwstate.IdentityKey]bool) {
	for i := range upserts {
		id := &upserts[i]
		if len(id.Backends) == 0 {
			continue
		}
		switch old, had := a.applied[id.Key()]; {
		case !had && ready[id.Key()]:
			addReadyElement(tx, *id)
		case !had:
			writeIdentity(tx, nil, id)
		case identityEqual(old, *id):
			continue
		default:
			writeIdentity(tx, &old, id)
		}
	}
}

// book records the committed change set c, the one booking of both apply paths: present holds
// every identity of the desired state the kernel has (with or without backends), applied those
// with backends (objects in the table). Staged chains are referenced by the commit.
func (a *Agent) book(c changes) {
	for _, old := range c.removed {
		delete(a.present, old.Key())
		delete(a.applied, old.Key())
	}
	for _, id := range c.upserts {
		a.present[id.Key()] = id
		if len(id.Backends) > 0 {
			a.applied[id.Key()] = id
		} else {
			delete(a.applied, id.Key())
		}
	}
	a.staged = nil
}

// fullApply lists the table and makes it exactly st, as far as the agent's objects go
// (fullSync), then books st as what is committed.
func (a *Agent) fullApply(ctx context.Context, st gwstate.State) error {
	desired := make(map[gwstate.IdentityKey]gwstate.Identity, len(st.Identities))
	present := make(map[gwstate.IdentityKey]gwstate.Identity, len(st.Identities))
	for _, id := range st.Identities {
		present[id.Key()] = id
		if len(id.Backends) > 0 {
			desired[id.Key()] = id
		}
	}
	start := time.Now()
	inv, err := a.be.inventory(ctx)
	a.readTime = time.Since(start)
	if err != nil {
		return err
	}
	a.commitTime = 0
	ready, stage := a.planStaging(inv, st.Identities)
	for k := range a.intact {
		// Found whole by the drift check with the content the agent committed, and still
		// desired with that content.
		if id, ok := desired[k]; ok && identityEqual(id, a.applied[k]) {
			ready[k] = true
		}
	}
	stagedOps, stagedTx, err := a.stage(ctx, stage, ready)
	if err != nil {
		a.synced = false
		return err
	}
	held, _ := a.heldVIPs(st.ClusterIPs)
	guard := buildGuard(desired, held)
	tx := a.be.begin()
	a.fullSync(tx, inv, st.Identities, desired, ready, guard)
	if err := a.commit(ctx, tx, stagedTx); err != nil {
		return err
	}
	// Every identity of the state is a change after a full sync (the agent trusts no earlier
	// flow), and every one it had committed and the state lacks is removed.
	c := changes{upserts: st.Identities}
	for k, old := range a.present {
		if _, ok := present[k]; !ok {
			c.removed = append(c.removed, old)
		}
	}
	targets := a.targets(true, c)
	a.book(c) // staged chains are referenced now, or deleted by the full sync as stale
	a.vipRefs = countVIPs(a.applied)
	a.guard, a.held, a.heldFrom = guard, held, st.ClusterIPs
	a.synced = true
	a.log.V(1).Info("applied state", "generation", st.Generation, "identities", len(desired), "operations", tx.size()+stagedOps,
		"stagingTransactions", stagedTx, "full", true, "kernelTime", a.commitTime.String(), "readTime", a.readTime.String())
	return a.finish(targets, st.ClusterIPs, true)
}

// commit sends tx to the kernel (nothing when it is empty); a failure marks the agent unsynced.
func (a *Agent) commit(ctx context.Context, tx txn, stagedTx int) error {
	ops := tx.size()
	if ops == 0 {
		return nil
	}
	start := time.Now()
	err := a.be.commit(ctx, tx)
	a.noteKernel(time.Since(start))
	if err == nil {
		return nil
	}
	a.synced = false
	if stagedTx > 0 {
		return fmt.Errorf("%s transaction (%d operations, after %d staging transactions) failed: %w", a.be.name(), ops, stagedTx, err)
	}
	return fmt.Errorf("%s transaction (%d operations) failed: %w", a.be.name(), ops, err)
}

// targets says which conntrack entries must go once c is committed (SPEC D6, N7, L11):
// flowTarget's for every upsert, against what was committed before (full: after a full sync),
// and all the flows of every removed identity. The committed version is present's, not
// applied's: an identity without backends may still have draining ones, whose departure must
// delete their flows. Called before the committed maps are updated.
func (a *Agent) targets(full bool, c changes) []cleanTarget {
	if a.ct == nil {
		return nil
	}
	var out []cleanTarget
	for _, id := range c.upserts {
		old, had := a.present[id.Key()]
		if t, ok := flowTarget(full, id, old, had); ok {
			out = append(out, t)
		}
	}
	for _, old := range c.removed {
		out = append(out, newCleanTarget(old.Key()))
	}
	return out
}

// finish converges lo to clusterIPs (when convergeLo, SPEC D5) and deletes the conntrack
// entries targets name. A lo failure is returned (the next message or retry converges again).
func (a *Agent) finish(targets []cleanTarget, clusterIPs []netip.Addr, convergeLo bool) error {
	var errs []error
	switch {
	case a.vips == nil:
		a.vipsSynced = true
	case convergeLo:
		added, deleted, err := a.vips.converge(wantVIPs(clusterIPs))
		a.vipsSynced = err == nil
		if len(added)+len(deleted) > 0 {
			a.log.V(1).Info("lo VIPs converged", "added", added, "deleted", deleted)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	a.cleanConntrack(targets)
	return errors.Join(errs...)
}
