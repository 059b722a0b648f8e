package controller_test

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/model"
)

// covers: L10, R5, I3
// A record whose owner does not exist, created while the controller runs (restored from a
// backup, written by hand), is removed as soon as it is seen: its create event replans its owner
// in a partial plan, which finds it orphaned. Before, a record's create event was taken for the
// controller's own and dropped, and the orphan stayed until the gateway's next full plan, which a
// quiet gateway may not have for hours. The served Service's own record stays.
func TestOrphanRecordRemovedWhenSeen(t *testing.T) {
	f := newFixture(t, "gw-orphan", 1)
	ctx := context.Background()
	f.eip("eip-orphan", "172.18.33.10", true)
	f.service("web", "eip-orphan", 80, "10.0.1.71")
	f.eventually("served, with its record", func() bool {
		return ingressIs(f.get("web"), "172.18.33.10") && allReady(f.records("web"), "172.18.33.10")
	})
	own := f.records("web")[0]
	fullBefore := metricValue(t, "vpcgw_full_plans_total", nil)

	// The same record, for a Service of that namespace that no longer exists.
	gone := types.UID("0d3c0c6e-0000-4000-8000-00000000a11e")
	orphan := &vpcgwv1alpha1.ServiceRecord{ObjectMeta: metav1.ObjectMeta{Name: model.ServiceRecordName(f.ns, "gone", gone), Labels: map[string]string{}},
		Spec: *own.Spec.DeepCopy()}
	for k, v := range own.Labels {
		orphan.Labels[k] = v
	}
	orphan.Labels[model.LabelRecordName], orphan.Labels[model.LabelRecordUID] = "gone", string(gone)
	orphan.Spec.Service = vpcgwv1alpha1.ServiceReference{Namespace: f.ns, Name: "gone", UID: gone}
	must(t, k8s.Create(ctx, orphan))
	f.eventually("the orphan removed", func() bool {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(orphan), &vpcgwv1alpha1.ServiceRecord{})
		return apierrors.IsNotFound(err)
	})
	if full := metricValue(t, "vpcgw_full_plans_total", nil); full != fullBefore {
		t.Errorf("full plans went from %v to %v: the orphan waited for a full plan", fullBefore, full)
	}
	if rs := f.records("web"); len(rs) != 1 || rs[0].UID != own.UID {
		t.Fatalf("the served Service's record changed: %d records", len(rs))
	}
}
