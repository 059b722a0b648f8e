// covers: D1, D2, D3, D8
package dataplane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"sigs.k8s.io/knftables"

	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

const baseDump = `add table ip kube-ovn
add chain ip kube-ovn prerouting { type nat hook prerouting priority -150 ; policy accept ; }
add chain ip kube-ovn vpcgw-guard { type filter hook forward priority -1 ; policy accept ; }
add chain ip kube-ovn vpcgw-guard-local { type filter hook input priority -1 ; policy accept ; }
add chain ip kube-ovn vpcgw-hairpin { type nat hook postrouting priority 99 ; policy accept ; }
add chain ip kube-ovn vpcgw-reply { type nat hook postrouting priority 99 ; policy accept ; }
add set ip kube-ovn vpcgw-endpoints { type ipv4_addr . inet_service ; }
add set ip kube-ovn vpcgw-identities { type ipv4_addr . inet_proto . inet_service ; }
add set ip kube-ovn vpcgw-vips { type ipv4_addr ; }
add map ip kube-ovn service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; }
add map ip kube-ovn vpcgw-reply-vips { type ipv4_addr . inet_service : ipv4_addr . inet_service ; }
add rule ip kube-ovn prerouting ip daddr . meta l4proto . th dport vmap @service-ips
add rule ip kube-ovn vpcgw-guard ct state new tcp flags & syn == 0 oifname != "eth0" ip saddr . tcp sport @vpcgw-reply-vips accept comment "vpcgw"
add rule ip kube-ovn vpcgw-guard ct state new tcp flags & syn == 0 ip saddr . tcp sport @vpcgw-endpoints drop comment "vpcgw"
add rule ip kube-ovn vpcgw-guard-local ct state new tcp flags & syn == 0 ip saddr . tcp sport @vpcgw-endpoints drop comment "vpcgw"
add rule ip kube-ovn vpcgw-hairpin iifname "eth0" oifname "eth0" ct status dnat ct original ip daddr @vpcgw-vips masquerade comment "vpcgw"
add rule ip kube-ovn vpcgw-reply ct state new tcp flags & syn == 0 oifname != "eth0" snat ip to ip saddr . tcp sport map @vpcgw-reply-vips comment "vpcgw"
`

func newFake() *knftables.Fake { return knftables.NewFake(knftables.IPv4Family, TableName) }

// be, ident and key build the contract's values from address literals.
func be(ip string, port int32) gwstate.Backend {
	return gwstate.Backend{IP: netip.MustParseAddr(ip), Port: port}
}

func ident(vip string, port int32, proto gwstate.Protocol, bes ...gwstate.Backend) gwstate.Identity {
	return gwstate.Identity{VIP: netip.MustParseAddr(vip), Port: port, Protocol: proto, Backends: bes}
}

func key(vip string, port int32, proto gwstate.Protocol) gwstate.IdentityKey {
	return gwstate.IdentityKey{VIP: netip.MustParseAddr(vip), Port: port, Protocol: proto}
}

func addrs(ips ...string) []netip.Addr {
	out := make([]netip.Addr, 0, len(ips))
	for _, ip := range ips {
		out = append(out, netip.MustParseAddr(ip))
	}
	return out
}

func state(gen int64, ids ...gwstate.Identity) gwstate.State {
	st := gwstate.State{Generation: gen, Identities: ids}
	st.Normalize()
	return st
}

func mustApply(t *testing.T, a *Agent, st gwstate.State) {
	t.Helper()
	if err := a.Apply(context.Background(), st); err != nil {
		t.Fatalf("apply generation %d: %v", st.Generation, err)
	}
}

// freshDump is the dump a new agent produces for st on an empty table.
func freshDump(t *testing.T, st gwstate.State) string {
	t.Helper()
	f := newFake()
	mustApply(t, NewAgent(f, logr.Discard()), st)
	return f.Dump()
}

func TestChainNames(t *testing.T) {
	// md5("10.0.0.1:80:tcp") = f5227434ff40...
	if got := IdentityChain(key("10.0.0.1", 80, gwstate.TCP)); got != "dnat-f5227434ff40" {
		t.Errorf("IdentityChain = %q", got)
	}
	id := ident("10.0.0.2", 80, gwstate.TCP)
	if got := EndpointChain(id, be("10.0.1.1", 8080)); got != "ep-cfeb8225efaf-9ce4ed06" {
		t.Errorf("EndpointChain = %q", got)
	}
	if got := AffinitySet(id, be("10.0.1.1", 8080)); got != "aff-cfeb8225efaf-9ce4ed06" {
		t.Errorf("AffinitySet = %q", got)
	}
	for name, want := range map[string]bool{
		"dnat-f5227434ff40": true, "ep-cfeb8225efaf-9ce4ed06": true, "aff-cfeb8225efaf-9ce4ed06": true,
		"prerouting": false, "dnat-xyz": false, "dnat-F5227434FF40": false, "ep-cfeb8225efaf": false, "mychain": false,
	} {
		if owned(name) != want {
			t.Errorf("owned(%q) = %v, want %v", name, !want, want)
		}
	}
}

func TestGoldenDumps(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   gwstate.State
		want string
	}{{
		name: "no identities",
		st:   state(1),
		want: baseDump,
	}, {
		name: "identity with zero backends gets no element and no chain",
		st:   state(1, ident("10.0.0.1", 80, gwstate.TCP)),
		want: baseDump,
	}, {
		name: "one backend: plain dnat",
		st:   state(1, ident("10.0.0.1", 53, gwstate.UDP, be("10.0.1.2", 5353))),
		want: `add table ip kube-ovn
add chain ip kube-ovn dnat-e1f1e9fbffa9
add chain ip kube-ovn prerouting { type nat hook prerouting priority -150 ; policy accept ; }
add chain ip kube-ovn vpcgw-guard { type filter hook forward priority -1 ; policy accept ; }
add chain ip kube-ovn vpcgw-guard-local { type filter hook input priority -1 ; policy accept ; }
add chain ip kube-ovn vpcgw-hairpin { type nat hook postrouting priority 99 ; policy accept ; }
add chain ip kube-ovn vpcgw-reply { type nat hook postrouting priority 99 ; policy accept ; }
add set ip kube-ovn vpcgw-endpoints { type ipv4_addr . inet_service ; }
add set ip kube-ovn vpcgw-identities { type ipv4_addr . inet_proto . inet_service ; }
add set ip kube-ovn vpcgw-vips { type ipv4_addr ; }
add map ip kube-ovn service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; }
add map ip kube-ovn vpcgw-reply-vips { type ipv4_addr . inet_service : ipv4_addr . inet_service ; }
add rule ip kube-ovn dnat-e1f1e9fbffa9 meta l4proto udp dnat ip to 10.0.1.2:5353 comment "vpcgw"
add rule ip kube-ovn prerouting ip daddr . meta l4proto . th dport vmap @service-ips
add rule ip kube-ovn vpcgw-guard ct state new tcp flags & syn == 0 oifname != "eth0" ip saddr . tcp sport @vpcgw-reply-vips accept comment "vpcgw"
add rule ip kube-ovn vpcgw-guard ct state new tcp flags & syn == 0 ip saddr . tcp sport @vpcgw-endpoints drop comment "vpcgw"
add rule ip kube-ovn vpcgw-guard-local ct state new tcp flags & syn == 0 ip saddr . tcp sport @vpcgw-endpoints drop comment "vpcgw"
add rule ip kube-ovn vpcgw-hairpin iifname "eth0" oifname "eth0" ct status dnat ct original ip daddr @vpcgw-vips masquerade comment "vpcgw"
add rule ip kube-ovn vpcgw-reply ct state new tcp flags & syn == 0 oifname != "eth0" snat ip to ip saddr . tcp sport map @vpcgw-reply-vips comment "vpcgw"
add element ip kube-ovn vpcgw-identities { 10.0.0.1 . udp . 53 }
add element ip kube-ovn vpcgw-vips { 10.0.0.1 }
add element ip kube-ovn service-ips { 10.0.0.1 . udp . 53 : goto dnat-e1f1e9fbffa9 }
`,
	}, {
		name: "two backends: jhash map, sorted",
		st:   state(1, ident("10.0.0.1", 80, gwstate.TCP, be("10.0.1.2", 8080), be("10.0.1.1", 8080))),
		want: `add table ip kube-ovn
add chain ip kube-ovn dnat-f5227434ff40
add chain ip kube-ovn prerouting { type nat hook prerouting priority -150 ; policy accept ; }
add chain ip kube-ovn vpcgw-guard { type filter hook forward priority -1 ; policy accept ; }
add chain ip kube-ovn vpcgw-guard-local { type filter hook input priority -1 ; policy accept ; }
add chain ip kube-ovn vpcgw-hairpin { type nat hook postrouting priority 99 ; policy accept ; }
add chain ip kube-ovn vpcgw-reply { type nat hook postrouting priority 99 ; policy accept ; }
add set ip kube-ovn vpcgw-endpoints { type ipv4_addr . inet_service ; }
add set ip kube-ovn vpcgw-identities { type ipv4_addr . inet_proto . inet_service ; }
add set ip kube-ovn vpcgw-vips { type ipv4_addr ; }
add map ip kube-ovn service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; }
add map ip kube-ovn vpcgw-reply-vips { type ipv4_addr . inet_service : ipv4_addr . inet_service ; }
add rule ip kube-ovn dnat-f5227434ff40 meta l4proto tcp dnat ip addr . port to jhash ip saddr . th sport . ip daddr . th dport mod 2 seed 0x76706367 map { 0 : 10.0.1.1 . 8080, 1 : 10.0.1.2 . 8080 } comment "vpcgw"
add rule ip kube-ovn prerouting ip daddr . meta l4proto . th dport vmap @service-ips
add rule ip kube-ovn vpcgw-guard ct state new tcp flags & syn == 0 oifname != "eth0" ip saddr . tcp sport @vpcgw-reply-vips accept comment "vpcgw"
add rule ip kube-ovn vpcgw-guard ct state new tcp flags & syn == 0 ip saddr . tcp sport @vpcgw-endpoints drop comment "vpcgw"
add rule ip kube-ovn vpcgw-guard-local ct state new tcp flags & syn == 0 ip saddr . tcp sport @vpcgw-endpoints drop comment "vpcgw"
add rule ip kube-ovn vpcgw-hairpin iifname "eth0" oifname "eth0" ct status dnat ct original ip daddr @vpcgw-vips masquerade comment "vpcgw"
add rule ip kube-ovn vpcgw-reply ct state new tcp flags & syn == 0 oifname != "eth0" snat ip to ip saddr . tcp sport map @vpcgw-reply-vips comment "vpcgw"
add element ip kube-ovn vpcgw-endpoints { 10.0.1.1 . 8080 }
add element ip kube-ovn vpcgw-endpoints { 10.0.1.2 . 8080 }
add element ip kube-ovn vpcgw-identities { 10.0.0.1 . tcp . 80 }
add element ip kube-ovn vpcgw-vips { 10.0.0.1 }
add element ip kube-ovn service-ips { 10.0.0.1 . tcp . 80 : goto dnat-f5227434ff40 }
add element ip kube-ovn vpcgw-reply-vips { 10.0.1.1 . 8080 : 10.0.0.1 . 80 }
add element ip kube-ovn vpcgw-reply-vips { 10.0.1.2 . 8080 : 10.0.0.1 . 80 }
`,
	}, {
		name: "three backends, duplicates removed, numeric address order",
		st: state(1, ident("10.0.0.1", 80, gwstate.TCP,
			be("10.0.1.10", 8080), be("10.0.1.9", 8080), be("10.0.1.9", 8080), be("10.0.1.9", 80))),
		want: `add table ip kube-ovn
add chain ip kube-ovn dnat-f5227434ff40
add chain ip kube-ovn prerouting { type nat hook prerouting priority -150 ; policy accept ; }
add chain ip kube-ovn vpcgw-guard { type filter hook forward priority -1 ; policy accept ; }
add chain ip kube-ovn vpcgw-guard-local { type filter hook input priority -1 ; policy accept ; }
add chain ip kube-ovn vpcgw-hairpin { type nat hook postrouting priority 99 ; policy accept ; }
add chain ip kube-ovn vpcgw-reply { type nat hook postrouting priority 99 ; policy accept ; }
add set ip kube-ovn vpcgw-endpoints { type ipv4_addr . inet_service ; }
add set ip kube-ovn vpcgw-identities { type ipv4_addr . inet_proto . inet_service ; }
add set ip kube-ovn vpcgw-vips { type ipv4_addr ; }
add map ip kube-ovn service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; }
add map ip kube-ovn vpcgw-reply-vips { type ipv4_addr . inet_service : ipv4_addr . inet_service ; }
add rule ip kube-ovn dnat-f5227434ff40 meta l4proto tcp dnat ip addr . port to jhash ip saddr . th sport . ip daddr . th dport mod 3 seed 0x76706367 map { 0 : 10.0.1.9 . 80, 1 : 10.0.1.9 . 8080, 2 : 10.0.1.10 . 8080 } comment "vpcgw"
add rule ip kube-ovn prerouting ip daddr . meta l4proto . th dport vmap @service-ips
add rule ip kube-ovn vpcgw-guard ct state new tcp flags & syn == 0 oifname != "eth0" ip saddr . tcp sport @vpcgw-reply-vips accept comment "vpcgw"
add rule ip kube-ovn vpcgw-guard ct state new tcp flags & syn == 0 ip saddr . tcp sport @vpcgw-endpoints drop comment "vpcgw"
add rule ip kube-ovn vpcgw-guard-local ct state new tcp flags & syn == 0 ip saddr . tcp sport @vpcgw-endpoints drop comment "vpcgw"
add rule ip kube-ovn vpcgw-hairpin iifname "eth0" oifname "eth0" ct status dnat ct original ip daddr @vpcgw-vips masquerade comment "vpcgw"
add rule ip kube-ovn vpcgw-reply ct state new tcp flags & syn == 0 oifname != "eth0" snat ip to ip saddr . tcp sport map @vpcgw-reply-vips comment "vpcgw"
add element ip kube-ovn vpcgw-endpoints { 10.0.1.9 . 80 }
add element ip kube-ovn vpcgw-endpoints { 10.0.1.9 . 8080 }
add element ip kube-ovn vpcgw-endpoints { 10.0.1.10 . 8080 }
add element ip kube-ovn vpcgw-identities { 10.0.0.1 . tcp . 80 }
add element ip kube-ovn vpcgw-vips { 10.0.0.1 }
add element ip kube-ovn service-ips { 10.0.0.1 . tcp . 80 : goto dnat-f5227434ff40 }
add element ip kube-ovn vpcgw-reply-vips { 10.0.1.9 . 80 : 10.0.0.1 . 80 }
add element ip kube-ovn vpcgw-reply-vips { 10.0.1.9 . 8080 : 10.0.0.1 . 80 }
add element ip kube-ovn vpcgw-reply-vips { 10.0.1.10 . 8080 : 10.0.0.1 . 80 }
`,
	}, {
		name: "client ip affinity",
		st: state(1, gwstate.Identity{VIP: netip.MustParseAddr("10.0.0.2"), Port: 80, Protocol: gwstate.TCP, AffinityTimeoutSeconds: 300,
			Backends: []gwstate.Backend{be("10.0.1.2", 8080), be("10.0.1.1", 8080)}}),
		want: `add table ip kube-ovn
add chain ip kube-ovn dnat-cfeb8225efaf
add chain ip kube-ovn ep-cfeb8225efaf-12583fe9
add chain ip kube-ovn ep-cfeb8225efaf-9ce4ed06
add chain ip kube-ovn prerouting { type nat hook prerouting priority -150 ; policy accept ; }
add chain ip kube-ovn vpcgw-guard { type filter hook forward priority -1 ; policy accept ; }
add chain ip kube-ovn vpcgw-guard-local { type filter hook input priority -1 ; policy accept ; }
add chain ip kube-ovn vpcgw-hairpin { type nat hook postrouting priority 99 ; policy accept ; }
add chain ip kube-ovn vpcgw-reply { type nat hook postrouting priority 99 ; policy accept ; }
add set ip kube-ovn aff-cfeb8225efaf-12583fe9 { type ipv4_addr ; flags dynamic,timeout ; timeout 300s ; }
add set ip kube-ovn aff-cfeb8225efaf-9ce4ed06 { type ipv4_addr ; flags dynamic,timeout ; timeout 300s ; }
add set ip kube-ovn vpcgw-endpoints { type ipv4_addr . inet_service ; }
add set ip kube-ovn vpcgw-identities { type ipv4_addr . inet_proto . inet_service ; }
add set ip kube-ovn vpcgw-vips { type ipv4_addr ; }
add map ip kube-ovn service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; }
add map ip kube-ovn vpcgw-reply-vips { type ipv4_addr . inet_service : ipv4_addr . inet_service ; }
add rule ip kube-ovn dnat-cfeb8225efaf ip saddr @aff-cfeb8225efaf-9ce4ed06 goto ep-cfeb8225efaf-9ce4ed06 comment "vpcgw"
add rule ip kube-ovn dnat-cfeb8225efaf ip saddr @aff-cfeb8225efaf-12583fe9 goto ep-cfeb8225efaf-12583fe9 comment "vpcgw"
add rule ip kube-ovn dnat-cfeb8225efaf jhash ip saddr . th sport . ip daddr . th dport mod 2 seed 0x76706367 vmap { 0 : goto ep-cfeb8225efaf-9ce4ed06 , 1 : goto ep-cfeb8225efaf-12583fe9 } comment "vpcgw"
add rule ip kube-ovn ep-cfeb8225efaf-12583fe9 update @aff-cfeb8225efaf-12583fe9 { ip saddr } comment "vpcgw"
add rule ip kube-ovn ep-cfeb8225efaf-12583fe9 meta l4proto tcp dnat ip to 10.0.1.2:8080 comment "vpcgw"
add rule ip kube-ovn ep-cfeb8225efaf-9ce4ed06 update @aff-cfeb8225efaf-9ce4ed06 { ip saddr } comment "vpcgw"
add rule ip kube-ovn ep-cfeb8225efaf-9ce4ed06 meta l4proto tcp dnat ip to 10.0.1.1:8080 comment "vpcgw"
add rule ip kube-ovn prerouting ip daddr . meta l4proto . th dport vmap @service-ips
add rule ip kube-ovn vpcgw-guard ct state new tcp flags & syn == 0 oifname != "eth0" ip saddr . tcp sport @vpcgw-reply-vips accept comment "vpcgw"
add rule ip kube-ovn vpcgw-guard ct state new tcp flags & syn == 0 ip saddr . tcp sport @vpcgw-endpoints drop comment "vpcgw"
add rule ip kube-ovn vpcgw-guard-local ct state new tcp flags & syn == 0 ip saddr . tcp sport @vpcgw-endpoints drop comment "vpcgw"
add rule ip kube-ovn vpcgw-hairpin iifname "eth0" oifname "eth0" ct status dnat ct original ip daddr @vpcgw-vips masquerade comment "vpcgw"
add rule ip kube-ovn vpcgw-reply ct state new tcp flags & syn == 0 oifname != "eth0" snat ip to ip saddr . tcp sport map @vpcgw-reply-vips comment "vpcgw"
add element ip kube-ovn vpcgw-endpoints { 10.0.1.1 . 8080 }
add element ip kube-ovn vpcgw-endpoints { 10.0.1.2 . 8080 }
add element ip kube-ovn vpcgw-identities { 10.0.0.2 . tcp . 80 }
add element ip kube-ovn vpcgw-vips { 10.0.0.2 }
add element ip kube-ovn service-ips { 10.0.0.2 . tcp . 80 : goto dnat-cfeb8225efaf }
add element ip kube-ovn vpcgw-reply-vips { 10.0.1.1 . 8080 : 10.0.0.2 . 80 }
add element ip kube-ovn vpcgw-reply-vips { 10.0.1.2 . 8080 : 10.0.0.2 . 80 }
`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if got := freshDump(t, tc.st); got != tc.want {
				t.Errorf("dump:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

func TestBackendOrderDoesNotMatter(t *testing.T) {
	a := freshDump(t, state(1, ident("10.0.0.1", 80, gwstate.TCP, be("10.0.1.3", 80), be("10.0.1.1", 80), be("10.0.1.2", 80))))
	b := freshDump(t, state(1, ident("10.0.0.1", 80, gwstate.TCP, be("10.0.1.2", 80), be("10.0.1.3", 80), be("10.0.1.1", 80))))
	if a != b {
		t.Errorf("different dumps for the same backend set:\n%s\n%s", a, b)
	}
	// Reordered backends on a running agent: nothing to do.
	f := newFake()
	ag := NewAgent(f, logr.Discard())
	mustApply(t, ag, state(1, ident("10.0.0.1", 80, gwstate.TCP, be("10.0.1.3", 80), be("10.0.1.1", 80))))
	last := f.LastTransaction
	mustApply(t, ag, state(2, ident("10.0.0.1", 80, gwstate.TCP, be("10.0.1.1", 80), be("10.0.1.3", 80))))
	if f.LastTransaction != last {
		t.Errorf("reordered backends ran a transaction:\n%s", f.LastTransaction)
	}
}

// TestIncrementalMatchesFresh walks a sequence of states on one agent and checks after each step
// that the table equals what a new agent builds from scratch, and that unchanged states run no
// transaction.
func TestIncrementalMatchesFresh(t *testing.T) {
	a1 := ident("10.0.0.1", 80, gwstate.TCP, be("10.0.1.1", 8080), be("10.0.1.2", 8080))
	a1b := ident("10.0.0.1", 80, gwstate.TCP, be("10.0.1.2", 8080))
	a1none := ident("10.0.0.1", 80, gwstate.TCP)
	u53 := ident("10.0.0.1", 53, gwstate.UDP, be("10.0.1.5", 53))
	aff := gwstate.Identity{VIP: netip.MustParseAddr("10.0.0.9"), Port: 443, Protocol: gwstate.TCP, AffinityTimeoutSeconds: 60,
		Backends: []gwstate.Backend{be("10.0.1.1", 443), be("10.0.1.2", 443)}}
	affChanged := aff
	affChanged.Backends = []gwstate.Backend{be("10.0.1.2", 443), be("10.0.1.3", 443)}
	affTimeout := affChanged
	affTimeout.AffinityTimeoutSeconds = 120
	affOff := affTimeout
	affOff.AffinityTimeoutSeconds = 0

	steps := []gwstate.State{
		state(1, a1),
		state(2, a1, u53),
		state(3, a1b, u53),    // a backend removed
		state(4, a1none, u53), // zero backends: element and chain go
		state(5, a1, u53, aff),
		state(6, a1, affChanged), // an identity removed, affinity backends changed
		state(7, a1, affTimeout),
		state(8, a1, affOff), // affinity switched off
		state(9, a1, aff),    // and on again
		state(10),
	}
	f := newFake()
	ag := NewAgent(f, logr.Discard())
	for _, st := range steps {
		mustApply(t, ag, st)
		if got, want := testutil.SortElements(f.Dump()), testutil.SortElements(freshDump(t, st)); got != want {
			t.Fatalf("generation %d: incremental dump:\n%s\nfresh dump:\n%s\ntransaction:\n%s", st.Generation, got, want, f.LastTransaction)
		}
		last := f.LastTransaction
		again := st
		again.Generation++
		mustApply(t, ag, again)
		if f.LastTransaction != last {
			t.Errorf("generation %d re-applied unchanged ran a transaction:\n%s", st.Generation, f.LastTransaction)
		}
	}
}

func TestRemovalDeletesElementAndChain(t *testing.T) {
	f := newFake()
	ag := NewAgent(f, logr.Discard())
	a := ident("10.0.0.1", 80, gwstate.TCP, be("10.0.1.1", 8080))
	b := ident("10.0.0.2", 80, gwstate.TCP, be("10.0.1.1", 8080))
	mustApply(t, ag, state(1, a, b))
	mustApply(t, ag, state(2, a))
	tx := f.LastTransaction.String()
	// The identity's key leaves the ownership set and its VIP, served by nothing else, the
	// hairpin set (SPEC K8, D4). The backend, shared by two external identities until now, has
	// one left: the guard may now rewrite its segments to that one's VIP (D9).
	want := "delete element ip kube-ovn service-ips { 10.0.0.2 . tcp . 80 }\n" +
		"flush chain ip kube-ovn " + IdentityChain(key("10.0.0.2", 80, gwstate.TCP)) + "\n" +
		"delete chain ip kube-ovn " + IdentityChain(key("10.0.0.2", 80, gwstate.TCP)) + "\n" +
		"delete element ip kube-ovn vpcgw-identities { 10.0.0.2 . tcp . 80 }\n" +
		"delete element ip kube-ovn vpcgw-vips { 10.0.0.2 }\n" +
		"add element ip kube-ovn vpcgw-reply-vips { 10.0.1.1 . 8080 : 10.0.0.1 . 80 }\n"
	if tx != want {
		t.Errorf("removal transaction:\n%s\nwant:\n%s", tx, want)
	}
	if strings.Contains(f.Dump(), "10.0.0.2") || strings.Contains(f.Dump(), IdentityChain(key("10.0.0.2", 80, gwstate.TCP))) {
		t.Errorf("removed identity still in the table:\n%s", f.Dump())
	}
	// A VIP stays in the hairpin set while another identity serves it.
	c := ident("10.0.0.1", 81, gwstate.TCP, be("10.0.1.1", 8080))
	mustApply(t, ag, state(3, a, c))
	if tx := f.LastTransaction.String(); strings.Contains(tx, VIPSet) {
		t.Errorf("second identity of a VIP touched %s:\n%s", VIPSet, tx)
	}
	mustApply(t, ag, state(4, a))
	if tx := f.LastTransaction.String(); strings.Contains(tx, VIPSet) || !strings.Contains(tx, "delete element ip kube-ovn vpcgw-identities { 10.0.0.1 . tcp . 81 }") {
		t.Errorf("removing one of two identities of a VIP:\n%s", tx)
	}
	if !strings.Contains(f.Dump(), "add element ip kube-ovn vpcgw-vips { 10.0.0.1 }") {
		t.Errorf("VIP of a served identity left the hairpin set:\n%s", f.Dump())
	}
}

func TestAffinityEntriesSurviveBackendChange(t *testing.T) {
	f := newFake()
	ag := NewAgent(f, logr.Discard())
	id := gwstate.Identity{VIP: netip.MustParseAddr("10.0.0.9"), Port: 443, Protocol: gwstate.TCP, AffinityTimeoutSeconds: 60,
		Backends: []gwstate.Backend{be("10.0.1.1", 443), be("10.0.1.2", 443)}}
	mustApply(t, ag, state(1, id))
	stay := AffinitySet(id, be("10.0.1.2", 443))
	// A client learned by the packet path.
	tx := f.NewTransaction()
	tx.Add(&knftables.Element{Set: stay, Key: []string{"192.168.7.7"}})
	if err := f.Run(context.Background(), tx); err != nil {
		t.Fatal(err)
	}
	id.Backends = []gwstate.Backend{be("10.0.1.2", 443), be("10.0.1.3", 443)}
	mustApply(t, ag, state(2, id))
	if f.Table.Sets[stay] == nil || f.Table.Sets[stay].FindElement("192.168.7.7") == nil {
		t.Errorf("affinity entry of the backend that stayed was lost:\n%s", f.Dump())
	}
	if gone := AffinitySet(id, be("10.0.1.1", 443)); f.Table.Sets[gone] != nil {
		t.Errorf("affinity set %s of the removed backend is still there", gone)
	}
}

// failingNFT is a Fake whose Run fails while fail is set, as the kernel would reject a
// transaction: nothing of it is applied.
type failingNFT struct {
	*knftables.Fake
	fail error
}

func (f *failingNFT) Run(ctx context.Context, tx *knftables.Transaction) error {
	if f.fail != nil {
		return f.fail
	}
	return f.Fake.Run(ctx, tx)
}

func TestFailedApplyKeepsPreviousState(t *testing.T) {
	f := &failingNFT{Fake: newFake()}
	ag := NewAgent(f, logr.Discard())
	s1 := state(1, ident("10.0.0.1", 80, gwstate.TCP, be("10.0.1.1", 8080)))
	mustApply(t, ag, s1)
	before := f.Dump()

	f.fail = errors.New("Error: Could not process rule: Operation not supported")
	s2 := state(2, ident("10.0.0.1", 80, gwstate.TCP, be("10.0.1.1", 8080)), ident("10.0.0.2", 80, gwstate.TCP, be("10.0.1.2", 8080)))
	err := ag.Apply(context.Background(), s2)
	if err == nil || !strings.Contains(err.Error(), "Operation not supported") {
		t.Fatalf("apply with a failing kernel: err = %v, want nft's message", err)
	}
	if f.Dump() != before {
		t.Errorf("table changed by a failed apply")
	}
	if got := ag.Applied(); len(got) != 1 || got[0].VIP != netip.MustParseAddr("10.0.0.1") {
		t.Errorf("agent memory changed by a failed apply: %+v", got)
	}

	// The kernel accepts again: the next apply converges (after a full re-list).
	f.fail = nil
	mustApply(t, ag, s2)
	if got, want := testutil.SortElements(f.Dump()), testutil.SortElements(freshDump(t, s2)); got != want {
		t.Errorf("after recovery:\n%s\nwant:\n%s", got, want)
	}
}

func TestAdoptsPopulatedTable(t *testing.T) {
	// covers: D8, K8
	f := newFake()
	keep := ident("10.0.0.1", 80, gwstate.TCP, be("10.0.1.1", 8080))
	gone := ident("10.0.0.2", 80, gwstate.TCP, be("10.0.1.1", 8080))
	// A previous agent left keep, gone and stale affinity objects of gone's (its key is in
	// OwnedSet); kube-ovn added an identity of its own (element and chain, key not in
	// OwnedSet); someone else added a foreign chain in our table and a table of their own.
	mustApply(t, NewAgent(f, logr.Discard()), state(1, keep, gone))
	goneHash := IdentityHash(gone.Key())
	staleSet, staleEP := "aff-"+goneHash+"-01234567", "ep-"+goneHash+"-01234567"
	kubeOVN := IdentityChain(key("10.0.0.3", 80, gwstate.TCP))
	tx := f.NewTransaction()
	tx.Add(&knftables.Set{Name: staleSet, Type: "ipv4_addr"})
	tx.Add(&knftables.Chain{Name: staleEP})
	tx.Add(&knftables.Rule{Chain: staleEP, Rule: "update @" + staleSet + " { ip saddr }"})
	tx.Add(&knftables.Chain{Name: "mychain"})
	tx.Add(&knftables.Rule{Chain: "mychain", Rule: "counter"})
	tx.Add(&knftables.Chain{Name: kubeOVN})
	tx.Add(&knftables.Rule{Chain: kubeOVN, Rule: "meta l4proto tcp dnat ip to numgen random mod 1 map { 0 : 10.0.1.9 . 80 }"})
	tx.Add(&knftables.Element{Map: ServiceMap, Key: []string{"10.0.0.3", "tcp", "80"}, Value: []string{"goto " + kubeOVN}})
	if err := f.Run(context.Background(), tx); err != nil {
		t.Fatal(err)
	}
	other := knftables.NewFake(knftables.IPv4Family, "other")
	tx = other.NewTransaction()
	tx.Add(&knftables.Table{})
	tx.Add(&knftables.Chain{Name: "dnat-0123456789ab"})
	if err := other.Run(context.Background(), tx); err != nil {
		t.Fatal(err)
	}
	f.Lock()
	f.Tables[knftables.IPv4Family]["other"] = other.Table
	f.Unlock()

	ag := NewAgent(f, logr.Discard())
	mustApply(t, ag, state(2, keep))
	dump := f.Dump()
	for _, s := range []string{"10.0.0.2", IdentityChain(key("10.0.0.2", 80, gwstate.TCP)), staleSet, staleEP} {
		if strings.Contains(dump, "kube-ovn "+s) || strings.Contains(dump, "{ "+s) {
			t.Errorf("stale %s not removed:\n%s", s, dump)
		}
	}
	if o := f.Tables[knftables.IPv4Family]["other"]; o == nil || o.Chains["dnat-0123456789ab"] == nil {
		t.Errorf("foreign table ip other or its chain was removed")
	}
	for _, s := range []string{"add chain ip kube-ovn mychain", "add rule ip kube-ovn mychain counter",
		"10.0.0.1 . tcp . 80 : goto " + IdentityChain(key("10.0.0.1", 80, gwstate.TCP)),
		"10.0.0.3 . tcp . 80 : goto " + kubeOVN, "add rule ip kube-ovn " + kubeOVN + " meta l4proto tcp dnat"} {
		if !strings.Contains(dump, s) {
			t.Errorf("missing %q after adoption:\n%s", s, dump)
		}
	}
	// After adoption the agent is incremental: an unchanged state runs nothing, and the
	// drift check does not count kube-ovn's identity as drift.
	last := f.LastTransaction
	mustApply(t, ag, state(3, keep))
	if f.LastTransaction != last {
		t.Errorf("unchanged state after adoption ran:\n%s", f.LastTransaction)
	}
	if drift, err := ag.Verify(context.Background()); drift != "" || err != nil {
		t.Errorf("verify with kube-ovn's identity in the table: drift %q, err %v", drift, err)
	}
}

func runLines(t *testing.T, nft knftables.Interface, lines ...string) []gwstate.Ack {
	t.Helper()
	in := strings.NewReader(strings.Join(lines, "\n") + "\n")
	var out bytes.Buffer
	if err := RunAgent(context.Background(), in, &out, nft, logr.Discard()); err != nil {
		t.Fatalf("RunAgent: %v", err)
	}
	var acks []gwstate.Ack
	dec := json.NewDecoder(&out)
	for dec.More() {
		var a gwstate.Ack
		if err := dec.Decode(&a); err != nil {
			t.Fatal(err)
		}
		acks = append(acks, a)
	}
	return acks
}

func TestRunAgentAcks(t *testing.T) {
	good := `{"generation":7,"identities":[{"vip":"10.0.0.1","port":80,"protocol":"tcp","backends":[{"ip":"10.0.1.2","port":8080},{"ip":"10.0.1.1","port":8080}]}]}`
	lines := []string{
		`{"generation":1,"identities":[{"vip":"fd00::1","port":80,"protocol":"tcp","backends":[]}]}`,
		`{"generation":2,"identities":[{"vip":"10.0.0.1","port":0,"protocol":"tcp","backends":[]}]}`,
		`{"generation":3,"identities":[{"vip":"10.0.0.1","port":80,"protocol":"sctp","backends":[]}]}`,
		`{"generation":4,"identities":[{"vip":"10.0.0.1","port":80,"protocol":"tcp"},{"vip":"10.0.0.1","port":80,"protocol":"tcp"}]}`,
		`{"generation":5, this is not json`,
		`{"generation":6,"identities":[{"vip":"10.0.0.1","port":80,"protocol":"tcp","backends":[{"ip":"10.0.1.1","port":70000}]}]}`,
		// An address text that does not parse is a malformed message, like any undecodable
		// line; one that parses but is no backend (127.0.0.1) refuses its identity alone.
		`{"generation":8,"identities":[{"vip":"10.0.0.1","port":80,"protocol":"tcp","backends":[{"ip":"10.0.1.300","port":8080}]}]}`,
		`{"generation":9,"identities":[{"vip":"10.0.0.1","port":80,"protocol":"tcp","backends":[{"ip":"127.0.0.1","port":8080}]}]}`,
		``, // blank lines are ignored
		good,
	}
	f := newFake()
	acks := runLines(t, f, lines...)
	// A malformed message is refused whole (err); an invalid identity alone, by name (refused).
	want := []struct {
		gen          int64
		err, refused string
	}{{1, "", "not an IPv4 address"}, {2, "", "port 0"}, {3, "", `"sctp"`}, {4, "appears twice", ""}, {0, "cannot decode", ""}, {6, "", "port 70000"},
		{0, `cannot decode state: ParseAddr("10.0.1.300")`, ""}, {9, "", "loopback"}, {7, "", ""}}
	if len(acks) != len(want) {
		t.Fatalf("got %d acks %+v, want %d", len(acks), acks, len(want))
	}
	for i, w := range want {
		a := acks[i]
		if a.Generation != w.gen || (w.err == "") != (a.Error == "") || !strings.Contains(a.Error, w.err) {
			t.Errorf("ack %d = %+v, want generation %d and error containing %q", i, a, w.gen, w.err)
		}
		if (w.refused == "") != (len(a.Refused) == 0) || (w.refused != "" && (len(a.Refused) != 1 || !strings.Contains(a.Refused[0].Reason, w.refused))) {
			t.Errorf("ack %d = %+v, want one identity refused for %q", i, a, w.refused)
		}
	}
	var st gwstate.State
	_ = json.Unmarshal([]byte(good), &st)
	st.Normalize()
	if got, want := f.Dump(), freshDump(t, st); got != want {
		t.Errorf("table after the good line:\n%s\nwant:\n%s", got, want)
	}
}

func TestRunAgentApplyErrorIsAcked(t *testing.T) {
	f := &failingNFT{Fake: newFake(), fail: errors.New("Error: Could not process rule: File exists")}
	acks := runLines(t, f, `{"generation":3,"identities":[{"vip":"10.0.0.1","port":80,"protocol":"tcp","backends":[{"ip":"10.0.1.1","port":80}]}]}`)
	if len(acks) != 1 || acks[0].Generation != 3 || !strings.Contains(acks[0].Error, "File exists") {
		t.Errorf("acks = %+v, want generation 3 with nft's error", acks)
	}
}

func TestRunAgentStopsOnContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r, w := ioPipe()
	defer func() { _ = w.Close() }()
	if err := RunAgent(ctx, r, &bytes.Buffer{}, newFake(), logr.Discard()); !errors.Is(err, context.Canceled) {
		t.Errorf("RunAgent with a cancelled context = %v", err)
	}
}

func TestConcurrentApply(t *testing.T) {
	f := newFake()
	ag := NewAgent(f, logr.Discard())
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			st := state(int64(i), ident(fmt.Sprintf("10.0.0.%d", i%3+1), 80, gwstate.TCP, be("10.0.1.1", 80)))
			if err := ag.Apply(context.Background(), st); err != nil {
				t.Error(err)
			}
			_ = ag.Applied()
		}(i)
	}
	wg.Wait()
	got := ag.Applied()
	if len(got) != 1 {
		t.Fatalf("applied = %+v", got)
	}
	if d, want := f.Dump(), freshDump(t, state(1, got[0])); d != want {
		t.Errorf("table does not match the last applied state:\n%s\nwant:\n%s", d, want)
	}
}

func ioPipe() (*io.PipeReader, *io.PipeWriter) { return io.Pipe() }
