package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vpcgw/vpcgw/internal/controller/kubewrite"
	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/transport"
)

// Reconcile writes the plan of gateway req.Name in the order SPEC R3 and T2 ask for:
// finalizers, record claims, the gateway's instances, VIP routes, then record status, ingress,
// record deletions and finalizer releases (sync does; Reconcile throttles, times the pass and
// tells readiness how it ended).
func (r *GatewayReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	key := req.Name
	if wait := r.throttle.wait(key); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	r.health.Started(key)
	start := time.Now()
	res, full, err := r.sync(ctx, key)
	r.health.Ended(key, err == nil)
	reconcileDuration.WithLabelValues(planKind(full), resultOf(err)).Observe(time.Since(start).Seconds())
	return res, err
}

func planKind(full bool) string {
	if full {
		return "full"
	}
	return "partial"
}

func resultOf(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

// pass is one sync of a gateway: what each phase produced, for the next phases and the report.
type pass struct {
	key     string
	planner *model.Planner
	// full says whether the plan was full; plan is the plan of the Services planned, gateway the
	// plan of the whole gateway (nil: the gateway does not exist, or key is the unbound key).
	full    bool
	plan    model.Plan
	gateway *model.GatewayPlan
	slices  []discoveryv1.EndpointSlice
	// mine are the planned Services this gateway is responsible for; others are written by
	// their own gateway's pass.
	mine   []*model.ServicePlan
	writes writeLog
	prog   programReport
	routes routeReport
}

// writeLog collects the failed writes of a pass. A Service with a failed write is replanned on
// the next pass (which the error brings), so that its writes are decided again against what the
// cache then holds.
type writeLog struct {
	errs   []error
	failed map[*model.ServicePlan]bool
}

func (w *writeLog) note(sp *model.ServicePlan, errs ...error) {
	for _, err := range errs {
		if err != nil {
			w.errs = append(w.errs, err)
			w.failed[sp] = true
		}
	}
}

// programReport is how programming the gateway's instances ended.
type programReport struct {
	outcome model.Outcome
	err     error
	// generation is the state every instance acknowledged; took how long that took, acked when.
	generation int64
	took       time.Duration
	acked      time.Time
	// held are the Services quarantined (SPEC N4): an agent refused one of their identities.
	held map[types.NamespacedName]heldService
	// changed are the EndpointSlice changes the state carried, by their trigger time.
	changed map[types.UID]time.Time
}

type heldService struct {
	uid    types.UID
	reason string
}

// outcomeOf is how programming ended for Service k.
func (p programReport) outcomeOf(k types.NamespacedName) model.Outcome {
	if _, held := p.held[k]; held {
		return model.Held
	}
	return p.outcome
}

// sync is one pass of gateway key, in phases: plan, write before programming, program (the
// instances, then the VIP routes), write after programming; then report turns what the phases
// found into metrics, status, events and the result. full says whether the plan was full.
func (r *GatewayReconciler) sync(ctx context.Context, key string) (_ reconcile.Result, full bool, _ error) {
	// kube-ovn's own Service controller serves: vpcgw writes nothing (SPEC K10). A deliberate
	// state, told by the Serving condition and a metric, not a stale sync.
	if w := r.secondWriter(ctx); w.Serves {
		res, err := r.standAside(ctx, key, w)
		return res, false, err
	}
	p := &pass{key: key, planner: r.planners.of(key), writes: writeLog{failed: map[*model.ServicePlan]bool{}}}
	phase := phaseClock(time.Now())
	if err := r.plan(ctx, p); err != nil {
		// The marks this pass consumed are lost: the next pass plans the whole gateway.
		p.planner.Invalidate()
		return reconcile.Result{}, p.full, err
	}
	defer func() {
		for sp := range p.writes.failed {
			r.changes.MarkOwner(key, sp.Key, sp.UID)
		}
	}()
	phase("plan")
	written := r.writeBefore(ctx, p)
	phase("write-before")
	p.prog = r.program(ctx, p)
	phase("program")
	p.routes = r.writeRoutes(ctx, p)
	phase("routes")
	r.writeAfter(ctx, p, written)
	phase("write-after")
	res, err := r.report(p)
	phase("report")
	return res, p.full, err
}

// phaseClock returns a function that observes, for each phase it is called with, the time since
// the previous call (vpcgw_sync_phase_duration_seconds): where a pass spends its time.
func phaseClock(start time.Time) func(string) {
	return func(name string) {
		now := time.Now()
		phaseDuration.WithLabelValues(name).Observe(now.Sub(start).Seconds())
		start = now
	}
}

// plan asks the model what gateway key must serve: the planner says what to read (all of the
// gateway, or the Services the changes touch), the cache is read, and the planner plans it.
func (r *GatewayReconciler) plan(ctx context.Context, p *pass) error {
	base, err := r.gatewayObjects(ctx, p.key)
	if err != nil {
		p.full = true // the next pass plans in full
		return err
	}
	start := time.Now()
	plan, gp, snap, full, err := p.planner.Sync(cacheReader{ctx: ctx, c: r.Client}, base, p.key, r.changes.take(p.key), r.Flags.Gates())
	p.full = full
	if err != nil {
		return err
	}
	if full {
		fullSyncs.Inc()
	} else {
		partialSyncs.Inc()
	}
	planDuration.WithLabelValues(planKind(full)).Observe(time.Since(start).Seconds())
	p.plan, p.gateway, p.slices = plan, gp, snap.EndpointSlices
	for i := range plan.Services {
		if plan.Services[i].Gateway == p.key {
			p.mine = append(p.mine, &plan.Services[i])
		}
	}
	return nil
}

// writeBefore writes what comes before programming, as model.Before says: the claim stamp, the
// finalizer, then the records' claims of the identities (SPEC T2, R3). It returns the records
// as the API returned them, so that the status writes after programming need not wait for the
// cache to see them.
func (r *GatewayReconciler) writeBefore(ctx context.Context, p *pass) *kubewrite.Written {
	written := kubewrite.NewWritten()
	for _, sp := range p.mine {
		before := sp.Before()
		if before.Claim {
			p.writes.note(sp, r.writer.WriteClaim(ctx, sp))
		}
		if before.AddFinalizer {
			if err := r.writer.PatchFinalizer(ctx, sp, true); err != nil {
				p.writes.note(sp, err)
				sp.FinalizerFailed()
			}
		}
		if sp.Before().Records {
			p.writes.note(sp, r.writer.WriteRecords(ctx, sp, written)...)
		}
	}
	return written
}

// program sends the gateway's state to every instance (SPEC D7) and says how that ended. A
// gateway that is gone is forgotten (SPEC N4).
func (r *GatewayReconciler) program(ctx context.Context, p *pass) programReport {
	gp := p.gateway
	switch {
	case gp == nil:
		if p.key != unboundKey && !r.gatewayExists(ctx, p.key) {
			r.forgetGateway(p.key)
		}
		return programReport{outcome: model.GatewayGone}
	case len(gp.Instances) == 0:
		return programReport{outcome: model.NoInstance}
	}
	rep := programReport{outcome: model.Programmed, changed: r.latency.Pending(p.slices)}
	start := time.Now()
	acked, err := r.sessions.apply(ctx, p.key, transportInstances(gp), gp.Update())
	rep.acked = time.Now()
	rep.took, rep.generation = rep.acked.Sub(start), acked.Generation
	if err != nil {
		rep.outcome, rep.err = model.Failed, fmt.Errorf("programming gateway %s: %w", p.key, err)
		return rep
	}
	if len(acked.Refused) > 0 {
		hs, uids := p.planner.Quarantined(acked.Refused)
		rep.held = make(map[types.NamespacedName]heldService, len(hs))
		for k, reason := range hs {
			rep.held[k] = heldService{uid: uids[k], reason: transport.RefusalText(reason)}
			r.changes.MarkOwner(p.key, k, uids[k]) // replanned on the next pass: its writes are decided again
		}
	}
	return rep
}

// writeAfter writes what programming confirmed, and what is released, as the model decides
// (model.After, model.ReleaseOrphans).
func (r *GatewayReconciler) writeAfter(ctx context.Context, p *pass, written *kubewrite.Written) {
	if p.prog.outcome == model.Failed {
		for _, sp := range p.mine {
			p.writes.failed[sp] = true // their status, ingress and releases wait for programming
		}
	}
	for _, sp := range p.mine {
		after := sp.After(p.prog.outcomeOf(sp.Key))
		if after.RecordStatus {
			p.writes.note(sp, r.writer.WriteRecordStatus(ctx, sp, written)...)
		}
		if after.ServiceRecord {
			p.writes.note(sp, r.writer.WriteServiceRecord(ctx, sp))
		}
		ingressWritten := true
		if after.Ingress {
			err := r.writer.PublishIngress(ctx, sp)
			p.writes.note(sp, err)
			ingressWritten = err == nil
		}
		if after.Claim {
			p.writes.note(sp, r.writer.WriteClaim(ctx, sp))
		}
		// The records are what tells vpcgw's ingress from another implementation's: they go
		// once the ingress they name is withdrawn, not before (the next sync tries again).
		if after.Release && ingressWritten {
			r.release(ctx, p, sp, after.ReleaseFinalizer)
		}
	}
	if !model.ReleaseOrphans(p.prog.outcome, p.key) {
		return
	}
	if errs := append(r.writer.DeleteRecords(ctx, p.plan.OrphanRecords), r.writer.DeleteServiceRecords(ctx, p.plan.OrphanServiceRecords)...); len(errs) > 0 {
		// Orphans belong to no kept Service: only a full plan finds them again.
		p.planner.Invalidate()
		p.writes.errs = append(p.writes.errs, errs...)
	}
}

// release deletes the records the Service's plan lets go of, then, when finalizer says so and
// they are gone, its finalizer (SPEC T2).
func (r *GatewayReconciler) release(ctx context.Context, p *pass, sp *model.ServicePlan, finalizer bool) {
	errs := append(r.writer.DeleteRecords(ctx, sp.DeleteRecords), r.writer.DeleteServiceRecords(ctx, sp.DeleteServiceRecords)...)
	p.writes.note(sp, errs...)
	if finalizer && len(errs) == 0 {
		p.writes.note(sp, r.writer.PatchFinalizer(ctx, sp, false))
	}
}

func transportInstances(gp *model.GatewayPlan) []transport.Instance {
	out := make([]transport.Instance, 0, len(gp.Instances))
	for _, inst := range gp.Instances {
		out = append(out, transport.Instance{
			Gateway: gp.Name, Namespace: inst.Pod.Namespace, Pod: inst.Pod.Name, UID: inst.Pod.UID,
			Workload: inst.Workload, WorkloadNamespace: inst.WorkloadNamespace,
		})
	}
	return out
}

// errorOf is the pass's error: every failed write, programming, and the VIP routes.
func (p *pass) errorOf() error {
	errs := p.writes.errs
	if p.prog.err != nil {
		errs = append(errs, p.prog.err)
	}
	if p.routes.err != nil {
		errs = append(errs, fmt.Errorf("VIP routes of gateway %s: %w", p.key, p.routes.err))
	}
	return errors.Join(errs...)
}
