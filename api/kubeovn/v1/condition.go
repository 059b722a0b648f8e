package v1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConditionType names a condition in a kube-ovn status.
type ConditionType string

// Condition types kube-ovn sets on its objects.
const (
	Ready     ConditionType = "Ready"
	Validated ConditionType = "Validated"
	Init      ConditionType = "Init"
	Error     ConditionType = "Error"
)

// Condition is kube-ovn's common status condition. It differs from metav1.Condition
// (lastUpdateTime, free-form reason), so kube-ovn's own objects decode without loss.
type Condition struct {
	// Type of the condition, e.g. Ready.
	Type ConditionType `json:"type"`
	// Status of the condition: True, False or Unknown.
	Status corev1.ConditionStatus `json:"status"`
	// Reason is a one-word CamelCase reason for the last transition.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message is a human-readable explanation of the last transition.
	// +optional
	Message string `json:"message,omitempty"`
	// ObservedGeneration is the metadata.generation the condition was set for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// LastUpdateTime is when the condition was last written.
	// +optional
	LastUpdateTime metav1.Time `json:"lastUpdateTime,omitempty"`
	// LastTransitionTime is when the status last changed.
	// +optional
	LastTransitionTime metav1.Time `json:"lastTransitionTime,omitempty"`
}

// Conditions is a list of conditions keyed by type.
type Conditions []Condition

// Get returns the condition of the given type, or nil.
func (c Conditions) Get(t ConditionType) *Condition {
	for i := range c {
		if c[i].Type == t {
			return &c[i]
		}
	}
	return nil
}

// IsTrue reports whether the condition of the given type exists with status True.
func (c Conditions) IsTrue(t ConditionType) bool {
	cond := c.Get(t)
	return cond != nil && cond.Status == corev1.ConditionTrue
}

// Set creates or updates the condition of type t. LastTransitionTime moves only when the
// status changes; an identical condition is left untouched so that writes stay idempotent.
func (c *Conditions) Set(t ConditionType, status corev1.ConditionStatus, reason, message string, generation int64) {
	now := metav1.Now()
	if cond := c.Get(t); cond != nil {
		if cond.Status == status && cond.Reason == reason && cond.Message == message &&
			cond.ObservedGeneration == generation {
			return
		}
		if cond.Status != status {
			cond.LastTransitionTime = now
		}
		cond.Status, cond.Reason, cond.Message, cond.ObservedGeneration = status, reason, message, generation
		cond.LastUpdateTime = now
		return
	}
	*c = append(*c, Condition{
		Type:               t,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: generation,
		LastUpdateTime:     now,
		LastTransitionTime: now,
	})
}
