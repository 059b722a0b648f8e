// covers: N7, N2, D2, D6, D8
package dataplane

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"sigs.k8s.io/knftables"

	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

// sourceRangeVariants are the shapes of loadBalancerSourceRanges the tests cycle through: none,
// one, ranges inside another (not allowed together in an interval set), adjacent ranges with
// one reaching 255.255.255.255 (an open interval in the kernel), and another single one.
var sourceRangeVariants = [][]string{
	nil,
	{"10.0.0.0/8"},
	{"10.0.0.0/8", "10.1.0.0/16", "192.168.0.0/16"},
	{"0.0.0.0/1", "128.0.0.0/1"},
	{"172.16.0.0/12"},
}

func withRanges(id gwstate.Identity, ranges ...string) gwstate.Identity {
	id.SourceRanges = ranges
	return id
}

// An identity with source ranges gets the set src-<idhash> of its prefixes (those inside
// another dropped) and, as its chain's first rule, the drop of every other source; the rule
// carries the agent's comment. With affinity the firewall still comes first.
func TestGoldenSourceRanges(t *testing.T) {
	// covers: N7, D2
	id := withRanges(ident("172.31.0.100", 80, gwstate.TCP, be("10.0.1.2", 8080), be("10.0.1.1", 8080)),
		"10.0.0.0/8", "10.1.0.0/16", "192.0.2.7/32")
	want := `add table ip kube-ovn
add chain ip kube-ovn dnat-71a63d7e5e0d
add chain ip kube-ovn prerouting { type nat hook prerouting priority -150 ; policy accept ; }
add chain ip kube-ovn vpcgw-guard { type filter hook forward priority -1 ; policy accept ; }
add chain ip kube-ovn vpcgw-guard-local { type filter hook input priority -1 ; policy accept ; }
add chain ip kube-ovn vpcgw-hairpin { type nat hook postrouting priority 99 ; policy accept ; }
add chain ip kube-ovn vpcgw-reply { type nat hook postrouting priority 99 ; policy accept ; }
add set ip kube-ovn src-71a63d7e5e0d { type ipv4_addr ; flags interval ; }
add set ip kube-ovn vpcgw-endpoints { type ipv4_addr . inet_service ; }
add set ip kube-ovn vpcgw-identities { type ipv4_addr . inet_proto . inet_service ; }
add set ip kube-ovn vpcgw-vips { type ipv4_addr ; }
add map ip kube-ovn service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; }
add map ip kube-ovn vpcgw-reply-vips { type ipv4_addr . inet_service : ipv4_addr . inet_service ; }
add rule ip kube-ovn dnat-71a63d7e5e0d ip saddr != @src-71a63d7e5e0d drop comment "vpcgw"
add rule ip kube-ovn dnat-71a63d7e5e0d meta l4proto tcp dnat ip addr . port to jhash ip saddr . th sport . ip daddr . th dport mod 2 seed 0x76706367 map { 0 : 10.0.1.1 . 8080, 1 : 10.0.1.2 . 8080 } comment "vpcgw"
add rule ip kube-ovn prerouting ip daddr . meta l4proto . th dport vmap @service-ips
add rule ip kube-ovn vpcgw-guard ct state new tcp flags & syn == 0 oifname != "eth0" ip saddr . tcp sport @vpcgw-reply-vips accept comment "vpcgw"
add rule ip kube-ovn vpcgw-guard ct state new tcp flags & syn == 0 ip saddr . tcp sport @vpcgw-endpoints drop comment "vpcgw"
add rule ip kube-ovn vpcgw-guard-local ct state new tcp flags & syn == 0 ip saddr . tcp sport @vpcgw-endpoints drop comment "vpcgw"
add rule ip kube-ovn vpcgw-hairpin iifname "eth0" oifname "eth0" ct status dnat ct original ip daddr @vpcgw-vips masquerade comment "vpcgw"
add rule ip kube-ovn vpcgw-reply ct state new tcp flags & syn == 0 oifname != "eth0" snat ip to ip saddr . tcp sport map @vpcgw-reply-vips comment "vpcgw"
add element ip kube-ovn src-71a63d7e5e0d { 10.0.0.0/8 }
add element ip kube-ovn src-71a63d7e5e0d { 192.0.2.7/32 }
add element ip kube-ovn vpcgw-endpoints { 10.0.1.1 . 8080 }
add element ip kube-ovn vpcgw-endpoints { 10.0.1.2 . 8080 }
add element ip kube-ovn vpcgw-identities { 172.31.0.100 . tcp . 80 }
add element ip kube-ovn vpcgw-vips { 172.31.0.100 }
add element ip kube-ovn service-ips { 172.31.0.100 . tcp . 80 : goto dnat-71a63d7e5e0d }
add element ip kube-ovn vpcgw-reply-vips { 10.0.1.1 . 8080 : 172.31.0.100 . 80 }
add element ip kube-ovn vpcgw-reply-vips { 10.0.1.2 . 8080 : 172.31.0.100 . 80 }
`
	if got := freshDump(t, state(1, id)); got != want {
		t.Errorf("dump:\n%s\nwant:\n%s", got, want)
	}
	// The set's name says whose it is: owned by idhash, like the identity's other objects.
	for name, want := range map[string]bool{"src-71a63d7e5e0d": true, "src-71a63d7e5e0": false, "src-71A63D7E5E0D": false, "src-": false} {
		if owned(name) != want {
			t.Errorf("owned(%q) = %v, want %v", name, !want, want)
		}
	}
	if h, ok := objectHash(SourceSet(id)); !ok || h != IdentityHash(id.Key()) {
		t.Errorf("objectHash(%s) = %q, %v", SourceSet(id), h, ok)
	}
	id.AffinityTimeoutSeconds = 60
	got := freshDump(t, state(1, id))
	var rules []string
	for _, l := range strings.Split(got, "\n") {
		if strings.HasPrefix(l, "add rule ip kube-ovn dnat-71a63d7e5e0d ") {
			rules = append(rules, strings.TrimPrefix(l, "add rule ip kube-ovn dnat-71a63d7e5e0d "))
		}
	}
	if len(rules) != 4 || rules[0] != `ip saddr != @src-71a63d7e5e0d drop comment "vpcgw"` || !strings.HasPrefix(rules[1], "ip saddr @aff-") {
		t.Errorf("affinity identity with source ranges: chain rules %q, want the firewall first, then the affinity rules", rules)
	}
}

func TestSourcePrefixes(t *testing.T) {
	// covers: N7
	for _, tc := range []struct{ in, want []string }{
		{[]string{"10.0.0.0/8"}, []string{"10.0.0.0/8"}},
		{[]string{"10.0.0.0/8", "10.1.0.0/16", "192.168.0.0/16"}, []string{"10.0.0.0/8", "192.168.0.0/16"}},
		// As strings "10.1.0.0/16" < "9.0.0.0/8"; by address 9 comes first.
		{[]string{"10.1.0.0/16", "9.0.0.0/8"}, []string{"9.0.0.0/8", "10.1.0.0/16"}},
		{[]string{"0.0.0.0/0", "10.0.0.0/8"}, []string{"0.0.0.0/0"}},
		{[]string{"0.0.0.0/1", "128.0.0.0/1"}, []string{"0.0.0.0/1", "128.0.0.0/1"}},
		{[]string{"10.0.0.0/16", "10.0.0.0/24", "10.0.0.5/32", "10.1.0.0/16"}, []string{"10.0.0.0/16", "10.1.0.0/16"}},
	} {
		var got []string
		for _, p := range sourcePrefixes(slices.Clone(tc.in)) {
			got = append(got, p.String())
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("sourcePrefixes(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// A change of the source ranges alone rewrites the identity, through Apply and through the
// delta fast path, to exactly what a fresh agent writes; removing them deletes the set and the
// rule; an identity that leaves takes its set along.
func TestSourceRangesChangeRerenders(t *testing.T) {
	// covers: N7, D2, D8
	web := ident("172.31.0.100", 80, gwstate.TCP, be("10.0.1.1", 8080))
	other := ident("172.31.0.100", 443, gwstate.TCP, be("10.0.1.1", 8443))
	steps := []gwstate.State{
		state(1, web, other),
		state(2, withRanges(web, "10.0.0.0/8"), other),
		state(3, withRanges(web, "10.0.0.0/8", "192.168.0.0/16"), other),
		state(4, withRanges(web, "192.168.0.0/16"), withRanges(other, "0.0.0.0/1", "128.0.0.0/1")),
		state(5, web, withRanges(other, "0.0.0.0/1", "128.0.0.0/1")),
		state(6, web),
	}
	for _, path := range []string{"apply", "delta"} {
		t.Run(path, func(t *testing.T) {
			f := newFake()
			a := NewAgent(f, logr.Discard())
			ctx := context.Background()
			mustApply(t, a, steps[0])
			for i := 1; i < len(steps); i++ {
				st := steps[i]
				if path == "apply" {
					mustApply(t, a, st)
				} else {
					if ack := handleLine(ctx, a, deltaLine(t, steps[i-1], st), logr.Discard()); ack.Error != "" {
						t.Fatalf("delta to generation %d: %s", st.Generation, ack.Error)
					}
					if a.last.Generation == st.Generation {
						t.Fatalf("delta to generation %d did not take the fast path", st.Generation)
					}
				}
				if got, want := testutil.SortElements(f.Dump()), testutil.SortElements(freshDump(t, st)); got != want {
					t.Fatalf("generation %d:\n%s\nwant (fresh agent):\n%s", st.Generation, got, want)
				}
				if drift, err := a.Verify(ctx); drift != "" || err != nil {
					t.Fatalf("generation %d: verify: %q, %v", st.Generation, drift, err)
				}
			}
			if strings.Contains(f.Dump(), sourcePrefix) {
				t.Errorf("a source set is left without source ranges:\n%s", f.Dump())
			}
		})
	}
	// The contract's equality (what gwstate.Delta sends) sees a change of the ranges alone.
	if d := gwstate.Delta(steps[1], steps[2]); len(d.Identities) != 1 || d.Identities[0].Port != 80 {
		t.Errorf("delta of a source range change: %+v", d)
	}
}

// A firewall rule or source set deleted by hand, or the chain rewritten without the firewall
// (kube-ovn's share DNAT writes the same chain names), is drift, and Verify restores it.
func TestSourceRangesDriftIsRepaired(t *testing.T) {
	// covers: N7, D8, K8
	f := newFake()
	a := NewAgent(f, logr.Discard())
	ctx := context.Background()
	web := withRanges(ident("172.31.0.100", 80, gwstate.TCP, be("10.0.1.1", 8080)), "10.0.0.0/8")
	aff := withRanges(gwstate.Identity{VIP: netip.MustParseAddr("172.31.0.100"), Port: 443, Protocol: gwstate.TCP, AffinityTimeoutSeconds: 60,
		Backends: []gwstate.Backend{be("10.0.1.1", 443), be("10.0.1.2", 443)}}, "192.168.0.0/16")
	mustApply(t, a, state(1, web, aff))
	want := f.Dump()
	chain := IdentityChain(web.Key())
	for name, breakIt := range map[string]func(tx *knftables.Transaction){
		"identity chain rewritten without the firewall": func(tx *knftables.Transaction) {
			tx.Flush(&knftables.Chain{Name: chain})
			tx.Add(&knftables.Rule{Chain: chain, Rule: "meta l4proto tcp dnat ip to 10.0.1.1:8080", Comment: knftables.PtrTo(RuleComment)})
		},
		"affinity chain rewritten without the firewall": func(tx *knftables.Transaction) {
			c := IdentityChain(aff.Key())
			tx.Flush(&knftables.Chain{Name: c})
			for _, r := range affinityRules(aff) {
				tx.Add(&knftables.Rule{Chain: c, Rule: r.text(), Comment: knftables.PtrTo(RuleComment)})
			}
		},
		"source set deleted": func(tx *knftables.Transaction) {
			tx.Flush(&knftables.Chain{Name: chain})
			tx.Add(&knftables.Rule{Chain: chain, Rule: "meta l4proto tcp dnat ip to 10.0.1.1:8080", Comment: knftables.PtrTo(RuleComment)})
			tx.Delete(&knftables.Set{Name: SourceSet(web)})
		},
	} {
		tx := f.NewTransaction()
		breakIt(tx)
		if err := f.Run(ctx, tx); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		drift, err := a.Verify(ctx)
		if drift == "" || err != nil {
			t.Errorf("%s: drift %q, err %v", name, drift, err)
		}
		if got := f.Dump(); testutil.SortElements(got) != testutil.SortElements(want) {
			t.Errorf("%s: not repaired:\n%s\nwant:\n%s", name, got, want)
		}
	}
	// A source set of the agent's that no identity needs any more is drift too.
	tx := f.NewTransaction()
	tx.Add(&knftables.Set{Name: SourceSet(ident("172.31.0.100", 8080, gwstate.TCP)), Type: "ipv4_addr", Flags: []knftables.SetFlag{knftables.IntervalFlag}})
	if err := f.Run(ctx, tx); err != nil {
		t.Fatal(err)
	}
	// (Its idhash is not in vpcgw-identities, so it is not the agent's: no drift.)
	if drift, err := a.Verify(ctx); drift != "" || err != nil {
		t.Errorf("someone else's src- set: drift %q, err %v", drift, err)
	}
}

// After a restart a new agent adopts the table: an unchanged state rewrites nothing visible,
// and one whose ranges were removed while it was down deletes the old agent's source set
// (stale, found by its idhash in vpcgw-identities). A staged cold sync writes the same table
// as a one-transaction sync.
func TestSourceRangesAdoptionAndStaging(t *testing.T) {
	// covers: N7, D8, P2
	f := newFake()
	web := withRanges(ident("172.31.0.100", 80, gwstate.TCP, be("10.0.1.1", 8080)), "10.0.0.0/8", "192.168.0.0/16")
	mustApply(t, NewAgent(f, logr.Discard()), state(1, web))
	want := f.Dump()
	mustApply(t, NewAgent(f, logr.Discard()), state(1, web))
	if got := f.Dump(); testutil.SortElements(got) != testutil.SortElements(want) {
		t.Errorf("adoption of the same state changed the table:\n%s\nwant:\n%s", got, want)
	}
	open := state(2, ident("172.31.0.100", 80, gwstate.TCP, be("10.0.1.1", 8080)))
	mustApply(t, NewAgent(f, logr.Discard()), open)
	if got, want := testutil.SortElements(f.Dump()), testutil.SortElements(freshDump(t, open)); got != want {
		t.Errorf("adoption without the ranges:\n%s\nwant:\n%s", got, want)
	}

	var ids []gwstate.Identity
	for i, r := range sourceRangeVariants {
		for port := int32(1); port <= 3; port++ {
			ids = append(ids, withRanges(ident("172.31.0.100", port+int32(10*i), gwstate.UDP, be("10.0.1.1", 53)), r...))
		}
	}
	st := state(1, ids...)
	sf := newFake()
	a := stagedAgent(sf, 4)
	mustApply(t, a, st)
	if got, want := testutil.SortElements(sf.Dump()), testutil.SortElements(freshDump(t, st)); got != want {
		t.Errorf("staged cold sync:\n%s\nwant:\n%s", got, want)
	}
}

// Conntrack (SPEC N7 with D6): narrowing the ranges names the identity's flows from outside the
// new ranges, TCP as well as UDP; unchanged ranges name nothing; a full sync names them for
// every identity with ranges.
func TestSourceRangesConntrackTargets(t *testing.T) {
	// covers: N7, D6
	ct := &fakeCT{}
	a := newAgent(&knftBackend{nft: newFake()}, logr.Discard(), "", nil, ct)
	tcp := withRanges(ident("172.31.0.100", 80, gwstate.TCP, be("10.0.1.1", 80)), "10.0.0.0/8", "192.168.0.0/16")
	plain := ident("172.31.0.100", 81, gwstate.TCP, be("10.0.1.1", 80))
	mustApply(t, a, state(1, tcp, plain))
	if got := describe(ct.calls[len(ct.calls)-1]); !slices.Equal(got, []string{"172.31.0.100:tcp from outside [10.0.0.0/8 192.168.0.0/16]"}) {
		t.Errorf("full sync targets %v", got)
	}
	n := len(ct.calls)
	tcp.Backends = append(tcp.Backends, be("10.0.1.2", 80))
	mustApply(t, a, state(2, tcp, plain))
	if len(ct.calls) != n {
		t.Errorf("a TCP backend change with the same ranges cleaned conntrack: %v", describe(ct.calls[len(ct.calls)-1]))
	}
	tcp.SourceRanges = []string{"192.168.0.0/16"}
	mustApply(t, a, state(3, tcp, plain))
	if got := describe(ct.calls[len(ct.calls)-1]); !slices.Equal(got, []string{"172.31.0.100:tcp from outside [192.168.0.0/16]"}) {
		t.Errorf("narrowed ranges: targets %v", got)
	}
	// Through the delta fast path, with a UDP backend change at the same time: one target
	// with both conditions.
	udp := withRanges(ident("172.31.0.100", 53, gwstate.UDP, be("10.0.1.1", 53), be("10.0.1.2", 53)), "10.0.0.0/8")
	prev := state(4, tcp, plain, udp)
	mustApply(t, a, prev)
	next := state(5, tcp, plain, withRanges(ident("172.31.0.100", 53, gwstate.UDP, be("10.0.1.2", 53)), "10.9.0.0/16"))
	if ack := handleLine(context.Background(), a, deltaLine(t, prev, next), logr.Discard()); ack.Error != "" {
		t.Fatal(ack.Error)
	}
	if got := describe(ct.calls[len(ct.calls)-1]); !slices.Equal(got, []string{"172.31.0.100:udp:10.0.1.2:53 from outside [10.9.0.0/16]"}) {
		t.Errorf("delta: targets %v", got)
	}

	// What a target deletes.
	tgt, ok := flowTarget(false, withRanges(tcp, "192.168.0.0/16"), withRanges(tcp, "10.0.0.0/8", "192.168.0.0/16"), true)
	if !ok {
		t.Fatal("no target for narrowed ranges")
	}
	backend := netip.MustParseAddrPort("10.0.1.1:80")
	for src, stale := range map[string]bool{"192.168.3.4": false, "10.1.2.3": true, "172.31.0.2": true} {
		if got := tgt.stale(netip.MustParseAddr(src), backend); got != stale {
			t.Errorf("flow from %s: stale %v, want %v", src, got, stale)
		}
	}
}

// fakeOwnAddrs is the gateway's addresses in memory.
type fakeOwnAddrs struct {
	have  map[netip.Addr]string
	reads int
}

func (f *fakeOwnAddrs) refresh() error { f.reads++; return nil }
func (f *fakeOwnAddrs) lookup(a netip.Addr) (string, bool) {
	l, ok := f.have[a]
	return l, ok
}

// A backend that is one of the gateway's own addresses gets its identity refused by name,
// through Apply, the delta fast path and the stream (the Ack names it and says why): the gateway
// keeps what it had committed for that identity, and the state's other identities are applied
// in the same round trip. The addresses are read once per apply, and not at all when no
// identity changed.
func TestOwnAddressBackendRefused(t *testing.T) {
	// covers: N2, D8
	f := newFake()
	a := NewAgent(f, logr.Discard())
	own := &fakeOwnAddrs{have: map[netip.Addr]string{
		netip.MustParseAddr("10.77.1.254"):  "eth0",
		netip.MustParseAddr("172.31.0.100"): "net1",
		netip.MustParseAddr("10.96.0.10"):   VIPLabel,
	}}
	a.own = own
	ctx := context.Background()
	web := ident("172.31.0.100", 80, gwstate.TCP, be("10.77.1.11", 8080), be("10.77.1.12", 8080))
	other := ident("172.31.0.100", 81, gwstate.TCP, be("10.77.1.13", 8080))
	late := ident("172.31.0.100", 82, gwstate.TCP, be("10.77.1.14", 8080))
	mustApply(t, a, state(1, web, other))
	if own.reads != 1 {
		t.Errorf("addresses read %d times for one apply, want 1", own.reads)
	}
	mustApply(t, a, state(2, web, other))
	if own.reads != 1 {
		t.Errorf("addresses read for an unchanged state (%d reads)", own.reads)
	}
	// What the gateway must hold after each refusal: web as committed before, other gone, late new.
	want := testutil.SortElements(freshDump(t, state(1, web, late)))
	gen := int64(2)
	for _, bad := range []string{"10.77.1.254", "172.31.0.100", "10.96.0.10"} {
		evil := ident("172.31.0.100", 80, gwstate.TCP, be("10.77.1.11", 8080), be(bad, 8080))
		check := func(how string, refused []gwstate.Refusal) {
			t.Helper()
			if len(refused) != 1 || refused[0].IdentityKey != evil.Key() || !strings.Contains(refused[0].Reason, "backend "+bad+":8080 is an address of the gateway itself") {
				t.Errorf("backend %s (%s): refused %+v, want %s refused for the gateway's own address", bad, how, refused, evil.Key())
			}
			if got := testutil.SortElements(f.Dump()); got != want {
				t.Errorf("backend %s (%s): table\n%s\nwant the previous web beside the new identity:\n%s", bad, how, got, want)
			}
			if d, err := a.desired(); err != nil || d.Generation != gen || len(d.Identities) != 2 || !d.Identities[0].Equal(evil) {
				t.Errorf("backend %s (%s): desired state is %+v (%v), want generation %d as sent", bad, how, d, err, gen)
			}
		}
		gen++
		if err := a.Apply(ctx, state(gen, evil, late)); err != nil {
			t.Errorf("backend %s: Apply: %v, want the identity refused alone", bad, err)
		}
		check("complete state", a.Refusals())

		gen++
		prev := state(gen, web, other)
		mustApply(t, a, prev)
		gen++
		ack := handleLine(ctx, a, deltaLine(t, prev, state(gen, evil, late)), logr.Discard())
		if ack.Error != "" || ack.Generation != gen {
			t.Errorf("backend %s: delta ack %+v, want generation %d applied", bad, ack, gen)
		}
		check("delta", ack.Refused)
		gen++
		mustApply(t, a, state(gen, web, other))
	}
}
