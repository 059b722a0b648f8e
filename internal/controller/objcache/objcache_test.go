package objcache

// covers: P2 (the record cache keeps one copy of repeated strings and loses nothing the model reads)

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
