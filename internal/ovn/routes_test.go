// covers: V3

package ovn

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vpcgw/vpcgw/internal/ovn/nbdb"
)

func dst(prefix, nextHop string) Route {
	return Route{Prefix: netip.MustParsePrefix(prefix), NextHop: nextHop}
}

func src(prefix, nextHop string) Route {
	return Route{Prefix: netip.MustParsePrefix(prefix), Source: true, NextHop: nextHop}
}

func connected(prefix, port string) Route {
	return Route{Prefix: netip.MustParsePrefix(prefix), Connected: true, Port: port}
}

func inTable(r Route, table string) Route { r.RouteTable = table; return r }

// Which VIPs OVN carries to the policy stage, by the rules of Routed: OVN's routing stage runs
// before its policies, so a VIP without a route, or whose best route discards, never meets its
// 29210 policy.
// covers: V3
func TestRouted(t *testing.T) {
	const vip = "10.96.0.10"
	for _, tc := range []struct {
		name   string
		routes []Route
		vip    string
		why    string // "" when routed
	}{
		{name: "no routes at all", vip: vip, why: "no route covers 10.96.0.10"},
		{name: "only the subnets (connected)", routes: []Route{connected("10.0.1.0/24", "vpc-subnet")}, vip: vip,
			why: "no route covers 10.96.0.10"},
		{name: "default route to the gateway", routes: []Route{dst("0.0.0.0/0", "10.0.1.254")}, vip: vip},
		{name: "a route to another next hop: the policy overrides it", routes: []Route{dst("10.96.0.0/12", "10.0.1.9")}, vip: vip},
		{name: "the Service CIDR discarded", routes: []Route{dst("0.0.0.0/0", "10.0.1.254"), dst("10.96.0.0/12", "discard")}, vip: vip,
			why: "route 10.96.0.0/12 discards it"},
		{name: "a longer route beats the discard", routes: []Route{dst("10.96.0.0/12", "discard"), dst("10.96.0.10/32", "10.0.1.254")}, vip: vip},
		{name: "a discard beside it does not matter", routes: []Route{dst("0.0.0.0/0", "10.0.1.254"), dst("10.97.0.0/16", "discard")}, vip: vip},
		{name: "a discarded default", routes: []Route{dst("0.0.0.0/0", "discard")}, vip: vip, why: "route 0.0.0.0/0 discards it"},
		{name: "connected wins over a static route of the same length", vip: "10.0.1.20",
			routes: []Route{dst("10.0.1.0/24", "discard"), connected("10.0.1.1/24", "vpc-subnet")}},
		{name: "a longer static route beats a connected network", vip: "10.0.1.20",
			routes: []Route{dst("10.0.1.16/28", "discard"), connected("10.0.1.0/24", "vpc-subnet")}, why: "route 10.0.1.16/28 discards it"},
		{name: "ECMP with a discard counts as dropped", routes: []Route{dst("10.96.0.0/12", "10.0.1.254"), dst("10.96.0.0/12", "discard")}, vip: vip,
			why: "route 10.96.0.0/12 discards it"},
		{name: "ECMP to two next hops", routes: []Route{dst("0.0.0.0/0", "10.0.1.254"), dst("0.0.0.0/0", "10.0.1.253")}, vip: vip},
		{name: "another route table does not count", routes: []Route{inTable(dst("0.0.0.0/0", "10.0.1.254"), "rtb-a")}, vip: vip,
			why: "no route covers 10.96.0.10"},
		{name: "another table's discard does not count", routes: []Route{dst("0.0.0.0/0", "10.0.1.254"), inTable(dst("10.96.0.0/12", "discard"), "rtb-a")}, vip: vip},
		{name: "src-ip 0.0.0.0/0 counts when nothing else matches", routes: []Route{src("0.0.0.0/0", "10.0.1.254")}, vip: vip},
		{name: "src-ip 0.0.0.0/0 loses to a dst-ip route", routes: []Route{src("0.0.0.0/0", "10.0.1.254"), dst("10.96.0.0/12", "discard")}, vip: vip,
			why: "route 10.96.0.0/12 discards it"},
		{name: "src-ip 0.0.0.0/0 that discards", routes: []Route{src("0.0.0.0/0", "discard")}, vip: vip, why: "no route covers 10.96.0.10 (its src-ip routes discard)"},
		// kube-ovn's src-ip route of a Subnet (its CIDR via its gateway) carries the Subnet's
		// clients to the policy stage when no dst-ip route covers the VIP (kube-ovn's OVN ranks
		// src-ip routes below dst-ip ones).
		{name: "a Subnet's src-ip route carries its clients", routes: []Route{src("10.0.1.0/24", "10.0.1.1"), connected("10.0.1.0/24", "p")}, vip: vip},
		{name: "a Subnet's src-ip route loses to a dst-ip discard", routes: []Route{src("10.0.1.0/24", "10.0.1.1"), dst("10.96.0.0/12", "discard")}, vip: vip,
			why: "route 10.96.0.0/12 discards it"},
		{name: "IPv6 routes are ignored", routes: []Route{dst("::/0", "fd00::1")}, vip: vip, why: "no route covers 10.96.0.10"},
		{name: "an EIP through the default route", routes: []Route{dst("0.0.0.0/0", "10.0.1.254"), connected("10.0.1.0/24", "p")}, vip: "172.18.0.10"},
		{name: "IPv6 VIP", routes: []Route{dst("0.0.0.0/0", "10.0.1.254")}, vip: "fd00::10", why: "fd00::10 is not an IPv4 address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Connected networks are stored with the port's address; Routed takes them masked.
			for i, r := range tc.routes {
				tc.routes[i].Prefix = r.Prefix.Masked()
			}
			ok, why := Routed(tc.routes, netip.MustParseAddr(tc.vip))
			if ok != (tc.why == "") || why != tc.why {
				t.Fatalf("Routed(%v, %s) = %v %q, want %v %q", tc.routes, tc.vip, ok, why, tc.why == "", tc.why)
			}
			// The order of the routes does not matter.
			rev := slices.Clone(tc.routes)
			slices.Reverse(rev)
			if ok2, why2 := Routed(rev, netip.MustParseAddr(tc.vip)); ok2 != ok || why2 != why {
				t.Fatalf("reversed: %v %q, want %v %q", ok2, why2, ok, why)
			}
		})
	}
}

// covers: V3
func TestParsePrefix(t *testing.T) {
	for in, want := range map[string]string{
		"10.96.0.0/12": "10.96.0.0/12", "10.0.1.1/24": "10.0.1.0/24", "10.96.0.10": "10.96.0.10/32", " 0.0.0.0/0 ": "0.0.0.0/0",
		"fd00::/64": "", "fd00::1": "", "nonsense": "", "10.0.0.0/33": "", "": "",
	} {
		p, ok := parsePrefix(in)
		if got := map[bool]string{true: p.String(), false: ""}[ok]; got != want {
			t.Errorf("parsePrefix(%q) = %q, want %q", in, got, want)
		}
	}
}

// routeLines are the routes as "prefix kind nexthop table", sorted, for comparison.
func routeLines(rs []Route) []string {
	var out []string
	for _, r := range rs {
		kind := "dst"
		switch {
		case r.Connected:
			kind = "connected:" + r.Port
		case r.Source:
			kind = "src"
		}
		out = append(out, strings.Join([]string{r.Prefix.String(), kind, r.NextHop, r.RouteTable}, " "))
	}
	slices.Sort(out)
	return out
}

// waitRoutes waits until the writer's cache shows want as router's routes.
func waitRoutes(t *testing.T, w *Writer, router string, want ...string) []Route {
	t.Helper()
	slices.Sort(want)
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := w.RouterRoutes(ctxT(t), router)
		if err == nil && slices.Equal(routeLines(got), want) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("routes of %s: %q (%v), want %q", router, routeLines(got), err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The routes of a router, written with ovn-nbctl as kube-ovn writes a Vpc's static routes, read
// back from the writer's NB cache: static routes of both policies and of other route tables, a
// discard route, the ports' networks as connected routes; another router's are not mixed in.
// Each change is told through OnRoutesChanged, naming the router.
// covers: V3
func TestRouterRoutesFromNB(t *testing.T) {
	s := startNB(t, nil)
	s.nbctl("lr-add", "vpc1", "--", "lr-add", "vpc2")
	w := newTestWriter(t, Config{Address: s.unixAddr()})
	var mu sync.Mutex
	told := map[string]int{}
	w.OnRoutesChanged(func(router string) {
		mu.Lock()
		told[router]++
		mu.Unlock()
	})
	toldOf := func(r string) int {
		mu.Lock()
		defer mu.Unlock()
		return told[r]
	}
	waitTold := func(what, r string, before int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for toldOf(r) <= before {
			if time.Now().After(deadline) {
				t.Fatalf("%s: router %s's change not told", what, r)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	if _, err := w.RouterRoutes(ctxT(t), "nope"); !errors.Is(err, ErrRouterNotFound) {
		t.Fatalf("routes of a missing router: %v, want ErrRouterNotFound", err)
	}
	// A router with no route: every VIP is dropped.
	if rs := waitRoutes(t, w, "vpc1"); len(rs) != 0 {
		t.Fatalf("vpc1 has routes %v", rs)
	}

	n := toldOf("vpc1")
	s.nbctl("lrp-add", "vpc1", "vpc1-subnet", "02:00:00:00:01:01", "10.0.1.1/24", "fd00:1::1/64")
	waitTold("a port added", "vpc1", n)
	got := waitRoutes(t, w, "vpc1", "10.0.1.0/24 connected:vpc1-subnet  ")
	if ok, why := Routed(got, netip.MustParseAddr("10.96.0.10")); ok || why != "no route covers 10.96.0.10" {
		t.Fatalf("only a subnet: Routed = %v %q", ok, why)
	}

	n = toldOf("vpc1")
	s.nbctl("--policy=dst-ip", "lr-route-add", "vpc1", "0.0.0.0/0", "10.0.1.254")
	s.nbctl("--policy=src-ip", "lr-route-add", "vpc1", "10.0.1.0/24", "10.0.1.253")
	s.nbctl("--route-table=rtb-a", "lr-route-add", "vpc1", "10.97.0.0/16", "10.0.1.252")
	s.nbctl("lr-route-add", "vpc2", "10.96.0.0/12", "10.0.2.254")
	waitTold("routes added", "vpc1", n)
	got = waitRoutes(t, w, "vpc1",
		"10.0.1.0/24 connected:vpc1-subnet  ",
		"0.0.0.0/0 dst 10.0.1.254 ",
		"10.0.1.0/24 src 10.0.1.253 ",
		"10.97.0.0/16 dst 10.0.1.252 rtb-a")
	if ok, why := Routed(got, netip.MustParseAddr("10.96.0.10")); !ok {
		t.Fatalf("with the default route: Routed = %v %q", ok, why)
	}

	// The Service CIDR discarded (ovn-nbctl writes a discard route so).
	n = toldOf("vpc1")
	s.nbctl("lr-route-add", "vpc1", "10.96.0.0/12", "discard")
	waitTold("a discard route added", "vpc1", n)
	got = waitRoutes(t, w, "vpc1",
		"10.0.1.0/24 connected:vpc1-subnet  ",
		"0.0.0.0/0 dst 10.0.1.254 ",
		"10.0.1.0/24 src 10.0.1.253 ",
		"10.97.0.0/16 dst 10.0.1.252 rtb-a",
		"10.96.0.0/12 dst discard ")
	if ok, why := Routed(got, netip.MustParseAddr("10.96.0.10")); ok || why != "route 10.96.0.0/12 discards it" {
		t.Fatalf("with the discard route: Routed = %v %q", ok, why)
	}

	// A route changed in place (its next hop) is told too.
	n = toldOf("vpc1")
	uuid := strings.TrimSpace(s.nbctl("--bare", "--columns=_uuid", "find", nbdb.LogicalRouterStaticRouteTable, `ip_prefix="10.96.0.0/12"`, `nexthop="discard"`))
	s.nbctl("set", nbdb.LogicalRouterStaticRouteTable, uuid, `nexthop="10.0.1.254"`)
	waitTold("a route changed in place", "vpc1", n)
	got = waitRoutes(t, w, "vpc1",
		"10.0.1.0/24 connected:vpc1-subnet  ",
		"0.0.0.0/0 dst 10.0.1.254 ",
		"10.0.1.0/24 src 10.0.1.253 ",
		"10.97.0.0/16 dst 10.0.1.252 rtb-a",
		"10.96.0.0/12 dst 10.0.1.254 ")
	if ok, why := Routed(got, netip.MustParseAddr("10.96.0.10")); !ok {
		t.Fatalf("after the next hop change: Routed = %v %q", ok, why)
	}

	// Routes removed.
	n = toldOf("vpc1")
	s.nbctl("lr-route-del", "vpc1")
	waitTold("routes removed", "vpc1", n)
	got = waitRoutes(t, w, "vpc1", "10.0.1.0/24 connected:vpc1-subnet  ")
	if ok, _ := Routed(got, netip.MustParseAddr("10.96.0.10")); ok {
		t.Fatal("without routes, the VIP is routed")
	}
	waitRoutes(t, w, "vpc2", "10.96.0.0/12 dst 10.0.2.254 ")
}
