package controller

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/transport"
)

// report turns what a pass's phases found into what the controller tells: the plan's events,
// the Services now served, the gateway's metrics and published status, the quarantine and
// programming failure events, the VIP route check, OnSynced, and the pass's result. It writes
// nothing to the API but events.
func (r *GatewayReconciler) report(p *pass) (reconcile.Result, error) {
	for _, sp := range p.mine {
		r.events.Plan(sp)
		r.events.Serving(sp, p.prog.outcomeOf(sp.Key), !p.writes.failed[sp])
	}
	gp := p.gateway
	if gp == nil {
		r.noteGone(p.key)
		return reconcile.Result{}, p.errorOf()
	}
	if n := r.refused.Tell(r.Recorder, p.key, gp.Refused); n > 0 {
		r.Log.Info("pods carry the gateway's labels but kube-ovn's workload did not make them: they are no instances (SPEC N5)", "gateway", p.key, "newly refused", n, "refused", len(gp.Refused))
	}
	waitingForRoom.WithLabelValues(p.key).Set(float64(p.planner.Limited()))
	gatewayInstances.WithLabelValues(p.key).Set(float64(len(gp.Instances)))
	switch p.prog.outcome {
	case model.NoInstance:
		r.Log.Info("gateway has no running instance: nothing programmed until one runs", "gateway", p.key)
		quarantinedServices.WithLabelValues(p.key).Set(0)
		r.noteSync(p.key, gp, 0, nil)
	case model.Failed:
		r.reportFailure(p)
	default:
		r.reportProgrammed(p)
	}
	r.sessions.publish(p.key)
	if p.routes.written {
		unrouted := r.routeChecks.Unrouted(p.key)
		if p.routes.checked {
			unrouted = r.settleRouteCheck(p.key, p.routes)
		}
		r.noteRoutes(p.key, p.routes.want, p.routes.err, unrouted)
	}
	err := p.errorOf()
	if r.OnSynced != nil && len(p.prog.held) == 0 && err == nil {
		r.OnSynced(p.key)
	}
	if len(p.prog.held) > 0 {
		return reconcile.Result{RequeueAfter: model.QuarantineRetry}, err
	}
	return reconcile.Result{}, err
}

// reportFailure tells of a failed programming: metrics, status, and an event to every served
// Service of the gateway.
func (r *GatewayReconciler) reportFailure(p *pass) {
	syncDuration.WithLabelValues("error").Observe(p.prog.took.Seconds())
	syncFailures.WithLabelValues(p.key).Inc()
	// Every bound Service's owner reads this: a bounded, single-line text, and no transport
	// details (SPEC N6, N8); the log has the whole error.
	msg := fmt.Sprintf("programming gateway %s failed, retrying: %s", p.key, transport.EventText(p.prog.err))
	for _, sp := range p.mine {
		if sp.Served() {
			r.events.Emit(sp.Key, sp.UID, model.Event{Type: corev1.EventTypeWarning, Reason: model.ReasonProgrammingFailed, Message: msg})
		}
	}
	r.noteSync(p.key, p.gateway, 0, p.prog.err)
}

// reportProgrammed tells of a state every instance acknowledged: metrics (the network
// programming latency of each EndpointSlice change it carried among them), status, and an event
// to each quarantined Service.
func (r *GatewayReconciler) reportProgrammed(p *pass) {
	gp, prog := p.gateway, p.prog
	lastSuccessfulSync.WithLabelValues(p.key).Set(float64(prog.acked.UnixNano()) / 1e9)
	quarantinedServices.WithLabelValues(p.key).Set(float64(len(prog.held)))
	syncDuration.WithLabelValues("ok").Observe(prog.took.Seconds())
	r.latency.Observe(prog.changed, prog.acked)
	update := gp.Update()
	identities.WithLabelValues(p.key).Set(float64(update.Identities))
	backends.WithLabelValues(p.key).Set(float64(update.Backends))
	r.noteSync(p.key, gp, prog.generation, nil)
	r.Log.V(1).Info("gateway programmed", "gateway", p.key, "instances", len(gp.Instances), "identities", update.Identities, "clusterIPs", len(update.ClusterIPs))
	if len(prog.held) > 0 {
		r.Log.Info("the gateway refused identities; their Services are quarantined, the others programmed", "gateway", p.key, "services", len(prog.held))
	}
	for k, h := range prog.held {
		r.events.Emit(k, h.uid, model.Event{Type: corev1.EventTypeWarning, Reason: model.ReasonQuarantined, Message: fmt.Sprintf(
			"gateway %s refused this Service's change (%s): it is quarantined, the gateway keeps serving what it served for it before and the gateway's other Services are programmed; change the Service to try again (it is tried again every %s)",
			p.key, h.reason, model.QuarantineRetry)})
	}
}
