package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/model"
)

// The API writes of a sync: finalizer, claim stamp and ingress on the Service, the records of
// both ledger forms. Each write is one the plan asks for; none decides anything.

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

func newWrittenRecords() *writtenRecords {
	return &writtenRecords{byName: map[string]*kubeovnv1.IptablesDnatRule{}}
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
