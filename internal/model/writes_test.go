package model

import (
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
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

// covers: I2, T2, R3
// What a sync writes before programming: the claim stamp now unless an ingress write carries it
// later, the finalizer, the record claims; a failed finalizer write leaves nothing to claim.
func TestWritesBeforeProgramming(t *testing.T) {
	rec := &kubeovnv1.IptablesDnatRule{}
	cases := []struct {
		name string
		sp   ServicePlan
		want Before
	}{
		{"nothing to write", ServicePlan{}, Before{}},
		{"a new claim, no ingress: stamped now", ServicePlan{Claim: ClaimStamp}, Before{Claim: true}},
		{"a claim gone, no ingress: cleared now", ServicePlan{Claim: ClaimClear}, Before{Claim: true}},
		{"a new claim with ingress: stamped with the ingress", ServicePlan{Claim: ClaimStamp, IngressWrite: true}, Before{}},
		{"finalizer and claims", ServicePlan{AddFinalizer: true, CreateRecords: []*kubeovnv1.IptablesDnatRule{rec}}, Before{AddFinalizer: true, Records: true}},
		{"updates are claims too", ServicePlan{UpdateRecords: []*kubeovnv1.IptablesDnatRule{rec}}, Before{Records: true}},
	}
	for _, c := range cases {
		if got := c.sp.Before(); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	sp := ServicePlan{AddFinalizer: true, CreateRecords: []*kubeovnv1.IptablesDnatRule{rec}, UpdateRecords: []*kubeovnv1.IptablesDnatRule{rec},
		StatusRecords: []*kubeovnv1.IptablesDnatRule{rec}, DeleteRecords: []string{"old"}}
	sp.FinalizerFailed()
	if b := sp.Before(); b.Records || len(sp.StatusRecords) != 0 || sp.After(Programmed).RecordStatus {
		t.Errorf("after a failed finalizer write: %+v, status records %d", b, len(sp.StatusRecords))
	}
	if len(sp.DeleteRecords) != 1 {
		t.Error("a failed finalizer write dropped the releases")
	}
}

// covers: I2, T1
// A claim stamp that waited for the ingress write is written on its own when no ingress write
// comes (quarantined, or the EIP part not confirmed), never after a failure.
func TestClaimStampAfterProgramming(t *testing.T) {
	waiting := ServicePlan{Claim: ClaimStamp, IngressWrite: true, EIPServed: true, Ingress: []corev1.LoadBalancerIngress{{IP: "172.18.0.10"}}}
	for _, c := range []struct {
		name      string
		sp        ServicePlan
		o         Outcome
		claim, in bool
	}{
		{"programmed: the ingress write carries it", waiting, Programmed, false, true},
		{"no instance: no ingress, the stamp alone", waiting, NoInstance, true, false},
		{"quarantined: the stamp alone", waiting, Held, true, false},
		{"failed: nothing", waiting, Failed, false, false},
		{"stamped before programming: not again", ServicePlan{Claim: ClaimStamp}, Programmed, false, false},
		{"kept: nothing", ServicePlan{IngressWrite: true}, Held, false, false},
	} {
		if a := c.sp.After(c.o); a.Claim != c.claim || a.Ingress != c.in {
			t.Errorf("%s: claim %v ingress %v, want %v %v", c.name, a.Claim, a.Ingress, c.claim, c.in)
		}
	}
}
