package controller

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"slices"

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

// routeQueue is the controller's work queue once it runs, for wakes from the NB.
type routeQueue = workqueue.TypedRateLimitingInterface[reconcile.Request]

// routeReport is how writing a gateway's VIP routes ended, and what the check found.
type routeReport struct {
	// written: the routes were written (or writing them failed, err); false when route writing is
	// off, the gateway is gone, or programming failed.
	written bool
	want    model.VIPRoutes
	err     error
	// checked: the router's routes were read; dropped are the VIPs OVN would drop, with why, and
	// served the VIPs of the gateway's Services, asked only when a Service is to be told (it
	// walks every Service: at 10,000 it was a third of the controller's CPU in a churn).
	checked bool
	dropped map[netip.Addr]string
	served  func() map[types.NamespacedName]model.ServiceVIPs
}

// writeRoutes writes the gateway's VIP routes (SPEC V1), then checks them against the router's
// routes (SPEC V3).
func (r *GatewayReconciler) writeRoutes(ctx context.Context, p *pass) routeReport {
	if r.Routes == nil || p.gateway == nil || p.prog.outcome == model.Failed {
		return routeReport{}
	}
	rep := routeReport{written: true, want: p.gateway.Routes}
	if rep.err = r.Routes.Sync(ctx, rep.want); rep.err == nil {
		r.checkRoutes(ctx, p, &rep)
	}
	return rep
}

// checkRoutes reads the router's routes (from the NB cache) and finds the VIPs OVN would drop.
func (r *GatewayReconciler) checkRoutes(ctx context.Context, p *pass, rep *routeReport) {
	want := rep.want
	if len(want.VIPs) == 0 || len(want.NextHops) == 0 {
		// No policy is written, so there is nothing for a route to carry to.
		rep.checked = true
		return
	}
	routes, err := r.Routes.RouterRoutes(ctx, want.Router)
	if err != nil {
		if errors.Is(err, ovn.ErrCacheBehind) {
			// The rest of the update is on its way; its arrival wakes the gateway again.
			r.Log.V(1).Info("VIP route check postponed", "gateway", p.key, "router", want.Router, "reason", err.Error())
		} else {
			r.Log.Error(err, "checking the VIPs against the Vpc's routes", "gateway", p.key, "router", want.Router)
		}
		return
	}
	rep.checked, rep.dropped, rep.served = true, map[netip.Addr]string{}, p.planner.ServiceVIPs
	for _, vip := range want.Addrs() {
		if ok, why := ovn.Routed(routes, vip); !ok {
			rep.dropped[vip] = why
		}
	}
}

// settleRouteCheck records the check of gateway key, gives the events model.NoticeVIPRoutes
// decides, and returns how many VIPs OVN would drop. The log says when the dropped VIPs change
// (the VIPs themselves are in the log, as in the writer's).
func (r *GatewayReconciler) settleRouteCheck(key string, rep routeReport) int {
	changed, warned := r.routeChecks.Record(key, rep.dropped)
	if changed && len(rep.dropped) > 0 {
		vips := make([]string, 0, len(rep.dropped))
		for _, a := range slices.SortedFunc(maps.Keys(rep.dropped), netip.Addr.Compare) {
			vips = append(vips, a.String()+": "+rep.dropped[a])
		}
		r.Log.Info("OVN drops VIPs before their VIP route applies: the Vpc's routes do not carry them", "gateway", key, "router", rep.want.Router, "vips", vips)
	} else if changed {
		r.Log.Info("the Vpc's routes carry every VIP", "gateway", key, "router", rep.want.Router)
	}
	var served map[types.NamespacedName]model.ServiceVIPs
	if len(rep.dropped) > 0 || len(warned) > 0 { // else NoticeVIPRoutes tells nobody anything
		served = rep.served()
	}
	n := model.NoticeVIPRoutes(served, rep.dropped, warned, rep.want)
	for _, w := range n.Warn {
		r.events.Emit(w.Key, w.UID, model.Event{Type: corev1.EventTypeWarning, Reason: model.ReasonVIPNotRouted, Message: w.Message})
	}
	for _, uid := range n.Forget {
		r.events.Forget(uid, model.ReasonVIPNotRouted) // if it comes back, it is told again
	}
	for _, o := range n.Over {
		r.events.Emit(o.Key, o.UID, model.Event{Type: corev1.EventTypeNormal, Reason: model.ReasonVIPRouted, Message: o.Message})
		r.events.Forget(o.UID, model.ReasonVIPRouted)
	}
	r.routeChecks.Warn(key, n.Warned)
	return len(rep.dropped)
}

// routesChanged wakes the gateways of router (a Vpc) after its routes changed in the NB: their
// VIPs are checked again. Before the controller runs (not the leader yet) there is nothing to
// wake: its first syncs check anyway.
func (r *GatewayReconciler) routesChanged(router string) {
	q := r.routeQueue.Load()
	if q == nil {
		return
	}
	for _, req := range r.wake.GatewaysOfVpc(context.Background(), &kubeovnv1.Vpc{ObjectMeta: metav1.ObjectMeta{Name: router}}) {
		(*q).Add(req)
	}
}
