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
}

// Key identifies an identity in maps and logs: "<vip>:<port>:<proto>".
func (id Identity) Key() string { return fmt.Sprintf("%s:%d:%s", id.VIP, id.Port, id.Protocol) }

func (b Backend) String() string { return fmt.Sprintf("%s:%d", b.IP, b.Port) }

// Normalize sorts identities and backends and removes duplicate backends, so that equal desired
// states have equal encodings (SPEC D2: an unchanged backend set yields an identical ruleset).
func (s *State) Normalize() {
	for i := range s.Identities {
		id := &s.Identities[i]
		slices.SortFunc(id.Backends, compareBackends)
		id.Backends = slices.Compact(id.Backends)
	}
	slices.SortFunc(s.Identities, func(a, b Identity) int {
		return cmp.Or(compareAddrs(a.VIP, b.VIP), cmp.Compare(a.Port, b.Port), cmp.Compare(a.Protocol, b.Protocol))
	})
	slices.SortFunc(s.ClusterIPs, compareAddrs)
	s.ClusterIPs = slices.Compact(s.ClusterIPs)
}

// Validate reports the first problem that would make the state unsafe to apply.
func (s State) Validate() error {
	seen := make(map[string]bool, len(s.Identities))
	for _, id := range s.Identities {
		if err := validIPv4(id.VIP); err != nil {
			return fmt.Errorf("identity %s: vip: %w", id.Key(), err)
		}
		if err := validPort(id.Port); err != nil {
			return fmt.Errorf("identity %s: %w", id.Key(), err)
		}
		if id.Protocol != TCP && id.Protocol != UDP {
			return fmt.Errorf("identity %s: protocol %q is not tcp or udp", id.Key(), id.Protocol)
		}
		if id.AffinityTimeoutSeconds < 0 || id.AffinityTimeoutSeconds > 86400 {
			return fmt.Errorf("identity %s: affinity timeout %d is outside 0..86400", id.Key(), id.AffinityTimeoutSeconds)
		}
		if seen[id.Key()] {
			return fmt.Errorf("identity %s appears twice", id.Key())
		}
		seen[id.Key()] = true
		for _, b := range id.Backends {
			if err := validIPv4(b.IP); err != nil {
				return fmt.Errorf("identity %s: backend %s: %w", id.Key(), b, err)
			}
			if err := validPort(b.Port); err != nil {
				return fmt.Errorf("identity %s: backend %s: %w", id.Key(), b, err)
			}
		}
	}
	for _, ip := range s.ClusterIPs {
		if err := validIPv4(ip); err != nil {
			return fmt.Errorf("clusterIP: %w", err)
		}
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
	return cmp.Or(compareAddrs(a.IP, b.IP), cmp.Compare(a.Port, b.Port))
}

// compareAddrs orders IPv4 addresses numerically, falling back to string order for garbage so
// that sorting never panics on input Validate will reject.
func compareAddrs(a, b string) int {
	pa, errA := netip.ParseAddr(a)
	pb, errB := netip.ParseAddr(b)
	if errA != nil || errB != nil {
		return cmp.Compare(a, b)
	}
	return pa.Compare(pb)
}
