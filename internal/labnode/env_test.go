package labnode

import (
	"runtime"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// covers: P2
// The lab node resolves resourceFieldRef as the kubelet does, so that the chart's GOMEMLIMIT
// (the controller container's memory limit) starts in the lab as in a cluster: the container's
// limit or request divided by the divisor and rounded up, the node's allocatable for a limit
// not set, another container by name; an unknown resource or container is an error.
func TestResourceFieldRefAsTheKubelet(t *testing.T) {
	app := corev1.Container{Name: "app", Resources: corev1.ResourceRequirements{
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
		Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi"), corev1.ResourceCPU: resource.MustParse("250m")},
	}}
	side := corev1.Container{Name: "side", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}}}
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{app, side}}}
	for _, tc := range []struct {
		ref  corev1.ResourceFieldSelector
		want string
	}{
		{corev1.ResourceFieldSelector{Resource: "limits.memory"}, "536870912"},
		{corev1.ResourceFieldSelector{Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}, "512"},
		{corev1.ResourceFieldSelector{Resource: "requests.memory", Divisor: resource.MustParse("1Gi")}, "1"}, // 0.125, rounded up
		{corev1.ResourceFieldSelector{Resource: "requests.cpu", Divisor: resource.MustParse("1m")}, "250"},
		{corev1.ResourceFieldSelector{Resource: "requests.cpu"}, "1"},
		{corev1.ResourceFieldSelector{Resource: "limits.cpu"}, strconv.Itoa(runtime.NumCPU())}, // not set: the node's
		{corev1.ResourceFieldSelector{Resource: "limits.memory", ContainerName: "side"}, "67108864"},
	} {
		got, err := resourceFieldValue(pod, &pod.Spec.Containers[0], &tc.ref)
		if err != nil || got != tc.want {
			t.Errorf("%+v: %q, %v; want %q", tc.ref, got, err, tc.want)
		}
	}
	for _, bad := range []corev1.ResourceFieldSelector{{Resource: "limits.pods"}, {Resource: "memory"}, {Resource: "limits.memory", ContainerName: "nope"}} {
		if got, err := resourceFieldValue(pod, &pod.Spec.Containers[0], &bad); err == nil {
			t.Errorf("%+v: %q, want an error", bad, got)
		}
	}
}
