package controller_test

// covers: O2, P6 (the controller's published status: written by the leader, updated on change,
// never once per sync)

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vpcgw/vpcgw/internal/controller"
	"github.com/vpcgw/vpcgw/internal/status"
	"github.com/vpcgw/vpcgw/internal/version"
)

// published reads the fixture's status ConfigMap (zero and false while there is none).
func published(t *testing.T, ns string) (status.Published, string, bool) {
	t.Helper()
	var cm corev1.ConfigMap
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: status.ConfigMapName}, &cm); err != nil {
		return status.Published{}, "", false
	}
	p, err := status.Decode(cm.Data)
	if err != nil {
		t.Fatalf("the published ConfigMap does not decode: %v\n%v", err, cm.Data)
	}
	return p, cm.ResourceVersion, true
}

// The controller publishes ConfigMap vpcgw-controller in its status namespace: its version,
// gates, flags, holder, and per gateway the instances with the generation each acknowledged.
// Many Service changes (each a sync of the gateway) rewrite it at most once per MinInterval, and
// the last state reaches it; a clean stop says so.
// covers: O2, P6
func TestStatusPublishedAndRateLimited(t *testing.T) {
	const minInterval = 2 * time.Second
	ns := "vpcgw-status"
	if cfg != nil {
		if err := k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	f := newFixtureWith(t, inMemory, "stgw", 2, func(o *controller.Options) {
		o.StatusNamespace, o.StatusHolder = ns, "test-holder"
		o.StatusMinInterval, o.StatusHeartbeat = minInterval, time.Hour // no heartbeat within the test
		o.Flags.MaxPortsPerService = 7
		o.BackendPick = "random"
	})
	f.eip("st-eip", "172.18.0.10", true)
	f.service("web", "st-eip", 80, "10.0.1.10")
	f.eventually("the Service served", func() bool {
		return ingressIs(f.get("web"), "172.18.0.10") && allReady(f.records("web"), "172.18.0.10")
	})

	// acked is the generation every fake agent holds (they all get the same state).
	acked := func() int64 {
		var gen int64
		for i, uid := range f.pods {
			st, ok := f.agents.state(uid)
			if !ok || (i > 0 && st.Generation != gen) {
				return -1
			}
			gen = st.Generation
		}
		return gen
	}
	upToDate := func(p status.Published, identities int) bool {
		g, ok := p.Gateways[f.gw]
		if !ok || len(g.Instances) != 2 || g.Generation != acked() || g.Identities != identities || g.LastError != "" {
			return false
		}
		for _, in := range g.Instances {
			if in.AckedGeneration != g.Generation || in.Pod == "" || in.UID == "" {
				return false
			}
		}
		return true
	}
	var pub status.Published
	f.eventually("the status published with the programmed gateway", func() bool {
		var ok bool
		pub, _, ok = published(t, ns)
		return ok && upToDate(pub, 2) // EIP and ClusterIP identity of port 80
	})
	if pub.Version != version.Version || pub.Holder != "test-holder" || !pub.Stopped.IsZero() || time.Since(pub.Heartbeat) > time.Minute {
		t.Errorf("published version %q holder %q stopped %v heartbeat %v", pub.Version, pub.Holder, pub.Stopped, pub.Heartbeat)
	}
	if g := pub.Gates; !g.EnableGwNftableLbSvc || !g.EnableGwNftableSvcClusterIP || g.EnableLb || g.Ledger != "service-record" {
		t.Errorf("published gates %+v", g)
	}
	if fl := pub.Flags; fl.MaxPortsPerService != 7 || fl.MaxBackendsPerIdentity != 512 || fl.KubeOVNNamespace != "kube-system" || fl.VIPRoutes || fl.AgentKeepalive != "5s" || fl.BackendPick != "random" {
		t.Errorf("published flags %+v", fl)
	}
	for _, in := range pub.Gateways[f.gw].Instances {
		if in.LastAckTime.IsZero() {
			t.Errorf("instance %s has no ack time", in.Pod)
		}
	}

	// Every change below is one sync of the gateway (each is waited for in the agents' state);
	// the ConfigMap's writes are counted from a watch.
	w, err := client.NewWithWatch(cfg, client.Options{Scheme: k8s.Scheme()})
	must(t, err)
	_, rv, _ := published(t, ns)
	watcher, err := w.Watch(context.Background(), &corev1.ConfigMapList{}, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
	must(t, err)
	defer watcher.Stop()
	writes := make(chan int, 1)
	go func() {
		n := 0
		for ev := range watcher.ResultChan() {
			if ev.Type == watch.Modified {
				n++
			}
			select {
			case <-writes:
			default:
			}
			writes <- n
		}
	}()
	backends := func() int {
		st, _ := f.agents.state(f.pods[0])
		for _, id := range st.Identities {
			if id.Port == 80 {
				return len(id.Backends)
			}
		}
		return -1
	}
	const changes = 20
	start := time.Now()
	f.backend("web", 1, "10.0.1.11")
	f.eventually("the second backend programmed", func() bool { return backends() == 2 })
	for i := range changes {
		ready := i%2 == 1
		f.setReady("web", 1, ready)
		want := map[bool]int{true: 2, false: 1}[ready]
		f.eventually(fmt.Sprintf("change %d programmed", i), func() bool { return backends() == want })
	}
	elapsed := time.Since(start)
	f.eventually("the last state published", func() bool {
		p, _, ok := published(t, ns)
		return ok && upToDate(p, 2)
	})
	n := 0
	select {
	case n = <-writes:
	default:
	}
	// At most one write per MinInterval (plus the one pending when the burst began and the last
	// one), never one per sync.
	bound := int(elapsed/minInterval) + 2
	t.Logf("%d syncs in %s: %d ConfigMap writes (bound %d)", changes+1, elapsed, n, bound)
	if n > bound || n >= changes {
		t.Errorf("%d ConfigMap writes for %d syncs in %s: want at most %d (one per %s), and fewer than the syncs", n, changes+1, elapsed, bound, minInterval)
	}

	// A second Service: the gateway's identities in the status follow.
	f.service("api", "st-eip", 81, "10.0.1.12")
	f.eventually("the second Service published", func() bool {
		p, _, ok := published(t, ns)
		return ok && upToDate(p, 4)
	})

	// A clean stop says so at once.
	f.stopController()
	if p, _, ok := published(t, ns); !ok || p.Stopped.IsZero() || p.Holder != "test-holder" {
		t.Errorf("after the controller stopped: published %v, stopped %v", ok, p.Stopped)
	}
}
