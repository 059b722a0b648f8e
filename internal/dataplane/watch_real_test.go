package dataplane

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/netlab"
)

// TestRealDriftRepairedOnKernelNotification: with the periodic check off, the agent repairs a
// map element removed by hand, a deleted chain, a lo VIP removed and a flushed table because
// the kernel notified it, on both paths. kube-ovn's own writes in the same table (its share
// DNAT, master's nft-dnat-map-add) wake the agent too, and are checked and found not to be
// drift; nor are the agent's own applies: each foreign change is exactly one drift found.
// covers: L8, K8, D5
func TestRealDriftRepairedOnKernelNotification(t *testing.T) {
	for _, path := range agentPaths {
		t.Run(path.name, func(t *testing.T) {
			g := newGWLab(t, 3)
			k := newKubeOVNGateway(t, g.l, g.gw, "iptables")
			web := ident(eip, 80, gwstate.TCP, g.bes(8080, 0)...)
			webCIP := ident(clusterIP, 80, gwstate.TCP, g.bes(8080, 0)...)
			args := append([]string{"--verify-interval", "0", "--v", "1"}, path.args...)
			a := startAgentArgs(t, g.l, g.gw, args...)
			count := func(s string) int { return strings.Count(a.Stderr(), s) }
			const checked, detected = `"msg"="kernel change checked"`, "drift detected"

			mustSend(t, a, withClusterIPs(state(1, web, webCIP), clusterIP))
			mustSend(t, a, withClusterIPs(state(2, web, webCIP), clusterIP)) // unchanged: no write
			web.Backends = g.bes(8080, 0, 1)
			mustSend(t, a, withClusterIPs(state(3, web, webCIP), clusterIP))

			serves := func(target, want string) bool {
				from := g.ext
				if strings.HasPrefix(target, clusterIP+":") {
					from = g.vcli
				}
				res := g.probe(t, from, netlab.ProbeOptions{Target: target, Count: 1, Timeout: 300 * time.Millisecond})
				return res.Errors == 0 && (want == "" || res.Answers[want] == 1)
			}
			// kube-ovn writes its share DNAT into the same table: checked, not drift.
			before := count(checked)
			k.shareDNATAdd(eip, 8443, "tcp", g.backendIPs[2]+":8080")
			waitFor(t, "a check after kube-ovn's write", 10*time.Second, func() bool { return count(checked) > before })
			if !serves(eip+":8443", "be3") {
				t.Fatalf("kube-ovn's share DNAT does not serve:\n%s", a.Stderr())
			}
			if n := count(detected); n != 0 {
				t.Fatalf("the agent's own applies or kube-ovn's write were taken for drift (%d):\n%s", n, a.Stderr())
			}

			listing := func() string { return nftList(t, g.l, g.gw, "list", "table", "ip", TableName) }
			whole := func() string { return canonicalListing(listing()) }
			loHolds := func() bool {
				lo, err := g.l.Exec(g.gw, "ip", "-4", "addr", "show", "dev", "lo", "label", VIPLabel)
				return err == nil && strings.Contains(string(lo), clusterIP+"/32")
			}
			want := whole()
			drifts := [][]string{
				{"nft", "delete", "element", "ip", TableName, ServiceMap, "{", eip, ".", "tcp", ".", "80", "}"},
				{"nft", "delete", "chain", "ip", TableName, HairpinChain},
				{"ip", "addr", "del", clusterIP + "/32", "dev", "lo"},
			}
			for i, drift := range drifts {
				mustExec(t, g.l, g.gw, drift...)
				waitFor(t, "repair after "+strings.Join(drift, " "), 10*time.Second, func() bool {
					return whole() == want && loHolds()
				})
				if n := count(detected); n != i+1 {
					t.Errorf("after %v: %d drifts detected, want %d", drift, n, i+1)
				}
				if !serves(eip+":80", "") || !serves(eip+":8443", "be3") {
					t.Errorf("not serving after repairing %v:\n%s", drift, a.Stderr())
				}
			}

			// A flushed table loses kube-ovn's chain too: the agent restores its own objects,
			// and kube-ovn's redo (here by hand) is again no drift.
			mustExec(t, g.l, g.gw, "nft", "flush", "table", "ip", TableName)
			waitFor(t, "repair after a flush", 10*time.Second, func() bool { return serves(eip+":80", "") })
			wantContains(t, "table after the flush's repair", listing(), eip+" . tcp . 80 : goto "+IdentityChain(web.Key()))
			k.shareDNATAdd(eip, 8443, "tcp", g.backendIPs[2]+":8080")
			waitFor(t, "kube-ovn's redo", 10*time.Second, func() bool {
				return whole() == want
			})
			if !serves(eip+":8443", "be3") || !serves(clusterIP+":80", "") {
				t.Errorf("not serving after the flush and kube-ovn's redo:\n%s", a.Stderr())
			}
			// Checked after the redo, found whole: still four drifts only.
			after := count(checked)
			k.shareDNATAdd(eip, 9443, "tcp", g.backendIPs[2]+":8080")
			waitFor(t, "a check after kube-ovn's second write", 10*time.Second, func() bool { return count(checked) > after })
			if n := count(detected); n != len(drifts)+1 {
				t.Errorf("%d drifts detected, want %d (one per foreign change of the agent's objects):\n%s", n, len(drifts)+1, a.Stderr())
			}
			if n := count("drift repaired"); n != len(drifts)+1 {
				t.Errorf("%d repairs logged, want %d", n, len(drifts)+1)
			}
			if err := a.Close(); err != nil {
				t.Fatalf("agent at EOF: %v", err)
			}
		})
	}
}

// A large transaction is sent with the agent's nftables notifications muted (the kernel would
// otherwise build one per object written, BenchmarkP2ColdSync): a commit of someone else's
// while muted still signals the watcher, through the ruleset generation; the agent's own large
// commits alone do not. (The watcher's reader is not started here, so every signal comes from
// sendQuietly.)
// covers: L8
func TestRealForeignCommitWhileMutedIsSignalled(t *testing.T) {
	l := newLab(t)
	ns, err := l.AddNetns("gw")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := kernelAgentIn(t, ns, 0) // one transaction: a batch far above quietBatch
	nl := a.be.(*countingBackend).backend.(*nlBackend)
	if nl.watch == nil {
		t.Fatal("the kernel agent has no change watcher")
	}
	signalled := func() bool {
		select {
		case <-a.watch.changes:
			return true
		default:
			return false
		}
	}
	ctx := context.Background()
	st := scaleState(1, 300, 4)
	if err := a.Apply(ctx, st); err != nil {
		t.Fatal(err)
	}
	if signalled() {
		t.Error("the agent's own large commit signalled a change")
	}
	nl.whileMuted = func() {
		if _, err := l.Exec(ns, "nft", "add", "chain", "ip", TableName, "someone-elses"); err != nil {
			t.Error(err)
		}
	}
	st2 := scaleState(2, 600, 4)
	if err := a.Apply(ctx, st2); err != nil {
		t.Fatal(err)
	}
	if !signalled() {
		t.Error("a foreign commit during a muted transaction was not signalled")
	}
	nl.whileMuted = nil
	if drift, err := a.Verify(ctx); drift != "" || err != nil {
		t.Errorf("verify: drift %q, err %v (someone else's chain is not drift)", drift, err)
	}
}

// canonicalListing is `nft list table` as a sorted list of its statements, declarations and
// elements: the kernel lists a map's elements in no fixed order, and an element re-added may
// come back elsewhere.
func canonicalListing(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		l = strings.TrimPrefix(l, "elements = { ")
		l = strings.TrimSuffix(strings.TrimSuffix(l, " }"), ",")
		if l != "" && l != "}" {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}
