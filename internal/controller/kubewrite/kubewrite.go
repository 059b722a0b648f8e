// Package kubewrite makes the API writes of a gateway's plan: the finalizer, claim stamp and
// ingress of a Service, and the records of both ledger forms. Each write is one the plan asks
// for; none decides anything. It remembers its own writes, so that their events are not taken
// for someone else's (SPEC R4).
package kubewrite

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/model"
)

// Writer writes plans through Client.
type Writer struct {
	Client client.Client
	Log    logr.Logger
	// ownDeletes holds the UIDs of records being deleted, so that their delete events are not
	// taken for someone else's (SPEC R4).
	ownDeletes sync.Map
	// ownWrites holds, per record UID, the resourceVersion of the last write, so that its
	// event does not wake the gateway again.
	ownWrites sync.Map
}

// RecordsWritten counts the record writes, by operation (SPEC O3).
var RecordsWritten = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "vpcgw_records_written_total",
	Help: "Service records written (ServiceRecords, or share IptablesDnatRules), by operation.",
}, []string{"op"})

// OwnWrite reports whether a record's event shows its last write by this Writer (and forgets it):
// that event is not news.
func (w *Writer) OwnWrite(uid types.UID, resourceVersion string) bool {
	rv, own := w.ownWrites.Load(uid)
	if !own || rv != resourceVersion {
		return false
	}
	w.ownWrites.CompareAndDelete(uid, rv)
	return true
}

// OwnDelete reports whether a record's delete event is of this Writer's delete (and forgets
// the record).
func (w *Writer) OwnDelete(uid types.UID) bool {
	w.ownWrites.Delete(uid)
	_, own := w.ownDeletes.LoadAndDelete(uid)
	return own
}

// PatchFinalizer adds or removes the finalizer with a strategic merge patch that names only that
// finalizer and carries no resourceVersion: it never conflicts with kube-ovn-controller's full
// Service updates (SPEC K4), and leaves other finalizers alone.
func (w *Writer) PatchFinalizer(ctx context.Context, sp *model.ServicePlan, add bool) error {
	var svc corev1.Service
	if err := w.Client.Get(ctx, sp.Key, &svc); err != nil {
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
	if err := w.Client.Patch(ctx, &svc, client.RawPatch(types.StrategicMergePatchType, data)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("service %s: finalizer: %w", sp.Key, err)
	}
	w.Log.Info("finalizer "+map[bool]string{true: "added", false: "released"}[add], "service", sp.Key)
	return nil
}

// WriteClaim stamps or removes the Service's claim condition (SPEC I2, model/claim.go): a
// strategic merge patch of services/status that touches that condition only, keyed by its type.
func (w *Writer) WriteClaim(ctx context.Context, sp *model.ServicePlan) error {
	return w.patchServiceStatus(ctx, sp, false)
}

// patchServiceStatus writes the plan's claim stamp and, with ingress, its
// status.loadBalancer.ingress (SPEC T1) in one strategic merge patch of services/status: the
// ingress list is replaced whole, the conditions are merged by type, so nobody else's
// condition is touched.
func (w *Writer) patchServiceStatus(ctx context.Context, sp *model.ServicePlan, ingress bool) error {
	var svc corev1.Service
	if err := w.Client.Get(ctx, sp.Key, &svc); err != nil {
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
	if err := w.Client.Status().Patch(ctx, &svc, client.StrategicMergeFrom(orig)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("service %s status: %w", sp.Key, err)
	}
	if ingress {
		w.Log.Info("ingress written", "service", sp.Key, "ingress", sp.Ingress)
	}
	if claimed {
		w.Log.V(1).Info("claim stamp "+map[bool]string{true: "written", false: "removed"}[sp.Claim == model.ClaimStamp], "service", sp.Key)
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

// Written are the records a sync created or updated, as the API server returned them: the status
// writes after programming need not wait for the cache to see them.
type Written struct {
	mu     sync.Mutex
	byName map[string]*kubeovnv1.IptablesDnatRule
}

// NewWritten is an empty Written, for one sync.
func NewWritten() *Written {
	return &Written{byName: map[string]*kubeovnv1.IptablesDnatRule{}}
}

func (wr *Written) put(rec *kubeovnv1.IptablesDnatRule) {
	wr.mu.Lock()
	wr.byName[rec.Name] = rec
	wr.mu.Unlock()
}

func (wr *Written) get(name string) *kubeovnv1.IptablesDnatRule {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	return wr.byName[name]
}

// WriteRecords creates and updates the Service's records: the ledger claims before programming.
func (w *Writer) WriteRecords(ctx context.Context, sp *model.ServicePlan, written *Written) []error {
	errs := each(len(sp.CreateRecords), func(i int) error {
		rec := sp.CreateRecords[i].DeepCopy()
		rec.Status = kubeovnv1.IptablesDnatRuleStatus{}
		err := w.Client.Create(ctx, rec)
		switch {
		case err == nil:
			w.ownWrites.Store(rec.UID, rec.ResourceVersion) // its create event is not someone else's
			RecordsWritten.WithLabelValues("create").Inc()
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
		if err := w.Client.Get(ctx, types.NamespacedName{Name: want.Name}, &cur); err != nil {
			return fmt.Errorf("reading record %s: %w", want.Name, err)
		}
		cur.Spec = want.Spec
		if cur.Labels == nil {
			cur.Labels = map[string]string{}
		}
		maps.Copy(cur.Labels, want.Labels)
		cur.Status.Ready = false
		if err := w.Client.Update(ctx, &cur); err != nil {
			return fmt.Errorf("updating record %s: %w", want.Name, err)
		}
		RecordsWritten.WithLabelValues("update").Inc()
		written.put(&cur)
		return nil
	})...)
}

// WriteRecordStatus marks records Ready with the values the gateway now serves (SPEC R3).
func (w *Writer) WriteRecordStatus(ctx context.Context, sp *model.ServicePlan, written *Written) []error {
	return each(len(sp.StatusRecords), func(i int) error {
		want := sp.StatusRecords[i]
		var cur kubeovnv1.IptablesDnatRule
		if got := written.get(want.Name); got != nil {
			cur = *got // written in this pass: the cache may not have it yet
		} else if err := w.Client.Get(ctx, types.NamespacedName{Name: want.Name}, &cur); err != nil {
			return fmt.Errorf("reading record %s for its status: %w", want.Name, err)
		}
		if cur.Labels[model.LabelRecordUID] != string(sp.UID) {
			return nil
		}
		conds := cur.Status.Conditions
		cur.Status = want.Status
		cur.Status.Conditions = conds
		cur.Status.Conditions.Set(kubeovnv1.ConditionType("Ready"), corev1.ConditionTrue, "Programmed", "served by every instance of gateway "+sp.Gateway, cur.Generation)
		if err := w.Client.Status().Update(ctx, &cur); err != nil {
			return fmt.Errorf("record %s status: %w", want.Name, err)
		}
		RecordsWritten.WithLabelValues("status").Inc()
		return nil
	})
}

// DeleteRecords deletes the seed ledger's records of names (SPEC R4).
func (w *Writer) DeleteRecords(ctx context.Context, names []string) []error {
	return w.deleteEach(ctx, names, "record", func() client.Object { return &kubeovnv1.IptablesDnatRule{} })
}

// deleteEach deletes the named objects, each exactly as read (UID precondition), so that its
// delete event is known as this Writer's; one already gone is no error.
func (w *Writer) deleteEach(ctx context.Context, names []string, what string, newObject func() client.Object) []error {
	return each(len(names), func(i int) error {
		cur := newObject()
		if err := w.Client.Get(ctx, types.NamespacedName{Name: names[i]}, cur, client.UnsafeDisableDeepCopy); err != nil {
			return client.IgnoreNotFound(err)
		}
		uid := cur.GetUID()
		obj := newObject()
		obj.SetName(names[i])
		obj.SetUID(uid)
		w.ownDeletes.Store(uid, true)
		if err := w.Client.Delete(ctx, obj, client.Preconditions{UID: &uid}); err != nil {
			w.ownDeletes.Delete(uid)
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("deleting %s %s: %w", what, names[i], err)
		}
		w.ownWrites.Delete(uid)
		RecordsWritten.WithLabelValues("delete").Inc()
		return nil
	})
}

// WriteServiceRecord writes the Service's record as the gateway now serves it: one server-side
// apply, a create or an update alike, with spec and status in the same request (SPEC R3, R6).
func (w *Writer) WriteServiceRecord(ctx context.Context, sp *model.ServicePlan) error {
	want := sp.Record
	rec := &vpcgwv1alpha1.ServiceRecord{
		TypeMeta:   metav1.TypeMeta{APIVersion: vpcgwv1alpha1.GroupVersion.String(), Kind: "ServiceRecord"},
		ObjectMeta: metav1.ObjectMeta{Name: want.Name, Labels: want.Labels},
		Spec:       want.Spec,
		Status:     want.Status,
	}
	// ServiceRecord has no generated apply configuration: the apply sends rec's unstructured form
	// (the JSON that Patch with client.Apply sent) and reads the API server's answer into it.
	fields, err := runtime.DefaultUnstructuredConverter.ToUnstructured(rec)
	if err != nil {
		return fmt.Errorf("encoding ServiceRecord %s of %s: %w", want.Name, sp.Key, err)
	}
	applied := &unstructured.Unstructured{Object: fields}
	if err := w.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(applied), client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("writing ServiceRecord %s of %s: %w", want.Name, sp.Key, err)
	}
	w.ownWrites.Store(applied.GetUID(), applied.GetResourceVersion())
	RecordsWritten.WithLabelValues("service-record").Inc()
	return nil
}

// DeleteServiceRecords deletes the ServiceRecords of names (SPEC R4).
func (w *Writer) DeleteServiceRecords(ctx context.Context, names []string) []error {
	return w.deleteEach(ctx, names, "ServiceRecord", func() client.Object { return &vpcgwv1alpha1.ServiceRecord{} })
}

// fieldOwner is the field manager of the controller's server-side applies.
const fieldOwner = "vpcgw-controller"

// PublishIngress makes status.loadBalancer.ingress equal to the plan's (SPEC T1), with the
// claim stamp the plan writes, in one status write.
func (w *Writer) PublishIngress(ctx context.Context, sp *model.ServicePlan) error {
	return w.patchServiceStatus(ctx, sp, true)
}
