// covers: D1, D2, D3, D8
package dataplane

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/netlab"
)

func nftList(t *testing.T, l *netlab.Lab, ns string, args ...string) string {
	t.Helper()
	out, err := l.Exec(ns, append([]string{"nft"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func nftApply(t *testing.T, l *netlab.Lab, ns, script string) {
	t.Helper()
	// One statement per argv: nft joins its arguments into one command.
	for _, stmt := range strings.Split(strings.TrimSpace(script), "\n") {
		if _, err := l.Exec(ns, append([]string{"nft"}, strings.Fields(stmt)...)...); err != nil {
			t.Fatal(err)
		}
	}
}

func startAgent(t *testing.T, l *netlab.Lab, ns string) *netlab.AgentProc {
	t.Helper()
	a, err := l.StartAgent(ns, helperCmd(t, "agent")...)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func send(t *testing.T, a *netlab.AgentProc, st gwstate.State) gwstate.Ack {
	t.Helper()
	ack, err := a.Send(st)
	if err != nil {
		t.Fatal(err)
	}
	if ack.Generation != st.Generation {
		t.Fatalf("ack %+v for generation %d", ack, st.Generation)
	}
	return ack
}

func mustSend(t *testing.T, a *netlab.AgentProc, st gwstate.State) {
	t.Helper()
	if ack := send(t, a, st); ack.Error != "" {
		t.Fatalf("generation %d: %s", st.Generation, ack.Error)
	}
}

func wantContains(t *testing.T, what, text string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(text, s) {
			t.Errorf("%s lacks %q:\n%s", what, s, text)
		}
	}
}

func wantLacks(t *testing.T, what, text string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if strings.Contains(text, s) {
			t.Errorf("%s still has %q:\n%s", what, s, text)
		}
	}
}

func TestRealApplyAdoptAndForeignObjects(t *testing.T) {
	l := newLab(t)
	gw, err := l.AddNetns("gw")
	if err != nil {
		t.Fatal(err)
	}
	web := ident("10.96.0.10", 80, gwstate.TCP, be("10.0.1.12", 8080), be("10.0.1.11", 8080))
	dns := ident("10.96.0.10", 53, gwstate.UDP, be("10.0.1.11", 53))
	aff := gwstate.Identity{VIP: netip.MustParseAddr("10.96.0.11"), Port: 443, Protocol: gwstate.TCP, AffinityTimeoutSeconds: 600,
		Backends: []gwstate.Backend{be("10.0.1.11", 443), be("10.0.1.12", 443)}}

	a1 := startAgent(t, l, gw)
	mustSend(t, a1, state(1, web, dns, aff))
	table := nftList(t, l, gw, "list", "table", "ip", "kube-ovn")
	webChain := IdentityChain(web.Key())
	dnsChain := IdentityChain(dns.Key())
	affChain := IdentityChain(aff.Key())
	wantContains(t, "table after generation 1", table,
		"chain prerouting {\n\t\ttype nat hook prerouting priority mangle; policy accept;\n\t\tip daddr . meta l4proto . th dport vmap @service-ips\n\t}",
		"type ipv4_addr . inet_proto . inet_service : verdict",
		"10.96.0.10 . tcp . 80 : goto "+webChain,
		"10.96.0.10 . udp . 53 : goto "+dnsChain,
		"10.96.0.11 . tcp . 443 : goto "+affChain,
		"chain "+webChain+" {\n\t\tdnat ip to jhash ip saddr . tcp sport . ip daddr . tcp dport mod 2 seed 0x76706367 map { 0 : 10.0.1.11 . 8080, 1 : 10.0.1.12 . 8080 } comment \"vpcgw\"\n\t}",
		"chain "+dnsChain+" {\n\t\tmeta l4proto udp dnat to 10.0.1.11:53 comment \"vpcgw\"\n\t}",
		"set "+AffinitySet(aff, be("10.0.1.11", 443))+" {",
		"timeout 10m",
		"ip saddr @"+AffinitySet(aff, be("10.0.1.12", 443))+" goto "+EndpointChain(aff, be("10.0.1.12", 443)),
		"update @"+AffinitySet(aff, be("10.0.1.11", 443))+" { ip saddr }",
	)
	// Unchanged state: acked, table byte-identical.
	mustSend(t, a1, state(2, web, dns, aff))
	if again := nftList(t, l, gw, "list", "table", "ip", "kube-ovn"); again != table {
		t.Errorf("unchanged state changed the table:\n%s\nwas:\n%s", again, table)
	}
	if err := a1.Close(); err != nil {
		t.Fatalf("agent at EOF: %v", err)
	}

	// Someone else's objects, stale objects of ours (dns's key is in OwnedSet: an endpoint
	// chain and set of its), and an identity kube-ovn's share DNAT wrote (key not in OwnedSet).
	dnsHash := IdentityHash(dns.Key())
	staleEP, staleSet := "ep-"+dnsHash+"-01234567", "aff-"+dnsHash+"-01234567"
	kubeOVN := IdentityChain(key("10.96.0.99", 80, gwstate.TCP))
	nftApply(t, l, gw, `
add table ip foreign
add chain ip foreign dnat-0123456789ab
add rule ip foreign dnat-0123456789ab counter
add chain ip kube-ovn mychain
add rule ip kube-ovn mychain counter
add set ip kube-ovn `+staleSet+` { type ipv4_addr ; flags dynamic,timeout ; timeout 60s ; }
add chain ip kube-ovn `+staleEP+`
add rule ip kube-ovn `+staleEP+` update @`+staleSet+` { ip saddr }
add chain ip kube-ovn `+kubeOVN+`
add rule ip kube-ovn `+kubeOVN+` meta l4proto tcp dnat ip addr . port to numgen random mod 1 map { 0 : 10.0.1.9 . 80 }
add element ip kube-ovn service-ips { 10.96.0.99 . tcp . 80 : goto `+kubeOVN+` }`)

	// A restarted agent adopts the table: dns goes, web stays, stale objects go, foreign and
	// kube-ovn's stay (SPEC D8, K8).
	a2 := startAgent(t, l, gw)
	mustSend(t, a2, state(1, web, aff))
	table = nftList(t, l, gw, "list", "table", "ip", "kube-ovn")
	wantContains(t, "adopted table", table,
		"10.96.0.10 . tcp . 80 : goto "+webChain, "chain "+webChain, "chain mychain {\n\t\tcounter",
		"chain "+EndpointChain(aff, be("10.0.1.11", 443)),
		"10.96.0.99 . tcp . 80 : goto "+kubeOVN, "chain "+kubeOVN+" {\n\t\tmeta l4proto tcp dnat ip to numgen random mod 1 map { 0 : 10.0.1.9 . 80 }")
	wantLacks(t, "adopted table", table, "10.96.0.10 . udp . 53", dnsChain, staleEP, staleSet)
	wantContains(t, "foreign table", nftList(t, l, gw, "list", "table", "ip", "foreign"), "chain dnat-0123456789ab {\n\t\tcounter")
	if n := strings.Count(table, "vmap @service-ips"); n != 1 {
		t.Errorf("prerouting has %d dispatch rules, want 1:\n%s", n, table)
	}
	// And it is incremental from here: removing web touches web only.
	mustSend(t, a2, state(2, aff))
	table = nftList(t, l, gw, "list", "table", "ip", "kube-ovn")
	wantLacks(t, "table after removal", table, webChain, "10.96.0.10")
	wantContains(t, "table after removal", table, "chain mychain", affChain)
	if err := a2.Close(); err != nil {
		t.Fatalf("agent at EOF: %v", err)
	}
}

// The kernel refuses one identity of a state (a foreign object takes its chain's name): the agent
// names exactly that identity in its acknowledgement, and programs the state's other identities,
// old and new, in the same round trip (SPEC D8, N4). Once the cause is gone, the next message
// programs it. The text path (nft) cannot tell which identity failed: it refuses the state whole
// and leaves the table as it was.
// covers: D8, N4
func TestRealKernelRefusalNamesIdentities(t *testing.T) {
	l := newLab(t)
	web := ident("10.96.0.10", 80, gwstate.TCP, be("10.0.1.11", 8080), be("10.0.1.12", 8080))
	next := ident("10.96.0.20", 80, gwstate.TCP, be("10.0.1.13", 8080))
	late := ident("10.96.0.30", 80, gwstate.TCP, be("10.0.1.14", 8080))
	clash := IdentityChain(next.Key())
	addClash := func(gw string) {
		// A foreign object named like the chain the next identity needs, but of an incompatible
		// type: a filter base chain cannot hold dnat and cannot be a goto target. The state is
		// valid; the kernel refuses the identity's messages.
		if _, err := l.Exec(gw, "nft", "add", "chain", "ip", "kube-ovn", clash, "{", "type", "filter", "hook", "input", "priority", "0", ";", "}"); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("netlink", func(t *testing.T) {
		gw, err := l.AddNetns("gw")
		if err != nil {
			t.Fatal(err)
		}
		a := startAgent(t, l, gw)
		mustSend(t, a, state(1, web))
		addClash(gw)
		web2 := web
		web2.Backends = web.Backends[:1]
		ack := send(t, a, state(2, web2, next, late))
		if ack.Error != "" || len(ack.Refused) != 1 || ack.Refused[0].IdentityKey != next.Key() ||
			!strings.Contains(strings.ToLower(ack.Refused[0].Reason), "operation not supported") || ack.Protocol != gwstate.ProtocolVersion {
			t.Fatalf("ack %+v, want %s alone refused with the kernel's 'operation not supported'", ack, next.Key())
		}
		table := nftList(t, l, gw, "list", "table", "ip", "kube-ovn")
		wantContains(t, "table beside the refused identity", table,
			"chain "+IdentityChain(web.Key())+" {\n\t\tmeta l4proto tcp dnat to 10.0.1.11:8080",
			"chain "+IdentityChain(late.Key())+" {\n\t\tmeta l4proto tcp dnat to 10.0.1.14:8080",
			"chain "+clash+" {\n\t\ttype filter hook input priority filter; policy accept;\n\t}")
		if strings.Contains(table, "10.96.0.20 . tcp . 80") || strings.Contains(table, "10.0.1.13") {
			t.Errorf("the refused identity is programmed:\n%s", table)
		}
		// Unchanged, it is named again with the next message (a delta that changes another).
		late2 := late
		late2.Backends = append(late2.Backends, be("10.0.1.15", 8080))
		if ack := send(t, a, state(3, web2, next, late2)); ack.Error != "" || len(ack.Refused) != 1 || ack.Refused[0].IdentityKey != next.Key() {
			t.Fatalf("ack %+v, want %s refused again", ack, next.Key())
		}
		wantContains(t, "table after the next change", nftList(t, l, gw, "list", "table", "ip", "kube-ovn"), "10.0.1.15 . 8080")
		// The cause goes: the next message programs it (an unchanged state).
		if _, err := l.Exec(gw, "nft", "delete", "chain", "ip", "kube-ovn", clash); err != nil {
			t.Fatal(err)
		}
		if ack := send(t, a, state(4, web2, next, late2)); ack.Error != "" || len(ack.Refused) != 0 {
			t.Fatalf("ack %+v, want nothing refused once the clash is gone", ack)
		}
		wantContains(t, "table once the cause is gone", nftList(t, l, gw, "list", "table", "ip", "kube-ovn"),
			"chain "+clash+" {\n\t\tmeta l4proto tcp dnat to 10.0.1.13:8080", "10.96.0.20 . tcp . 80 : goto "+clash)
		// A bad line in between does not kill it, nor does one whose backend address does not
		// parse (a malformed message, refused whole).
		if ack, err := a.SendLine([]byte("{not json"), 10*time.Second); err != nil || ack.Error == "" || ack.Generation != 0 {
			t.Errorf("bad line: ack %+v, err %v", ack, err)
		}
		badAddr := `{"generation":5,"identities":[{"vip":"10.96.0.10","port":80,"protocol":"tcp","backends":[{"ip":"10.0.1.300","port":8080}]}]}`
		if ack, err := a.SendLine([]byte(badAddr), 10*time.Second); err != nil || ack.Generation != 0 || !strings.Contains(ack.Error, `cannot decode state: ParseAddr("10.0.1.300")`) {
			t.Errorf("line with a malformed backend address: ack %+v, err %v", ack, err)
		}
		mustSend(t, a, state(5, web2))
		if err := a.Close(); err != nil {
			t.Fatalf("agent at EOF: %v", err)
		}
	})

	t.Run("text path", func(t *testing.T) {
		gw, err := l.AddNetns("gwt")
		if err != nil {
			t.Fatal(err)
		}
		a := startAgentArgs(t, l, gw, "--text-path")
		mustSend(t, a, state(1, web))
		addClash(gw)
		before := nftList(t, l, gw, "list", "ruleset")
		ack := send(t, a, state(2, web, next))
		if ack.Error == "" || !strings.Contains(strings.ToLower(ack.Error), "operation not supported") {
			t.Fatalf("ack %+v, want nft's 'Operation not supported' for the whole state", ack)
		}
		if after := nftList(t, l, gw, "list", "ruleset"); after != before {
			t.Errorf("rejected transaction changed the ruleset:\n%s\nbefore:\n%s", after, before)
		}
		// The agent keeps working: a state it can apply is applied (after a full re-list).
		web2 := web
		web2.Backends = web.Backends[:1]
		mustSend(t, a, state(3, web2))
		wantContains(t, "table after recovery", nftList(t, l, gw, "list", "table", "ip", "kube-ovn"),
			"chain "+IdentityChain(web.Key())+" {\n\t\tmeta l4proto tcp dnat to 10.0.1.11:8080")
	})
}

// topology builds client -- gateway -- {be1, be2}: the client routes everything to the gateway,
// the gateway forwards, each backend's default route is the gateway. Returns the namespaces.
func topology(t *testing.T, l *netlab.Lab) (client, gw, be1, be2 string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var err error
	client, err = l.AddNetns("cli")
	must(err)
	gw, err = l.AddNetns("gw")
	must(err)
	be1, err = l.AddNetns("be1")
	must(err)
	be2, err = l.AddNetns("be2")
	must(err)
	must(l.Veth(client, "eth0", gw, "gw-cli"))
	must(l.Veth(be1, "eth0", gw, "gw-be1"))
	must(l.Veth(be2, "eth0", gw, "gw-be2"))
	must(l.AddAddr(client, "eth0", "10.0.0.2/24"))
	must(l.AddAddr(gw, "gw-cli", "10.0.0.1/24"))
	must(l.AddAddr(gw, "gw-be1", "10.0.1.1/24"))
	must(l.AddAddr(gw, "gw-be2", "10.0.2.1/24"))
	must(l.AddAddr(be1, "eth0", "10.0.1.11/24"))
	must(l.AddAddr(be2, "eth0", "10.0.2.12/24"))
	must(l.AddRoute(client, "default", "via", "10.0.0.1"))
	must(l.AddRoute(be1, "default", "via", "10.0.1.1"))
	must(l.AddRoute(be2, "default", "via", "10.0.2.1"))
	must(l.Sysctl(gw, "net.ipv4.ip_forward", "1"))
	return
}

func TestRealTraffic(t *testing.T) {
	l := newLab(t)
	client, gw, be1, be2 := topology(t, l)
	for ns, name := range map[string]string{be1: "be1", be2: "be2"} {
		addr := map[string]string{"be1": "10.0.1.11:8080", "be2": "10.0.2.12:8080"}[name]
		if _, err := l.StartEcho(ns, helperCmd(t, "echo"), name, addr); err != nil {
			t.Fatal(err)
		}
	}
	const vip = "10.200.100.100" // on no interface: the client routes it to the gateway
	both := ident(vip, 80, gwstate.TCP, be("10.0.1.11", 8080), be("10.0.2.12", 8080))
	udp := ident(vip, 53, gwstate.UDP, be("10.0.2.12", 8080))
	a := startAgent(t, l, gw)
	mustSend(t, a, state(1, both, udp))

	probe := func(proto string, port string, n int) netlab.ProbeResult {
		t.Helper()
		res, err := l.Probe(client, helperCmd(t, "probe"), netlab.ProbeOptions{Target: vip + ":" + port, Proto: proto, Count: n, Timeout: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// 40 new connections spread at random over 2 backends: each answers at least once unless
	// the dice fail with probability 2^-39.
	res := probe("tcp", "80", 40)
	if res.Errors != 0 || res.Total() != 40 || res.Answers["be1"] < 1 || res.Answers["be2"] < 1 {
		t.Errorf("two backends: %+v, want 40 answers from both be1 and be2", res)
	}
	t.Logf("two backends, 40 TCP requests: %v", res.Answers)

	res = probe("udp", "53", 10)
	if res.Errors != 0 || res.Answers["be2"] != 10 {
		t.Errorf("udp: %+v, want 10 answers from be2", res)
	}

	one := ident(vip, 80, gwstate.TCP, be("10.0.1.11", 8080))
	mustSend(t, a, state(2, one, udp))
	res = probe("tcp", "80", 20)
	if res.Errors != 0 || res.Answers["be1"] != 20 {
		t.Errorf("one backend: %+v, want 20 answers from be1", res)
	}

	// ClientIP affinity: one client always lands on the same backend.
	sticky := both
	sticky.AffinityTimeoutSeconds = 300
	mustSend(t, a, state(3, sticky, udp))
	res = probe("tcp", "80", 20)
	if res.Errors != 0 || len(res.Answers) != 1 || res.Total() != 20 {
		t.Errorf("affinity: %+v, want 20 answers from one backend", res)
	}

	// Changing the timeout recreates the sets in one transaction the kernel accepts; a
	// backend change keeps the staying backend's set.
	sticky.AffinityTimeoutSeconds = 600
	mustSend(t, a, state(4, sticky, udp))
	sticky.Backends = sticky.Backends[1:]
	mustSend(t, a, state(5, sticky, udp))
	res = probe("tcp", "80", 5)
	if res.Errors != 0 || res.Answers["be2"] != 5 {
		t.Errorf("affinity, one backend left: %+v, want 5 answers from be2", res)
	}
	wantContains(t, "table with affinity", nftList(t, l, gw, "list", "table", "ip", "kube-ovn"), "timeout 10m", "10.0.0.2")

	// Without identities nothing is DNATed: the VIP is not served.
	mustSend(t, a, state(6))
	res, err := l.Probe(client, helperCmd(t, "probe"), netlab.ProbeOptions{Target: vip + ":80", Count: 1, Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Total() != 0 {
		t.Errorf("empty state still answers: %+v", res)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("agent at EOF: %v", err)
	}
}
