package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/transport"
)

// A served Service: finalizer first, records written and then Ready with the programmed values,
// every instance programmed, ingress the EIP. A record deleted by hand comes back.
// covers: T1, T2, R1, R2, R3, R4, D7
func TestServedServiceLifecycle(t *testing.T) {
	bothModes(t, func(t *testing.T, mode agentMode) {
		f := newFixtureIn(t, mode, "gw-served", 2)
		f.eip("eip-served", "172.18.1.10", true)
		f.service("web", "eip-served", 80, "10.0.1.11", "10.0.1.12")

		f.eventually("ingress", func() bool { return ingressIs(f.get("web"), "172.18.1.10") })
		if !hasFinalizer(f.get("web")) {
			t.Fatal("served Service has no finalizer")
		}
		f.eventually("one Ready record with both backends", func() bool {
			rs := f.records("web")
			return allReady(rs, "172.18.1.10") && len(rs[0].Spec.Ports) == 1 && len(rs[0].Spec.Ports[0].Backends) == 2
		})
		if rules := f.dnatRules("web"); len(rules) != 0 {
			t.Fatalf("IptablesDnatRules written in the ServiceRecord form: %d", len(rules))
		}
		for _, uid := range f.pods {
			if !f.data.serves(uid, "172.18.1.10:80:tcp") {
				t.Fatalf("instance %s does not serve the EIP identity", uid)
			}
		}
		svc := f.get("web")
		cipKey := svc.Spec.ClusterIP + ":80:tcp"
		if !f.data.serves(f.pods[0], cipKey) {
			t.Fatalf("ClusterIP identity %s not programmed", cipKey)
		}

		rec := f.records("web")[0]
		must(t, k8s.Delete(context.Background(), &rec))
		f.eventually("deleted record recreated", func() bool {
			for _, r := range f.records("web") {
				if r.Name == rec.Name && r.UID != rec.UID && r.Status.Ready {
					return true
				}
			}
			return false
		})
	})
}

// Clearing only the EIP annotation releases the EIP part; clearing both leaves the mode.
// covers: L2, T1, T2
func TestAnnotationsCleared(t *testing.T) {
	bothModes(t, func(t *testing.T, mode agentMode) {
		f := newFixtureIn(t, mode, "gw-clear", 1)
		f.eip("eip-clear", "172.18.2.10", true)
		f.service("web", "eip-clear", 80, "10.0.1.11")
		f.eventually("ingress", func() bool { return ingressIs(f.get("web"), "172.18.2.10") })

		svc := f.get("web")
		patch := client.MergeFrom(svc.DeepCopy())
		delete(svc.Annotations, model.AnnotationEIP)
		must(t, k8s.Patch(context.Background(), svc, patch))
		f.eventually("EIP part released", func() bool {
			rs := f.records("web")
			return ingressIs(f.get("web"), "") && len(rs) == 1 && rs[0].Spec.EIP == "" && rs[0].Spec.EIPAddress == "" && rs[0].Spec.ClusterIP == svc.Spec.ClusterIP &&
				!f.data.serves(f.pods[0], "172.18.2.10:80:tcp") && f.data.serves(f.pods[0], svc.Spec.ClusterIP+":80:tcp")
		})
		if !hasFinalizer(f.get("web")) {
			t.Fatal("finalizer released while the ClusterIP part is served")
		}

		svc = f.get("web")
		patch = client.MergeFrom(svc.DeepCopy())
		delete(svc.Annotations, model.AnnotationGateway)
		must(t, k8s.Patch(context.Background(), svc, patch))
		f.eventually("everything released", func() bool {
			s := f.get("web")
			return !hasFinalizer(s) && len(f.records("web")) == 0 && !f.data.serves(f.pods[0], svc.Spec.ClusterIP+":80:tcp")
		})
	})
}

// Deleting a Service releases everything, then the Service goes.
// covers: L3, T2
func TestServiceDeleted(t *testing.T) {
	bothModes(t, func(t *testing.T, mode agentMode) {
		f := newFixtureIn(t, mode, "gw-del", 1)
		f.eip("eip-del", "172.18.3.10", true)
		svc := f.service("web", "eip-del", 80, "10.0.1.11")
		f.eventually("served", func() bool { return ingressIs(f.get("web"), "172.18.3.10") })
		must(t, k8s.Delete(context.Background(), svc))
		f.eventually("Service gone with its records", func() bool {
			return f.get("web") == nil && len(f.records("web")) == 0 && !f.data.serves(f.pods[0], "172.18.3.10:80:tcp")
		})
	})
}

// Two Services on one (EIP, port, protocol) without the webhook: the first created keeps it, the
// other gets the event and takes over when the first is deleted.
// covers: I2, T1, T3
func TestConflictTakeover(t *testing.T) {
	bothModes(t, func(t *testing.T, mode agentMode) {
		f := newFixtureIn(t, mode, "gw-conflict", 1)
		f.eip("eip-conflict", "172.18.4.10", true)
		first := f.service("first", "eip-conflict", 80, "10.0.1.11")
		f.eventually("first served", func() bool { return ingressIs(f.get("first"), "172.18.4.10") })
		f.service("second", "eip-conflict", 80, "10.0.1.12")
		f.eventually("conflict event", func() bool { return f.hasEvent("second", model.ReasonConflict, f.ns+"/first") })
		if !ingressIs(f.get("second"), "") {
			t.Fatal("the loser published an ingress")
		}
		must(t, k8s.Delete(context.Background(), first))
		f.eventually("second takes over", func() bool {
			return ingressIs(f.get("second"), "172.18.4.10") && allReady(f.records("second"), "172.18.4.10")
		})
	})
}

// An EIP that is deleted releases the EIP part; a gateway that is deleted releases its Services.
// covers: L4, L5, T1
func TestEIPAndGatewayDeleted(t *testing.T) {
	bothModes(t, func(t *testing.T, mode agentMode) {
		f := newFixtureIn(t, mode, "gw-gone", 1)
		f.eip("eip-gone", "172.18.5.10", true)
		f.service("web", "eip-gone", 80, "10.0.1.11")
		f.eventually("served", func() bool { return ingressIs(f.get("web"), "172.18.5.10") })

		must(t, k8s.Delete(context.Background(), &kubeovnv1.IptablesEIP{ObjectMeta: metav1.ObjectMeta{Name: f.eipName("eip-gone")}}))
		f.eventually("EIP part released", func() bool {
			return ingressIs(f.get("web"), "") && f.hasEvent("web", model.ReasonEIPMissing, "eip-gone") &&
				!f.data.serves(f.pods[0], "172.18.5.10:80:tcp")
		})

		must(t, k8s.Delete(context.Background(), &kubeovnv1.VpcNatGateway{ObjectMeta: metav1.ObjectMeta{Name: f.gw}}))
		f.eventually("Service released", func() bool {
			return !hasFinalizer(f.get("web")) && len(f.records("web")) == 0 && f.hasEvent("web", model.ReasonNotAdmitted, "may not use VpcNatGateway gw-gone")
		})
	})
}

// A LoadBalancer Service with a missing annotation, or an EIP that is not Ready, is not
// programmed and says why; the EIP turning Ready serves it without a restart.
// covers: S2, S4, T3
func TestWaitsForEIP(t *testing.T) {
	bothModes(t, func(t *testing.T, mode agentMode) {
		f := newFixtureIn(t, mode, "gw-wait", 1)
		f.service("no-eip", "", 80, "10.0.1.11")
		f.eventually("missing annotation event", func() bool { return f.hasEvent("no-eip", model.ReasonEIPMissing, model.AnnotationEIP) })

		f.eip("eip-late", "172.18.6.10", false)
		f.service("late", "eip-late", 81, "10.0.1.11")
		f.eventually("not Ready event", func() bool { return f.hasEvent("late", model.ReasonEIPNotReady, "eip-late") })
		if f.data.serves(f.pods[0], "172.18.6.10:81:tcp") || !ingressIs(f.get("late"), "") {
			t.Fatal("programmed before the EIP was Ready")
		}
		var e kubeovnv1.IptablesEIP
		must(t, k8s.Get(context.Background(), client.ObjectKey{Name: f.eipName("eip-late")}, &e))
		e.Status.Ready, e.Status.IP = true, "172.18.6.10"
		must(t, k8s.Status().Update(context.Background(), &e))
		f.eventually("served once Ready", func() bool { return ingressIs(f.get("late"), "172.18.6.10") })
	})
}

// An agent that rejects the state: a Warning event, no ingress; served once it accepts.
// covers: D8, T1, T3
func TestProgrammingFailure(t *testing.T) {
	f := newFixture(t, "gw-fail", 1)
	f.eip("eip-fail", "172.18.7.10", true)
	f.agents.fail("nft: Error: Could not process rule")
	f.service("web", "eip-fail", 80, "10.0.1.11")
	f.eventually("failure event", func() bool { return f.hasEvent("web", model.ReasonProgrammingFailed, "Could not process rule") })
	if !ingressIs(f.get("web"), "") {
		t.Fatal("ingress published although programming failed")
	}
	// The ledger follows the data plane (SPEC R3, P5): nothing is recorded that was not programmed.
	if rs := f.records("web"); len(rs) != 0 {
		t.Fatalf("record written although programming failed: %+v", rs[0].Spec)
	}
	f.agents.fail("")
	f.eventually("served after recovery", func() bool { return ingressIs(f.get("web"), "172.18.7.10") })
}

// The controller restarts: a Service deleted while it was down is cleaned up, records whose
// owner is gone are removed, and with both gates off everything is released.
// covers: R5, L7, F5, I3
func TestControllerRestart(t *testing.T) {
	bothModes(t, func(t *testing.T, mode agentMode) {
		f := newFixtureIn(t, mode, "gw-restart", 1)
		f.eip("eip-restart", "172.18.8.10", true)
		gone := f.service("gone", "eip-restart", 80, "10.0.1.11")
		forced := f.service("forced", "eip-restart", 81, "10.0.1.11")
		f.service("stays", "eip-restart", 82, "10.0.1.11")
		for _, n := range []string{"gone", "forced", "stays"} {
			f.eventually(n+" served", func() bool { return allReady(f.records(n), "172.18.8.10") })
		}

		f.stopController()
		ctx := context.Background()
		must(t, k8s.Delete(ctx, gone))
		// A Service whose finalizer someone removed by hand: only its records remember it.
		s := f.get("forced")
		patch := client.MergeFrom(s.DeepCopy())
		s.Finalizers = nil
		must(t, k8s.Patch(ctx, s, patch))
		must(t, k8s.Delete(ctx, forced))
		f.eventually("forced Service gone", func() bool { return f.get("forced") == nil })

		f.start(model.Gates{LoadBalancer: true, ClusterIP: true})
		f.eventually("leftovers cleaned", func() bool {
			return f.get("gone") == nil && len(f.records("gone")) == 0 && len(f.records("forced")) == 0 &&
				f.data.serves(f.pods[0], "172.18.8.10:82:tcp") && !f.data.serves(f.pods[0], "172.18.8.10:81:tcp")
		})
		if !ingressIs(f.get("stays"), "172.18.8.10") {
			t.Fatal("the remaining Service lost its ingress over the restart")
		}

		f.stopController()
		f.start(model.Gates{})
		f.eventually("released with both gates off", func() bool {
			s := f.get("stays")
			return !hasFinalizer(s) && len(f.records("stays")) == 0 && ingressIs(s, "")
		})
	})
}

// A burst of endpoint changes (Pod readiness flips, through the real EndpointSlice controller) is
// coalesced into few syncs of the gateway, and the last change is served. (The interval is long so
// that the burst surely falls inside it on a busy machine.)
// covers: P3, D2, B1
func TestBurstCoalesced(t *testing.T) {
	f := newFixture(t, "gw-burst", 1)
	f.stopController()
	f.minSync = 3 * time.Second
	f.start(model.Gates{LoadBalancer: true})
	f.eip("eip-burst", "172.18.9.10", true)
	const pods = 10
	var ips []string
	for i := 0; i < pods; i++ {
		ips = append(ips, fmt.Sprintf("10.0.1.%d", 100+i))
	}
	f.service("web", "eip-burst", 80, ips...)
	f.eventually("served with every backend", func() bool { return backendsOf(f, "172.18.9.10:80:tcp") == pods })
	before := f.agents.appliesOf(f.pods[0])

	// 20 readiness flips: every Pod but the first goes unready, then half of them come back.
	changes := 0
	for i := 1; i < pods; i++ {
		f.setReady("web", i, false)
		changes++
	}
	for i := 1; i < pods; i += 2 {
		f.setReady("web", i, true)
		changes++
	}
	f.eventually("last change served", func() bool { return backendsOf(f, "172.18.9.10:80:tcp") == 1+(pods-1)/2+(pods-1)%2 })
	if syncs := f.agents.appliesOf(f.pods[0]) - before; syncs > changes/3 {
		t.Fatalf("%d readiness changes took %d gateway syncs; a burst should be coalesced", changes, syncs)
	}
}

func backendsOf(f *fixture, key string) int {
	st, _ := f.agents.state(f.pods[0])
	for _, id := range st.Identities {
		if id.Key().String() == key {
			return len(id.Backends)
		}
	}
	return -1
}

// The metrics of SPEC O3 are exported and move with the work done (sync and plan durations, full
// and partial); the programming latency is
// measured from the trigger time the real EndpointSlice controller stamps on its slices.
// covers: O3
func TestMetrics(t *testing.T) {
	f := newFixture(t, "gw-metrics", 1)
	f.eip("eip-metrics", "172.18.10.10", true)
	latencyBefore := metricValue(t, "vpcgw_network_programming_latency_seconds", nil)
	f.service("web", "eip-metrics", 80, "10.0.1.11", "10.0.1.12")

	gw := map[string]string{"gateway": "gw-metrics"}
	f.eventually("gauges", func() bool {
		return metricValue(t, "vpcgw_gateway_identities", gw) == 2 && metricValue(t, "vpcgw_gateway_backends", gw) == 4
	})
	f.eventually("latency observed", func() bool {
		return metricValue(t, "vpcgw_network_programming_latency_seconds", nil) > latencyBefore
	})
	if metricValue(t, "vpcgw_gateway_sync_duration_seconds", map[string]string{"result": "ok"}) == 0 ||
		metricValue(t, "vpcgw_records_written_total", map[string]string{"op": "service-record"}) == 0 {
		t.Fatal("sync duration or records written not counted")
	}
	// A backend change after the first sync is a partial plan (one Service replanned).
	partialBefore := metricValue(t, "vpcgw_plan_duration_seconds", map[string]string{"kind": "partial"})
	f.setReady("web", 1, false)
	f.eventually("partial plan timed", func() bool {
		return metricValue(t, "vpcgw_plan_duration_seconds", map[string]string{"kind": "partial"}) > partialBefore
	})
	if metricValue(t, "vpcgw_plan_duration_seconds", map[string]string{"kind": "full"}) == 0 {
		t.Fatal("full plans not timed")
	}
	f.setReady("web", 1, true)
	failuresBefore := metricValue(t, "vpcgw_gateway_sync_failures_total", gw)
	f.agents.fail("boom")
	f.setReady("web", 1, false)
	f.eventually("failure counted", func() bool { return metricValue(t, "vpcgw_gateway_sync_failures_total", gw) > failuresBefore })
	f.agents.fail("")
	f.eventually("recovered", func() bool { return metricValue(t, "vpcgw_gateway_backends", gw) == 2 })
}

// metricValue is a gauge's or counter's value, or a histogram's sample count, for the series
// whose labels include want (summed over matches).
func metricValue(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	must(t, err)
	total := 0.0
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue series
				}
			}
			switch {
			case m.Gauge != nil:
				total += m.GetGauge().GetValue()
			case m.Counter != nil:
				total += m.GetCounter().GetValue()
			case m.Histogram != nil:
				total += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return total
}

// An agent that goes away while nothing changes (its container restarted) is redialled and gets
// the whole state back; a replaced instance (new pod UID) gets it too.
// covers: L6, D7
func TestInstanceRestartedOrReplaced(t *testing.T) {
	bothModes(t, func(t *testing.T, mode agentMode) {
		f := newFixtureIn(t, mode, "gw-restarted", 1)
		f.eip("eip-restarted", "172.18.11.10", true)
		f.service("web", "eip-restarted", 80, "10.0.1.11")
		key := "172.18.11.10:80:tcp"
		f.eventually("served", func() bool { return f.data.serves(f.pods[0], key) })

		f.data.kill(f.pods[0])
		f.eventually("state back after the agent restarted", func() bool {
			return (f.agents == nil || f.agents.dialsOf(f.pods[0]) >= 2) && f.data.serves(f.pods[0], key)
		})

		ctx := context.Background()
		var old corev1.Pod
		must(t, k8s.Get(ctx, client.ObjectKey{Namespace: model.DefaultGatewayNamespace, Name: "vpc-nat-gw-" + f.gw + "-0"}, &old))
		must(t, k8s.Delete(ctx, &old, client.GracePeriodSeconds(0)))
		f.eventually("old pod gone", func() bool {
			var p corev1.Pod
			err := k8s.Get(ctx, client.ObjectKeyFromObject(&old), &p)
			return err != nil
		})
		repl := old.DeepCopy()
		repl.ResourceVersion, repl.UID, repl.CreationTimestamp = "", "", metav1.Time{}
		repl.Status = corev1.PodStatus{}
		must(t, k8s.Create(ctx, repl))
		if f.real != nil {
			f.real.alias(repl.UID, repl.Annotations[transport.NetnsAnnotation])
		}
		repl.Status.Phase = corev1.PodRunning
		must(t, k8s.Status().Update(ctx, repl))
		f.eventually("replacement programmed", func() bool { return f.data.serves(repl.UID, key) })
	})
}
