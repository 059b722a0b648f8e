// Package gwinstance says which Pods a StatefulSet's controller makes: the model (which Pods
// are a gateway's instances) and the exec transport (which Pods it may exec into) ask it alike,
// so that a Pod a tenant names and owner-references like kube-ovn's is still told apart (SPEC N5).
package gwinstance

import (
	"fmt"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
)

// maxOrdinalDigits bounds the ordinal's text: spec.replicas is an int32, so a longer number is
// never a replica, and parsing stays within int64.
const maxOrdinalDigits = 10

// Ordinal is the ordinal of Pod podName of StatefulSet statefulSet: podName must be
// "<statefulSet>-<ordinal>", the ordinal in decimal without leading zeros, as the StatefulSet
// controller formats it (k8s.io/kubernetes pkg/controller/statefulset getPodName). Anything else
// (a sign, a leading zero, a letter, an empty ordinal) is not one of its Pods' names.
func Ordinal(podName, statefulSet string) (int64, bool) {
	s, ok := strings.CutPrefix(podName, statefulSet+"-")
	if !ok || s == "" || len(s) > maxOrdinalDigits || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// Replicas is a StatefulSet's spec.replicas; unset means 1, the API's default.
func Replicas(sts *appsv1.StatefulSet) int64 {
	if sts.Spec.Replicas == nil {
		return 1
	}
	return int64(*sts.Spec.Replicas)
}

// CheckOrdinal returns why Pod podName is not a replica of sts by its name, nil when its ordinal
// is below sts's replicas. Ordinals start at 0: kube-ovn never sets spec.ordinals, so a
// StatefulSet that does is not kube-ovn's as it makes them, and its Pods are refused.
func CheckOrdinal(podName string, sts *appsv1.StatefulSet) error {
	ordinal, ok := Ordinal(podName, sts.Name)
	if !ok {
		return fmt.Errorf("its name is not %s-<ordinal> (decimal, no leading zeros)", sts.Name)
	}
	if replicas := Replicas(sts); ordinal >= replicas {
		return fmt.Errorf("its ordinal %d is not below the %d replicas of StatefulSet %s", ordinal, replicas, sts.Name)
	}
	if sts.Spec.Ordinals != nil && sts.Spec.Ordinals.Start != 0 {
		return fmt.Errorf("StatefulSet %s starts its ordinals at %d, which kube-ovn never does", sts.Name, sts.Spec.Ordinals.Start)
	}
	return nil
}
