package objcache

// covers: P2 (the record cache keeps one copy of repeated strings and loses nothing the model reads)

import (
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	"github.com/vpcgw/vpcgw/internal/controller/latency"
	"github.com/vpcgw/vpcgw/internal/model"
)

func TestTrimRecordKeepsContent(t *testing.T) {
	rec := &kubeovnv1.IptablesDnatRule{
		ObjectMeta: metav1.ObjectMeta{
			Name: "lb-web-0123456789ab", UID: "u1", ResourceVersion: "7", Generation: 2,
			Labels:        map[string]string{model.LabelRecord: "true", model.LabelRecordUID: "svc-uid", model.LabelGateway: "gw1"},
			Annotations:   map[string]string{"a": "b"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "vpcgw"}},
		},
		Spec: kubeovnv1.IptablesDnatRuleSpec{EIP: "eip1", ExternalPort: "80", Protocol: "tcp", InternalIP: "10.0.1.2", InternalPort: "8080",
			Type: kubeovnv1.DnatRuleTypeShare, SessionAffinity: kubeovnv1.DnatSessionAffinityClientIP, SessionAffinityTimeoutSeconds: 60, ClusterIP: "10.96.0.10"},
		Status: kubeovnv1.IptablesDnatRuleStatus{Ready: true, V4IP: "172.18.0.10", NatGwDp: "gw1", Protocol: "tcp", InternalIP: "10.0.1.2", InternalPort: "8080", ExternalPort: "80",
			Conditions: kubeovnv1.Conditions{{Type: "Ready", Status: corev1.ConditionTrue, Reason: "Programmed", Message: "served"}}},
	}
	want := rec.DeepCopy()
	want.ManagedFields = nil
	got, err := trimRecord(rec.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("trimRecord changed the record:\ngot  %+v\nwant %+v", got, want)
	}
	if other, err := trimRecord(&corev1.Pod{}); err != nil || other == nil {
		t.Fatalf("another type: %v, %v", other, err)
	}
}

// covers: N5, P2
// The cache keeps of a gateway StatefulSet what tells its instances from look-alikes (UID,
// labels, owners, replicas) and the gateway its template names, nothing else of its spec.
func TestTrimStatefulSetKeepsWhatTheModelReads(t *testing.T) {
	labels := map[string]string{"app": "vpc-nat-gw-gw1", model.LabelGatewayPod: "true"}
	owner := metav1.OwnerReference{APIVersion: "kubeovn.io/v1", Kind: "VpcNatGateway", Name: "gw1", UID: "gw-uid", Controller: ptr.To(true)}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "vpc-nat-gw-gw1", Namespace: "kube-system", UID: "sts-uid", ResourceVersion: "3", Labels: labels,
			Annotations: map[string]string{"big": "x"}, OwnerReferences: []metav1.OwnerReference{owner}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-ovn"}}},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{model.AnnotationGatewayPod: "gw1", "other": "y"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "vpc-nat-gw", Image: "x", Env: []corev1.EnvVar{{Name: "GATEWAY_V4", Value: "172.18.0.1"}}}}}}},
		Status: appsv1.StatefulSetStatus{Replicas: 1, ReadyReplicas: 1},
	}
	got, err := trimStatefulSet(sts.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	want := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "vpc-nat-gw-gw1", Namespace: "kube-system", UID: "sts-uid", ResourceVersion: "3", Labels: labels,
			OwnerReferences: []metav1.OwnerReference{owner}},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1),
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{model.AnnotationGatewayPod: "gw1"}}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("trimStatefulSet:\ngot  %+v\nwant %+v", got, want)
	}
	if other, err := trimStatefulSet(&corev1.Pod{}); err != nil || other == nil {
		t.Fatalf("another type: %v, %v", other, err)
	}
}

// covers: P2, B1, O3
// The cache keeps of an EndpointSlice what picks backends and measures latency: the Service
// label, the trigger time, address type, ports, and each endpoint's addresses, conditions and
// Pod target; nothing else, and the conditions keep their values.
func TestTrimSliceKeepsWhatTheModelReads(t *testing.T) {
	tru, fls := true, false
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "web-abc", Namespace: "demo", UID: "es-uid", ResourceVersion: "9", Generation: 3,
			Labels:          map[string]string{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io", "other": "x"},
			Annotations:     map[string]string{latency.TriggerAnnotation: "2026-12-07T00:00:00Z", "big": "y"},
			OwnerReferences: []metav1.OwnerReference{{Kind: "Service", Name: "web"}}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kcm"}}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.0.1.5"}, Conditions: discoveryv1.EndpointConditions{Ready: &tru, Serving: &tru, Terminating: &fls},
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "demo", Name: "web-0", UID: "pod-uid", ResourceVersion: "4", APIVersion: "v1"},
				NodeName:  ptr.To("node1"), Zone: ptr.To("z"), Hostname: ptr.To("h")},
			{Addresses: []string{"10.0.1.6"}, Conditions: discoveryv1.EndpointConditions{Ready: &fls, Serving: &tru, Terminating: &tru}},
			{Addresses: []string{"10.0.1.7"}},
		},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080), AppProtocol: ptr.To("http")}},
	}
	got, err := trimSlice(es.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	want := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "web-abc", Namespace: "demo", UID: "es-uid", ResourceVersion: "9", Generation: 3,
			Labels:      map[string]string{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"},
			Annotations: map[string]string{latency.TriggerAnnotation: "2026-12-07T00:00:00Z"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.0.1.5"}, Conditions: discoveryv1.EndpointConditions{Ready: &tru, Serving: &tru, Terminating: &fls},
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "demo", Name: "web-0", UID: "pod-uid"}},
			{Addresses: []string{"10.0.1.6"}, Conditions: discoveryv1.EndpointConditions{Ready: &fls, Serving: &tru, Terminating: &tru}},
			{Addresses: []string{"10.0.1.7"}},
		},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("trimSlice:\ngot  %+v\nwant %+v", got, want)
	}
	if other, err := trimSlice(&corev1.Pod{}); err != nil || other == nil {
		t.Fatalf("another type: %v, %v", other, err)
	}
}

// covers: P2
// A Service loses only managedFields and kubectl's last-applied copy in the cache; the object it
// was decoded from keeps its annotations (the transform does not write through a shared map).
func TestTrimServiceDropsLastApplied(t *testing.T) {
	ann := map[string]string{corev1.LastAppliedConfigAnnotation: "{...}", model.AnnotationEIP: "eip1"}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "demo", Annotations: ann,
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}, Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.10"}}
	got, err := trimService(svc)
	if err != nil {
		t.Fatal(err)
	}
	g := got.(*corev1.Service)
	if !reflect.DeepEqual(g.Annotations, map[string]string{model.AnnotationEIP: "eip1"}) || g.ManagedFields != nil || g.Spec.ClusterIP != "10.96.0.10" {
		t.Fatalf("trimService: %+v", g)
	}
	if len(ann) != 2 {
		t.Fatalf("the transform changed the decoded map: %v", ann)
	}
}
