package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/transport"
)

// Reconcile writes the plan of gateway req.Name in the order SPEC R3 and T2 ask for:
// finalizers, record claims, the gateway's instances, VIP routes, then record status, ingress,
// record deletions and finalizer releases (sync does; Reconcile throttles, times the pass and
// tells readiness how it ended).
func (r *GatewayReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	key := req.Name
	if wait := r.throttle(key); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	r.health.started(key)
	start := time.Now()
	res, full, err := r.sync(ctx, key)
	r.health.ended(key, err == nil)
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

// sync is one pass of gateway key; full says whether its plan was full.
func (r *GatewayReconciler) sync(ctx context.Context, key string) (_ reconcile.Result, full bool, _ error) {
	log := r.Log.WithValues("gateway", key)
	// kube-ovn's own Service controller serves: vpcgw writes nothing (SPEC K10). A deliberate
	// state, told by the Serving condition and a metric, not a stale sync.
	if w := r.secondWriter(ctx); w.Serves {
		res, err := r.standAside(ctx, key, w)
		return res, false, err
	}
	planner := r.planners.of(key)
	plan, gp, endpointSlices, full, err := r.plan(ctx, key, planner)
	if err != nil {
		// The marks this pass consumed are lost: the next pass plans the whole gateway.
		planner.Invalidate()
		return reconcile.Result{}, full, err
	}
	if gp != nil {
		waitingForRoom.WithLabelValues(key).Set(float64(planner.Limited()))
		gatewayInstances.WithLabelValues(key).Set(float64(len(gp.Instances)))
	}

	// Only the Services this gateway is responsible for; others are written by their own.
	var mine []*model.ServicePlan
	for i := range plan.Services {
		if plan.Services[i].Gateway == key {
			mine = append(mine, &plan.Services[i])
		}
	}

	// A Service with a failed write is replanned on the next pass (which the error brings), so
	// that its writes are decided again against what the cache then holds.
	var errs []error
	failed := map[*model.ServicePlan]bool{}
	note := func(sp *model.ServicePlan, es ...error) {
		for _, err := range es {
			if err != nil {
				errs = append(errs, err)
				failed[sp] = true
			}
		}
	}
	defer func() {
		for sp := range failed {
			r.changes.markOwner(key, sp.Key, sp.UID)
		}
	}()

	// 1. Finalizer first, then the records claim the identities (SPEC T2, R3). written keeps what
	// the API returned, so that the status writes below need not wait for the cache to see it.
	written := &writtenRecords{byName: map[string]*kubeovnv1.IptablesDnatRule{}}
	for _, sp := range mine {
		r.emit(sp)
		if sp.Claim != model.ClaimKept && !sp.IngressWrite {
			// With an ingress to write, the stamp goes in the same status write (below): one
			// write of the Service, as before, so that kube-ovn-controller's own full Update of
			// the Service does not meet a second one of ours (a conflict it logs as a failure).
			note(sp, r.writeClaim(ctx, sp))
		}
		if sp.AddFinalizer {
			if err := r.patchFinalizer(ctx, sp, true); err != nil {
				note(sp, err)
				sp.CreateRecords, sp.UpdateRecords, sp.StatusRecords = nil, nil, nil
				continue
			}
		}
		note(sp, r.writeRecords(ctx, sp, written)...)
	}

	// 2. The gateway's instances, then its VIP routes. held are the Services quarantined (SPEC
	// N4): an agent refused one of their identities, so nothing of their new plan is confirmed.
	programmed := false
	held := map[types.NamespacedName]bool{}
	if gp == nil {
		r.noteGone(key)
		if key != unboundKey && !r.gatewayExists(ctx, key) {
			r.forgetGateway(key)
		}
	} else {
		switch {
		case len(gp.Instances) == 0:
			log.Info("gateway has no running instance: nothing programmed until one runs")
			quarantinedServices.WithLabelValues(key).Set(0)
			r.noteSync(key, gp, 0, nil)
		default:
			changed := r.latency.pending(endpointSlices)
			start := time.Now()
			update := gp.Update()
			acked, err := r.sessions.apply(ctx, key, transportInstances(gp), update)
			if len(acked.Refused) > 0 && err == nil {
				hs, uids := planner.Quarantined(acked.Refused)
				log.Info("the gateway refused identities; their Services are quarantined, the others programmed", "refused", len(acked.Refused), "services", len(hs))
				for k, reason := range hs {
					held[k] = true
					r.changes.markOwner(key, k, uids[k]) // replanned on the next pass: its writes are decided again
					sp := &model.ServicePlan{Key: k, UID: uids[k]}
					r.emitOnce(sp, model.Event{Type: corev1.EventTypeWarning, Reason: model.ReasonQuarantined, Message: fmt.Sprintf(
						"gateway %s refused this Service's change (%s): it is quarantined, the gateway keeps serving what it served for it before and the gateway's other Services are programmed; change the Service to try again (it is tried again every %s)",
						key, transport.RefusalText(reason), model.QuarantineRetry)})
				}
			}
			if err != nil {
				syncDuration.WithLabelValues("error").Observe(time.Since(start).Seconds())
				syncFailures.WithLabelValues(key).Inc()
				// Every bound Service's owner reads this: a bounded, single-line text, and no
				// transport details (SPEC N6, N8); the log has the whole error.
				msg := fmt.Sprintf("programming gateway %s failed, retrying: %s", key, transport.EventText(err))
				for _, sp := range mine {
					failed[sp] = true // their status, ingress and releases wait for programming
					if sp.Served() {
						r.emitOnce(sp, model.Event{Type: corev1.EventTypeWarning, Reason: model.ReasonProgrammingFailed, Message: msg})
					}
				}
				r.noteSync(key, gp, 0, err)
				r.sessions.publish(key)
				return reconcile.Result{}, full, errors.Join(append(errs, fmt.Errorf("programming gateway %s: %w", key, err))...)
			}
			now := time.Now()
			lastSuccessfulSync.WithLabelValues(key).Set(float64(now.UnixNano()) / 1e9)
			quarantinedServices.WithLabelValues(key).Set(float64(len(held)))
			syncDuration.WithLabelValues("ok").Observe(now.Sub(start).Seconds())
			if lat := r.latency.observe(changed, now); r.OnProgrammed != nil {
				r.OnProgrammed(key, lat)
			}
			identities.WithLabelValues(key).Set(float64(update.Identities))
			backends.WithLabelValues(key).Set(float64(update.Backends))
			programmed = true
			r.noteSync(key, gp, acked.Generation, nil)
			log.V(1).Info("gateway programmed", "instances", len(gp.Instances), "identities", update.Identities, "clusterIPs", len(update.ClusterIPs))
		}
		r.sessions.publish(key)
		if r.Routes != nil {
			err := r.Routes.Sync(ctx, gp.Routes)
			unrouted := r.lastUnrouted(key)
			if err == nil {
				// Written: would OVN carry the VIPs to them (SPEC V3)?
				unrouted = r.checkRoutes(ctx, key, gp.Routes, planner)
			}
			r.noteRoutes(key, gp.Routes, err, unrouted)
			if err != nil {
				errs = append(errs, fmt.Errorf("VIP routes of gateway %s: %w", key, err))
			}
		}
	}

	// 3. What programming confirmed, and what is released, as the model decides (model.After).
	outcome := model.Programmed
	switch {
	case gp == nil:
		outcome = model.GatewayGone
	case !programmed:
		outcome = model.NoInstance
	}
	for _, sp := range mine {
		o := outcome
		if held[sp.Key] {
			o = model.Held
		}
		after := sp.After(o)
		if after.RecordStatus {
			note(sp, r.writeRecordStatus(ctx, sp, written)...)
		}
		if after.ServiceRecord {
			note(sp, r.writeServiceRecord(ctx, sp))
		}
		switch {
		case after.Ingress:
			note(sp, r.publishIngress(ctx, sp))
		case sp.Claim != model.ClaimKept && sp.IngressWrite:
			note(sp, r.writeClaim(ctx, sp))
		}
		if !after.Release {
			continue
		}
		delErrs := append(r.deleteRecords(ctx, sp.DeleteRecords), r.deleteServiceRecords(ctx, sp.DeleteServiceRecords)...)
		note(sp, delErrs...)
		if after.ReleaseFinalizer && len(delErrs) == 0 {
			note(sp, r.patchFinalizer(ctx, sp, false))
		}
	}
	if model.ReleaseOrphans(outcome, key) {
		if delErrs := append(r.deleteRecords(ctx, plan.OrphanRecords), r.deleteServiceRecords(ctx, plan.OrphanServiceRecords)...); len(delErrs) > 0 {
			// Orphans belong to no kept Service: only a full plan finds them again.
			planner.Invalidate()
			errs = append(errs, delErrs...)
		}
	}
	var res reconcile.Result
	if len(held) > 0 {
		res.RequeueAfter = model.QuarantineRetry
	}
	if r.OnSynced != nil && gp != nil && len(held) == 0 && len(errs) == 0 {
		r.OnSynced(key)
	}
	return res, full, errors.Join(errs...)
}

// plan asks the model what gateway key must serve: the planner says what to read (all of the
// gateway, or the Services the changes touch), the cache is read, and the planner plans it. It
// returns the plan of the Services planned, the plan of the whole gateway (nil: the gateway does
// not exist, or key is the unbound key), the EndpointSlices read and whether the plan was full.
func (r *GatewayReconciler) plan(ctx context.Context, key string, p *model.Planner) (model.Plan, *model.GatewayPlan, []discoveryv1.EndpointSlice, bool, error) {
	base, err := r.gatewayObjects(ctx, key)
	if err != nil {
		return model.Plan{}, nil, nil, true, err // the next pass plans in full
	}
	start := time.Now()
	plan, gp, snap, full, err := p.Sync(cacheReader{ctx: ctx, c: r.Client}, base, key, r.changes.take(key), r.Flags.Gates())
	if err != nil {
		return model.Plan{}, nil, nil, full, err
	}
	if full {
		fullSyncs.Inc()
	} else {
		partialSyncs.Inc()
	}
	planDuration.WithLabelValues(planKind(full)).Observe(time.Since(start).Seconds())
	return plan, gp, snap.EndpointSlices, full, nil
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

// patchFinalizer adds or removes the finalizer with a strategic merge patch that names only that
// finalizer and carries no resourceVersion: it never conflicts with kube-ovn-controller's full
// Service updates (SPEC K4), and leaves other finalizers alone.
func (r *GatewayReconciler) patchFinalizer(ctx context.Context, sp *model.ServicePlan, add bool) error {
	var svc corev1.Service
	if err := r.Client.Get(ctx, sp.Key, &svc); err != nil {
		return client.IgnoreNotFound(err)
	}
	if svc.UID != sp.UID || slices.Contains(svc.Finalizers, model.Finalizer) == add {
		return nil
	}
	// The UID in the patch makes the API server refuse it for a Service recreated meanwhile.
	meta := map[string]any{"uid": string(sp.UID)}
	if add {
		meta["finalizers"] = []string{model.Finalizer}
	} else {
		meta["$deleteFromPrimitiveList/finalizers"] = []string{model.Finalizer}
	}
	data, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	if err := r.Client.Patch(ctx, &svc, client.RawPatch(types.StrategicMergePatchType, data)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("service %s: finalizer: %w", sp.Key, err)
	}
	r.Log.Info("finalizer "+map[bool]string{true: "added", false: "released"}[add], "service", sp.Key)
	return nil
}

// writeClaim stamps or removes the Service's claim condition (SPEC I2, model/claim.go): a
// strategic merge patch of services/status that touches that condition only, keyed by its type.
func (r *GatewayReconciler) writeClaim(ctx context.Context, sp *model.ServicePlan) error {
	return r.patchServiceStatus(ctx, sp, false)
}

// patchServiceStatus writes the plan's claim stamp and, with ingress, its
// status.loadBalancer.ingress (SPEC T1) in one strategic merge patch of services/status: the
// ingress list is replaced whole, the conditions are merged by type, so nobody else's
// condition is touched.
func (r *GatewayReconciler) patchServiceStatus(ctx context.Context, sp *model.ServicePlan, ingress bool) error {
	var svc corev1.Service
	if err := r.Client.Get(ctx, sp.Key, &svc); err != nil {
		return client.IgnoreNotFound(err)
	}
	if svc.UID != sp.UID {
		return nil
	}
	orig := svc.DeepCopy()
	claimed := sp.ApplyClaim(&svc, time.Now())
	if ingress {
		svc.Status.LoadBalancer.Ingress = sp.Ingress
	} else if !claimed {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, &svc, client.StrategicMergeFrom(orig)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("service %s status: %w", sp.Key, err)
	}
	if ingress {
		r.Log.Info("ingress written", "service", sp.Key, "ingress", sp.Ingress)
	}
	if claimed {
		r.Log.V(1).Info("claim stamp "+map[bool]string{true: "written", false: "removed"}[sp.Claim == model.ClaimStamp], "service", sp.Key)
	}
	return nil
}

// recordWriters bounds the API writes of records in flight: one change can touch many records
// (one per backend), and writing them one after another made syncs wait on round trips.
const recordWriters = 8

// each runs fn for 0..n-1 with at most recordWriters at once and returns the errors.
func each(n int, fn func(i int) error) []error {
	errs := make([]error, n)
	sem := make(chan struct{}, recordWriters)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = fn(i)
		})
	}
	wg.Wait()
	return slices.DeleteFunc(errs, func(err error) bool { return err == nil })
}

// writtenRecords are the records a sync created or updated, as the API server returned them.
type writtenRecords struct {
	mu     sync.Mutex
	byName map[string]*kubeovnv1.IptablesDnatRule
}

func (w *writtenRecords) put(rec *kubeovnv1.IptablesDnatRule) {
	w.mu.Lock()
	w.byName[rec.Name] = rec
	w.mu.Unlock()
}

func (w *writtenRecords) get(name string) *kubeovnv1.IptablesDnatRule {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.byName[name]
}

// writeRecords creates and updates the Service's records: the ledger claims before programming.
func (r *GatewayReconciler) writeRecords(ctx context.Context, sp *model.ServicePlan, written *writtenRecords) []error {
	errs := each(len(sp.CreateRecords), func(i int) error {
		rec := sp.CreateRecords[i].DeepCopy()
		rec.Status = kubeovnv1.IptablesDnatRuleStatus{}
		err := r.Client.Create(ctx, rec)
		switch {
		case err == nil:
			r.ownWrites.Store(rec.UID, rec.ResourceVersion) // its create event is not someone else's
			recordsWritten.WithLabelValues("create").Inc()
			written.put(rec)
			return nil
		case apierrors.IsAlreadyExists(err):
			// A record of a former Service of the same name (another UID): it goes as an orphan
			// first (SPEC I3), and this one is created on the next pass.
			return fmt.Errorf("record %s exists for another owner; retrying after its release", rec.Name)
		}
		return fmt.Errorf("creating record %s: %w", rec.Name, err)
	})
	return append(errs, each(len(sp.UpdateRecords), func(i int) error {
		want := sp.UpdateRecords[i]
		var cur kubeovnv1.IptablesDnatRule
		if err := r.Client.Get(ctx, types.NamespacedName{Name: want.Name}, &cur); err != nil {
			return fmt.Errorf("reading record %s: %w", want.Name, err)
		}
		cur.Spec = want.Spec
		if cur.Labels == nil {
			cur.Labels = map[string]string{}
		}
		maps.Copy(cur.Labels, want.Labels)
		cur.Status.Ready = false
		if err := r.Client.Update(ctx, &cur); err != nil {
			return fmt.Errorf("updating record %s: %w", want.Name, err)
		}
		recordsWritten.WithLabelValues("update").Inc()
		written.put(&cur)
		return nil
	})...)
}

// writeRecordStatus marks records Ready with the values the gateway now serves (SPEC R3).
func (r *GatewayReconciler) writeRecordStatus(ctx context.Context, sp *model.ServicePlan, written *writtenRecords) []error {
	return each(len(sp.StatusRecords), func(i int) error {
		want := sp.StatusRecords[i]
		var cur kubeovnv1.IptablesDnatRule
		if w := written.get(want.Name); w != nil {
			cur = *w // written in this pass: the cache may not have it yet
		} else if err := r.Client.Get(ctx, types.NamespacedName{Name: want.Name}, &cur); err != nil {
			return fmt.Errorf("reading record %s for its status: %w", want.Name, err)
		}
		if cur.Labels[model.LabelRecordUID] != string(sp.UID) {
			return nil
		}
		conds := cur.Status.Conditions
		cur.Status = want.Status
		cur.Status.Conditions = conds
		cur.Status.Conditions.Set(kubeovnv1.ConditionType("Ready"), corev1.ConditionTrue, "Programmed", "served by every instance of gateway "+sp.Gateway, cur.Generation)
		if err := r.Client.Status().Update(ctx, &cur); err != nil {
			return fmt.Errorf("record %s status: %w", want.Name, err)
		}
		recordsWritten.WithLabelValues("status").Inc()
		return nil
	})
}

func (r *GatewayReconciler) deleteRecords(ctx context.Context, names []string) []error {
	return each(len(names), func(i int) error {
		var cur kubeovnv1.IptablesDnatRule
		if err := r.Client.Get(ctx, types.NamespacedName{Name: names[i]}, &cur, client.UnsafeDisableDeepCopy); err != nil {
			return client.IgnoreNotFound(err)
		}
		// Delete exactly the record read (UID precondition): its delete event is ours.
		rec := &kubeovnv1.IptablesDnatRule{ObjectMeta: metav1.ObjectMeta{Name: names[i], UID: cur.UID}}
		r.ownDeletes.Store(cur.UID, true)
		if err := r.Client.Delete(ctx, rec, client.Preconditions{UID: &cur.UID}); err != nil {
			r.ownDeletes.Delete(cur.UID)
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("deleting record %s: %w", names[i], err)
		}
		r.ownWrites.Delete(cur.UID)
		recordsWritten.WithLabelValues("delete").Inc()
		return nil
	})
}

// writeServiceRecord writes the Service's record as the gateway now serves it: one server-side
// apply, a create or an update alike, with spec and status in the same request (SPEC R3, R6).
func (r *GatewayReconciler) writeServiceRecord(ctx context.Context, sp *model.ServicePlan) error {
	want := sp.Record
	rec := &vpcgwv1alpha1.ServiceRecord{
		TypeMeta:   metav1.TypeMeta{APIVersion: vpcgwv1alpha1.GroupVersion.String(), Kind: "ServiceRecord"},
		ObjectMeta: metav1.ObjectMeta{Name: want.Name, Labels: want.Labels},
		Spec:       want.Spec,
		Status:     want.Status,
	}
	if err := r.Client.Patch(ctx, rec, client.Apply, client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("writing ServiceRecord %s of %s: %w", want.Name, sp.Key, err)
	}
	r.ownWrites.Store(rec.UID, rec.ResourceVersion)
	recordsWritten.WithLabelValues("service-record").Inc()
	return nil
}

func (r *GatewayReconciler) deleteServiceRecords(ctx context.Context, names []string) []error {
	return each(len(names), func(i int) error {
		var cur vpcgwv1alpha1.ServiceRecord
		if err := r.Client.Get(ctx, types.NamespacedName{Name: names[i]}, &cur, client.UnsafeDisableDeepCopy); err != nil {
			return client.IgnoreNotFound(err)
		}
		rec := &vpcgwv1alpha1.ServiceRecord{ObjectMeta: metav1.ObjectMeta{Name: names[i], UID: cur.UID}}
		r.ownDeletes.Store(cur.UID, true)
		if err := r.Client.Delete(ctx, rec, client.Preconditions{UID: &cur.UID}); err != nil {
			r.ownDeletes.Delete(cur.UID)
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("deleting ServiceRecord %s: %w", names[i], err)
		}
		r.ownWrites.Delete(cur.UID)
		recordsWritten.WithLabelValues("delete").Inc()
		return nil
	})
}

// fieldOwner is the field manager of the controller's server-side applies.
const fieldOwner = "vpcgw-controller"

// publishIngress makes status.loadBalancer.ingress equal to the plan's (SPEC T1), with the
// claim stamp the plan writes, in one status write.
func (r *GatewayReconciler) publishIngress(ctx context.Context, sp *model.ServicePlan) error {
	return r.patchServiceStatus(ctx, sp, true)
}

// emit records the plan's events for one Service, each cause once.
func (r *GatewayReconciler) emit(sp *model.ServicePlan) {
	for _, ev := range sp.Events {
		r.emitOnce(sp, ev)
	}
}

// eventAction names the cause of an event: events.k8s.io folds events of one object, reason and
// action into a series that keeps its first note (client-go tools/events getKey), so a later,
// different cause of the same reason would never be shown. The action carries a digest of the
// note: one cause repeated is one series, a new cause a new event (SPEC T3).
func eventAction(note string) string {
	h := fnv.New32a()
	h.Write([]byte(note))
	return fmt.Sprintf("Reconcile-%08x", h.Sum32())
}

func (r *GatewayReconciler) emitOnce(sp *model.ServicePlan, ev model.Event) {
	ev.Message = model.BoundMessage(ev.Message) // the API refuses longer notes (SPEC N6)
	r.eventsMu.Lock()
	m := r.lastEvent[sp.UID]
	if m == nil {
		m = map[string]string{}
		r.lastEvent[sp.UID] = m
	}
	dup := m[ev.Reason] == ev.Message
	m[ev.Reason] = ev.Message
	r.eventsMu.Unlock()
	if dup {
		return
	}
	ref := &corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: sp.Key.Namespace, Name: sp.Key.Name, UID: sp.UID}
	r.Recorder.Eventf(ref, nil, ev.Type, ev.Reason, eventAction(ev.Message), "%s", ev.Message)
}
