package gwinstance

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// covers: N5
// A Pod's name is one of a StatefulSet's replicas only as the StatefulSet controller spells it,
// with an ordinal below spec.replicas (unset: 1).
func TestCheckOrdinal(t *testing.T) {
	sts := func(replicas *int32) *appsv1.StatefulSet {
		return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "vpc-nat-gw-gw1"}, Spec: appsv1.StatefulSetSpec{Replicas: replicas}}
	}
	started := sts(ptr.To[int32](2))
	started.Spec.Ordinals = &appsv1.StatefulSetOrdinals{Start: 1}
	for _, c := range []struct {
		pod string
		sts *appsv1.StatefulSet
		ok  bool
	}{
		{"vpc-nat-gw-gw1-0", sts(nil), true},
		{"vpc-nat-gw-gw1-1", sts(nil), false},
		{"vpc-nat-gw-gw1-0", sts(ptr.To[int32](1)), true},
		{"vpc-nat-gw-gw1-2", sts(ptr.To[int32](3)), true},
		{"vpc-nat-gw-gw1-3", sts(ptr.To[int32](3)), false},
		{"vpc-nat-gw-gw1-7", sts(ptr.To[int32](1)), false},
		{"vpc-nat-gw-gw1-0", sts(ptr.To[int32](0)), false},
		{"vpc-nat-gw-gw1-00", sts(nil), false},
		{"vpc-nat-gw-gw1-01", sts(ptr.To[int32](3)), false},
		{"vpc-nat-gw-gw1-+1", sts(ptr.To[int32](3)), false},
		{"vpc-nat-gw-gw1--1", sts(ptr.To[int32](3)), false},
		{"vpc-nat-gw-gw1-1a", sts(ptr.To[int32](3)), false},
		{"vpc-nat-gw-gw1-", sts(nil), false},
		{"vpc-nat-gw-gw1", sts(nil), false},
		{"vpc-nat-gw-gw10", sts(nil), false},
		{"evil-vpc-nat-gw-gw1-0", sts(nil), false},
		{"vpc-nat-gw-gw1-99999999999999999999", sts(ptr.To[int32](3)), false},
		{"vpc-nat-gw-gw1-1", started, false},
	} {
		err := CheckOrdinal(c.pod, c.sts)
		if (err == nil) != c.ok {
			t.Errorf("pod %s of %s (replicas %d): %v, want accepted %v", c.pod, c.sts.Name, Replicas(c.sts), err, c.ok)
		}
	}
}
