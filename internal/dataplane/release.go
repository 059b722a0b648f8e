package dataplane

import (
	"context"
	"fmt"
	"slices"

	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// release is the end of a gateway's service (gwstate.State.Release, SPEC O4): the agent has just
// converged to the empty state, so no identity of its and no lo VIP remain; what an empty state
// keeps goes now. The ownership sets and the hairpin chain are vpcgw's alone. The table, its
// dispatch chain and service-ips map are the layout kube-ovn's share DNAT writes too (K8): they
// go only when nothing but vpcgw's base is in the table, else they stay for kube-ovn.
func (a *Agent) release(ctx context.Context) error {
	// A full sync first: it (re)writes the base, so the deletes below name objects that exist
	// whatever the kernel held before (drift, an earlier release).
	a.synced = false
	if err := a.fullApply(ctx, gwstate.State{Generation: a.lastGen, Identities: []gwstate.Identity{}}); err != nil {
		return fmt.Errorf("release: converging to the empty state: %w", err)
	}
	inv, err := a.be.inventory(ctx)
	if err != nil {
		return fmt.Errorf("release: listing the table: %w", err)
	}
	// Only the base is left when the table has no chain but the base chains, no set but the
	// ownership and guard sets, and an empty service-ips map.
	bases := baseChains(a.iface)
	onlyBase := len(inv.sets) == 0 && len(inv.elements) == 0 &&
		!slices.ContainsFunc(inv.chains, func(c string) bool {
			return !slices.ContainsFunc(bases, func(bc baseChain) bool { return bc.name == c })
		})
	tx := a.be.begin()
	if onlyBase {
		tx.deleteTable()
	} else {
		// The dispatch chain stays: kube-ovn's share DNAT writes the same one.
		for _, bc := range bases[1:] {
			tx.flushChain(bc.name)
			tx.deleteChain(bc.name)
		}
		tx.deleteSet(OwnedSet)
		tx.deleteSet(VIPSet)
		tx.deleteSet(EndpointSet)
		tx.deleteSet(ReplyMap)
	}
	if err := a.commit(ctx, tx, 0); err != nil {
		return fmt.Errorf("release: removing the agent's base objects: %w", err)
	}
	// Nothing committed is trusted now: a later state rebuilds the base with a full sync.
	a.synced = false
	a.released = true
	a.log.Info("released: nothing of vpcgw's is left in the gateway", "tableDeleted", onlyBase)
	return nil
}
