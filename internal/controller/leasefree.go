package controller

import (
	"context"
	"fmt"
	"strings"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// ReleaseIdentityPrefix starts the holder identity vpcgw release writes into the controller's
// leader election Lease (ReleaseOptions.Identity's default).
const ReleaseIdentityPrefix = "vpcgw-release-"

// freeEarlierInstallsLease lets a new install serve at once after an uninstall. The uninstall's
// release keeps the controller's Lease for --lease-hold after it ends, so that the controller
// being uninstalled, which lost the Lease and restarted in its Pod, stands by until helm deleted
// it. That hold outlives the uninstall; a controller installed again into the same namespace
// would stand by until it expires (10 minutes by default). So a controller whose Pod was created
// after the release took the Lease releases it (holder emptied, as a leader that steps down
// does; optimistic on the Lease's resourceVersion): the release belongs to an earlier install,
// whose controller is gone. A controller Pod older than the takeover is the uninstalled one and
// keeps standing by. Outside a Pod (podName empty), or when the Pod cannot be read, nothing is
// changed.
func freeEarlierInstallsLease(ctx context.Context, cs kubernetes.Interface, leaseNamespace, podNamespace, podName string, log logr.Logger) error {
	if podName == "" || podNamespace == "" || leaseNamespace == "" {
		return nil
	}
	leases := cs.CoordinationV1().Leases(leaseNamespace)
	lease, err := leases.Get(ctx, LeaderElectionID, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("reading Lease %s/%s: %w", leaseNamespace, LeaderElectionID, err)
	}
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	if !strings.HasPrefix(holder, ReleaseIdentityPrefix) || lease.Spec.AcquireTime == nil {
		return nil
	}
	// list, not get: the controller may list Pods everywhere (its cache) but get only gateway Pods.
	pods, err := cs.CoreV1().Pods(podNamespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", podName).String()})
	if err != nil {
		return fmt.Errorf("reading the controller's Pod %s/%s: %w", podNamespace, podName, err)
	}
	if len(pods.Items) != 1 {
		return nil
	}
	created := pods.Items[0].CreationTimestamp
	if !lease.Spec.AcquireTime.Time.Before(created.Time) {
		log.Info("an uninstall's release holds the leader election Lease, taken after this controller's Pod was created: standing by until it is deleted or the hold ends",
			"holder", holder, "acquired", lease.Spec.AcquireTime.Time, "podCreated", created.Time)
		return nil
	}
	lease.Spec.HolderIdentity = ptr.To("")
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("releasing Lease %s/%s held by an earlier install's release %q: %w", leaseNamespace, LeaderElectionID, holder, err)
	}
	log.Info("released the leader election Lease an earlier install's release held", "holder", holder,
		"acquired", lease.Spec.AcquireTime.Time, "podCreated", created.Time)
	return nil
}
