package model

import (
	"cmp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Between claimants of a free EIP identity, the first to claim it wins (SPEC I2, N3). A Service's
// creation time is not its claim: a Service created long ago that sets, or clears and re-sets,
// its annotations would go ahead of every Service already waiting. The claim time is a
// condition on the Service's status, which the controller writes when it first sees the claim
// and removes when the claim goes. Tenants cannot write it: the edit and admin roles have no
// write on services/status, and the controller's admission policy lets it change this
// condition only. A claim not yet stamped (the controller has not seen it) ranks after every
// stamped one, so that stamping can only confirm an order, never overtake it.

const (
	// ConditionEIPClaimed is the claim stamp: its lastTransitionTime is when the controller first
	// saw the Service claim its EIP, its message which gateway and EIP (ClaimMessage).
	ConditionEIPClaimed = "vpcgw.io/EIPClaimed"
	// ReasonClaimed is the stamp's reason.
	ReasonClaimed = "ClaimSeen"
)

// ClaimWrite is what a sync writes of a Service's claim stamp.
type ClaimWrite int

const (
	// ClaimKept keeps the stamp: it is as it should be (present for the claim, or absent).
	ClaimKept ClaimWrite = iota
	// ClaimStamp writes the stamp, dated now (the claim is new, or names another EIP).
	ClaimStamp
	// ClaimClear removes the stamp (the Service claims no EIP any more).
	ClaimClear
)

// ClaimMessage is the stamp's message for a claim of EIP eip on gateway gw: a stamp is the
// Service's only while it names the same gateway and EIP.
func ClaimMessage(gw, eip string) string {
	return "claims IptablesEIP " + eip + " of gateway " + gw
}

// ClaimCondition is the stamp to write for a claim of eip on gw, dated now.
func ClaimCondition(gw, eip string, now time.Time, generation int64) metav1.Condition {
	return metav1.Condition{Type: ConditionEIPClaimed, Status: metav1.ConditionTrue, Reason: ReasonClaimed,
		Message: ClaimMessage(gw, eip), LastTransitionTime: metav1.NewTime(now), ObservedGeneration: generation}
}

// claimStamp is the Service's stamp condition, nil when it has none.
func claimStamp(svc *corev1.Service) *metav1.Condition {
	for i := range svc.Status.Conditions {
		if svc.Status.Conditions[i].Type == ConditionEIPClaimed {
			return &svc.Status.Conditions[i]
		}
	}
	return nil
}

// ClaimedSince is when the controller first saw the Service's present claim: false when the
// Service has no stamp, or one of another gateway or EIP (a claim changed since).
func ClaimedSince(svc *corev1.Service) (time.Time, bool) {
	c := claimStamp(svc)
	if c == nil || c.Status != metav1.ConditionTrue ||
		c.Message != ClaimMessage(svc.Annotations[AnnotationGateway], svc.Annotations[AnnotationEIP]) {
		return time.Time{}, false
	}
	return c.LastTransitionTime.Time, true
}

// HasClaimStamp reports whether the Service carries a claim stamp, current or not: one the
// controller must remove once the Service claims nothing.
func HasClaimStamp(svc *corev1.Service) bool { return claimStamp(svc) != nil }

// claimRank is where a Service stands among the claimants of an identity, before its name.
type claimRank struct {
	stamped bool
	since   int64 // unix nanoseconds of the stamp
	created int64 // unix nanoseconds of the creation timestamp
}

func rankOf(svc *corev1.Service) claimRank {
	since, ok := ClaimedSince(svc)
	r := claimRank{stamped: ok, created: svc.CreationTimestamp.UnixNano()}
	if ok {
		r.since = since.UnixNano()
	}
	return r
}

// compareRanks orders stamped claims first, by their stamps, then by creation time.
func compareRanks(a, b claimRank) int {
	return cmp.Or(compareBool(b.stamped, a.stamped), cmp.Compare(a.since, b.since), cmp.Compare(a.created, b.created))
}

// CompareClaims is SPEC I2's order between two claimants of a free identity, shared with the
// webhook: the first claim stamped, then the first created, then namespace/name.
func CompareClaims(a, b *corev1.Service) int {
	return cmp.Or(compareRanks(rankOf(a), rankOf(b)), strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
}

// ApplyClaim makes svc's conditions what the plan's claim write says, dated now, and reports
// whether they changed. A claim of another EIP is a new claim, dated now even though the
// condition's status stays True (not meta.SetStatusCondition, which would keep the old date).
func (sp *ServicePlan) ApplyClaim(svc *corev1.Service, now time.Time) bool {
	drop := func(c metav1.Condition) bool { return c.Type == ConditionEIPClaimed }
	switch sp.Claim {
	case ClaimStamp:
		svc.Status.Conditions = append(slices.DeleteFunc(slices.Clone(svc.Status.Conditions), drop),
			ClaimCondition(sp.Gateway, sp.ClaimedEIP, now, svc.Generation))
		return true
	case ClaimClear:
		if !HasClaimStamp(svc) {
			return false
		}
		svc.Status.Conditions = slices.DeleteFunc(slices.Clone(svc.Status.Conditions), drop)
		return true
	}
	return false
}
