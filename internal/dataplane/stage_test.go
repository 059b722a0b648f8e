// covers: D2, D8, P2, N7 (staged cold sync: objects written ahead, one visible transaction)
package dataplane

import (
	"context"
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

// scriptedNFT is a Fake that counts transactions and rejects those failIf names, as the kernel
// would reject a transaction: nothing of it is applied.
type scriptedNFT struct {
	*knftables.Fake
	runs   []string // every transaction attempted, in order
	failIf func(n int, tx string) bool
}

func (f *scriptedNFT) Run(ctx context.Context, tx *knftables.Transaction) error {
	s := tx.String()
	f.runs = append(f.runs, s)
	if f.failIf != nil && f.failIf(len(f.runs), s) {
		return errInjected
	}
	return f.Fake.Run(ctx, tx)
}

// isFinal reports whether a transaction is a final one: only final transactions add service-ips
// elements (staging transactions write unreferenced objects only).
func isFinal(tx string) bool { return strings.Contains(tx, "add element ip kube-ovn "+ServiceMap) }

// mixedIdentities returns n identities of every shape: one backend (plain dnat), several
// (numgen map), ClientIP affinity, TCP and UDP. seed varies the backends.
func mixedIdentities(n, seed int) []gwstate.Identity {
	ids := make([]gwstate.Identity, 0, n)
	for i := range n {
		proto := gwstate.TCP
		if i%7 == 3 {
			proto = gwstate.UDP
		}
		id := gwstate.Identity{VIP: netip.MustParseAddr(fmt.Sprintf("10.210.%d.%d", i/200, i%200+1)), Port: int32(80 + i%3), Protocol: proto}
		nb := 1 + (i+seed)%5
		for j := range nb {
			id.Backends = append(id.Backends, be(fmt.Sprintf("10.1.%d.%d", j+seed%3, i%250+1), 8080))
		}
		if i%10 == 4 {
			id.AffinityTimeoutSeconds = int32(60 + seed)
		}
		if i%6 == 2 {
			id.SourceRanges = sourceRangeVariants[(i/6+seed)%len(sourceRangeVariants)]
		}
		ids = append(ids, id)
	}
	return ids
}

func stagedAgent(nft knftables.Interface, chunk int) *Agent {
	a := NewAgent(nft, logr.Discard())
	a.stageChunk = chunk
	return a
}

// elementLines are the service-ips element lines of a dump, sorted: what dispatch sees.
func elementLines(dump string) []string {
	var out []string
	for _, l := range strings.Split(dump, "\n") {
		if strings.HasPrefix(l, "add element ip kube-ovn "+ServiceMap) {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return out
}

// A cold sync of more new identities than one chunk is staged: ceil(n/K) transactions of
// unreferenced objects, then one final transaction with every element. The result is exactly
// the one-transaction ruleset; an added batch of new identities is staged the same way, and a
// small change is one transaction (SPEC P1).
// covers: D2, D8, P2
func TestStagedColdSyncMatchesOneTransaction(t *testing.T) {
	ids := mixedIdentities(23, 0)
	st := state(1, ids...)
	f := &scriptedNFT{Fake: newFake()}
	a := stagedAgent(f, 5)
	mustApply(t, a, st)
	if len(f.runs) != 6 {
		t.Fatalf("%d transactions, want 5 staging + 1 final", len(f.runs))
	}
	for i, tx := range f.runs[:5] {
		if isFinal(tx) || strings.Contains(tx, "add rule ip kube-ovn "+BaseChain) {
			t.Errorf("staging transaction %d makes something reachable:\n%s", i+1, tx)
		}
	}
	if want := freshDump(t, st); testutil.SortElements(f.Dump()) != testutil.SortElements(want) {
		t.Fatalf("staged cold sync:\n%s\none transaction:\n%s", f.Dump(), want)
	}
	if len(a.staged) != 0 {
		t.Errorf("staged bookkeeping not cleared: %d", len(a.staged))
	}

	// An incremental Apply that adds more than a chunk of new identities stages them too.
	more := state(2, append(slices.Clone(ids), mixedIdentities(40, 1)[23:]...)...)
	f.runs = nil
	mustApply(t, a, more)
	if len(f.runs) != 5 {
		t.Errorf("adding 17 identities: %d transactions, want 4 staging + 1 final", len(f.runs))
	}
	if want := freshDump(t, more); testutil.SortElements(f.Dump()) != testutil.SortElements(want) {
		t.Fatalf("staged incremental:\n%s\nwant:\n%s", f.Dump(), want)
	}

	// One identity changes and one is added: one transaction.
	small := slices.Clone(more.Identities)
	small[3].Backends = small[3].Backends[:1]
	small = append(small, ident("10.99.0.1", 80, gwstate.TCP, be("10.1.0.1", 80), be("10.1.0.2", 80)))
	f.runs = nil
	mustApply(t, a, state(3, small...))
	if len(f.runs) != 1 {
		t.Errorf("small change: %d transactions, want 1", len(f.runs))
	}
	if want := freshDump(t, state(3, small...)); testutil.SortElements(f.Dump()) != testutil.SortElements(want) {
		t.Fatalf("after a small change:\n%s\nwant:\n%s", f.Dump(), want)
	}
}

// When the final transaction fails, what traffic sees is the previous state (every element and
// every previous object unchanged); the staged objects stay unreferenced. The next sync reuses
// them (only their elements are added, no object is written again) and converges to exactly the
// desired ruleset; Verify finds no drift.
// covers: D2, D8, P2
func TestStagedFinalFailureKeepsPreviousAndConverges(t *testing.T) {
	old := mixedIdentities(4, 0)
	s1 := state(1, old...)
	f := &scriptedNFT{Fake: newFake()}
	a := stagedAgent(f, 5)
	mustApply(t, a, s1)
	before := f.Dump()

	s2 := state(2, mixedIdentities(24, 0)...) // the first 4 are s1's
	f.failIf = func(_ int, tx string) bool { return isFinal(tx) }
	f.runs = nil
	err := a.Apply(context.Background(), s2)
	if err == nil || !strings.Contains(err.Error(), "Operation not supported") || !strings.Contains(err.Error(), "after 4 staging transactions") {
		t.Fatalf("apply with a failing final transaction: %v", err)
	}
	after := f.Dump()
	if got, want := elementLines(after), elementLines(before); !slices.Equal(got, want) {
		t.Errorf("elements changed by a failed apply:\n%s\nwant:\n%s", got, want)
	}
	for _, l := range strings.Split(before, "\n") {
		if !strings.Contains(after, l) {
			t.Errorf("line of the previous state lost: %q", l)
		}
	}
	if got := a.Applied(); len(got) != 4 {
		t.Errorf("agent memory changed by a failed apply: %d identities", len(got))
	}
	if len(a.staged) != 20 {
		t.Errorf("staged bookkeeping holds %d identities, want 20", len(a.staged))
	}

	// The kernel accepts again: one full-sync transaction that only adds the staged elements.
	f.failIf = nil
	f.runs = nil
	mustApply(t, a, s2)
	if len(f.runs) != 1 {
		t.Fatalf("recovery ran %d transactions, want 1 (staged objects reused)", len(f.runs))
	}
	for _, id := range s2.Identities[4:] {
		if c := IdentityChain(id.Key()); strings.Contains(f.runs[0], "add chain ip kube-ovn "+c) {
			t.Errorf("staged chain %s written again instead of reused", c)
		}
	}
	if want := freshDump(t, s2); testutil.SortElements(f.Dump()) != testutil.SortElements(want) {
		t.Fatalf("after recovery:\n%s\nwant:\n%s", f.Dump(), want)
	}
	if len(a.staged) != 0 {
		t.Errorf("staged bookkeeping not cleared: %d", len(a.staged))
	}
	if drift, err := a.Verify(context.Background()); drift != "" || err != nil {
		t.Errorf("verify after recovery: %q, %v", drift, err)
	}
}

// Leftovers of a failed staged sync that the next state does not want as they are: dropped
// identities' objects are deleted, changed ones are rewritten, the rest reused; nothing leaks.
// A failing staging transaction (not the final one) is handled the same way.
// covers: D2, D8, P2
func TestStagedLeftoversFollowTheNextState(t *testing.T) {
	s1 := state(1, mixedIdentities(3, 0)...)
	f := &scriptedNFT{Fake: newFake()}
	a := stagedAgent(f, 4)
	mustApply(t, a, s1)
	before := f.Dump()

	all := mixedIdentities(30, 0)
	// The third staging transaction fails: two chunks (8 identities) stay staged.
	f.runs = nil
	f.failIf = func(n int, _ string) bool { return n == 3 }
	if err := a.Apply(context.Background(), state(2, all...)); err == nil || !strings.Contains(err.Error(), "staging transaction 3 of 7") {
		t.Fatalf("apply with a failing staging transaction: %v", err)
	}
	if got, want := elementLines(f.Dump()), elementLines(before); !slices.Equal(got, want) {
		t.Errorf("elements changed by a failed apply:\n%s\nwant:\n%s", got, want)
	}
	if len(a.staged) != 8 {
		t.Fatalf("staged bookkeeping holds %d identities, want 8", len(a.staged))
	}
	// Then the final transaction of the next attempt fails too.
	f.failIf = func(_ int, tx string) bool { return isFinal(tx) }
	if err := a.Apply(context.Background(), state(3, all...)); err == nil {
		t.Fatal("apply with a failing final transaction succeeded")
	}
	if len(a.staged) != 27 {
		t.Fatalf("staged bookkeeping holds %d identities, want 27", len(a.staged))
	}

	// The next state drops some staged identities, changes others (backends, affinity timeout,
	// affinity on and off) and keeps the rest.
	next := slices.Clone(all[:20])
	next[5].Backends = next[5].Backends[:1]
	next[14].AffinityTimeoutSeconds = 600 // affinity identity (i%10 == 4) with another timeout
	next[7].AffinityTimeoutSeconds = 30   // affinity switched on
	next[4].AffinityTimeoutSeconds = 0    // and off
	next = append(next, ident("10.99.0.1", 80, gwstate.TCP, be("10.1.0.1", 80)))
	s4 := state(4, next...)
	f.failIf = nil
	mustApply(t, a, s4)
	if want := freshDump(t, s4); testutil.SortElements(f.Dump()) != testutil.SortElements(want) {
		t.Fatalf("after the leftovers were reconciled:\n%s\nwant:\n%s", f.Dump(), want)
	}
	if len(a.staged) != 0 {
		t.Errorf("staged bookkeeping not cleared: %d", len(a.staged))
	}
	if drift, err := a.Verify(context.Background()); drift != "" || err != nil {
		t.Errorf("verify: %q, %v", drift, err)
	}
}

// The anonymous map names of the netlink path: short, varying first, never a name the agent or
// nft gives a named set, and read back to number past a previous agent's maps.
// covers: D2, P2
func TestAnonymousMapNames(t *testing.T) {
	seen := map[string]bool{}
	for n := range uint64(50000) {
		name := anonName(n)
		if seen[name] {
			t.Fatalf("name %q repeats", name)
		}
		seen[name] = true
		if back, ok := anonNumber(name); !ok || back != n {
			t.Fatalf("anonNumber(%q) = %d, %v, want %d", name, back, ok, n)
		}
		if owned(name) || name == ServiceMap || strings.HasPrefix(name, "__") || len(name) > 5 {
			t.Fatalf("bad name %q for map %d", name, n)
		}
	}
	if anonName(0) != "_0" || anonName(1) != "_1" || anonName(36) != "_01" || anonName(37) != "_11" {
		t.Errorf("names: %s %s %s %s", anonName(0), anonName(1), anonName(36), anonName(37))
	}
	for _, name := range []string{"__map0", "service-ips", "aff-0123456789ab-01234567", "_", "_A", "x1"} {
		if _, ok := anonNumber(name); ok {
			t.Errorf("anonNumber(%q) accepted a name anonName never writes", name)
		}
	}
}
