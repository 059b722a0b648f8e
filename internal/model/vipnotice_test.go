package model

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// covers: V3, N8
// Whom a route check tells what: a Warning to each served Service with a dropped VIP, naming its
// own VIPs only; a Normal to a warned Service whose VIPs are all carried again and that still
// serves; a warned Service gone or no longer served is forgotten without an event.
func TestNoticeVIPRoutes(t *testing.T) {
	eip, cip, other := netip.MustParseAddr("172.18.0.10"), netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("10.96.0.20")
	a, b, c := types.NamespacedName{Namespace: "t1", Name: "a"}, types.NamespacedName{Namespace: "t2", Name: "b"}, types.NamespacedName{Namespace: "t1", Name: "c"}
	routes := VIPRoutes{Router: "vpc1", Gateway: "gw1", NextHops: []string{"10.0.1.254"}}
	served := map[types.NamespacedName]ServiceVIPs{
		a: {UID: "ua", EIP: eip, ClusterIP: cip},
		b: {UID: "ub", ClusterIP: other},
	}
	dropEIP := map[netip.Addr]string{eip: "no route"}
	cases := []struct {
		name         string
		served       map[types.NamespacedName]ServiceVIPs
		dropped      map[netip.Addr]string
		warned       map[types.UID]types.NamespacedName
		warn, over   []types.NamespacedName
		forget       []types.UID
		warnedAfter  map[types.UID]types.NamespacedName
		warnMentions string
		warnOmits    string
	}{
		{name: "all carried, nobody warned: nothing", served: served, warnedAfter: map[types.UID]types.NamespacedName{}},
		{name: "an EIP dropped: its Service warned", served: served, dropped: dropEIP, warn: []types.NamespacedName{a},
			warnedAfter: map[types.UID]types.NamespacedName{"ua": a}, warnMentions: "EIP 172.18.0.10 (no route)", warnOmits: "10.96.0.20"},
		{name: "still dropped: warned again (the recorder folds repeats)", served: served, dropped: dropEIP, warned: map[types.UID]types.NamespacedName{"ua": a},
			warn: []types.NamespacedName{a}, warnedAfter: map[types.UID]types.NamespacedName{"ua": a}},
		{name: "carried again: told it is over", served: served, warned: map[types.UID]types.NamespacedName{"ua": a},
			over: []types.NamespacedName{a}, forget: []types.UID{"ua"}, warnedAfter: map[types.UID]types.NamespacedName{}},
		{name: "warned Service gone: forgotten silently", served: served, warned: map[types.UID]types.NamespacedName{"uc": c},
			forget: []types.UID{"uc"}, warnedAfter: map[types.UID]types.NamespacedName{}},
		{name: "warned Service recreated (another UID): forgotten silently", served: map[types.NamespacedName]ServiceVIPs{a: {UID: "ua2", EIP: eip}},
			warned: map[types.UID]types.NamespacedName{"ua": a}, forget: []types.UID{"ua"}, warnedAfter: map[types.UID]types.NamespacedName{}},
		{name: "both dropped: both warned, by name", served: served, dropped: map[netip.Addr]string{cip: "discarded", other: "no route"},
			warn: []types.NamespacedName{a, b}, warnedAfter: map[types.UID]types.NamespacedName{"ua": a, "ub": b}, warnMentions: "ClusterIP"},
	}
	for _, tc := range cases {
		n := NoticeVIPRoutes(tc.served, tc.dropped, tc.warned, routes)
		keys := func(ns []VIPNotice) []types.NamespacedName {
			var out []types.NamespacedName
			for _, x := range ns {
				out = append(out, x.Key)
			}
			return out
		}
		if got := keys(n.Warn); !reflect.DeepEqual(got, tc.warn) {
			t.Errorf("%s: warned %v, want %v", tc.name, got, tc.warn)
		}
		if got := keys(n.Over); !reflect.DeepEqual(got, tc.over) {
			t.Errorf("%s: told over %v, want %v", tc.name, got, tc.over)
		}
		if !reflect.DeepEqual(n.Forget, tc.forget) {
			t.Errorf("%s: forgotten %v, want %v", tc.name, n.Forget, tc.forget)
		}
		if !reflect.DeepEqual(n.Warned, tc.warnedAfter) {
			t.Errorf("%s: remembered %v, want %v", tc.name, n.Warned, tc.warnedAfter)
		}
		for _, w := range n.Warn {
			if tc.warnMentions != "" && w.Key == a && !strings.Contains(w.Message, tc.warnMentions) {
				t.Errorf("%s: warning %q does not name %q", tc.name, w.Message, tc.warnMentions)
			}
			if tc.warnOmits != "" && strings.Contains(w.Message, tc.warnOmits) {
				t.Errorf("%s: warning %q names another Service's VIP %s", tc.name, w.Message, tc.warnOmits)
			}
			if !strings.Contains(w.Message, "10.0.1.254") || !strings.Contains(w.Message, "vpc1") {
				t.Errorf("%s: warning %q does not name the Vpc and the next hop", tc.name, w.Message)
			}
		}
	}
}
