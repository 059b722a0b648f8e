package dataplane

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"sigs.k8s.io/knftables"

	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// Agent converges the table "ip kube-ovn" to desired states. It remembers the state it last
// committed and sends only the difference to the kernel, as one atomic transaction per Apply.
// The first Apply (and the first after a failed one) lists the table once and reconciles it
// fully: it adopts what is there, rewrites the rules of every desired identity and deletes stale
// objects it owns. Agent is safe for concurrent use (Apply calls are serialised).
type Agent struct {
	nft knftables.Interface
	log logr.Logger

	mu sync.Mutex
	// applied holds the committed identities that have at least one backend, by Key().
	applied map[string]gwstate.Identity
	// synced is false until a full reconcile succeeded, and again after any failed Apply, so
	// that drift which made a transaction fail is repaired by the next one.
	synced bool
}

// NewAgent returns an agent that manages the table through nft, which must be an interface for
// family ip, table "kube-ovn" (knftables.New(knftables.IPv4Family, TableName)).
func NewAgent(nft knftables.Interface, log logr.Logger) *Agent {
	return &Agent{nft: nft, log: log, applied: map[string]gwstate.Identity{}}
}

// Apply converges the kernel to st, which must be normalized and valid. On error the kernel and
// the agent's memory keep the previous state; the error carries nft's message.
func (a *Agent) Apply(ctx context.Context, st gwstate.State) error {
	if err := st.Validate(); err != nil {
		return fmt.Errorf("invalid state: %w", err)
	}
	desired := make(map[string]gwstate.Identity, len(st.Identities))
	for _, id := range st.Identities {
		if len(id.Backends) > 0 {
			desired[id.Key()] = id
		}
	}

	a.mu.Lock()
	defer a.mu.Unlock()

	tx := a.nft.NewTransaction()
	full := !a.synced
	if full {
		if err := a.fullSync(ctx, tx, desired); err != nil {
			return err
		}
	} else {
		a.incremental(tx, desired)
	}
	ops := tx.NumOperations()
	if ops > 0 {
		if err := a.nft.Run(ctx, tx); err != nil {
			a.synced = false
			return fmt.Errorf("nft transaction (%d operations) failed: %w", ops, err)
		}
	}
	a.applied = desired
	a.synced = true
	a.log.V(1).Info("applied state", "generation", st.Generation, "identities", len(desired), "operations", ops, "full", full)
	return nil
}

// Applied returns a copy of the identities the agent believes are installed, sorted by key.
func (a *Agent) Applied() []gwstate.Identity {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]gwstate.Identity, 0, len(a.applied))
	for _, id := range a.applied {
		out = append(out, id)
	}
	slices.SortFunc(out, func(x, y gwstate.Identity) int { return strings.Compare(x.Key(), y.Key()) })
	return out
}

func sortedKeys(m map[string]gwstate.Identity) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// incremental writes only what differs between a.applied and desired.
func (a *Agent) incremental(tx *knftables.Transaction, desired map[string]gwstate.Identity) {
	// Removals first: a removed identity's objects never share names with a desired one.
	for _, k := range sortedKeys(a.applied) {
		if _, ok := desired[k]; !ok {
			old := a.applied[k]
			writeIdentity(tx, &old, nil)
		}
	}
	for _, k := range sortedKeys(desired) {
		id := desired[k]
		old, ok := a.applied[k]
		switch {
		case !ok:
			writeIdentity(tx, nil, &id)
		case !identityEqual(old, id):
			writeIdentity(tx, &old, &id)
		}
	}
}

// fullSync lists the table once and writes a transaction that makes it exactly desired, as far
// as owned objects go.
func (a *Agent) fullSync(ctx context.Context, tx *knftables.Transaction, desired map[string]gwstate.Identity) error {
	chains, err := a.list(ctx, "chain")
	if err != nil {
		return err
	}
	sets, err := a.list(ctx, "set")
	if err != nil {
		return err
	}
	maps, err := a.list(ctx, "map")
	if err != nil {
		return err
	}
	var elements []*knftables.Element
	if slices.Contains(maps, ServiceMap) {
		elements, err = a.nft.ListElements(ctx, "map", ServiceMap)
		if err != nil && !knftables.IsNotFound(err) {
			return fmt.Errorf("listing map %s: %w", ServiceMap, err)
		}
	}

	writeBase(tx)

	// Elements that name no desired identity, or point elsewhere than they should, go first.
	wantElem := make(map[string]string, len(desired))
	for _, id := range desired {
		wantElem[strings.Join(elementKey(id), " . ")] = strings.Join(elementValue(id), " ")
	}
	for _, e := range elements {
		k := strings.Join(e.Key, " . ")
		if v, ok := wantElem[k]; ok && v == strings.Join(e.Value, " ") {
			continue
		}
		tx.Delete(&knftables.Element{Map: ServiceMap, Key: e.Key})
	}

	keepChains := map[string]bool{}
	keepSets := map[string]bool{}
	for _, k := range sortedKeys(desired) {
		id := desired[k]
		writeIdentity(tx, nil, &id)
		keepChains[IdentityChain(id.VIP, id.Port, id.Protocol)] = true
		if id.AffinityTimeoutSeconds > 0 {
			for _, b := range id.Backends {
				keepChains[EndpointChain(id, b)] = true
				keepSets[AffinitySet(id, b)] = true
			}
		}
	}

	var staleChains, staleSets []string
	for _, c := range chains {
		if owned(c) && !keepChains[c] {
			staleChains = append(staleChains, c)
		}
	}
	for _, s := range sets {
		if owned(s) && !keepSets[s] {
			staleSets = append(staleSets, s)
		}
	}
	slices.Sort(staleChains)
	slices.Sort(staleSets)
	// Flush every stale chain before deleting any, so goto references between them are gone.
	for _, c := range staleChains {
		tx.Flush(&knftables.Chain{Name: c})
	}
	for _, c := range staleChains {
		tx.Delete(&knftables.Chain{Name: c})
	}
	for _, s := range staleSets {
		tx.Delete(&knftables.Set{Name: s})
	}
	if len(staleChains)+len(staleSets) > 0 {
		a.log.Info("removing stale objects", "chains", staleChains, "sets", staleSets)
	}
	return nil
}

// list returns the names of objects of one type in the table; a missing table is empty.
func (a *Agent) list(ctx context.Context, objectType string) ([]string, error) {
	names, err := a.nft.List(ctx, objectType)
	if err != nil {
		if knftables.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing %ss of table ip %s: %w", objectType, TableName, err)
	}
	return names, nil
}
