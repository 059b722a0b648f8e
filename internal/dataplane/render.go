// Package dataplane is the gateway agent: it converges the nftables table "ip kube-ovn" of one
// gateway instance to a desired gwstate.State (SPEC D1, D2, D3, D4, D8, D9, K8).
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
//	  set   src-<idhash>             (loadBalancerSourceRanges, SPEC N7) ipv4_addr, flags interval:
//	                                 the client prefixes that may reach the identity; the identity
//	                                 chain's first rule is then ip saddr != @src-<idhash> drop
//
//	set   vpcgw-identities  ipv4_addr . inet_proto . inet_service: the keys of the identities
//	                        whose objects the agent wrote (ownership, SPEC D8, K8)
//	set   vpcgw-vips        ipv4_addr: the VIPs the agent serves (hairpin scope, SPEC D4, K8)
//	chain vpcgw-hairpin     type nat hook postrouting priority srcnat - 1; one rule (SPEC D4):
//	                        iifname "<vpc if>" oifname "<vpc if>" ct status dnat
//	                        ct original ip daddr @vpcgw-vips masquerade
//
// The reply guard's objects (vpcgw-endpoints, vpcgw-reply-vips and the chains vpcgw-guard,
// vpcgw-guard-local and vpcgw-reply, SPEC D9) are described in guard.go.
//
// kube-ovn master writes into the same table with the same names (its share DNAT, #6858): the
// base chain, the map and dnat-<idhash> chains of its own identities. So the agent owns an
// identity's objects (element, dnat-, ep-, aff- and src- objects with that idhash) only when its key
// is in vpcgw-identities, which every transaction updates together with the objects: after a
// restart the kernel still says which identities are the agent's, and kube-ovn's are left
// alone. The agent also owns the base chain's rule (kube-ovn writes the same one), the map, its
// two sets and vpcgw-hairpin. Every rule the agent writes except the dispatch rule carries the
// comment "vpcgw", so that the drift check sees when someone else rewrote one of its chains.
// It never touches anything else, in this table or in any other.
package dataplane

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

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

	// OwnedSet holds the key of every identity whose objects the agent wrote (SPEC D8, K8).
	OwnedSet = "vpcgw-identities"
	// OwnedSetType is the type of OwnedSet: the key type of service-ips.
	OwnedSetType = "ipv4_addr . inet_proto . inet_service"
	// VIPSet holds the VIPs of the identities the agent serves: the hairpin rule's scope.
	VIPSet = "vpcgw-vips"
	// HairpinChain is the nat postrouting base chain holding the hairpin rule (SPEC D4).
	HairpinChain = "vpcgw-hairpin"
	// HairpinPriority is srcnat - 1: before iptables' nat POSTROUTING (100, where kube-ovn's
	// HAIRPIN_SNAT runs), so that the agent's identities always get the agent's SNAT, whichever
	// hook registered first (K8).
	HairpinPriority = "99"
	// RuleComment marks every rule the agent writes except the dispatch rule.
	RuleComment = "vpcgw"
	// legacyHairpinChain is where agents before the ownership set kept the hairpin rule
	// (priority 100, unscoped). kube-ovn never writes a chain of that name into this table
	// (its share DNAT writes only prerouting), so its presence means an older agent's table:
	// it is adopted by object names, as those agents did, and the chain is deleted.
	legacyHairpinChain = "postrouting"
	// DefaultVPCInterface is the gateway's interface into the VPC.
	DefaultVPCInterface = "eth0"

	identityPrefix = "dnat-"
	endpointPrefix = "ep-"
	affinityPrefix = "aff-"
	sourcePrefix   = "src-"
)

// IdentityHash is the 12 hex characters of md5("<vip>:<port>:<proto>") (the key's String) that
// name an identity's objects.
func IdentityHash(k gwstate.IdentityKey) string {
	sum := md5.Sum([]byte(k.String()))
	return hex.EncodeToString(sum[:])[:12]
}

// BackendHash is the 8 hex characters of md5("<ip>:<port>") (the backend's String) that name a
// backend's affinity objects.
func BackendHash(b gwstate.Backend) string {
	sum := md5.Sum([]byte(b.String()))
	return hex.EncodeToString(sum[:])[:8]
}

// IdentityChain is the name of the identity chain: "dnat-<12 hex>" (SPEC D2).
func IdentityChain(k gwstate.IdentityKey) string {
	return identityPrefix + IdentityHash(k)
}

// EndpointChain is the name of a backend's affinity chain: "ep-<idhash>-<bkhash>" (SPEC D3).
func EndpointChain(id gwstate.Identity, b gwstate.Backend) string {
	return endpointPrefix + IdentityHash(id.Key()) + "-" + BackendHash(b)
}

// AffinitySet is the name of a backend's affinity set: "aff-<idhash>-<bkhash>" (SPEC D3).
func AffinitySet(id gwstate.Identity, b gwstate.Backend) string {
	return affinityPrefix + IdentityHash(id.Key()) + "-" + BackendHash(b)
}

// SourceSet is the name of the set of client prefixes that may reach an identity with source
// ranges: "src-<idhash>" (SPEC N7).
func SourceSet(id gwstate.Identity) string {
	return sourcePrefix + IdentityHash(id.Key())
}

// sourcePrefixes are an identity's source ranges as the elements of its src- set: sorted by
// address, without the ranges that lie inside another (an interval set refuses overlapping
// elements, and a range inside another adds nothing). Adjacent ranges stay separate, as nft keeps
// them in a named set without auto-merge, so that both writers put the same elements into the
// kernel. The ranges are valid (gwstate.State.Validate).
func sourcePrefixes(ranges []string) []netip.Prefix {
	ps := make([]netip.Prefix, 0, len(ranges))
	for _, r := range ranges {
		ps = append(ps, netip.MustParsePrefix(r))
	}
	slices.SortFunc(ps, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits() // the wider first, so that the ranges inside it follow it
	})
	out := ps[:0]
	for _, p := range ps {
		if len(out) > 0 && out[len(out)-1].Contains(p.Addr()) {
			continue // canonical prefixes nest or are disjoint: p lies inside the last one kept
		}
		out = append(out, p)
	}
	return out
}

// owned reports whether a chain or set name has the form of an identity, endpoint, affinity or
// source object. Whether the object is the agent's depends on its idhash (objectHash, OwnedSet).
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
	case strings.HasPrefix(name, sourcePrefix):
		h := name[len(sourcePrefix):]
		return len(h) == 12 && isHex(h)
	case strings.HasPrefix(name, endpointPrefix), strings.HasPrefix(name, affinityPrefix):
		rest := name[strings.IndexByte(name, '-')+1:]
		return len(rest) == 12+1+8 && rest[12] == '-' && isHex(rest[:12]) && isHex(rest[13:])
	}
	return false
}

// objectHash is the idhash in the name of an identity, endpoint or affinity object.
func objectHash(name string) (string, bool) {
	if !owned(name) {
		return "", false
	}
	rest := name[strings.IndexByte(name, '-')+1:]
	return rest[:12], true
}

// keyHash is the idhash of an element key (vip, proto, port) as the kernel lists it.
func keyHash(key []string) string {
	if len(key) != 3 {
		return ""
	}
	port, err := strconv.Atoi(key[2])
	vip, verr := netip.ParseAddr(key[0])
	if err != nil || verr != nil {
		return ""
	}
	return IdentityHash(gwstate.IdentityKey{VIP: vip, Port: int32(port), Protocol: gwstate.Protocol(key[1])})
}

func elementKey(id gwstate.Identity) []string {
	return []string{id.VIP.String(), string(id.Protocol), strconv.Itoa(int(id.Port))}
}

func elementValue(id gwstate.Identity) []string {
	return []string{"goto " + IdentityChain(id.Key())}
}

// HairpinRule is the only rule of the hairpin chain (SPEC D4): a connection that came in from
// the VPC to a VIP the agent serves, was DNATed and goes back out into the VPC is masqueraded to
// the gateway's address on that interface, so that the backend's reply returns through the
// gateway. Clients that enter on another interface (net1: external clients) keep their source
// address. Connections to other addresses (kube-ovn's own iptables DNATs) are left to
// kube-ovn's HAIRPIN_SNAT (K8). The scope is the VIP, not (vip, proto, port): nft 1.0.6 cannot
// concatenate "ct original proto-dst", so a kube-ovn DNAT on another port of a VIP the agent
// serves is masqueraded by the agent too.
//
// The masquerade keeps the client's source port where it is free (no fully-random): a
// connection picked up again after the gateway lost its conntrack then reaches the backend
// with the 4-tuple the backend knows (SPEC D4, D9).
func HairpinRule(vpcInterface string) string {
	return fmt.Sprintf("iifname %q oifname %q ct status dnat ct original ip daddr @%s masquerade", vpcInterface, vpcInterface, VIPSet)
}

// Pick is how an identity chain chooses among several backends (SPEC D2, D3).
type Pick int

const (
	// PickHash is a pure function of the connection and the backend list: jhash over
	// saddr . sport . daddr . dport with PickSeed, modulo the number of backends. Every gateway
	// instance, and the same instance after any restart, sends a connection to the same
	// backend, so that a connection whose conntrack entry was lost continues (SPEC D9).
	PickHash Pick = iota
	// PickRandom is numgen random: upstream kube-ovn's ruleset, for those who want it exactly.
	PickRandom
)

// PickSeed is the jhash seed of PickHash. It is part of the data plane's contract: changing it
// moves every connection that loses its conntrack entry to another backend, so it is the same
// on every instance, across restarts and across versions. (The kernel draws a random seed
// when none is given.)
const PickSeed = 0x76706367 // "vpcg"

// pickKey is the hashed part of PickHash in nft syntax.
const pickKey = "jhash ip saddr . th sport . ip daddr . th dport"

// ParsePick reads a pick by its flag name: "hash" or "random".
func ParsePick(s string) (Pick, error) {
	switch s {
	case "hash":
		return PickHash, nil
	case "random":
		return PickRandom, nil
	}
	return 0, fmt.Errorf("unknown pick %q (supported: hash, random)", s)
}

// String is the pick's flag name.
func (p Pick) String() string {
	if p == PickRandom {
		return "random"
	}
	return "hash"
}

// expr is the pick among n in nft syntax, before "map" or "vmap".
func (p Pick) expr(n int) string {
	if p == PickRandom {
		return fmt.Sprintf("numgen random mod %d", n)
	}
	return fmt.Sprintf("%s mod %d seed 0x%x", pickKey, n, PickSeed)
}

// ruleKind is the shape of one rule the agent writes.
type ruleKind int

const (
	ruleDispatch       ruleKind = iota // ip daddr . meta l4proto . th dport vmap @service-ips
	ruleHairpin                        // HairpinRule(iface)
	ruleDNAT                           // dnat to one backend, or a pick among several
	ruleAffinityCheck                  // ip saddr @<set> goto <chain>
	ruleAffinityPick                   // <pick> mod N vmap { i : goto <chain i> }
	ruleAffinityUpdate                 // update @<set> { ip saddr }
	ruleFirewall                       // ip saddr != @<set> drop (SPEC N7)
	ruleGuardReply                     // GuardReplyRule(iface) (SPEC D9)
	ruleGuardDrop                      // GuardDropRule
	ruleReplySNAT                      // ReplySNATRule(iface)
)

// rule is one rule in a structured form that both writers (nft text and netlink) render.
type rule struct {
	kind     ruleKind
	iface    string           // ruleHairpin
	proto    gwstate.Protocol // ruleDNAT
	backends []gwstate.Backend
	set      string   // ruleAffinityCheck, ruleAffinityUpdate, ruleFirewall
	chains   []string // ruleAffinityCheck (one), ruleAffinityPick
	// pick chooses among several backends (ruleDNAT) or chains (ruleAffinityPick). The writers
	// set it from the agent's configuration (withPick).
	pick Pick
}

// withPick is r with the pick p where r picks.
func (r rule) withPick(p Pick) rule {
	if r.kind == ruleDNAT || r.kind == ruleAffinityPick {
		r.pick = p
	}
	return r
}

// marked reports whether the rule carries RuleComment: all but the dispatch rule, which
// kube-ovn's share DNAT rewrites identically whenever it adds an identity.
func (r rule) marked() bool { return r.kind != ruleDispatch }

// ruleCount is the number of rules in an installed identity's chain: the firewall rule when
// it has source ranges, then the affinity rules or the DNAT rule.
func ruleCount(id gwstate.Identity) int {
	n := 1
	if id.AffinityTimeoutSeconds > 0 {
		n = len(id.Backends) + 1
	}
	if len(id.SourceRanges) > 0 {
		n++
	}
	return n
}

// text is the rule in nft syntax, as knftables sends it and as the golden tests show it.
func (r rule) text() string {
	switch r.kind {
	case ruleDispatch:
		return DispatchRule
	case ruleHairpin:
		return HairpinRule(r.iface)
	case ruleDNAT:
		if len(r.backends) == 1 {
			return fmt.Sprintf("meta l4proto %s dnat ip to %s:%d", r.proto, r.backends[0].IP, r.backends[0].Port)
		}
		var b strings.Builder
		fmt.Fprintf(&b, "meta l4proto %s dnat ip addr . port to %s map { ", r.proto, r.pick.expr(len(r.backends)))
		for i, be := range r.backends {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%d : %s . %d", i, be.IP, be.Port)
		}
		b.WriteString(" }")
		return b.String()
	case ruleAffinityCheck:
		return fmt.Sprintf("ip saddr @%s goto %s", r.set, r.chains[0])
	case ruleAffinityPick:
		var b strings.Builder
		fmt.Fprintf(&b, "%s vmap { ", r.pick.expr(len(r.chains)))
		for i, c := range r.chains {
			if i > 0 {
				b.WriteString(" , ") // spaced so that knftables' Fake can check the goto target
			}
			fmt.Fprintf(&b, "%d : goto %s", i, c)
		}
		b.WriteString(" }")
		return b.String()
	case ruleAffinityUpdate:
		return "update @" + r.set + " { ip saddr }"
	case ruleFirewall:
		return "ip saddr != @" + r.set + " drop"
	}
	return r.guardText()
}

// guardText is the text of the guard's rules (SPEC D9).
func (r rule) guardText() string {
	switch r.kind {
	case ruleGuardReply:
		return GuardReplyRule(r.iface)
	case ruleGuardDrop:
		return GuardDropRule
	case ruleReplySNAT:
		return ReplySNATRule(r.iface)
	}
	panic(fmt.Sprintf("unknown rule kind %d", r.kind))
}

func dnatRule(proto gwstate.Protocol, backends []gwstate.Backend) rule {
	return rule{kind: ruleDNAT, proto: proto, backends: backends}
}

// affinityRules are the identity chain's rules in ClientIP mode: a known client goes to its
// backend, everyone else is spread over the endpoint chains by the pick (SPEC D3).
func affinityRules(id gwstate.Identity) []rule {
	rules := make([]rule, 0, len(id.Backends)+1)
	chains := make([]string, 0, len(id.Backends))
	for _, b := range id.Backends {
		ep := EndpointChain(id, b)
		chains = append(chains, ep)
		rules = append(rules, rule{kind: ruleAffinityCheck, set: AffinitySet(id, b), chains: []string{ep}})
	}
	return append(rules, rule{kind: ruleAffinityPick, chains: chains})
}

// txn is one atomic transaction under construction, in the vocabulary of the ruleset. The
// knftables writer renders it as nft text (tests, the `nft -f` path, showing the ruleset); the
// netlink writer sends the same operations as one netlink batch (the hot path).
type txn interface {
	addTable()
	// addBaseChain adds a base chain of type typ ("nat" or "filter") at hook ("prerouting",
	// "postrouting", "forward" or "input") with policy accept.
	addBaseChain(name, typ, hook, priority string)
	addServiceMap()
	// addOwnershipSets adds OwnedSet and VIPSet.
	addOwnershipSets()
	addChain(name string)
	flushChain(name string)
	deleteChain(name string)
	// deleteTable deletes the table and everything in it (a release, SPEC O4).
	deleteTable()
	addAffinitySet(name string, timeout time.Duration)
	// setSourceRanges adds the interval set name (if missing) and makes its elements exactly
	// prefixes (flush, then add: atomic with the rest of the transaction).
	setSourceRanges(name string, prefixes []netip.Prefix)
	deleteSet(name string)
	addRule(chain string, r rule)
	// addElement and deleteElement add and delete the identity's service-ips element.
	addElement(id gwstate.Identity)
	deleteElement(id gwstate.Identity)
	// deleteElementKey deletes a service-ips element found in the kernel by its key.
	deleteElementKey(key []string)
	// addOwnedKey and deleteOwnedKey add and delete a key (vip, proto, port) of OwnedSet.
	addOwnedKey(key []string)
	deleteOwnedKey(key []string)
	// addVIP and deleteVIP add and delete an element of VIPSet.
	addVIP(vip netip.Addr)
	deleteVIP(vip netip.Addr)
	// addGuardSets adds EndpointSet and ReplyMap (SPEC D9).
	addGuardSets()
	// addEndpoint and deleteEndpoint add and delete an element of EndpointSet.
	addEndpoint(ep gwstate.Backend)
	deleteEndpoint(ep gwstate.Backend)
	// addReply and deleteReply add and delete ReplyMap's element for the endpoint ep, whose
	// value is the VIP and port of its one external identity.
	addReply(ep, vip gwstate.Backend)
	deleteReply(ep gwstate.Backend)
	// size is the number of operations so far.
	size() int
	// identity says that the operations that follow are id's (nil: shared objects), so that a
	// refusal by the kernel can be put on the identities whose operations failed (SPEC D8).
	identity(id *gwstate.Identity)
}

// writeBase adds the table, the map, the ownership and guard sets, and the base chains with
// their rules.
func writeBase(tx txn, vpcInterface string) {
	addBaseObjects(tx)
	for _, bc := range baseChains(vpcInterface) {
		tx.flushChain(bc.name)
		for _, r := range bc.rules {
			tx.addRule(bc.name, r)
		}
	}
}

// addBaseObjects adds the table, its sets and maps and its base chains without their rules, in
// the order writeBase creates them (a staged sync creates them first, with the same order in
// `nft list`).
func addBaseObjects(tx txn) {
	tx.addTable()
	tx.addServiceMap()
	tx.addOwnershipSets()
	tx.addGuardSets()
	for _, bc := range baseChains(DefaultVPCInterface) {
		tx.addBaseChain(bc.name, bc.typ, bc.hook, bc.priority)
	}
}

// baseChain is one of the agent's base chains and its rules.
type baseChain struct {
	name, typ, hook, priority string
	rules                     []rule
}

// baseChains are the agent's base chains: dispatch, hairpin SNAT (SPEC D1, D4) and the reply
// guard (D9).
func baseChains(vpcInterface string) []baseChain {
	return []baseChain{
		{BaseChain, "nat", "prerouting", BaseChainPriority, []rule{{kind: ruleDispatch}}},
		{HairpinChain, "nat", "postrouting", HairpinPriority, []rule{{kind: ruleHairpin, iface: vpcInterface}}},
		{GuardChain, "filter", "forward", GuardPriority, []rule{{kind: ruleGuardReply, iface: vpcInterface}, {kind: ruleGuardDrop}}},
		{GuardLocalChain, "filter", "input", GuardPriority, []rule{{kind: ruleGuardDrop}}},
		{ReplyChain, "nat", "postrouting", HairpinPriority, []rule{{kind: ruleReplySNAT, iface: vpcInterface}}},
	}
}

// writeIdentity adds the operations that take the kernel from old to next for one identity. old
// is nil when the identity is not (known to be) installed; next is nil when it must go. Both,
// when set, have at least one backend. Objects are flushed before they are deleted and
// references are removed before their targets, so the kernel accepts the order.
func writeIdentity(tx txn, old, next *gwstate.Identity) {
	defer tx.identity(nil)
	if next == nil {
		tx.identity(old)
		idc := IdentityChain(old.Key())
		tx.deleteElement(*old)
		tx.flushChain(idc)
		tx.deleteChain(idc)
		removeEndpoints(tx, *old, nil)
		if len(old.SourceRanges) > 0 {
			tx.deleteSet(SourceSet(*old))
		}
		tx.deleteOwnedKey(elementKey(*old))
		return
	}
	writeObjects(tx, old, next)
	tx.addElement(*next)
}

// addReadyElement adds the element of an identity whose objects are staged already.
func addReadyElement(tx txn, id gwstate.Identity) {
	tx.identity(&id)
	tx.addElement(id)
	tx.identity(nil)
}

// writeObjects is writeIdentity(old, next) without the service-ips element: the identity chain
// and, with affinity, the endpoint chains and sets. A staged cold sync writes these ahead, while
// no element points at the identity chain yet, so they carry no traffic. The key of an
// identity not known to be installed (old nil) goes into OwnedSet first, so that objects staged
// by an agent that died are still known as its own; an installed one's is there already.
func writeObjects(tx txn, old, next *gwstate.Identity) {
	tx.identity(next)
	idc := IdentityChain(next.Key())
	if old == nil {
		tx.addOwnedKey(elementKey(*next))
	}
	tx.addChain(idc)
	tx.flushChain(idc)
	// The source set is written before the rule that references it; one that is no longer
	// needed goes after the flush that removed the rule. (A full sync, old nil, deletes a
	// leftover one as stale.)
	if len(next.SourceRanges) > 0 {
		tx.setSourceRanges(SourceSet(*next), sourcePrefixes(next.SourceRanges))
	} else if old != nil && len(old.SourceRanges) > 0 {
		tx.deleteSet(SourceSet(*old))
	}
	if old != nil && old.AffinityTimeoutSeconds > 0 {
		removeOldEndpoints(tx, *old, next)
	}
	if next.AffinityTimeoutSeconds > 0 {
		writeEndpoints(tx, next)
	}
	for _, r := range identityRules(*next) {
		tx.addRule(idc, r)
	}
}

// identityRules are the rules of an identity's chain, in order. The firewall (SPEC N7) is the
// first: a packet from outside the ranges is dropped before any affinity lookup or DNAT. The
// chain is reached only by the first packet of a connection (nat hook); flows already
// established from a source the ranges no longer allow are deleted from conntrack after the
// commit (flowTarget). Then the affinity rules (SPEC D3) or the DNAT rule (D2).
func identityRules(id gwstate.Identity) []rule {
	var rules []rule
	if len(id.SourceRanges) > 0 {
		rules = append(rules, rule{kind: ruleFirewall, set: SourceSet(id)})
	}
	if id.AffinityTimeoutSeconds > 0 {
		return append(rules, affinityRules(id)...)
	}
	return append(rules, dnatRule(id.Protocol, id.Backends))
}

// endpointRules are the rules of a backend's endpoint chain (SPEC D3): record the client, DNAT.
func endpointRules(id gwstate.Identity, b gwstate.Backend) []rule {
	return []rule{
		{kind: ruleAffinityUpdate, set: AffinitySet(id, b)},
		dnatRule(id.Protocol, []gwstate.Backend{b}),
	}
}

// removeOldEndpoints removes the endpoint chains and affinity sets of old (which has affinity)
// that next does not keep, and recreates the kept sets when the timeout changes.
func removeOldEndpoints(tx txn, old gwstate.Identity, next *gwstate.Identity) {
	var keep map[string]bool
	if next.AffinityTimeoutSeconds > 0 {
		keep = make(map[string]bool, len(next.Backends))
		for _, b := range next.Backends {
			keep[AffinitySet(*next, b)] = true
		}
	}
	removeEndpoints(tx, old, keep)
	if next.AffinityTimeoutSeconds <= 0 || next.AffinityTimeoutSeconds == old.AffinityTimeoutSeconds {
		return
	}
	// Not every kernel updates the timeout of an existing set on "add set": recreate the sets
	// of the backends that stay (their entries are lost, as with any change of the timeout),
	// after the rules that reference them are gone.
	for _, b := range old.Backends {
		if keep[AffinitySet(old, b)] {
			tx.flushChain(EndpointChain(old, b))
			tx.deleteSet(AffinitySet(old, b))
		}
	}
}

// writeEndpoints writes the affinity set and the endpoint chain of each backend of an identity
// with affinity; the identity chain's affinity rules refer to them.
func writeEndpoints(tx txn, next *gwstate.Identity) {
	timeout := time.Duration(next.AffinityTimeoutSeconds) * time.Second
	for _, b := range next.Backends {
		ep := EndpointChain(*next, b)
		// "add set" on an existing set keeps its elements, so a backend that stays keeps
		// its clients (SPEC D3).
		tx.addAffinitySet(AffinitySet(*next, b), timeout)
		tx.addChain(ep)
		tx.flushChain(ep)
		for _, r := range endpointRules(*next, b) {
			tx.addRule(ep, r)
		}
	}
}

// objectNames lists the chains and sets an installed identity owns.
func objectNames(id gwstate.Identity) (chains, sets []string) {
	chains = []string{IdentityChain(id.Key())}
	if id.AffinityTimeoutSeconds > 0 {
		for _, b := range id.Backends {
			chains = append(chains, EndpointChain(id, b))
			sets = append(sets, AffinitySet(id, b))
		}
	}
	if len(id.SourceRanges) > 0 {
		sets = append(sets, SourceSet(id))
	}
	return chains, sets
}

// removeEndpoints deletes the endpoint chains and affinity sets of old's backends except those
// whose set name is in keep. The identity chain must already be flushed in tx.
func removeEndpoints(tx txn, old gwstate.Identity, keep map[string]bool) {
	if old.AffinityTimeoutSeconds <= 0 {
		return
	}
	for _, b := range old.Backends {
		if keep[AffinitySet(old, b)] {
			continue
		}
		ep := EndpointChain(old, b)
		tx.flushChain(ep)
		tx.deleteChain(ep)
		tx.deleteSet(AffinitySet(old, b))
	}
}

// identityEqual reports whether two installed identities need the same kernel objects
// (gwstate.Identity.Equal without comparing the keys, which the callers matched already). Draining
// backends are not compared: they get no rule (SPEC L11), only their flows are kept.
func identityEqual(a, b gwstate.Identity) bool {
	if a.AffinityTimeoutSeconds != b.AffinityTimeoutSeconds || len(a.Backends) != len(b.Backends) ||
		!slices.Equal(a.SourceRanges, b.SourceRanges) {
		return false
	}
	for i := range a.Backends {
		if a.Backends[i] != b.Backends[i] {
			return false
		}
	}
	return true
}

// sameIdentity reports whether an identity of a message is unchanged against its committed
// version: identityEqual, and the same draining backends. A draining change writes nothing to
// the kernel, but the agent must book it, or it never learns that a draining backend left and
// its UDP flows must go (SPEC L11, D6).
func sameIdentity(a, b gwstate.Identity) bool {
	return identityEqual(a, b) && slices.Equal(a.Draining, b.Draining)
}
