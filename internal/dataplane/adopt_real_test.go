// covers: P7, L7, L8, D8 (a restarted agent adopts what the kernel holds, in a real kernel)
package dataplane

import (
	"context"
	"errors"
	"maps"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"

	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/netlab"
)

// adoptionIdentities are identities of every shape: several ports on one VIP (TCP with several
// backends and with one, UDP), ClientIP affinity, source ranges (one ending at
// 255.255.255.255: an open interval) with and without affinity, and a spread of mixed shapes.
func adoptionIdentities() []gwstate.Identity {
	web := ident("10.96.0.10", 80, gwstate.TCP, be("10.0.1.11", 8080), be("10.0.1.12", 8080), be("10.0.1.13", 8080))
	tls := ident("10.96.0.10", 443, gwstate.TCP, be("10.0.1.11", 8443))
	dns := ident("10.96.0.10", 53, gwstate.UDP, be("10.0.1.11", 53), be("10.0.1.12", 53))
	aff := ident("10.96.0.11", 443, gwstate.TCP, be("10.0.1.11", 443), be("10.0.1.12", 443))
	aff.AffinityTimeoutSeconds = 600
	fw := withRanges(ident("10.96.0.12", 80, gwstate.TCP, be("10.0.1.11", 80), be("10.0.1.12", 80)), "10.0.0.0/8", "192.168.0.0/16")
	affFW := withRanges(ident("10.96.0.13", 80, gwstate.TCP, be("10.0.1.11", 80), be("10.0.1.14", 80)), "0.0.0.0/1", "128.0.0.0/1")
	affFW.AffinityTimeoutSeconds = 30
	return append([]gwstate.Identity{web, tls, dns, aff, fw, affFW}, mixedIdentities(40, 0)...)
}

// A new agent given the state a previous one programmed writes nothing, not one operation: every
// identity (all shapes), the base chains and the sets are adopted, and the table, rule handles
// included, is byte for byte what it was. The adopted identities are its committed state: the
// drift check finds the table whole, and a change is applied incrementally (new anonymous maps
// numbered past the previous agent's) and yields what a fresh agent writes.
// covers: P7, L7, L8
func TestRealRestartOverUnchangedTableWritesNothing(t *testing.T) {
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
	ids := adoptionIdentities()
	st := state(1, ids...)
	a1, _ := kernelAgentIn(t, gw, 0)
	mustApply(t, a1, st)
	before := nftList(t, l, gw, "-a", "list", "table", "ip", TableName)

	a2, count := kernelAgentIn(t, gw, 0)
	mustApply(t, a2, st)
	if count.commits != 0 || count.ops != 0 {
		t.Errorf("the restarted agent committed %d transactions of %d operations, want none", count.commits, count.ops)
	}
	if after := nftList(t, l, gw, "-a", "list", "table", "ip", TableName); after != before {
		t.Errorf("the table changed (handles included):\n%s\nwas:\n%s", after, before)
	}
	if got := len(a2.Applied()); got != len(st.Identities) {
		t.Errorf("the restarted agent holds %d identities as committed, want %d", got, len(st.Identities))
	}
	if drift, err := a2.Verify(ctx); drift != "" || err != nil {
		t.Errorf("verify after the adoption: drift %q, err %v", drift, err)
	}

	// A change after the adoption: one identity's backends, and a new identity with an
	// anonymous map (a name clash with the previous agent's maps would fail the transaction).
	ids = slices.Clone(st.Identities)
	i := slices.IndexFunc(ids, func(id gwstate.Identity) bool { return id.Key() == key("10.96.0.10", 80, gwstate.TCP) })
	ids[i].Backends = ids[i].Backends[:2]
	ids = append(ids, ident("10.96.0.20", 80, gwstate.TCP, be("10.0.1.11", 80), be("10.0.1.12", 80)))
	st2 := state(2, ids...)
	count.commits = 0
	mustApply(t, a2, st2)
	if count.commits != 1 {
		t.Errorf("the change after the adoption took %d transactions, want 1 (incremental)", count.commits)
	}
	fresh, _ := kernelAgentIn(t, ref, 0)
	mustApply(t, fresh, st2)
	// Compared object by object: the incremental change adds the new chain last.
	if got, want := nftList(t, l, gw, "list", "table", "ip", TableName), nftList(t, l, ref, "list", "table", "ip", TableName); !maps.Equal(listingBlocks(got), listingBlocks(want)) {
		t.Errorf("after the change:\n%s\nwant (a fresh agent, in another order):\n%s", got, want)
	}
	wantNamed, wantAnon := wantSetCounts(st2)
	if named, anon := setCounts(t, gw); named != wantNamed || anon != wantAnon {
		t.Errorf("after the change: %d named and %d anonymous sets, want %d and %d", named, anon, wantNamed, wantAnon)
	}
}

// A restarted agent rewrites exactly what differs from the state: an identity whose rule and
// anonymous map were replaced by hand (other backends, the agent's comment kept, so that only the
// content tells), and an identity whose element and chain were deleted. Every other object keeps
// its rule handles, and the table ends as the previous agent left it. The kernel refuses any
// change to a bound anonymous map's elements, which is what lets the rule's map digest stand for
// the map (nlcontent.go): checked here too.
// covers: P7, L7, D8
func TestRealRestartRewritesOnlyWhatDiffers(t *testing.T) {
	l := newLab(t)
	gw, err := l.AddNetns("gw")
	if err != nil {
		t.Fatal(err)
	}
	ids := adoptionIdentities()
	st := state(1, ids...)
	a1, _ := kernelAgentIn(t, gw, 0)
	mustApply(t, a1, st)
	programmed := nftList(t, l, gw, "list", "table", "ip", TableName)
	anonMapsAreImmutable(t, gw)

	web, tls := findIdentity(t, st, key("10.96.0.10", 80, gwstate.TCP)), findIdentity(t, st, key("10.96.0.10", 443, gwstate.TCP))
	webChain, tlsChain := IdentityChain(web.Key()), IdentityChain(tls.Key())
	handle := ruleHandle(t, l, gw, webChain)
	nftApply(t, l, gw, `
replace rule ip kube-ovn `+webChain+` handle `+handle+` meta l4proto tcp dnat ip addr . port to numgen random mod 3 map { 0 : 10.0.1.11 . 8080, 1 : 10.0.1.12 . 8080, 2 : 10.0.1.99 . 8080 } comment "vpcgw"
delete element ip kube-ovn service-ips { 10.96.0.10 . tcp . 443 }
flush chain ip kube-ovn `+tlsChain+`
delete chain ip kube-ovn `+tlsChain)
	edited := nftList(t, l, gw, "-a", "list", "table", "ip", TableName)
	wantContains(t, "table edited by hand", edited, "10.0.1.99 . 8080")
	wantLacks(t, "table edited by hand", edited, "chain "+tlsChain)

	a2, count := kernelAgentIn(t, gw, 0)
	mustApply(t, a2, st)
	if count.commits != 1 || count.ops > 12 {
		t.Errorf("the restarted agent committed %d transactions of %d operations, want 1 of at most 12 (two identities)", count.commits, count.ops)
	}
	// Compared object by object: the restored chain is listed last.
	if got := nftList(t, l, gw, "list", "table", "ip", TableName); !maps.Equal(listingBlocks(got), listingBlocks(programmed)) {
		t.Errorf("after the restart:\n%s\nwant what the previous agent programmed (in another order):\n%s", got, programmed)
	}
	was, is := handleBlocks(edited), handleBlocks(nftList(t, l, gw, "-a", "list", "table", "ip", TableName))
	rewritten := 0
	for head, block := range was {
		switch {
		case strings.HasPrefix(head, "chain "+webChain+" "):
			if is[head] == block {
				t.Errorf("the chain edited by hand was not rewritten:\n%s", block)
			}
			rewritten++
		case strings.HasPrefix(head, "map "+ServiceMap+" "), strings.HasPrefix(head, "set "+OwnedSet+" "):
			// The restored identity's element (the key stayed in the set, so the set is as it was).
		case is[head] != block:
			t.Errorf("%s was rewritten:\n%s\nwas:\n%s", head, is[head], block)
		}
	}
	if rewritten != 1 {
		t.Errorf("the chain edited by hand is missing from the listing")
	}
	if drift, err := a2.Verify(context.Background()); drift != "" || err != nil {
		t.Errorf("verify after the restart: drift %q, err %v", drift, err)
	}
}

// handleBlocks splits `nft -a list table` output into its chain, set and map blocks (handles
// included), keyed by their first line without its handle.
func handleBlocks(listing string) map[string]string {
	out := map[string]string{}
	var head string
	var b strings.Builder
	for _, l := range strings.Split(listing, "\n") {
		if strings.HasPrefix(l, "\t") && !strings.HasPrefix(l, "\t\t") && strings.Contains(l, " {") {
			head, _, _ = strings.Cut(strings.TrimSpace(l), " # handle")
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

// findIdentity is the identity k of st.
func findIdentity(t *testing.T, st gwstate.State, k gwstate.IdentityKey) gwstate.Identity {
	t.Helper()
	for _, id := range st.Identities {
		if id.Key() == k {
			return id
		}
	}
	t.Fatalf("identity %s is not in the state", k)
	return gwstate.Identity{}
}

var handleRE = regexp.MustCompile(`# handle (\d+)`)

// ruleHandle is the handle of the only rule of chain.
func ruleHandle(t *testing.T, l *netlab.Lab, ns, chain string) string {
	t.Helper()
	listing := nftList(t, l, ns, "-a", "list", "chain", "ip", TableName, chain)
	var handles []string
	for _, line := range strings.Split(listing, "\n") {
		if m := handleRE.FindStringSubmatch(line); m != nil && !strings.Contains(line, "chain ") {
			handles = append(handles, m[1])
		}
	}
	if len(handles) != 1 {
		t.Fatalf("chain %s has %d rules, want 1:\n%s", chain, len(handles), listing)
	}
	return handles[0]
}

// anonMapsAreImmutable checks that the kernel refuses to add an element to, or delete one from,
// an anonymous map bound to a rule of the table in ns.
func anonMapsAreImmutable(t *testing.T, ns string) {
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
	var anon *nftables.Set
	for _, s := range sets {
		if s.Anonymous && s.IsMap {
			anon = s
			break
		}
	}
	if anon == nil {
		t.Fatal("no anonymous map in the table")
	}
	// google/nftables refuses element changes of an anonymous set itself; the kernel is the
	// one asked here.
	anon.Anonymous = false
	anon.Table = &nftables.Table{Family: nftables.TableFamilyIPv4, Name: TableName}
	if err := c.SetAddElements(anon, []nftables.SetElement{{Key: []byte{99, 0, 0, 0}, Val: make([]byte, 8)}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("adding an element to the bound anonymous map %s: %v, want EBUSY", anon.Name, err)
	}
	if err := c.SetDeleteElements(anon, []nftables.SetElement{{Key: []byte{0, 0, 0, 0}}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Errorf("deleting an element of the bound anonymous map %s: %v, want EOPNOTSUPP", anon.Name, err)
	}
}
