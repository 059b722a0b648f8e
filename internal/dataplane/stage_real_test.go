// covers: D2, D8, P2 (staged cold sync in a real kernel)
package dataplane

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/nftables"
	"github.com/vishvananda/netns"

	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// countingBackend counts the transactions an agent commits and their operations.
type countingBackend struct {
	backend
	commits, ops int
}

func (c *countingBackend) commit(ctx context.Context, tx txn) error {
	c.commits++
	c.ops += tx.size()
	return c.backend.commit(ctx, tx)
}

// kernelAgentIn returns an in-process netlink agent for namespace ns (tables only: no lo, no
// conntrack) that stages chunk new identities per transaction (0: one transaction). Its sockets
// are opened from a thread moved into ns; that thread is discarded afterwards.
func kernelAgentIn(t *testing.T, ns string, chunk int) (*Agent, *countingBackend) {
	t.Helper()
	var a *Agent
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread leaves with this goroutine
		h, e := netns.GetFromName(ns)
		if e != nil {
			err = e
			return
		}
		defer func() { _ = h.Close() }()
		if err = netns.Set(h); err != nil {
			return
		}
		a, err = NewKernelAgent(Config{NoLoopback: true, NoConntrack: true}, logr.Discard())
	}()
	<-done
	if err != nil {
		t.Fatalf("agent in %s: %v", ns, err)
	}
	nl := a.be.(*nlBackend)
	t.Cleanup(func() {
		_ = nl.close()
		if a.watch != nil {
			a.watch.close()
		}
	})
	c := &countingBackend{backend: a.be}
	a.be = c
	a.stageChunk = chunk
	return a, c
}

// setCounts counts the named and the anonymous sets of the table in ns (anonymous maps are not
// shown by `nft list` as sets, so leaked ones would go unseen there).
func setCounts(t *testing.T, ns string) (named, anonymous int) {
	t.Helper()
	h, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Close() }()
	c, err := nftables.New(nftables.WithNetNSFd(int(h)))
	if err != nil {
		t.Fatal(err)
	}
	sets, err := c.GetSets(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: TableName})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sets {
		if s.Anonymous {
			anonymous++
		} else {
			named++
		}
	}
	return named, anonymous
}

// wantSetCounts is how many named (affinity + service-ips) and anonymous sets st needs.
func wantSetCounts(st gwstate.State) (named, anonymous int) {
	named = 5 // service-ips, the ownership sets vpcgw-identities and vpcgw-vips, the guard's vpcgw-endpoints and vpcgw-reply-vips
	for _, id := range st.Identities {
		if len(id.SourceRanges) > 0 && len(id.Backends) > 0 {
			named++ // src-<idhash> (SPEC N7)
		}
		switch {
		case id.AffinityTimeoutSeconds > 0:
			named += len(id.Backends)
			anonymous++ // the pick's vmap over the endpoint chains
		case len(id.Backends) > 1:
			anonymous++ // the pick's map over the backends
		}
	}
	return named, anonymous
}

// listingBlocks splits `nft list table` output into its chain, set and map blocks, keyed by
// their first line.
func listingBlocks(listing string) map[string]string {
	out := map[string]string{}
	var head string
	var b strings.Builder
	for _, l := range strings.Split(listing, "\n") {
		if strings.HasPrefix(l, "\t") && !strings.HasPrefix(l, "\t\t") && strings.HasSuffix(l, "{") {
			head = strings.TrimSpace(l)
			b.Reset()
		}
		if head == "" {
			continue
		}
		b.WriteString(l + "\n")
		if l == "\t}" {
			out[head] = b.String()
			head = ""
		}
	}
	return out
}

// A staged cold sync (several chunks) gives the same ruleset as one transaction and as the nft
// binary, anonymous map names never show, and no anonymous map is left over.
// covers: D2, D8, P2
func TestRealStagedColdSyncMatchesOneTransaction(t *testing.T) {
	l := newLab(t)
	var nss [3]string
	for i, short := range []string{"st", "one", "txt"} {
		ns, err := l.AddNetns(short)
		if err != nil {
			t.Fatal(err)
		}
		nss[i] = ns
	}
	st := state(1, mixedIdentities(450, 0)...)
	staged, stagedTx := kernelAgentIn(t, nss[0], 100)
	one, oneTx := kernelAgentIn(t, nss[1], 0)
	mustApply(t, staged, st)
	mustApply(t, one, st)
	if stagedTx.commits != 6 || oneTx.commits != 1 {
		t.Errorf("transactions: staged %d (want 5 + 1), one-transaction %d (want 1)", stagedTx.commits, oneTx.commits)
	}
	text := startAgentArgs(t, l, nss[2], "--text-path") // stages by the default chunk: 2 + 1
	mustSend(t, text, st)

	got := nftList(t, l, nss[0], "list", "table", "ip", TableName)
	for i, ns := range nss[1:] {
		if other := nftList(t, l, ns, "list", "table", "ip", TableName); other != got {
			t.Errorf("staged netlink table differs from the %s table:\n%s\nother:\n%s", []string{"one-transaction", "text path"}[i], got, other)
		}
	}
	wantLacks(t, "staged table", got, "@_", " _0", "__map")
	wantNamed, wantAnon := wantSetCounts(st)
	for _, ns := range nss {
		if named, anon := setCounts(t, ns); named != wantNamed || anon != wantAnon {
			t.Errorf("%s: %d named and %d anonymous sets, want %d and %d", ns, named, anon, wantNamed, wantAnon)
		}
	}
	if err := text.Close(); err != nil {
		t.Fatalf("agent at EOF: %v", err)
	}
}

// The final transaction of a staged sync fails (a foreign object named like an identity chain,
// of an incompatible type, as in TestRealKernelRefusalNamesIdentities, with the agent told to
// take the kernel's refusal as the whole message's, as a failure of shared objects is): everything that was
// there stays exactly as it was and no element points at the staged chains. Once the kernel
// accepts, the next sync reuses the staged chains (one transaction, rule handles unchanged) and
// converges to the one-transaction ruleset with no leftover chain or set.
// covers: D2, D8, P2
func TestRealStagedFinalFailureKeepsPreviousAndConverges(t *testing.T) {
	l := newLab(t)
	gw, err := l.AddNetns("gw")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := l.AddNetns("ref")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ids := mixedIdentities(305, 0)
	s1 := state(1, ids[:5]...)
	a1, _ := kernelAgentIn(t, gw, 100)
	mustApply(t, a1, s1)

	clash := ident("10.220.0.1", 80, gwstate.TCP, be("10.1.0.1", 80), be("10.1.0.2", 80))
	clashChain := IdentityChain(clash.Key())
	mustExec(t, l, gw, "nft", "add", "chain", "ip", TableName, clashChain, "{", "type", "filter", "hook", "input", "priority", "0", ";", "}")
	before := nftList(t, l, gw, "list", "table", "ip", TableName)

	// A restarted agent (full sync) gets 300 new identities: 3 staging transactions commit,
	// the final one (which rewrites the clashing chain) is rejected.
	s2 := state(2, append(slices.Clone(ids), clash)...)
	a2, count := kernelAgentIn(t, gw, 100)
	a2.kernelRounds = 1
	err = a2.Apply(ctx, s2)
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "operation not supported") || !strings.Contains(err.Error(), "after 3 staging transactions") {
		t.Fatalf("apply: %v, want the kernel's 'operation not supported' after 3 staging transactions", err)
	}
	after := nftList(t, l, gw, "list", "table", "ip", TableName)
	was, is := listingBlocks(before), listingBlocks(after)
	// The staging transactions record the staged keys in OwnedSet (so that a restarted
	// agent knows the unreferenced objects as its own); traffic sees nothing of it.
	ownedHead := "set " + OwnedSet + " {"
	for _, id := range ids[5:] {
		if !strings.Contains(is[ownedHead], fmt.Sprintf("%s . %s . %d", id.VIP, id.Protocol, id.Port)) {
			t.Errorf("staged identity %s is not in %s after the failed apply", id.Key(), OwnedSet)
			break
		}
	}
	delete(was, ownedHead)
	delete(is, ownedHead)
	for head, block := range was {
		if is[head] != block {
			t.Errorf("%s changed by the failed apply:\n%s\nwas:\n%s", head, is[head], block)
		}
	}
	staged := map[string]bool{} // the staged objects, unreferenced: identity chains and affinity objects
	for _, id := range ids[5:] {
		cs, ss := objectNames(id)
		for _, c := range cs {
			staged["chain "+c+" {"] = true
		}
		for _, s := range ss {
			staged["set "+s+" {"] = true
		}
	}
	for head := range is {
		if _, ok := was[head]; !ok && !staged[head] {
			t.Errorf("unexpected new object after the failed apply: %s", head)
		}
		if _, ok := was[head]; !ok {
			delete(staged, head)
		}
	}
	if len(staged) != 0 {
		t.Errorf("%d staged objects missing after the failed apply", len(staged))
	}
	for _, id := range ids[5:] {
		if strings.Contains(after, "goto "+IdentityChain(id.Key())) {
			t.Errorf("a staged chain is referenced after the failed apply")
			break
		}
	}
	sample := IdentityChain(ids[200].Key())
	sampleBefore := nftList(t, l, gw, "-a", "list", "chain", "ip", TableName, sample)

	// The foreign object goes; the next sync converges in one transaction.
	mustExec(t, l, gw, "nft", "delete", "chain", "ip", TableName, clashChain)
	count.commits = 0
	mustApply(t, a2, s2)
	if count.commits != 1 {
		t.Errorf("recovery took %d transactions, want 1 (staged chains reused)", count.commits)
	}
	if got := nftList(t, l, gw, "-a", "list", "chain", "ip", TableName, sample); got != sampleBefore {
		t.Errorf("staged chain rewritten instead of reused:\n%s\nwas:\n%s", got, sampleBefore)
	}
	want, _ := kernelAgentIn(t, ref, 0)
	mustApply(t, want, s2)
	got, wantList := nftList(t, l, gw, "list", "table", "ip", TableName), nftList(t, l, ref, "list", "table", "ip", TableName)
	if got != wantList {
		t.Errorf("after recovery:\n%s\nwant (one transaction on an empty table):\n%s", got, wantList)
	}
	wantNamed, wantAnon := wantSetCounts(s2)
	if named, anon := setCounts(t, gw); named != wantNamed || anon != wantAnon {
		t.Errorf("after recovery: %d named and %d anonymous sets, want %d and %d", named, anon, wantNamed, wantAnon)
	}
	if drift, err := a2.Verify(ctx); drift != "" || err != nil {
		t.Errorf("verify after recovery: drift %q, err %v", drift, err)
	}
	if len(a2.staged) != 0 {
		t.Errorf("staged bookkeeping not cleared: %d", len(a2.staged))
	}
}

// The same staged sync with the agent's default: the kernel names the clashing identity, and the
// next round programs every other identity, staged chains included, without it (SPEC D8, P2).
// covers: D8, P2
func TestRealStagedSyncRefusesOnlyTheClash(t *testing.T) {
	l := newLab(t)
	gw, err := l.AddNetns("gw")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ids := mixedIdentities(305, 0)
	a1, _ := kernelAgentIn(t, gw, 100)
	mustApply(t, a1, state(1, ids[:5]...))
	clash := ident("10.220.0.1", 80, gwstate.TCP, be("10.1.0.1", 80), be("10.1.0.2", 80))
	clashChain := IdentityChain(clash.Key())
	mustExec(t, l, gw, "nft", "add", "chain", "ip", TableName, clashChain, "{", "type", "filter", "hook", "input", "priority", "0", ";", "}")

	a2, _ := kernelAgentIn(t, gw, 100)
	if err := a2.Apply(ctx, state(2, append(slices.Clone(ids), clash)...)); err != nil {
		t.Fatalf("apply: %v, want the clashing identity refused alone", err)
	}
	if r := a2.Refusals(); len(r) != 1 || r[0].IdentityKey != clash.Key() || !strings.Contains(strings.ToLower(r[0].Reason), "operation not supported") {
		t.Fatalf("refusals %+v, want %s alone, refused by the kernel", r, clash.Key())
	}
	table := nftList(t, l, gw, "list", "table", "ip", TableName)
	for _, id := range ids {
		if !strings.Contains(table, "goto "+IdentityChain(id.Key())) {
			t.Fatalf("identity %s is not dispatched beside the refused one", id.Key())
		}
	}
	if strings.Contains(table, "goto "+clashChain) {
		t.Error("the refused identity is dispatched")
	}
	if drift, err := a2.Verify(ctx); drift != "" || err != nil {
		t.Errorf("verify beside the refused identity: drift %q, err %v", drift, err)
	}
}

// A table flushed by hand (every chain emptied, every map's elements gone) is restored by a
// drift repair that stages the committed identities in chunks, as a cold sync does, instead of
// rewriting them all in one transaction (quadratic in the kernel: 15 s at 10,000 identities):
// the table afterwards is the one the agent had committed, and no anonymous map is left over.
// A chain flushed by hand is restored in one transaction: only what the check did not find
// whole is staged.
// covers: L8, D8, P2
func TestRealFlushedTableRestoredByStaging(t *testing.T) {
	l := newLab(t)
	gw, err := l.AddNetns("gw")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st := state(1, mixedIdentities(450, 0)...)
	a, count := kernelAgentIn(t, gw, 100)
	mustApply(t, a, st)
	committed := nftList(t, l, gw, "list", "table", "ip", TableName)
	wantNamed, wantAnon := wantSetCounts(st)

	mustExec(t, l, gw, "nft", "flush", "table", "ip", TableName)
	if flushed := nftList(t, l, gw, "list", "table", "ip", TableName); flushed == committed {
		t.Fatal("nft flush table changed nothing: the test would prove nothing")
	}
	count.commits = 0
	drift, err := a.Verify(ctx)
	if err != nil || drift == "" {
		t.Fatalf("verify after the flush: drift %q, err %v; want drift found and repaired", drift, err)
	}
	if count.commits != 6 {
		t.Errorf("the repair committed %d transactions, want 5 staging (450 identities, 100 per chunk) + 1", count.commits)
	}
	if got := nftList(t, l, gw, "list", "table", "ip", TableName); got != committed {
		t.Errorf("restored table differs from the committed one:\n%s\ncommitted:\n%s", got, committed)
	}
	if named, anon := setCounts(t, gw); named != wantNamed || anon != wantAnon {
		t.Errorf("after the repair: %d named and %d anonymous sets, want %d and %d", named, anon, wantNamed, wantAnon)
	}
	if drift, err := a.Verify(ctx); drift != "" || err != nil {
		t.Errorf("verify after the repair: drift %q, err %v; want none", drift, err)
	}

	// One identity chain flushed: one transaction.
	id := st.Identities[7]
	mustExec(t, l, gw, "nft", "flush", "chain", "ip", TableName, IdentityChain(id.Key()))
	count.commits = 0
	if drift, err := a.Verify(ctx); drift == "" || err != nil {
		t.Fatalf("verify after a chain flush: drift %q, err %v; want drift found and repaired", drift, err)
	}
	if count.commits != 1 {
		t.Errorf("repairing one flushed chain took %d transactions, want 1", count.commits)
	}
	if got := nftList(t, l, gw, "list", "table", "ip", TableName); got != committed {
		t.Errorf("table after repairing one chain differs from the committed one:\n%s\ncommitted:\n%s", got, committed)
	}
}
