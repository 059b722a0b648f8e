package routechecks

import (
	"net/netip"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// covers: V3
// A check says whether the dropped VIPs changed since the gateway's last one and hands back the
// Services warned then; a forgotten gateway starts over.
func TestChecksRememberPerGateway(t *testing.T) {
	var rc Checks
	vip := netip.MustParseAddr("172.18.0.10")
	dropped := map[netip.Addr]string{vip: "no route"}
	if changed, warned := rc.Record("gw1", dropped); !changed || len(warned) != 0 {
		t.Fatalf("first check: changed %v, warned %v", changed, warned)
	}
	rc.Warn("gw1", map[types.UID]types.NamespacedName{"u1": {Namespace: "demo", Name: "web"}})
	if n := rc.Unrouted("gw1"); n != 1 {
		t.Fatalf("unrouted %d, want 1", n)
	}
	changed, warned := rc.Record("gw1", map[netip.Addr]string{vip: "no route"})
	if changed || warned["u1"].Name != "web" {
		t.Fatalf("same check again: changed %v, warned %v", changed, warned)
	}
	if changed, _ := rc.Record("gw1", map[netip.Addr]string{vip: "discard route"}); !changed {
		t.Fatal("a new cause was not a change")
	}
	if n := rc.Unrouted("gw2"); n != 0 {
		t.Fatalf("a gateway never checked has %d unrouted", n)
	}
	rc.Forget("gw1")
	if changed, warned := rc.Record("gw1", nil); changed || len(warned) != 0 {
		t.Fatalf("after forget: changed %v, warned %v", changed, warned)
	}
}
