package dataplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

// randomStates returns steps complete, normalized states (generations 1..steps) over a
// universe of n identities of every shape (mixedIdentities): in each, an identity is absent,
// present with zero backends, or present with backends and an affinity timeout that vary, and
// ClusterIPs are a random subset of the VIPs.
func randomStates(r *rand.Rand, n, steps int) []gwstate.State {
	out := make([]gwstate.State, 0, steps)
	for g := range steps {
		variant := mixedIdentities(n, r.IntN(4))
		st := gwstate.State{Generation: int64(g + 1)}
		for _, id := range variant {
			switch p := r.IntN(20); {
			case p < 3: // absent
				continue
			case p < 5: // no backends
				id.Backends = nil
			case p < 7: // affinity switched on or off, or another timeout
				if id.AffinityTimeoutSeconds > 0 {
					id.AffinityTimeoutSeconds = 0
				} else {
					id.AffinityTimeoutSeconds = int32(30 + r.IntN(3))
				}
			case p < 9: // source ranges (SPEC N7) set, changed or removed
				id.SourceRanges = sourceRangeVariants[r.IntN(len(sourceRangeVariants))]
			}
			st.Identities = append(st.Identities, id)
			if r.IntN(4) == 0 {
				st.ClusterIPs = append(st.ClusterIPs, id.VIP)
			}
		}
		st.Normalize()
		out = append(out, st)
	}
	return out
}

// deltaLine is the delta from prev to next as the controller sends it.
func deltaLine(t *testing.T, prev, next gwstate.State) []byte {
	t.Helper()
	d := gwstate.Delta(prev, next)
	d.Generation, d.Base = next.Generation, prev.Generation
	line, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return line
}

// lastTargets is what an agent asked conntrack to delete in its cleaning since calls had n
// entries (nil: no cleaning).
func lastTargets(ct *fakeCT, n int) []string {
	if len(ct.calls) == n {
		return nil
	}
	return describe(ct.calls[len(ct.calls)-1])
}

// A random sequence of deltas through the fast path gives, after every delta, exactly the
// ruleset of a fresh agent given the merged complete state, the same conntrack cleanings (UDP
// backends removed, UDP identities left with zero backends, removed identities) and the same lo
// VIPs as an agent given the complete states, and the agent's desired state is the merged one.
// covers: P1, D2, D3, D5, D6, D8, N7
func TestDeltaFastPathRandomMatchesFresh(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 7))
			states := randomStates(r, 60, 25)
			f, ct, vips := newFake(), &fakeCT{}, &fakeVIPs{}
			a := newAgent(&knftBackend{nft: f}, logr.Discard(), "", vips, ct)
			// The reference: the same agent fed complete states (the full path).
			refCT, refVIPs := &fakeCT{}, &fakeVIPs{}
			refF := newFake()
			ref := newAgent(&knftBackend{nft: refF}, logr.Discard(), "", refVIPs, refCT)
			ctx := context.Background()
			mustApply(t, a, states[0])
			mustApply(t, ref, states[0])
			cleanings := 0
			for i := 1; i < len(states); i++ {
				st := states[i]
				n, refN := len(ct.calls), len(refCT.calls)
				if ack := handleLine(ctx, a, deltaLine(t, states[i-1], st), logr.Discard()); ack.Error != "" || ack.Generation != st.Generation {
					t.Fatalf("delta to generation %d: ack %+v", st.Generation, ack)
				}
				if a.last.Generation == st.Generation {
					t.Fatalf("delta to generation %d did not take the fast path", st.Generation)
				}
				mustApply(t, ref, st)
				// The same objects and rules as a fresh agent (the Fake lists elements in the
				// order they were added), and exactly the full path's dump.
				if got, want := testutil.SortElements(f.Dump()), testutil.SortElements(freshDump(t, st)); got != want {
					t.Fatalf("after the delta to generation %d the table is\n%s\nwant (fresh agent, complete state)\n%s", st.Generation, got, want)
				}
				if got, want := f.Dump(), refF.Dump(); got != want {
					t.Fatalf("after the delta to generation %d the table is\n%s\nwant (full path)\n%s", st.Generation, got, want)
				}
				got, want := lastTargets(ct, n), lastTargets(refCT, refN)
				if !slices.Equal(got, want) {
					t.Fatalf("generation %d: conntrack targets %v, want %v (full path)", st.Generation, got, want)
				}
				cleanings += len(got)
				if !slices.Equal(vips.have, wantVIPs(st.ClusterIPs)) {
					t.Fatalf("generation %d: lo holds %v, want %v", st.Generation, vips.have, st.ClusterIPs)
				}
				if !reflect.DeepEqual(a.Applied(), ref.Applied()) || !reflect.DeepEqual(a.present, ref.present) {
					t.Fatalf("generation %d: committed bookkeeping differs from the full path's", st.Generation)
				}
			}
			if cleanings == 0 {
				t.Fatal("the sequence never cleaned conntrack")
			}
			want := states[len(states)-1]
			desired, err := a.desired()
			if err != nil {
				t.Fatal(err)
			}
			got := *desired
			if got.Generation != want.Generation || !slices.Equal(got.ClusterIPs, want.ClusterIPs) || !reflect.DeepEqual(normIDs(got.Identities), normIDs(want.Identities)) {
				t.Fatalf("desired state after the deltas:\n%+v\nwant the merged complete state\n%+v", got, want)
			}
			if drift, err := a.Verify(ctx); drift != "" || err != nil {
				t.Fatalf("verify: drift %q, err %v", drift, err)
			}
		})
	}
}

// normIDs maps nil backend lists to empty ones (JSON turns one into the other).
func normIDs(ids []gwstate.Identity) []gwstate.Identity {
	out := slices.Clone(ids)
	for i := range out {
		if out[i].Backends == nil {
			out[i].Backends = []gwstate.Backend{}
		}
	}
	return out
}

// Specific cases of D6 through the fast path: a UDP identity loses a backend, goes to zero
// backends, comes back, and is removed; a TCP identity's change cleans nothing.
// covers: P1, D6
func TestDeltaFastPathConntrack(t *testing.T) {
	ct := &fakeCT{}
	a := newAgent(&knftBackend{nft: newFake()}, logr.Discard(), "", nil, ct)
	udp := ident("10.0.0.1", 53, gwstate.UDP, be("10.0.1.1", 53), be("10.0.1.2", 53))
	tcp := ident("10.0.0.1", 80, gwstate.TCP, be("10.0.1.1", 80), be("10.0.1.2", 80))
	mustApply(t, a, state(1, udp, tcp))
	steps := []struct {
		msg  gwstate.State
		want []string
	}{
		{gwstate.State{Identities: []gwstate.Identity{ident("10.0.0.1", 53, gwstate.UDP, be("10.0.1.2", 53))}}, []string{"10.0.0.1:udp:10.0.1.2:53"}},
		{gwstate.State{Identities: []gwstate.Identity{ident("10.0.0.1", 80, gwstate.TCP, be("10.0.1.1", 80))}}, nil},
		{gwstate.State{Identities: []gwstate.Identity{ident("10.0.0.1", 53, gwstate.UDP)}}, []string{"10.0.0.1:udp:"}},
		{gwstate.State{Identities: []gwstate.Identity{udp}}, []string{"10.0.0.1:udp:10.0.1.1:53,10.0.1.2:53"}},
		{gwstate.State{Removed: []gwstate.IdentityKey{udp.Key(), tcp.Key()}}, []string{"10.0.0.1:tcp:", "10.0.0.1:udp:"}},
	}
	for i, s := range steps {
		n := len(ct.calls)
		s.msg.Generation, s.msg.Base = int64(i+2), int64(i+1)
		if err := a.ApplyMessage(context.Background(), s.msg); err != nil {
			t.Fatal(err)
		}
		if a.last.Generation == s.msg.Generation {
			t.Fatalf("step %d did not take the fast path", i)
		}
		if got := lastTargets(ct, n); !slices.Equal(got, s.want) {
			t.Errorf("step %d: conntrack targets %v, want %v", i, got, s.want)
		}
	}
}

// A fast-path delta whose transaction the kernel rejects leaves the previous ruleset whole and
// the committed bookkeeping unchanged; the next message converges, whether it is a delta (on
// the rejected generation, which the agent holds as desired), a complete state, or a retry.
// covers: P1, D8
func TestDeltaFastPathFailedTransaction(t *testing.T) {
	web := ident("10.0.0.1", 80, gwstate.TCP, be("10.0.1.1", 8080), be("10.0.1.2", 8080))
	dns := ident("10.0.0.2", 53, gwstate.UDP, be("10.0.1.3", 53))
	aff := ident("10.0.0.3", 443, gwstate.TCP, be("10.0.1.4", 8443), be("10.0.1.5", 8443))
	aff.AffinityTimeoutSeconds = 60
	s1 := state(1, web, dns, aff)
	s2 := state(2, ident("10.0.0.1", 80, gwstate.TCP, be("10.0.1.2", 8080)), aff, ident("10.0.0.4", 80, gwstate.TCP, be("10.0.1.6", 80)))
	s3 := state(3, ident("10.0.0.1", 80, gwstate.TCP, be("10.0.1.2", 8080), be("10.0.1.7", 8080)), aff)
	for _, next := range []string{"delta", "complete", "retry"} {
		t.Run(next, func(t *testing.T) {
			f := &failingNFT{Fake: newFake()}
			a := NewAgent(f, logr.Discard())
			ctx := context.Background()
			mustApply(t, a, s1)
			// Commit one delta through the fast path first, so that the desired state is pending.
			s1b := state(2, web, dns, aff)
			s1b.ClusterIPs = addrs("10.0.0.1")
			if ack := handleLine(ctx, a, deltaLine(t, s1, s1b), logr.Discard()); ack.Error != "" {
				t.Fatal(ack.Error)
			}
			before, applied := f.Dump(), a.Applied()

			f.fail = errors.New("Error: Could not process rule: Operation not supported")
			s2 := s2
			s2.Generation = 3
			ack := handleLine(ctx, a, deltaLine(t, s1b, s2), logr.Discard())
			if !strings.Contains(ack.Error, "Operation not supported") || ack.Generation != 3 {
				t.Fatalf("delta with a failing kernel: ack %+v, want nft's message", ack)
			}
			if f.Dump() != before {
				t.Fatal("table changed by a failed delta")
			}
			if !reflect.DeepEqual(a.Applied(), applied) {
				t.Fatal("committed bookkeeping changed by a failed delta")
			}
			f.fail = nil

			want := s2
			switch next {
			case "delta":
				want = s3
				want.Generation = 4
				if ack := handleLine(ctx, a, deltaLine(t, s2, want), logr.Discard()); ack.Error != "" {
					t.Fatal(ack.Error)
				}
			case "complete":
				want = s3
				want.Generation = 4
				mustApply(t, a, want)
			case "retry":
				if did, err := a.Retry(ctx); !did || err != nil {
					t.Fatalf("retry: %v, %v", did, err)
				}
			}
			if got, w := testutil.SortElements(f.Dump()), testutil.SortElements(freshDump(t, want)); got != w {
				t.Fatalf("after recovery:\n%s\nwant:\n%s", got, w)
			}
			if d, err := a.desired(); err != nil || d.Generation != want.Generation || !reflect.DeepEqual(normIDs(d.Identities), normIDs(want.Identities)) {
				t.Fatalf("desired state %+v (%v), want %+v", d, err, want)
			}
			// And the fast path is back.
			s4 := want
			s4.Generation = want.Generation + 1
			s4.Identities = append(slices.Clone(want.Identities), dns)
			s4.Normalize()
			if ack := handleLine(ctx, a, deltaLine(t, want, s4), logr.Discard()); ack.Error != "" {
				t.Fatal(ack.Error)
			}
			if a.last.Generation == s4.Generation {
				t.Fatal("the delta after recovery did not take the fast path")
			}
			if got, w := testutil.SortElements(f.Dump()), testutil.SortElements(freshDump(t, s4)); got != w {
				t.Fatalf("after the next delta:\n%s\nwant:\n%s", got, w)
			}
		})
	}
}

// A delta that creates more identity chains than one staging chunk has them staged, as a
// complete state would (one apply path, SPEC P2); an invalid identity in a delta is refused by
// name and a malformed delta changes nothing.
// covers: P1, P2, D8
func TestDeltaStagesManyNewIdentities(t *testing.T) {
	f := &scriptedNFT{Fake: newFake()}
	a := stagedAgent(f, 10)
	s1 := state(1, mixedIdentities(5, 0)...)
	mustApply(t, a, s1)
	s2 := state(2, mixedIdentities(40, 0)...)
	runs := len(f.runs)
	if ack := handleLine(context.Background(), a, deltaLine(t, s1, s2), logr.Discard()); ack.Error != "" {
		t.Fatal(ack.Error)
	}
	if got := len(f.runs) - runs; got != 5 { // 35 new identities: 4 staging + 1 final
		t.Errorf("%d transactions, want 4 staging and 1 final", got)
	}
	if got, want := testutil.SortElements(f.Dump()), testutil.SortElements(freshDump(t, s2)); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}

	// A delta with an invalid identity: that identity is refused by name, and it keeps what was
	// committed for it; the table does not change.
	before := f.Dump()
	bad := gwstate.State{Generation: 3, Base: 2, Identities: []gwstate.Identity{ident("10.0.0.1", 80, gwstate.TCP, be("fd00::300", 80))}}
	if err := a.ApplyMessage(context.Background(), bad); err != nil {
		t.Fatalf("a delta with one invalid identity: %v, want it refused by name", err)
	}
	if r := a.Refusals(); len(r) != 1 || r[0].IdentityKey != bad.Identities[0].Key() || !strings.Contains(r[0].Reason, "not an IPv4 address") {
		t.Fatalf("refusals %+v, want %s refused", r, bad.Identities[0].Key())
	}
	if f.Dump() != before || a.lastGen != 3 {
		t.Fatal("a delta whose only identity is refused changed the table, or was not taken as the desired state")
	}
	// A malformed delta (an identity both set and removed) is refused whole: the desired state
	// stays generation 3.
	malformed := gwstate.State{Generation: 4, Base: 3, Identities: []gwstate.Identity{s2.Identities[0]}, Removed: []gwstate.IdentityKey{s2.Identities[0].Key()}}
	if err := a.ApplyMessage(context.Background(), malformed); err == nil || !strings.Contains(err.Error(), "both set and removed") {
		t.Fatalf("malformed delta: %v", err)
	}
	if f.Dump() != before || a.lastGen != 3 {
		t.Fatal("a malformed delta changed the table or the desired state")
	}
}

// serviceElements are the service-ips elements of an `nft list table` output, sorted (the
// kernel lists a map's elements in its own order, which depends on the insertion history).
func serviceElements(listing string) []string {
	block := listingBlocks(listing)["map "+ServiceMap+" {"]
	_, elems, _ := strings.Cut(block, "elements = {")
	elems, _, _ = strings.Cut(elems, "}")
	var out []string
	for _, e := range strings.Split(elems, ",") {
		if e = strings.Join(strings.Fields(e), " "); e != "" {
			out = append(out, e)
		}
	}
	slices.Sort(out)
	return out
}

// In a real kernel, a random sequence of deltas through the fast path gives byte for byte the
// table an agent given the complete states makes, and the objects, rules and elements of a
// fresh agent given the merged complete state, with no anonymous map left over.
// covers: P1, D1, D2, D3, D8, N7
func TestRealDeltaFastPathMatchesFresh(t *testing.T) {
	l := newLab(t)
	var nss [3]string
	for i, short := range []string{"fast", "full", "fresh"} {
		ns, err := l.AddNetns(short)
		if err != nil {
			t.Fatal(err)
		}
		nss[i] = ns
	}
	fast, _ := kernelAgentIn(t, nss[0], defaultStageChunk)
	full, _ := kernelAgentIn(t, nss[1], defaultStageChunk)
	ctx := context.Background()
	states := randomStates(rand.New(rand.NewPCG(11, 3)), 60, 12)
	mustApply(t, fast, states[0])
	mustApply(t, full, states[0])
	for i := 1; i < len(states); i++ {
		st := states[i]
		if ack := handleLine(ctx, fast, deltaLine(t, states[i-1], st), logr.Discard()); ack.Error != "" {
			t.Fatalf("delta to generation %d: %s", st.Generation, ack.Error)
		}
		if fast.last.Generation == st.Generation {
			t.Fatalf("delta to generation %d did not take the fast path", st.Generation)
		}
		mustApply(t, full, st)
		got := nftList(t, l, nss[0], "list", "table", "ip", TableName)
		if want := nftList(t, l, nss[1], "list", "table", "ip", TableName); got != want {
			t.Fatalf("after the delta to generation %d:\n%s\nwant (complete states):\n%s", st.Generation, got, want)
		}
	}
	final := states[len(states)-1]
	fresh, _ := kernelAgentIn(t, nss[2], defaultStageChunk)
	mustApply(t, fresh, final)
	got, want := nftList(t, l, nss[0], "list", "table", "ip", TableName), nftList(t, l, nss[2], "list", "table", "ip", TableName)
	gotBlocks, wantBlocks := listingBlocks(got), listingBlocks(want)
	delete(gotBlocks, "map "+ServiceMap+" {")
	delete(wantBlocks, "map "+ServiceMap+" {")
	if !reflect.DeepEqual(gotBlocks, wantBlocks) || !slices.Equal(serviceElements(got), serviceElements(want)) {
		t.Fatalf("after the deltas:\n%s\nwant (fresh agent, merged complete state):\n%s", got, want)
	}
	if len(serviceElements(got)) == 0 {
		t.Fatal("no service-ips elements listed")
	}
	dispatched := gwstate.State{}
	for _, id := range final.Identities {
		if len(id.Backends) > 0 {
			dispatched.Identities = append(dispatched.Identities, id)
		}
	}
	wantNamed, wantAnon := wantSetCounts(dispatched)
	if named, anon := setCounts(t, nss[0]); named != wantNamed || anon != wantAnon {
		t.Errorf("%d named and %d anonymous sets, want %d and %d", named, anon, wantNamed, wantAnon)
	}
	if drift, err := fast.Verify(ctx); drift != "" || err != nil {
		t.Errorf("verify: drift %q, err %v", drift, err)
	}
}

// covers: D8, N4
// Random sequences of states in which identities turn invalid (a backend on port 0) and come
// back, identities sharing groups: after every message, through the delta fast path and through
// complete states alike, the gateway holds exactly what named refusals promise. Every identity
// not refused is programmed as desired; every refused one keeps what was committed for it (or
// nothing); an identity is refused only when it is invalid or shares a group with a changed
// invalid one; and both paths give the same table and the same refusals.
func TestRefusalsRandomKeepThePromise(t *testing.T) {
	poison := gwstate.Backend{IP: netip.MustParseAddr("10.0.9.9"), Port: 0}
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 13))
			states := randomStates(r, 40, 30)
			for i := range states {
				for j := range states[i].Identities {
					id := &states[i].Identities[j]
					id.Group = fmt.Sprint("g", id.Port%7, len(id.VIP.String())%3)
					if len(id.Backends) > 0 && r.IntN(6) == 0 {
						id.Backends = append(slices.Clone(id.Backends), poison)
					}
				}
				states[i].Normalize()
			}
			f := newFake()
			a := newAgent(&knftBackend{nft: f}, logr.Discard(), "", nil, nil)
			refF := newFake()
			ref := newAgent(&knftBackend{nft: refF}, logr.Discard(), "", nil, nil)
			ctx := context.Background()
			refusedSome, heldSome := false, false
			for i, st := range states {
				prev := map[gwstate.IdentityKey]gwstate.Identity{}
				for _, id := range a.Applied() {
					prev[id.Key()] = id
				}
				var ack gwstate.Ack
				if i == 0 {
					line, _ := json.Marshal(st)
					ack = handleLine(ctx, a, line, logr.Discard())
				} else {
					ack = handleLine(ctx, a, deltaLine(t, states[i-1], st), logr.Discard())
				}
				if ack.Error != "" {
					t.Fatalf("generation %d: %s", st.Generation, ack.Error)
				}
				mustApply(t, ref, st)
				if !reflect.DeepEqual(ack.Refused, ref.Refusals()) {
					t.Fatalf("generation %d: the delta path refused %v, complete states %v", st.Generation, ack.Refused, ref.Refusals())
				}
				if got, want := f.Dump(), refF.Dump(); got != want {
					t.Fatalf("generation %d: the delta path's table differs from the complete states':\n%s\nwant\n%s", st.Generation, got, want)
				}
				refused := map[gwstate.IdentityKey]bool{}
				for _, rf := range ack.Refused {
					refused[rf.IdentityKey] = true
				}
				applied := map[gwstate.IdentityKey]gwstate.Identity{}
				for _, id := range a.Applied() {
					applied[id.Key()] = id
				}
				poisonedGroups := map[string]bool{}
				for _, id := range st.Identities {
					old, had := prev[id.Key()]
					if slices.Contains(id.Backends, poison) && !(had && identityEqual(old, id)) {
						poisonedGroups[id.Group] = true
					}
				}
				for _, id := range st.Identities {
					k := id.Key()
					got, has := applied[k]
					old, had := prev[k]
					bad := slices.Contains(id.Backends, poison)
					switch {
					case bad && !refused[k]:
						t.Fatalf("generation %d: invalid identity %s is not refused", st.Generation, k)
					case refused[k] && !bad && !poisonedGroups[id.Group]:
						t.Fatalf("generation %d: %s refused without a changed invalid identity in its group", st.Generation, k)
					case refused[k] && (has != had || (has && !identityEqual(got, old))):
						t.Fatalf("generation %d: refused %s is programmed as %+v, want what was committed (%v %+v)", st.Generation, k, got, had, old)
					case !refused[k] && len(id.Backends) > 0 && (!has || !identityEqual(got, id)):
						t.Fatalf("generation %d: %s is programmed as %+v, want %+v", st.Generation, k, got, id)
					case !refused[k] && len(id.Backends) == 0 && has:
						t.Fatalf("generation %d: %s without backends is programmed", st.Generation, k)
					}
					refusedSome = refusedSome || refused[k]
					heldSome = heldSome || (refused[k] && !bad)
					delete(applied, k)
				}
				if len(applied) > 0 {
					t.Fatalf("generation %d: identities outside the state are programmed: %v", st.Generation, applied)
				}
			}
			if !refusedSome || !heldSome {
				t.Fatalf("the sequence never refused an identity (%v) or held one back with its group (%v)", refusedSome, heldSome)
			}
		})
	}
}
