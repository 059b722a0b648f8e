package objcache

// covers: P2 (the record cache keeps one copy of repeated strings and loses nothing the model reads)

import (
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
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
