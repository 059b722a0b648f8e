package gwstate

import (
	"net/netip"
	"sync"
)

// Update is one desired state of a gateway as the controller's planner made it: the change from
// the planner's previous state (Delta, against Base), and the whole state, built only when it is
// sent complete. The planner knows which Services it replanned, so the change costs what they
// changed; the whole state of 10,000 identities is built only for an instance that did not
// acknowledge Base (a new instance, a reconnect, a failed message). SPEC P1, P3.
type Update struct {
	// Generation is the wire generation (State.Generation), set by the sender.
	Generation int64
	// Version names this state among every state the process's planners made; Base is the
	// Version of the state Delta turns into this one (0: no delta, send the whole state).
	Version, Base uint64
	// Delta is what Delta(state of Base, this state) gives: the identities added or changed,
	// the keys removed, and the complete ClusterIPs. Generation and Base are the sender's.
	Delta State
	// SameClusterIPs: Delta's ClusterIPs are those of the state of Base (State.SameClusterIPs).
	SameClusterIPs bool
	// Release: the whole state is a release (State.Release), which is always sent complete.
	Release bool
	// ClusterIPs, Identities and Backends describe the whole state without building it.
	ClusterIPs           []netip.Addr
	Identities, Backends int

	whole func() State
}

// NewUpdate is the update of version version whose whole state build returns (called at most
// once, and only when the whole state is sent). delta is the change from the state of version
// base (ignored when base is 0).
func NewUpdate(version, base uint64, delta State, release bool, clusterIPs []netip.Addr, identities, backends int, build func() State) Update {
	return Update{
		Version: version, Base: base, Delta: delta, Release: release,
		ClusterIPs: clusterIPs, Identities: identities, Backends: backends,
		whole: sync.OnceValue(build),
	}
}

// Complete is the update of a state made without a planner: no version, no delta. The
// transport diffs it against the state the instance acknowledged last (Conn.Apply).
func Complete(st State) Update {
	backends := 0
	for i := range st.Identities {
		backends += len(st.Identities[i].Backends)
	}
	return Update{
		Generation: st.Generation, Release: st.Release, ClusterIPs: st.ClusterIPs,
		Identities: len(st.Identities), Backends: backends,
		whole: func() State { return st },
	}
}

// Whole is the complete state, with the update's Generation. The zero Update is the empty state.
func (u Update) Whole() State {
	if u.whole == nil {
		return State{Generation: u.Generation, Identities: []Identity{}}
	}
	st := u.whole()
	st.Generation = u.Generation
	return st
}

// HasDelta reports whether Delta is the change from the state of version Base.
func (u Update) HasDelta() bool { return u.Base > 0 && u.Version > 0 }
