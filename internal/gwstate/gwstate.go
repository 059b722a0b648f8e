// Package gwstate is the wire contract between the controller and the gateway agent: the complete
// desired data plane of one gateway instance, and the agent's acknowledgement. It is pure data with
// normalisation and validation, so both ends agree on what a valid state is.
package gwstate

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
)

// Protocol is a transport protocol as nftables spells it (lowercase).
type Protocol string

const (
	TCP Protocol = "tcp"
	UDP Protocol = "udp"
)

// State is everything one gateway instance must serve. It is always complete: the agent converges
// the kernel to it, removing what it owns and the state no longer names.
type State struct {
	// Generation increases with every state the controller sends on one stream; the agent echoes
	// it in its Ack.
	Generation int64      `json:"generation"`
	Identities []Identity `json:"identities"`
	// ClusterIPs are the Service ClusterIPs the instance holds as <ip>/32 on lo with label
	// lo:ko-vip (SPEC D5), sorted. The agent converges that label's addresses to exactly this set.
	ClusterIPs []string `json:"clusterIPs,omitempty"`

	// Base > 0 makes the message a delta against the state of generation Base, the last one the
	// agent accepted on this stream: Identities then adds or replaces identities by key, Removed
	// removes identities, and ClusterIPs stays complete. The controller sends deltas only to an
	// agent that said it accepts them (Ack.Deltas), so an older agent always gets complete states.
	Base    int64         `json:"base,omitempty"`
	Removed []IdentityKey `json:"removed,omitempty"`

	// Ping > 0 makes the line a keepalive, not a state: the agent changes nothing and answers
	// Ack.Pong = Ping. The controller pings only an agent that said it answers them
	// (Ack.Keepalive): an older agent would take the line for an empty state.
	Ping int64 `json:"ping,omitempty"`
}

// Identity is one (VIP, port, protocol) the gateway answers for (SPEC I1) with its backends.
type Identity struct {
	VIP      string   `json:"vip"`
	Port     int32    `json:"port"`
	Protocol Protocol `json:"protocol"`
	// Backends are sorted and de-duplicated by Normalize. An identity with no backends is not
	// dispatched: packets to it are not DNATed.
	Backends []Backend `json:"backends"`
	// AffinityTimeoutSeconds > 0 asks for ClientIP affinity with that timeout (SPEC S7, D3).
	AffinityTimeoutSeconds int32 `json:"affinityTimeoutSeconds,omitempty"`
	// SourceRanges, when not empty, are the only client prefixes (canonical IPv4 CIDRs, sorted as
	// strings, unique)
	// that may reach the identity; others are dropped (a Service's loadBalancerSourceRanges on its
	// EIP identities, SPEC N7).
	SourceRanges []string `json:"sourceRanges,omitempty"`
	// Group names the identities that are programmed or refused together (those of one Service,
	// SPEC D8): when the agent refuses one identity of a group, it holds back the group's other
	// changed identities of the same message too. Empty: the identity is its own group.
	Group string `json:"group,omitempty"`
}

// Equal reports whether two identities program the same thing.
func (id Identity) Equal(o Identity) bool {
	return id.ID() == o.ID() && id.AffinityTimeoutSeconds == o.AffinityTimeoutSeconds && id.Group == o.Group &&
		slices.Equal(id.Backends, o.Backends) && slices.Equal(id.SourceRanges, o.SourceRanges)
}

// Backend is one DNAT target.
type Backend struct {
	IP   string `json:"ip"`
	Port int32  `json:"port"`
}

// Ack is the agent's answer to one State: the generation it applied, or why it could not.
type Ack struct {
	Generation int64  `json:"generation"`
	Error      string `json:"error,omitempty"`
	// ConntrackDeleted counts the conntrack entries the agent deleted while applying this state
	// (SPEC D6), for the controller's metrics.
	ConntrackDeleted int `json:"conntrackDeleted,omitempty"`
	// Deltas: the agent accepts delta states (State.Base) on this stream.
	Deltas bool `json:"deltas,omitempty"`
	// Keepalive: the agent answers State.Ping; Pong is the answer to one (no state applied).
	Keepalive bool  `json:"keepalive,omitempty"`
	Pong      int64 `json:"pong,omitempty"`
	// AgentVersion is the agent's build (internal/version), in the first acknowledgement of a
	// stream only. Agents older than the field leave it out; readers must accept that.
	AgentVersion string `json:"agentVersion,omitempty"`
	// Protocol is the version of this contract the agent speaks (ProtocolVersion); agents older
	// than named refusals leave it out (version 1).
	Protocol int `json:"protocol,omitempty"`
	// Refused names the identities of the state the agent did not program, and why: its
	// validation or the kernel refused them (SPEC D8, N2, N4). For each, the gateway keeps what
	// this agent had committed for that key before (or nothing); every other identity of the state
	// is programmed, in the same round trip. The list is complete on every acknowledgement of a
	// state: an identity refused before and still in the state is named again (the agent tries it
	// again with every message). Sorted by key, at most MaxRefusals entries.
	Refused []Refusal `json:"refused,omitempty"`
}

// ProtocolVersion is the version of the state/acknowledgement contract this package defines:
// 1 complete states, deltas (Ack.Deltas) and keepalives (Ack.Keepalive); 2 adds named refusals
// (Ack.Refused). An agent of version 1 refuses a state as a whole (Ack.Error).
const ProtocolVersion = 2

// MaxRefusals bounds Ack.Refused (with MaxRefusalReason, an acknowledgement stays far under the
// controller's line bound, SPEC N6). An agent that would refuse more refuses the state whole.
const MaxRefusals = 2048

// MaxRefusalReason bounds the bytes of one Refusal.Reason.
const MaxRefusalReason = 240

// Refusal is one identity the agent refused, with the validation's or the kernel's words.
type Refusal struct {
	IdentityKey
	Reason string `json:"reason"`
}

// Key identifies an identity in maps and logs: "<vip>:<port>:<proto>".
func (id Identity) Key() string { return id.ID().String() }

func (b Backend) String() string { return fmt.Sprintf("%s:%d", b.IP, b.Port) }

// Normalize sorts identities and backends and removes duplicate backends, so that equal desired
// states have equal encodings (SPEC D2: an unchanged backend set yields an identical ruleset).
func (s *State) Normalize() {
	for i := range s.Identities {
		id := &s.Identities[i]
		slices.SortFunc(id.Backends, compareBackends)
		id.Backends = slices.Compact(id.Backends)
	}
	s.SortIdentities()
	slices.SortFunc(s.Removed, CompareKeys)
	s.Removed = slices.Compact(s.Removed)
}

// SortIdentities is Normalize for a state whose backends are already sorted and de-duplicated
// (the controller's model makes them so): it sorts the identities and ClusterIPs only. Each
// address is parsed once, not at every comparison: at 10,000 identities per sync that parsing
// was most of the controller's time.
func (s *State) SortIdentities() {
	type keyed struct {
		addr netip.Addr
		ok   bool
		id   Identity
	}
	ks := make([]keyed, len(s.Identities))
	for i, id := range s.Identities {
		a, err := netip.ParseAddr(id.VIP)
		ks[i] = keyed{addr: a, ok: err == nil, id: id}
	}
	slices.SortFunc(ks, func(a, b keyed) int {
		c := 0
		if a.ok && b.ok {
			c = a.addr.Compare(b.addr)
		} else {
			c = cmp.Compare(a.id.VIP, b.id.VIP)
		}
		return cmp.Or(c, cmp.Compare(a.id.Port, b.id.Port), cmp.Compare(a.id.Protocol, b.id.Protocol))
	})
	for i := range ks {
		s.Identities[i] = ks[i].id
	}
	s.ClusterIPs = SortAddrs(s.ClusterIPs)
}

// SortAddrs sorts addresses numerically (garbage by string order, as Validate rejects it anyway)
// and removes duplicates, parsing each address once.
func SortAddrs(addrs []string) []string {
	type keyed struct {
		addr netip.Addr
		ok   bool
		s    string
	}
	ks := make([]keyed, len(addrs))
	for i, a := range addrs {
		p, err := netip.ParseAddr(a)
		ks[i] = keyed{addr: p, ok: err == nil, s: a}
	}
	slices.SortFunc(ks, func(a, b keyed) int {
		if a.ok && b.ok {
			return a.addr.Compare(b.addr)
		}
		return cmp.Compare(a.s, b.s)
	})
	for i := range ks {
		addrs[i] = ks[i].s
	}
	return slices.Compact(addrs)
}

// Validate reports the first problem that would make the state unsafe to apply: its shape
// (ValidateShape) or one of its identities (Identity.Validate).
func (s State) Validate() error {
	if err := s.ValidateShape(); err != nil {
		return err
	}
	for _, id := range s.Identities {
		if err := id.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// ValidateShape reports what makes the message as a whole unusable: an identity key twice, a
// malformed ClusterIP, a bad base generation or removed key. Identities themselves are checked
// one by one (Identity.Validate), so that an agent refuses only the identities that are wrong
// and programs the others (SPEC D8, N4).
func (s State) ValidateShape() error {
	seen := make(map[IdentityKey]bool, len(s.Identities))
	for _, id := range s.Identities {
		if seen[id.ID()] {
			return fmt.Errorf("identity %s appears twice", id.Key())
		}
		seen[id.ID()] = true
	}
	for _, ip := range s.ClusterIPs {
		if err := validIPv4(ip); err != nil {
			return fmt.Errorf("clusterIP: %w", err)
		}
	}
	switch {
	case s.Base < 0:
		return fmt.Errorf("base generation %d is negative", s.Base)
	case s.Base == 0 && len(s.Removed) > 0:
		return fmt.Errorf("a complete state (no base generation) cannot remove identities")
	}
	for _, k := range s.Removed {
		if err := k.validate(); err != nil {
			return fmt.Errorf("removed identity %s: %w", k, err)
		}
		if seen[k] {
			return fmt.Errorf("identity %s is both set and removed", k)
		}
	}
	return nil
}

// Validate reports the first problem that would make the identity unsafe to program.
func (id Identity) Validate() error {
	if err := id.ID().validate(); err != nil {
		return fmt.Errorf("identity %s: %w", id.Key(), err)
	}
	if id.AffinityTimeoutSeconds < 0 || id.AffinityTimeoutSeconds > 86400 {
		return fmt.Errorf("identity %s: affinity timeout %d is outside 0..86400", id.Key(), id.AffinityTimeoutSeconds)
	}
	for _, b := range id.Backends {
		if err := ValidBackendAddr(b.IP); err != nil {
			return fmt.Errorf("identity %s: backend %s: %w", id.Key(), b, err)
		}
		if err := validPort(b.Port); err != nil {
			return fmt.Errorf("identity %s: backend %s: %w", id.Key(), b, err)
		}
	}
	for i, r := range id.SourceRanges {
		p, err := netip.ParsePrefix(r)
		if err != nil || !p.Addr().Is4() || p.Masked() != p {
			return fmt.Errorf("identity %s: source range %q is not a canonical IPv4 CIDR", id.Key(), r)
		}
		if i > 0 && id.SourceRanges[i-1] >= r {
			return fmt.Errorf("identity %s: source ranges are not sorted (as strings) and unique", id.Key())
		}
	}
	return nil
}

func (k IdentityKey) validate() error {
	if err := validIPv4(k.VIP); err != nil {
		return fmt.Errorf("vip: %w", err)
	}
	if err := validPort(k.Port); err != nil {
		return err
	}
	if k.Protocol != TCP && k.Protocol != UDP {
		return fmt.Errorf("protocol %q is not tcp or udp", k.Protocol)
	}
	return nil
}

// String is the key as Identity.Key spells it: "<vip>:<port>:<proto>".
func (k IdentityKey) String() string { return fmt.Sprintf("%s:%d:%s", k.VIP, k.Port, k.Protocol) }

// ValidBackendAddr refuses what must never be a DNAT target (SPEC N2): anything but a unicast
// IPv4 address, and loopback, link-local (the metadata address among them), multicast, broadcast
// and unspecified addresses.
func ValidBackendAddr(s string) error {
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil || !a.Is4():
		return fmt.Errorf("%q is not an IPv4 address", s)
	case a.IsLoopback():
		return fmt.Errorf("%s is a loopback address", s)
	case a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast():
		return fmt.Errorf("%s is a link-local address", s)
	case a.IsMulticast():
		return fmt.Errorf("%s is a multicast address", s)
	case a.IsUnspecified():
		return fmt.Errorf("%s is the unspecified address", s)
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return fmt.Errorf("%s is the broadcast address", s)
	}
	return nil
}

func validIPv4(s string) error {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return fmt.Errorf("%q is not an IPv4 address", s)
	}
	return nil
}

func validPort(p int32) error {
	if p < 1 || p > 65535 {
		return fmt.Errorf("port %d is outside 1..65535", p)
	}
	return nil
}

func compareBackends(a, b Backend) int {
	return cmp.Or(CompareAddrs(a.IP, b.IP), cmp.Compare(a.Port, b.Port))
}

// CompareAddrs orders IPv4 addresses numerically, falling back to string order for garbage so
// that sorting never panics on input Validate will reject.
func CompareAddrs(a, b string) int {
	pa, errA := netip.ParseAddr(a)
	pb, errB := netip.ParseAddr(b)
	if errA != nil || errB != nil {
		return cmp.Compare(a, b)
	}
	return pa.Compare(pb)
}

// IdentityKey names an identity: (VIP, port, protocol).
type IdentityKey struct {
	VIP      string   `json:"vip"`
	Port     int32    `json:"port"`
	Protocol Protocol `json:"protocol"`
}

// ID is the identity's key.
func (id Identity) ID() IdentityKey {
	return IdentityKey{VIP: id.VIP, Port: id.Port, Protocol: id.Protocol}
}

func CompareKeys(a, b IdentityKey) int {
	return cmp.Or(CompareAddrs(a.VIP, b.VIP), cmp.Compare(a.Port, b.Port), cmp.Compare(a.Protocol, b.Protocol))
}

// IsDelta reports whether the message is a delta (Base > 0) rather than a complete state.
func (s State) IsDelta() bool { return s.Base > 0 }

// Delta is the message that turns the complete state old into the complete state new: the
// identities of new that are not in old as they are, the keys of old's identities that new
// lacks, and new's ClusterIPs. Both must be normalized. Generation and Base are left to the
// sender. A change to one Service at 10,000 identities is then a line of a few hundred bytes
// instead of megabytes (SPEC P1, P3).
func Delta(old, new State) State {
	d := State{Identities: []Identity{}, ClusterIPs: new.ClusterIPs}
	// Both lists are sorted: walk them together. Keys are compared as strings first; the
	// ordering comparison (which parses addresses) runs only where the lists differ.
	i, j := 0, 0
	for i < len(old.Identities) || j < len(new.Identities) {
		var c int
		switch {
		case i == len(old.Identities):
			c = 1
		case j == len(new.Identities):
			c = -1
		case old.Identities[i].ID() == new.Identities[j].ID():
			c = 0
		default:
			c = CompareKeys(old.Identities[i].ID(), new.Identities[j].ID())
		}
		switch {
		case c < 0:
			d.Removed = append(d.Removed, old.Identities[i].ID())
			i++
		case c > 0:
			d.Identities = append(d.Identities, new.Identities[j])
			j++
		default:
			p, id := &old.Identities[i], &new.Identities[j]
			if !p.Equal(*id) {
				d.Identities = append(d.Identities, *id)
			}
			i++
			j++
		}
	}
	return d
}

// Merge applies the delta d to the complete, normalized state s and returns the complete state
// with d's generation. d must be normalized; d.Base must be s.Generation.
func (s State) Merge(d State) (State, error) {
	if d.Base != s.Generation {
		return State{}, fmt.Errorf("delta against generation %d, but the state held is generation %d", d.Base, s.Generation)
	}
	drop := make(map[IdentityKey]bool, len(d.Removed)+len(d.Identities))
	for _, k := range d.Removed {
		drop[k] = true
	}
	for _, id := range d.Identities {
		drop[id.ID()] = true
	}
	out := State{Generation: d.Generation, Identities: make([]Identity, 0, len(s.Identities)+len(d.Identities)), ClusterIPs: d.ClusterIPs}
	// Both lists are sorted: merge them.
	i, j := 0, 0
	for i < len(s.Identities) || j < len(d.Identities) {
		switch {
		case i < len(s.Identities) && drop[s.Identities[i].ID()]:
			i++
		case j >= len(d.Identities) || (i < len(s.Identities) && CompareKeys(s.Identities[i].ID(), d.Identities[j].ID()) < 0):
			out.Identities = append(out.Identities, s.Identities[i])
			i++
		default:
			out.Identities = append(out.Identities, d.Identities[j])
			j++
		}
	}
	return out, nil
}

// The most bytes one identity (with its ClusterIP in State.ClusterIPs) and one backend or source
// range take in a complete state's JSON, whatever their values: every field at its longest
// (TestMaxEncodedSize checks them against the encoder).
const (
	maxIdentityBytes = 192
	maxEntryBytes    = 40
)

// MaxEncodedSize bounds the JSON of a complete state of at most identities identities with at
// most entries backends and source ranges in all. The controller keeps a gateway's bounds such
// that this stays well under the agent's line bound, so that every gateway's complete state can
// be sent (SPEC N4).
func MaxEncodedSize(identities, entries int) int {
	return 256 + identities*maxIdentityBytes + entries*maxEntryBytes
}
