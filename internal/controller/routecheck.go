package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/ovn"
)

// OVN routes before it applies policies: a VIP the Vpc's router has no route for, or a route
// that discards, never reaches vpcgw's 29210 policy (SPEC V3). After each write of a gateway's
// VIP routes the controller checks every VIP against the router's routes (read from the NB cache)
// and tells the Services whose VIP would be dropped: a Warning event when that starts or its
// cause changes, a Normal event when it ends, a count in the published status. It does not add
// the missing route: the Vpc's static routes are the user's (kube-ovn-controller writes them from
// the Vpc's spec.staticRoutes and deletes those with its mark that the Vpc does not list; one
// without the mark would stay in the tenant's router where no Vpc object shows it).

// routeCheck is the last check of one gateway's VIPs.
type routeCheck struct {
	// dropped are the gateway's VIPs OVN would drop, with why.
	dropped map[netip.Addr]string
	// warned are the Services given the Warning (and not yet told that it is over).
	warned map[types.UID]types.NamespacedName
}

// routeQueue is the controller's work queue once it runs, for wakes from the NB.
type routeQueue = workqueue.TypedRateLimitingInterface[reconcile.Request]

// checkRoutes checks gateway key's VIPs against its router's routes after they were written and
// tells the Services that own a VIP OVN would drop. It returns how many VIPs OVN would drop (the
// last count when the routes could not be read).
func (r *GatewayReconciler) checkRoutes(ctx context.Context, key string, want model.VIPRoutes, planner *model.Planner) int {
	if len(want.VIPs) == 0 || len(want.NextHops) == 0 {
		// No policy is written, so there is nothing for a route to carry to.
		r.settleRouteCheck(key, nil, nil, want)
		return 0
	}
	routes, err := r.Routes.RouterRoutes(ctx, want.Router)
	if err != nil {
		if errors.Is(err, ovn.ErrCacheBehind) {
			// The rest of the update is on its way; its arrival wakes the gateway again.
			r.Log.V(1).Info("VIP route check postponed", "gateway", key, "router", want.Router, "reason", err.Error())
		} else {
			r.Log.Error(err, "checking the VIPs against the Vpc's routes", "gateway", key, "router", want.Router)
		}
		return r.lastUnrouted(key)
	}
	dropped := map[netip.Addr]string{}
	for _, s := range want.VIPs {
		vip, err := netip.ParseAddr(s)
		if err != nil {
			continue // the writer refused it already
		}
		if ok, why := ovn.Routed(routes, vip); !ok {
			dropped[vip] = why
		}
	}
	r.settleRouteCheck(key, dropped, planner, want)
	return len(dropped)
}

// lastUnrouted is the count of gateway key's last route check (0: none yet).
func (r *GatewayReconciler) lastUnrouted(key string) int {
	r.routeMu.Lock()
	defer r.routeMu.Unlock()
	if c := r.routeChecks[key]; c != nil {
		return len(c.dropped)
	}
	return 0
}

// settleRouteCheck records the check of gateway key and gives the events that changed: a Warning
// to each Service with a dropped VIP (emitOnce gives it again only when its text changes), a
// Normal event to a warned Service whose VIPs are all carried now. A warned Service that no longer
// serves through the gateway (or is gone) is forgotten without an event. The log says when the
// dropped VIPs change (the VIPs themselves are in the log, as in the writer's).
func (r *GatewayReconciler) settleRouteCheck(key string, dropped map[netip.Addr]string, planner *model.Planner, want model.VIPRoutes) {
	r.routeMu.Lock()
	c := r.routeChecks[key]
	if c == nil {
		c = &routeCheck{warned: map[types.UID]types.NamespacedName{}}
		r.routeChecks[key] = c
	}
	changed := !maps.Equal(c.dropped, dropped)
	c.dropped = dropped
	before := maps.Clone(c.warned)
	r.routeMu.Unlock()
	if changed && len(dropped) > 0 {
		vips := make([]string, 0, len(dropped))
		for _, a := range slices.SortedFunc(maps.Keys(dropped), netip.Addr.Compare) {
			vips = append(vips, a.String()+": "+dropped[a])
		}
		r.Log.Info("OVN drops VIPs before their VIP route applies: the Vpc's routes do not carry them", "gateway", key, "router", want.Router, "vips", vips)
	} else if changed {
		r.Log.Info("the Vpc's routes carry every VIP", "gateway", key, "router", want.Router)
	}
	if len(dropped) == 0 && len(before) == 0 {
		return
	}
	var served map[types.NamespacedName]model.ServiceVIPs
	if planner != nil {
		served = planner.ServiceVIPs()
	}
	now := map[types.UID]types.NamespacedName{}
	for _, k := range slices.SortedFunc(maps.Keys(served), compareNames) {
		sv := served[k]
		if msg := notRoutedMessage(sv, dropped, key, want); msg != "" {
			now[sv.UID] = k
			r.emitOnce(&model.ServicePlan{Key: k, UID: sv.UID}, model.Event{Type: corev1.EventTypeWarning, Reason: model.ReasonVIPNotRouted, Message: msg})
		}
	}
	for uid, k := range before {
		if _, still := now[uid]; still {
			continue
		}
		// Forgotten either way: if it comes back, it is told again.
		r.forgetEvent(uid, model.ReasonVIPNotRouted)
		if sv, ok := served[k]; ok && sv.UID == uid {
			r.emitOnce(&model.ServicePlan{Key: k, UID: uid}, model.Event{Type: corev1.EventTypeNormal, Reason: model.ReasonVIPRouted, Message: fmt.Sprintf(
				"Vpc %s now routes this Service's VIPs: vpcgw's VIP route to gateway %s applies", want.Router, key)})
			r.forgetEvent(uid, model.ReasonVIPRouted)
		}
	}
	r.routeMu.Lock()
	if c := r.routeChecks[key]; c != nil {
		c.warned = now
	}
	r.routeMu.Unlock()
}

// notRoutedMessage is the Warning for a Service whose VIPs include dropped ones ("" for none). It
// names only the Service's own VIPs, its Vpc and the gateway's LAN addresses (SPEC N8).
func notRoutedMessage(sv model.ServiceVIPs, dropped map[netip.Addr]string, gw string, want model.VIPRoutes) string {
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
		strings.Join(parts, " and "), want.Router, gw, want.Router, strings.Join(want.NextHops, " or "))
}

// forgetEvent forgets the last event of reason given to Service uid, so that the next is given.
func (r *GatewayReconciler) forgetEvent(uid types.UID, reason string) {
	r.eventsMu.Lock()
	defer r.eventsMu.Unlock()
	delete(r.lastEvent[uid], reason)
}

// forgetRouteCheck drops gateway gw's route check (the gateway is gone, SPEC N4).
func (r *GatewayReconciler) forgetRouteCheck(gw string) {
	r.routeMu.Lock()
	defer r.routeMu.Unlock()
	delete(r.routeChecks, gw)
}

// routesChanged wakes the gateways of router (a Vpc) after its routes changed in the NB: their
// VIPs are checked again. Before the controller runs (not the leader yet) there is nothing to
// wake: its first syncs check anyway.
func (r *GatewayReconciler) routesChanged(router string) {
	q := r.routeQueue.Load()
	if q == nil {
		return
	}
	for _, req := range r.gatewaysOfVpc(context.Background(), &kubeovnv1.Vpc{ObjectMeta: metav1.ObjectMeta{Name: router}}) {
		(*q).Add(req)
	}
}

func compareNames(a, b types.NamespacedName) int {
	if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}
