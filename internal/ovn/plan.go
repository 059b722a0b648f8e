package ovn

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/ovn/nbdb"
)

// VIPPolicyPriority is kube-ovn's NatGatewayVipPolicyPriority: between the NAT gateway's own
// source policies (29200) and the north gateway (29250).
const VIPPolicyPriority = 29210

// The external_ids that mark a VIP policy of a gateway. A policy is this writer's only when it
// carries all three with these values.
const (
	ExternalIDVendor   = "vendor"
	ExternalIDGateway  = "vpc-nat-gateway"
	ExternalIDVIPRoute = "vipRoute"
	vendorKubeOVN      = "kube-ovn"
)

// ExternalIDExempt is the fourth external_id of the writer's policies. kube-ovn-controller's VPC
// reconcile deletes every policy of a custom VPC's router that is not in the Vpc's
// spec.policyRoutes, except those with a non-empty vpc-egress-gateway, a non-empty subnet or
// isU2ORoutePolicy=true (v1.16.2 pkg/controller/vpc.go:541-561,1038-1040). The value,
// ExemptValue(gw), can never equal a VpcEgressGateway key (kube-ovn's are "<namespace>/<name>";
// ':' is invalid in names, and it has no '/'), and kube-ovn selects that key's rows only by exact
// value (vpc_egress_gateway.go:727,1272-1295). It does not identify the writer's rows: rows
// without it (from older versions) are still the writer's and get it added in place.
const ExternalIDExempt = "vpc-egress-gateway"

// ExemptValue is the value of ExternalIDExempt on the policies of gateway gw.
func ExemptValue(gw string) string { return "vpcgw:" + gw }

// ErrRouterNotFound is wrapped by Sync when the router that should carry policies does not exist.
var ErrRouterNotFound = errors.New("logical router not found")

// VIPRoutes are one gateway's VIP policies as the model plans them (SPEC V1): the VPC's router
// (named like the Vpc), the gateway, the IPv4 VPC addresses of its initialized instances (the
// next hops) and the IPv4 addresses it serves. One type for the model and the writer.
type VIPRoutes = model.VIPRoutes

// desired is a validated VIPRoutes.
type desired struct {
	router, gateway string
	nextHops        []string // sorted, unique
	vips            []string // sorted, unique
	// exempt says whether policies carry ExternalIDExempt (always, except in a test that shows
	// what happens without it).
	exempt bool
}

// wantAny says whether d asks for any policy at all.
func (d desired) wantAny() bool { return len(d.vips) > 0 && len(d.nextHops) > 0 }

// wants says whether d asks for a policy of vip.
func (d desired) wants(vip string) bool {
	return vip != "" && d.wantAny() && slices.Contains(d.vips, vip)
}

// externalIDs are the external_ids a policy of d should have, given those it has (nil for a new
// one): the marks, plus any keys someone else added, which are kept.
func (d desired) externalIDs(have map[string]string) map[string]string {
	ext := maps.Clone(have)
	if ext == nil {
		ext = map[string]string{}
	}
	ext[ExternalIDVendor] = vendorKubeOVN
	ext[ExternalIDGateway] = d.gateway
	ext[ExternalIDVIPRoute] = "true"
	if d.exempt {
		ext[ExternalIDExempt] = ExemptValue(d.gateway)
	}
	return ext
}

// validate checks want and normalises it (sorted, de-duplicated addresses).
func validate(want VIPRoutes) (desired, error) {
	d := desired{router: want.Router, gateway: want.Gateway}
	if strings.TrimSpace(want.Router) == "" {
		return d, errors.New("ovn: VIP routes: empty router name")
	}
	if strings.TrimSpace(want.Gateway) == "" {
		return d, errors.New("ovn: VIP routes: empty gateway name")
	}
	var err error
	if d.nextHops, err = normIPv4s("next hop", want.NextHops); err != nil {
		return d, err
	}
	if d.vips, err = normIPv4s("VIP", want.VIPs); err != nil {
		return d, err
	}
	return d, nil
}

// normIPv4s parses, sorts numerically and de-duplicates IPv4 addresses.
func normIPv4s(what string, in []string) ([]string, error) {
	addrs := make([]netip.Addr, 0, len(in))
	for _, s := range in {
		a, err := parseIPv4(s)
		if err != nil {
			return nil, fmt.Errorf("ovn: VIP routes: %s %q: %w", what, s, err)
		}
		addrs = append(addrs, a)
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	addrs = slices.Compact(addrs)
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = a.String()
	}
	return out, nil
}

// parseIPv4 accepts a plain dotted-quad unicast IPv4 address.
func parseIPv4(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		return a, errors.New("not an IP address")
	case !a.Is4():
		return a, errors.New("not an IPv4 address (only IPv4 is supported)")
	case a.IsUnspecified(), a.IsLoopback(), a.IsMulticast(), a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return a, errors.New("not a unicast IPv4 address")
	}
	return a, nil
}

// vipMatch is the match of the policy of vip.
func vipMatch(vip string) string { return "ip4.dst == " + vip }

// matchVIP is the VIP a policy's match steers, or "" when the match is not of the form vipMatch.
func matchVIP(match string) string {
	f := strings.Fields(match)
	if len(f) != 3 || f[0] != "ip4.dst" || f[1] != "==" {
		return ""
	}
	a, err := parseIPv4(f[2])
	if err != nil {
		return ""
	}
	return a.String()
}

// isGatewayPolicy says whether p is a VIP policy of gateway gw.
func isGatewayPolicy(p *nbdb.LogicalRouterPolicy, gw string) bool {
	return p.ExternalIDs[ExternalIDVendor] == vendorKubeOVN &&
		p.ExternalIDs[ExternalIDGateway] == gw &&
		p.ExternalIDs[ExternalIDVIPRoute] == "true"
}

// isVIPPolicy says whether p is a VIP policy of any gateway.
func isVIPPolicy(p *nbdb.LogicalRouterPolicy) bool {
	return p.ExternalIDs[ExternalIDVendor] == vendorKubeOVN &&
		p.ExternalIDs[ExternalIDGateway] != "" &&
		p.ExternalIDs[ExternalIDVIPRoute] == "true"
}

// policyOK says whether p already is exactly the policy of vip for d (next hops compared as
// sets; with d.exempt it must carry the exemption).
func policyOK(p *nbdb.LogicalRouterPolicy, vip string, d desired) bool {
	have := slices.Clone(p.Nexthops)
	slices.Sort(have)
	want := slices.Clone(d.nextHops)
	slices.Sort(want)
	return p.Priority == VIPPolicyPriority && p.Action == nbdb.LogicalRouterPolicyActionReroute &&
		p.Match == vipMatch(vip) && p.Nexthop == nil && slices.Equal(have, want) &&
		(!d.exempt || p.ExternalIDs[ExternalIDExempt] == ExemptValue(d.gateway))
}

// plan is what a Sync changes.
type plan struct {
	target  string              // UUID of the router that carries the policies ("" when absent)
	creates []string            // VIPs to add
	updates map[string]update   // policy UUID -> its new content, rewritten in place
	deletes map[string][]string // router UUID -> policy UUIDs to remove from it
	// guard holds, for every router the plan touches, its policies column as read: the
	// transaction only commits if the column is still the same (no concurrent writer, no stale
	// cache), so a VIP is never written twice.
	guard map[string][]string
}

// update is a policy rewritten in place (same row: no moment without a route).
type update struct {
	vip string
	ext map[string]string // the full external_ids column
}

func (p *plan) empty() bool {
	return len(p.creates) == 0 && len(p.updates) == 0 && len(p.deletes) == 0
}

func (p *plan) String() string {
	n := 0
	for _, d := range p.deletes {
		n += len(d)
	}
	return fmt.Sprintf("add %v, update %d, delete %d", p.creates, len(p.updates), n)
}

// makePlan compares the desired policies of one gateway with the routers and policies as read.
func makePlan(d desired, routers []nbdb.LogicalRouter, policies map[string]*nbdb.LogicalRouterPolicy) (*plan, error) {
	owner, target, err := gatewayRouter(d, routers)
	if err != nil {
		return nil, err
	}
	b := planBuilder{
		plan:           &plan{target: target, updates: map[string]update{}, deletes: map[string][]string{}, guard: map[string][]string{}},
		routerPolicies: map[string][]string{},
	}
	for i := range routers {
		b.routerPolicies[routers[i].UUID] = routers[i].Policies
	}
	wanted := map[string]bool{}
	if d.wantAny() {
		for _, v := range d.vips {
			wanted[v] = true
		}
	}
	byVIP := b.sortOut(d, owner, policies, wanted)
	for _, vip := range d.vips {
		if !wanted[vip] {
			break
		}
		b.settle(d, vip, byVIP[vip])
	}
	for r := range b.deletes {
		slices.Sort(b.deletes[r])
	}
	return b.plan, nil
}

// gatewayRouter returns which router owns each policy (policy UUID -> router UUID) and the UUID
// of the gateway's router ("" when absent and no policy is wanted).
func gatewayRouter(d desired, routers []nbdb.LogicalRouter) (map[string]string, string, error) {
	owner := map[string]string{}
	var targets []string
	for i := range routers {
		r := &routers[i]
		if r.Name == d.router {
			targets = append(targets, r.UUID)
		}
		for _, pu := range r.Policies {
			owner[pu] = r.UUID
		}
	}
	switch {
	case len(targets) > 1:
		return nil, "", fmt.Errorf("ovn: %d logical routers are named %q", len(targets), d.router)
	case len(targets) == 1:
		return owner, targets[0], nil
	case d.wantAny():
		return nil, "", fmt.Errorf("ovn: gateway %s: router %q: %w", d.gateway, d.router, ErrRouterNotFound)
	}
	return owner, "", nil
}

// planBuilder is a plan being made.
type planBuilder struct {
	*plan
	routerPolicies map[string][]string // router UUID -> its policies column as read
}

// touch guards a write to router's policies with the column as read.
func (b planBuilder) touch(router string) { b.guard[router] = b.routerPolicies[router] }

func (b planBuilder) del(router, policy string) {
	b.deletes[router] = append(b.deletes[router], policy)
	b.touch(router)
}

// sortOut deletes the gateway's policies that are not wanted where they are (on another router,
// or for a VIP not wanted) and returns the others by VIP.
func (b planBuilder) sortOut(d desired, owner map[string]string, policies map[string]*nbdb.LogicalRouterPolicy, wanted map[string]bool) map[string][]*nbdb.LogicalRouterPolicy {
	byVIP := map[string][]*nbdb.LogicalRouterPolicy{}
	// Sorted UUIDs: the choice of the policy kept among duplicates is deterministic.
	for _, u := range slices.Sorted(maps.Keys(policies)) {
		pol := policies[u]
		router, ok := owner[u]
		if !ok || !isGatewayPolicy(pol, d.gateway) {
			continue // not referenced by any router (garbage collected) or not ours
		}
		vip := matchVIP(pol.Match)
		if router != b.target || vip == "" || !wanted[vip] {
			b.del(router, u)
			continue
		}
		byVIP[vip] = append(byVIP[vip], pol)
	}
	return byVIP
}

// settle plans one wanted VIP from its policies on the gateway's router: one created when there
// is none, else one kept (rewritten when not right) and the others deleted.
func (b planBuilder) settle(d desired, vip string, have []*nbdb.LogicalRouterPolicy) {
	if len(have) == 0 {
		b.creates = append(b.creates, vip)
		b.touch(b.target)
		return
	}
	keep := keptPolicy(d, vip, have)
	for _, pol := range have {
		if pol != keep {
			b.del(b.target, pol.UUID)
		}
	}
	if !policyOK(keep, vip, d) {
		b.updates[keep.UUID] = update{vip: vip, ext: d.externalIDs(keep.ExternalIDs)}
		b.touch(b.target)
	}
}

// keptPolicy chooses among a VIP's policies a right one, else one that only lacks the exemption
// (its route is right), else the first.
func keptPolicy(d desired, vip string, have []*nbdb.LogicalRouterPolicy) *nbdb.LogicalRouterPolicy {
	loose := d
	loose.exempt = false
	for _, want := range []desired{d, loose} {
		for _, pol := range have {
			if policyOK(pol, vip, want) {
				return pol
			}
		}
	}
	return have[0]
}
