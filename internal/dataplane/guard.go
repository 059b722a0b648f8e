package dataplane

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// The reply-direction guard (SPEC D9). When the gateway loses its conntrack (its Pod replaced,
// the agent restarted over a flushed table, a second instance taking the flow), the packet that
// resumes a connection is picked up as new (nf_conntrack_tcp_loose). A client's packet is
// DNATed again, to the same backend (PickHash), and the flow continues. A backend's packet that
// arrives first would be recorded backwards and un-NATed: the client (or, for a hairpin flow,
// the gateway itself) answers it with a reset and the connection dies. So such a segment (a new
// non-SYN TCP segment from a backend endpoint) is dropped before conntrack confirms it, in the
// forward and input hooks; toward an external client it is instead rewritten to the VIP and
// port the client talks to, when its endpoint belongs to exactly one external identity (one
// whose VIP is not a ClusterIP the gateway holds: only EIPs are reachable from outside). A
// dropped segment is retransmitted by the backend, and the client's next segment re-creates
// the entry the right way round.
//
//	set   vpcgw-endpoints   ipv4_addr . inet_service: the TCP endpoints of the served identities
//	map   vpcgw-reply-vips  ipv4_addr . inet_service : ipv4_addr . inet_service: an endpoint of
//	                        exactly one external TCP identity → that identity's VIP . port
//	chain vpcgw-guard       type filter hook forward priority -1:
//	                        ct state new tcp flags & syn == 0 oifname != "<vpc if>"
//	                          ip saddr . tcp sport @vpcgw-reply-vips accept
//	                        ct state new tcp flags & syn == 0 ip saddr . tcp sport @vpcgw-endpoints drop
//	chain vpcgw-guard-local type filter hook input priority -1: the drop rule
//	chain vpcgw-reply       type nat hook postrouting priority 99:
//	                        ct state new tcp flags & syn == 0 oifname != "<vpc if>"
//	                          snat ip to ip saddr . tcp sport map @vpcgw-reply-vips
const (
	// EndpointSet holds the TCP endpoints of the identities the agent serves.
	EndpointSet = "vpcgw-endpoints"
	// EndpointSetType is EndpointSet's type.
	EndpointSetType = "ipv4_addr . inet_service"
	// ReplyMap maps an endpoint of exactly one external TCP identity to its VIP and port.
	ReplyMap = "vpcgw-reply-vips"
	// ReplyMapType is ReplyMap's type.
	ReplyMapType = "ipv4_addr . inet_service : ipv4_addr . inet_service"
	// GuardChain drops (or lets through to ReplyChain) forwarded segments; GuardLocalChain
	// drops those addressed to the gateway (hairpin flows, SNATed to it).
	GuardChain      = "vpcgw-guard"
	GuardLocalChain = "vpcgw-guard-local"
	// GuardPriority runs before iptables' filter chains; any filter priority is before
	// conntrack confirms an entry (the end of postrouting and input).
	GuardPriority = "-1"
	// ReplyChain rewrites a let-through segment to its VIP and port. It runs at HairpinPriority,
	// before kube-ovn's iptables SNAT (100), which would otherwise bind the entry first.
	ReplyChain = "vpcgw-reply"

	// guardMatch is what the guard's rules match: a segment that conntrack sees as the first of
	// a connection but that is not a SYN (a RST creates no entry).
	guardMatch = "ct state new tcp flags & syn == 0"
	// GuardDropRule drops such a segment from a backend endpoint.
	GuardDropRule = guardMatch + " ip saddr . tcp sport @" + EndpointSet + " drop"
)

// GuardReplyRule lets a segment through to ReplyChain when it leaves toward an external client
// (not through the VPC interface) from an endpoint ReplyMap names.
func GuardReplyRule(vpcInterface string) string {
	return fmt.Sprintf("%s oifname != %q ip saddr . tcp sport @%s accept", guardMatch, vpcInterface, ReplyMap)
}

// ReplySNATRule rewrites such a segment's source to the VIP and port its client talks to.
func ReplySNATRule(vpcInterface string) string {
	return fmt.Sprintf("%s oifname != %q snat ip to ip saddr . tcp sport map @%s", guardMatch, vpcInterface, ReplyMap)
}

// guardIndex is the guard's view of the committed identities: per TCP endpoint, the identities
// that have it (as a backend or draining) and whether each is external. EndpointSet holds its
// keys, ReplyMap those with exactly one external identity. It is compact (SPEC P2): 10,000
// identities × 10 backends of their own are 100,000 endpoints.
type guardIndex map[endpointKey][]guardRef

// endpointKey is an IPv4 endpoint as one integer: the address, then the port.
type endpointKey uint64

func keyOf(ep gwstate.Backend) endpointKey {
	a := ep.IP.As4()
	return endpointKey(uint64(a[0])<<40 | uint64(a[1])<<32 | uint64(a[2])<<24 | uint64(a[3])<<16 | uint64(uint16(ep.Port)))
}

func (k endpointKey) backend() gwstate.Backend {
	return gwstate.Backend{IP: netip.AddrFrom4([4]byte{byte(k >> 40), byte(k >> 32), byte(k >> 24), byte(k >> 16)}), Port: int32(uint16(k))}
}

// guardRef is one (TCP) identity of an endpoint: its VIP and port.
type guardRef struct {
	vip      [4]byte
	port     uint16
	external bool
}

func refOf(id gwstate.Identity, external bool) guardRef {
	return guardRef{vip: id.VIP.As4(), port: uint16(id.Port), external: external}
}

func (r guardRef) same(o guardRef) bool { return r.vip == o.vip && r.port == o.port }

// guardElems is what the kernel holds for one endpoint: whether EndpointSet has it, and its
// ReplyMap value (valid when reply).
type guardElems struct {
	inSet, reply bool
	vip          gwstate.Backend
}

// elemsOf is what the kernel should hold for refs.
func elemsOf(refs []guardRef) guardElems {
	e := guardElems{inSet: len(refs) > 0}
	var ext *guardRef
	for i := range refs {
		if refs[i].external {
			if ext != nil {
				return e // two external identities: which VIP the client used is unknown
			}
			ext = &refs[i]
		}
	}
	if ext != nil {
		e.reply, e.vip = true, gwstate.Backend{IP: netip.AddrFrom4(ext.vip), Port: int32(ext.port)}
	}
	return e
}

// guardEndpoints are the endpoints of id the guard covers: all of a TCP identity's backends and
// draining backends, none of a UDP one.
func guardEndpoints(id gwstate.Identity) []gwstate.Backend {
	if id.Protocol != gwstate.TCP {
		return nil
	}
	return slices.Concat(id.Backends, id.Draining)
}

// guardPlan is a change of the guard index under construction: the new refs of every endpoint
// it touches, and their elements before.
type guardPlan struct {
	index  guardIndex
	next   map[endpointKey][]guardRef
	before map[endpointKey]guardElems
	// held is the set of ClusterIPs the plan was made with, of heldFrom; the agent records it
	// with the commit.
	held     map[netip.Addr]bool
	heldFrom []netip.Addr
}

func (g guardIndex) plan() *guardPlan {
	return &guardPlan{index: g, next: map[endpointKey][]guardRef{}, before: map[endpointKey]guardElems{}}
}

func (p *guardPlan) refs(k endpointKey) []guardRef {
	if r, ok := p.next[k]; ok {
		return r
	}
	r := p.index[k]
	p.before[k] = elemsOf(r)
	return r
}

// remove takes the committed identity id out of the plan.
func (p *guardPlan) remove(id gwstate.Identity) {
	ref := refOf(id, false)
	for _, ep := range guardEndpoints(id) {
		k := keyOf(ep)
		p.next[k] = slices.DeleteFunc(slices.Clone(p.refs(k)), ref.same)
	}
}

// add puts id into the plan; external says its VIP is reachable from outside the VPC.
func (p *guardPlan) add(id gwstate.Identity, external bool) {
	ref := refOf(id, external)
	for _, ep := range guardEndpoints(id) {
		k := keyOf(ep)
		refs := p.refs(k)
		if slices.ContainsFunc(refs, ref.same) {
			continue // a backend that is also draining (never sent) counts once
		}
		p.next[k] = append(slices.Clip(refs), ref)
	}
}

// write adds the operations that change the touched endpoints' elements, in endpoint order.
func (p *guardPlan) write(tx txn) {
	keys := make([]endpointKey, 0, len(p.next))
	for k := range p.next {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		writeGuardElems(tx, k.backend(), p.before[k], elemsOf(p.next[k]))
	}
}

// writeGuardElems adds the operations that change one endpoint's elements from was to want.
func writeGuardElems(tx txn, ep gwstate.Backend, was, want guardElems) {
	if was.reply && (!want.reply || was.vip != want.vip) {
		tx.deleteReply(ep)
	}
	switch {
	case was.inSet && !want.inSet:
		tx.deleteEndpoint(ep)
	case !was.inSet && want.inSet:
		tx.addEndpoint(ep)
	}
	if want.reply && (!was.reply || was.vip != want.vip) {
		tx.addReply(ep, want.vip)
	}
}

// commit makes the plan the index's content.
func (p *guardPlan) commit() {
	for k, refs := range p.next {
		if len(refs) == 0 {
			delete(p.index, k)
		} else {
			p.index[k] = refs
		}
	}
}

// buildGuard is the index of the identities ids (those with backends), where an identity is
// external unless its VIP is held (a ClusterIP).
func buildGuard(ids map[gwstate.IdentityKey]gwstate.Identity, held map[netip.Addr]bool) guardIndex {
	g := guardIndex{}
	p := g.plan()
	for _, id := range ids {
		p.add(id, !held[id.VIP])
	}
	p.commit()
	return g
}

func heldSet(clusterIPs []netip.Addr) map[netip.Addr]bool {
	held := make(map[netip.Addr]bool, len(clusterIPs))
	for _, ip := range clusterIPs {
		held[ip] = true
	}
	return held
}

// syncGuard makes EndpointSet and ReplyMap, as listed in inv, exactly what g says.
func syncGuard(tx txn, inv *inventory, g guardIndex) {
	listed := make(map[endpointKey]guardElems, len(inv.endpoints))
	for _, ep := range inv.endpoints {
		listed[keyOf(ep)] = guardElems{inSet: true}
	}
	for ep, vip := range inv.replies {
		k := keyOf(ep)
		e := listed[k]
		e.reply, e.vip = true, vip
		listed[k] = e
	}
	keys := make([]endpointKey, 0, len(listed)+len(g))
	for k := range listed {
		keys = append(keys, k)
	}
	for k := range g {
		if _, ok := listed[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		writeGuardElems(tx, k.backend(), listed[k], elemsOf(g[k]))
	}
}

// guardDrift describes the first difference between the listed guard elements and g, or "".
func guardDrift(inv *inventory, g guardIndex) string {
	if len(inv.endpoints) != len(g) {
		return fmt.Sprintf("set %s has %d endpoints, want %d", EndpointSet, len(inv.endpoints), len(g))
	}
	for _, ep := range inv.endpoints {
		if _, ok := g[keyOf(ep)]; !ok {
			return fmt.Sprintf("set %s holds %s, which no served identity has", EndpointSet, ep)
		}
	}
	replies := 0
	for k, refs := range g {
		want := elemsOf(refs)
		if !want.reply {
			continue
		}
		replies++
		if got, ok := inv.replies[k.backend()]; !ok || got != want.vip {
			return fmt.Sprintf("map %s: element %s is %v, want %s", ReplyMap, k.backend(), got, want.vip)
		}
	}
	if len(inv.replies) != replies {
		return fmt.Sprintf("map %s has %d elements, want %d", ReplyMap, len(inv.replies), replies)
	}
	return ""
}
