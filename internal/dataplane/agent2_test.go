// covers: D4, D5, D6, D8, L6, K8
package dataplane

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"sigs.k8s.io/knftables"

	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

func TestGoldenHairpinInterface(t *testing.T) {
	f := newFake()
	a := newAgent(&knftBackend{nft: f}, logr.Discard(), "vpc0", nil, nil)
	mustApply(t, a, state(1))
	want := strings.ReplaceAll(baseDump, `"eth0"`, `"vpc0"`)
	if got := f.Dump(); got != want {
		t.Errorf("dump:\n%s\nwant:\n%s", got, want)
	}
}

// fakeCT records what the agent asks conntrack to delete.
type fakeCT struct{ calls [][]cleanTarget }

func (f *fakeCT) clean(ts []cleanTarget) (int, error) {
	f.calls = append(f.calls, ts)
	return 0, nil
}

func describe(ts []cleanTarget) []string {
	var out []string
	for _, t := range ts {
		var keep []string
		for ap := range t.keep {
			keep = append(keep, ap.String())
		}
		slices.Sort(keep)
		d := t.vip.String() + ":" + protoName(t.proto) + ":" + strings.Join(keep, ",")
		if !t.byReply {
			d = t.vip.String() + ":" + protoName(t.proto)
		}
		if len(t.allow) > 0 {
			d += " from outside " + fmt.Sprint(t.allow)
		}
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

func TestConntrackTargets(t *testing.T) {
	ct := &fakeCT{}
	a := newAgent(&knftBackend{nft: newFake()}, logr.Discard(), "", nil, ct)
	udp := ident("10.0.0.1", 53, gwstate.UDP, be("10.0.1.1", 53), be("10.0.1.2", 53))
	tcp := ident("10.0.0.1", 80, gwstate.TCP, be("10.0.1.1", 80), be("10.0.1.2", 80))
	mustApply(t, a, state(1, udp, tcp))
	// The first (full) sync reconciles every UDP identity, never TCP.
	if got := describe(ct.calls[len(ct.calls)-1]); !slices.Equal(got, []string{"10.0.0.1:udp:10.0.1.1:53,10.0.1.2:53"}) {
		t.Errorf("full sync targets %v", got)
	}
	n := len(ct.calls)
	// A TCP backend leaves: nothing to clean.
	tcp.Backends = tcp.Backends[:1]
	mustApply(t, a, state(2, udp, tcp))
	if len(ct.calls) != n {
		t.Errorf("TCP backend change cleaned conntrack: %v", describe(ct.calls[len(ct.calls)-1]))
	}
	// A UDP backend leaves: flows not from the remaining backend go.
	udp.Backends = udp.Backends[1:]
	mustApply(t, a, state(3, udp, tcp))
	if got := describe(ct.calls[len(ct.calls)-1]); !slices.Equal(got, []string{"10.0.0.1:udp:10.0.1.2:53"}) {
		t.Errorf("UDP removal targets %v", got)
	}
	// Zero UDP backends: every flow of the identity goes.
	udp.Backends = nil
	mustApply(t, a, state(4, udp, tcp))
	if got := describe(ct.calls[len(ct.calls)-1]); !slices.Equal(got, []string{"10.0.0.1:udp:"}) {
		t.Errorf("zero backends targets %v", got)
	}
	// The TCP identity leaves the state: all its flows go.
	mustApply(t, a, state(5, udp))
	if got := describe(ct.calls[len(ct.calls)-1]); !slices.Equal(got, []string{"10.0.0.1:tcp:"}) {
		t.Errorf("identity removal targets %v", got)
	}
}

// fakeVIPs is lo in memory: labelled addresses only.
type fakeVIPs struct{ have []netip.Addr }

func (f *fakeVIPs) list() ([]netip.Addr, error) { return slices.Clone(f.have), nil }
func (f *fakeVIPs) converge(want []netip.Addr) (added, deleted []netip.Addr, err error) {
	f.have = slices.Clone(want)
	return nil, nil, nil
}

func TestVerifyFindsAndRepairsDrift(t *testing.T) {
	f := newFake()
	vips := &fakeVIPs{}
	a := newAgent(&knftBackend{nft: f}, logr.Discard(), "", vips, nil)
	ctx := context.Background()
	aff := gwstate.Identity{VIP: netip.MustParseAddr("10.0.0.9"), Port: 443, Protocol: gwstate.TCP, AffinityTimeoutSeconds: 60,
		Backends: []gwstate.Backend{be("10.0.1.1", 443), be("10.0.1.2", 443)}}
	st := withClusterIPs(state(1, ident("10.0.0.1", 80, gwstate.TCP, be("10.0.1.1", 8080)), aff), "10.96.0.10")
	mustApply(t, a, st)
	want := f.Dump()
	if drift, err := a.Verify(ctx); drift != "" || err != nil {
		t.Fatalf("verify on a clean table: %q, %v", drift, err)
	}
	for name, breakIt := range map[string]func(tx *knftables.Transaction){
		"table deleted":      func(tx *knftables.Transaction) { tx.Delete(&knftables.Table{}) },
		"base chain flushed": func(tx *knftables.Transaction) { tx.Flush(&knftables.Chain{Name: BaseChain}) },
		"hairpin flushed":    func(tx *knftables.Transaction) { tx.Flush(&knftables.Chain{Name: HairpinChain}) },
		// kube-ovn master's nft-dnat-map-add for a key the agent serves (C5): same names,
		// same counts, other rules.
		"identity chain rewritten by kube-ovn": func(tx *knftables.Transaction) {
			c := IdentityChain(key("10.0.0.1", 80, gwstate.TCP))
			tx.Flush(&knftables.Chain{Name: c})
			tx.Add(&knftables.Rule{Chain: c, Rule: "meta l4proto tcp dnat ip addr . port to numgen random mod 1 map { 0 : 10.0.1.9 . 8080 }"})
		},
		"affinity identity rewritten by kube-ovn": func(tx *knftables.Transaction) {
			c := IdentityChain(aff.Key())
			tx.Flush(&knftables.Chain{Name: c})
			tx.Add(&knftables.Rule{Chain: c, Rule: "meta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : 10.0.1.1 . 443, 1 : 10.0.1.2 . 443 }"})
		},
		"ownership key deleted": func(tx *knftables.Transaction) {
			tx.Delete(&knftables.Element{Set: OwnedSet, Key: []string{"10.0.0.1", "tcp", "80"}})
		},
		"hairpin VIP deleted": func(tx *knftables.Transaction) {
			tx.Delete(&knftables.Element{Set: VIPSet, Key: []string{aff.VIP.String()}})
		},
		"element deleted": func(tx *knftables.Transaction) {
			tx.Delete(&knftables.Element{Map: ServiceMap, Key: []string{"10.0.0.1", "tcp", "80"}})
		},
		"affinity set deleted": func(tx *knftables.Transaction) {
			tx.Flush(&knftables.Chain{Name: EndpointChain(aff, aff.Backends[0])})
			tx.Delete(&knftables.Set{Name: AffinitySet(aff, aff.Backends[0])})
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
	vips.have = nil
	if drift, err := a.Verify(ctx); !strings.Contains(drift, "lo holds") || err != nil {
		t.Errorf("VIP removed: drift %q, err %v", drift, err)
	}
	if len(vips.have) != 1 || vips.have[0].String() != "10.96.0.10" {
		t.Errorf("VIPs not repaired: %v", vips.have)
	}
}

func TestRetryAfterRejectedTransaction(t *testing.T) {
	f := &failingNFT{Fake: newFake()}
	a := NewAgent(f, logr.Discard())
	ctx := context.Background()
	if did, err := a.Retry(ctx); did || err != nil {
		t.Errorf("retry with nothing to do: %v %v", did, err)
	}
	f.fail = errInjected
	s1 := state(1, ident("10.0.0.1", 80, gwstate.TCP, be("10.0.1.1", 8080)))
	if err := a.Apply(ctx, s1); err == nil {
		t.Fatal("apply succeeded against a failing kernel")
	}
	if did, err := a.Retry(ctx); !did || err == nil {
		t.Errorf("retry while still failing: %v %v", did, err)
	}
	f.fail = nil
	if did, err := a.Retry(ctx); !did || err != nil {
		t.Errorf("retry after recovery: %v %v", did, err)
	}
	if got, want := testutil.SortElements(f.Dump()), testutil.SortElements(freshDump(t, s1)); got != want {
		t.Errorf("after retry:\n%s\nwant:\n%s", got, want)
	}
	if did, _ := a.Retry(ctx); did {
		t.Errorf("retry after success did something")
	}
}

func TestValidateOnlyChangedButAlwaysDuplicates(t *testing.T) {
	a := NewAgent(newFake(), logr.Discard())
	ok := ident("10.0.0.1", 80, gwstate.TCP, be("10.0.1.1", 8080))
	mustApply(t, a, state(1, ok))
	bad := ident("10.0.0.2", 80, gwstate.TCP, be("10.0.1.1", 0))
	if err := a.Apply(context.Background(), state(2, ok, bad)); err != nil {
		t.Errorf("a state with one invalid identity: %v, want it refused alone", err)
	}
	if r := a.Refusals(); len(r) != 1 || r[0].IdentityKey != bad.Key() || !strings.Contains(r[0].Reason, "port 0") {
		t.Errorf("refusals %+v, want %s refused for its port 0", r, bad.Key())
	}
	if got := a.Applied(); len(got) != 1 || !got[0].Equal(ok) {
		t.Errorf("applied %+v, want the valid identity only", got)
	}
	dup := gwstate.State{Generation: 3, Identities: []gwstate.Identity{ok, ok}}
	if err := a.Apply(context.Background(), dup); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("duplicate identity: %v", err)
	}
}

var errInjected = errorString("Error: Could not process rule: Operation not supported")

type errorString string

func (e errorString) Error() string { return string(e) }

// countingCT reports n deleted entries per cleaning.
type countingCT struct{ n int }

func (c countingCT) clean([]cleanTarget) (int, error) { return c.n, nil }

// The acknowledgement carries the conntrack entries deleted while applying that state, for the
// controller's vpcgw_conntrack_entries_deleted_total.
func TestAckCountsConntrackDeletions(t *testing.T) {
	a := newAgent(&knftBackend{nft: newFake()}, logr.Discard(), "", nil, countingCT{n: 3})
	udp := ident("10.0.0.1", 53, gwstate.UDP, be("10.0.1.1", 53), be("10.0.1.2", 53))
	line, _ := json.Marshal(state(1, udp))
	if ack := handleLine(context.Background(), a, line, logr.Discard()); ack.Error != "" || ack.ConntrackDeleted != 3 {
		t.Fatalf("first ack = %+v, want 3 deletions (full sync reconciles UDP)", ack)
	}
	udp.Backends = udp.Backends[:1]
	line, _ = json.Marshal(state(2, udp))
	if ack := handleLine(context.Background(), a, line, logr.Discard()); ack.ConntrackDeleted != 3 {
		t.Fatalf("ack after a UDP backend left = %+v, want 3 deletions", ack)
	}
	tcp := ident("10.0.0.1", 80, gwstate.TCP, be("10.0.1.1", 80))
	line, _ = json.Marshal(state(3, udp, tcp))
	if ack := handleLine(context.Background(), a, line, logr.Discard()); ack.ConntrackDeleted != 0 {
		t.Fatalf("ack of a TCP addition = %+v, want no deletion", ack)
	}
}

// covers: P3, O3
// The acknowledgement of a state tells the agent's own time and its kernel transactions' (the
// controller's vpcgw_agent_apply_duration_seconds): a change costs kernel time, a state that
// changes nothing costs none, and a keepalive tells nothing.
func TestAckTellsTheAgentsTime(t *testing.T) {
	a := newAgent(&knftBackend{nft: newFake()}, logr.Discard(), "", nil, nil)
	id := ident("10.0.0.1", 80, gwstate.TCP, be("10.0.1.1", 80))
	line, _ := json.Marshal(state(1, id))
	ack := handleLine(context.Background(), a, line, logr.Discard())
	if ack.Error != "" || ack.ApplyMicros <= 0 || ack.KernelMicros <= 0 || ack.KernelMicros > ack.ApplyMicros {
		t.Fatalf("first ack = %+v: want the agent's time, with a kernel part within it", ack)
	}
	line, _ = json.Marshal(state(2, id))
	if ack := handleLine(context.Background(), a, line, logr.Discard()); ack.Error != "" || ack.ApplyMicros <= 0 || ack.KernelMicros != 0 {
		t.Fatalf("ack of an unchanged state = %+v: want time, no kernel time", ack)
	}
	if ack := handleLine(context.Background(), a, []byte(`{"ping":7}`), logr.Discard()); ack.Pong != 7 || ack.ApplyMicros != 0 {
		t.Fatalf("keepalive ack = %+v", ack)
	}
}

// A table written by an agent from before the ownership set (hairpin chain "postrouting", no
// vpcgw-identities) is adopted by object names, as that agent did: its stale identity goes, the
// old unscoped hairpin chain goes, and the table ends as a fresh agent writes it.
// covers: D4, D8, K8
func TestAdoptsTableOfOlderAgent(t *testing.T) {
	f := newFake()
	keep := ident("10.0.0.1", 80, gwstate.TCP, be("10.0.1.1", 8080))
	stale := ident("10.0.0.2", 80, gwstate.TCP, be("10.0.1.1", 8080))
	tx := f.NewTransaction()
	tx.Add(&knftables.Table{})
	tx.Add(&knftables.Map{Name: ServiceMap, Type: ServiceMapType})
	tx.Add(&knftables.Chain{Name: BaseChain, Type: knftables.PtrTo(knftables.NATType), Hook: knftables.PtrTo(knftables.PreroutingHook), Priority: knftables.PtrTo(knftables.BaseChainPriority("-150")), Policy: knftables.PtrTo(knftables.AcceptPolicy)})
	tx.Add(&knftables.Rule{Chain: BaseChain, Rule: DispatchRule})
	tx.Add(&knftables.Chain{Name: legacyHairpinChain, Type: knftables.PtrTo(knftables.NATType), Hook: knftables.PtrTo(knftables.PostroutingHook), Priority: knftables.PtrTo(knftables.BaseChainPriority("100")), Policy: knftables.PtrTo(knftables.AcceptPolicy)})
	tx.Add(&knftables.Rule{Chain: legacyHairpinChain, Rule: `iifname "eth0" oifname "eth0" ct status dnat masquerade fully-random`})
	for _, id := range []gwstate.Identity{keep, stale} {
		c := IdentityChain(id.Key())
		tx.Add(&knftables.Chain{Name: c})
		tx.Add(&knftables.Rule{Chain: c, Rule: dnatRule(id.Protocol, id.Backends).text()})
		tx.Add(&knftables.Element{Map: ServiceMap, Key: elementKey(id), Value: elementValue(id)})
	}
	if err := f.Run(context.Background(), tx); err != nil {
		t.Fatal(err)
	}
	a := NewAgent(f, logr.Discard())
	mustApply(t, a, state(1, keep))
	if got, want := testutil.SortElements(f.Dump()), testutil.SortElements(freshDump(t, state(1, keep))); got != want {
		t.Errorf("adopted table of an older agent:\n%s\nwant (fresh agent):\n%s", got, want)
	}
	if drift, err := a.Verify(context.Background()); drift != "" || err != nil {
		t.Errorf("verify after adoption: drift %q, err %v", drift, err)
	}
}

// An identity refused holds back the other changed identities of its group (one Service's EIP
// and ClusterIP identities): the gateway keeps serving the group's previous version, all of it,
// and programs the identities of other groups (SPEC D8, N4).
// covers: D8, N4
func TestRefusalHoldsItsGroup(t *testing.T) {
	a := NewAgent(newFake(), logr.Discard())
	grouped := func(id gwstate.Identity, g string) gwstate.Identity { id.Group = g; return id }
	eip := grouped(ident("172.18.0.10", 80, gwstate.TCP, be("10.0.1.1", 8080)), "svc-a")
	cip := grouped(ident("10.96.0.10", 80, gwstate.TCP, be("10.0.1.1", 8080)), "svc-a")
	other := grouped(ident("10.96.0.20", 80, gwstate.TCP, be("10.0.1.5", 8080)), "svc-b")
	mustApply(t, a, state(1, eip, cip, other))

	eip2 := grouped(ident("172.18.0.10", 80, gwstate.TCP, be("10.0.1.1", 8080), be("10.0.1.2", 0)), "svc-a") // port 0: invalid
	cip2 := grouped(ident("10.96.0.10", 80, gwstate.TCP, be("10.0.1.1", 8080), be("10.0.1.3", 8080)), "svc-a")
	other2 := grouped(ident("10.96.0.20", 80, gwstate.TCP, be("10.0.1.6", 8080)), "svc-b")
	for _, msg := range []gwstate.State{state(2, eip2, cip2, other2), {Generation: 3, Base: 2, Identities: []gwstate.Identity{eip2, cip2}}} {
		if err := a.ApplyMessage(context.Background(), msg); err != nil {
			t.Fatalf("generation %d: %v", msg.Generation, err)
		}
		r := a.Refusals()
		if len(r) != 2 || r[0].IdentityKey != cip.Key() || r[1].IdentityKey != eip.Key() ||
			!strings.Contains(r[0].Reason, "held back with identity 172.18.0.10:80:tcp") || !strings.Contains(r[1].Reason, "port 0") {
			t.Fatalf("generation %d: refusals %+v, want the invalid EIP identity and its group's ClusterIP identity", msg.Generation, r)
		}
		got := a.Applied()
		want := []gwstate.Identity{cip, other2, eip} // sorted by key
		if len(got) != 3 || !identityEqual(got[0], want[0]) || !identityEqual(got[1], want[1]) || !identityEqual(got[2], want[2]) {
			t.Fatalf("generation %d: applied %+v, want svc-a as before and svc-b's change", msg.Generation, got)
		}
	}
}
