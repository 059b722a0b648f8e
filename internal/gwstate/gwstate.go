// Package gwstate is the wire contract between the controller and the gateway agent: the complete
// desired data plane of one gateway instance, and the agent's acknowledgement. It is pure data with
// normalisation and validation, so both ends agree on what a valid state is.
//
// Addresses (VIPs, backend IPs, ClusterIPs) are netip.Addr: they travel as their text form, so
// the JSON is the same as when they were strings, and they are parsed once, when a line is
// decoded, instead of at every comparison. IdentityKey is the one key of an identity (map key,
// sort order, log form); netip.Addr.Compare is the one address order.
//
// An address whose text does not parse (say "10.0.1.300") fails decoding: the line is a
// malformed message, which the agent answers with Ack.Error for the whole message, as any
// undecodable line. An address that parses but may not be used (not IPv4, loopback, multicast
// ...: ValidBackendAddr) stays a refusal of its identity alone (Identity.Validate, Ack.Refused).
// The controller builds states from typed values, so it never sends the first kind.
package gwstate

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
)

// Protocol is a transport protocol as nftables spells it (lowercase).
type Protocol string

// The protocols a Service port can carry.
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
	ClusterIPs []netip.Addr `json:"clusterIPs,omitempty"`

	// Base > 0 makes the message a delta against the state of generation Base, the last one the
	// agent accepted on this stream: Identities then adds or replaces identities by key, Removed
	// removes identities, and ClusterIPs stays complete. The controller sends deltas only to an
	// agent that said it accepts them (Ack.Deltas), so an older agent always gets complete states.
	Base    int64         `json:"base,omitempty"`
	Removed []IdentityKey `json:"removed,omitempty"`
	// SameClusterIPs, in a delta, says the ClusterIPs are those of the base state, and
	// ClusterIPs is empty: a change of endpoints at 10,000 Services does not carry 10,000
	// addresses. Sent only to an agent that said it accepts it (Ack.SameClusterIPs).
	SameClusterIPs bool `json:"sameClusterIPs,omitempty"`

	// Ping > 0 makes the line a keepalive, not a state: the agent changes nothing and answers
	// Ack.Pong = Ping. The controller pings only an agent that said it answers them
	// (Ack.Keepalive): an older agent would take the line for an empty state.
	Ping int64 `json:"ping,omitempty"`

	// Release says vpcgw is being uninstalled (vpcgw release, SPEC O4): the agent converges to
	// this state, which must be complete and empty, and then removes the objects it keeps even
	// for an empty state (its sets and hairpin chain, and the table's base when nothing but
	// vpcgw's is in it), and stops repairing drift: nothing of vpcgw's stays in the gateway.
	Release bool `json:"release,omitempty"`
}

// Identity is one (VIP, port, protocol) the gateway answers for (SPEC I1) with its backends.
type Identity struct {
	VIP      netip.Addr `json:"vip"`
	Port     int32      `json:"port"`
	Protocol Protocol   `json:"protocol"`
	// Backends are sorted and de-duplicated by Normalize. An identity with no backends is not
	// dispatched: packets to it are not DNATed.
	Backends []Backend `json:"backends"`
	// Draining are endpoints that take no new flow but keep the ones they have: terminating and
	// still serving (a Pod in its preStop hook or grace period, SPEC L11). Only their UDP flows
	// need this, as the agent deletes the UDP flows of backends that leave (D6); a backend is
	// never both in Backends and in Draining. Sorted and de-duplicated, as Backends.
	Draining []Backend `json:"draining,omitempty"`
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

// IdentityKey names an identity: (VIP, port, protocol). It is comparable: the map key of
// identities on both ends.
type IdentityKey struct {
	VIP      netip.Addr `json:"vip"`
	Port     int32      `json:"port"`
	Protocol Protocol   `json:"protocol"`
}

// Equal reports whether two identities program the same thing.
func (id Identity) Equal(o Identity) bool {
	return id.Key() == o.Key() && id.AffinityTimeoutSeconds == o.AffinityTimeoutSeconds && id.Group == o.Group &&
		slices.Equal(id.Backends, o.Backends) && slices.Equal(id.SourceRanges, o.SourceRanges) &&
		slices.Equal(id.Draining, o.Draining)
}

// Backend is one DNAT target. The port stays an int32 beside the address (not a
// netip.AddrPort): it is validated like the identity's port, and the wire keeps "ip" and "port".
type Backend struct {
	IP   netip.Addr `json:"ip"`
	Port int32      `json:"port"`
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
	// SameClusterIPs: the agent accepts deltas that keep their base's ClusterIPs
	// (State.SameClusterIPs).
	SameClusterIPs bool `json:"sameClusterIPs,omitempty"`
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
	// validation or the kernel refused them (SPEC D8, N2, N4). An address that parses but may not
	// be used (ValidBackendAddr) is such a refusal; an address text that does not parse is not:
	// the line does not decode, and Error answers the whole message. For each, the gateway keeps what
	// this agent had committed for that key before (or nothing); every other identity of the state
	// is programmed, in the same round trip. The list is complete on every acknowledgement of a
	// state: an identity refused before and still in the state is named again (the agent tries it
	// again with every message). Sorted by key, at most MaxRefusals entries.
	Refused []Refusal `json:"refused,omitempty"`
	// ApplyMicros is how long the agent took for this message, decode to answer, and
	// KernelMicros the part of it in kernel transactions (SPEC P3: the floor beside the
	// end-to-end latency). Agents older than the fields leave them out.
	ApplyMicros  int64 `json:"applyMicros,omitempty"`
	KernelMicros int64 `json:"kernelMicros,omitempty"`
	// Warning says what in the gateway keeps the agent from giving all it promises, though the
	// state is programmed: today a nf_conntrack_tcp_loose it cannot set to 1 (SPEC D9). Empty
	// when all is well; agents older than the field leave it out.
	Warning string `json:"warning,omitempty"`
}

// ProtocolVersion is the version of the state/acknowledgement contract this package defines:
// 1 complete states, deltas (Ack.Deltas) and keepalives (Ack.Keepalive); 2 adds named refusals
// (Ack.Refused). An agent of version 1 refuses a state as a whole (Ack.Error). 3 adds draining
// backends (Identity.Draining): an agent before it ignores the field and deletes their UDP flows
// as those of any backend that left, which is all the controller needs to know.
const ProtocolVersion = 3

// MaxRefusals bounds Ack.Refused (with MaxRefusalReason, an acknowledgement stays far under the
// controller's line bound, SPEC N6). An agent that would refuse more refuses the state whole.
const MaxRefusals = 2048

// MaxRefusalReason bounds the bytes of one Refusal.Reason.
const MaxRefusalReason = 240

// Refusal is one identity the agent refused, with the validation's or the kernel's words. The
// embedded key flattens in JSON (vip, port, protocol, reason). An identity whose address text did
// not parse is never refused by name: its line was not decoded (Ack.Error).
type Refusal struct {
	IdentityKey
	Reason string `json:"reason"`
}

// Key is the identity's key.
func (id Identity) Key() IdentityKey {
	return IdentityKey{VIP: id.VIP, Port: id.Port, Protocol: id.Protocol}
}

// String is "<ip>:<port>", as logs and refusals name a backend (and the agent hashes it into
// object names).
func (b Backend) String() string {
	s := b.IP.AppendTo(make([]byte, 0, 24)) // the zero Addr appends nothing, as on the wire
	s = append(s, ':')
	return string(strconv.AppendInt(s, int64(b.Port), 10))
}

// Compare orders backends by address, then port.
func (b Backend) Compare(o Backend) int {
	return cmp.Or(b.IP.Compare(o.IP), cmp.Compare(b.Port, o.Port))
}

// Normalize sorts identities and backends and removes duplicate backends, so that equal desired
// states have equal encodings (SPEC D2: an unchanged backend set yields an identical ruleset).
func (s *State) Normalize() {
	for i := range s.Identities {
		id := &s.Identities[i]
		slices.SortFunc(id.Backends, Backend.Compare)
		id.Backends = slices.Compact(id.Backends)
		slices.SortFunc(id.Draining, Backend.Compare)
		id.Draining = slices.Compact(id.Draining)
		if len(id.Draining) == 0 {
			id.Draining = nil
		}
	}
	s.SortIdentities()
	slices.SortFunc(s.Removed, IdentityKey.Compare)
	s.Removed = slices.Compact(s.Removed)
}

// SortIdentities is Normalize for a state whose backends are already sorted and de-duplicated
// (the controller's model makes them so): it sorts the identities by key and the ClusterIPs,
// removing duplicate ClusterIPs.
func (s *State) SortIdentities() {
	slices.SortFunc(s.Identities, func(a, b Identity) int { return a.Key().Compare(b.Key()) })
	slices.SortFunc(s.ClusterIPs, netip.Addr.Compare)
	s.ClusterIPs = slices.Compact(s.ClusterIPs)
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
	if s.Release && (len(s.Identities) > 0 || len(s.ClusterIPs) > 0 || s.IsDelta()) {
		return errors.New("a release state must be complete and empty")
	}
	seen, err := s.identityKeys()
	if err != nil {
		return err
	}
	for _, ip := range s.ClusterIPs {
		if err := validIPv4(ip); err != nil {
			return fmt.Errorf("clusterIP: %w", err)
		}
	}
	if err := s.validateBase(); err != nil {
		return err
	}
	return s.validateRemoved(seen)
}

// identityKeys returns the keys of s's identities, an error when one appears twice.
func (s State) identityKeys() (map[IdentityKey]bool, error) {
	seen := make(map[IdentityKey]bool, len(s.Identities))
	for _, id := range s.Identities {
		if seen[id.Key()] {
			return nil, fmt.Errorf("identity %s appears twice", id.Key())
		}
		seen[id.Key()] = true
	}
	return seen, nil
}

// validateBase checks the base generation against what only a delta may carry.
func (s State) validateBase() error {
	switch {
	case s.Base < 0:
		return fmt.Errorf("base generation %d is negative", s.Base)
	case s.Base == 0 && len(s.Removed) > 0:
		return fmt.Errorf("a complete state (no base generation) cannot remove identities")
	case s.SameClusterIPs && s.Base == 0:
		return fmt.Errorf("a complete state (no base generation) cannot keep its base's ClusterIPs")
	case s.SameClusterIPs && len(s.ClusterIPs) > 0:
		return fmt.Errorf("a delta that keeps its base's ClusterIPs carries %d ClusterIPs", len(s.ClusterIPs))
	}
	return nil
}

// validateRemoved checks the removed keys: valid, and none of them also set (seen).
func (s State) validateRemoved(seen map[IdentityKey]bool) error {
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
	if err := id.Key().validate(); err != nil {
		return fmt.Errorf("identity %s: %w", id.Key(), err)
	}
	if id.AffinityTimeoutSeconds < 0 || id.AffinityTimeoutSeconds > 86400 {
		return fmt.Errorf("identity %s: affinity timeout %d is outside 0..86400", id.Key(), id.AffinityTimeoutSeconds)
	}
	for _, b := range id.Backends {
		if err := b.validate(); err != nil {
			return fmt.Errorf("identity %s: backend %s: %w", id.Key(), b, err)
		}
	}
	if err := id.validateDraining(); err != nil {
		return err
	}
	return id.validateSourceRanges()
}

// validateDraining checks the draining backends: valid, sorted and unique, none also serving.
func (id Identity) validateDraining() error {
	for i, b := range id.Draining {
		if err := b.validate(); err != nil {
			return fmt.Errorf("identity %s: draining backend %s: %w", id.Key(), b, err)
		}
		if i > 0 && id.Draining[i-1].Compare(b) >= 0 {
			return fmt.Errorf("identity %s: draining backends are not sorted and unique", id.Key())
		}
		if slices.Contains(id.Backends, b) {
			return fmt.Errorf("identity %s: backend %s is both serving and draining", id.Key(), b)
		}
	}
	return nil
}

// validateSourceRanges checks the source ranges: canonical IPv4 CIDRs, sorted as strings, unique.
func (id Identity) validateSourceRanges() error {
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

func (b Backend) validate() error {
	if err := ValidBackendAddr(b.IP); err != nil {
		return err
	}
	return validPort(b.Port)
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

// String is the key as logs and refusals spell it (and the agent hashes it into object names):
// "<vip>:<port>:<proto>". Appended, not formatted: the agent names objects by it at every sync.
func (k IdentityKey) String() string {
	s := k.VIP.AppendTo(make([]byte, 0, 32)) // the zero Addr appends nothing, as on the wire
	s = append(s, ':')
	s = strconv.AppendInt(s, int64(k.Port), 10)
	s = append(s, ':')
	return string(append(s, k.Protocol...))
}

// Compare orders keys by VIP, port, then protocol: the order of identities in a state.
func (k IdentityKey) Compare(o IdentityKey) int {
	return cmp.Or(k.VIP.Compare(o.VIP), cmp.Compare(k.Port, o.Port), cmp.Compare(k.Protocol, o.Protocol))
}

// ValidBackendAddr refuses what must never be a DNAT target (SPEC N2): anything but a unicast
// IPv4 address, and loopback, link-local (the metadata address among them), multicast, broadcast
// and unspecified addresses.
func ValidBackendAddr(a netip.Addr) error {
	switch {
	case !a.Is4():
		return fmt.Errorf("%q is not an IPv4 address", addrText(a))
	case a.IsLoopback():
		return fmt.Errorf("%s is a loopback address", a)
	case a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast():
		return fmt.Errorf("%s is a link-local address", a)
	case a.IsMulticast():
		return fmt.Errorf("%s is a multicast address", a)
	case a.IsUnspecified():
		return fmt.Errorf("%s is the unspecified address", a)
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return fmt.Errorf("%s is the broadcast address", a)
	}
	return nil
}

func validIPv4(a netip.Addr) error {
	if !a.Is4() {
		return fmt.Errorf("%q is not an IPv4 address", addrText(a))
	}
	return nil
}

// addrText is the address as the wire spells it: the zero Addr (a missing or empty address) is
// "", not String's "invalid IP".
func addrText(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

func validPort(p int32) error {
	if p < 1 || p > 65535 {
		return fmt.Errorf("port %d is outside 1..65535", p)
	}
	return nil
}

// IsDelta reports whether the message is a delta (Base > 0) rather than a complete state.
func (s State) IsDelta() bool { return s.Base > 0 }

// Delta is the message that turns the complete state old into the complete state next: the
// identities of next that are not in old as they are, the keys of old's identities that next
// lacks, and next's ClusterIPs. Both must be normalized. Generation and Base are left to the
// sender. A change to one Service at 10,000 identities is then a line of a few hundred bytes
// instead of megabytes (SPEC P1, P3).
func Delta(old, next State) State {
	d := State{Identities: []Identity{}, ClusterIPs: next.ClusterIPs}
	// Both lists are sorted: walk them together.
	i, j := 0, 0
	for i < len(old.Identities) || j < len(next.Identities) {
		var c int
		switch {
		case i == len(old.Identities):
			c = 1
		case j == len(next.Identities):
			c = -1
		default:
			c = old.Identities[i].Key().Compare(next.Identities[j].Key())
		}
		switch {
		case c < 0:
			d.Removed = append(d.Removed, old.Identities[i].Key())
			i++
		case c > 0:
			d.Identities = append(d.Identities, next.Identities[j])
			j++
		default:
			p, id := &old.Identities[i], &next.Identities[j]
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
		drop[id.Key()] = true
	}
	out := State{Generation: d.Generation, Identities: make([]Identity, 0, len(s.Identities)+len(d.Identities)), ClusterIPs: d.ClusterIPs}
	if d.SameClusterIPs {
		out.ClusterIPs = s.ClusterIPs
	}
	// Both lists are sorted: merge them.
	i, j := 0, 0
	for i < len(s.Identities) || j < len(d.Identities) {
		switch {
		case i < len(s.Identities) && drop[s.Identities[i].Key()]:
			i++
		case j >= len(d.Identities) || (i < len(s.Identities) && s.Identities[i].Key().Compare(d.Identities[j].Key()) < 0):
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
// most entries backends, draining backends and source ranges in all. The controller keeps a gateway's bounds such
// that this stays well under the agent's line bound, so that every gateway's complete state can
// be sent (SPEC N4).
func MaxEncodedSize(identities, entries int) int {
	return 256 + identities*maxIdentityBytes + entries*maxEntryBytes
}
