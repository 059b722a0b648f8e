package release

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"

	"github.com/vpcgw/vpcgw/internal/controller"
)

// IdentityPrefix starts the holder identity vpcgw release writes into the controller's leader
// election Lease (Options.Identity's default).
const IdentityPrefix = "vpcgw-release-"

// FreeEarlierInstallsLease lets a new install serve at once after an uninstall. The uninstall's
// release keeps the controller's Lease for --lease-hold after it ends, so that the controller
// being uninstalled, which lost the Lease and restarted in its Pod, stands by until helm deleted
// it. That hold outlives the uninstall; a controller installed again into the same namespace
// would stand by until it expires (10 minutes by default). So a controller whose Pod was created
// after the release took the Lease releases it (holder emptied, as a leader that steps down
// does; optimistic on the Lease's resourceVersion): the release belongs to an earlier install,
// whose controller is gone. A controller Pod older than the takeover is the uninstalled one and
// keeps standing by. Outside a Pod (podName empty), or when the Pod cannot be read, nothing is
// changed.
func FreeEarlierInstallsLease(ctx context.Context, cs kubernetes.Interface, leaseNamespace, podNamespace, podName string, log logr.Logger) error {
	if podName == "" || podNamespace == "" || leaseNamespace == "" {
		return nil
	}
	leases := cs.CoordinationV1().Leases(leaseNamespace)
	lease, err := leases.Get(ctx, controller.LeaderElectionID, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("reading Lease %s/%s: %w", leaseNamespace, controller.LeaderElectionID, err)
	}
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	if !strings.HasPrefix(holder, IdentityPrefix) || lease.Spec.AcquireTime == nil {
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
		return fmt.Errorf("releasing Lease %s/%s held by an earlier install's release %q: %w", leaseNamespace, controller.LeaderElectionID, holder, err)
	}
	log.Info("released the leader election Lease an earlier install's release held", "holder", holder,
		"acquired", lease.Spec.AcquireTime.Time, "podCreated", created.Time)
	return nil
}

// takeLease makes the release the holder of the controller's leader election Lease, so that the
// running controller stands by rather than serving again what the release removes: the chart's
// pre-delete hook runs while the controller's Deployment still runs, and the controller's RBAC
// cannot scale it. A Lease held by another is taken over (update with its resourceVersion: of two
// writers, one wins); the previous leader finds another holder at its next renewal and stops
// (controller-runtime exits on a lost lease), at the latest a lease duration after the takeover,
// which is how long the release waits before it writes. While it runs, the release renews the
// Lease as a leader does.
func takeLease(ctx context.Context, cfg *rest.Config, namespace, identity string, log logr.Logger) (*resourcelock.LeaseLock, error) {
	if namespace == "" {
		data, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
		if err != nil {
			return nil, errors.New("--leader-elect without --leader-election-namespace outside a pod: name the controller's namespace")
		}
		namespace = strings.TrimSpace(string(data))
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for the leader election Lease: %w", err)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: namespace, Name: controller.LeaderElectionID},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
	now := metav1.NewTime(time.Now())
	rec, _, err := lock.Get(ctx)
	switch {
	case apierrors.IsNotFound(err):
		// No controller ever led: nothing to wait for.
		if err := lock.Create(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: identity, LeaseDurationSeconds: 15, AcquireTime: now, RenewTime: now}); err != nil {
			return nil, fmt.Errorf("creating Lease %s/%s: %w", namespace, controller.LeaderElectionID, err)
		}
		return lock, nil
	case err != nil:
		return nil, fmt.Errorf("reading Lease %s/%s: %w", namespace, controller.LeaderElectionID, err)
	}
	prev, dur := rec.HolderIdentity, time.Duration(rec.LeaseDurationSeconds)*time.Second
	if dur <= 0 {
		dur = 15 * time.Second
	}
	taken := *rec
	taken.HolderIdentity, taken.AcquireTime, taken.RenewTime = identity, now, now
	taken.LeaseDurationSeconds = int(dur / time.Second)
	if prev != identity {
		taken.LeaderTransitions++
	}
	if err := lock.Update(ctx, taken); err != nil {
		return nil, fmt.Errorf("taking Lease %s/%s over from %q: %w", namespace, controller.LeaderElectionID, prev, err)
	}
	if prev == "" || prev == identity {
		return lock, nil
	}
	log.Info("took the controller's leader election Lease; waiting one lease duration for the previous leader to stand by", "previous", prev, "wait", dur.String())
	select {
	case <-time.After(dur):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return lock, nil
}

// holdLease leaves the Lease held for hold after the release ends (see ReleaseOptions.LeaseHold).
func holdLease(lock *resourcelock.LeaseLock, hold time.Duration, log logr.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec, _, err := lock.Get(ctx)
	if err == nil {
		if rec.HolderIdentity != lock.Identity() {
			log.Info("the Lease has another holder: not holding it", "holder", rec.HolderIdentity)
			return
		}
		rec.RenewTime = metav1.NewTime(time.Now())
		rec.LeaseDurationSeconds = int(hold / time.Second)
		err = lock.Update(ctx, *rec)
	}
	if err != nil {
		log.Info("could not hold the leader election Lease; a controller still running may serve again until it is deleted", "error", err.Error())
		return
	}
	log.Info("holding the controller's leader election Lease so that a running controller stands by", "for", hold.String())
}
