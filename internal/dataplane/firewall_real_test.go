// covers: N7, N2, D3, D6, D8
package dataplane

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/netlab"
)

// fwLab is a gateway whose net1 is on an external segment (a bridge) with two client
// namespaces in different prefixes, and three backends behind eth0:
//
//	cliA 172.31.0.2   (172.31.0.0/25)   ┐
//	cliB 172.31.0.200 (172.31.0.128/25) ┴ bridge ── net1 gw (172.31.0.1, EIP 172.31.0.100)
//	gw eth0 10.77.1.254 ── bridge ── be1..be3 10.77.1.11..13
type fwLab struct {
	g          *gwLab
	cliA, cliB string
}

const (
	cliAIP     = "172.31.0.2"
	cliBIP     = "172.31.0.200"
	cliARange  = "172.31.0.0/25"
	cliBRange  = "172.31.0.128/25"
	fwBackends = 3
)

func newFWLab(t *testing.T) *fwLab {
	t.Helper()
	l := newLab(t)
	g := &gwLab{l: l}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	f := &fwLab{g: g}
	var err error
	for _, p := range []struct {
		ns    *string
		short string
	}{{&g.ext, "ext"}, {&g.gw, "gw"}, {&g.vpc, "vpc"}, {&f.cliA, "clia"}, {&f.cliB, "clib"}} {
		*p.ns, err = l.AddNetns(p.short)
		must(err)
	}
	must(l.AddBridge(g.ext, "br0"))
	must(l.VethToBridge(g.gw, "net1", g.ext, "p-gw", "br0"))
	must(l.AddAddr(g.gw, "net1", "172.31.0.1/24"))
	must(l.AddAddr(g.gw, "net1", eip+"/24"))
	for _, c := range []struct{ ns, ip, port string }{{f.cliA, cliAIP, "p-clia"}, {f.cliB, cliBIP, "p-clib"}} {
		must(l.VethToBridge(c.ns, "eth0", g.ext, c.port, "br0"))
		must(l.AddAddr(c.ns, "eth0", c.ip+"/24"))
		must(l.AddRoute(c.ns, "default", "via", "172.31.0.1"))
	}
	must(l.AddBridge(g.vpc, "br0"))
	must(l.VethToBridge(g.gw, "eth0", g.vpc, "p-gw", "br0"))
	must(l.AddAddr(g.gw, "eth0", gwLanIP+"/24"))
	must(l.Sysctl(g.gw, "net.ipv4.ip_forward", "1"))
	must(l.Sysctl(g.gw, "net.ipv4.conf.all.rp_filter", "0"))
	for i := range fwBackends {
		name := fmt.Sprintf("be%d", i+1)
		ip := fmt.Sprintf("10.77.1.%d", 11+i)
		ns, err := l.AddNetns(name)
		must(err)
		must(l.VethToBridge(ns, "eth0", g.vpc, "p-"+name, "br0"))
		must(l.AddAddr(ns, "eth0", ip+"/24"))
		must(l.AddRoute(ns, "default", "via", gwLanIP))
		if _, err := l.StartEcho(ns, helperCmd(t, "echo"), name, ip+":8080"); err != nil {
			t.Fatal(err)
		}
		g.backends = append(g.backends, ns)
		g.backendIPs = append(g.backendIPs, ip)
	}
	return f
}

// answered probes target from ns n times (a new connection or UDP socket each) and returns the
// number of answers.
func (f *fwLab) answered(t *testing.T, ns, target, proto string, n int, timeout time.Duration) netlab.ProbeResult {
	t.Helper()
	return f.g.probe(t, ns, netlab.ProbeOptions{Target: target, Proto: proto, Count: n, Timeout: timeout})
}

// expectServed checks that from ns every request to target is answered (served) or none is.
func (f *fwLab) expectServed(t *testing.T, what, ns, target, proto string, served bool) {
	t.Helper()
	n, timeout := 4, 2*time.Second
	if !served {
		n, timeout = 2, 700*time.Millisecond
	}
	res := f.answered(t, ns, target, proto, n, timeout)
	switch {
	case served && (res.Errors != 0 || res.Total() != n):
		t.Errorf("%s: %s %s from %s: %+v, want %d answers", what, proto, target, ns, res, n)
	case !served && res.Total() != 0:
		t.Errorf("%s: %s %s from %s: %+v, want no answer (dropped)", what, proto, target, ns, res)
	}
}

// The EIP identities of a Service with loadBalancerSourceRanges answer only clients inside the
// ranges, on both writers (netlink and nft text): new TCP connections, UDP and ClientIP affinity
// from the allowed prefix work, the other prefix gets nothing. Narrowing the ranges cuts the
// established flows of the client that lost its range (a long TCP transfer and a UDP flow);
// removing the ranges opens the identities to both; a firewall rule deleted by hand is drift
// and is repaired.
func TestRealSourceRanges(t *testing.T) {
	// covers: N7, D3, D6, D8
	for _, path := range []string{"netlink", "text"} {
		t.Run(path, func(t *testing.T) {
			f := newFWLab(t)
			g := f.g
			args := []string{"--verify-interval", "200ms"}
			if path == "text" {
				args = append(args, "--text-path")
			}
			a := startAgentArgs(t, g.l, g.gw, args...)
			all := g.bes(8080, 0, 1, 2)
			web := ident(eip, 80, gwstate.TCP, all...)
			dns := ident(eip, 53, gwstate.UDP, all...)
			sticky := ident(eip, 443, gwstate.TCP, all...)
			sticky.AffinityTimeoutSeconds = 600
			withAll := func(gen int64, ranges ...string) gwstate.State {
				return state(gen, withRanges(web, ranges...), withRanges(dns, ranges...), withRanges(sticky, ranges...))
			}

			// No ranges: everyone (as before N7).
			mustSend(t, a, withAll(1))
			for _, ns := range []string{f.cliA, f.cliB} {
				f.expectServed(t, "no ranges", ns, eip+":80", "tcp", true)
				f.expectServed(t, "no ranges", ns, eip+":53", "udp", true)
			}

			// Only client A's prefix (and an unrelated one).
			mustSend(t, a, withAll(2, cliARange, "192.0.2.0/24"))
			table := nftList(t, g.l, g.gw, "list", "table", "ip", TableName)
			wantContains(t, "table with ranges", table,
				"ip saddr != @"+SourceSet(web)+` drop comment "vpcgw"`,
				"set "+SourceSet(web)+" {\n\t\ttype ipv4_addr\n\t\tflags interval\n\t\telements = { "+cliARange+", 192.0.2.0/24 }")
			f.expectServed(t, "client A allowed", f.cliA, eip+":80", "tcp", true)
			f.expectServed(t, "client A allowed", f.cliA, eip+":53", "udp", true)
			f.expectServed(t, "client B outside", f.cliB, eip+":80", "tcp", false)
			f.expectServed(t, "client B outside", f.cliB, eip+":53", "udp", false)
			f.expectServed(t, "client B outside", f.cliB, eip+":443", "tcp", false)
			// Affinity behind the firewall: 10 connections of client A reach one backend
			// (by chance with 3 backends: (1/3)^9 = 5e-5).
			if res := f.answered(t, f.cliA, eip+":443", "tcp", 10, 2*time.Second); res.Errors != 0 || len(res.Answers) != 1 {
				t.Errorf("affinity from client A: %+v, want 10 answers from one backend", res)
			}

			// Client A's established flows: a long transfer and a UDP flow (one source port).
			type result struct {
				res netlab.ProbeResult
				err error
			}
			stream := make(chan result, 1)
			go func() {
				res, err := g.l.Probe(f.cliA, helperCmd(t, "probe"), netlab.ProbeOptions{Target: eip + ":80", Path: "/stream?ms=3000", Count: 1, Timeout: 5 * time.Second})
				stream <- result{res, err}
			}()
			udpFlow := netlab.ProbeOptions{Target: eip + ":53", Proto: "udp", Source: cliAIP + ":40053", Count: 3, Timeout: time.Second}
			if res := g.probe(t, f.cliA, udpFlow); res.Total() != 3 {
				t.Fatalf("client A's UDP flow before narrowing: %+v", res)
			}
			waitFor(t, "client A's transfer established at a backend", 5*time.Second, func() bool {
				for _, ns := range g.backends {
					out, err := g.l.Exec(ns, "ss", "-Htn", "state", "established", "sport", "=", ":8080")
					if err == nil && strings.Contains(string(out), cliAIP+":") {
						return true
					}
				}
				return false
			})

			// Client A's range is removed, client B's added: A's flows are cut at once.
			mustSend(t, a, withAll(3, cliBRange))
			r := <-stream
			if r.err != nil {
				t.Fatal(r.err)
			}
			if r.res.Total() != 0 {
				t.Errorf("client A's transfer after its range was removed: %+v, want it cut", r.res)
			}
			if res := g.probe(t, f.cliA, udpFlow); res.Total() != 0 {
				t.Errorf("client A's UDP flow after its range was removed: %+v, want no answer", res)
			}
			f.expectServed(t, "client A removed", f.cliA, eip+":80", "tcp", false)
			f.expectServed(t, "client B allowed", f.cliB, eip+":80", "tcp", true)
			f.expectServed(t, "client B allowed", f.cliB, eip+":53", "udp", true)

			// A firewall rule deleted by hand is repaired. (Affinity entries count down.)
			listing := func() string {
				return expiresRE.ReplaceAllString(nftList(t, g.l, g.gw, "list", "table", "ip", TableName), "")
			}
			want := listing()
			chain := IdentityChain(web.Key())
			out := nftList(t, g.l, g.gw, "-a", "list", "chain", "ip", TableName, chain)
			handle := ""
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, " drop ") {
					handle = l[strings.LastIndex(l, "# handle ")+len("# handle "):]
				}
			}
			if handle == "" {
				t.Fatalf("no firewall rule in chain %s:\n%s", chain, out)
			}
			mustExec(t, g.l, g.gw, "nft", "delete", "rule", "ip", TableName, chain, "handle", strings.TrimSpace(handle))
			var last string
			deadline := time.Now().Add(5 * time.Second)
			for last != want && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
				last = listing()
			}
			if last != want {
				t.Fatalf("deleted firewall rule not repaired within 5s:\n%s\nwant:\n%s\nagent:\n%s", last, want, a.Stderr())
			}
			f.expectServed(t, "client A after repair", f.cliA, eip+":80", "tcp", false)

			// Ranges removed: both clients, and no source set left.
			mustSend(t, a, withAll(4))
			for _, ns := range []string{f.cliA, f.cliB} {
				f.expectServed(t, "ranges removed", ns, eip+":80", "tcp", true)
				f.expectServed(t, "ranges removed", ns, eip+":53", "udp", true)
			}
			wantLacks(t, "table without ranges", nftList(t, g.l, g.gw, "list", "table", "ip", TableName), sourcePrefix, "ip saddr != @") // the firewall rule (the guard's drop stays)
			if !strings.Contains(a.Stderr(), "drift repaired") {
				t.Errorf("agent logged no repair:\n%s", a.Stderr())
			}
			if err := a.Close(); err != nil {
				t.Fatalf("agent at EOF: %v", err)
			}
		})
	}
}

// Both writers program the same table for every shape of ranges, and after changes of the
// ranges alone, and the kernel's sets answer membership exactly as the ranges say, at every
// prefix's edges. (The elements themselves may differ: nft -f adds an end element at 0.0.0.0
// or not depending on how the elements are sent and what the set held; lookups do not see it.)
func TestRealSourceRangesNetlinkMatchesText(t *testing.T) {
	// covers: N7, D2
	l := newLab(t)
	nsNL, err := l.AddNetns("nl")
	if err != nil {
		t.Fatal(err)
	}
	nsText, err := l.AddNetns("txt")
	if err != nil {
		t.Fatal(err)
	}
	shapes := append(sourceRangeVariants[1:], []string{"0.0.0.0/0"}, []string{"10.0.0.5/32"}, []string{"0.0.0.0/8", "255.255.255.255/32"})
	ids := func(shift int) []gwstate.Identity {
		var out []gwstate.Identity
		for i := range shapes {
			id := ident("10.96.0.10", int32(80+i), gwstate.TCP, be("10.0.1.11", 8080), be("10.0.1.12", 8080))
			if i%2 == 1 {
				id.AffinityTimeoutSeconds = 60
			}
			out = append(out, withRanges(id, shapes[(i+shift)%len(shapes)]...))
		}
		return out
	}
	nl := startAgent(t, l, nsNL)
	text := startAgentArgs(t, l, nsText, "--text-path")
	for gen, st := range []gwstate.State{state(1, ids(0)...), state(2, ids(1)...), state(3, ids(3)...)} {
		mustSend(t, nl, st)
		mustSend(t, text, st)
		gotNL := nftList(t, l, nsNL, "list", "table", "ip", TableName)
		gotText := nftList(t, l, nsText, "list", "table", "ip", TableName)
		if gotNL != gotText {
			t.Errorf("generation %d: netlink table:\n%s\ntext table:\n%s", gen+1, gotNL, gotText)
		}
		if gen == 1 {
			continue // membership checked after the first and the last generation
		}
		for _, id := range st.Identities {
			for _, addr := range edgeAddrs(id.SourceRanges) {
				want := false
				for _, p := range sourcePrefixes(slices.Clone(id.SourceRanges)) {
					want = want || p.Contains(addr)
				}
				for _, ns := range []string{nsNL, nsText} {
					_, err := l.Exec(ns, "nft", "get", "element", "ip", TableName, SourceSet(id), "{", addr.String(), "}")
					if got := err == nil; got != want {
						t.Errorf("generation %d, %s, ranges %v: %s is a member: %v, want %v", gen+1, ns, id.SourceRanges, addr, got, want)
					}
				}
			}
		}
	}
	for _, a := range []*netlab.AgentProc{nl, text} {
		if err := a.Close(); err != nil {
			t.Fatalf("agent at EOF: %v", err)
		}
	}
}

var expiresRE = regexp.MustCompile(` expires [0-9hms]+`)

// edgeAddrs are the addresses at and around the edges of each range, and the ends of the
// address space.
func edgeAddrs(ranges []string) []netip.Addr {
	seen := map[netip.Addr]bool{}
	var out []netip.Addr
	add := func(a netip.Addr) {
		if a.IsValid() && !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	add(netip.IPv4Unspecified())
	add(netip.AddrFrom4([4]byte{255, 255, 255, 255}))
	for _, r := range ranges {
		p := netip.MustParsePrefix(r)
		start := p.Addr()
		v := binary.BigEndian.Uint32(start.AsSlice()) | (1<<(32-p.Bits()) - 1)
		last := netip.AddrFrom4([4]byte(binary.BigEndian.AppendUint32(nil, v)))
		add(start.Prev())
		add(start)
		add(last)
		add(last.Next())
	}
	return out
}

// The agent refuses an identity whose backend is one of the gateway's own addresses (SPEC N2):
// its net1 address, the EIP on net1, its eth0 address, a ClusterIP it holds on lo, an address
// someone else put on lo, an address added while the agent runs. The Ack names the identity and
// says why; the table, lo and what traffic sees stay as they were for it, through a delta too;
// and a good identity sent beside it is programmed and served in the same round trip (SPEC D8).
func TestRealOwnAddressBackendRefused(t *testing.T) {
	// covers: N2, D8
	g := newGWLab(t, 1)
	mustExec(t, g.l, g.gw, "ip", "addr", "add", "10.96.0.99/32", "dev", "lo")
	a := startAgent(t, g.l, g.gw)
	web := ident(eip, 80, gwstate.TCP, g.bes(8080, 0)...)
	good := withClusterIPs(state(1, web, ident(clusterIP, 80, gwstate.TCP, g.bes(8080, 0)...)), clusterIP)
	mustSend(t, a, good)
	want := nftList(t, g.l, g.gw, "list", "table", "ip", TableName)
	served := func(what string) {
		t.Helper()
		res := g.probe(t, g.ext, netlab.ProbeOptions{Target: eip + ":80", Count: 4, Timeout: 2 * time.Second})
		if res.Answers["be1"] != 4 {
			t.Errorf("%s: %+v, want 4 answers from be1", what, res)
		}
	}
	served("before")
	// An address that arrives while the agent runs (kube-ovn adds an EIP to net1).
	mustExec(t, g.l, g.gw, "ip", "addr", "add", "172.31.0.101/24", "dev", "net1")
	gen := int64(1)
	for _, bad := range []struct{ ip, on string }{
		{"172.31.0.1", "net1"}, {eip, "net1"}, {gwLanIP, "eth0"}, {clusterIP, VIPLabel}, {"10.96.0.99", "lo"},
		{"172.31.0.101", "net1"},
	} {
		evil := ident(eip, 80, gwstate.TCP, be(g.backendIPs[0], 8080), be(bad.ip, 8080))
		gen++
		st := withClusterIPs(state(gen, evil, ident(clusterIP, 80, gwstate.TCP, g.bes(8080, 0)...)), clusterIP)
		ack := send(t, a, st)
		wantErr := fmt.Sprintf("backend %s:8080 is an address of the gateway itself (on %s)", bad.ip, bad.on)
		refusedAlone := func(ack gwstate.Ack) bool {
			return ack.Error == "" && len(ack.Refused) == 1 && ack.Refused[0].IdentityKey == evil.Key() && strings.Contains(ack.Refused[0].Reason, wantErr)
		}
		if !refusedAlone(ack) {
			t.Errorf("backend %s: ack %+v, want %s refused with %q", bad.ip, ack, evil.Key(), wantErr)
		}
		// A delta against the state just accepted, with the refused identity changed again.
		base := gen
		gen++
		evil2 := ident(eip, 80, gwstate.TCP, be(bad.ip, 8080))
		evil = evil2 // what refusedAlone checks now
		delta := gwstate.State{Generation: gen, Base: base, Identities: []gwstate.Identity{evil2}, ClusterIPs: addrs(clusterIP)}
		if ack := send(t, a, delta); !refusedAlone(ack) {
			t.Errorf("backend %s in a delta: ack %+v, want %s refused with %q", bad.ip, ack, evil2.Key(), wantErr)
		}
		if got := nftList(t, g.l, g.gw, "list", "table", "ip", TableName); got != want {
			t.Errorf("backend %s: the refused state changed the table:\n%s\nwant:\n%s", bad.ip, got, want)
		}
		lo := string(mustExec(t, g.l, g.gw, "ip", "-4", "addr", "show", "dev", "lo"))
		wantContains(t, "lo after a refused state", lo, "inet "+clusterIP+"/32 scope global "+VIPLabel)
		served("after refusing " + bad.ip)
	}
	// Next to a good new identity: the good one is programmed and served in the same round trip.
	gen++
	evil := ident(eip, 80, gwstate.TCP, be(g.backendIPs[0], 8080), be(gwLanIP, 8080))
	fresh := ident(eip, 83, gwstate.TCP, g.bes(8080, 0)...)
	ack := send(t, a, withClusterIPs(state(gen, evil, fresh, ident(clusterIP, 80, gwstate.TCP, g.bes(8080, 0)...)), clusterIP))
	if ack.Error != "" || len(ack.Refused) != 1 || ack.Refused[0].IdentityKey != evil.Key() {
		t.Errorf("beside a good identity: ack %+v, want %s alone refused", ack, evil.Key())
	}
	if res := g.probe(t, g.ext, netlab.ProbeOptions{Target: eip + ":83", Count: 4, Timeout: 2 * time.Second}); res.Answers["be1"] != 4 {
		t.Errorf("the good identity beside the refused one: %+v, want 4 answers from be1", res)
	}
	served("beside the good identity")

	// The address leaves the gateway: it is no longer refused.
	mustExec(t, g.l, g.gw, "ip", "addr", "del", "172.31.0.101/24", "dev", "net1")
	gen++
	mustSend(t, a, withClusterIPs(state(gen, web, ident(clusterIP, 80, gwstate.TCP, g.bes(8080, 0)...),
		ident(eip, 81, gwstate.TCP, be("172.31.0.101", 8080))), clusterIP))
	// The stream goes on: a valid delta against the last accepted generation applies.
	base := gen
	gen++
	web2 := ident(eip, 80, gwstate.TCP, g.bes(8080, 0)...)
	web2.SourceRanges = []string{"172.31.0.0/24"}
	mustSend(t, a, gwstate.State{Generation: gen, Base: base, Identities: []gwstate.Identity{web2}, ClusterIPs: addrs(clusterIP)})
	served("after a valid delta")
	if err := a.Close(); err != nil {
		t.Fatalf("agent at EOF: %v", err)
	}
}
