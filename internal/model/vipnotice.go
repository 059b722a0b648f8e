package model

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// SPEC V3: OVN routes before it applies policies, so a VIP the Vpc's router has no route for, or
// a route that discards, never reaches vpcgw's VIP policy. The controller reads the router's
// routes and finds the dropped VIPs (ovn.Routed); VIPNotices decides whom to tell what.

// Addrs are the route's VIPs as addresses (the model wrote them from addresses, so each parses).
func (v VIPRoutes) Addrs() []netip.Addr {
	out := make([]netip.Addr, 0, len(v.VIPs))
	for _, s := range v.VIPs {
		if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// VIPNotice is one event for a Service about its VIPs' routes.
type VIPNotice struct {
	Key     types.NamespacedName
	UID     types.UID
	Message string
}

// VIPNotices are the events of one route check of a gateway.
type VIPNotices struct {
	// Warn are the Services with a dropped VIP (Warning ReasonVIPNotRouted), by namespace/name;
	// the event recorder gives each again only when its text changes.
	Warn []VIPNotice
	// Over are the Services warned before whose VIPs are all carried now and that still serve
	// through the gateway (Normal ReasonVIPRouted), by namespace/name.
	Over []VIPNotice
	// Forget are the Services warned before and not now (over, gone, or no longer served): their
	// last Warning and Normal are forgotten, so that a recurrence is told again.
	Forget []types.UID
	// Warned are the Services warned now: the next check's warned.
	Warned map[types.UID]types.NamespacedName
}

// NoticeVIPRoutes is SPEC V3's rule for one check of a gateway's VIPs: served are the gateway's
// Services and their VIPs, dropped the VIPs OVN would drop with why, warned the Services warned
// at the last check. A Service that no longer serves through the gateway (or is gone) is
// forgotten without an event.
func NoticeVIPRoutes(served map[types.NamespacedName]ServiceVIPs, dropped map[netip.Addr]string, warned map[types.UID]types.NamespacedName, routes VIPRoutes) VIPNotices {
	n := VIPNotices{Warned: map[types.UID]types.NamespacedName{}}
	if len(dropped) == 0 && len(warned) == 0 {
		return n
	}
	for _, k := range slices.SortedFunc(maps.Keys(served), compareKeys) {
		sv := served[k]
		if msg := notRoutedMessage(sv, dropped, routes); msg != "" {
			n.Warned[sv.UID] = k
			n.Warn = append(n.Warn, VIPNotice{Key: k, UID: sv.UID, Message: msg})
		}
	}
	for _, uid := range slices.Sorted(maps.Keys(warned)) {
		if _, still := n.Warned[uid]; still {
			continue
		}
		n.Forget = append(n.Forget, uid)
		k := warned[uid]
		if sv, ok := served[k]; ok && sv.UID == uid {
			n.Over = append(n.Over, VIPNotice{Key: k, UID: uid, Message: fmt.Sprintf(
				"Vpc %s now routes this Service's VIPs: vpcgw's VIP route to gateway %s applies", routes.Router, routes.Gateway)})
		}
	}
	slices.SortFunc(n.Over, func(a, b VIPNotice) int {
		return cmp.Or(compareKeys(a.Key, b.Key), strings.Compare(string(a.UID), string(b.UID)))
	})
	return n
}

// notRoutedMessage is the Warning for a Service whose VIPs include dropped ones ("" for none). It
// names only the Service's own VIPs, its Vpc and the gateway's LAN addresses (SPEC N8).
func notRoutedMessage(sv ServiceVIPs, dropped map[netip.Addr]string, routes VIPRoutes) string {
	var parts []string
	for _, v := range []struct {
		what string
		vip  netip.Addr
	}{{"EIP", sv.EIP}, {"ClusterIP", sv.ClusterIP}} {
		if why, ok := dropped[v.vip]; ok && v.vip.IsValid() {
			parts = append(parts, fmt.Sprintf("%s %s (%s)", v.what, v.vip, why))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf("OVN drops %s in Vpc %s's router before vpcgw's VIP route to gateway %s applies (OVN looks up routes before policies). "+
		"Add a static route to Vpc %s covering it with nextHopIP %s (the gateway's lanIp), e.g. 0.0.0.0/0, or a policyDst route for the Service CIDR; "+
		"vpcgw does not add it, the Vpc's routes are yours",
		strings.Join(parts, " and "), routes.Router, routes.Gateway, routes.Router, strings.Join(routes.NextHops, " or "))
}
