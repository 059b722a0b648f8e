package model

import (
	"net/netip"
	"slices"
	"sort"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/types"

	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// The whole state of a gateway, kept by its Planner between plans so that a partial plan costs
// what its Services changed, not what the gateway holds: building, sorting and diffing the whole
// state of 10,000 Services at every partial plan was most of the controller's work (issue 33).
// Every version is immutable once made: the transport may build the whole state of a version
// while the planner makes the next (it does not: one worker per gateway, but nothing relies on
// that).

// stateVersions numbers the states of every Planner of the process (gwstate.Update.Version):
// a version never names two states, even across planners of one gateway.
var stateVersions atomic.Uint64

// gatewayState is one version of a gateway's whole state.
type gatewayState struct {
	version  uint64
	release  bool
	ids      identityChunks
	backends int
	// clusterIPs and vips are counted: several Services may hold one address (an EIP), and it
	// stays while one does.
	clusterIPs addrSet
	vips       addrSet
	services   []types.NamespacedName // the served Services, sorted
}

// newGatewayState is the state of gp, a gateway's whole plan (sorted by GatewayPlan.Finish),
// made of the contributions parts: they count who holds each address. O(n).
func newGatewayState(gp *GatewayPlan, parts []Contribution) *gatewayState {
	gs := &gatewayState{version: stateVersions.Add(1), release: gp.State.Release, ids: chunksOf(gp.State.Identities), services: gp.Services}
	for i := range gp.State.Identities {
		gs.backends += len(gp.State.Identities[i].Backends)
	}
	var cips []netip.Addr
	for _, c := range parts {
		if c.ClusterIP.IsValid() {
			cips = append(cips, c.ClusterIP)
		}
	}
	gs.clusterIPs, gs.vips = newAddrSet(cips), newAddrSet(servedVIPs(parts))
	return gs
}

// rebuild is the state made of the kept contributions parts, as every partial plan made it
// before the planner kept its state (O(n log n)): for a planner that has none (its last full
// plan found no gateway).
func rebuild(base GatewayPlan, parts []Contribution) *gatewayState {
	whole := base.Base()
	for _, c := range parts {
		whole.Add(c)
	}
	whole.Finish()
	return newGatewayState(&whole, parts)
}

// servedVIPs are the route VIPs of parts (GatewayPlan.Add), one per Service that holds it.
func servedVIPs(parts []Contribution) []netip.Addr {
	var out []netip.Addr
	for _, c := range parts {
		if !c.EIP.IsValid() && !c.ClusterIP.IsValid() {
			continue
		}
		for _, a := range []netip.Addr{c.EIP, c.ClusterIP} {
			if a.IsValid() {
				out = append(out, a)
			}
		}
	}
	return out
}

// update is the next version: the replanned Services' contributions before (old) and after
// (now) replace theirs. It returns the delta from gs, as gwstate.Delta(whole(gs), whole(next))
// gives it, in O(changed identities × log n + n/chunkSize).
func (gs *gatewayState) update(old, now []Contribution) (*gatewayState, gwstate.State) {
	next := *gs
	next.version = stateVersions.Add(1)
	next.clusterIPs, next.vips = gs.clusterIPs.clone(), gs.vips.clone()

	upserts, removed, backends := gs.identityDelta(old, now)
	next.backends += backends
	next.ids = gs.ids.with(upserts, removed)

	cipsOut, vipsOut, svcOut := holdings(old)
	cipsIn, vipsIn, svcIn := holdings(now)
	next.clusterIPs.change(cipsOut, cipsIn)
	next.vips.change(vipsOut, vipsIn)
	next.services = changeSorted(gs.services, svcOut, svcIn, compareKeys)

	delta := gwstate.State{Identities: upserts, Removed: removed, ClusterIPs: next.clusterIPs.sorted}
	if delta.Identities == nil {
		delta.Identities = []gwstate.Identity{}
	}
	return &next, delta
}

// identityDelta is how the replanned Services' identities change gs's, from old to now: the new
// and changed identities and the keys no longer held, each sorted by key, and the change of the
// backend count.
func (gs *gatewayState) identityDelta(old, now []Contribution) (upserts []gwstate.Identity, removed []gwstate.IdentityKey, backends int) {
	newKeys := map[gwstate.IdentityKey]bool{}
	for _, c := range now {
		for _, id := range c.Identities {
			newKeys[id.Key()] = true
			prev, had := gs.ids.get(id.Key())
			switch {
			case !had:
				backends += len(id.Backends)
				upserts = append(upserts, id)
			case !prev.Equal(id):
				backends += len(id.Backends) - len(prev.Backends)
				upserts = append(upserts, id)
			}
		}
	}
	for _, c := range old {
		for _, id := range c.Identities {
			if k := id.Key(); !newKeys[k] {
				if prev, had := gs.ids.get(k); had {
					backends -= len(prev.Backends)
					removed = append(removed, k)
				}
			}
		}
	}
	slices.SortFunc(upserts, func(a, b gwstate.Identity) int { return a.Key().Compare(b.Key()) })
	slices.SortFunc(removed, gwstate.IdentityKey.Compare)
	return upserts, slices.Compact(removed), backends
}

// holdings are what contributions parts hold, in their order: their ClusterIPs, their route VIPs
// and the Services served.
func holdings(parts []Contribution) (cips, vips []netip.Addr, svcs []types.NamespacedName) {
	for _, c := range parts {
		if c.ClusterIP.IsValid() {
			cips = append(cips, c.ClusterIP)
		}
		if c.EIP.IsValid() || c.ClusterIP.IsValid() {
			svcs = append(svcs, c.Service)
		}
	}
	return cips, servedVIPs(parts), svcs
}

// whole is the complete state of this version, sorted (O(n)).
func (gs *gatewayState) whole() gwstate.State {
	return gwstate.State{Identities: gs.ids.all(), ClusterIPs: gs.clusterIPs.sorted, Release: gs.release}
}

// plan is the gateway plan of this version: base's instances and next hops, the state's
// routes and Services, and its Update: delta against the state of version baseVersion.
func (gs *gatewayState) plan(base GatewayPlan, baseVersion uint64, delta gwstate.State) GatewayPlan {
	gp := base.Base()
	gp.State = gwstate.State{} // whole only in Update: built when it is sent complete
	gp.Routes.VIPs = gs.vips.text()
	gp.Services = gs.services
	gp.update = gwstate.NewUpdate(gs.version, baseVersion, delta, gs.release, gs.clusterIPs.sorted, gs.ids.n, gs.backends, gs.whole)
	return gp
}

// sameList reports whether a and b are one list: addrSet.change keeps the list when its members
// do not change, so this is how a version tells its ClusterIPs are its base's, in O(1).
func sameList[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// chunkSize is the length of the chunks the sorted identities are kept in: a change copies its
// chunk and the chunk list (n/chunkSize entries), not n identities.
const chunkSize = 64

// identityChunks are identities sorted by key, in immutable chunks: each non-empty, every key
// of a chunk below every key of the next.
type identityChunks struct {
	chunks [][]gwstate.Identity
	n      int
}

// chunksOf keeps sorted (not copied: it must not change afterwards).
func chunksOf(sorted []gwstate.Identity) identityChunks {
	c := identityChunks{n: len(sorted)}
	for i := 0; i < len(sorted); i += chunkSize {
		j := min(i+chunkSize, len(sorted))
		c.chunks = append(c.chunks, sorted[i:j:j])
	}
	return c
}

// chunk is the index of the chunk k belongs in: the last whose first key is not above k (0 for
// a key before every chunk).
func (c identityChunks) chunk(k gwstate.IdentityKey) int {
	i := sort.Search(len(c.chunks), func(i int) bool { return c.chunks[i][0].Key().Compare(k) > 0 })
	return max(i-1, 0)
}

func (c identityChunks) get(k gwstate.IdentityKey) (gwstate.Identity, bool) {
	if len(c.chunks) == 0 {
		return gwstate.Identity{}, false
	}
	ch := c.chunks[c.chunk(k)]
	i, ok := slices.BinarySearchFunc(ch, k, func(id gwstate.Identity, k gwstate.IdentityKey) int { return id.Key().Compare(k) })
	if !ok {
		return gwstate.Identity{}, false
	}
	return ch[i], true
}

// chunkChange is one change identityChunks.with makes: key set to id, or removed.
type chunkChange struct {
	id      gwstate.Identity
	key     gwstate.IdentityKey
	removed bool
}

// with is c with upserts set and removed removed (both sorted by key, no key in both).
func (c identityChunks) with(upserts []gwstate.Identity, removed []gwstate.IdentityKey) identityChunks {
	if len(upserts) == 0 && len(removed) == 0 {
		return c
	}
	changes := sortedChanges(upserts, removed)
	out := identityChunks{chunks: make([][]gwstate.Identity, 0, len(c.chunks)+1)}
	if len(c.chunks) == 0 {
		c.chunks = [][]gwstate.Identity{nil}
	}
	j := 0
	for i, ch := range c.chunks {
		start := j
		for j < len(changes) && (i == len(c.chunks)-1 || changes[j].key.Compare(c.chunks[i+1][0].Key()) < 0) {
			j++
		}
		if start == j {
			out.chunks = append(out.chunks, ch)
			out.n += len(ch)
			continue
		}
		out.appendSplit(mergeChanges(ch, changes[start:j]))
	}
	return out
}

// sortedChanges are upserts and removed as one list of changes, sorted by key.
func sortedChanges(upserts []gwstate.Identity, removed []gwstate.IdentityKey) []chunkChange {
	changes := make([]chunkChange, 0, len(upserts)+len(removed))
	for _, id := range upserts {
		changes = append(changes, chunkChange{id: id, key: id.Key()})
	}
	for _, k := range removed {
		changes = append(changes, chunkChange{key: k, removed: true})
	}
	slices.SortFunc(changes, func(a, b chunkChange) int { return a.key.Compare(b.key) })
	return changes
}

// mergeChanges is chunk ch with the changes cs that fall in it (sorted by key), in a new slice.
func mergeChanges(ch []gwstate.Identity, cs []chunkChange) []gwstate.Identity {
	merged := make([]gwstate.Identity, 0, len(ch)+len(cs))
	a := 0
	for a < len(ch) || len(cs) > 0 {
		switch {
		case len(cs) == 0 || (a < len(ch) && ch[a].Key().Compare(cs[0].key) < 0):
			merged = append(merged, ch[a])
			a++
		default:
			if a < len(ch) && ch[a].Key() == cs[0].key {
				a++ // replaced or removed
			}
			if !cs[0].removed {
				merged = append(merged, cs[0].id)
			}
			cs = cs[1:]
		}
	}
	return merged
}

// appendSplit appends merged, cut into chunks of chunkSize while more than two of them remain.
func (c *identityChunks) appendSplit(merged []gwstate.Identity) {
	c.n += len(merged)
	for len(merged) > 2*chunkSize {
		c.chunks = append(c.chunks, merged[:chunkSize:chunkSize])
		merged = merged[chunkSize:]
	}
	if len(merged) > 0 {
		c.chunks = append(c.chunks, merged[:len(merged):len(merged)])
	}
}

// all is every identity in key order, in a new slice (never nil: a state's empty list).
func (c identityChunks) all() []gwstate.Identity {
	out := make([]gwstate.Identity, 0, c.n)
	for _, ch := range c.chunks {
		out = append(out, ch...)
	}
	return out
}

// addrSet is a counted set of addresses with its sorted members. sorted is immutable: a change
// makes a new slice (only when the members change, which an endpoint change never does).
type addrSet struct {
	count  map[netip.Addr]int
	sorted []netip.Addr
	texts  []string // sorted's text, made on demand (route VIPs)
}

func newAddrSet(addrs []netip.Addr) addrSet {
	s := addrSet{count: make(map[netip.Addr]int, len(addrs))}
	for _, a := range addrs {
		s.count[a]++
	}
	for a := range s.count {
		s.sorted = append(s.sorted, a)
	}
	slices.SortFunc(s.sorted, netip.Addr.Compare)
	return s
}

// clone shares sorted (immutable) and the counts: only the planner's latest version is ever
// changed, so the counts of earlier ones are never read again.
func (s addrSet) clone() addrSet { return addrSet{count: s.count, sorted: s.sorted, texts: s.texts} }

// change takes out one holder of each of out and adds one of each of in.
func (s *addrSet) change(out, in []netip.Addr) {
	if len(out) == 0 && len(in) == 0 {
		return
	}
	// The same holders going out and in (an endpoint change) change nothing.
	if slices.Equal(out, in) {
		return
	}
	if s.count == nil {
		s.count = map[netip.Addr]int{}
	}
	count := s.count
	var gone, added []netip.Addr
	for _, a := range out {
		if count[a]--; count[a] <= 0 {
			delete(count, a)
			gone = append(gone, a)
		}
	}
	for _, a := range in {
		if count[a]++; count[a] == 1 {
			added = append(added, a)
		}
	}
	sorted := changeSorted(s.sorted, gone, added, netip.Addr.Compare)
	if !slices.Equal(sorted, s.sorted) {
		s.sorted, s.texts = sorted, nil
	}
}

// text is sorted as text, in the same order.
func (s *addrSet) text() []string {
	if s.texts == nil && len(s.sorted) > 0 {
		s.texts = make([]string, len(s.sorted))
		for i, a := range s.sorted {
			s.texts[i] = a.String()
		}
	}
	return s.texts
}

// changeSorted is the sorted, duplicate-free list with out removed and in added: list itself
// when that changes nothing, else a new slice (list is shared by earlier versions). nil when
// empty, as GatewayPlan.Finish leaves an empty list.
func changeSorted[T comparable](list, out, in []T, cmp func(a, b T) int) []T {
	changed := false
	for _, x := range out {
		if _, ok := slices.BinarySearchFunc(list, x, cmp); ok && !slices.Contains(in, x) {
			changed = true
		}
	}
	for _, x := range in {
		if _, ok := slices.BinarySearchFunc(list, x, cmp); !ok {
			changed = true
		}
	}
	if !changed {
		return list
	}
	next := slices.Clone(list)
	for _, x := range out {
		if slices.Contains(in, x) {
			continue
		}
		if i, ok := slices.BinarySearchFunc(next, x, cmp); ok {
			next = slices.Delete(next, i, i+1)
		}
	}
	for _, x := range in {
		if i, ok := slices.BinarySearchFunc(next, x, cmp); !ok {
			next = slices.Insert(next, i, x)
		}
	}
	if len(next) == 0 {
		return nil
	}
	return next
}
