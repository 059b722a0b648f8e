package dataplane

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// backend is where the agent's transactions go: the kernel through netlink (the hot path), or
// knftables (the `nft -f` text path, and knftables' Fake in unit tests).
type backend interface {
	begin() txn
	commit(ctx context.Context, tx txn) error
	// inventory lists the owned objects in the kernel (only at start, after a failure and when
	// drift was found).
	inventory(ctx context.Context) (*inventory, error)
	// check returns a description of the drift between the kernel and what want says should
	// be there, or "" when none is found. It is cheap: no rule is read back. With drift, it
	// also returns the identities of want whose own objects it found whole (intactIdentities):
	// a repair only writes the others (SPEC L8).
	check(ctx context.Context, want expectation) (string, map[gwstate.IdentityKey]bool, error)
	name() string
}

// inventory is what a full sync needs to know about the table.
type inventory struct {
	chains   []string
	sets     []string // named sets other than OwnedSet, VIPSet and EndpointSet
	elements []element
	// owned are the keys in OwnedSet (vip, proto, port); vips the elements of VIPSet.
	owned [][]string
	vips  []netip.Addr
	// endpoints are the elements of EndpointSet, replies those of ReplyMap (SPEC D9).
	endpoints []gwstate.Backend
	replies   map[gwstate.Backend]gwstate.Backend
	// content, when the backend reads it (netlink), tells which identities and base objects
	// already hold what the agent would write: a full sync leaves those alone (SPEC P7). nil:
	// every live identity and the base are rewritten (the text path, a missing table).
	content tableContent
}

// tableContent is a table's content as read for a full sync (SPEC P7, see nlContent).
type tableContent interface {
	// baseMatches reports whether service-ips, the ownership sets and the base chains with their
	// rules are what writeBase writes for the VPC interface iface.
	baseMatches(iface string) bool
	// identityMatches reports whether id's chains and sets hold what writeObjects writes for it
	// (not its element or OwnedSet key, which the full sync compares itself).
	identityMatches(id gwstate.Identity) bool
}

type element struct {
	key   []string // vip, proto, port
	value string   // "goto <chain>"
}

// expectation is what the agent committed, for the drift check.
type expectation struct {
	ids   map[gwstate.IdentityKey]gwstate.Identity // applied: identities with backends
	vips  map[netip.Addr]int                       // identities per VIP
	guard guardIndex                               // their TCP endpoints (SPEC D9)
}

// ruleMarks counts a chain's rules and those carrying RuleComment.
type ruleMarks struct{ rules, marked int }

// tableState is what a drift check reads: the inventory, the rules of every chain, and whether
// the base chain's single rule is the dispatch rule.
type tableState struct {
	inv      *inventory
	rules    map[string]ruleMarks
	dispatch bool
}

// knftBackend runs transactions through knftables (the nft binary, or its Fake).
type knftBackend struct {
	nft  knftables.Interface
	pick Pick
}

type knftTxn struct {
	tx   *knftables.Transaction
	pick Pick
}

func (b *knftBackend) name() string { return "nft" }
func (b *knftBackend) begin() txn   { return &knftTxn{tx: b.nft.NewTransaction(), pick: b.pick} }
func (t *knftTxn) size() int        { return t.tx.NumOperations() }
func (t *knftTxn) addTable()        { t.tx.Add(&knftables.Table{}) }
func (t *knftTxn) addServiceMap()   { t.tx.Add(&knftables.Map{Name: ServiceMap, Type: ServiceMapType}) }

// identity is a no-op: nft reports a failed transaction as a whole, so the text path refuses
// states whole.
func (t *knftTxn) identity(*gwstate.Identity) {}

func (t *knftTxn) addOwnershipSets() {
	t.tx.Add(&knftables.Set{Name: OwnedSet, Type: OwnedSetType})
	t.tx.Add(&knftables.Set{Name: VIPSet, Type: "ipv4_addr"})
}
func (t *knftTxn) addOwnedKey(key []string) { t.tx.Add(&knftables.Element{Set: OwnedSet, Key: key}) }
func (t *knftTxn) deleteOwnedKey(key []string) {
	t.tx.Delete(&knftables.Element{Set: OwnedSet, Key: key})
}
func (t *knftTxn) addVIP(vip netip.Addr) {
	t.tx.Add(&knftables.Element{Set: VIPSet, Key: []string{vip.String()}})
}
func (t *knftTxn) deleteVIP(vip netip.Addr) {
	t.tx.Delete(&knftables.Element{Set: VIPSet, Key: []string{vip.String()}})
}
func (t *knftTxn) addGuardSets() {
	t.tx.Add(&knftables.Set{Name: EndpointSet, Type: EndpointSetType})
	t.tx.Add(&knftables.Map{Name: ReplyMap, Type: ReplyMapType})
}
func (t *knftTxn) addEndpoint(ep gwstate.Backend) {
	t.tx.Add(&knftables.Element{Set: EndpointSet, Key: endpointText(ep)})
}
func (t *knftTxn) deleteEndpoint(ep gwstate.Backend) {
	t.tx.Delete(&knftables.Element{Set: EndpointSet, Key: endpointText(ep)})
}
func (t *knftTxn) addReply(ep, vip gwstate.Backend) {
	t.tx.Add(&knftables.Element{Map: ReplyMap, Key: endpointText(ep), Value: endpointText(vip)})
}
func (t *knftTxn) deleteReply(ep gwstate.Backend) {
	t.tx.Delete(&knftables.Element{Map: ReplyMap, Key: endpointText(ep)})
}

// endpointText is an address and port as an element's key or value.
func endpointText(ep gwstate.Backend) []string {
	return []string{ep.IP.String(), strconv.Itoa(int(ep.Port))}
}

// parseEndpoint reads an endpointText as nft lists it.
func parseEndpoint(k []string) (gwstate.Backend, error) {
	if len(k) != 2 {
		return gwstate.Backend{}, fmt.Errorf("endpoint %q: want address . port", k)
	}
	ip, err := netip.ParseAddr(k[0])
	if err != nil {
		return gwstate.Backend{}, fmt.Errorf("endpoint %q: %w", k, err)
	}
	port, err := strconv.ParseUint(k[1], 10, 16)
	if err != nil {
		return gwstate.Backend{}, fmt.Errorf("endpoint %q: %w", k, err)
	}
	return gwstate.Backend{IP: ip, Port: int32(port)}, nil
}

func (t *knftTxn) addChain(n string) { t.tx.Add(&knftables.Chain{Name: n}) }
func (t *knftTxn) flushChain(n string) {
	t.tx.Flush(&knftables.Chain{Name: n})
}
func (t *knftTxn) deleteTable()         { t.tx.Delete(&knftables.Table{}) }
func (t *knftTxn) deleteChain(n string) { t.tx.Delete(&knftables.Chain{Name: n}) }
func (t *knftTxn) deleteSet(n string) {
	if n == ReplyMap { // nft deletes a map as a set; knftables' Fake does not
		t.tx.Delete(&knftables.Map{Name: n})
		return
	}
	t.tx.Delete(&knftables.Set{Name: n})
}
func (t *knftTxn) addBaseChain(name, typ, hook, priority string) {
	t.tx.Add(&knftables.Chain{
		Name:     name,
		Type:     knftables.PtrTo(knftables.BaseChainType(typ)),
		Hook:     knftables.PtrTo(knftables.BaseChainHook(hook)),
		Priority: knftables.PtrTo(knftables.BaseChainPriority(priority)),
		Policy:   knftables.PtrTo(knftables.AcceptPolicy),
	})
}
func (t *knftTxn) addAffinitySet(name string, timeout time.Duration) {
	t.tx.Add(&knftables.Set{
		Name:    name,
		Type:    "ipv4_addr",
		Flags:   []knftables.SetFlag{knftables.DynamicFlag, knftables.TimeoutFlag},
		Timeout: knftables.PtrTo(timeout),
	})
}
func (t *knftTxn) setSourceRanges(name string, prefixes []netip.Prefix) {
	t.tx.Add(&knftables.Set{Name: name, Type: "ipv4_addr", Flags: []knftables.SetFlag{knftables.IntervalFlag}})
	t.tx.Flush(&knftables.Set{Name: name})
	for _, p := range prefixes {
		t.tx.Add(&knftables.Element{Set: name, Key: []string{p.String()}})
	}
}
func (t *knftTxn) addRule(chain string, r rule) {
	kr := &knftables.Rule{Chain: chain, Rule: r.withPick(t.pick).text()}
	if r.marked() {
		kr.Comment = knftables.PtrTo(RuleComment)
	}
	t.tx.Add(kr)
}
func (t *knftTxn) addElement(id gwstate.Identity) {
	t.tx.Add(&knftables.Element{Map: ServiceMap, Key: elementKey(id), Value: elementValue(id)})
}
func (t *knftTxn) deleteElement(id gwstate.Identity) {
	t.tx.Delete(&knftables.Element{Map: ServiceMap, Key: elementKey(id)})
}
func (t *knftTxn) deleteElementKey(key []string) {
	t.tx.Delete(&knftables.Element{Map: ServiceMap, Key: key})
}

func (b *knftBackend) commit(ctx context.Context, tx txn) error {
	return b.nft.Run(ctx, tx.(*knftTxn).tx)
}

func (b *knftBackend) inventory(ctx context.Context) (*inventory, error) {
	inv := &inventory{}
	chains, err := b.list(ctx, "chain")
	if err != nil {
		return nil, err
	}
	inv.chains = chains
	sets, err := b.list(ctx, "set")
	if err != nil {
		return nil, err
	}
	for _, s := range sets {
		if err := b.readSet(ctx, inv, s); err != nil {
			return nil, err
		}
	}
	maps, err := b.list(ctx, "map")
	if err != nil {
		return nil, err
	}
	if slices.Contains(maps, ReplyMap) {
		if inv.replies, err = b.replies(ctx); err != nil {
			return nil, err
		}
	}
	if slices.Contains(maps, ServiceMap) {
		elems, err := b.elements(ctx, "map", ServiceMap)
		if err != nil {
			return nil, err
		}
		for _, e := range elems {
			inv.elements = append(inv.elements, element{key: e.Key, value: strings.Join(e.Value, " ")})
		}
	}
	return inv, nil
}

// readSet reads the elements of the agent's shared sets into inv, and the names of the others.
func (b *knftBackend) readSet(ctx context.Context, inv *inventory, s string) error {
	if s != OwnedSet && s != VIPSet && s != EndpointSet {
		inv.sets = append(inv.sets, s)
		return nil
	}
	elems, err := b.elements(ctx, "set", s)
	if err != nil {
		return err
	}
	for _, e := range elems {
		switch {
		case s == OwnedSet:
			inv.owned = append(inv.owned, e.Key)
		case s == EndpointSet:
			ep, err := parseEndpoint(e.Key)
			if err != nil {
				return fmt.Errorf("listing set %s: %w", EndpointSet, err)
			}
			inv.endpoints = append(inv.endpoints, ep)
		case len(e.Key) == 1:
			// VIPSet's type is ipv4_addr: nft lists only addresses.
			vip, err := netip.ParseAddr(e.Key[0])
			if err != nil {
				return fmt.Errorf("listing set %s: %w", VIPSet, err)
			}
			inv.vips = append(inv.vips, vip)
		}
	}
	return nil
}

// replies reads ReplyMap's elements.
func (b *knftBackend) replies(ctx context.Context) (map[gwstate.Backend]gwstate.Backend, error) {
	elems, err := b.elements(ctx, "map", ReplyMap)
	if err != nil {
		return nil, err
	}
	out := make(map[gwstate.Backend]gwstate.Backend, len(elems))
	for _, e := range elems {
		ep, err := parseEndpoint(e.Key)
		if err != nil {
			return nil, fmt.Errorf("listing map %s: %w", ReplyMap, err)
		}
		vip, err := parseEndpoint(e.Value)
		if err != nil {
			return nil, fmt.Errorf("listing map %s: %w", ReplyMap, err)
		}
		out[ep] = vip
	}
	return out, nil
}

func (b *knftBackend) elements(ctx context.Context, objectType, name string) ([]*knftables.Element, error) {
	elems, err := b.nft.ListElements(ctx, objectType, name)
	if err != nil && !knftables.IsNotFound(err) {
		return nil, fmt.Errorf("listing %s %s: %w", objectType, name, err)
	}
	return elems, nil
}

// list returns the names of objects of one type in the table; a missing table is empty.
func (b *knftBackend) list(ctx context.Context, objectType string) ([]string, error) {
	names, err := b.nft.List(ctx, objectType)
	if err != nil {
		if knftables.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing %ss of table ip %s: %w", objectType, TableName, err)
	}
	return names, nil
}

// check reads the whole table (the text path has no cheap way to see that nothing changed).
func (b *knftBackend) check(ctx context.Context, want expectation) (string, map[gwstate.IdentityKey]bool, error) {
	chains, err := b.nft.List(ctx, "chain")
	if knftables.IsNotFound(err) {
		return "table ip " + TableName + " is missing", nil, nil
	}
	if err != nil {
		return "", nil, err
	}
	rules, err := b.nft.ListRules(ctx, "")
	if err != nil {
		return "", nil, fmt.Errorf("listing rules of table ip %s: %w", TableName, err)
	}
	ts := tableState{rules: make(map[string]ruleMarks, len(chains))}
	for _, r := range rules {
		m := ts.rules[r.Chain]
		m.rules++
		if r.Comment != nil && *r.Comment == RuleComment {
			m.marked++
		}
		ts.rules[r.Chain] = m
		// The real nft lists no rule text here (--terse JSON); a base chain of one rule
		// without the agent's comment is the dispatch rule, written by the agent or by
		// kube-ovn (the same rule). The Fake has the text.
		if r.Chain == BaseChain {
			ts.dispatch = r.Comment == nil && (r.Rule == "" || r.Rule == DispatchRule)
		}
	}
	if ts.inv, err = b.inventory(ctx); err != nil {
		return "", nil, err
	}
	drift := compareTable(ts, want)
	if drift == "" {
		return "", nil, nil
	}
	return drift, intactIdentities(ts, want), nil
}
