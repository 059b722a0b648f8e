package dataplane

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// Adoption on the netlink path (SPEC P7). A full sync (a restarted agent, a retry, a drift
// repair) reads the table's content back and leaves alone every identity whose objects hold
// exactly what writeObjects would write for it, and the base objects when they are what
// writeBase writes: nlContent compares them with renderRule's output, rule by rule.
//
// What is read, one dump each: the chains (names, hooks), the sets (names, flags, types,
// timeouts), every rule of the table (expressions and user data), the elements of service-ips and
// of the ownership sets; and, per identity with source ranges only, the elements of its src- set.
//
// The anonymous maps are not read: the kernel finds a set to dump by walking the table's list of
// sets, so dumping 10,000 maps one by one took 3 s (BenchmarkP2Restart's table, 2026-12-07).
// Instead a rule with an anonymous map carries a digest of the map's elements in its user data,
// after its comment (mapDigestData), and the kernel vouches for the rest: an anonymous map is
// created in the transaction of the rule that binds it, is bound to that rule only, and refuses
// any change of its elements while bound (adding: EBUSY, deleting: EOPNOTSUPP, seen on 6.18).
// So the map holds what it held when the rule was written, and the digest says what that was. A
// hand edit replaces the rule (nft replace or insert), with nft's user data: nft does not show
// the digest, so a listing fed back to nft loses it too. Only a writer that copies the agent's
// user data byte for byte into its own rule with another map would pass: forgery, not drift.

// udataMapDigest is the type of the rule user data entry holding the digest of the rule's
// anonymous map: one libnftnl does not define for rules (it has 0, the comment, and 1), so nft
// skips it when it lists the rule.
const udataMapDigest userdata.Type = 0x76

// nfAccept is the verdict NF_ACCEPT, a base chain's policy accept.
const nfAccept = 1

// mapDigestData is the user data entry with the digest of an anonymous map's elements, in order
// (keys, values, verdicts): 16 bytes of SHA-256.
func mapDigestData(elems []nftables.SetElement) []byte {
	var buf []byte
	for _, e := range elems {
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(e.Key)))
		buf = append(buf, e.Key...)
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(e.Val)))
		buf = append(buf, e.Val...)
		if v := e.VerdictData; v != nil {
			buf = binary.BigEndian.AppendUint32(buf, uint32(v.Kind))
			buf = append(buf, v.Chain...)
			buf = append(buf, 0)
		}
	}
	sum := sha256.Sum256(buf)
	return userdata.Append(nil, udataMapDigest, sum[:16])
}

// chainInfo is a chain as listed: a base chain has a hook.
type chainInfo struct {
	base     bool
	hook     uint32
	priority int32
	typ      string
	policy   uint32
}

// setInfo is a set as listed (NFTA_SET_* attributes); timeout in milliseconds, 0 for none.
type setInfo struct {
	flags, keyType, keyLen, dataType, dataLen uint32
	timeout                                   uint64
}

type listedSet struct {
	name string
	setInfo
}

// listedRule is a rule as dumped: its expressions undecoded (decoded when compared).
type listedRule struct {
	handle uint64
	exprs  []byte
	udata  []byte
}

// nlContent is the table's content as the netlink backend read it for a full sync.
type nlContent struct {
	b      *nlBackend
	chains map[string]chainInfo
	sets   map[string]setInfo
	rules  map[string][]listedRule
}

// dumpTable dumps the objects of one kind (msgType GETCHAIN, GETSET or GETRULE; answers of type
// want) of the table and hands each one's attributes to fn. Objects of other tables are skipped:
// not every kernel filters a chain dump by table.
func (b *nlBackend) dumpTable(msgType, want, tableAttr uint16, fn func(ad *netlink.AttributeDecoder) error) error {
	attrs, err := netlink.MarshalAttributes([]netlink.Attribute{{Type: tableAttr, Data: []byte(TableName + "\x00")}})
	if err != nil {
		return err
	}
	return b.request(msgType, netlink.Dump, attrs, func(typ uint16, body []byte) error {
		if typ&0xff != want || attrString(body, tableAttr) != TableName {
			return nil
		}
		ad, err := netlink.NewAttributeDecoder(body)
		if err != nil {
			return err
		}
		ad.ByteOrder = binary.BigEndian
		return fn(ad)
	})
}

// attrString is the string attribute typ of body ("" if absent or malformed).
func attrString(body []byte, typ uint16) string {
	ad, err := netlink.NewAttributeDecoder(body)
	if err != nil {
		return ""
	}
	for ad.Next() {
		if ad.Type() == typ {
			return ad.String()
		}
	}
	return ""
}

// listChains lists the table's chains, by name and in the kernel's order.
func (b *nlBackend) listChains() ([]string, map[string]chainInfo, error) {
	var names []string
	chains := map[string]chainInfo{}
	err := b.dumpTable(unix.NFT_MSG_GETCHAIN, unix.NFT_MSG_NEWCHAIN, unix.NFTA_CHAIN_TABLE, func(ad *netlink.AttributeDecoder) error {
		var name string
		var c chainInfo
		for ad.Next() {
			switch ad.Type() {
			case unix.NFTA_CHAIN_NAME:
				name = ad.String()
			case unix.NFTA_CHAIN_HOOK:
				c.base = true
				ad.Nested(func(h *netlink.AttributeDecoder) error {
					h.ByteOrder = binary.BigEndian
					for h.Next() {
						switch h.Type() {
						case unix.NFTA_HOOK_HOOKNUM:
							c.hook = h.Uint32()
						case unix.NFTA_HOOK_PRIORITY:
							c.priority = int32(h.Uint32())
						}
					}
					return h.Err()
				})
			case unix.NFTA_CHAIN_TYPE:
				c.typ = ad.String()
			case unix.NFTA_CHAIN_POLICY:
				c.policy = ad.Uint32()
			}
		}
		names = append(names, name)
		chains[name] = c
		return ad.Err()
	})
	if err != nil {
		return nil, nil, fmt.Errorf("listing the chains of table ip %s: %w", TableName, err)
	}
	return names, chains, nil
}

// listSets lists the table's sets, anonymous ones included, in the kernel's order.
func (b *nlBackend) listSets() ([]listedSet, error) {
	var out []listedSet
	err := b.dumpTable(unix.NFT_MSG_GETSET, unix.NFT_MSG_NEWSET, unix.NFTA_SET_TABLE, func(ad *netlink.AttributeDecoder) error {
		var s listedSet
		for ad.Next() {
			switch ad.Type() {
			case unix.NFTA_SET_NAME:
				s.name = ad.String()
			case unix.NFTA_SET_FLAGS:
				s.flags = ad.Uint32()
			case unix.NFTA_SET_KEY_TYPE:
				s.keyType = ad.Uint32()
			case unix.NFTA_SET_KEY_LEN:
				s.keyLen = ad.Uint32()
			case unix.NFTA_SET_DATA_TYPE:
				s.dataType = ad.Uint32()
			case unix.NFTA_SET_DATA_LEN:
				s.dataLen = ad.Uint32()
			case unix.NFTA_SET_TIMEOUT:
				s.timeout = ad.Uint64()
			}
		}
		out = append(out, s)
		return ad.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("listing the sets of table ip %s: %w", TableName, err)
	}
	return out, nil
}

// listRules reads every rule of the table in one dump, by chain, in each chain's order.
func (b *nlBackend) listRules() (map[string][]listedRule, error) {
	out := map[string][]listedRule{}
	err := b.dumpTable(unix.NFT_MSG_GETRULE, unix.NFT_MSG_NEWRULE, unix.NFTA_RULE_TABLE, func(ad *netlink.AttributeDecoder) error {
		var chain string
		var r listedRule
		for ad.Next() {
			switch ad.Type() {
			case unix.NFTA_RULE_CHAIN:
				chain = ad.String()
			case unix.NFTA_RULE_HANDLE:
				r.handle = ad.Uint64()
			case unix.NFTA_RULE_EXPRESSIONS:
				r.exprs = ad.Bytes()
			case unix.NFTA_RULE_USERDATA:
				r.udata = ad.Bytes()
			}
		}
		out[chain] = append(out[chain], r)
		return ad.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("listing the rules of table ip %s: %w", TableName, err)
	}
	return out, nil
}

// baseMatches reports whether service-ips, the ownership and guard sets and the base chains are
// what writeBase writes for iface: the sets' types, each base chain's type, hook, priority and
// policy, and its rules. (kube-ovn's share DNAT writes the same dispatch rule: it matches too.)
func (c *nlContent) baseMatches(iface string) bool {
	t := c.b.table
	if !c.setMatches(ServiceMap, serviceMapOf(t)) || !c.setMatches(OwnedSet, ownedSetOf(t)) || !c.setMatches(VIPSet, vipSetOf(t)) ||
		!c.setMatches(EndpointSet, endpointSetOf(t)) || !c.setMatches(ReplyMap, replyMapOf(t)) {
		return false
	}
	for _, bc := range baseChains(iface) {
		if !c.baseChainMatches(bc) {
			return false
		}
	}
	return true
}

var hookNumbers = map[string]uint32{"prerouting": unix.NF_INET_PRE_ROUTING, "postrouting": unix.NF_INET_POST_ROUTING,
	"forward": unix.NF_INET_FORWARD, "input": unix.NF_INET_LOCAL_IN}

func (c *nlContent) baseChainMatches(bc baseChain) bool {
	ci, ok := c.chains[bc.name]
	p, err := strconv.Atoi(bc.priority)
	return ok && err == nil && ci.base && ci.typ == bc.typ && ci.hook == hookNumbers[bc.hook] && ci.priority == int32(p) &&
		ci.policy == nfAccept && c.rulesMatch(bc.name, bc.rules)
}

// identityMatches reports whether id's objects hold what writeObjects writes for it: the
// identity chain's rules; with source ranges, the src- set and its elements; with affinity, each
// backend's affinity set (type, timeout; its entries are the clients') and endpoint chain.
func (c *nlContent) identityMatches(id gwstate.Identity) bool {
	if !c.chainMatches(IdentityChain(id.Key()), identityRules(id)) {
		return false
	}
	if len(id.SourceRanges) > 0 && !c.sourceSetMatches(SourceSet(id), sourcePrefixes(id.SourceRanges)) {
		return false
	}
	if id.AffinityTimeoutSeconds <= 0 {
		return true
	}
	timeout := time.Duration(id.AffinityTimeoutSeconds) * time.Second
	for _, b := range id.Backends {
		set := AffinitySet(id, b)
		if !c.setMatches(set, affinitySetOf(c.b.table, set, timeout)) || !c.chainMatches(EndpointChain(id, b), endpointRules(id, b)) {
			return false
		}
	}
	return true
}

// chainMatches reports whether name is a regular chain holding exactly rules.
func (c *nlContent) chainMatches(name string, rules []rule) bool {
	ci, ok := c.chains[name]
	return ok && !ci.base && c.rulesMatch(name, rules)
}

func (c *nlContent) rulesMatch(chain string, want []rule) bool {
	got := c.rules[chain]
	if len(got) != len(want) {
		return false
	}
	for i := range want {
		if !c.ruleMatches(got[i], want[i]) {
			return false
		}
	}
	return true
}

// ruleMatches compares a rule read back with what renderRule renders for want: the user data
// byte for byte (comment, map digest), the expressions one by one as decoded, where the lookup
// of an anonymous map must name an anonymous, constant map of the rendered types (the digest
// vouches for its elements).
func (c *nlContent) ruleMatches(got listedRule, want rule) bool {
	rr, err := renderRule(c.b.table, want.withPick(c.b.pick))
	if err != nil || !bytes.Equal(got.udata, rr.udata) {
		return false
	}
	exprs, err := decodeExprs(got.exprs)
	if err != nil || len(exprs) != len(rr.exprs) {
		return false
	}
	for i, e := range exprs {
		w := kernelForm(rr.exprs[i])
		if rr.anon != nil && rr.exprs[i] == expr.Any(rr.anon.lookup) {
			l, ok := e.(*expr.Lookup)
			if !ok || !c.setMatches(l.SetName, rr.anon.set) {
				return false
			}
			named := *rr.anon.lookup
			named.SetName = l.SetName
			w = &named
		}
		if !reflect.DeepEqual(e, w) {
			return false
		}
	}
	return true
}

// kernelForm is e as the kernel lists it back: the ct key patched by patchCtDstIP; a NAT's
// maximum registers, which the kernel sets to the minimum ones when they are not given, and the
// flag it adds with a port register.
func kernelForm(e expr.Any) expr.Any {
	switch x := e.(type) {
	case *expr.Ct:
		if x.Key == expr.CtKeyDST {
			y := *x
			y.Key = unix.NFT_CT_DST_IP
			return &y
		}
	case *expr.NAT:
		y := *x
		if y.RegAddrMin != 0 && y.RegAddrMax == 0 {
			y.RegAddrMax = y.RegAddrMin
		}
		if y.RegProtoMin != 0 && y.RegProtoMax == 0 {
			y.RegProtoMax = y.RegProtoMin
			y.Specified = true
		}
		return &y
	}
	return e
}

// setMatches reports whether the set name exists with want's flags, types and timeout.
func (c *nlContent) setMatches(name string, want *nftables.Set) bool {
	s, ok := c.sets[name]
	if !ok || s.flags != setFlags(want) || s.keyType != want.KeyType.GetNFTMagic() || s.keyLen != want.KeyType.Bytes {
		return false
	}
	if want.HasTimeout && s.timeout != uint64(want.Timeout.Milliseconds()) {
		return false
	}
	switch {
	case !want.IsMap:
		return true
	case want.DataType.GetNFTMagic() == nftables.TypeVerdict.GetNFTMagic():
		return s.dataType == unix.NFT_DATA_VERDICT
	}
	return s.dataType == want.DataType.GetNFTMagic() && s.dataLen == want.DataType.Bytes
}

// setFlags are the NFT_SET_* flags google/nftables sends for s (Conn.AddSet).
func setFlags(s *nftables.Set) uint32 {
	var f uint32
	for _, x := range []struct {
		on   bool
		flag uint32
	}{
		{s.Anonymous, unix.NFT_SET_ANONYMOUS}, {s.Constant, unix.NFT_SET_CONSTANT}, {s.Interval, unix.NFT_SET_INTERVAL},
		{s.IsMap, unix.NFT_SET_MAP}, {s.HasTimeout, unix.NFT_SET_TIMEOUT}, {s.Dynamic, unix.NFT_SET_EVAL},
		{s.Concatenation, nftables.NFT_SET_CONCAT},
	} {
		if x.on {
			f |= x.flag
		}
	}
	return f
}

// sourceSetMatches reads the elements of the source set name (one dump) and compares them, and
// the set's type, with what setSourceRanges writes for prefixes. A failed read is a mismatch:
// the identity is rewritten.
func (c *nlContent) sourceSetMatches(name string, prefixes []netip.Prefix) bool {
	if !c.setMatches(name, sourceSetOf(c.b.table, name)) {
		return false
	}
	listed, err := c.b.setElements(name)
	if err != nil {
		return false
	}
	got := make([]string, 0, len(listed))
	for _, e := range listed {
		got = append(got, elementForm(e.Key, e.flags, e.udata))
	}
	elems, _ := sourceElements(prefixes)
	want := make([]string, 0, len(elems))
	for _, e := range elems {
		var flags uint32
		var udata []byte
		if e.IntervalEnd {
			flags = unix.NFT_SET_ELEM_INTERVAL_END
		}
		if e.Comment != "" { // the open interval's flag (patchOpenInterval)
			udata = userdata.AppendUint32(nil, userdata.NFTNL_UDATA_SET_ELEM_FLAGS, 1)
		}
		want = append(want, elementForm(e.Key, flags, udata))
	}
	slices.Sort(got)
	slices.Sort(want)
	return slices.Equal(got, want)
}

// elementForm is a set element (key, flags, user data) as one comparable string.
func elementForm(key []byte, flags uint32, udata []byte) string {
	return hex.EncodeToString(key) + "/" + strconv.FormatUint(uint64(flags), 16) + "/" + hex.EncodeToString(udata)
}

// decodeExprs decodes a rule's NFTA_RULE_EXPRESSIONS. Only the expressions the agent writes are
// known: any other fails the decoding (google/nftables' own decoder skips unknown expressions,
// which would make a rule with an extra one look like the agent's).
func decodeExprs(b []byte) ([]expr.Any, error) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return nil, err
	}
	var out []expr.Any
	for ad.Next() {
		if ad.Type() != unix.NFTA_LIST_ELEM {
			return nil, fmt.Errorf("attribute %d in a rule's expressions", ad.Type())
		}
		e, err := decodeExpr(ad.Bytes())
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, ad.Err()
}

// decodeExpr decodes one expression (NFTA_EXPR_NAME, NFTA_EXPR_DATA).
func decodeExpr(b []byte) (expr.Any, error) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return nil, err
	}
	var name string
	var data []byte
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_EXPR_NAME:
			name = ad.String()
		case unix.NFTA_EXPR_DATA:
			data = ad.Bytes()
		}
	}
	if err := ad.Err(); err != nil {
		return nil, err
	}
	if name == "ct" {
		return decodeCt(data)
	}
	e := newExpr(name)
	if e == nil {
		return nil, fmt.Errorf("expression %q is not one the agent writes", name)
	}
	fam := byte(nftables.TableFamilyIPv4)
	if err := expr.Unmarshal(fam, data, e); err != nil {
		return nil, err
	}
	// A verdict is an immediate into the verdict register (as google/nftables decodes it).
	if imm, ok := e.(*expr.Immediate); ok && imm.Register == unix.NFT_REG_VERDICT && len(imm.Data) == 0 {
		v := &expr.Verdict{}
		if err := expr.Unmarshal(fam, data, v); err != nil {
			return nil, err
		}
		return v, nil
	}
	return e, nil
}

// decodeCt decodes a ct load. google/nftables v0.3.0 reads NFTA_CT_DIRECTION as 32 bits; the
// kernel sends 8.
func decodeCt(data []byte) (expr.Any, error) {
	ad, err := netlink.NewAttributeDecoder(data)
	if err != nil {
		return nil, err
	}
	ad.ByteOrder = binary.BigEndian
	e := &expr.Ct{}
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_CT_KEY:
			e.Key = expr.CtKey(ad.Uint32())
		case unix.NFTA_CT_DREG:
			e.Register = ad.Uint32()
		case unix.NFTA_CT_DIRECTION:
			e.Direction = uint32(ad.Uint8())
		default:
			return nil, fmt.Errorf("ct attribute %d is not one the agent writes", ad.Type())
		}
	}
	return e, ad.Err()
}

// newExpr is an empty expression of the kinds renderRule writes, nil for any other name.
func newExpr(name string) expr.Any {
	switch name {
	case "payload":
		return &expr.Payload{}
	case "meta":
		return &expr.Meta{}
	case "cmp":
		return &expr.Cmp{}
	case "immediate":
		return &expr.Immediate{}
	case "nat":
		return &expr.NAT{}
	case "numgen":
		return &expr.Numgen{}
	case "hash":
		return &expr.Hash{}
	case "lookup":
		return &expr.Lookup{}
	case "dynset":
		return &expr.Dynset{}
	case "bitwise":
		return &expr.Bitwise{}
	case "masq":
		return &expr.Masq{}
	}
	return nil
}
