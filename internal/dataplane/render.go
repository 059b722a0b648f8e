// Package dataplane is the gateway agent: it converges the nftables table "ip kube-ovn" of one
// gateway instance to a desired gwstate.State (SPEC D1, D2, D3, D8).
//
// Object names are part of the API (SPEC D1-D3):
//
//	table ip kube-ovn
//	  chain prerouting   type nat hook prerouting priority -150; one rule:
//	                     ip daddr . meta l4proto . th dport vmap @service-ips
//	  map service-ips    ipv4_addr . inet_proto . inet_service : verdict
//	                     <vip> . <proto> . <port> : goto dnat-<idhash>
//	  chain dnat-<idhash>            idhash = md5("<vip>:<port>:<proto>")[:12 hex]
//	  set   aff-<idhash>-<bkhash>    (ClientIP affinity) bkhash = md5("<ip>:<port>")[:8 hex]
//	  chain ep-<idhash>-<bkhash>     (ClientIP affinity)
//
// The agent owns the base chain "prerouting", the map "service-ips" and every chain or set whose
// name starts with "dnat-", "ep-" or "aff-" followed by the hash format above. It never touches
// anything else, in this table or in any other.
package dataplane

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/vpcgw/vpcgw/internal/gwstate"
)

const (
	// TableName is the nftables table (family ip) the agent owns objects in.
	TableName = "kube-ovn"
	// BaseChain is the nat prerouting base chain holding the dispatch rule.
	BaseChain = "prerouting"
	// ServiceMap is the verdict map from (vip, proto, port) to the identity chain.
	ServiceMap = "service-ips"
	// BaseChainPriority runs before iptables' DNAT (-100).
	BaseChainPriority = "-150"

	// DispatchRule is the only rule of the base chain.
	DispatchRule = "ip daddr . meta l4proto . th dport vmap @" + ServiceMap
	// ServiceMapType is the type of the verdict map.
	ServiceMapType = "ipv4_addr . inet_proto . inet_service : verdict"

	identityPrefix = "dnat-"
	endpointPrefix = "ep-"
	affinityPrefix = "aff-"
)

// IdentityHash is the 12 hex characters of md5("<vip>:<port>:<proto>") that name an identity's
// objects.
func IdentityHash(vip string, port int32, proto gwstate.Protocol) string {
	sum := md5.Sum([]byte(fmt.Sprintf("%s:%d:%s", vip, port, proto)))
	return hex.EncodeToString(sum[:])[:12]
}

// BackendHash is the 8 hex characters of md5("<ip>:<port>") that name a backend's affinity
// objects.
func BackendHash(ip string, port int32) string {
	sum := md5.Sum([]byte(fmt.Sprintf("%s:%d", ip, port)))
	return hex.EncodeToString(sum[:])[:8]
}

// IdentityChain is the name of the identity chain: "dnat-<12 hex>" (SPEC D2).
func IdentityChain(vip string, port int32, proto gwstate.Protocol) string {
	return identityPrefix + IdentityHash(vip, port, proto)
}

// EndpointChain is the name of a backend's affinity chain: "ep-<idhash>-<bkhash>" (SPEC D3).
func EndpointChain(id gwstate.Identity, b gwstate.Backend) string {
	return endpointPrefix + IdentityHash(id.VIP, id.Port, id.Protocol) + "-" + BackendHash(b.IP, b.Port)
}

// AffinitySet is the name of a backend's affinity set: "aff-<idhash>-<bkhash>" (SPEC D3).
func AffinitySet(id gwstate.Identity, b gwstate.Backend) string {
	return affinityPrefix + IdentityHash(id.VIP, id.Port, id.Protocol) + "-" + BackendHash(b.IP, b.Port)
}

// owned reports whether a chain or set name is one the agent manages dynamically (identity,
// endpoint and affinity objects). The base chain and the map are owned too but never stale.
func owned(name string) bool {
	isHex := func(s string) bool {
		for _, c := range s {
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
		return true
	}
	switch {
	case strings.HasPrefix(name, identityPrefix):
		h := name[len(identityPrefix):]
		return len(h) == 12 && isHex(h)
	case strings.HasPrefix(name, endpointPrefix), strings.HasPrefix(name, affinityPrefix):
		rest := name[strings.IndexByte(name, '-')+1:]
		return len(rest) == 12+1+8 && rest[12] == '-' && isHex(rest[:12]) && isHex(rest[13:])
	}
	return false
}

func elementKey(id gwstate.Identity) []string {
	return []string{id.VIP, string(id.Protocol), strconv.Itoa(int(id.Port))}
}

func elementValue(id gwstate.Identity) []string {
	return []string{"goto " + IdentityChain(id.VIP, id.Port, id.Protocol)}
}

// dnatRule is the rule that DNATs to one backend or spreads over several with numgen.
func dnatRule(proto gwstate.Protocol, backends []gwstate.Backend) string {
	if len(backends) == 1 {
		return fmt.Sprintf("meta l4proto %s dnat ip to %s:%d", proto, backends[0].IP, backends[0].Port)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "meta l4proto %s dnat ip addr . port to numgen random mod %d map { ", proto, len(backends))
	for i, be := range backends {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d : %s . %d", i, be.IP, be.Port)
	}
	b.WriteString(" }")
	return b.String()
}

// affinityRules are the identity chain's rules in ClientIP mode: a known client goes to its
// backend, everyone else is spread at random over the endpoint chains.
func affinityRules(id gwstate.Identity) []string {
	rules := make([]string, 0, len(id.Backends)+1)
	for _, b := range id.Backends {
		rules = append(rules, fmt.Sprintf("ip saddr @%s goto %s", AffinitySet(id, b), EndpointChain(id, b)))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "numgen random mod %d vmap { ", len(id.Backends))
	for i, be := range id.Backends {
		if i > 0 {
			b.WriteString(" , ") // spaced so that knftables' Fake can check the goto target
		}
		fmt.Fprintf(&b, "%d : goto %s", i, EndpointChain(id, be))
	}
	b.WriteString(" }")
	return append(rules, b.String())
}

func affinitySet(id gwstate.Identity, b gwstate.Backend) *knftables.Set {
	return &knftables.Set{
		Name:    AffinitySet(id, b),
		Type:    "ipv4_addr",
		Flags:   []knftables.SetFlag{knftables.DynamicFlag, knftables.TimeoutFlag},
		Timeout: knftables.PtrTo(time.Duration(id.AffinityTimeoutSeconds) * time.Second),
	}
}

// writeBase adds the table, the map, and the base chain with its single dispatch rule.
func writeBase(tx *knftables.Transaction) {
	tx.Add(&knftables.Table{})
	tx.Add(&knftables.Map{Name: ServiceMap, Type: ServiceMapType})
	tx.Add(&knftables.Chain{
		Name:     BaseChain,
		Type:     knftables.PtrTo(knftables.NATType),
		Hook:     knftables.PtrTo(knftables.PreroutingHook),
		Priority: knftables.PtrTo(knftables.BaseChainPriority(BaseChainPriority)),
		Policy:   knftables.PtrTo(knftables.AcceptPolicy),
	})
	tx.Flush(&knftables.Chain{Name: BaseChain})
	tx.Add(&knftables.Rule{Chain: BaseChain, Rule: DispatchRule})
}

// writeIdentity adds the operations that take the kernel from old to new for one identity. old
// is nil when the identity is not (known to be) installed; new is nil when it must go. Both,
// when set, have at least one backend. Objects are flushed before they are deleted and
// references are removed before their targets, so the kernel accepts the order.
func writeIdentity(tx *knftables.Transaction, old, new *gwstate.Identity) {
	if new == nil {
		idc := IdentityChain(old.VIP, old.Port, old.Protocol)
		tx.Delete(&knftables.Element{Map: ServiceMap, Key: elementKey(*old)})
		tx.Flush(&knftables.Chain{Name: idc})
		tx.Delete(&knftables.Chain{Name: idc})
		removeEndpoints(tx, *old, nil)
		return
	}
	idc := IdentityChain(new.VIP, new.Port, new.Protocol)
	tx.Add(&knftables.Chain{Name: idc})
	tx.Flush(&knftables.Chain{Name: idc})

	var keep map[string]bool
	if new.AffinityTimeoutSeconds > 0 {
		keep = make(map[string]bool, len(new.Backends))
		for _, b := range new.Backends {
			keep[AffinitySet(*new, b)] = true
		}
	}
	if old != nil && old.AffinityTimeoutSeconds > 0 {
		removeEndpoints(tx, *old, keep)
		if new.AffinityTimeoutSeconds > 0 && new.AffinityTimeoutSeconds != old.AffinityTimeoutSeconds {
			// Not every kernel updates the timeout of an existing set on "add set": recreate
			// the sets of the backends that stay (their entries are lost, as with any change
			// of the timeout), after the rules that reference them are gone.
			for _, b := range old.Backends {
				if keep[AffinitySet(*old, b)] {
					tx.Flush(&knftables.Chain{Name: EndpointChain(*old, b)})
					tx.Delete(&knftables.Set{Name: AffinitySet(*old, b)})
				}
			}
		}
	}
	if new.AffinityTimeoutSeconds > 0 {
		for _, b := range new.Backends {
			ep := EndpointChain(*new, b)
			// "add set" on an existing set keeps its elements, so a backend that stays keeps
			// its clients (SPEC D3).
			tx.Add(affinitySet(*new, b))
			tx.Add(&knftables.Chain{Name: ep})
			tx.Flush(&knftables.Chain{Name: ep})
			tx.Add(&knftables.Rule{Chain: ep, Rule: "update @" + AffinitySet(*new, b) + " { ip saddr }"})
			tx.Add(&knftables.Rule{Chain: ep, Rule: dnatRule(new.Protocol, []gwstate.Backend{b})})
		}
		for _, r := range affinityRules(*new) {
			tx.Add(&knftables.Rule{Chain: idc, Rule: r})
		}
	} else {
		tx.Add(&knftables.Rule{Chain: idc, Rule: dnatRule(new.Protocol, new.Backends)})
	}
	tx.Add(&knftables.Element{Map: ServiceMap, Key: elementKey(*new), Value: elementValue(*new)})
}

// removeEndpoints deletes the endpoint chains and affinity sets of old's backends except those
// whose set name is in keep. The identity chain must already be flushed in tx.
func removeEndpoints(tx *knftables.Transaction, old gwstate.Identity, keep map[string]bool) {
	if old.AffinityTimeoutSeconds <= 0 {
		return
	}
	for _, b := range old.Backends {
		if keep[AffinitySet(old, b)] {
			continue
		}
		ep := &knftables.Chain{Name: EndpointChain(old, b)}
		tx.Flush(ep)
		tx.Delete(ep)
		tx.Delete(&knftables.Set{Name: AffinitySet(old, b)})
	}
}

// identityEqual reports whether two installed identities need the same kernel objects.
func identityEqual(a, b gwstate.Identity) bool {
	if a.AffinityTimeoutSeconds != b.AffinityTimeoutSeconds || len(a.Backends) != len(b.Backends) {
		return false
	}
	for i := range a.Backends {
		if a.Backends[i] != b.Backends[i] {
			return false
		}
	}
	return true
}
