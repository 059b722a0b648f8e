// covers: D2, D4, D6, D9
package dataplane

// Long-lived connections through a real gateway (the gwLab of traffic_test.go) that must
// outlive the gateway's conntrack (SPEC D9): request/response, upload, download and UDP
// sessions, from an external client to the EIP and from a VPC client (hairpin) to the
// ClusterIP and to the EIP, across a simulated gateway replacement (outage, agent killed,
// table deleted, conntrack flushed, new agent) and across a backend added while they run (D6).
//
// The servers run in this process, one per backend namespace (netlab.ListenInNetns and
// ListenPacketInNetns), and speak netlab's flow protocol (netlab.FlowServer, internal/netlab/
// flows.go): they name their backend in every answer, so that a flow that moved to another
// backend is seen as such. The clients are netlab.Flows.

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/netlab"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

const (
	// The identities serve port 90 of the EIP and of the ClusterIP; the in-process servers
	// listen on port 9000 of each backend (TCP and UDP).
	surviveVIPPort     = 90
	surviveBackendPort = 9000
	// An upload or download moves netlab.DefaultFlowBytes at netlab.DefaultFlowRate: about
	// 6.5 s, so that a transfer started before a fault spans it. A request/response flow asks,
	// and a UDP flow sends a datagram, every netlab.FlowExchangeInterval.
	// After the fault every request/response and UDP flow must get afterFaultAnswers more
	// answers within afterFaultWithin; transfers must end within the same time.
	afterFaultAnswers = 10
	afterFaultWithin  = 20 * time.Second
	// outageDuration is how long the gateway forwards nothing in the conntrack-lost fault: about
	// the time a replacement gateway Pod takes to come up with its rules.
	outageDuration = 1500 * time.Millisecond
	// outageTable is the test's own nft table that drops everything entering the gateway during
	// the outage, in the raw hook before conntrack, so that no packet leaves an entry behind.
	outageTable = "vpcgw-test-outage"
	tcpLooseKey = "net.netfilter.nf_conntrack_tcp_loose"
)

// startSurviveServers starts the flow servers (TCP and UDP) of the first n backends of g; they
// stop with the test.
func startSurviveServers(t *testing.T, g *gwLab, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		s := netlab.NewFlowServer(fmt.Sprintf("be%d", i+1))
		t.Cleanup(s.Close)
		addr := net.JoinHostPort(g.backendIPs[i], strconv.Itoa(surviveBackendPort))
		ln, err := netlab.ListenInNetns(g.backends[i], "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		pc, err := netlab.ListenPacketInNetns(g.backends[i], "udp", addr)
		if err != nil {
			_ = ln.Close() // the test fails here
			t.Fatal(err)
		}
		s.Serve(ln, pc)
	}
}

// startFlows starts every kind of flow from the external client to the EIP and from the VPC
// client to the ClusterIP and to the EIP; they are ended with the test.
func startFlows(t *testing.T, g *gwLab) []*netlab.Flow {
	t.Helper()
	port := strconv.Itoa(surviveVIPPort)
	clients := []struct {
		client, ns, via, target string
		hairpin                 bool
	}{
		{"ext", g.ext, "EIP", net.JoinHostPort(eip, port), false},
		{"vcli", g.vcli, "ClusterIP", net.JoinHostPort(clusterIP, port), true},
		{"vcli", g.vcli, "EIP", net.JoinHostPort(eip, port), true},
	}
	var flows []*netlab.Flow
	for _, c := range clients {
		for _, kind := range netlab.FlowKinds {
			f := &netlab.Flow{Kind: kind, Client: c.client, Via: c.via, Netns: c.ns, Target: c.target, Hairpin: c.hairpin,
				Seed: uint64(len(flows) + 1)}
			flows = append(flows, f)
			f.Start()
		}
	}
	t.Cleanup(func() { netlab.EndFlows(flows, errors.New("ended with the test")) })
	return flows
}

// waitUnderWay waits until every flow has a backend and has made some progress, so that the
// fault hits flows in the middle of their work; a flow that broke already fails the test.
func waitUnderWay(t *testing.T, flows []*netlab.Flow) {
	t.Helper()
	waitFor(t, "every flow under way", 15*time.Second, func() bool {
		for _, f := range flows {
			if !f.UnderWay() {
				return false
			}
		}
		return true
	})
	for _, f := range flows {
		if _, err := f.Result(); err != nil || f.Finished() {
			t.Fatalf("%s broke before the fault: %v", f, err)
		}
	}
}

// finishFlows lets every flow finish after the fault: request/response and UDP flows stop after
// afterFaultAnswers more answers, transfers end by themselves. A flow that does neither within
// afterFaultWithin is stalled. It logs a table of the outcomes and reports each broken flow.
func finishFlows(t *testing.T, g *gwLab, fault string, flows []*netlab.Flow) {
	t.Helper()
	loose, err := g.l.SysctlValue(g.gw, tcpLooseKey)
	if err != nil {
		loose = err.Error()
	}
	netlab.FinishFlows(flows, afterFaultAnswers, afterFaultWithin)
	table, broken := netlab.FlowTable(flows)
	t.Logf("%s: %d of %d flows intact (nf_conntrack_tcp_loose=%s in the gateway):%s", fault, len(flows)-broken, len(flows), loose, table)
	for _, f := range flows {
		if b, err := f.Result(); err != nil {
			t.Errorf("%s: %s on %s broke: %v (nf_conntrack_tcp_loose=%s)", fault, f, b, err, loose)
		}
	}
}

// ---- the lab ----

// surviveLab is a gateway with 4 backends (the identities start with the first 3), the
// in-process servers on all of them, and an agent serving TCP and UDP port 90 on the EIP and
// on the ClusterIP.
//
// Each backend endpoint thus belongs to two identities, as a Service's endpoints do when it
// has a ClusterIP and an EIP: the EIP's is its one externally reachable identity, to whose
// VIP:port D9 rewrites the endpoint's segments toward an external client (the issue's
// wording; an implementation that rewrote only endpoints of exactly one identity of any kind
// would leave the external download stalled here).
type surviveLab struct {
	*gwLab
	agent *netlab.AgentProc
	ids   []gwstate.Identity
}

func newSurviveLab(t *testing.T) *surviveLab {
	t.Helper()
	g := newGWLab(t, 4)
	if _, err := exec.LookPath("conntrack"); err != nil {
		testutil.Skip(t, "skipping real-kernel test: the conntrack command is missing (apt-get install -y conntrack)")
	}
	startSurviveServers(t, g, 4)
	s := &surviveLab{gwLab: g}
	for _, vip := range []string{eip, clusterIP} {
		for _, proto := range []gwstate.Protocol{gwstate.TCP, gwstate.UDP} {
			s.ids = append(s.ids, ident(vip, surviveVIPPort, proto, g.bes(surviveBackendPort, 0, 1, 2)...))
		}
	}
	s.agent = startAgent(t, g.l, g.gw)
	mustSend(t, s.agent, s.state(1))
	return s
}

func (s *surviveLab) state(gen int64) gwstate.State {
	return withClusterIPs(state(gen, s.ids...), clusterIP)
}

// checkTCPLoose reports when the gateway would not pick up a TCP connection mid-stream.
func (s *surviveLab) checkTCPLoose(t *testing.T) {
	t.Helper()
	if v, err := s.l.SysctlValue(s.gw, tcpLooseKey); err != nil || v != "1" {
		t.Errorf("%s in the gateway is %q (%v), want 1 (D9)", tcpLooseKey, v, err)
	}
}

// replaceGateway simulates the gateway Pod's replacement while flows run: the gateway forwards
// nothing for outageDuration, and meanwhile its agent is killed (SIGKILL), its table deleted,
// its conntrack flushed and a new agent started with the same state. When the gateway forwards
// again, each hairpin download gets its client's next segment (nudge) only after its server's
// next segment reached the gateway (the order in which the gateway must not reset the flow,
// D9). It returns the new agent.
func (s *surviveLab) replaceGateway(t *testing.T, flows []*netlab.Flow) *netlab.AgentProc {
	t.Helper()
	start := time.Now()
	mustExec(t, s.l, s.gw, "nft", "add table inet "+outageTable+"; add chain inet "+outageTable+" dark { type filter hook prerouting priority -300; policy drop; }")
	s.agent.Stop()
	mustExec(t, s.l, s.gw, "nft", "delete", "table", "ip", TableName)
	mustExec(t, s.l, s.gw, "conntrack", "-F")
	if out, _ := s.l.Exec(s.gw, "conntrack", "-L"); !strings.Contains(string(out), " 0 flow entries") {
		t.Fatalf("conntrack not empty during the outage:\n%s", out)
	}
	a := startAgent(t, s.l, s.gw)
	mustSend(t, a, s.state(1))
	s.agent = a
	// The outage itself: the gateway stays dark for outageDuration in all, as a replacement
	// Pod would, so that every flow has segments to resend and the servers have data queued.
	time.Sleep(time.Until(start.Add(outageDuration)))
	// In one transaction: the drop goes, and a counter per hairpin download sees its server's
	// segments (to the address and port the server sees) from the first packet on.
	script := "delete chain inet " + outageTable + " dark; add chain inet " + outageTable + " watch { type filter hook prerouting priority -300; policy accept; }"
	watched := map[int]*netlab.Flow{}
	for i, f := range flows {
		b, _ := f.Result()
		ap, err := netip.ParseAddrPort(f.Peer())
		if f.Kind != netlab.FlowDown || !f.Hairpin || f.Finished() || err != nil {
			continue
		}
		script += fmt.Sprintf("; add rule inet %s watch ip saddr %s ip daddr %s tcp sport %d tcp dport %d counter comment \"%d\"",
			outageTable, s.backendIP(t, b), ap.Addr(), surviveBackendPort, ap.Port(), i)
		watched[i] = f
	}
	mustExec(t, s.l, s.gw, "nft", script)
	t.Logf("gateway replaced: dark for %s (agent killed, table deleted, conntrack flushed, new agent acked)", time.Since(start).Round(time.Millisecond))
	deadline := time.Now().Add(10 * time.Second)
	for len(watched) > 0 {
		out := nftList(t, s.l, s.gw, "list", "chain", "inet", outageTable, "watch")
		for _, m := range watchCounter.FindAllStringSubmatch(out, -1) {
			i, _ := strconv.Atoi(m[2])
			if f := watched[i]; f != nil && m[1] != "0" {
				f.Nudge() // a hairpin download waits for its client's next segment (D9)
				delete(watched, i)
			}
		}
		if time.Now().After(deadline) {
			for _, f := range watched {
				t.Logf("%s: its server sent nothing within 10s after the outage; nudging anyway", f)
				f.Nudge()
			}
			break
		}
		time.Sleep(20 * time.Millisecond) // polling the counters
	}
	return a
}

var watchCounter = regexp.MustCompile(`counter packets (\d+) bytes \d+ comment "(\d+)"`)

// backendIP is the address of the backend named name ("be2").
func (s *surviveLab) backendIP(t *testing.T, name string) string {
	t.Helper()
	i, err := strconv.Atoi(strings.TrimPrefix(name, "be"))
	if err != nil || i < 1 || i > len(s.backendIPs) {
		t.Fatalf("no backend %q", name)
	}
	return s.backendIPs[i-1]
}

// TestRealSurvive runs every kind of long-lived flow across faults of the gateway, each from a
// fresh lab (SPEC D9, D6), and checks the conditions they depend on (D4, D9's tcp_loose).
func TestRealSurvive(t *testing.T) {
	t.Run("conntrack-lost", func(t *testing.T) {
		s := newSurviveLab(t)
		s.checkTCPLoose(t)
		flows := startFlows(t, s.gwLab)
		waitUnderWay(t, flows)
		a := s.replaceGateway(t, flows)
		finishFlows(t, s.gwLab, "conntrack lost", flows)
		if err := a.Close(); err != nil {
			t.Errorf("agent at EOF: %v", err)
		}
	})

	t.Run("backend-added", func(t *testing.T) {
		s := newSurviveLab(t)
		s.checkTCPLoose(t)
		flows := startFlows(t, s.gwLab)
		waitUnderWay(t, flows)
		for i := range s.ids {
			s.ids[i].Backends = s.bes(surviveBackendPort, 0, 1, 2, 3)
		}
		mustSend(t, s.agent, s.state(2))
		for _, f := range flows {
			if f.Kind == netlab.FlowDown && f.Hairpin {
				f.Nudge() // as after the other fault: harmless with conntrack intact
			}
		}
		finishFlows(t, s.gwLab, "backend added", flows)
		if err := s.agent.Close(); err != nil {
			t.Errorf("agent at EOF: %v", err)
		}
	})

	// D9: the agent keeps nf_conntrack_tcp_loose at 1: a gateway where something set it to 0
	// gets it back from the next agent.
	t.Run("tcp-loose-kept", func(t *testing.T) {
		s := newSurviveLab(t)
		s.checkTCPLoose(t)
		s.agent.Stop()
		if err := s.l.Sysctl(s.gw, tcpLooseKey, "0"); err != nil {
			t.Fatal(err)
		}
		a := startAgent(t, s.l, s.gw)
		mustSend(t, a, s.state(1))
		s.checkTCPLoose(t)
		if err := a.Close(); err != nil {
			t.Errorf("agent at EOF: %v", err)
		}
	})

	// D4: the hairpin SNAT keeps a VPC client's source port (it is free on the gateway's
	// address), TCP and UDP, through the ClusterIP and the EIP; an external client keeps its
	// address and port.
	t.Run("hairpin-keeps-source-port", func(t *testing.T) {
		s := newSurviveLab(t)
		port := strconv.Itoa(surviveVIPPort)
		local := 41000
		for _, c := range []struct{ ns, src, want, target string }{
			{s.vcli, vpcCliIP, gwLanIP, net.JoinHostPort(clusterIP, port)},
			{s.vcli, vpcCliIP, gwLanIP, net.JoinHostPort(eip, port)},
			{s.ext, extIP, extIP, net.JoinHostPort(eip, port)},
		} {
			for _, network := range []string{"tcp", "udp"} {
				local++
				src := netip.AddrPortFrom(netip.MustParseAddr(c.src), uint16(local))
				peer, err := whoFrom(c.ns, network, src, c.target)
				want := netip.AddrPortFrom(netip.MustParseAddr(c.want), uint16(local))
				if err != nil {
					t.Errorf("%s from %s to %s: %v", network, src, c.target, err)
				} else if peer != want {
					t.Errorf("%s from %s to %s: the backend saw %s, want %s", network, src, c.target, peer, want)
				}
			}
		}
	})
}

// whoFrom connects from src in ns to target and returns the peer address the backend saw.
func whoFrom(ns, network string, src netip.AddrPort, target string) (netip.AddrPort, error) {
	var peer string
	err := netlab.InNetns(ns, func() error {
		d := net.Dialer{Timeout: 3 * time.Second}
		if network == "tcp" {
			d.LocalAddr = net.TCPAddrFromAddrPort(src)
		} else {
			d.LocalAddr = net.UDPAddrFromAddrPort(src)
		}
		c, err := d.Dial(network, target)
		if err != nil {
			return err
		}
		defer func() { _ = c.Close() }() // the answer is read in full
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := fmt.Fprintln(c, "who"); err != nil {
			return err
		}
		buf := make([]byte, 512)
		n, err := c.Read(buf)
		if err != nil {
			return err
		}
		w := strings.Fields(string(buf[:n]))
		if len(w) != 3 {
			return fmt.Errorf("answer %q", buf[:n])
		}
		peer = w[2]
		return nil
	})
	if err != nil {
		return netip.AddrPort{}, err
	}
	return netip.ParseAddrPort(peer)
}

// TestRealPickDistribution: 3,000 new TCP connections from one external client through the
// EIP spread over 3 backends as a uniform pick would (SPEC D2): chi-square with 2 degrees of
// freedom below 27.6, whose probability under a uniform pick is 1e-6. (ClientIP affinity over
// the same pick is TestRealAffinity.)
func TestRealPickDistribution(t *testing.T) {
	g := newGWLab(t, 3)
	a := startAgent(t, g.l, g.gw)
	mustSend(t, a, state(1, ident(eip, 80, gwstate.TCP, g.bes(8080, 0, 1, 2)...)))
	const n = 3000
	res := g.probe(t, g.ext, netlab.ProbeOptions{Target: eip + ":80", Count: n})
	if res.Errors != 0 {
		t.Errorf("%d of %d connections failed: %s", res.Errors, n, res.LastError)
	}
	names := []string{"be1", "be2", "be3"}
	expected := float64(res.Total()) / float64(len(names))
	chi2 := 0.0
	for _, b := range names {
		d := float64(res.Answers[b]) - expected
		chi2 += d * d / expected
	}
	if res.Total() != n || len(res.Answers) != len(names) {
		t.Errorf("answers %v, want %d from be1..be3", res.Answers, n)
	}
	t.Logf("%d TCP connections over 3 backends: be1 %d, be2 %d, be3 %d; chi-square %.2f (2 df; p=%.3g; fail above 27.6, p<1e-6) in %.1fs",
		res.Total(), res.Answers["be1"], res.Answers["be2"], res.Answers["be3"], chi2, math.Exp(-chi2/2), res.Seconds)
	if chi2 > 27.6 {
		t.Errorf("chi-square %.2f over %v: not a uniform pick", chi2, res.Answers)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("agent at EOF: %v", err)
	}
}

// TestRealPickIsAFunctionOfTheFlow: the pick is the same for the same flow after conntrack is
// flushed (SPEC D2): UDP sessions from 6 fixed source ports, each asked 4 times with the
// gateway's conntrack flushed before every round, each stay on one backend, which a random
// pick would do with probability (1/27)^6.
func TestRealPickIsAFunctionOfTheFlow(t *testing.T) {
	s := newSurviveLab(t)
	target := net.JoinHostPort(eip, strconv.Itoa(surviveVIPPort))
	picks := map[uint16][]string{}
	used := map[string]bool{}
	for round := 0; round < 4; round++ {
		mustExec(t, s.l, s.gw, "conntrack", "-F")
		for p := uint16(42001); p <= 42006; p++ {
			b, err := askUDP(s.ext, netip.AddrPortFrom(netip.MustParseAddr(extIP), p), target)
			if err != nil {
				t.Fatalf("round %d, source port %d: %v", round, p, err)
			}
			picks[p] = append(picks[p], b)
			used[b] = true
		}
	}
	for p, bs := range picks {
		for _, b := range bs[1:] {
			if b != bs[0] {
				t.Errorf("source port %d: backends %v across conntrack flushes, want one", p, bs)
				break
			}
		}
	}
	t.Logf("picks per source port across 4 conntrack flushes: %v (backends used: %d)", picks, len(used))
	if err := s.agent.Close(); err != nil {
		t.Fatalf("agent at EOF: %v", err)
	}
}

// askUDP sends one datagram from src in ns to target and returns the backend that answered.
func askUDP(ns string, src netip.AddrPort, target string) (string, error) {
	var backend string
	err := netlab.InNetns(ns, func() error {
		d := net.Dialer{LocalAddr: net.UDPAddrFromAddrPort(src)}
		c, err := d.Dial("udp", target)
		if err != nil {
			return err
		}
		defer func() { _ = c.Close() }() // the answer is read in full
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := c.Write([]byte("1")); err != nil {
			return err
		}
		buf := make([]byte, 512)
		n, err := c.Read(buf)
		if err != nil {
			return err
		}
		backend, _, _ = strings.Cut(string(buf[:n]), " ")
		return nil
	})
	return backend, err
}
