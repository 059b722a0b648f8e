// covers: O4, K8 (a release leaves nothing of vpcgw's in the gateway, and kube-ovn's own objects)

package dataplane

import (
	"context"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"sigs.k8s.io/knftables"

	"github.com/vpcgw/vpcgw/internal/gwstate"
)

func releaseState(gen int64) gwstate.State {
	st := state(gen)
	st.Release = true
	return st
}

// A release after serving removes the whole table when nothing but vpcgw's is in it, and the
// agent then repairs no "drift" back into existence.
func TestReleaseRemovesTable(t *testing.T) {
	f := newFake()
	a := NewAgent(f, logr.Discard())
	mustApply(t, a, state(1, ident("10.0.0.1", 80, gwstate.TCP, be("10.0.1.2", 8080))))
	mustApply(t, a, releaseState(2))
	if d := f.Dump(); d != "" {
		t.Fatalf("after release the table holds:\n%s", d)
	}
	if drift, err := a.Verify(context.Background()); err != nil || drift != "" {
		t.Errorf("Verify after release = %q, %v; want nothing (a released agent repairs nothing)", drift, err)
	}
	if did, err := a.Retry(context.Background()); did || err != nil {
		t.Errorf("Retry after release = %v, %v; want nothing to retry", did, err)
	}
	if d := f.Dump(); d != "" {
		t.Errorf("Verify or Retry wrote after the release:\n%s", d)
	}
	// A later state (vpcgw installed again) serves as before.
	mustApply(t, a, state(3, ident("10.0.0.1", 80, gwstate.TCP, be("10.0.1.2", 8080))))
	if d := f.Dump(); !strings.Contains(d, OwnedSet) || !strings.Contains(d, IdentityChain(key("10.0.0.1", 80, gwstate.TCP))) {
		t.Errorf("a state after a release is not programmed:\n%s", d)
	}
}

// Beside kube-ovn's own share DNAT identity in the same table, a release removes vpcgw's objects
// only: kube-ovn's chain, element, dispatch chain and map stay (SPEC K8).
func TestReleaseKeepsKubeOVNs(t *testing.T) {
	f := newFake()
	a := NewAgent(f, logr.Discard())
	mustApply(t, a, state(1, ident("10.0.0.1", 80, gwstate.TCP, be("10.0.1.2", 8080))))
	// kube-ovn's share DNAT: its own identity chain and element in service-ips.
	tx := f.NewTransaction()
	tx.Add(&knftables.Chain{Name: "dnat-aaaaaaaaaaaa"})
	tx.Add(&knftables.Element{Map: ServiceMap, Key: []string{"172.16.0.9", "tcp", "443"}, Value: []string{"goto dnat-aaaaaaaaaaaa"}})
	if err := f.Run(context.Background(), tx); err != nil {
		t.Fatal(err)
	}
	mustApply(t, a, releaseState(2))
	d := f.Dump()
	for _, gone := range []string{OwnedSet, VIPSet, HairpinChain, IdentityChain(key("10.0.0.1", 80, gwstate.TCP)), "10.0.0.1"} {
		if strings.Contains(d, gone) {
			t.Errorf("after release %s remains:\n%s", gone, d)
		}
	}
	for _, kept := range []string{"dnat-aaaaaaaaaaaa", "172.16.0.9", "chain ip kube-ovn " + BaseChain, "map ip kube-ovn " + ServiceMap} {
		if !strings.Contains(d, kept) {
			t.Errorf("after release kube-ovn's %s is gone:\n%s", kept, d)
		}
	}
}

// A release message must be complete and empty: anything else is refused whole.
func TestReleaseStateShape(t *testing.T) {
	st := releaseState(1)
	st.Identities = []gwstate.Identity{ident("10.0.0.1", 80, gwstate.TCP, be("10.0.1.2", 8080))}
	if err := st.ValidateShape(); err == nil {
		t.Error("a release with identities passes ValidateShape")
	}
	d := releaseState(2)
	d.Base = 1
	if err := d.ValidateShape(); err == nil {
		t.Error("a release delta passes ValidateShape")
	}
}
