package kubeovn

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vpcgw/vpcgw/internal/cluster"
)

// drainRate is the requests per second of each stream, as the probe sent them.
const drainRate = 50

// The demo Deployment drains as Kubernetes asks (a preStop sleep, then SIGTERM): scaled 3 → 1 →
// 4 and rolled to another image under 50 requests/s of TCP and UDP, through the EIP from outside
// and to the ClusterIP from the VPC, it loses no request. A terminating endpoint gets no new
// connection once its EndpointSlice says so, the connections it has run to their end, and the
// UDP answers of a draining Pod still find their client (SPEC D6: its flows are kept while it
// serves).
// covers: L11, D6
func TestScaleDownAndRolloutLoseNothing(t *testing.T) {
	c := lab(t)
	ctx := context.Background()
	t.Cleanup(func() { restoreDemo(t, c) })

	scaleTo(t, c, 3)
	svc := service(t, c, cluster.DemoNamespace, cluster.DemoService)
	streams := c.DemoStreams(svc)
	if len(streams) != 4 {
		t.Fatalf("demo streams %+v, want TCP and UDP through the EIP and to the ClusterIP", streams)
	}
	traffic := c.StartTraffic(ctx, streams, drainRate)
	stopped := false
	defer func() {
		if !stopped {
			traffic.Stop()
		}
	}()

	scaleTo(t, c, 1)
	scaleTo(t, c, 4)
	before := demoPods(t, c)
	setDemoImage(t, c, cluster.EchoImage+"-rolled")
	eventually(t, 3*time.Minute, "the rollout done: 4 new Pods ready, none of the old left", func(ctx context.Context) (bool, error) {
		now := demoPods(t, c)
		for name := range now {
			if _, old := before[name]; old {
				return false, nil
			}
		}
		return len(now) == 4 && len(allDemoPods(t, c)) == 4 && readyBackends(ctx, c) == 4, nil
	})
	// One more second of traffic on the settled Deployment, then the counts.
	waitAnswered(t, traffic, streams)
	counts, errs := traffic.Stop()
	stopped = true
	for _, err := range errs {
		t.Errorf("a probe did not run: %v", err)
	}
	for _, tc := range counts {
		t.Logf("%s: %d sent, %d answered, by %v", tc.Stream, tc.Sent, tc.Answered, tc.Answers)
		if tc.Sent < 10*drainRate || tc.Answered != tc.Sent {
			t.Errorf("%s: %d of %d requests answered (last error %q), want every one of at least %d",
				tc.Stream, tc.Answered, tc.Sent, tc.LastError, 10*drainRate)
		}
	}
}

// scaleTo scales the demo and waits until exactly n Pods exist (the removed ones drained and
// gone) and n endpoints are ready.
func scaleTo(t *testing.T, c *cluster.Cluster, n int32) {
	t.Helper()
	if err := c.ScaleDeployment(context.Background(), cluster.DemoNamespace, cluster.DemoDeployment, n); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, "the demo at exactly its scale", func(ctx context.Context) (bool, error) {
		return len(allDemoPods(t, c)) == int(n) && readyBackends(ctx, c) == int(n), nil
	})
}

func readyBackends(ctx context.Context, c *cluster.Cluster) int {
	b, err := c.ReadyBackends(ctx, cluster.DemoNamespace, cluster.DemoDeployment)
	if err != nil {
		return -1
	}
	return len(b)
}

// allDemoPods are the demo's Pods, terminating ones included.
func allDemoPods(t *testing.T, c *cluster.Cluster) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := c.Client.List(context.Background(), &pods, client.InNamespace(cluster.DemoNamespace), client.MatchingLabels{"app": cluster.DemoDeployment}); err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// setDemoImage rolls the demo Deployment to image, as `kubectl set image` does.
func setDemoImage(t *testing.T, c *cluster.Cluster, image string) {
	t.Helper()
	var d appsv1.Deployment
	key := client.ObjectKey{Namespace: cluster.DemoNamespace, Name: cluster.DemoDeployment}
	if err := c.Client.Get(context.Background(), key, &d); err != nil {
		t.Fatal(err)
	}
	if d.Spec.Template.Spec.Containers[0].Image == image {
		return
	}
	before := d.DeepCopy()
	d.Spec.Template.Spec.Containers[0].Image = image
	if err := c.Client.Patch(context.Background(), &d, client.MergeFrom(before)); err != nil {
		t.Fatalf("setting the demo's image to %s: %v", image, err)
	}
}

// waitAnswered waits until every stream has answers beyond what it had (one more probe each).
func waitAnswered(t *testing.T, traffic *cluster.Traffic, streams []cluster.TrafficStream) {
	t.Helper()
	start := traffic.Snapshot()
	eventually(t, time.Minute, "one more second of traffic on every stream", func(context.Context) (bool, error) {
		now := traffic.Snapshot()
		for i := range streams {
			if now[i].Sent <= start[i].Sent {
				return false, nil
			}
		}
		return true, nil
	})
}

// restoreDemo puts the demo back as the other tests expect it: its image, 2 replicas.
func restoreDemo(t *testing.T, c *cluster.Cluster) {
	setDemoImage(t, c, cluster.EchoImage)
	scaleTo(t, c, 2)
	eventually(t, 3*time.Minute, "the demo back on its image", func(context.Context) (bool, error) {
		for _, p := range allDemoPods(t, c) {
			if p.Spec.Containers[0].Image != cluster.EchoImage {
				return false, nil
			}
		}
		return true, nil
	})
}
