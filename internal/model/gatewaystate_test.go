package model

// covers: P1, P3 (the whole state kept between partial plans)

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// The chunked identities stay the sorted list a plain slice would be through random upserts
// and removals, chunks splitting and emptying, and every earlier version stays as it was.
func TestIdentityChunksEqualASortedList(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 33))
	key := func(i int) gwstate.IdentityKey {
		return gwstate.IdentityKey{VIP: netip.AddrFrom4([4]byte{10, 0, byte(i / 256), byte(i % 256)}), Port: 80, Protocol: gwstate.TCP}
	}
	ident := func(i, v int) gwstate.Identity {
		k := key(i)
		return gwstate.Identity{VIP: k.VIP, Port: k.Port, Protocol: k.Protocol, Backends: []gwstate.Backend{{IP: netip.MustParseAddr(fmt.Sprintf("10.1.0.%d", v%250+1)), Port: 8080}}}
	}
	want := map[gwstate.IdentityKey]gwstate.Identity{}
	var initial []gwstate.Identity
	for i := range 300 {
		initial = append(initial, ident(i*2, 0))
		want[key(i*2)] = initial[len(initial)-1]
	}
	c := chunksOf(slices.Clone(initial))
	type version struct {
		c    identityChunks
		want []gwstate.Identity
	}
	var versions []version
	for step := range 400 {
		var upserts []gwstate.Identity
		var removed []gwstate.IdentityKey
		touched := map[int]bool{}
		for range r.IntN(150) + 1 { // up to more than two chunks at once: splits
			i := r.IntN(1200)
			if touched[i] {
				continue
			}
			touched[i] = true
			if _, had := want[key(i)]; had && r.IntN(3) == 0 {
				removed = append(removed, key(i))
				delete(want, key(i))
				continue
			}
			id := ident(i, step)
			upserts = append(upserts, id)
			want[key(i)] = id
		}
		slices.SortFunc(upserts, func(a, b gwstate.Identity) int { return a.Key().Compare(b.Key()) })
		slices.SortFunc(removed, gwstate.IdentityKey.Compare)
		c = c.with(upserts, removed)
		sorted := slices.SortedFunc(func(yield func(gwstate.Identity) bool) {
			for _, id := range want {
				if !yield(id) {
					return
				}
			}
		}, func(a, b gwstate.Identity) int { return a.Key().Compare(b.Key()) })
		if got := c.all(); !reflect.DeepEqual(got, append([]gwstate.Identity{}, sorted...)) || c.n != len(sorted) {
			t.Fatalf("step %d: %d identities (n %d), want %d", step, len(got), c.n, len(sorted))
		}
		for _, ch := range c.chunks {
			if len(ch) == 0 || len(ch) > 2*chunkSize {
				t.Fatalf("step %d: a chunk of %d identities", step, len(ch))
			}
		}
		for i := range 1200 {
			id, ok := c.get(key(i))
			if w, had := want[key(i)]; ok != had || (ok && !reflect.DeepEqual(id, w)) {
				t.Fatalf("step %d: get(%s) = %v %v, want %v %v", step, key(i), id, ok, w, had)
			}
		}
		versions = append(versions, version{c, sorted})
	}
	for i, v := range versions {
		if !reflect.DeepEqual(v.c.all(), append([]gwstate.Identity{}, v.want...)) {
			t.Fatalf("version %d changed after later versions were made", i)
		}
	}
	if got := (identityChunks{}).all(); got == nil || len(got) != 0 {
		t.Fatalf("the empty list is %#v, want an empty, non-nil list (a state's)", got)
	}
}

// A counted address set keeps an address while any holder does, and shares its sorted list
// with the version before when its members do not change.
func TestAddrSetCountsHolders(t *testing.T) {
	a, b := netip.MustParseAddr("172.18.0.10"), netip.MustParseAddr("10.96.0.1")
	s := newAddrSet([]netip.Addr{a, a, b})
	if !slices.Equal(s.sorted, []netip.Addr{b, a}) || !slices.Equal(s.text(), []string{"10.96.0.1", "172.18.0.10"}) {
		t.Fatalf("sorted %v, text %v", s.sorted, s.text())
	}
	before := s.sorted
	s.change([]netip.Addr{a}, nil) // one of two holders of a leaves
	if &s.sorted[0] != &before[0] || !slices.Equal(s.sorted, []netip.Addr{b, a}) {
		t.Fatalf("a held by another holder left the set, or the unchanged list was copied: %v", s.sorted)
	}
	s.change([]netip.Addr{a}, nil)
	if !slices.Equal(s.sorted, []netip.Addr{b}) || !slices.Equal(before, []netip.Addr{b, a}) || !slices.Equal(s.text(), []string{"10.96.0.1"}) {
		t.Fatalf("after the last holder of a left: %v (earlier version %v, text %v)", s.sorted, before, s.text())
	}
	s.change([]netip.Addr{b}, nil)
	if s.sorted != nil || s.text() != nil {
		t.Fatalf("an empty set is %#v / %#v, want nil (as GatewayPlan.Finish leaves it)", s.sorted, s.text())
	}
}
