// covers: V1, V2

package ovn

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/vpcgw/vpcgw/internal/ovn/nbdb"
)

func TestValidate(t *testing.T) {
	good := VIPRoutes{Router: "vpc1", Gateway: "gw1", NextHops: []string{"10.0.1.6", "10.0.1.10", "10.0.1.6"}, VIPs: []string{"10.96.0.10", "10.96.0.9"}}
	d, err := validate(good)
	if err != nil {
		t.Fatal(err)
	}
	// numeric order, de-duplicated
	if !slices.Equal(d.nextHops, []string{"10.0.1.6", "10.0.1.10"}) || !slices.Equal(d.vips, []string{"10.96.0.9", "10.96.0.10"}) {
		t.Fatalf("normalised: %+v", d)
	}
	for _, c := range []struct {
		name string
		mod  func(*VIPRoutes)
		want string
	}{
		{"empty router", func(v *VIPRoutes) { v.Router = "" }, "empty router"},
		{"empty gateway", func(v *VIPRoutes) { v.Gateway = " " }, "empty gateway"},
		{"ipv6 vip", func(v *VIPRoutes) { v.VIPs = []string{"fd00::10"} }, `VIP "fd00::10": not an IPv4`},
		{"mapped vip", func(v *VIPRoutes) { v.VIPs = []string{"::ffff:10.0.0.1"} }, `VIP "::ffff:10.0.0.1": not an IPv4`},
		{"garbage vip", func(v *VIPRoutes) { v.VIPs = []string{"10.0.0.1; drop"} }, `VIP "10.0.0.1; drop": not an IP`},
		{"cidr vip", func(v *VIPRoutes) { v.VIPs = []string{"10.0.0.0/24"} }, `VIP "10.0.0.0/24"`},
		{"leading zero", func(v *VIPRoutes) { v.VIPs = []string{"010.0.0.1"} }, `VIP "010.0.0.1"`},
		{"unspecified", func(v *VIPRoutes) { v.VIPs = []string{"0.0.0.0"} }, "not a unicast"},
		{"ipv6 next hop", func(v *VIPRoutes) { v.NextHops = []string{"10.0.1.5", "fd00::5"} }, `next hop "fd00::5"`},
		{"empty next hop", func(v *VIPRoutes) { v.NextHops = []string{""} }, `next hop ""`},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := good
			c.mod(&v)
			_, err := validate(v)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to contain %q", err, c.want)
			}
		})
	}
}

func TestMatchVIP(t *testing.T) {
	for in, want := range map[string]string{
		"ip4.dst == 10.96.0.10":    "10.96.0.10",
		"ip4.dst==10.96.0.10":      "",
		"ip4.dst ==  10.96.0.10 ":  "10.96.0.10",
		"ip4.src == 10.96.0.10":    "",
		"ip4.dst == 10.96.0.0/16":  "",
		"ip6.dst == fd00::1":       "",
		"ip4.dst == 10.96.0.10 &&": "",
	} {
		if got := matchVIP(in); got != want {
			t.Errorf("matchVIP(%q) = %q, want %q", in, got, want)
		}
	}
}

func ours(uuid, gw, match string, nh ...string) *nbdb.LogicalRouterPolicy {
	return &nbdb.LogicalRouterPolicy{UUID: uuid, Priority: VIPPolicyPriority, Action: "reroute", Match: match, Nexthops: nh,
		ExternalIDs: map[string]string{"vendor": "kube-ovn", "vpc-nat-gateway": gw, "vipRoute": "true"}}
}

func TestMakePlan(t *testing.T) {
	pols := map[string]*nbdb.LogicalRouterPolicy{
		"a1": ours("a1", "gw1", "ip4.dst == 10.96.0.1", "10.0.1.5"),                           // ok
		"a2": ours("a2", "gw1", "ip4.dst == 10.96.0.2", "10.0.1.9"),                           // nexthops differ -> update
		"a3": ours("a3", "gw1", "ip4.dst == 10.96.0.3", "10.0.1.5"),                           // not desired -> delete
		"d1": ours("d1", "gw1", "ip4.dst == 10.96.0.4", "10.0.1.9"),                           // duplicate, wrong
		"d2": ours("d2", "gw1", "ip4.dst == 10.96.0.4", "10.0.1.5"),                           // duplicate, right -> kept
		"x1": ours("x1", "gw2", "ip4.dst == 10.96.0.5", "10.0.1.5"),                           // another gateway
		"x2": {UUID: "x2", Priority: 29210, Action: "reroute", Match: "ip4.dst == 10.96.0.6"}, // no external_ids
		"o1": ours("o1", "gw1", "ip4.dst == 10.96.0.1", "10.0.1.5"),                           // ours on another router -> delete
	}
	routers := []nbdb.LogicalRouter{
		{UUID: "r1", Name: "vpc1", Policies: []string{"a1", "a2", "a3", "d1", "d2", "x1", "x2"}},
		{UUID: "r2", Name: "vpc2", Policies: []string{"o1"}},
	}
	d, err := validate(VIPRoutes{Router: "vpc1", Gateway: "gw1", NextHops: []string{"10.0.1.5"},
		VIPs: []string{"10.96.0.1", "10.96.0.2", "10.96.0.4", "10.96.0.7"}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := makePlan(d, routers, pols)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.creates, []string{"10.96.0.7"}) {
		t.Errorf("creates = %v", p.creates)
	}
	if len(p.updates) != 1 || p.updates["a2"].vip != "10.96.0.2" {
		t.Errorf("updates = %v", p.updates)
	}
	if !slices.Equal(p.deletes["r1"], []string{"a3", "d1"}) || !slices.Equal(p.deletes["r2"], []string{"o1"}) || len(p.deletes) != 2 {
		t.Errorf("deletes = %v", p.deletes)
	}
	if len(p.guard) != 2 {
		t.Errorf("guard = %v", p.guard)
	}

	// With the exemption, the rows without it (as older versions wrote them) are updated in
	// place, keeping keys someone else added; nothing is deleted or created for them.
	d.exempt = true
	pols["a1"].ExternalIDs["owner-note"] = "x"
	p, err = makePlan(d, routers, pols)
	if err != nil {
		t.Fatal(err)
	}
	wantExt := map[string]string{"vendor": "kube-ovn", "vpc-nat-gateway": "gw1", "vipRoute": "true",
		"vpc-egress-gateway": "vpcgw:gw1", "owner-note": "x"}
	if u, ok := p.updates["a1"]; len(p.updates) != 3 || !ok || u.vip != "10.96.0.1" || !maps.Equal(u.ext, wantExt) {
		t.Errorf("migration updates = %v", p.updates)
	}
	// Of the duplicates, the one whose route is right is kept (and migrated).
	if _, ok := p.updates["d2"]; !ok || !slices.Equal(p.creates, []string{"10.96.0.7"}) || !slices.Equal(p.deletes["r1"], []string{"a3", "d1"}) {
		t.Errorf("migration: updates %v creates %v deletes %v", p.updates, p.creates, p.deletes)
	}
	pols["a1"].ExternalIDs = wantExt // migrated: nothing more to do for it
	if p, _ = makePlan(d, routers, pols); len(p.updates) != 2 {
		t.Errorf("after migrating a1: updates = %v", p.updates)
	}
	d.exempt = false

	// Nothing desired: all of gw1's VIP policies go, nothing else.
	d.nextHops = nil
	p, err = makePlan(d, routers, pols)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.creates) != 0 || len(p.updates) != 0 ||
		!slices.Equal(p.deletes["r1"], []string{"a1", "a2", "a3", "d1", "d2"}) || !slices.Equal(p.deletes["r2"], []string{"o1"}) {
		t.Errorf("zero next hops: %+v", p)
	}

	// Missing router: an error when there is something to write, not when there is nothing.
	d.nextHops = []string{"10.0.1.5"}
	d.router = "nope"
	if _, err := makePlan(d, routers, pols); !errors.Is(err, ErrRouterNotFound) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("missing router: %v", err)
	}
	d.vips = nil
	if _, err := makePlan(d, routers, pols); err != nil {
		t.Errorf("missing router, nothing wanted: %v", err)
	}
}

func TestEndpoints(t *testing.T) {
	eps, ssl, err := Config{Address: "tcp:127.0.0.1:6641, ssl:[fd00::1]:6641,unix:/run/ovn/ovnnb_db.sock", TLS: &TLSFiles{}}.endpoints()
	if err != nil {
		t.Fatal(err)
	}
	if !ssl || !slices.Equal(eps, []string{"tcp:127.0.0.1:6641", "ssl:[fd00::1]:6641", "unix:/run/ovn/ovnnb_db.sock"}) {
		t.Fatalf("eps = %v ssl = %v", eps, ssl)
	}
	for addr, want := range map[string]string{
		"":                         "empty NB address",
		"127.0.0.1:6641":           `unsupported scheme "127.0.0.1"`,
		"tcp:127.0.0.1":            "missing port",
		"tcp::6641":                "missing host",
		"tcp:127.0.0.1:70000":      "bad port",
		"http://127.0.0.1:6641":    `unsupported scheme "http"`,
		"ssl:127.0.0.1:6641":       "no TLS files",
		"tcp:127.0.0.1:6641,":      `NB endpoint ""`,
		"unix:":                    `NB endpoint "unix:"`,
		"tcp:10.0.0.1:6641;reboot": "bad port",
	} {
		if _, _, err := (Config{Address: addr}).endpoints(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", addr, err, want)
		}
	}
}
