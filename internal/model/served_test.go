package model

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// covers: T1, T3, L7
// What a sync tells of a Service being served: newly served until the API shows it (its
// ingress, or for a Service without one its records), then nothing; a restarted controller sees
// it shown. A problem a Warning tells (programming failed, quarantined, a part not served) owes
// the next Served event; a Warning that names no part (a port skipped) does not, and neither
// does a part that is simply not asked for.
func TestServing(t *testing.T) {
	plan := func(s Snapshot, gates Gates) (Snapshot, ServicePlan) {
		return s, servicePlan(Compute(s, gates), "web")
	}
	s, sp := plan(baseSnapshot(service("web", t0)), srGates)
	for o, want := range map[Outcome]Serving{Programmed: ServingNewly, NoInstance: ServingQuiet, GatewayGone: ServingQuiet,
		Failed: ServingInterrupted, Held: ServingInterrupted} {
		if got := sp.Serving(o); got != want {
			t.Errorf("a Service to serve, programming %d: %d, want %d", o, got, want)
		}
	}
	// Served, as a restarted controller finds it: its ingress is the EIP.
	_, sp = plan(applyPlan(s, Compute(s, srGates)), srGates)
	if got := sp.Serving(Programmed); got != ServingShown {
		t.Errorf("a served Service, planned again: %d, want shown (%d)", got, ServingShown)
	}

	notReady := baseSnapshot(service("web", t0))
	notReady.EIPs[0] = eip("eip1", "gw1", "172.18.0.10", false)
	for name, gates := range map[string]Gates{"ClusterIP part served": srGates, "nothing served": {LoadBalancer: true, EndpointsWithoutPods: true}} {
		if _, sp := plan(notReady, gates); sp.Serving(Programmed) != ServingInterrupted {
			t.Errorf("EIP not Ready, %s: %d, want interrupted", name, sp.Serving(Programmed))
		}
	}

	sctp := baseSnapshot(service("web", t0, func(s *corev1.Service) {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "sctp", Port: 9, Protocol: corev1.ProtocolSCTP})
	}))
	if _, sp := plan(sctp, srGates); len(sp.Events) != 1 || sp.Serving(Programmed) != ServingNewly {
		t.Errorf("a port skipped: %d (events %v), want newly served", sp.Serving(Programmed), sp.Events)
	}
	// kube-ovn's load balancers serve the ClusterIP (a Normal event): the EIP part is all.
	if _, sp := plan(baseSnapshot(service("web", t0)), Gates{LoadBalancer: true, KubeOVNLoadBalancers: true, EndpointsWithoutPods: true}); sp.Serving(Programmed) != ServingNewly {
		t.Errorf("ClusterIP served by OVN: %d, want newly served", sp.Serving(Programmed))
	}
	gateOff := baseSnapshot(service("web", t0))
	if _, sp := plan(gateOff, Gates{LoadBalancer: true, EndpointsWithoutPods: true}); sp.Serving(Programmed) != ServingNewly {
		t.Errorf("ClusterIP gate off: %d, want newly served", sp.Serving(Programmed))
	}

	// A ClusterIP Service has no ingress: its records tell.
	cip := baseSnapshot(service("web", t0, func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeClusterIP
		delete(s.Annotations, AnnotationEIP)
	}))
	s, sp = plan(cip, srGates)
	if sp.Serving(Programmed) != ServingNewly {
		t.Errorf("a ClusterIP Service to serve: %d, want newly served", sp.Serving(Programmed))
	}
	if _, sp = plan(applyPlan(s, Compute(s, srGates)), srGates); sp.Serving(Programmed) != ServingShown {
		t.Errorf("a served ClusterIP Service, planned again: %d, want shown", sp.Serving(Programmed))
	}
}

// covers: T3, N6
// The Served event names the gateway, the addresses that carry the Service's traffic (the EIP as
// its ingress, the ClusterIP when the gateway holds it) and its ports, each once, bounded.
func TestServedEvent(t *testing.T) {
	sp := servicePlan(Compute(baseSnapshot(service("web", t0)), srGates), "web")
	ev := sp.ServedEvent()
	want := "gateway gw1 serves this Service at EIP 172.18.0.10 (its ingress) and ClusterIP 10.96.0.10, ports 80/TCP"
	if ev.Type != corev1.EventTypeNormal || ev.Reason != ReasonServed || ev.Message != want {
		t.Errorf("event %+v, want Normal %s %q", ev, ReasonServed, want)
	}

	many := service("web", t0, func(s *corev1.Service) {
		s.Spec.Ports = nil
		for p := range 40 {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: fmt.Sprintf("p%d", p), Port: int32(1000 - p), Protocol: corev1.ProtocolUDP})
		}
	})
	cip := servicePlan(Compute(baseSnapshot(many), Gates{ClusterIP: true, EndpointsWithoutPods: true}), "web")
	msg := cip.ServedEvent().Message
	if !strings.HasPrefix(msg, "gateway gw1 serves this Service at ClusterIP 10.96.0.10, ports 961/UDP, 962/UDP,") ||
		!strings.HasSuffix(msg, ", and 32 more") || strings.Contains(msg, "EIP") || len(msg) > MaxEventMessage {
		t.Errorf("ClusterIP only, 40 ports: %q", msg)
	}
}
