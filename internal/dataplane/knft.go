package dataplane

import (
	"context"
	"fmt"
	"slices"
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
	// be there, or "" when none is found. It is cheap: no rule is read back.
	check(ctx context.Context, want expectation) (string, error)
	name() string
}

// inventory is what a full sync needs to know about the table.
type inventory struct {
	chains   []string
	sets     []string
	elements []element
}

type element struct {
	key   []string // vip, proto, port
	value string   // "goto <chain>"
}

// expectation is what a cheap verification compares with the kernel.
type expectation struct {
	elements int // elements of service-ips
	chains   int // owned identity and endpoint chains
	sets     int // owned affinity sets
}

func (e expectation) String() string {
	return fmt.Sprintf("%d elements, %d chains, %d sets", e.elements, e.chains, e.sets)
}

// knftBackend runs transactions through knftables (the nft binary, or its Fake).
type knftBackend struct {
	nft   knftables.Interface
	iface string
}

type knftTxn struct{ tx *knftables.Transaction }

func (b *knftBackend) name() string  { return "nft" }
func (b *knftBackend) begin() txn    { return &knftTxn{tx: b.nft.NewTransaction()} }
func (t *knftTxn) size() int         { return t.tx.NumOperations() }
func (t *knftTxn) addTable()         { t.tx.Add(&knftables.Table{}) }
func (t *knftTxn) addServiceMap()    { t.tx.Add(&knftables.Map{Name: ServiceMap, Type: ServiceMapType}) }
func (t *knftTxn) addChain(n string) { t.tx.Add(&knftables.Chain{Name: n}) }
func (t *knftTxn) flushChain(n string) {
	t.tx.Flush(&knftables.Chain{Name: n})
}
func (t *knftTxn) deleteChain(n string) { t.tx.Delete(&knftables.Chain{Name: n}) }
func (t *knftTxn) deleteSet(n string)   { t.tx.Delete(&knftables.Set{Name: n}) }
func (t *knftTxn) addBaseChain(name, hook, priority string) {
	t.tx.Add(&knftables.Chain{
		Name:     name,
		Type:     knftables.PtrTo(knftables.NATType),
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
func (t *knftTxn) addRule(chain string, r rule) {
	t.tx.Add(&knftables.Rule{Chain: chain, Rule: r.text()})
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
	var err error
	if inv.chains, err = b.list(ctx, "chain"); err != nil {
		return nil, err
	}
	if inv.sets, err = b.list(ctx, "set"); err != nil {
		return nil, err
	}
	maps, err := b.list(ctx, "map")
	if err != nil {
		return nil, err
	}
	if slices.Contains(maps, ServiceMap) {
		elems, err := b.nft.ListElements(ctx, "map", ServiceMap)
		if err != nil && !knftables.IsNotFound(err) {
			return nil, fmt.Errorf("listing map %s: %w", ServiceMap, err)
		}
		for _, e := range elems {
			inv.elements = append(inv.elements, element{key: e.Key, value: strings.Join(e.Value, " ")})
		}
	}
	return inv, nil
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

func (b *knftBackend) check(ctx context.Context, want expectation) (string, error) {
	chains, err := b.nft.List(ctx, "chain")
	if knftables.IsNotFound(err) {
		return "table ip " + TableName + " is missing", nil
	}
	if err != nil {
		return "", err
	}
	for _, base := range []string{BaseChain, PostroutingChain} {
		if !slices.Contains(chains, base) {
			return "chain " + base + " is missing", nil
		}
		rules, err := b.nft.ListRules(ctx, base)
		if err != nil {
			return "", err
		}
		if len(rules) != 1 {
			return fmt.Sprintf("chain %s has %d rules, want 1", base, len(rules)), nil
		}
	}
	inv, err := b.inventory(ctx)
	if err != nil {
		return "", err
	}
	return compareCounts(inv, want), nil
}

// compareCounts compares an inventory with the expected numbers of owned objects.
func compareCounts(inv *inventory, want expectation) string {
	got := expectation{elements: len(inv.elements)}
	for _, c := range inv.chains {
		if owned(c) {
			got.chains++
		}
	}
	for _, s := range inv.sets {
		if owned(s) {
			got.sets++
		}
	}
	if got != want {
		return fmt.Sprintf("table has %s, want %s", got, want)
	}
	return ""
}
