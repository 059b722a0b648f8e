package model

import (
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"

	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
)

// covers: R3, T1, T2, L5, D8
// What a sync writes after programming, by how programming ended: confirmation only once the
// gateway serves the plan, ingress published only then but withdrawn regardless, releases unless
// programming failed or the Service is quarantined, the finalizer last and never while ingress is
// still published.
func TestWritesAfterProgramming(t *testing.T) {
	serving := ServicePlan{EIPServed: true, WriteRecord: true, Record: &vpcgwv1alpha1.ServiceRecord{}, IngressWrite: true,
		Ingress: []corev1.LoadBalancerIngress{{IP: "172.18.0.10"}}, DeleteServiceRecords: []string{"old"}}
	leaving := ServicePlan{IngressWrite: true, ReleaseFinalizer: true, DeleteServiceRecords: []string{"sr"}}
	cases := []struct {
		name string
		sp   ServicePlan
		o    Outcome
		want After
	}{
		{"served, programmed", serving, Programmed, After{ServiceRecord: true, Ingress: true, Release: true}},
		{"served, no instance", serving, NoInstance, After{Release: true}},
		{"served, gateway gone", serving, GatewayGone, After{Release: true}},
		{"served, quarantined", serving, Held, After{}},
		{"served, failed", serving, Failed, After{}},
		{"leaving, programmed", leaving, Programmed, After{Ingress: true, Release: true, ReleaseFinalizer: true}},
		{"leaving, no instance: ingress withdrawn anyway", leaving, NoInstance, After{Ingress: true, Release: true, ReleaseFinalizer: true}},
		{"leaving, gateway gone", leaving, GatewayGone, After{Ingress: true, Release: true, ReleaseFinalizer: true}},
		{"leaving, failed", leaving, Failed, After{}},
		{"finalizer kept while ingress is published", ServicePlan{IngressWrite: true, Ingress: serving.Ingress, ReleaseFinalizer: true}, Programmed,
			After{Ingress: true, Release: true}},
	}
	for _, c := range cases {
		if got := c.sp.After(c.o); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	for o, want := range map[Outcome]bool{Programmed: true, NoInstance: true, GatewayGone: true, Held: false, Failed: false} {
		if got := ReleaseOrphans(o, "gw1"); got != want {
			t.Errorf("ReleaseOrphans(%v, gw1) = %v, want %v", o, got, want)
		}
	}
	if ReleaseOrphans(Programmed, UnboundGateway) {
		t.Error("the unbound key's sync releases orphans")
	}
}

// covers: N6
// Event messages are cut to the API's 1 KiB on a character boundary; short ones are kept whole.
func TestBoundMessage(t *testing.T) {
	if got := BoundMessage("short"); got != "short" {
		t.Fatalf("BoundMessage(short) = %q", got)
	}
	long := strings.Repeat("é", MaxEventMessage) // two bytes each
	got := BoundMessage(long)
	if len(got) > MaxEventMessage || !utf8.ValidString(got) || !strings.HasSuffix(got, "…") {
		t.Fatalf("BoundMessage of %d bytes: %d bytes, valid UTF-8 %v", len(long), len(got), utf8.ValidString(got))
	}
}
