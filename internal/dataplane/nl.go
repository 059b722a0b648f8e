package dataplane

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// nlBackend sends transactions to the kernel as one netlink batch through
// github.com/google/nftables. Unlike `nft -f`, it does not load the table first, so the cost of
// a transaction does not grow with the table (SPEC P1). The rules are the same as the text
// path's, expression by expression (the real-kernel test compares `nft list table` of both).
type nlBackend struct {
	conn  *nftables.Conn
	table *nftables.Table
	// anonPrefix (random per agent) and anon name anonymous maps uniquely.
	anonPrefix string
	anon       uint64
}

// socketBuffer is the send and receive buffer forced on the netlink socket: a cold sync of
// 10,000 identities is one batch of ~40,000 messages, and the kernel acks each of them.
const socketBuffer = 256 << 20

// newNLBackend opens a lasting netlink socket in the calling thread's network namespace.
func newNLBackend() (*nlBackend, error) {
	conn, err := nftables.New(nftables.AsLasting(), nftables.WithSockOptions(func(c *netlink.Conn) error {
		raw, err := c.SyscallConn()
		if err != nil {
			return err
		}
		var serr error
		if err := raw.Control(func(fd uintptr) {
			for _, opt := range []int{unix.SO_SNDBUFFORCE, unix.SO_RCVBUFFORCE} {
				if e := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, opt, socketBuffer); e != nil {
					serr = e
				}
			}
		}); err != nil {
			return err
		}
		return serr
	}))
	if err != nil {
		return nil, fmt.Errorf("opening nftables netlink socket: %w", err)
	}
	var r [4]byte
	if _, err := rand.Read(r[:]); err != nil {
		return nil, err
	}
	return &nlBackend{conn: conn, table: &nftables.Table{Family: nftables.TableFamilyIPv4, Name: TableName}, anonPrefix: hex.EncodeToString(r[:])}, nil
}

func (b *nlBackend) name() string { return "netlink" }

func (b *nlBackend) close() error { return b.conn.CloseLasting() }

// nlTxn queues messages on the connection; commit sends them as one batch. Apply calls are
// serialised, so only one nlTxn exists at a time.
type nlTxn struct {
	b   *nlBackend
	n   int
	err error
}

func (b *nlBackend) begin() txn { return &nlTxn{b: b} }

func (b *nlBackend) commit(_ context.Context, tx txn) error {
	t := tx.(*nlTxn)
	if t.err != nil {
		_ = b.conn.Flush() // drop what was queued; it would fail the same way
		return t.err
	}
	return b.conn.Flush()
}

func (t *nlTxn) size() int { return t.n }

func (t *nlTxn) chain(name string) *nftables.Chain {
	return &nftables.Chain{Name: name, Table: t.b.table}
}
func (t *nlTxn) addTable()           { t.n++; t.b.conn.AddTable(t.b.table) }
func (t *nlTxn) addChain(n string)   { t.n++; t.b.conn.AddChain(t.chain(n)) }
func (t *nlTxn) flushChain(n string) { t.n++; t.b.conn.FlushChain(t.chain(n)) }
func (t *nlTxn) deleteChain(n string) {
	t.n++
	t.b.conn.DelChain(t.chain(n))
}
func (t *nlTxn) deleteSet(n string) {
	t.n++
	t.b.conn.DelSet(&nftables.Set{Table: t.b.table, Name: n})
}

func (t *nlTxn) addBaseChain(name, hook, priority string) {
	t.n++
	p, err := strconv.Atoi(priority)
	if err != nil {
		t.fail(fmt.Errorf("base chain %s: priority %q: %w", name, priority, err))
		return
	}
	h := nftables.ChainHookPrerouting
	if hook == "postrouting" {
		h = nftables.ChainHookPostrouting
	}
	accept := nftables.ChainPolicyAccept
	t.b.conn.AddChain(&nftables.Chain{
		Name: name, Table: t.b.table, Type: nftables.ChainTypeNAT,
		Hooknum: h, Priority: nftables.ChainPriorityRef(nftables.ChainPriority(p)), Policy: &accept,
	})
}

var serviceKeyType = nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)

func (t *nlTxn) serviceMap() *nftables.Set {
	return &nftables.Set{Table: t.b.table, Name: ServiceMap, IsMap: true, KeyType: serviceKeyType, DataType: nftables.TypeVerdict}
}

func (t *nlTxn) addServiceMap() {
	t.n++
	t.fail(t.b.conn.AddSet(t.serviceMap(), nil))
}

func (t *nlTxn) addAffinitySet(name string, timeout time.Duration) {
	t.n++
	t.fail(t.b.conn.AddSet(&nftables.Set{
		Table: t.b.table, Name: name, KeyType: nftables.TypeIPAddr,
		Dynamic: true, HasTimeout: true, Timeout: timeout,
	}, nil))
}

func (t *nlTxn) fail(err error) {
	if err != nil && t.err == nil {
		t.err = err
	}
}

func (t *nlTxn) addElement(id gwstate.Identity) {
	t.n++
	t.fail(t.b.conn.SetAddElements(t.serviceMap(), []nftables.SetElement{{
		Key:         serviceKey(id.VIP, id.Protocol, id.Port),
		VerdictData: &expr.Verdict{Kind: expr.VerdictGoto, Chain: IdentityChain(id.VIP, id.Port, id.Protocol)},
	}}))
}

func (t *nlTxn) deleteElement(id gwstate.Identity) {
	t.n++
	t.fail(t.b.conn.SetDeleteElements(t.serviceMap(), []nftables.SetElement{{Key: serviceKey(id.VIP, id.Protocol, id.Port)}}))
}

func (t *nlTxn) deleteElementKey(key []string) {
	port, err := strconv.Atoi(key[2])
	if err != nil || len(key) != 3 {
		t.fail(fmt.Errorf("bad element key %q", key))
		return
	}
	t.deleteElement(gwstate.Identity{VIP: key[0], Protocol: gwstate.Protocol(key[1]), Port: int32(port)})
}

// serviceKey is the concatenation ipv4_addr . inet_proto . inet_service, each part padded to
// a 4-byte register.
func serviceKey(vip string, proto gwstate.Protocol, port int32) []byte {
	k := make([]byte, 12)
	a := netip.MustParseAddr(vip).As4()
	copy(k, a[:])
	k[4] = protoNumber(proto)
	binary.BigEndian.PutUint16(k[8:], uint16(port))
	return k
}

func protoNumber(p gwstate.Protocol) byte {
	if p == gwstate.UDP {
		return unix.IPPROTO_UDP
	}
	return unix.IPPROTO_TCP
}

func protoName(n byte) string {
	switch n {
	case unix.IPPROTO_TCP:
		return "tcp"
	case unix.IPPROTO_UDP:
		return "udp"
	}
	return strconv.Itoa(int(n))
}

// Registers as nft allocates them: NFT_REG_1 (16 bytes) and the 4-byte NFT_REG32_xx.
const (
	regVerdict = 0
	reg1       = 1
	reg2       = 2
	reg32_01   = 9
	reg32_02   = 10
)

func ifname(name string) []byte {
	b := make([]byte, 16)
	copy(b, name)
	return b
}

func (t *nlTxn) addRule(chain string, r rule) {
	t.n++
	var exprs []expr.Any
	switch r.kind {
	case ruleDispatch:
		exprs = []expr.Any{
			&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg32_01},
			&expr.Payload{DestRegister: reg32_02, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Lookup{SourceRegister: reg1, DestRegister: regVerdict, IsDestRegSet: true, SetName: ServiceMap},
		}
	case ruleHairpin:
		exprs = []expr.Any{
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: reg1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: ifname(r.iface)},
			&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: reg1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: ifname(r.iface)},
			&expr.Ct{Key: expr.CtKeySTATUS, Register: reg1},
			&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4,
				Mask: binaryutil.NativeEndian.PutUint32(0x20), Xor: make([]byte, 4)}, // IPS_DST_NAT
			&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: make([]byte, 4)},
			&expr.Masq{FullyRandom: true},
		}
	case ruleDNAT:
		exprs = []expr.Any{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{protoNumber(r.proto)}},
		}
		if len(r.backends) == 1 {
			a := netip.MustParseAddr(r.backends[0].IP).As4()
			exprs = append(exprs,
				&expr.Immediate{Register: reg1, Data: a[:]},
				&expr.Immediate{Register: reg2, Data: binaryutil.BigEndian.PutUint16(uint16(r.backends[0].Port))},
				&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: reg1, RegProtoMin: reg2, Specified: true},
			)
			break
		}
		set := &nftables.Set{Table: t.b.table, Anonymous: true, Constant: true, IsMap: true,
			KeyType:  nftables.TypeInteger,
			DataType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetService)}
		elems := make([]nftables.SetElement, len(r.backends))
		for i, be := range r.backends {
			v := make([]byte, 8)
			a := netip.MustParseAddr(be.IP).As4()
			copy(v, a[:])
			binary.BigEndian.PutUint16(v[4:], uint16(be.Port))
			elems[i] = nftables.SetElement{Key: binaryutil.NativeEndian.PutUint32(uint32(i)), Val: v}
		}
		if err := t.addAnonymousMap(set, elems); err != nil {
			t.fail(err)
			return
		}
		exprs = append(exprs,
			&expr.Numgen{Register: reg1, Modulus: uint32(len(r.backends)), Type: unix.NFT_NG_RANDOM},
			&expr.Lookup{SourceRegister: reg1, DestRegister: reg1, IsDestRegSet: true, SetName: set.Name, SetID: set.ID},
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: reg1, RegProtoMin: reg32_01},
		)
	case ruleAffinityCheck:
		exprs = []expr.Any{
			&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
			&expr.Lookup{SourceRegister: reg1, SetName: r.set},
			&expr.Verdict{Kind: expr.VerdictGoto, Chain: r.chains[0]},
		}
	case ruleAffinityPick:
		set := &nftables.Set{Table: t.b.table, Anonymous: true, Constant: true, IsMap: true,
			KeyType: nftables.TypeInteger, DataType: nftables.TypeVerdict}
		elems := make([]nftables.SetElement, len(r.chains))
		for i, c := range r.chains {
			elems[i] = nftables.SetElement{Key: binaryutil.NativeEndian.PutUint32(uint32(i)),
				VerdictData: &expr.Verdict{Kind: expr.VerdictGoto, Chain: c}}
		}
		if err := t.addAnonymousMap(set, elems); err != nil {
			t.fail(err)
			return
		}
		exprs = []expr.Any{
			&expr.Numgen{Register: reg1, Modulus: uint32(len(r.chains)), Type: unix.NFT_NG_RANDOM},
			&expr.Lookup{SourceRegister: reg1, DestRegister: regVerdict, IsDestRegSet: true, SetName: set.Name, SetID: set.ID},
		}
	case ruleAffinityUpdate:
		exprs = []expr.Any{
			&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
			&expr.Dynset{SrcRegKey: reg1, SetName: r.set, Operation: unix.NFT_DYNSET_OP_UPDATE},
		}
	default:
		t.fail(fmt.Errorf("unknown rule kind %d", r.kind))
		return
	}
	t.b.conn.AddRule(&nftables.Rule{Table: t.b.table, Chain: t.chain(chain), Exprs: exprs})
}

// addAnonymousMap adds an anonymous map keyed by numgen's host-endian integer. The kernel only
// compares bytes, but nft prints the keys using the key byte order recorded in the set's user
// data, and google/nftables v0.3.0 always records "big endian" for anonymous sets: `nft list`
// would show the key 1 as 16777216. nft itself records "host endian" here, so the queued
// NEWSET message is patched to say the same (the real-kernel test compares both listings).
//
// The map also gets its own name and ID instead of "__map%d": for a name with %d the kernel
// scans every set of the table with sscanf to find a free number, which made a cold sync of
// 10,000 identities quadratic (seconds). Anonymous maps are shown inline, so the name is never
// seen; it only has to be unique in the table.
func (t *nlTxn) addAnonymousMap(set *nftables.Set, elems []nftables.SetElement) error {
	t.b.anon++
	set.ID = 1<<31 | uint32(t.b.anon&0x7fffffff)
	set.Name = fmt.Sprintf("__map%s_%d", t.b.anonPrefix, t.b.anon)
	before := len(*queuedMessages(t.b.conn))
	if err := t.b.conn.AddSet(set, elems); err != nil {
		return err
	}
	msgs := *queuedMessages(t.b.conn)
	if len(msgs) <= before {
		return errors.New("anonymous map: no NEWSET message was queued")
	}
	newset := &msgs[before]
	// NFTA_SET_USERDATA (len 10, type 13) holding one TLV: NFTNL_UDATA_SET_KEYBYTEORDER
	// (type 0, len 4) = 2 (big endian).
	pattern := []byte{10, 0, 13, 0, 0, 4, 2, 0, 0, 0}
	i := bytes.Index(newset.Data, pattern)
	if i < 0 {
		return errors.New("anonymous map: key byte order user data not found in the NEWSET message")
	}
	newset.Data[i+6] = 1 // host endian
	return nil
}

// queuedMessages exposes the messages google/nftables has queued for the next Flush.
func queuedMessages(c *nftables.Conn) *[]netlink.Message {
	f := reflect.ValueOf(c).Elem().FieldByName("messages")
	return (*[]netlink.Message)(unsafe.Pointer(f.UnsafeAddr()))
}

func isNotFound(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, os.ErrNotExist)
}

// chainNames lists the chains of the table (nil when the table is missing).
func (b *nlBackend) chainNames() ([]string, error) {
	chains, err := b.conn.ListChainsOfTableFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return nil, fmt.Errorf("listing chains: %w", err)
	}
	var names []string
	for _, c := range chains {
		if c.Table != nil && c.Table.Name == TableName {
			names = append(names, c.Name)
		}
	}
	return names, nil
}

func (b *nlBackend) tableExists() (bool, error) {
	_, err := b.conn.ListTableOfFamily(TableName, nftables.TableFamilyIPv4)
	if err != nil {
		if isNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("getting table ip %s: %w", TableName, err)
	}
	return true, nil
}

func (b *nlBackend) inventory(context.Context) (*inventory, error) {
	inv := &inventory{}
	ok, err := b.tableExists()
	if err != nil || !ok {
		return inv, err
	}
	if inv.chains, err = b.chainNames(); err != nil {
		return nil, err
	}
	sets, err := b.conn.GetSets(b.table)
	if err != nil {
		return nil, fmt.Errorf("listing sets: %w", err)
	}
	var svc *nftables.Set
	for _, s := range sets {
		if s.Anonymous {
			continue
		}
		if s.Name == ServiceMap && s.IsMap {
			svc = s
			continue
		}
		inv.sets = append(inv.sets, s.Name)
	}
	if svc == nil {
		return inv, nil
	}
	elems, err := b.conn.GetSetElements(svc)
	if err != nil {
		return nil, fmt.Errorf("listing map %s: %w", ServiceMap, err)
	}
	for _, e := range elems {
		if len(e.Key) < 10 {
			continue
		}
		key := []string{netip.AddrFrom4([4]byte(e.Key[:4])).String(), protoName(e.Key[4]), strconv.Itoa(int(binary.BigEndian.Uint16(e.Key[8:10])))}
		value := ""
		if e.VerdictData != nil {
			switch e.VerdictData.Kind {
			case expr.VerdictGoto:
				value = "goto " + e.VerdictData.Chain
			case expr.VerdictJump:
				value = "jump " + e.VerdictData.Chain
			default:
				value = fmt.Sprintf("verdict %d", e.VerdictData.Kind)
			}
		}
		inv.elements = append(inv.elements, element{key: key, value: value})
	}
	return inv, nil
}

func (b *nlBackend) check(ctx context.Context, want expectation) (string, error) {
	ok, err := b.tableExists()
	if err != nil {
		return "", err
	}
	if !ok {
		return "table ip " + TableName + " is missing", nil
	}
	for _, base := range []string{BaseChain, PostroutingChain} {
		rules, err := b.conn.GetRules(b.table, &nftables.Chain{Name: base, Table: b.table})
		if isNotFound(err) {
			return "chain " + base + " is missing", nil
		}
		if err != nil {
			return "", fmt.Errorf("listing rules of %s: %w", base, err)
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
