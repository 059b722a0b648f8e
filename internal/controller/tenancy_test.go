// covers: N1, N2, W6
package controller_test

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/kcm"
	"github.com/vpcgw/vpcgw/internal/model"
)

// Against the real API server, without the webhook (it can be bypassed): a Service of a namespace
// the gateway's Vpc does not bind gets nothing, an event says why; once the Vpc binds the
// namespace, the Vpc's own event serves it. And an ordinary Pod of the tenant with a made-up
// kube-ovn provider annotation pointing at the metadata address never becomes a backend.
func TestTenancyOnTheAPIServer(t *testing.T) {
	f := newFixture(t, "gw-tenancy", 1)
	f.eip("eip-tenancy", "172.18.20.10", true)
	ctx := context.Background()
	intruder := "intruder-" + f.gw
	must(t, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: intruder}}))
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "squat", Namespace: intruder,
		Annotations: map[string]string{model.AnnotationGateway: f.gw, model.AnnotationEIP: f.eipName("eip-tenancy")}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, AllocateLoadBalancerNodePorts: ptr.To(false), Selector: map[string]string{"app": "squat"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}}}
	must(t, k8s.Create(ctx, svc))
	// The metadata-address Pod of the intruding namespace, ready, selected by the Service.
	evil := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "squat-0", Namespace: intruder, Labels: map[string]string{"app": "squat"},
		Annotations: map[string]string{"evil.kubernetes.io/ip_address": "169.254.169.254", "evil.kubernetes.io/logical_switch": f.gw + "-subnet",
			"evil.kubernetes.io/allocated": "true"}},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "app", Image: "x", Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}}}}
	must(t, k8s.Create(ctx, evil))
	must(t, kcm.SetPodRunning(ctx, k8s, evil, "10.0.1.66", true))

	get := func() *corev1.Service {
		var s corev1.Service
		must(t, k8s.Get(ctx, client.ObjectKeyFromObject(svc), &s))
		return &s
	}
	f.eventually("the not-admitted event", func() bool {
		var evs corev1.EventList
		must(t, k8s.List(ctx, &evs, client.InNamespace(intruder)))
		return slices.ContainsFunc(evs.Items, func(e corev1.Event) bool { return e.Reason == model.ReasonNotAdmitted })
	})
	if s := get(); len(s.Status.LoadBalancer.Ingress) != 0 || slices.Contains(s.Finalizers, model.Finalizer) || f.data.serves(f.pods[0], "172.18.20.10:80:tcp") {
		t.Fatalf("a Service that is not admitted got ingress %v, finalizers %v, or an identity", s.Status.LoadBalancer.Ingress, s.Finalizers)
	}

	// An administrator binds the namespace to the VPC: the Vpc's change serves the Service.
	var vpc kubeovnv1.Vpc
	must(t, k8s.Get(ctx, client.ObjectKey{Name: f.gw + "-vpc"}, &vpc))
	patch := client.MergeFrom(vpc.DeepCopy())
	vpc.Spec.Namespaces = append(vpc.Spec.Namespaces, intruder)
	must(t, k8s.Patch(ctx, &vpc, patch))
	f.eventually("served once admitted", func() bool {
		s := get()
		return len(s.Status.LoadBalancer.Ingress) == 1 && f.data.serves(f.pods[0], "172.18.20.10:80:tcp")
	})
	// ... but the forged Pod is no backend: the record of what was programmed has none.
	var recs vpcgwv1alpha1.ServiceRecordList
	f.eventually("the record", func() bool {
		must(t, k8s.List(ctx, &recs, client.MatchingLabels{model.LabelRecordNamespace: intruder, model.LabelRecordName: "squat"}))
		return len(recs.Items) == 1
	})
	if p := recs.Items[0].Spec.Ports; len(p) != 1 || len(p[0].Backends) != 0 {
		t.Fatalf("backends programmed for the forged Pod: %+v", p)
	}
}
