// covers: K8, D4, D8, L6 (kube-ovn's own objects beside the agent's in the gateway)
package dataplane

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/netlab"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

// kubeOVNGateway replays inside a gateway namespace what kube-ovn's nat-gateway.sh does there,
// with the exact commands the script issues, as argv. The script itself is not run: its init
// also writes /etc/kube-ovn on the (shared) host filesystem, loads kernel modules and sends
// gratuitous ARPs. TestKubeOVNScriptIssuesTheseCommands checks the commands against the real
// script.
type kubeOVNGateway struct {
	t   *testing.T
	l   *netlab.Lab
	ns  string
	ipt string // iptables binary: "iptables-legacy" or "iptables" (nft)
	dir string // nft -f files
}

func newKubeOVNGateway(t *testing.T, l *netlab.Lab, ns, iptables string) *kubeOVNGateway {
	t.Helper()
	if _, err := exec.LookPath(iptables); err != nil {
		testutil.Skip(t, fmt.Sprintf("skipping: %s is missing (apt-get install -y iptables)", iptables))
	}
	return &kubeOVNGateway{t: t, l: l, ns: ns, ipt: iptables, dir: t.TempDir()}
}

// iptablesVariants are the binaries nat-gateway.sh may use (v1.16.2 :48-54: iptables-legacy
// when `iptables-legacy -t nat -S INPUT 1` works, else iptables, which is iptables-nft here).
var iptablesVariants = []string{"iptables-legacy", "iptables"}

func (k *kubeOVNGateway) run(argv ...string) {
	k.t.Helper()
	if _, err := k.l.Exec(k.ns, argv...); err != nil {
		k.t.Fatalf("kube-ovn: %v", err)
	}
}

func (k *kubeOVNGateway) iptables(args ...string) {
	k.t.Helper()
	k.run(append([]string{k.ipt}, args...)...)
}

// kubeOVNInitCommands are nat-gateway.sh init's iptables commands (v1.16.2 :154-176, master
// :156-178), with VPC_INTERFACE=eth0.
var kubeOVNInitCommands = [][]string{
	{"-t", "nat", "-N", "DNAT_FILTER"},
	{"-t", "nat", "-N", "SNAT_FILTER"},
	{"-t", "nat", "-N", "EXCLUSIVE_DNAT"},
	{"-t", "nat", "-N", "EXCLUSIVE_SNAT"},
	{"-t", "nat", "-N", "SHARED_DNAT"},
	{"-t", "nat", "-N", "SHARED_SNAT"},
	{"-t", "nat", "-N", "HAIRPIN_SNAT"},
	{"-t", "mangle", "-N", "VPC_MARK"},
	{"-t", "nat", "-A", "PREROUTING", "-j", "DNAT_FILTER"},
	{"-t", "nat", "-A", "DNAT_FILTER", "-j", "EXCLUSIVE_DNAT"},
	{"-t", "nat", "-A", "DNAT_FILTER", "-j", "SHARED_DNAT"},
	{"-t", "nat", "-A", "POSTROUTING", "-j", "SNAT_FILTER"},
	{"-t", "nat", "-A", "SNAT_FILTER", "-j", "EXCLUSIVE_SNAT"},
	{"-t", "nat", "-A", "SNAT_FILTER", "-j", "SHARED_SNAT"},
	{"-t", "nat", "-A", "SNAT_FILTER", "-j", "HAIRPIN_SNAT"},
	{"-t", "mangle", "-A", "PREROUTING", "-j", "VPC_MARK"},
	{"-t", "mangle", "-A", "VPC_MARK", "-i", "eth0", "-j", "MARK", "--set-xmark", "0x1/0x1"},
}

func (k *kubeOVNGateway) init() {
	k.t.Helper()
	for _, c := range kubeOVNInitCommands {
		k.iptables(c...)
	}
}

// hairpinArgs is eip-add's hairpin rule for one EIP (v1.16.2 :268-271).
func hairpinArgs(eip string) []string {
	return []string{"-m", "mark", "--mark", "0x1/0x1", "-o", "eth0", "-m", "conntrack", "--ctstate", "DNAT", "--ctorigdst", eip, "-j", "SNAT", "--to-source", eip, "--random-fully"}
}

// eipAdd is nat-gateway.sh eip-add <eip/prefix> (v1.16.2 :255-287), without the arping.
func (k *kubeOVNGateway) eipAdd(cidr string) {
	k.t.Helper()
	eip, _, _ := strings.Cut(cidr, "/")
	k.run("ip", "addr", "replace", cidr, "dev", "net1")
	k.iptables(append([]string{"-t", "nat", "-A", "HAIRPIN_SNAT"}, hairpinArgs(eip)...)...)
}

// dnatAdd is nat-gateway.sh dnat-add <eip>,<dport>,<proto>,<ip>,<port> (v1.16.2 :436-469).
func (k *kubeOVNGateway) dnatAdd(eip, dport, proto, ip, port string) {
	k.t.Helper()
	k.iptables("-t", "nat", "-A", "SHARED_DNAT", "-p", proto, "-d", eip, "--dport", dport, "-j", "DNAT", "--to-destination", ip+":"+port)
}

// shareChain is the chain master's script names for a share DNAT: "dnat-" and the first 12 hex
// digits of md5("<eip>:<eport>:<proto>") (master nat-gateway.sh :562-567), computed here
// independently of the agent's IdentityChain.
func shareChain(eip string, eport int, proto string) string {
	sum := md5.Sum([]byte(fmt.Sprintf("%s:%d:%s", eip, eport, proto)))
	return "dnat-" + hex.EncodeToString(sum[:])[:12]
}

// shareDNATAdd is master's nat-gateway.sh nft-dnat-map-add "<eip>,<eport>,<proto>,<ip:port>@…":
// its one `nft -f` transaction (master :658-667, reference §3), backends sorted as strings.
func (k *kubeOVNGateway) shareDNATAdd(eip string, eport int, proto string, backends ...string) {
	k.t.Helper()
	bs := slices.Clone(backends)
	slices.Sort(bs)
	var m []string
	for i, b := range bs {
		ip, port, _ := strings.Cut(b, ":")
		m = append(m, fmt.Sprintf("%d : %s . %s", i, ip, port))
	}
	chain := shareChain(eip, eport, proto)
	script := strings.Join([]string{
		"add table ip kube-ovn",
		"add chain ip kube-ovn prerouting { type nat hook prerouting priority -150 ; }",
		"add map ip kube-ovn service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; }",
		"flush chain ip kube-ovn prerouting",
		"add rule ip kube-ovn prerouting ip daddr . meta l4proto . th dport vmap @service-ips",
		"add chain ip kube-ovn " + chain,
		"flush chain ip kube-ovn " + chain,
		fmt.Sprintf("add rule ip kube-ovn %s meta l4proto %s dnat ip addr . port to numgen random mod %d map { %s }", chain, proto, len(bs), strings.Join(m, ", ")),
		fmt.Sprintf("add element ip kube-ovn service-ips { %s . %s . %d : goto %s }", eip, proto, eport, chain),
	}, "\n") + "\n"
	f := filepath.Join(k.dir, fmt.Sprintf("share-%s-%d-%s.nft", eip, eport, proto))
	if err := os.WriteFile(f, []byte(script), 0o600); err != nil {
		k.t.Fatal(err)
	}
	k.run("nft", "-f", f)
}

// shareListing is how `nft list table` shows the chain shareDNATAdd wrote (nftables 1.0.6).
func shareListing(eip string, eport int, proto string, backends ...string) string {
	bs := slices.Clone(backends)
	slices.Sort(bs)
	var m []string
	for i, b := range bs {
		ip, port, _ := strings.Cut(b, ":")
		m = append(m, fmt.Sprintf("%d : %s . %s", i, ip, port))
	}
	return fmt.Sprintf("chain %s {\n\t\tmeta l4proto %s dnat ip to numgen random mod %d map { %s }\n\t}", shareChain(eip, eport, proto), proto, len(bs), strings.Join(m, ", "))
}

// snapshot is everything of kube-ovn's outside table ip kube-ovn: its iptables rules (nat and
// mangle, without counters) and the addresses on net1.
func (k *kubeOVNGateway) snapshot() string {
	k.t.Helper()
	var b strings.Builder
	for _, table := range []string{"nat", "mangle"} {
		out, err := k.l.Exec(k.ns, k.ipt, "-t", table, "-S")
		if err != nil {
			k.t.Fatal(err)
		}
		b.Write(out)
	}
	out, err := k.l.Exec(k.ns, "ip", "-4", "-o", "addr", "show", "dev", "net1")
	if err != nil {
		k.t.Fatal(err)
	}
	b.Write(out) // static addresses: lifetimes are "forever", nothing changes by itself
	return b.String()
}

// TestKubeOVNScriptIssuesTheseCommands checks that the commands kubeOVNGateway replays are the
// ones in the real nat-gateway.sh (v1.16.2).
// covers: K8
func TestKubeOVNScriptIssuesTheseCommands(t *testing.T) {
	dir, missing := testutil.KubeOVNAssets("nat-gateway.sh")
	if missing != "" {
		testutil.Skip(t, missing)
	}
	b, err := os.ReadFile(filepath.Join(dir, "nat-gateway.sh"))
	if err != nil {
		t.Fatal(err)
	}
	script := string(b)
	for _, c := range kubeOVNInitCommands {
		line := "$iptables_cmd " + strings.Join(c, " ")
		line = strings.Replace(line, "-i eth0", `-i "$VPC_INTERFACE"`, 1)
		if !strings.Contains(script, line) {
			t.Errorf("nat-gateway.sh init has no %q", line)
		}
	}
	hairpin := strings.Join(hairpinArgs("$eip_without_prefix"), " ")
	hairpin = strings.Replace(hairpin, "-o eth0", "-o $VPC_INTERFACE", 1)
	hairpin = strings.TrimSuffix(hairpin, " --random-fully")
	for _, want := range []string{
		`local hairpin_rule="` + hairpin + `"`,
		`$iptables_cmd -t nat -A HAIRPIN_SNAT $hairpin_rule --random-fully`,
		`exec_cmd "ip addr replace $eip dev $EXTERNAL_INTERFACE"`,
		`$iptables_cmd -t nat -A SHARED_DNAT -p $protocol -d $eip --dport $dport -j DNAT --to-destination $internalIp:$internalPort`,
		`iptables-legacy -t nat -S INPUT 1`,
	} {
		if !strings.Contains(script, want) {
			t.Errorf("nat-gateway.sh has no %q", want)
		}
	}
}

// agentPaths are the agent's two ways to the kernel.
var agentPaths = []struct {
	name string
	args []string
}{{"netlink", nil}, {"text", []string{"--text-path"}}}

// TestRealKubeOVNShareDNATSurvivesTheAgent: identities kube-ovn master's share DNAT wrote into
// table ip kube-ovn (keys the agent does not serve) survive the agent's full sync, complete and
// delta updates, a restart (adoption of the kernel state), drift repair and the agent
// withdrawing everything; they keep serving traffic throughout (C6).
// covers: K8, D8, L6
func TestRealKubeOVNShareDNATSurvivesTheAgent(t *testing.T) {
	for _, path := range agentPaths {
		t.Run(path.name, func(t *testing.T) {
			g := newGWLab(t, 3)
			k := newKubeOVNGateway(t, g.l, g.gw, "iptables")
			share := []string{g.backendIPs[1] + ":8080", g.backendIPs[2] + ":8080"}
			// Written before the agent starts (the gateway's redo), and another one later.
			k.shareDNATAdd(eip, 8443, "tcp", share...)
			web := ident(eip, 80, gwstate.TCP, g.bes(8080, 0)...)
			web.AffinityTimeoutSeconds = 300
			api := ident(eip, 81, gwstate.TCP, g.bes(8080, 0, 1)...)
			args := append([]string{"--verify-interval", "200ms"}, path.args...)
			a := startAgentArgs(t, g.l, g.gw, args...)

			kubeOVNIntact := func(when string, rules ...[]int) {
				t.Helper()
				table := nftList(t, g.l, g.gw, "list", "table", "ip", TableName)
				wantContains(t, "table "+when, table,
					fmt.Sprintf("%s . tcp . 8443 : goto %s", eip, shareChain(eip, 8443, "tcp")),
					shareListing(eip, 8443, "tcp", share...))
				for _, r := range rules {
					wantContains(t, "table "+when, table,
						fmt.Sprintf("%s . tcp . %d : goto %s", eip, r[0], shareChain(eip, r[0], "tcp")),
						shareListing(eip, r[0], "tcp", g.backendIPs[r[1]]+":8080"))
				}
				res := g.probe(t, g.ext, netlab.ProbeOptions{Target: eip + ":8443", Count: 20})
				if res.Errors != 0 || res.Answers["be2"]+res.Answers["be3"] != 20 {
					t.Errorf("%s: kube-ovn's share DNAT %s:8443: %+v, want 20 answers from be2 and be3", when, eip, res)
				}
			}
			serves := func(when string) {
				t.Helper()
				res := g.probe(t, g.ext, netlab.ProbeOptions{Target: eip + ":80", Count: 5})
				if res.Errors != 0 || res.Answers["be1"] != 5 {
					t.Errorf("%s: agent's %s:80: %+v, want 5 answers from be1", when, eip, res)
				}
			}

			st1 := state(1, web, api)
			mustSend(t, a, st1)
			kubeOVNIntact("after the full sync")
			serves("after the full sync")

			// kube-ovn adds a share rule while the agent runs: it flushes and re-adds the base
			// chain's rule; the agent keeps dispatching.
			k.shareDNATAdd(eip, 9443, "tcp", g.backendIPs[2]+":8080")
			serves("after kube-ovn's nft-dnat-map-add")

			api.Backends = g.bes(8080, 1)
			st2 := state(2, web, api)
			mustSend(t, a, st2)
			kubeOVNIntact("after a complete state", []int{9443, 2})
			st3 := state(3, web)
			if ack, err := a.SendLine(deltaLine(t, st2, st3), 10*time.Second); err != nil || ack.Error != "" || ack.Generation != 3 {
				t.Fatalf("delta: ack %+v, err %v", ack, err)
			}
			kubeOVNIntact("after a delta removing an identity", []int{9443, 2})

			a.Stop() // SIGKILL
			a = startAgentArgs(t, g.l, g.gw, args...)
			mustSend(t, a, st3)
			kubeOVNIntact("after a restart", []int{9443, 2})
			serves("after a restart")
			wantContains(t, "ownership set", nftList(t, g.l, g.gw, "list", "set", "ip", TableName, OwnedSet), "elements = { "+eip+" . tcp . 80 }")

			// Drift in the agent's objects is repaired without touching kube-ovn's.
			mustExec(t, g.l, g.gw, "nft", "delete", "element", "ip", TableName, ServiceMap, "{", eip, ".", "tcp", ".", "80", "}")
			waitFor(t, "drift repair", 10*time.Second, func() bool { return strings.Count(a.Stderr(), "drift repaired") >= 1 })
			kubeOVNIntact("after a drift repair", []int{9443, 2})
			serves("after a drift repair")

			// The agent withdraws everything: kube-ovn's identities stay.
			mustSend(t, a, state(4))
			kubeOVNIntact("after the agent withdrew its identities", []int{9443, 2})
			wantLacks(t, "table after withdrawal", nftList(t, g.l, g.gw, "list", "table", "ip", TableName),
				IdentityChain(web.Key()), eip+" . tcp . 80 ")
			if err := a.Close(); err != nil {
				t.Fatalf("agent at EOF: %v", err)
			}
		})
	}
}

// TestRealKubeOVNRewriteIsRepaired: kube-ovn master's nft-dnat-map-add for a key the agent also
// serves rewrites the agent's identity chain of the same name (no affinity, kube-ovn's own
// backends); the agent's drift check notices the content change (every count stays the same)
// and restores its rules. The same command for another key flushes and re-adds the base chain's
// rule, which leaves the agent's dispatch working (C5).
// covers: K8, D3, L6
func TestRealKubeOVNRewriteIsRepaired(t *testing.T) {
	for _, path := range agentPaths {
		t.Run(path.name, func(t *testing.T) {
			g := newGWLab(t, 3)
			k := newKubeOVNGateway(t, g.l, g.gw, "iptables")
			web := ident(eip, 80, gwstate.TCP, g.bes(8080, 0, 1)...)
			web.AffinityTimeoutSeconds = 300
			api := ident(eip, 81, gwstate.TCP, g.bes(8080, 0)...)
			a := startAgentArgs(t, g.l, g.gw, append([]string{"--verify-interval", "200ms"}, path.args...)...)
			mustSend(t, a, state(1, web, api))
			want := nftList(t, g.l, g.gw, "list", "table", "ip", TableName)

			repaired := 0
			for _, rewrite := range []struct {
				what     string
				port     int
				backends []string
			}{
				{"the affinity identity, same backends", 80, []string{g.backendIPs[0] + ":8080", g.backendIPs[1] + ":8080"}},
				{"a plain identity, other backends", 81, []string{g.backendIPs[2] + ":8080"}},
			} {
				k.shareDNATAdd(eip, rewrite.port, "tcp", rewrite.backends...)
				// The verifier runs every 200 ms and may repair before any listing here could
				// see kube-ovn's chain, so the proof of the rewrite is the agent's log below:
				// the chain held kube-ovn's one rule and none of the agent's.
				repaired++
				waitFor(t, "repair of "+rewrite.what, 10*time.Second, func() bool {
					out, err := g.l.Exec(g.gw, "nft", "list", "table", "ip", TableName)
					return err == nil && string(out) == want && strings.Count(a.Stderr(), "drift repaired") >= repaired
				})
				if n := strings.Count(a.Stderr(), "drift repaired"); n != repaired {
					t.Errorf("after kube-ovn rewrote %s: %d repairs logged, want %d:\n%s", rewrite.what, n, repaired, a.Stderr())
				}
				wantContains(t, "agent log", a.Stderr(), "chain "+IdentityChain(key(eip, int32(rewrite.port), gwstate.TCP))+" has 1 rules (0 of the agent's)")
			}
			// Affinity is back: one client always gets the same backend (20 new connections
			// all on one of two backends by chance: 2^-19).
			res := g.probe(t, g.ext, netlab.ProbeOptions{Target: eip + ":80", Count: 20})
			if res.Errors != 0 || len(res.Answers) != 1 || res.Total() != 20 {
				t.Errorf("affinity after the repair: %+v, want 20 answers from one backend", res)
			}
			res = g.probe(t, g.ext, netlab.ProbeOptions{Target: eip + ":81", Count: 5})
			if res.Errors != 0 || res.Answers["be1"] != 5 {
				t.Errorf("plain identity after the repair: %+v, want 5 answers from be1 (kube-ovn wrote be3)", res)
			}

			// Another key: kube-ovn flushes the base chain and re-adds the same dispatch rule;
			// the agent's objects are as they were and its identities are dispatched.
			// (-s: without the affinity entries' expiry times, which move.)
			was := listingBlocks(nftList(t, g.l, g.gw, "-s", "list", "table", "ip", TableName))
			k.shareDNATAdd(eip, 8443, "tcp", g.backendIPs[2]+":8080")
			is := listingBlocks(nftList(t, g.l, g.gw, "-s", "list", "table", "ip", TableName))
			for head, block := range was {
				if head == "map "+ServiceMap+" {" {
					continue // holds kube-ovn's element now
				}
				if is[head] != block {
					t.Errorf("%s after kube-ovn's add for another key:\n%s\nwas:\n%s", head, is[head], block)
				}
			}
			res = g.probe(t, g.ext, netlab.ProbeOptions{Target: eip + ":81", Count: 5})
			if res.Errors != 0 || res.Answers["be1"] != 5 {
				t.Errorf("agent's identity after kube-ovn's add for another key: %+v, want 5 answers from be1", res)
			}
			res = g.probe(t, g.ext, netlab.ProbeOptions{Target: eip + ":8443", Count: 5})
			if res.Errors != 0 || res.Answers["be3"] != 5 {
				t.Errorf("kube-ovn's identity: %+v, want 5 answers from be3", res)
			}
			if err := a.Close(); err != nil {
				t.Fatalf("agent at EOF: %v", err)
			}
		})
	}
}

// TestRealKubeOVNIptablesAndEIPsSurvive: after kube-ovn's init, eip-add and dnat-add, the
// agent's syncs, updates, restart and drift repair leave every iptables chain and rule and every
// address on net1 as kube-ovn made them, with either iptables the script may use.
// covers: K8, D8
func TestRealKubeOVNIptablesAndEIPsSurvive(t *testing.T) {
	for _, ipt := range iptablesVariants {
		t.Run(ipt, func(t *testing.T) {
			g := newGWLab(t, 2)
			k := newKubeOVNGateway(t, g.l, g.gw, ipt)
			k.init()
			k.eipAdd(eip + "/24")
			k.eipAdd("172.31.0.101/24")
			k.dnatAdd("172.31.0.101", "80", "tcp", g.backendIPs[1], "8080")
			want := k.snapshot()
			wantContains(t, "kube-ovn's rules", want, "-A HAIRPIN_SNAT", "-N SHARED_DNAT", "-A VPC_MARK -i eth0", "inet 172.31.0.101/24")
			check := func(when string) {
				t.Helper()
				if got := k.snapshot(); got != want {
					t.Errorf("kube-ovn's iptables rules or net1 addresses changed %s:\n%s\nwant:\n%s", when, got, want)
				}
			}

			web := ident(eip, 80, gwstate.TCP, g.bes(8080, 0)...)
			cip := ident(clusterIP, 80, gwstate.TCP, g.bes(8080, 0, 1)...)
			args := []string{"--verify-interval", "200ms"}
			a := startAgentArgs(t, g.l, g.gw, args...)
			st1 := withClusterIPs(state(1, web, cip), clusterIP)
			mustSend(t, a, st1)
			check("by the full sync")
			web.Backends = g.bes(8080, 0, 1)
			st2 := withClusterIPs(state(2, web, cip), clusterIP)
			mustSend(t, a, st2)
			check("by a complete state")
			st3 := withClusterIPs(state(3, web), clusterIP)
			if ack, err := a.SendLine(deltaLine(t, st2, st3), 10*time.Second); err != nil || ack.Error != "" {
				t.Fatalf("delta: ack %+v, err %v", ack, err)
			}
			check("by a delta")
			a.Stop()
			a = startAgentArgs(t, g.l, g.gw, args...)
			mustSend(t, a, st3)
			check("by a restart")
			mustExec(t, g.l, g.gw, "nft", "delete", "table", "ip", TableName)
			waitFor(t, "drift repair", 10*time.Second, func() bool { return strings.Count(a.Stderr(), "drift repaired") >= 1 })
			check("by a drift repair")
			res := g.probe(t, g.ext, netlab.ProbeOptions{Target: eip + ":80", Count: 10})
			if res.Errors != 0 || res.Total() != 10 {
				t.Errorf("agent's identity after the repair: %+v", res)
			}
			// kube-ovn's own DNAT still serves.
			res = g.probe(t, g.ext, netlab.ProbeOptions{Target: "172.31.0.101:80", Count: 5})
			if res.Errors != 0 || res.Answers["be2"] != 5 {
				t.Errorf("kube-ovn's DNAT: %+v, want 5 answers from be2", res)
			}
			mustSend(t, a, state(4))
			check("by withdrawing everything")
			if err := a.Close(); err != nil {
				t.Fatalf("agent at EOF: %v", err)
			}
		})
	}
}

// TestRealHairpinOnePath: a VPC client of an EIP the agent serves, DNATed to a backend in its own
// subnet, is SNATed by the agent to the gateway's eth0 address, although kube-ovn's HAIRPIN_SNAT
// for the same EIP is in iptables' nat POSTROUTING, whichever registered its hook first; a VPC
// client of kube-ovn's own iptables DNAT (another EIP) keeps kube-ovn's SNAT to that EIP, the
// agent does not masquerade it (C13).
// covers: D4, K8
func TestRealHairpinOnePath(t *testing.T) {
	const kubeOVNEIP = "172.31.0.101"
	for _, ipt := range iptablesVariants {
		for _, kubeOVNFirst := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/kube-ovn-first=%v", ipt, kubeOVNFirst), func(t *testing.T) {
				g := newGWLab(t, 1)
				k := newKubeOVNGateway(t, g.l, g.gw, ipt)
				kubeOVN := func() {
					k.init()
					k.eipAdd(eip + "/24")
					k.eipAdd(kubeOVNEIP + "/24")
					k.dnatAdd(kubeOVNEIP, "80", "tcp", g.backendIPs[0], "8080")
				}
				if kubeOVNFirst {
					kubeOVN()
				}
				a := startAgent(t, g.l, g.gw)
				mustSend(t, a, state(1, ident(eip, 80, gwstate.TCP, g.bes(8080, 0)...)))
				if !kubeOVNFirst {
					kubeOVN()
				}
				seen := func(target string) map[string]int {
					t.Helper()
					res := g.probe(t, g.vcli, netlab.ProbeOptions{Target: target, Path: "/whoami", Count: 10})
					if res.Errors != 0 || res.Total() != 10 {
						t.Errorf("VPC client via %s: %+v", target, res)
					}
					return res.Answers
				}
				if got := seen(eip + ":80"); got["be1 "+gwLanIP] != 10 {
					t.Errorf("VPC client via the agent's %s:80: backend saw %v, want the gateway's eth0 address %s every time", eip, got, gwLanIP)
				}
				if got := seen(kubeOVNEIP + ":80"); got["be1 "+kubeOVNEIP] != 10 {
					t.Errorf("VPC client via kube-ovn's DNAT %s:80: backend saw %v, want kube-ovn's SNAT to %s every time", kubeOVNEIP, got, kubeOVNEIP)
				}
				res := g.probe(t, g.ext, netlab.ProbeOptions{Target: eip + ":80", Path: "/whoami", Count: 5})
				if res.Answers["be1 "+extIP] != 5 {
					t.Errorf("external client: backend saw %v, want the client's own address %s", res.Answers, extIP)
				}
				if err := a.Close(); err != nil {
					t.Fatalf("agent at EOF: %v", err)
				}
			})
		}
	}
}

// TestRealAdoptsTableOfOlderAgent: a table an agent from before the ownership set wrote (hairpin
// chain "postrouting" at srcnat, unscoped; no vpcgw-identities) is taken over in one transaction
// the kernel accepts: its stale identity goes, the old hairpin chain goes, and the table is the
// one a fresh agent writes.
// covers: D4, D8
func TestRealAdoptsTableOfOlderAgent(t *testing.T) {
	l := newLab(t)
	gw, err := l.AddNetns("gw")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := l.AddNetns("ref")
	if err != nil {
		t.Fatal(err)
	}
	keep := ident("10.96.0.10", 80, gwstate.TCP, be("10.0.1.11", 8080))
	stale := IdentityChain(key("10.96.0.20", 80, gwstate.TCP))
	old := filepath.Join(t.TempDir(), "old.nft")
	if err := os.WriteFile(old, []byte(`add table ip kube-ovn
add chain ip kube-ovn prerouting { type nat hook prerouting priority -150 ; policy accept ; }
add map ip kube-ovn service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; }
add rule ip kube-ovn prerouting ip daddr . meta l4proto . th dport vmap @service-ips
add chain ip kube-ovn postrouting { type nat hook postrouting priority 100 ; policy accept ; }
add rule ip kube-ovn postrouting iifname "eth0" oifname "eth0" ct status dnat masquerade fully-random
add chain ip kube-ovn `+IdentityChain(keep.Key())+`
add rule ip kube-ovn `+IdentityChain(keep.Key())+` meta l4proto tcp dnat ip to 10.0.1.11:8080
add element ip kube-ovn service-ips { 10.96.0.10 . tcp . 80 : goto `+IdentityChain(keep.Key())+` }
add chain ip kube-ovn `+stale+`
add rule ip kube-ovn `+stale+` meta l4proto tcp dnat ip to 10.0.1.12:8080
add element ip kube-ovn service-ips { 10.96.0.20 . tcp . 80 : goto `+stale+` }
`), 0o600); err != nil {
		t.Fatal(err)
	}
	mustExec(t, l, gw, "nft", "-f", old)
	a := startAgent(t, l, gw)
	mustSend(t, a, state(1, keep))
	fresh := startAgent(t, l, ref)
	mustSend(t, fresh, state(1, keep))
	got, want := nftList(t, l, gw, "list", "table", "ip", TableName), nftList(t, l, ref, "list", "table", "ip", TableName)
	// The same objects; `nft list` orders chains by creation, and the adopted chain is older.
	if !reflect.DeepEqual(listingBlocks(got), listingBlocks(want)) {
		t.Errorf("adopted table of an older agent:\n%s\nwant (fresh agent):\n%s", got, want)
	}
	wantContains(t, "agent log", a.Stderr(), "adopting a table of an older agent")
	for _, p := range []*netlab.AgentProc{a, fresh} {
		if err := p.Close(); err != nil {
			t.Fatalf("agent at EOF: %v", err)
		}
	}
}
