// covers: P7, L7 (what a full sync writes for identities whose content the table already holds)
package dataplane

import (
	"context"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

// stubContent is a table content that matches the base when base is set, and the identities in
// match (the netlink backend reads and compares them: nlContent).
type stubContent struct {
	base  bool
	match map[gwstate.IdentityKey]bool
}

func (s stubContent) baseMatches(string) bool                  { return s.base }
func (s stubContent) identityMatches(id gwstate.Identity) bool { return s.match[id.Key()] }

// contentBackend lists the table with the given content.
type contentBackend struct {
	backend
	content tableContent
}

func (c *contentBackend) inventory(ctx context.Context) (*inventory, error) {
	inv, err := c.backend.inventory(ctx)
	if inv != nil {
		inv.content = c.content
	}
	return inv, err
}

// restartedAgent is a new agent on the fake's table whose listing says content, and the counter
// of what it commits.
func restartedAgent(f *knftables.Fake, content tableContent) (*Agent, *countingBackend) {
	a := NewAgent(f, logr.Discard())
	count := &countingBackend{backend: &contentBackend{backend: a.be, content: content}}
	a.be = count
	return a, count
}

// A full sync writes nothing for the identities and the base whose content matches; an identity
// that does not match is rewritten alone; a matching identity whose element was deleted gets the
// element alone; a base that does not match is written whole. The adopted identities are the
// agent's committed state: the next change is incremental.
// covers: P7, L7
func TestFullSyncWritesOnlyWhatDiffers(t *testing.T) {
	plain := ident("10.96.0.10", 80, gwstate.TCP, be("10.0.1.11", 8080))
	multi := ident("10.96.0.10", 443, gwstate.TCP, be("10.0.1.11", 8443), be("10.0.1.12", 8443))
	aff := ident("10.96.0.11", 80, gwstate.TCP, be("10.0.1.11", 80), be("10.0.1.12", 80))
	aff.AffinityTimeoutSeconds = 60
	fw := withRanges(ident("10.96.0.12", 80, gwstate.UDP, be("10.0.1.13", 80)), "10.0.0.0/8")
	st := state(1, plain, multi, aff, fw)
	all := map[gwstate.IdentityKey]bool{}
	for _, id := range st.Identities {
		all[id.Key()] = true
	}
	f := newFake()
	mustApply(t, NewAgent(f, logr.Discard()), st)
	want := freshDump(t, st)

	for _, c := range []struct {
		name    string
		content stubContent
		edit    func(tx *knftables.Transaction)
		ops     int
	}{
		{"everything matches", stubContent{base: true, match: all}, nil, 0},
		{"one identity differs", stubContent{base: true, match: without(all, plain.Key())}, nil, 5}, // key, chain, flush, rule, element
		{"an element is missing", stubContent{base: true, match: all}, func(tx *knftables.Transaction) {
			tx.Delete(&knftables.Element{Map: ServiceMap, Key: elementKey(multi)})
		}, 1},
		{"an owned key is missing", stubContent{base: true, match: all}, func(tx *knftables.Transaction) {
			tx.Delete(&knftables.Element{Set: OwnedSet, Key: elementKey(fw)})
		}, 1},
		{"a VIP is missing", stubContent{base: true, match: all}, func(tx *knftables.Transaction) {
			tx.Delete(&knftables.Element{Set: VIPSet, Key: []string{"10.96.0.11"}})
		}, 1},
		// The table, 5 sets and maps, 5 base chains (each added and flushed) and their 6 rules.
		{"the base differs", stubContent{match: all}, nil, 22},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.edit != nil {
				tx := f.NewTransaction()
				c.edit(tx)
				if err := f.Run(context.Background(), tx); err != nil {
					t.Fatal(err)
				}
			}
			a, count := restartedAgent(f, c.content)
			mustApply(t, a, st)
			if count.ops != c.ops || count.commits != min(c.ops, 1) {
				t.Errorf("committed %d transactions of %d operations, want %d operations", count.commits, count.ops, c.ops)
			}
			if got := testutil.SortElements(f.Dump()); got != testutil.SortElements(want) {
				t.Errorf("table:\n%s\nwant:\n%s", got, want)
			}
			if len(a.Applied()) != len(st.Identities) || !a.synced {
				t.Fatalf("adopted %d identities (synced %v), want all %d", len(a.Applied()), a.synced, len(st.Identities))
			}
			// The next change is one small incremental transaction.
			count.commits, count.ops = 0, 0
			changed := state(2, ident("10.96.0.10", 80, gwstate.TCP, be("10.0.1.14", 8080)), multi, aff, fw)
			mustApply(t, a, changed)
			// chain, flush, rule, element; the guard's elements of the old backend out and of
			// the new one in (endpoint, reply: SPEC D9)
			if count.commits != 1 || count.ops != 8 {
				t.Errorf("the change after the adoption: %d transactions of %d operations, want 1 of 8", count.commits, count.ops)
			}
			if got := testutil.SortElements(f.Dump()); got != testutil.SortElements(freshDump(t, changed)) {
				t.Errorf("after the change:\n%s\nwant:\n%s", got, freshDump(t, changed))
			}
			mustApply(t, a, state(3, st.Identities...))
		})
	}
}

// without is m without k.
func without(m map[gwstate.IdentityKey]bool, k gwstate.IdentityKey) map[gwstate.IdentityKey]bool {
	out := make(map[gwstate.IdentityKey]bool, len(m))
	for key, v := range m {
		out[key] = v && key != k
	}
	return out
}

// listedAs is r as the kernel would list it (kernelForm), its anonymous map named anon, with
// change applied to its expressions and its user data replaced by udata when not nil.
func listedAs(t *testing.T, table *nftables.Table, r rule, anon string, change func([]expr.Any) []expr.Any, udata []byte) listedRule {
	t.Helper()
	rr, err := renderRule(table, r)
	if err != nil {
		t.Fatal(err)
	}
	exprs := make([]expr.Any, len(rr.exprs))
	for i, e := range rr.exprs {
		exprs[i] = kernelForm(e)
		if rr.anon != nil && e == expr.Any(rr.anon.lookup) {
			l := *rr.anon.lookup
			l.SetName = anon
			exprs[i] = &l
		}
	}
	if change != nil {
		exprs = change(exprs)
	}
	var attrs []netlink.Attribute
	for _, e := range exprs {
		data, err := expr.Marshal(byte(nftables.TableFamilyIPv4), e)
		if err != nil {
			t.Fatal(err)
		}
		attrs = append(attrs, netlink.Attribute{Type: unix.NLA_F_NESTED | unix.NFTA_LIST_ELEM, Data: data})
	}
	b, err := netlink.MarshalAttributes(attrs)
	if err != nil {
		t.Fatal(err)
	}
	if udata == nil {
		udata = rr.udata
	}
	return listedRule{exprs: b, udata: udata}
}

// A rule read back matches only with the agent's expressions, its comment and the digest of the
// map it would write, looking up an anonymous map (nlContent.ruleMatches; the real kernel's
// listing is compared in TestRealRestartOverUnchangedTableWritesNothing).
// covers: P7
func TestRuleMatchesComparesContent(t *testing.T) {
	table := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: TableName}
	want := dnatRule(gwstate.TCP, []gwstate.Backend{be("10.0.1.11", 8080), be("10.0.1.12", 8080)})
	other := dnatRule(gwstate.TCP, []gwstate.Backend{be("10.0.1.11", 8080), be("10.0.1.99", 8080)})
	rr, err := renderRule(table, want)
	if err != nil {
		t.Fatal(err)
	}
	s := rr.anon.set
	anonMap := setInfo{flags: setFlags(s), keyType: s.KeyType.GetNFTMagic(), keyLen: s.KeyType.Bytes, dataType: s.DataType.GetNFTMagic(), dataLen: s.DataType.Bytes}
	c := &nlContent{b: &nlBackend{table: table}, sets: map[string]setInfo{"_5": anonMap, "named": {flags: unix.NFT_SET_MAP, keyType: anonMap.keyType, keyLen: 4, dataType: anonMap.dataType, dataLen: 8}}}
	otherDigest := listedAs(t, table, other, "_5", nil, nil).udata
	for _, tc := range []struct {
		name  string
		rule  rule
		got   listedRule
		match bool
	}{
		{"as written", want, listedAs(t, table, want, "_5", nil, nil), true},
		{"another map's digest", want, listedAs(t, table, want, "_5", nil, otherDigest), false},
		{"the comment only (written by nft)", want, listedAs(t, table, want, "_5", nil, ruleCommentData), false},
		{"a named map", want, listedAs(t, table, want, "named", nil, nil), false},
		{"a map that is not listed", want, listedAs(t, table, want, "_6", nil, nil), false},
		{"an extra expression", want, listedAs(t, table, want, "_5", func(e []expr.Any) []expr.Any { return append(e, &expr.Counter{}) }, nil), false},
		{"another protocol", want, listedAs(t, table, want, "_5", func(e []expr.Any) []expr.Any {
			e[1] = &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{unix.IPPROTO_UDP}}
			return e
		}, nil), false},
		{"one backend as written", dnatRule(gwstate.UDP, []gwstate.Backend{be("10.0.1.11", 53)}), listedAs(t, table, dnatRule(gwstate.UDP, []gwstate.Backend{be("10.0.1.11", 53)}), "", nil, nil), true},
		{"one backend, another port", dnatRule(gwstate.UDP, []gwstate.Backend{be("10.0.1.11", 53)}), listedAs(t, table, dnatRule(gwstate.UDP, []gwstate.Backend{be("10.0.1.11", 54)}), "", nil, nil), false},
	} {
		if got := c.ruleMatches(tc.got, tc.rule); got != tc.match {
			t.Errorf("%s: match %v, want %v", tc.name, got, tc.match)
		}
	}
}
