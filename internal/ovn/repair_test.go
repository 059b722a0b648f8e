// covers: K3, V1, V2

package ovn

import (
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ovn-kubernetes/libovsdb/cache"
	"github.com/ovn-kubernetes/libovsdb/model"

	"github.com/vpcgw/vpcgw/internal/ovn/nbdb"
)

// rowWatch records the Logical_Router_Policy rows deleted and added as another NB client sees
// them (a second connection, as kube-ovn or northd would see the writer's transactions).
type rowWatch struct {
	obs            *Writer
	mu             sync.Mutex
	added, deleted []string
	updated        int
}

// watchRows connects the observer; it records the changes after the rows it found at connect.
func watchRows(t *testing.T, s *nbServer) *rowWatch {
	t.Helper()
	obs := newTestWriter(t, Config{Address: s.tcpAddr()})
	rw := &rowWatch{obs: obs}
	obs.c.Cache().AddEventHandler(&cache.EventHandlerFuncs{
		AddFunc: func(table string, m model.Model) {
			if table == nbdb.LogicalRouterPolicyTable {
				rw.mu.Lock()
				rw.added = append(rw.added, m.(*nbdb.LogicalRouterPolicy).UUID)
				rw.mu.Unlock()
			}
		},
		UpdateFunc: func(table string, _, _ model.Model) {
			if table == nbdb.LogicalRouterPolicyTable {
				rw.mu.Lock()
				rw.updated++
				rw.mu.Unlock()
			}
		},
		DeleteFunc: func(table string, m model.Model) {
			if table == nbdb.LogicalRouterPolicyTable {
				rw.mu.Lock()
				rw.deleted = append(rw.deleted, m.(*nbdb.LogicalRouterPolicy).UUID)
				rw.mu.Unlock()
			}
		},
	})
	return rw
}

// rowsByVIP reads the gateway's policies with ovn-nbctl: VIP -> UUID and external_ids.
func rowsByVIP(s *nbServer) map[string]nbRow {
	s.t.Helper()
	out := s.nbctl("--format=csv", "--data=bare", "--no-headings", "--columns=_uuid,match,external_ids", "list", "Logical_Router_Policy")
	rows := map[string]nbRow{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.SplitN(l, ",", 3)
		if len(f) != 3 {
			continue
		}
		ext := map[string]string{}
		for _, kv := range strings.Fields(f[2]) {
			k, v, _ := strings.Cut(kv, "=")
			ext[k] = v
		}
		if vip := matchVIP(f[1]); vip != "" {
			rows[vip] = nbRow{uuid: f[0], ext: ext}
		}
	}
	return rows
}

type nbRow struct {
	uuid string
	ext  map[string]string
}

// waitFor polls cond every 5ms until it holds, and returns how long that took.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	return waitEvery(t, timeout, 5*time.Millisecond, what, cond)
}

func waitEvery(t *testing.T, timeout, every time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		ok, state := cond()
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("%s: not within %s (last: %s)", what, timeout, state)
		}
		time.Sleep(every)
	}
}

// TestMigrateOldRowsInPlace: rows written by an older vpcgw (the three V1 external_ids, no
// exemption) get vpc-egress-gateway=vpcgw:<gw> added on the same row; keys someone else added
// stay. A next-hop change afterwards is an update of the same rows too: another client of the NB
// sees no row deleted or added, so there is no moment without the route.
func TestMigrateOldRowsInPlace(t *testing.T) {
	s := startNB(t, nil)
	s.nbctl("lr-add", "vpc1")
	old := []string{"vendor=kube-ovn", "vpc-nat-gateway=gw1", "vipRoute=true"}
	addRawPolicy(s, "vpc1", 29210, "ip4.dst == 10.96.0.10", "10.0.1.5", append(old, "note=kept")...)
	addRawPolicy(s, "vpc1", 29210, "ip4.dst == 10.96.0.11", "10.0.1.5", old...)
	before := rowsByVIP(s)
	if len(before) != 2 || before["10.96.0.10"].ext["vpc-egress-gateway"] != "" {
		t.Fatalf("old-style rows: %+v", before)
	}
	rw := watchRows(t, s)

	w := newTestWriter(t, Config{Address: s.unixAddr()})
	want := VIPRoutes{Router: "vpc1", Gateway: "gw1", NextHops: []string{"10.0.1.5"}, VIPs: []string{"10.96.0.10", "10.96.0.11"}}
	mustSync(t, w, want)
	after := rowsByVIP(s)
	for vip, r := range after {
		if r.uuid != before[vip].uuid {
			t.Errorf("VIP %s: row %s replaced by %s, want it migrated in place", vip, before[vip].uuid, r.uuid)
		}
		if r.ext["vpc-egress-gateway"] != "vpcgw:gw1" || r.ext["vendor"] != "kube-ovn" || r.ext["vpc-nat-gateway"] != "gw1" || r.ext["vipRoute"] != "true" {
			t.Errorf("VIP %s: external_ids %v after migration", vip, r.ext)
		}
	}
	if !maps.Equal(after["10.96.0.10"].ext, map[string]string{"vendor": "kube-ovn", "vpc-nat-gateway": "gw1", "vipRoute": "true",
		"vpc-egress-gateway": "vpcgw:gw1", "note": "kept"}) {
		t.Errorf("a key someone else added was not kept: %v", after["10.96.0.10"].ext)
	}
	checkPolicyList(t, s, "vpc1",
		policyLine(29210, "ip4.dst == 10.96.0.10", "reroute", "10.0.1.5"),
		policyLine(29210, "ip4.dst == 10.96.0.11", "reroute", "10.0.1.5"))

	// Next hops change (an instance added, then the first one gone): same rows throughout.
	for _, nh := range [][]string{{"10.0.1.5", "10.0.1.6"}, {"10.0.1.6"}} {
		want.NextHops = nh
		mustSync(t, w, want)
		checkPolicyList(t, s, "vpc1",
			policyLine(29210, "ip4.dst == 10.96.0.10", "reroute", nh...),
			policyLine(29210, "ip4.dst == 10.96.0.11", "reroute", nh...))
		for vip, r := range rowsByVIP(s) {
			if r.uuid != before[vip].uuid {
				t.Fatalf("next hops %v: VIP %s row %s replaced by %s", nh, vip, before[vip].uuid, r.uuid)
			}
		}
	}
	// The observer caught up with the writer's last commit (it sees the same next hops) and
	// never saw a row go or come.
	waitFor(t, 5*time.Second, "observer sees the last next hops", func() (bool, string) {
		var pols []nbdb.LogicalRouterPolicy
		_ = rw.obs.c.List(ctxT(t), &pols)
		return len(pols) == 2 && slices.Equal(pols[0].Nexthops, []string{"10.0.1.6"}) && slices.Equal(pols[1].Nexthops, []string{"10.0.1.6"}),
			fmt.Sprint(pols)
	})
	// 3 commits (migration, two next-hop changes) of 2 rows: the observer saw them as updates,
	// and no row but the two first ones (whose add may come through as the observer connects).
	rw.mu.Lock()
	for _, u := range rw.added {
		if u != before["10.96.0.10"].uuid && u != before["10.96.0.11"].uuid {
			t.Errorf("another NB client saw row %s added", u)
		}
	}
	if len(rw.deleted) != 0 || rw.updated != 6 {
		t.Errorf("another NB client saw rows %v deleted and %d updates; want none and 6", rw.deleted, rw.updated)
	}
	rw.mu.Unlock()
	if n := w.rep.count.Load(); n != 0 {
		t.Errorf("the writer's own changes counted as %d repairs", n)
	}
}

// TestRepairAfterOutsideChange: a VIP policy deleted or changed by someone else is back within
// milliseconds (logged, counted), without a Sync; changes to other rows and the writer's own
// changes trigger nothing.
func TestRepairAfterOutsideChange(t *testing.T) {
	s := startNB(t, nil)
	s.nbctl("lr-add", "vpc1")
	w := newTestWriter(t, Config{Address: s.tcpAddr()})
	want := VIPRoutes{Router: "vpc1", Gateway: "gw1", NextHops: []string{"10.0.1.5"}, VIPs: []string{"10.96.0.10", "10.96.0.11"}}
	mustSync(t, w, want)
	first := rowsByVIP(s)

	// Deleted (as kube-ovn's VPC reconcile does: lr-policy-del by UUID).
	s.nbctl("lr-policy-del", "vpc1", first["10.96.0.10"].uuid)
	took := waitFor(t, 3*time.Second, "deleted policy re-added", func() (bool, string) {
		r, ok := rowsByVIP(s)["10.96.0.10"]
		return ok && r.uuid != first["10.96.0.10"].uuid, ""
	})
	t.Logf("deleted policy back after %s (as seen by polling ovn-nbctl)", took)
	checkPolicyList(t, s, "vpc1",
		policyLine(29210, "ip4.dst == 10.96.0.10", "reroute", "10.0.1.5"),
		policyLine(29210, "ip4.dst == 10.96.0.11", "reroute", "10.0.1.5"))
	waitFor(t, time.Second, "repair counted", func() (bool, string) { return w.rep.count.Load() == 1, "" })

	// Changed next hops and a lost exemption: rewritten in place, after the repair backoff.
	u := first["10.96.0.11"].uuid
	s.nbctl("set", "Logical_Router_Policy", u, `nexthops="10.0.9.9"`)
	s.nbctl("remove", "Logical_Router_Policy", u, "external_ids", "vpc-egress-gateway")
	waitFor(t, 3*time.Second, "changed policy rewritten", func() (bool, string) {
		r := rowsByVIP(s)["10.96.0.11"]
		line := lrPolicyList(s, "vpc1")
		return r.uuid == u && r.ext["vpc-egress-gateway"] == "vpcgw:gw1" &&
			slices.Contains(line, policyLine(29210, "ip4.dst == 10.96.0.11", "reroute", "10.0.1.5")), strings.Join(line, "; ")
	})
	waitFor(t, time.Second, "repairs counted", func() (bool, string) {
		n := w.rep.count.Load()
		return n >= 2 && n <= 3, "" // the two edits may land in one repair or two
	})
	repairs := w.rep.count.Load()

	// Outside changes to rows that are not the writer's, and the writer's own Syncs (a VIP
	// removed, next hops changed, everything removed) cause no repair.
	mustSync(t, w, VIPRoutes{Router: "vpc1", Gateway: "gw2", NextHops: []string{"10.0.2.5"}, VIPs: []string{"10.96.0.20"}})
	s.nbctl("lr-policy-add", "vpc1", "100", "ip4.src == 10.0.0.5", "allow")
	s.nbctl("lr-policy-del", "vpc1", "100", "ip4.src == 10.0.0.5")
	want.VIPs = []string{"10.96.0.11"}
	mustSync(t, w, want)
	want.NextHops = []string{"10.0.1.6"}
	mustSync(t, w, want)
	mustSync(t, w, VIPRoutes{Router: "vpc1", Gateway: "gw1"})
	gw2 := policyLine(29210, "ip4.dst == 10.96.0.20", "reroute", "10.0.2.5")
	checkPolicyList(t, s, "vpc1", gw2)
	// A last outside delete, of gw2's policy, marks the end: the writer handles cache events in
	// order, so once gw2 is repaired, any (wrong) reaction to the events before it has been
	// noted too, as a pending or finished repair of gw1.
	u2 := rowsByVIP(s)["10.96.0.20"].uuid
	s.nbctl("lr-policy-del", "vpc1", u2)
	waitFor(t, 3*time.Second, "gw2's policy re-added", func() (bool, string) {
		r, ok := rowsByVIP(s)["10.96.0.20"]
		return ok && r.uuid != u2 && w.rep.count.Load() > repairs, ""
	})
	checkPolicyList(t, s, "vpc1", gw2)
	w.rep.mu.Lock()
	_, pending := w.rep.pending["gw1"]
	w.rep.mu.Unlock()
	if n := w.rep.count.Load(); n != repairs+1 || pending {
		t.Errorf("repairs %d -> %d (gw1 repair pending: %v), want only gw2's", repairs, n, pending)
	}
}

// TestRepairBacksOff: something that deletes a policy again as soon as it is back does not make
// the writer spin: every repair within repairQuiet of the previous one waits twice as long.
func TestRepairBacksOff(t *testing.T) {
	s := startNB(t, nil)
	s.nbctl("lr-add", "vpc1")
	w := newTestWriter(t, Config{Address: s.unixAddr()})
	mustSync(t, w, VIPRoutes{Router: "vpc1", Gateway: "gw1", NextHops: []string{"10.0.1.5"}, VIPs: []string{"10.96.0.10"}})
	var restored []time.Time
	for round := range 5 {
		u := rowsByVIP(s)["10.96.0.10"].uuid
		s.nbctl("lr-policy-del", "vpc1", u)
		// The writer counts a repair once its transaction returns, which may be after the NB
		// server shows the row: wait for both.
		waitFor(t, 5*time.Second, "policy back", func() (bool, string) {
			r, ok := rowsByVIP(s)["10.96.0.10"]
			return ok && r.uuid != u && w.rep.count.Load() > uint64(round), ""
		})
		restored = append(restored, time.Now())
		if round > 0 {
			gap := restored[round].Sub(restored[round-1])
			// Repairs 1 and 2 run at once (nothing repaired within repairQuiet before 1); from
			// then on, repair k waits repairMinBackoff*2^(k-3) after repair k-1. Polling adds
			// some milliseconds of slack either way.
			if round >= 2 {
				if least := repairMinBackoff<<(round-2) - 60*time.Millisecond; gap < least {
					t.Errorf("repair %d came %s after the previous one, want at least %s", round+1, gap, least)
				}
			}
			t.Logf("repair %d: %s after the previous one", round+1, gap.Round(time.Millisecond))
		}
	}
	if n := w.rep.count.Load(); n != 5 {
		t.Errorf("repairs = %d, want 5", n)
	}
}

// TestRepairAfterReconnect: a policy deleted while the writer was disconnected (the NB server
// down, the database edited meanwhile) is back soon after the writer reconnects, without a Sync:
// the reloaded cache brings no delete event, so the writer checks every gateway after a
// reconnect.
func TestRepairAfterReconnect(t *testing.T) {
	s := startNB(t, nil)
	s.nbctl("lr-add", "vpc1")
	w := newTestWriter(t, Config{Address: s.unixAddr()})
	mustSync(t, w, VIPRoutes{Router: "vpc1", Gateway: "gw1", NextHops: []string{"10.0.1.5"}, VIPs: []string{"10.96.0.10"}})
	u := rowsByVIP(s)["10.96.0.10"].uuid
	s.stop()
	waitFor(t, 5*time.Second, "writer sees the NB down", func() (bool, string) { return w.c.CurrentEndpoint() == "", "" })
	txn := `["OVN_Northbound",{"op":"mutate","table":"Logical_Router","where":[["name","==","vpc1"]],` +
		`"mutations":[["policies","delete",["uuid","` + u + `"]]]}]`
	if out, err := exec.Command("ovsdb-tool", "transact", s.db, txn).CombinedOutput(); err != nil {
		t.Fatalf("ovsdb-tool transact: %v: %s", err, out)
	}
	q := `["OVN_Northbound",{"op":"select","table":"Logical_Router_Policy","where":[],"columns":["_uuid"]}]`
	if out, err := exec.Command("ovsdb-tool", "query", s.db, q).CombinedOutput(); err != nil || !strings.Contains(string(out), `"rows":[]`) {
		t.Fatalf("policy row still in the database file: %v: %s", err, out)
	}
	s.start()
	took := waitFor(t, 10*time.Second, "policy back after the reconnect", func() (bool, string) {
		r, ok := rowsByVIP(s)["10.96.0.10"]
		return ok && r.uuid != u, ""
	})
	t.Logf("policy back %s after the NB server restarted", took)
	checkPolicyList(t, s, "vpc1", policyLine(29210, "ip4.dst == 10.96.0.10", "reroute", "10.0.1.5"))
	if n := w.rep.count.Load(); n != 1 {
		t.Errorf("repairs = %d, want 1", n)
	}
}
