package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	"github.com/vpcgw/vpcgw/internal/model"
)

// Success is visible: a Service that becomes served gets one Normal NftableLbSvcServed naming its
// gateway, EIP (its ingress), ClusterIP and port; an endpoint change adds none; served again after
// a problem (the EIP not Ready, programming failed) it gets one more each time; a controller
// restart over the served Service adds none.
// covers: T1, T3, L7
func TestServedEvent(t *testing.T) {
	f := newFixture(t, "gw-told", 1)
	f.eip("eip-told", "172.18.12.10", true)
	f.service("web", "eip-told", 80, "10.0.1.11")
	key := "172.18.12.10:80:tcp"

	f.eventually("one Served event", func() bool { return len(f.servedEvents("web")) == 1 })
	want := fmt.Sprintf("gateway %s serves this Service at EIP 172.18.12.10 (its ingress) and ClusterIP %s, ports 80/TCP", f.gw, f.get("web").Spec.ClusterIP)
	if ev := f.servedEvents("web")[0]; ev.Type != corev1.EventTypeNormal || ev.Message != want {
		t.Fatalf("Served event %s %q, want Normal %q", ev.Type, ev.Message, want)
	}
	if !ingressIs(f.get("web"), "172.18.12.10") {
		t.Fatal("Served told before the ingress was published")
	}

	f.backend("web", 1, "10.0.1.12")
	f.eventually("the new backend programmed", func() bool { return backendsOf(f, key) == 2 })
	f.servedStays("web", 1, "after an endpoint change")

	f.setEIPReady("eip-told", "172.18.12.10", false)
	f.eventually("EIP part withdrawn", func() bool {
		return ingressIs(f.get("web"), "") && f.hasEvent("web", model.ReasonEIPNotReady, "eip-told")
	})
	f.setEIPReady("eip-told", "172.18.12.10", true)
	f.eventually("served again, told again", func() bool { return len(f.servedEvents("web")) == 2 })
	if !ingressIs(f.get("web"), "172.18.12.10") {
		t.Fatal("Served told again before the ingress was published again")
	}

	// Programming fails and recovers: the ingress stays, only memory says it was interrupted.
	f.agents.fail("nft: Error: Could not process rule")
	f.setReady("web", 1, false)
	f.eventually("failure event", func() bool { return f.hasEvent("web", model.ReasonProgrammingFailed, "Could not process rule") })
	f.agents.fail("")
	f.eventually("recovered, told again", func() bool { return backendsOf(f, key) == 1 && len(f.servedEvents("web")) == 3 })

	dials := f.agents.dialsOf(f.pods[0])
	f.stopController()
	f.start(model.Gates{LoadBalancer: true, ClusterIP: true})
	f.eventually("the restarted controller programmed the gateway", func() bool {
		return f.agents.dialsOf(f.pods[0]) > dials && f.data.serves(f.pods[0], key)
	})
	f.servedStays("web", 3, "after a controller restart")
}

// servedEvents are Service svc's NftableLbSvcServed events, each repetition of a series counted.
func (f *fixture) servedEvents(svc string) []corev1.Event {
	var evs corev1.EventList
	must(f.t, k8s.List(context.Background(), &evs, client.InNamespace(f.ns)))
	var out []corev1.Event
	for _, ev := range evs.Items {
		if ev.InvolvedObject.Name != svc || ev.Reason != model.ReasonServed {
			continue
		}
		n := 1
		if ev.Series != nil && ev.Series.Count > 1 {
			n = int(ev.Series.Count)
		}
		for range n {
			out = append(out, ev)
		}
	}
	return out
}

// servedStays fails when Service svc's Served events are not, or stop being, n over a while: the
// events of a pass are written asynchronously, so their absence is watched, not sampled once.
func (f *fixture) servedStays(svc string, n int, when string) {
	f.t.Helper()
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if got := len(f.servedEvents(svc)); got != n {
			f.t.Fatalf("%s: %d Served events, want %d", when, got, n)
		}
	}
}

// setEIPReady makes the fixture's EIP name Ready with ip, or not Ready, as kube-ovn would.
func (f *fixture) setEIPReady(name, ip string, ready bool) {
	f.t.Helper()
	var e kubeovnv1.IptablesEIP
	must(f.t, k8s.Get(context.Background(), client.ObjectKey{Name: f.eipName(name)}, &e))
	e.Status.Ready, e.Status.IP = ready, ""
	if ready {
		e.Status.IP = ip
	}
	must(f.t, k8s.Status().Update(context.Background(), &e))
}
