package ovn

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/ovn-kubernetes/libovsdb/client"

	"github.com/vpcgw/vpcgw/internal/ovn/nbdb"
)

// OVN's logical router looks a packet's route up (lr_in_ip_routing) before it applies the
// router's policies (lr_in_policy). A VIP the router has no route for, or whose route discards
// it, is dropped before its 29210 policy is reached (SPEC V3; measured with OVN 23.03, see
// ../shared/reference/ovn-datapath-here.md). A route to any other next hop is fine: the policy
// then overrides the next hop. This file reads a router's routes from the writer's NB cache and
// decides, per VIP, whether OVN carries it to the policy stage. vpcgw only reports a VIP it would
// drop: the routes are the Vpc's (kube-ovn writes them from spec.staticRoutes and deletes those
// with its mark that the Vpc does not list), so the fix is the user's.

// NextHopDiscard is the next hop of a static route that drops what it matches.
const NextHopDiscard = "discard"

// Route is one IPv4 route of a logical router as OVN's routing stage sees it: a static route
// (Logical_Router_Static_Route) or a connected network of one of its ports.
type Route struct {
	// Prefix is the masked ip_prefix, or the port's network.
	Prefix netip.Prefix
	// Source: a src-ip route (it matches the packet's source address, not its destination).
	Source bool
	// Connected: a network of router port Port; it has no next hop.
	Connected bool
	Port      string
	// NextHop of a static route; NextHopDiscard drops.
	NextHop string
	// RouteTable of a static route; "" is the main table.
	RouteTable string
}

// Discards says whether the route drops what it matches.
func (r Route) Discards() bool { return !r.Connected && r.NextHop == NextHopDiscard }

func (r Route) String() string {
	switch {
	case r.Connected:
		return fmt.Sprintf("%s connected (port %s)", r.Prefix, r.Port)
	case r.Source:
		return fmt.Sprintf("%s src-ip via %s", r.Prefix, r.NextHop)
	}
	return fmt.Sprintf("%s via %s", r.Prefix, r.NextHop)
}

// Priorities of ovn-northd's routing flows for dst-ip routes: prefix length × 3, plus 2 for a
// connected network and 1 for a static route, so a connected network wins over a static route of
// the same length.
const (
	prioPerBit    = 3
	prioStatic    = 1
	prioConnected = 2
)

// Routed says whether OVN carries a packet to vip through the router with routes to its policy
// stage, and if not, why ("no route covers <vip>", "route <prefix> discards it"). It judges by
// the OVN kube-ovn v1.16.2 ships, whose ovn-northd carries kube-ovn's patch "modify src route
// priority" (kube-ovn dist/images/patches/9ee66bd9...): a src-ip route gets priority 1 (2 for a
// /32), below every dst-ip route but 0.0.0.0/0, whatever its length. The rules:
//
//   - only the main route table (route_table ""): a route of another table applies only to
//     packets that enter by a port bound to that table, and a VIP must work from every port;
//   - dst-ip routes and connected networks match by longest prefix, a connected network winning
//     a tie (as ovn-northd's priorities do);
//   - the best match with next hop "discard" drops. When several static routes of the best
//     length match (ECMP) and one of them discards, the VIP counts as dropped: OVN's choice is
//     then not reliable;
//   - when no dst-ip route or connected network matches, the src-ip routes decide: kube-ovn writes
//     one for each overlay Subnet of a custom Vpc (its CIDR via the Subnet's gateway), so a client
//     of the Vpc's Subnets is routed by it to the policy stage, which reroutes the VIP. The VIP
//     counts as carried when a src-ip route that does not discard exists; which clients it
//     carries depends on their addresses, which the check does not know.
//
// Upstream OVN (Debian's 23.03 among them) ranks src-ip routes by prefix length with the dst-ip
// ones instead, so there a Subnet's src-ip /24 takes every packet of its clients, VIPs included;
// the policy stage still reroutes a VIP, so the VIP is carried there too.
func Routed(routes []Route, vip netip.Addr) (ok bool, why string) {
	if !vip.Is4() {
		return false, fmt.Sprintf("%s is not an IPv4 address", vip)
	}
	best, bySource := bestRoutes(routes, vip)
	if len(best) > 0 {
		for _, r := range best {
			if r.Discards() {
				return false, "route " + r.Prefix.String() + " discards it"
			}
		}
		return true, ""
	}
	for _, r := range bySource {
		if !r.Discards() {
			return true, ""
		}
	}
	if len(bySource) > 0 {
		return false, "no route covers " + vip.String() + " (its src-ip routes discard)"
	}
	return false, "no route covers " + vip.String()
}

// bestRoutes returns the dst-ip routes of the main table that match vip with the highest
// priority (OVN's: the longest prefix, connected before static), and every IPv4 src-ip route.
func bestRoutes(routes []Route, vip netip.Addr) (best, bySource []Route) {
	bestPrio := -1
	for _, r := range routes {
		if r.RouteTable != "" || !r.Prefix.IsValid() || !r.Prefix.Addr().Is4() {
			continue
		}
		if r.Source {
			bySource = append(bySource, r)
			continue
		}
		if !r.Prefix.Contains(vip) {
			continue
		}
		prio := r.Prefix.Bits()*prioPerBit + prioStatic
		if r.Connected {
			prio = r.Prefix.Bits()*prioPerBit + prioConnected
		}
		switch {
		case prio > bestPrio:
			bestPrio, best = prio, []Route{r}
		case prio == bestPrio:
			best = append(best, r)
		}
	}
	return best, bySource
}

// ErrCacheBehind is wrapped by RouterRoutes when the NB cache holds a router that references a
// route or port it does not hold yet (an update arriving): read again at the next change.
var ErrCacheBehind = errors.New("NB cache not caught up")

// RouterRoutes reads the IPv4 routes of logical router name from the writer's NB cache (no round
// trip to the server): its static routes of every route table and its ports' networks as
// connected routes. Addresses that do not parse (and IPv6 ones) are left out. A missing router
// wraps ErrRouterNotFound.
func (w *Writer) RouterRoutes(ctx context.Context, name string) ([]Route, error) {
	if w.c.CurrentEndpoint() == "" {
		// The cache may be stale until the reconnect reloaded it.
		return nil, fmt.Errorf("ovn: routes of router %q: %w", name, client.ErrNotConnected)
	}
	var routers []nbdb.LogicalRouter
	if err := w.c.WhereCache(func(lr *nbdb.LogicalRouter) bool { return lr.Name == name }).List(ctx, &routers); err != nil {
		return nil, fmt.Errorf("ovn: list routers: %w", err)
	}
	switch len(routers) {
	case 0:
		return nil, fmt.Errorf("ovn: routes of router %q: %w", name, ErrRouterNotFound)
	case 1:
	default:
		return nil, fmt.Errorf("ovn: %d logical routers are named %q", len(routers), name)
	}
	lr := routers[0]
	var out []Route
	for _, u := range lr.StaticRoutes {
		sr := &nbdb.LogicalRouterStaticRoute{UUID: u}
		if err := w.c.Get(ctx, sr); err != nil {
			return nil, fmt.Errorf("ovn: router %q: static route %s: %w (%w)", name, u, ErrCacheBehind, err)
		}
		if r, ok := staticRoute(sr); ok {
			out = append(out, r)
		}
	}
	for _, u := range lr.Ports {
		p := &nbdb.LogicalRouterPort{UUID: u}
		if err := w.c.Get(ctx, p); err != nil {
			return nil, fmt.Errorf("ovn: router %q: port %s: %w (%w)", name, u, ErrCacheBehind, err)
		}
		out = append(out, connectedRoutes(p)...)
	}
	return out, nil
}

// staticRoute is sr as a Route; false for an IPv6 or malformed prefix.
func staticRoute(sr *nbdb.LogicalRouterStaticRoute) (Route, bool) {
	p, ok := parsePrefix(sr.IPPrefix)
	if !ok {
		return Route{}, false
	}
	// An absent policy is dst-ip (the schema's default).
	src := sr.Policy != nil && *sr.Policy == nbdb.LogicalRouterStaticRoutePolicySrcIP
	return Route{Prefix: p, Source: src, NextHop: sr.Nexthop, RouteTable: sr.RouteTable}, true
}

// connectedRoutes are the IPv4 networks of router port p ("10.0.1.1/24" gives 10.0.1.0/24).
func connectedRoutes(p *nbdb.LogicalRouterPort) []Route {
	var out []Route
	for _, n := range p.Networks {
		if pfx, ok := parsePrefix(n); ok {
			out = append(out, Route{Prefix: pfx, Connected: true, Port: p.Name})
		}
	}
	return out
}

// parsePrefix parses an IPv4 prefix as OVN stores it: "a.b.c.d/len" (host bits allowed, as in a
// port's network) or a bare address (a /32). The result is masked.
func parsePrefix(s string) (netip.Prefix, bool) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil || !a.Is4() {
			return netip.Prefix{}, false
		}
		return netip.PrefixFrom(a, 32), true
	}
	p, err := netip.ParsePrefix(s)
	if err != nil || !p.Addr().Is4() {
		return netip.Prefix{}, false
	}
	return p.Masked(), true
}
