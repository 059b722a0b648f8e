// covers: O4 (a controller installed again after an uninstall serves at once: the release's Lease hold of the earlier install is freed; the controller being uninstalled keeps standing by)

package release_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/vpcgw/vpcgw/internal/controller"
	"github.com/vpcgw/vpcgw/internal/release"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

func TestEarlierInstallsReleaseLeaseIsFreed(t *testing.T) {
	if cfg == nil {
		testutil.Skip(t, envSkip)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns := "lease-free"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "vpcgw-controller-0"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "controller", Image: "ghcr.io/vpcgw/vpcgw"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created := pod.CreationTimestamp.Time
	leases := cs.CoordinationV1().Leases(ns)
	// setLease makes the Lease held by holder since acquired.
	setLease := func(holder string, acquired time.Time) {
		t.Helper()
		_ = leases.Delete(ctx, controller.LeaderElectionID, metav1.DeleteOptions{})
		at := metav1.NewMicroTime(acquired)
		if _, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: controller.LeaderElectionID},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), AcquireTime: &at, RenewTime: &at, LeaseDurationSeconds: ptr.To(int32(600))}},
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	holder := func() string {
		t.Helper()
		l, err := leases.Get(ctx, controller.LeaderElectionID, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return ptr.Deref(l.Spec.HolderIdentity, "")
	}
	free := func(podName string) {
		t.Helper()
		if err := release.FreeEarlierInstallsLease(ctx, cs, ns, ns, podName, logr.Discard()); err != nil {
			t.Fatal(err)
		}
	}

	for _, tc := range []struct {
		name, holder string
		acquired     time.Time
		podName      string
		want         string
	}{
		// The uninstall of an earlier install: its release took the Lease before this Pod existed.
		{name: "an earlier install's release", holder: "vpcgw-release-node-1a2b3c4d", acquired: created.Add(-time.Minute), podName: pod.Name, want: ""},
		// The controller being uninstalled, restarted in its Pod after the release took over.
		{name: "this install's release", holder: "vpcgw-release-node-1a2b3c4d", acquired: created.Add(time.Minute), podName: pod.Name, want: "vpcgw-release-node-1a2b3c4d"},
		// Another controller replica leads: leader election decides, not this.
		{name: "a controller leads", holder: "vpcgw-controller-1_abc", acquired: created.Add(-time.Minute), podName: pod.Name, want: "vpcgw-controller-1_abc"},
		// Outside a Pod, or a Pod that cannot be found: nothing to compare with.
		{name: "no Pod", holder: "vpcgw-release-node-1a2b3c4d", acquired: created.Add(-time.Minute), podName: "", want: "vpcgw-release-node-1a2b3c4d"},
		{name: "a Pod not found", holder: "vpcgw-release-node-1a2b3c4d", acquired: created.Add(-time.Minute), podName: "gone", want: "vpcgw-release-node-1a2b3c4d"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setLease(tc.holder, tc.acquired)
			free(tc.podName)
			if got := holder(); got != tc.want {
				t.Errorf("holder after start = %q, want %q", got, tc.want)
			}
		})
	}
	// No Lease yet (a first install): nothing to do, no error.
	if err := leases.Delete(ctx, controller.LeaderElectionID, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	free(pod.Name)
}
