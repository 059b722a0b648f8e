// covers: V1, V2, K3

package ovn

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustSync(t *testing.T, w *Writer, want VIPRoutes) {
	t.Helper()
	if err := w.Sync(ctxT(t), want); err != nil {
		t.Fatalf("Sync(%+v): %v", want, err)
	}
}

// policyLine is one line of `ovn-nbctl lr-policy-list` with the whitespace collapsed.
func policyLine(prio int, match, action string, nexthops ...string) string {
	l := strconv.Itoa(prio) + " " + match + " " + action
	if len(nexthops) > 0 {
		l += " " + strings.Join(nexthops, ", ")
	}
	return l
}

// lrPolicyList runs `ovn-nbctl lr-policy-list router` and returns its lines, whitespace collapsed.
func lrPolicyList(s *nbServer, router string) []string {
	s.t.Helper()
	out := strings.TrimSpace(s.nbctl("lr-policy-list", router))
	if out == "" {
		return nil
	}
	lines := strings.Split(out, "\n")
	if lines[0] != "Routing Policies" {
		s.t.Fatalf("lr-policy-list %s: unexpected header in %q", router, out)
	}
	var res []string
	for _, l := range lines[1:] {
		res = append(res, strings.Join(strings.Fields(l), " "))
	}
	return res
}

// checkPolicyList compares `ovn-nbctl lr-policy-list` line by line with want. nbctl orders by
// priority (descending), then match; policies with the same priority and match come in any
// order, so lines are compared after sorting by priority and then the text.
func checkPolicyList(t *testing.T, s *nbServer, router string, want ...string) {
	t.Helper()
	got := lrPolicyList(s, router)
	for i := 1; i < len(got); i++ {
		if linePrio(t, got[i-1]) < linePrio(t, got[i]) {
			t.Fatalf("ovn-nbctl lr-policy-list %s not ordered by priority: %q", router, got)
		}
	}
	order := func(a, b string) int {
		if pa, pb := linePrio(t, a), linePrio(t, b); pa != pb {
			return pb - pa
		}
		return strings.Compare(a, b)
	}
	g, w := slices.Clone(got), slices.Clone(want)
	slices.SortFunc(g, order)
	slices.SortFunc(w, order)
	if !slices.Equal(g, w) {
		t.Fatalf("ovn-nbctl lr-policy-list %s:\n got  %q\n want %q", router, got, want)
	}
}

func linePrio(t *testing.T, line string) int {
	t.Helper()
	f, _, _ := strings.Cut(line, " ")
	p, err := strconv.Atoi(f)
	if err != nil {
		t.Fatalf("lr-policy-list line %q: no priority", line)
	}
	return p
}

// checkOwn waits until the writer's view holds exactly want (as fmtPolicies lines) for gw.
func checkOwn(t *testing.T, w *Writer, router, gw string, want ...string) []Policy {
	t.Helper()
	var got []Policy
	deadline := time.Now().Add(5 * time.Second)
	for {
		var err error
		got, err = w.Policies(ctxT(t), router, gw)
		if err != nil {
			t.Fatal(err)
		}
		if fmtPolicies(got) == strings.Join(want, "") {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("policies of %s on %s:\n%s\nwant:\n%s", gw, router, fmtPolicies(got), strings.Join(want, ""))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func own(router, gw, vip string, nh ...string) string {
	return fmt.Sprintf("%s %s %d %q %s %v\n", router, gw, VIPPolicyPriority, "ip4.dst == "+vip, "reroute", nh)
}

// addRawPolicy inserts a policy with ovn-nbctl (not through the writer), external_ids as k=v.
func addRawPolicy(s *nbServer, router string, prio int, match, nexthops string, ext ...string) {
	s.t.Helper()
	args := []string{"--", "--id=@p", "create", "Logical_Router_Policy",
		"priority=" + strconv.Itoa(prio), "match=" + strconv.Quote(match), "action=reroute",
		"nexthops=" + strconv.Quote(nexthops)}
	for _, e := range ext {
		args = append(args, "external_ids:"+e)
	}
	args = append(args, "--", "add", "Logical_Router", router, "policies", "@p")
	s.nbctl(args...)
}

func uuids(ps []Policy) []string {
	var u []string
	for _, p := range ps {
		u = append(u, p.UUID)
	}
	sort.Strings(u)
	return u
}

// TestSyncLifecycle: add, idempotent resync, update next hops in place, remove a VIP, zero
// instances, no VIPs; over the unix socket, checked through the writer and ovn-nbctl.
func TestSyncLifecycle(t *testing.T) {
	s := startNB(t, nil)
	s.nbctl("lr-add", "vpc1")
	w := newTestWriter(t, Config{Address: s.unixAddr()})

	want := VIPRoutes{Router: "vpc1", Gateway: "gw1",
		NextHops: []string{"10.0.1.6", "10.0.1.5", "10.0.1.6"}, VIPs: []string{"172.18.0.100", "10.96.0.10"}}
	mustSync(t, w, want)
	got := checkOwn(t, w, "vpc1", "gw1",
		own("vpc1", "gw1", "10.96.0.10", "10.0.1.5", "10.0.1.6"),
		own("vpc1", "gw1", "172.18.0.100", "10.0.1.5", "10.0.1.6"))
	for _, p := range got {
		if p.ExternalIDs["vendor"] != "kube-ovn" || p.ExternalIDs["vpc-nat-gateway"] != "gw1" || p.ExternalIDs["vipRoute"] != "true" ||
			p.ExternalIDs["vpc-egress-gateway"] != "vpcgw:gw1" || len(p.ExternalIDs) != 4 {
			t.Fatalf("external_ids = %v", p.ExternalIDs)
		}
	}
	checkPolicyList(t, s, "vpc1",
		policyLine(29210, "ip4.dst == 10.96.0.10", "reroute", "10.0.1.5", "10.0.1.6"),
		policyLine(29210, "ip4.dst == 172.18.0.100", "reroute", "10.0.1.5", "10.0.1.6"))
	first := uuids(got)

	// The same state again changes nothing.
	mustSync(t, w, want)
	if again := uuids(checkOwn(t, w, "vpc1", "gw1",
		own("vpc1", "gw1", "10.96.0.10", "10.0.1.5", "10.0.1.6"),
		own("vpc1", "gw1", "172.18.0.100", "10.0.1.5", "10.0.1.6"))); !slices.Equal(again, first) {
		t.Fatalf("resync replaced policies: %v -> %v", first, again)
	}

	// Next hops change: updated in place (same rows).
	want.NextHops = []string{"10.0.1.7", "10.0.1.5"}
	mustSync(t, w, want)
	updated := checkOwn(t, w, "vpc1", "gw1",
		own("vpc1", "gw1", "10.96.0.10", "10.0.1.5", "10.0.1.7"),
		own("vpc1", "gw1", "172.18.0.100", "10.0.1.5", "10.0.1.7"))
	if !slices.Equal(uuids(updated), first) {
		t.Fatalf("next hop update replaced rows: %v -> %v", first, uuids(updated))
	}
	checkPolicyList(t, s, "vpc1",
		policyLine(29210, "ip4.dst == 10.96.0.10", "reroute", "10.0.1.5", "10.0.1.7"),
		policyLine(29210, "ip4.dst == 172.18.0.100", "reroute", "10.0.1.5", "10.0.1.7"))

	// A VIP leaves; another arrives.
	want.VIPs = []string{"10.96.0.10", "10.96.0.11"}
	mustSync(t, w, want)
	checkPolicyList(t, s, "vpc1",
		policyLine(29210, "ip4.dst == 10.96.0.10", "reroute", "10.0.1.5", "10.0.1.7"),
		policyLine(29210, "ip4.dst == 10.96.0.11", "reroute", "10.0.1.5", "10.0.1.7"))
	// The removed policy's row is gone (not just unlinked).
	if rows := strings.TrimSpace(s.nbctl("--bare", "--columns=match", "find", "Logical_Router_Policy", `match="ip4.dst == 172.18.0.100"`)); rows != "" {
		t.Fatalf("removed policy row still exists: %q", rows)
	}

	// Zero initialized instances: all the gateway's VIP policies go.
	want.NextHops = nil
	mustSync(t, w, want)
	checkPolicyList(t, s, "vpc1")
	checkOwn(t, w, "vpc1", "gw1")

	// Back, then no VIPs: gone again.
	want.NextHops = []string{"10.0.1.5"}
	mustSync(t, w, want)
	checkPolicyList(t, s, "vpc1",
		policyLine(29210, "ip4.dst == 10.96.0.10", "reroute", "10.0.1.5"),
		policyLine(29210, "ip4.dst == 10.96.0.11", "reroute", "10.0.1.5"))
	want.VIPs = nil
	mustSync(t, w, want)
	checkPolicyList(t, s, "vpc1")
	if n := strings.TrimSpace(s.nbctl("--bare", "--columns=_uuid", "list", "Logical_Router_Policy")); n != "" {
		t.Fatalf("policy rows left: %q", n)
	}
}

// TestForeignPoliciesUntouched: policies without the VIP external_ids, of another gateway, or the
// gateway's own 29200 source policies are never changed, even for the same VIP.
func TestForeignPoliciesUntouched(t *testing.T) {
	s := startNB(t, nil)
	s.nbctl("lr-add", "vpc1")
	s.nbctl("lr-policy-add", "vpc1", "29210", "ip4.dst == 10.96.0.10", "reroute", "10.0.9.9") // no external_ids, same VIP
	s.nbctl("lr-policy-add", "vpc1", "100", "ip4.src == 10.0.0.5", "allow")
	addRawPolicy(s, "vpc1", 29200, "ip4.src == 10.0.1.0/24", "10.0.1.5", "vendor=kube-ovn", "vpc-nat-gateway=gw1", "af=4")
	addRawPolicy(s, "vpc1", 29210, "ip4.dst == 10.96.0.12", "10.0.2.5", "vendor=kube-ovn", "vpc-nat-gateway=gw2", "vipRoute=true")
	addRawPolicy(s, "vpc1", 29210, "ip4.dst == 10.96.0.13", "10.0.2.5", "vendor=other", "vpc-nat-gateway=gw1", "vipRoute=true")
	addRawPolicy(s, "vpc1", 29210, "ip4.dst == 10.96.0.14", "10.0.2.5", "vendor=kube-ovn", "vpc-nat-gateway=gw1")
	foreign := []string{
		policyLine(29210, "ip4.dst == 10.96.0.10", "reroute", "10.0.9.9"),
		policyLine(29210, "ip4.dst == 10.96.0.12", "reroute", "10.0.2.5"),
		policyLine(29210, "ip4.dst == 10.96.0.13", "reroute", "10.0.2.5"),
		policyLine(29210, "ip4.dst == 10.96.0.14", "reroute", "10.0.2.5"),
		policyLine(29200, "ip4.src == 10.0.1.0/24", "reroute", "10.0.1.5"),
		policyLine(100, "ip4.src == 10.0.0.5", "allow"),
	}
	checkPolicyList(t, s, "vpc1", foreign...)
	before := s.nbctl("--format=csv", "--columns=_uuid,priority,match,action,nexthops,external_ids", "list", "Logical_Router_Policy")

	w := newTestWriter(t, Config{Address: s.unixAddr()})
	mustSync(t, w, VIPRoutes{Router: "vpc1", Gateway: "gw1", NextHops: []string{"10.0.1.5"}, VIPs: []string{"10.96.0.10", "10.96.0.11"}})
	checkPolicyList(t, s, "vpc1", append([]string{
		policyLine(29210, "ip4.dst == 10.96.0.10", "reroute", "10.0.1.5"),
		foreign[0],
		policyLine(29210, "ip4.dst == 10.96.0.11", "reroute", "10.0.1.5"),
	}, foreign[1:]...)...)
	mustSync(t, w, VIPRoutes{Router: "vpc1", Gateway: "gw1"})
	checkPolicyList(t, s, "vpc1", foreign...)
	after := s.nbctl("--format=csv", "--columns=_uuid,priority,match,action,nexthops,external_ids", "list", "Logical_Router_Policy")
	if before != after {
		t.Fatalf("foreign policies changed:\nbefore %s\nafter  %s", before, after)
	}
}

// TestTwoGatewaysOneVPC: each gateway converges only its own policies.
func TestTwoGatewaysOneVPC(t *testing.T) {
	s := startNB(t, nil)
	s.nbctl("lr-add", "vpc1")
	w := newTestWriter(t, Config{Address: s.tcpAddr()})
	mustSync(t, w, VIPRoutes{Router: "vpc1", Gateway: "gw1", NextHops: []string{"10.0.1.5"}, VIPs: []string{"10.96.0.10", "10.96.0.11"}})
	mustSync(t, w, VIPRoutes{Router: "vpc1", Gateway: "gw2", NextHops: []string{"10.0.2.5", "10.0.2.6"}, VIPs: []string{"10.96.0.20"}})
	checkPolicyList(t, s, "vpc1",
		policyLine(29210, "ip4.dst == 10.96.0.10", "reroute", "10.0.1.5"),
		policyLine(29210, "ip4.dst == 10.96.0.11", "reroute", "10.0.1.5"),
		policyLine(29210, "ip4.dst == 10.96.0.20", "reroute", "10.0.2.5", "10.0.2.6"))
	mustSync(t, w, VIPRoutes{Router: "vpc1", Gateway: "gw1", NextHops: []string{"10.0.1.7"}, VIPs: []string{"10.96.0.11"}})
	checkPolicyList(t, s, "vpc1",
		policyLine(29210, "ip4.dst == 10.96.0.11", "reroute", "10.0.1.7"),
		policyLine(29210, "ip4.dst == 10.96.0.20", "reroute", "10.0.2.5", "10.0.2.6"))
	mustSync(t, w, VIPRoutes{Router: "vpc1", Gateway: "gw2"})
	checkPolicyList(t, s, "vpc1", policyLine(29210, "ip4.dst == 10.96.0.11", "reroute", "10.0.1.7"))
	checkOwn(t, w, "", "gw1", own("vpc1", "gw1", "10.96.0.11", "10.0.1.7"))
	checkOwn(t, w, "", "gw2")
}

// TestDuplicatesRemoved: duplicates of one VIP of the gateway (left by an older writer or a race),
// policies with a foreign match and the gateway's policies on another router are cleaned up.
func TestDuplicatesRemoved(t *testing.T) {
	s := startNB(t, nil)
	s.nbctl("lr-add", "vpc1")
	s.nbctl("lr-add", "vpc2")
	ext := []string{"vendor=kube-ovn", "vpc-nat-gateway=gw1", "vipRoute=true"}
	addRawPolicy(s, "vpc1", 29210, "ip4.dst == 10.96.0.10", "10.0.1.9", ext...)
	addRawPolicy(s, "vpc1", 29210, "ip4.dst == 10.96.0.10", "10.0.1.5", ext...)
	addRawPolicy(s, "vpc1", 29000, "ip4.dst == 10.96.0.10", "10.0.1.5", ext...)
	addRawPolicy(s, "vpc1", 29210, "ip4.dst == 10.96.0.0/16", "10.0.1.5", ext...)
	addRawPolicy(s, "vpc2", 29210, "ip4.dst == 10.96.0.10", "10.0.1.5", ext...)
	w := newTestWriter(t, Config{Address: s.unixAddr()})
	mustSync(t, w, VIPRoutes{Router: "vpc1", Gateway: "gw1", NextHops: []string{"10.0.1.5"}, VIPs: []string{"10.96.0.10"}})
	checkPolicyList(t, s, "vpc1", policyLine(29210, "ip4.dst == 10.96.0.10", "reroute", "10.0.1.5"))
	checkPolicyList(t, s, "vpc2")
	checkOwn(t, w, "", "gw1", own("vpc1", "gw1", "10.96.0.10", "10.0.1.5"))
}

// TestNoDuplicateWrites: the same VIP is never written twice, neither by repeated Syncs nor by
// concurrent Syncs from several writers (separate connections, as after a controller failover).
func TestNoDuplicateWrites(t *testing.T) {
	s := startNB(t, nil)
	s.nbctl("lr-add", "vpc1")
	s.nbctl("lr-policy-add", "vpc1", "100", "ip4.src == 10.0.0.5", "allow")
	var ws []*Writer
	for i := range 6 {
		addr := s.unixAddr()
		if i%2 == 1 {
			addr = s.tcpAddr()
		}
		ws = append(ws, newTestWriter(t, Config{Address: addr}))
	}
	for round := range 12 {
		// Each round a new VIP set (every writer races to create it) and other next hops.
		want := VIPRoutes{Router: "vpc1", Gateway: "gw1", NextHops: []string{"10.0.1." + strconv.Itoa(5+round%3)},
			VIPs: []string{"10.96.1." + strconv.Itoa(round), "10.96.2." + strconv.Itoa(round)}}
		var wg sync.WaitGroup
		errs := make(chan error, len(ws))
		start := make(chan struct{})
		for i := range len(ws) { // one Sync per writer: nobody cleans up after the last
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if err := ws[i%len(ws)].Sync(ctxT(t), want); err != nil {
					errs <- err
				}
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("round %d: concurrent Sync: %v", round, err)
		}
		var lines []string
		for _, v := range want.VIPs {
			lines = append(lines, policyLine(29210, "ip4.dst == "+v, "reroute", want.NextHops...))
		}
		checkPolicyList(t, s, "vpc1", append(lines, policyLine(100, "ip4.src == 10.0.0.5", "allow"))...)
		// Sequential repeats change nothing.
		mustSync(t, ws[0], want)
		checkPolicyList(t, s, "vpc1", append(lines, policyLine(100, "ip4.src == 10.0.0.5", "allow"))...)
		// Concurrent Syncs on one writer, with one more VIP.
		want.VIPs = append(want.VIPs, "10.96.3."+strconv.Itoa(round))
		var wg1 sync.WaitGroup
		for range 4 {
			wg1.Add(1)
			go func() {
				defer wg1.Done()
				if err := ws[0].Sync(ctxT(t), want); err != nil {
					t.Errorf("round %d: concurrent Sync on one writer: %v", round, err)
				}
			}()
		}
		wg1.Wait()
		lines = append(lines[:2], policyLine(29210, "ip4.dst == 10.96.3."+strconv.Itoa(round), "reroute", want.NextHops...))
		checkPolicyList(t, s, "vpc1", append(lines, policyLine(100, "ip4.src == 10.0.0.5", "allow"))...)
	}
}

// TestDBRestart: the server stops and starts again on the same file and address between two
// Syncs; the writer reconnects by itself and the next Sync converges (unix and tcp endpoints).
func TestDBRestart(t *testing.T) {
	for _, ep := range []string{"unix", "tcp"} {
		t.Run(ep, func(t *testing.T) {
			s := startNB(t, nil)
			s.nbctl("lr-add", "vpc1")
			addr := s.unixAddr()
			if ep == "tcp" {
				addr = s.tcpAddr()
			}
			w := newTestWriter(t, Config{Address: addr})
			want := VIPRoutes{Router: "vpc1", Gateway: "gw1", NextHops: []string{"10.0.1.5"}, VIPs: []string{"10.96.0.10", "10.96.0.11"}}
			mustSync(t, w, want)

			s.stop()
			// While the DB is down, Sync gives up at its deadline with an error, never hangs.
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			err := w.Sync(ctx, VIPRoutes{Router: "vpc1", Gateway: "gw1", NextHops: []string{"10.0.1.6"}, VIPs: want.VIPs})
			cancel()
			if err == nil {
				t.Fatal("Sync with the DB down succeeded")
			}
			// Someone changes the DB while we are away.
			s.start()
			s.nbctl("lr-policy-add", "vpc1", "100", "ip4.src == 10.0.0.5", "allow")

			want.NextHops = []string{"10.0.1.6", "10.0.1.7"}
			want.VIPs = []string{"10.96.0.11", "10.96.0.12"}
			mustSync(t, w, want)
			checkPolicyList(t, s, "vpc1",
				policyLine(29210, "ip4.dst == 10.96.0.11", "reroute", "10.0.1.6", "10.0.1.7"),
				policyLine(29210, "ip4.dst == 10.96.0.12", "reroute", "10.0.1.6", "10.0.1.7"),
				policyLine(100, "ip4.src == 10.0.0.5", "allow"))
			// And once more, after a second restart, a resync is a no-op with no duplicates.
			s.stop()
			s.start()
			mustSync(t, w, want)
			mustSync(t, w, want)
			checkPolicyList(t, s, "vpc1",
				policyLine(29210, "ip4.dst == 10.96.0.11", "reroute", "10.0.1.6", "10.0.1.7"),
				policyLine(29210, "ip4.dst == 10.96.0.12", "reroute", "10.0.1.6", "10.0.1.7"),
				policyLine(100, "ip4.src == 10.0.0.5", "allow"))
		})
	}
}

// TestBadInput: invalid input and a missing router are rejected with errors that name the value.
func TestBadInput(t *testing.T) {
	s := startNB(t, nil)
	s.nbctl("lr-add", "vpc1")
	w := newTestWriter(t, Config{Address: s.tcpAddr()})
	ok := VIPRoutes{Router: "vpc1", Gateway: "gw1", NextHops: []string{"10.0.1.5"}, VIPs: []string{"10.96.0.10"}}
	for _, c := range []struct {
		name string
		mod  func(*VIPRoutes)
		want string
	}{
		{"ipv6 vip", func(v *VIPRoutes) { v.VIPs = []string{"10.96.0.11", "fd00:10:96::10"} }, `"fd00:10:96::10": not an IPv4`},
		{"garbage vip", func(v *VIPRoutes) { v.VIPs = []string{"10.96.0.10 || 1"} }, `VIP "10.96.0.10 || 1"`},
		{"ipv6 next hop", func(v *VIPRoutes) { v.NextHops = []string{"fd00::5"} }, `next hop "fd00::5"`},
		{"empty router", func(v *VIPRoutes) { v.Router = "" }, "empty router name"},
		{"empty gateway", func(v *VIPRoutes) { v.Gateway = "" }, "empty gateway name"},
		{"missing router", func(v *VIPRoutes) { v.Router = "vpc-missing" }, `router "vpc-missing": logical router not found`},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := ok
			c.mod(&v)
			err := w.Sync(ctxT(t), v)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to contain %q", err, c.want)
			}
			if c.name == "missing router" && !errors.Is(err, ErrRouterNotFound) {
				t.Fatalf("err = %v, want ErrRouterNotFound", err)
			}
		})
	}
	checkPolicyList(t, s, "vpc1") // nothing written by the rejected calls
	// Removing everything from a router that is gone is not an error: there is nothing to keep.
	mustSync(t, w, VIPRoutes{Router: "vpc-missing", Gateway: "gw1"})

	// Connecting to nothing fails in NewWriter with the address in the message.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := NewWriter(ctx, Config{Address: "tcp:127.0.0.1:" + strconv.Itoa(freePort(t))}, logrDiscard()); err == nil || !strings.Contains(err.Error(), "tcp:127.0.0.1:") {
		t.Fatalf("NewWriter to a closed port: %v", err)
	}
	if _, err := NewWriter(ctx, Config{Address: "udp:127.0.0.1:6641"}, logrDiscard()); err == nil || !strings.Contains(err.Error(), `"udp"`) {
		t.Fatalf("NewWriter with udp: %v", err)
	}
}

// TestSeveralEndpoints: a comma-separated address (as for a clustered DB) connects to the endpoint
// that answers.
func TestSeveralEndpoints(t *testing.T) {
	s := startNB(t, nil)
	s.nbctl("lr-add", "vpc1")
	dead := "tcp:127.0.0.1:" + strconv.Itoa(freePort(t))
	w := newTestWriter(t, Config{Address: dead + "," + s.unixAddr()})
	mustSync(t, w, VIPRoutes{Router: "vpc1", Gateway: "gw1", NextHops: []string{"10.0.1.5"}, VIPs: []string{"10.96.0.10"}})
	checkPolicyList(t, s, "vpc1", policyLine(29210, "ip4.dst == 10.96.0.10", "reroute", "10.0.1.5"))
}

// TestSSL: an ssl: endpoint with client certificates; a server certificate from another CA is
// refused.
func TestSSL(t *testing.T) {
	requireOVN(t)
	pkiDir := t.TempDir()
	srv, cli, otherCA := testPKI(t, pkiDir)
	s := startNB(t, &srv)
	s.nbctl("lr-add", "vpc1")
	w := newTestWriter(t, Config{Address: s.sslAddr(), TLS: &TLSFiles{CertFile: cli.cert, KeyFile: cli.key, CAFile: cli.ca}})
	mustSync(t, w, VIPRoutes{Router: "vpc1", Gateway: "gw1", NextHops: []string{"10.0.1.5"}, VIPs: []string{"10.96.0.10"}})
	checkPolicyList(t, s, "vpc1", policyLine(29210, "ip4.dst == 10.96.0.10", "reroute", "10.0.1.5"))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := NewWriter(ctx, Config{Address: s.sslAddr(), TLS: &TLSFiles{CertFile: cli.cert, KeyFile: cli.key, CAFile: otherCA}}, logrDiscard()); err == nil {
		t.Fatal("connected to a server whose certificate is from another CA")
	}
	if _, err := NewWriter(ctx, Config{Address: s.sslAddr()}, logrDiscard()); err == nil || !strings.Contains(err.Error(), "no TLS files") {
		t.Fatalf("ssl without TLS: %v", err)
	}
}

// TestCloseDuringOutage: a writer closed while the DB is down does not stay connected once the
// DB is back (libovsdb's reconnect loop outlives Close; the writer closes the late connection).
func TestCloseDuringOutage(t *testing.T) {
	s := startNB(t, nil)
	w := newTestWriter(t, Config{Address: s.tcpAddr()})
	s.stop()
	time.Sleep(100 * time.Millisecond)
	w.Close()
	s.start()
	// The reconnect backoff is short at this point: within a few seconds the late connection has
	// been made and closed again; the server then has no session from us.
	deadline := time.Now().Add(15 * time.Second)
	for {
		time.Sleep(500 * time.Millisecond)
		mem := s.appctl("memory/show")
		if w.c.CurrentEndpoint() == "" && !strings.Contains(mem, "sessions:") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("closed writer still connected (%q); server: %s", w.c.CurrentEndpoint(), mem)
		}
	}
}
