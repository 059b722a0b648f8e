// covers: D2, D3, D4, D5, D6, D8, L6, L7
package dataplane

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/netlab"
)

// gwLab is a gateway as kube-ovn builds it, in namespaces:
//
//	ext (eth0 172.31.0.2 + extra client addresses) ── net1 gw (172.31.0.1, EIP 172.31.0.100 on net1)
//	gw eth0 10.77.1.254 ── bridge in "vpc" ── be1..beN 10.77.1.11.. and the VPC client 10.77.1.50
//
// Backends and the VPC client route everything through the gateway's eth0 address.
type gwLab struct {
	l                  *netlab.Lab
	ext, gw, vpc, vcli string
	backends           []string // namespaces
	backendIPs         []string
}

const (
	eip       = "172.31.0.100"
	clusterIP = "10.96.0.10"
	gwLanIP   = "10.77.1.254"
	extIP     = "172.31.0.2"
	vpcCliIP  = "10.77.1.50"
)

func newGWLab(t *testing.T, nBackends int) *gwLab {
	t.Helper()
	g := &gwLab{l: newLab(t)}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var err error
	for _, p := range []struct {
		ns    *string
		short string
	}{{&g.ext, "ext"}, {&g.gw, "gw"}, {&g.vpc, "vpc"}, {&g.vcli, "vcli"}} {
		*p.ns, err = g.l.AddNetns(p.short)
		must(err)
	}
	must(g.l.Veth(g.ext, "eth0", g.gw, "net1"))
	must(g.l.AddAddr(g.ext, "eth0", extIP+"/24"))
	must(g.l.AddAddr(g.gw, "net1", "172.31.0.1/24"))
	must(g.l.AddAddr(g.gw, "net1", eip+"/24"))
	must(g.l.AddRoute(g.ext, "default", "via", "172.31.0.1"))
	must(g.l.AddBridge(g.vpc, "br0"))
	must(g.l.VethToBridge(g.gw, "eth0", g.vpc, "p-gw", "br0"))
	must(g.l.AddAddr(g.gw, "eth0", gwLanIP+"/24"))
	must(g.l.VethToBridge(g.vcli, "eth0", g.vpc, "p-vcli", "br0"))
	must(g.l.AddAddr(g.vcli, "eth0", vpcCliIP+"/24"))
	must(g.l.AddRoute(g.vcli, "default", "via", gwLanIP))
	must(g.l.Sysctl(g.gw, "net.ipv4.ip_forward", "1"))
	must(g.l.Sysctl(g.gw, "net.ipv4.conf.all.rp_filter", "0"))
	must(g.l.Sysctl(g.gw, "net.ipv4.conf.all.send_redirects", "0"))
	must(g.l.Sysctl(g.gw, "net.ipv4.conf.eth0.send_redirects", "0"))
	for i := 0; i < nBackends; i++ {
		name := fmt.Sprintf("be%d", i+1)
		ip := fmt.Sprintf("10.77.1.%d", 11+i)
		ns, err := g.l.AddNetns(name)
		must(err)
		must(g.l.VethToBridge(ns, "eth0", g.vpc, "p-"+name, "br0"))
		must(g.l.AddAddr(ns, "eth0", ip+"/24"))
		must(g.l.AddRoute(ns, "default", "via", gwLanIP))
		if _, err := g.l.StartEcho(ns, helperCmd(t, "echo"), name, ip+":8080"); err != nil {
			t.Fatal(err)
		}
		g.backends = append(g.backends, ns)
		g.backendIPs = append(g.backendIPs, ip)
	}
	return g
}

func (g *gwLab) bes(port int32, idx ...int) []gwstate.Backend {
	var out []gwstate.Backend
	for _, i := range idx {
		out = append(out, be(g.backendIPs[i], port))
	}
	return out
}

func (g *gwLab) probe(t *testing.T, ns string, o netlab.ProbeOptions) netlab.ProbeResult {
	t.Helper()
	if o.Timeout == 0 {
		o.Timeout = 3 * time.Second
	}
	res, err := g.l.Probe(ns, helperCmd(t, "probe"), o)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func startAgentArgs(t *testing.T, l *netlab.Lab, ns string, args ...string) *netlab.AgentProc {
	t.Helper()
	a, err := l.StartAgent(ns, append(helperCmd(t, "agent"), args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func withClusterIPs(st gwstate.State, ips ...string) gwstate.State {
	st.ClusterIPs = addrs(ips...)
	st.Normalize()
	return st
}

// within checks that every backend got a share of n requests within [lo, hi].
func within(t *testing.T, what string, res netlab.ProbeResult, names []string, lo, hi int) {
	t.Helper()
	for _, n := range names {
		if c := res.Answers[n]; c < lo || c > hi {
			t.Errorf("%s: backend %s answered %d times, want %d..%d (answers %v, errors %d %s)", what, n, c, lo, hi, res.Answers, res.Errors, res.LastError)
		}
	}
}

func TestRealHairpinLoopbackAndDistribution(t *testing.T) {
	g := newGWLab(t, 4)
	all := []int{0, 1, 2, 3}
	web := ident(eip, 80, gwstate.TCP, g.bes(8080, all...)...)
	webCIP := ident(clusterIP, 80, gwstate.TCP, g.bes(8080, all...)...)
	dns := ident(eip, 53, gwstate.UDP, g.bes(8080, all...)...)
	// An address someone else put on lo, and a stale one of ours.
	if _, err := g.l.Exec(g.gw, "ip", "addr", "add", "10.96.0.99/32", "dev", "lo"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.l.Exec(g.gw, "ip", "addr", "add", "10.96.0.77/32", "dev", "lo", "label", VIPLabel); err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, g.l, g.gw)
	mustSend(t, a, withClusterIPs(state(1, web, webCIP, dns), clusterIP))

	lo := string(mustExec(t, g.l, g.gw, "ip", "-4", "addr", "show", "dev", "lo"))
	wantContains(t, "lo", lo, "inet "+clusterIP+"/32 scope global "+VIPLabel, "inet 10.96.0.99/32")
	wantLacks(t, "lo", lo, "10.96.0.77")

	// Distribution (D2): 4 backends, 400 new TCP connections: each backend's count is
	// Binomial(400, 1/4) (mean 100, sd 8.7); 40..160 is ±6.9 sd, so a false failure has
	// probability below 1e-11. UDP: 200 flows, mean 50, sd 6.1, 10..90 is ±6.5 sd.
	names := []string{"be1", "be2", "be3", "be4"}
	res := g.probe(t, g.ext, netlab.ProbeOptions{Target: eip + ":80", Count: 400})
	if res.Errors != 0 {
		t.Errorf("tcp distribution: %d errors: %s", res.Errors, res.LastError)
	}
	within(t, "tcp distribution", res, names, 40, 160)
	t.Logf("400 TCP connections over 4 backends: %v", res.Answers)
	res = g.probe(t, g.ext, netlab.ProbeOptions{Target: eip + ":53", Proto: "udp", Count: 200})
	within(t, "udp distribution", res, names, 10, 90)
	t.Logf("200 UDP flows over 4 backends: %v", res.Answers)

	// Hairpin (D4): a VPC client through the EIP and through the ClusterIP reaches backends
	// in its own subnet, which see the gateway's eth0 address; an external client keeps its
	// source address.
	for _, target := range []string{eip + ":80", clusterIP + ":80"} {
		res = g.probe(t, g.vcli, netlab.ProbeOptions{Target: target, Path: "/whoami", Count: 20})
		if res.Errors != 0 || res.Total() != 20 {
			t.Errorf("VPC client via %s: %+v", target, res)
		}
		for ans := range res.Answers {
			if !strings.HasSuffix(ans, " "+gwLanIP) {
				t.Errorf("VPC client via %s: backend saw %q, want the gateway's eth0 address %s", target, ans, gwLanIP)
			}
		}
	}
	res = g.probe(t, g.vcli, netlab.ProbeOptions{Target: eip + ":53", Proto: "udp", Path: "/whoami", Count: 5})
	for ans := range res.Answers {
		if !strings.HasSuffix(ans, " "+gwLanIP) {
			t.Errorf("VPC client via UDP: backend saw %q, want %s", ans, gwLanIP)
		}
	}
	res = g.probe(t, g.ext, netlab.ProbeOptions{Target: eip + ":80", Path: "/whoami", Count: 10})
	for ans := range res.Answers {
		if !strings.HasSuffix(ans, " "+extIP) {
			t.Errorf("external client: backend saw %q, want the client's own address %s", ans, extIP)
		}
	}
	if res.Total() != 10 {
		t.Errorf("external client: %+v", res)
	}

	// D5: a held ClusterIP on a port no identity serves is refused by the gateway itself
	// (not routed back into the VPC, where it would time out).
	res = g.probe(t, g.vcli, netlab.ProbeOptions{Target: clusterIP + ":81", Count: 1, Timeout: 2 * time.Second})
	if res.Errors != 1 || !strings.Contains(res.LastError, "connection refused") {
		t.Errorf("unserved port on the ClusterIP: %+v, want connection refused", res)
	}

	// The ClusterIP leaves: its lo address goes, the unlabelled one stays.
	mustSend(t, a, state(2, web))
	lo = string(mustExec(t, g.l, g.gw, "ip", "-4", "addr", "show", "dev", "lo"))
	wantLacks(t, "lo after removal", lo, clusterIP)
	wantContains(t, "lo after removal", lo, "10.96.0.99/32")
	if err := a.Close(); err != nil {
		t.Fatalf("agent at EOF: %v", err)
	}
}

func mustExec(t *testing.T, l *netlab.Lab, ns string, argv ...string) []byte {
	t.Helper()
	out, err := l.Exec(ns, argv...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRealAffinity(t *testing.T) {
	g := newGWLab(t, 3)
	// 30 external clients.
	var clients []string
	for i := 0; i < 30; i++ {
		ip := fmt.Sprintf("172.31.0.%d", 10+i)
		if err := g.l.AddAddr(g.ext, "eth0", ip+"/24"); err != nil {
			t.Fatal(err)
		}
		clients = append(clients, ip)
	}
	sticky := ident(eip, 80, gwstate.TCP, g.bes(8080, 0, 1, 2)...)
	sticky.AffinityTimeoutSeconds = 600
	a := startAgent(t, g.l, g.gw)
	mustSend(t, a, state(1, sticky))

	chosen := map[string]string{}
	used := map[string]int{}
	for _, c := range clients {
		res := g.probe(t, g.ext, netlab.ProbeOptions{Target: eip + ":80", Source: c, Count: 4})
		if res.Errors != 0 || len(res.Answers) != 1 {
			t.Fatalf("client %s: %+v, want 4 answers from one backend", c, res)
		}
		for b := range res.Answers {
			chosen[c] = b
			used[b]++
		}
	}
	// 30 clients pick among 3 backends at random: all on one backend has probability
	// 3^-29, two or fewer backends used is 3·(2/3)^30 ≈ 1.6e-5: require at least two.
	if len(used) < 2 {
		t.Errorf("30 clients all stuck to one backend: %v", used)
	}
	t.Logf("30 clients over 3 backends: %v", used)

	// Remove a backend that client 0 does not use: client 0 keeps its backend.
	c0 := clients[0]
	keep := []int{}
	for i := range 3 {
		if fmt.Sprintf("be%d", i+1) == chosen[c0] {
			keep = append(keep, i)
		}
	}
	for i := range 3 {
		if len(keep) < 2 && fmt.Sprintf("be%d", i+1) != chosen[c0] {
			keep = append(keep, i)
		}
	}
	sticky.Backends = g.bes(8080, keep...)
	mustSend(t, a, state(2, sticky))
	res := g.probe(t, g.ext, netlab.ProbeOptions{Target: eip + ":80", Source: c0, Count: 10})
	if res.Errors != 0 || res.Answers[chosen[c0]] != 10 {
		t.Errorf("after removing another backend, client %s: %+v, want 10 answers from %s", c0, res, chosen[c0])
	}
	if err := a.Close(); err != nil {
		t.Fatalf("agent at EOF: %v", err)
	}
}

func TestRealUDPFlowsLeaveRemovedBackend(t *testing.T) {
	g := newGWLab(t, 2)
	dns := ident(eip, 53, gwstate.UDP, g.bes(8080, 0, 1)...)
	a := startAgent(t, g.l, g.gw)
	mustSend(t, a, state(1, dns))
	// One UDP flow: the same source port for every datagram.
	flow := netlab.ProbeOptions{Target: eip + ":53", Proto: "udp", Source: extIP + ":40053", Count: 5, Timeout: time.Second}
	res := g.probe(t, g.ext, flow)
	if res.Errors != 0 || len(res.Answers) != 1 {
		t.Fatalf("one UDP flow: %+v, want 5 answers from one backend", res)
	}
	var first string
	for b := range res.Answers {
		first = b
	}
	other, otherIdx, firstIdx := "be2", 1, 0
	if first == "be2" {
		other, otherIdx, firstIdx = "be1", 0, 1
	}
	// The flow's backend leaves (its server keeps running): the very next datagram of the
	// same flow reaches the other backend, because the agent deleted the flow in the sync.
	dns.Backends = g.bes(8080, otherIdx)
	mustSend(t, a, state(2, dns))
	res = g.probe(t, g.ext, flow)
	if res.Errors != 0 || res.Answers[other] != 5 {
		t.Errorf("after removing %s: %+v, want 5 answers from %s", first, res, other)
	}
	// No backend left: the flow's entry goes too, nothing answers (the old backend would).
	dns.Backends = nil
	mustSend(t, a, state(3, dns))
	res = g.probe(t, g.ext, flow)
	if res.Total() != 0 {
		t.Errorf("with zero backends: %+v, want no answer", res)
	}
	// Back to one backend: the flow is dispatched again at once.
	dns.Backends = g.bes(8080, firstIdx)
	mustSend(t, a, state(4, dns))
	res = g.probe(t, g.ext, flow)
	if res.Errors != 0 || res.Answers[first] != 5 {
		t.Errorf("zero to one backend: %+v, want 5 answers from %s", res, first)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("agent at EOF: %v", err)
	}
}

func waitFor(t *testing.T, what string, timeout time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRealDriftIsRepaired: the periodic check alone (kernel notifications off) finds and repairs
// every kind of drift: it is the fallback of TestRealDriftRepairedOnKernelNotification.
// covers: L6, L8, D5
func TestRealDriftIsRepaired(t *testing.T) {
	g := newGWLab(t, 1)
	web := ident(eip, 80, gwstate.TCP, g.bes(8080, 0)...)
	webCIP := ident(clusterIP, 80, gwstate.TCP, g.bes(8080, 0)...)
	a := startAgentArgs(t, g.l, g.gw, "--verify-interval", "200ms", "--watch-kernel=false")
	mustSend(t, a, withClusterIPs(state(1, web, webCIP), clusterIP))
	want := nftList(t, g.l, g.gw, "list", "table", "ip", "kube-ovn")
	serves := func() bool {
		res := g.probe(t, g.ext, netlab.ProbeOptions{Target: eip + ":80", Count: 1, Timeout: 300 * time.Millisecond})
		return res.Answers["be1"] == 1
	}
	if !serves() {
		t.Fatal("not serving before drift")
	}
	for _, drift := range [][]string{
		{"nft", "flush", "table", "ip", "kube-ovn"},
		{"nft", "delete", "table", "ip", "kube-ovn"},
		{"nft", "flush", "ruleset"},
		{"nft", "delete", "element", "ip", "kube-ovn", "service-ips", "{", eip, ".", "tcp", ".", "80", "}"},
		{"nft", "delete", "rule", "ip", "kube-ovn", HairpinChain, "handle", "HANDLE"},
		{"ip", "addr", "del", clusterIP + "/32", "dev", "lo"},
	} {
		if drift[len(drift)-1] == "HANDLE" {
			out := nftList(t, g.l, g.gw, "-a", "list", "chain", "ip", "kube-ovn", HairpinChain)
			i := strings.LastIndex(out, "# handle ")
			drift[len(drift)-1] = strings.Fields(out[i+len("# handle "):])[0]
		}
		mustExec(t, g.l, g.gw, drift...)
		waitFor(t, "repair after "+strings.Join(drift, " "), 5*time.Second, func() bool {
			out, err := g.l.Exec(g.gw, "nft", "list", "table", "ip", "kube-ovn")
			lo, _ := g.l.Exec(g.gw, "ip", "-4", "addr", "show", "dev", "lo", "label", VIPLabel)
			return err == nil && string(out) == want && strings.Contains(string(lo), clusterIP)
		})
		if !serves() {
			t.Errorf("not serving after repairing %v", drift)
		}
	}
	if n := strings.Count(a.Stderr(), "drift repaired"); n < 6 {
		t.Errorf("agent logged %d repairs, want 6:\n%s", n, a.Stderr())
	}
	if err := a.Close(); err != nil {
		t.Fatalf("agent at EOF: %v", err)
	}
}

func TestRealAgentRestartDuringTransfer(t *testing.T) {
	g := newGWLab(t, 2)
	web := ident(eip, 80, gwstate.TCP, g.bes(8080, 0, 1)...)
	a := startAgent(t, g.l, g.gw)
	mustSend(t, a, state(1, web))

	type result struct {
		res netlab.ProbeResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := g.l.Probe(g.ext, helperCmd(t, "probe"), netlab.ProbeOptions{Target: eip + ":80", Path: "/stream?ms=3000", Count: 1, Timeout: 20 * time.Second})
		done <- result{res, err}
	}()
	time.Sleep(700 * time.Millisecond)
	a.Stop() // SIGKILL: nothing is cleaned up
	a2 := startAgent(t, g.l, g.gw)
	mustSend(t, a2, state(1, web)) // adopts the populated table
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.res.Errors != 0 || r.res.Total() != 1 {
		t.Fatalf("long transfer across an agent restart: %+v", r.res)
	}
	for ans := range r.res.Answers {
		if !strings.HasSuffix(ans, " done") {
			t.Errorf("transfer ended with %q, want '<backend> done'", ans)
		}
	}
	if !strings.Contains(a2.Stderr(), "agent started") {
		t.Errorf("second agent did not start:\n%s", a2.Stderr())
	}
	if err := a2.Close(); err != nil {
		t.Fatalf("agent at EOF: %v", err)
	}
}

// TestRealNetlinkMatchesText programs the same states through netlink and through the nft
// binary in two namespaces: `nft list table` must be identical, so the hot path writes exactly
// the ruleset the golden tests describe.
//
// Both picks (SPEC D2): jhash, the default, and upstream's numgen random.
func TestRealNetlinkMatchesText(t *testing.T) {
	for _, pick := range []Pick{PickHash, PickRandom} {
		t.Run(pick.String(), func(t *testing.T) { netlinkMatchesText(t, pick) })
	}
}

func netlinkMatchesText(t *testing.T, pick Pick) {
	l := newLab(t)
	nsNL, err := l.AddNetns("nl")
	if err != nil {
		t.Fatal(err)
	}
	nsText, err := l.AddNetns("txt")
	if err != nil {
		t.Fatal(err)
	}
	aff := gwstate.Identity{VIP: netip.MustParseAddr("10.96.0.11"), Port: 443, Protocol: gwstate.TCP, AffinityTimeoutSeconds: 600,
		Backends: []gwstate.Backend{be("10.0.1.11", 443), be("10.0.1.12", 443), be("10.0.1.13", 443)}}
	states := []gwstate.State{
		state(1,
			ident("10.96.0.10", 80, gwstate.TCP, be("10.0.1.12", 8080), be("10.0.1.11", 8080), be("10.0.1.13", 8080)),
			ident("10.96.0.10", 53, gwstate.UDP, be("10.0.1.11", 53)),
			aff),
		state(2,
			ident("10.96.0.10", 80, gwstate.TCP, be("10.0.1.11", 8080)),
			ident("10.96.0.10", 53, gwstate.UDP, be("10.0.1.11", 53), be("10.0.1.14", 53)),
			func() gwstate.Identity {
				x := aff
				x.Backends = x.Backends[1:]
				x.AffinityTimeoutSeconds = 60
				return x
			}()),
		state(3, ident("10.96.0.12", 8443, gwstate.UDP, be("10.0.1.11", 53))),
	}
	nl := startAgentArgs(t, l, nsNL, "--vpc-interface", "vpc0", "--pick", pick.String())
	text := startAgentArgs(t, l, nsText, "--vpc-interface", "vpc0", "--text-path", "--pick", pick.String())
	for _, st := range states {
		mustSend(t, nl, st)
		mustSend(t, text, st)
		gotNL := nftList(t, l, nsNL, "list", "table", "ip", "kube-ovn")
		gotText := nftList(t, l, nsText, "list", "table", "ip", "kube-ovn")
		if gotNL != gotText {
			t.Errorf("generation %d: netlink table:\n%s\ntext table:\n%s", st.Generation, gotNL, gotText)
		}
		if st.Generation == 2 { // the UDP identity's two backends
			want := "dnat ip to jhash ip saddr . udp sport . ip daddr . udp dport mod 2 seed 0x76706367 map"
			if pick == PickRandom {
				want = "dnat ip to numgen random mod 2 map"
			}
			wantContains(t, "netlink table", gotNL, want)
		}
	}
	wantContains(t, "netlink table", nftList(t, l, nsNL, "list", "table", "ip", "kube-ovn"), `iifname "vpc0" oifname "vpc0" ct status dnat ct original ip daddr @vpcgw-vips masquerade comment "vpcgw"`)
	for _, a := range []*netlab.AgentProc{nl, text} {
		if err := a.Close(); err != nil {
			t.Fatalf("agent at EOF: %v", err)
		}
	}
}

// covers: D1, D6
// kube-ovn gives a freed address to the next Pod (at once after kube-ovn-controller restarts):
// a new backend may have the address of a Pod that is gone, whose MAC the gateway's neighbour
// entry still names. The agent forgets that entry in the sync that adds the backend, so the very
// first requests reach the new Pod instead of being sent to the old MAC until the kernel's entry
// ages out (up to a minute; the soak saw 38 s of lost requests).
func TestRealNewBackendOnAReusedAddressAnswersAtOnce(t *testing.T) {
	g := newGWLab(t, 2)
	dns := ident(eip, 53, gwstate.UDP, g.bes(8080, 0, 1)...)
	a := startAgent(t, g.l, g.gw)
	mustSend(t, a, state(1, dns))
	res := g.probe(t, g.ext, netlab.ProbeOptions{Target: eip + ":53", Proto: "udp", Count: 20, Timeout: time.Second})
	if res.Errors != 0 || res.Answers["be1"] == 0 {
		t.Fatalf("before: %+v, want every request answered, be1 among them", res)
	}
	reused := g.backendIPs[0]
	if out := mustExec(t, g.l, g.gw, "ip", "-4", "neigh", "show", reused); !strings.Contains(string(out), "lladdr") {
		t.Fatalf("the gateway has no neighbour entry of be1 to go stale: %q", out)
	}

	// be1's Pod goes: it leaves the backends and loses its address (its interface stays on the
	// bridge, as another Pod's port would).
	dns.Backends = g.bes(8080, 1)
	mustSend(t, a, state(2, dns))
	mustExec(t, g.l, g.backends[0], "ip", "addr", "del", reused+"/24", "dev", "eth0")
	// A new Pod gets the same address, with a MAC of its own, and becomes a backend.
	ns, err := g.l.AddNetns("be3")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.l.VethToBridge(ns, "eth0", g.vpc, "p-be3", "br0"); err != nil {
		t.Fatal(err)
	}
	if err := g.l.AddAddr(ns, "eth0", reused+"/24"); err != nil {
		t.Fatal(err)
	}
	if err := g.l.AddRoute(ns, "default", "via", gwLanIP); err != nil {
		t.Fatal(err)
	}
	if _, err := g.l.StartEcho(ns, helperCmd(t, "echo"), "be3", reused+":8080"); err != nil {
		t.Fatal(err)
	}
	dns.Backends = g.bes(8080, 0, 1)
	mustSend(t, a, state(3, dns))
	res = g.probe(t, g.ext, netlab.ProbeOptions{Target: eip + ":53", Proto: "udp", Count: 20, Timeout: time.Second})
	if res.Errors != 0 || res.Answers["be3"] == 0 || res.Answers["be1"] != 0 {
		t.Errorf("the new backend on be1's address: %+v, want every request answered, be3 among them", res)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("agent at EOF: %v", err)
	}
}
