package status

// covers: O2, P6 (the published status: its format, change detection, and the publisher's writes:
// at start, on change at most once per MinInterval, a heartbeat, and the stop)

import (
	"context"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// covers: O2, V3
func TestEncodeDecodeRoundTrip(t *testing.T) {
	at := time.Date(2026, 5, 4, 3, 2, 1, 0, time.UTC)
	p := Published{Version: "v1.2.3", Holder: "pod-a", Heartbeat: at, Stopped: at.Add(time.Minute),
		Gates: Gates{EnableGwNftableLbSvc: true, Ledger: "service-record"},
		Flags: Flags{KubeOVNNamespace: "kube-system", MaxPortsPerService: 64, AgentKeepalive: "5s", VIPRoutes: true},
		Gateways: map[string]Gateway{"gw1": {Generation: 7, Identities: 3, LastSyncTime: at,
			Instances: []Instance{{Pod: "kube-system/vpc-nat-gw-gw1-0", UID: "u", AckedGeneration: 7, LastAckTime: at, AgentVersion: "v1.2.3"}},
			Routes: &Routes{NextHops: []string{"10.0.1.254"}, VIPs: 2, Synced: true, LastSyncTime: at,
				UnroutedVIPs: 1, Unrouted: "the Vpc has no route covering them"}}},
		GatewaysOmitted: 2,
		Conditions: []metav1.Condition{{Type: ConditionServing, Status: metav1.ConditionFalse, Reason: "KubeOVNServesServices",
			Message: "--enable-gw-nftable-lb-svc is on", LastTransitionTime: metav1.NewTime(at)}},
	}
	data, err := Encode(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{KeyVersion, KeyGates, KeyFlags, KeyHeartbeat, KeyHolder, KeyGateways, KeyStopped, KeyConditions} {
		if data[k] == "" {
			t.Errorf("no %q in %v", k, data)
		}
	}
	if data[KeyHeartbeat] != "2026-05-04T03:02:01Z" {
		t.Errorf("heartbeat %q, want RFC 3339", data[KeyHeartbeat])
	}
	got, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, p) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, p)
	}
	delete(data, KeyHeartbeat)
	if _, err := Decode(data); err == nil {
		t.Error("a status without heartbeat decoded")
	}
}

// A condition's transition time moves only when its status does; a new reason alone is a change
// to publish (SPEC K10: why vpcgw stands aside).
// covers: K10, O2
func TestRecorderConditions(t *testing.T) {
	r := NewRecorder()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r.now = func() time.Time { return now }
	r.SetCondition(metav1.Condition{Type: ConditionServing, Status: metav1.ConditionTrue, Reason: "KubeOVNDoesNotServeServices", Message: "v1.16"})
	seq := r.Seq()
	now = now.Add(time.Minute)
	r.SetCondition(metav1.Condition{Type: ConditionServing, Status: metav1.ConditionTrue, Reason: "KubeOVNDoesNotServeServices", Message: "v1.16"})
	if r.Seq() != seq {
		t.Error("the same condition again counted as a change")
	}
	r.SetCondition(metav1.Condition{Type: ConditionServing, Status: metav1.ConditionFalse, Reason: "KubeOVNServesServices", Message: "on"})
	c := r.Conditions()
	if r.Seq() == seq || len(c) != 1 || c[0].Status != metav1.ConditionFalse || !c[0].LastTransitionTime.Time.Equal(now) {
		t.Fatalf("after the status changed: %+v (seq %d → %d)", c, seq, r.Seq())
	}
	now = now.Add(time.Minute)
	r.SetCondition(metav1.Condition{Type: ConditionServing, Status: metav1.ConditionFalse, Reason: "KubeOVNServesServicesByDefault", Message: "default"})
	if c2 := r.Conditions(); c2[0].Reason != "KubeOVNServesServicesByDefault" || !c2[0].LastTransitionTime.Equal(&c[0].LastTransitionTime) {
		t.Errorf("a new reason of the same status: %+v", c2)
	}
}

// Times alone are no change; an instance that is gone is forgotten; a pod replaced under the same
// name starts with nothing acknowledged.
// covers: O2, V3
func TestRecorderChanges(t *testing.T) {
	r := NewRecorder()
	clock := time.Unix(1000, 0)
	r.now = func() time.Time { clock = clock.Add(time.Second); return clock }
	a, b := InstanceRef{Pod: "ns/gw-0", UID: "a"}, InstanceRef{Pod: "ns/gw-1", UID: "b"}
	r.InstanceAcked("gw", a, 1, "v1")
	r.InstanceAcked("gw", b, 1, "v1")
	r.GatewaySynced("gw", Sync{Instances: []InstanceRef{a, b}, Programmed: true, Generation: 1, Identities: 4})
	r.RoutesSynced("gw", RouteSync{NextHops: []string{"10.0.0.1"}, VIPs: 2})
	seq := r.Seq()
	// The same outcome again, later: no change.
	r.RoutesSynced("gw", RouteSync{NextHops: []string{"10.0.0.1"}, VIPs: 2})
	r.InstanceAcked("gw", a, 1, "")
	if r.Seq() != seq {
		t.Errorf("a repeat of the same outcome counted as a change")
	}
	gws, _ := r.Gateways()
	if g := gws["gw"]; g.Generation != 1 || g.Identities != 4 || len(g.Instances) != 2 || g.Instances[0].AgentVersion != "v1" || g.Routes == nil || !g.Routes.Synced {
		t.Errorf("gateway %+v", g)
	}
	// A new generation is a change; a failed sync keeps the last programmed state and says why.
	r.InstanceFailed("gw", b, "the gateway agent cannot be reached")
	r.GatewaySynced("gw", Sync{Instances: []InstanceRef{a, b}, Error: "the gateway agent cannot be reached"})
	gws, _ = r.Gateways()
	if g := gws["gw"]; g.Generation != 1 || g.LastError == "" || g.Instances[1].LastError == "" || g.LastErrorTime.IsZero() {
		t.Errorf("after a failure: %+v", g)
	}
	select {
	case <-r.Changed():
	default:
		t.Error("no change signalled")
	}
	// b is replaced by a pod of the same name: nothing acknowledged; a is gone.
	b2 := InstanceRef{Pod: b.Pod, UID: "b2"}
	r.GatewaySynced("gw", Sync{Instances: []InstanceRef{b2}, Programmed: true, Generation: 2, Identities: 4})
	gws, _ = r.Gateways()
	if g := gws["gw"]; len(g.Instances) != 1 || g.Instances[0].UID != "b2" || g.Instances[0].AckedGeneration != 0 || g.LastError != "" || g.Generation != 2 {
		t.Errorf("after the replacement: %+v", g)
	}
	// VIPs the Vpc's routes drop (SPEC V3) are news, and so is their end.
	seq = r.Seq()
	r.RoutesSynced("gw", RouteSync{NextHops: []string{"10.0.0.1"}, VIPs: 2, Unrouted: 1, UnroutedText: "no route"})
	gws, _ = r.Gateways()
	if g := gws["gw"]; r.Seq() == seq || g.Routes.UnroutedVIPs != 1 || g.Routes.Unrouted != "no route" || !g.Routes.Synced {
		t.Errorf("with an unrouted VIP: %+v (seq %d → %d)", g.Routes, seq, r.Seq())
	}
	seq = r.Seq()
	r.RoutesSynced("gw", RouteSync{NextHops: []string{"10.0.0.1"}, VIPs: 2})
	gws, _ = r.Gateways()
	if g := gws["gw"]; r.Seq() == seq || g.Routes.UnroutedVIPs != 0 || g.Routes.Unrouted != "" {
		t.Errorf("after the route came: %+v", g.Routes)
	}
	r.GatewayRemoved("gw")
	if gws, _ := r.Gateways(); len(gws) != 0 {
		t.Errorf("removed gateway still there: %v", gws)
	}
}

// countingClient is a fake API server that counts the ConfigMap's creates and updates.
func countingClient(t *testing.T) (client.Client, *atomic.Int64) {
	t.Helper()
	var writes atomic.Int64
	c := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			writes.Add(1)
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			writes.Add(1)
			return c.Update(ctx, obj, opts...)
		},
	}).Build()
	return c, &writes
}

func read(t *testing.T, c client.Client) (Published, bool) {
	t.Helper()
	var cm corev1.ConfigMap
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: ConfigMapName}, &cm); err != nil {
		return Published{}, false
	}
	p, err := Decode(cm.Data)
	if err != nil {
		t.Fatal(err)
	}
	return p, true
}

func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// A stream of changes is written at most once per MinInterval and its last state reaches the
// ConfigMap; with nothing changing, the heartbeat alone rewrites it; a clean stop says so.
// covers: O2, P6
func TestPublisherWrites(t *testing.T) {
	const minInterval, heartbeat = 100 * time.Millisecond, 400 * time.Millisecond
	c, writes := countingClient(t)
	rec := NewRecorder()
	p := &Publisher{Client: c, Reader: c, Namespace: "ns", Holder: "pod-a", Version: "v9", Gates: Gates{EnableGwNftableLbSvc: true},
		Recorder: rec, MinInterval: minInterval, Heartbeat: heartbeat, Log: logr.Discard()}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = p.Start(ctx) })
	poll(t, "the first write", func() bool { _, ok := read(t, c); return ok })
	first, _ := read(t, c)
	if first.Holder != "pod-a" || first.Version != "v9" || !first.Gates.EnableGwNftableLbSvc || !first.Stopped.IsZero() {
		t.Errorf("first write %+v", first)
	}

	// Many changes, as fast as syncs could make them.
	before := writes.Load()
	start := time.Now()
	gen := int64(0)
	for time.Since(start) < 10*minInterval {
		gen++
		rec.GatewaySynced("gw", Sync{Instances: []InstanceRef{{Pod: "ns/gw-0", UID: "u"}}, Programmed: true, Generation: gen, Identities: 1})
	}
	elapsed := time.Since(start)
	poll(t, "the last change written", func() bool { pub, _ := read(t, c); return pub.Gateways["gw"].Generation == gen })
	n := writes.Load() - before
	if bound := int64(elapsed/minInterval) + 2; n > bound {
		t.Errorf("%d changes in %s gave %d writes; want at most %d", gen, elapsed, n, bound)
	}
	t.Logf("%d changes in %s: %d writes", gen, elapsed, n)

	// Nothing changes: the heartbeat still rewrites it.
	hb, _ := read(t, c)
	poll(t, "a heartbeat", func() bool { pub, _ := read(t, c); return pub.Heartbeat.After(hb.Heartbeat) })

	cancel()
	wg.Wait()
	if pub, _ := read(t, c); pub.Stopped.IsZero() || pub.Gateways["gw"].Generation != gen {
		t.Errorf("after the stop: %+v", pub)
	}
	if !p.NeedLeaderElection() {
		t.Error("the publisher must run on the leader only")
	}
}
