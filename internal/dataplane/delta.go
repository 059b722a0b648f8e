package dataplane

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// ApplyMessage applies one message of the controller: a complete state, or a delta against the
// last state the agent accepted (gwstate.State.Base). A delta carries only the identities that
// changed, so a change at 10,000 identities is a line of a few hundred bytes instead of
// megabytes to decode (SPEC P1, P3). msg must be normalized and valid.
//
// A delta to a synced agent takes the fast path (applyDelta): O(changed) work, the same change
// set a complete state would make (apply.go). Anything the agent does not trust (no full sync
// yet, a failed apply or lo convergence, staged leftovers) sends it through the full path: merge
// into the complete state and converge.
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
		err := a.applyDelta(ctx, msg)
		var kr *kernelRefusal
		if !errors.As(err, &kr) || a.lastGen != msg.Generation {
			return err
		}
		// The delta is the desired state now; program it without what the kernel refused.
		a.log.Info("the kernel refused identities; programming the state without them", "refused", len(kr.reasons), "generation", msg.Generation, "error", kr.err.Error())
		return a.convergeDesired(ctx, kr.reasons)
	}
	desired, err := a.desired()
	if err != nil {
		return err
	}
	st, err := desired.Merge(msg)
	if err != nil {
		return fmt.Errorf("%w: send a complete state", err)
	}
	return a.converge(ctx, st, true, nil)
}

// convergeDesired programs the desired state again (Retry, Verify, the kernel's refusals of a
// delta); force are identities the kernel already refused.
func (a *Agent) convergeDesired(ctx context.Context, force map[gwstate.IdentityKey]string) error {
	st, err := a.desired()
	if err != nil {
		return err
	}
	return a.converge(ctx, *st, false, force)
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
// done only when the complete state is needed, and then kept). An error means the agent's own
// memory is inconsistent: the caller refuses the message, and the controller sends a complete
// state.
func (a *Agent) desired() (*gwstate.State, error) {
	if a.last == nil {
		return nil, errors.New("no desired state yet: send a complete state")
	}
	if len(a.pending) == 0 && a.last.Generation == a.lastGen {
		return a.last, nil
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
		return nil, fmt.Errorf("merging the deltas accepted since generation %d into the desired state: %w", a.last.Generation, err)
	}
	a.setLast(&st)
	return a.last, nil
}

// recordDelta records the accepted delta msg, whose ClusterIPs are clusterIPs, in the desired
// state in O(len(msg)).
func (a *Agent) recordDelta(msg gwstate.State, clusterIPs []netip.Addr) {
	if a.pending == nil {
		a.pending = make(map[gwstate.IdentityKey]pendingID, len(msg.Identities)+len(msg.Removed))
	}
	for _, k := range msg.Removed {
		a.pending[k] = pendingID{removed: true}
	}
	for _, id := range msg.Identities {
		a.pending[id.Key()] = pendingID{id: id}
	}
	a.lastGen, a.lastClusterIPs = msg.Generation, clusterIPs
}

// applyDelta is the fast path of a delta (SPEC P1): the agent is synced, so what it committed
// (applied, present) is the desired state the delta is based on, and the change set follows from
// the delta alone, O(changed): its upserts that differ from the committed identities (and the
// identities refused before, tried again), less those the agent refuses (admit.go), and its
// removals. applyChanges writes, commits and books it, as for a complete state; lo is converged
// only when the ClusterIPs changed.
//
// A failed transaction leaves the table and the committed maps as they were, records the delta
// as the desired state and marks the agent unsynced: Retry, or the next message through the full
// path, converges (SPEC D8).
func (a *Agent) applyDelta(ctx context.Context, msg gwstate.State) error {
	// Identities refused before are tried again with every message, unless this one changes or
	// removes them (admit.go).
	upserts := msg.Identities
	if len(a.refused) > 0 {
		retry := maps.Clone(a.refused)
		for _, k := range msg.Removed {
			delete(retry, k)
		}
		for _, id := range msg.Identities {
			delete(retry, id.Key())
		}
		if len(retry) > 0 {
			upserts = slices.Clone(upserts)
			for _, r := range retry {
				upserts = append(upserts, r.id)
			}
			slices.SortFunc(upserts, func(x, y gwstate.Identity) int { return x.Key().Compare(y.Key()) })
		}
	}
	admitted, refused, err := a.admission(upserts, nil)
	if err != nil {
		return fmt.Errorf("invalid state: %w", err)
	}
	c := changes{upserts: admitted}
	for _, k := range msg.Removed {
		if old, ok := a.present[k]; ok {
			c.removed = append(c.removed, old)
		}
	}
	a.refused = refused
	// A delta that keeps its base's ClusterIPs leaves lo as it is, without comparing them.
	clusterIPs, loChanged := a.lastClusterIPs, false
	if !msg.SameClusterIPs {
		clusterIPs, loChanged = msg.ClusterIPs, !slices.Equal(a.lastClusterIPs, msg.ClusterIPs)
	}
	a.recordDelta(msg, clusterIPs)
	return a.applyChanges(ctx, c, msg.Generation, clusterIPs, loChanged)
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
