package dataplane

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// compareTable describes the first difference between the table ts read and what the agent
// committed (want), or returns "" (SPEC L6, K8). It compares contents, not only numbers of
// objects: kube-ovn's share DNAT rewrites an identity chain of the same name without the
// agent's rules (no affinity, its own backend order), which leaves every count as it was, but
// not the rules' marks (RuleComment). Objects that are not the agent's (kube-ovn's identities,
// anything else in the table) are not drift. O(table).
func compareTable(ts tableState, want expectation) string {
	tab := indexTable(ts)
	if d := tab.baseDrift(); d != "" {
		return d
	}
	if d := ownedSetsDrift(ts.inv, want); d != "" {
		return d
	}
	kept := keptObjects{chains: make(map[string]bool, len(want.ids)), sets: map[string]bool{}}
	for _, id := range want.ids {
		if d := tab.identityDrift(id); d != "" {
			return d
		}
		kept.keepIdentity(id)
	}
	return tab.staleObject(kept)
}

// tableIndex is a table read for a drift check, with its names, OwnedSet's hashes and
// service-ips' elements looked up by name.
type tableIndex struct {
	ts          tableState
	chains      map[string]bool
	sets        map[string]bool
	ownedHashes map[string]bool
	// elems maps each element's key, joined by " . ", to its value.
	elems map[string]string
}

func indexTable(ts tableState) tableIndex {
	inv := ts.inv
	tab := tableIndex{
		ts:          ts,
		chains:      nameSet(inv.chains),
		sets:        nameSet(inv.sets),
		ownedHashes: make(map[string]bool, len(inv.owned)),
		elems:       make(map[string]string, len(inv.elements)),
	}
	for _, k := range inv.owned {
		tab.ownedHashes[keyHash(k)] = true
	}
	for _, e := range inv.elements {
		tab.elems[strings.Join(e.key, " . ")] = e.value
	}
	return tab
}

// baseDrift checks the base chain (the dispatch rule only), the other base chains (the agent's
// rules only, by number) and the absence of the legacy hairpin chain.
func (tab tableIndex) baseDrift() string {
	if !tab.chains[BaseChain] {
		return "chain " + BaseChain + " is missing"
	}
	if m := tab.ts.rules[BaseChain]; m.rules != 1 || !tab.ts.dispatch {
		return fmt.Sprintf("chain %s has %d rules, want the dispatch rule only", BaseChain, m.rules)
	}
	for _, bc := range baseChains(DefaultVPCInterface)[1:] {
		if !tab.chains[bc.name] {
			return "chain " + bc.name + " is missing"
		}
		if m := tab.ts.rules[bc.name]; m.rules != len(bc.rules) || m.marked != len(bc.rules) {
			return fmt.Sprintf("chain %s has %d rules (%d of the agent's), want the agent's %d", bc.name, m.rules, m.marked, len(bc.rules))
		}
	}
	if tab.chains[legacyHairpinChain] {
		return "legacy chain " + legacyHairpinChain + " is present"
	}
	return ""
}

// ownedSetsDrift checks that OwnedSet holds exactly the committed keys (by number; identityDrift
// checks each), VIPSet exactly their VIPs.
func ownedSetsDrift(inv *inventory, want expectation) string {
	if len(inv.owned) != len(want.ids) {
		return fmt.Sprintf("set %s has %d keys, want %d", OwnedSet, len(inv.owned), len(want.ids))
	}
	if len(inv.vips) != len(want.vips) {
		return fmt.Sprintf("set %s has %d addresses, want %d", VIPSet, len(inv.vips), len(want.vips))
	}
	for _, v := range inv.vips {
		if want.vips[v] == 0 {
			return fmt.Sprintf("set %s holds %s, which the agent does not serve", VIPSet, v)
		}
	}
	return guardDrift(inv, want.guard)
}

// identityDrift checks one committed identity: its key in OwnedSet, its element, its chain, its
// source set, and with affinity each endpoint chain and affinity set.
func (tab tableIndex) identityDrift(id gwstate.Identity) string {
	if !tab.ownedHashes[IdentityHash(id.Key())] {
		return fmt.Sprintf("identity %s is missing from set %s", id.Key(), OwnedSet)
	}
	key := strings.Join(elementKey(id), " . ")
	if v, ok := tab.elems[key]; !ok || v != strings.Join(elementValue(id), " ") {
		return fmt.Sprintf("element %s of %s is %q, want %q", key, ServiceMap, v, strings.Join(elementValue(id), " "))
	}
	if d := chainDrift(tab.ts, tab.chains, IdentityChain(id.Key()), ruleCount(id)); d != "" {
		return d
	}
	if len(id.SourceRanges) > 0 && !tab.sets[SourceSet(id)] {
		return "set " + SourceSet(id) + " is missing"
	}
	if id.AffinityTimeoutSeconds <= 0 {
		return ""
	}
	for _, b := range id.Backends {
		if d := chainDrift(tab.ts, tab.chains, EndpointChain(id, b), 2); d != "" {
			return d
		}
		if set := AffinitySet(id, b); !tab.sets[set] {
			return "set " + set + " is missing"
		}
	}
	return ""
}

// staleObject names a leftover of the agent's own identities (an endpoint of a removed backend,
// say): a chain or set of an owned identity that is not kept.
func (tab tableIndex) staleObject(kept keptObjects) string {
	for _, c := range tab.ts.inv.chains {
		if h, ok := objectHash(c); ok && tab.ownedHashes[h] && !kept.chains[c] {
			return "stale chain " + c
		}
	}
	for _, s := range tab.ts.inv.sets {
		if h, ok := objectHash(s); ok && tab.ownedHashes[h] && !kept.sets[s] {
			return "stale set " + s
		}
	}
	return ""
}

// intactIdentities are the identities of want whose own objects ts holds as committed: the
// key in OwnedSet, the identity chain with its rules (all the agent's), the source set, and with
// affinity each endpoint chain and affinity set. Their service-ips element is not looked at: a
// repair writes every desired element anyway (fullSync). O(table).
func intactIdentities(ts tableState, want expectation) map[gwstate.IdentityKey]bool {
	chains, sets := nameSet(ts.inv.chains), nameSet(ts.inv.sets)
	owned := make(map[string]bool, len(ts.inv.owned))
	for _, k := range ts.inv.owned {
		owned[keyHash(k)] = true
	}
	out := make(map[gwstate.IdentityKey]bool, len(want.ids))
next:
	for k, id := range want.ids {
		if !owned[IdentityHash(k)] || chainDrift(ts, chains, IdentityChain(k), ruleCount(id)) != "" {
			continue
		}
		if len(id.SourceRanges) > 0 && !sets[SourceSet(id)] {
			continue
		}
		if id.AffinityTimeoutSeconds > 0 {
			for _, b := range id.Backends {
				if chainDrift(ts, chains, EndpointChain(id, b), 2) != "" || !sets[AffinitySet(id, b)] {
					continue next
				}
			}
		}
		out[k] = true
	}
	return out
}

// chainDrift checks that one of the agent's chains exists and holds n rules, all the agent's.
func chainDrift(ts tableState, chains map[string]bool, name string, n int) string {
	if !chains[name] {
		return "chain " + name + " is missing"
	}
	if m := ts.rules[name]; m.rules != n || m.marked != n {
		return fmt.Sprintf("chain %s has %d rules (%d of the agent's), want %d of the agent's", name, m.rules, m.marked, n)
	}
	return ""
}

// countVIPs counts the identities per VIP.
func countVIPs(ids map[gwstate.IdentityKey]gwstate.Identity) map[netip.Addr]int {
	out := make(map[netip.Addr]int, len(ids))
	for k := range ids {
		out[k.VIP]++
	}
	return out
}

// vipChanges writes the VIPSet changes that take refs (identities per VIP) to refs + delta,
// in address order, and returns the delta to apply to refs once the transaction committed.
func vipChanges(tx txn, refs map[netip.Addr]int, gone, added []gwstate.Identity) map[netip.Addr]int {
	if len(gone)+len(added) == 0 {
		return nil
	}
	delta := map[netip.Addr]int{}
	for _, id := range gone {
		delta[id.VIP]--
	}
	for _, id := range added {
		delta[id.VIP]++
	}
	for _, v := range slices.SortedFunc(maps.Keys(delta), netip.Addr.Compare) {
		before := refs[v]
		after := before + delta[v]
		switch {
		case before == 0 && after > 0:
			tx.addVIP(v)
		case before > 0 && after <= 0:
			tx.deleteVIP(v)
		}
	}
	return delta
}

// applyVIPDelta adds delta to refs.
func applyVIPDelta(refs, delta map[netip.Addr]int) {
	for v, d := range delta {
		if n := refs[v] + d; n > 0 {
			refs[v] = n
		} else {
			delete(refs, v)
		}
	}
}
