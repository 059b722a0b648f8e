// covers: R1, S7
package v1_test

import (
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
)

func TestSchemeRegistersAllKinds(t *testing.T) {
	s := runtime.NewScheme()
	if err := kubeovnv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"VpcNatGateway", "IptablesEIP", "IptablesDnatRule", "Vpc", "Subnet"} {
		for _, k := range []string{kind, kind + "List"} {
			gvk := kubeovnv1.GroupVersion.WithKind(k)
			if gvk.Group != "kubeovn.io" || gvk.Version != "v1" || !s.Recognizes(gvk) {
				t.Errorf("%s not registered as kubeovn.io/v1", k)
			}
		}
	}
	if gr := kubeovnv1.Resource("iptables-dnat-rules"); gr.String() != "iptables-dnat-rules.kubeovn.io" {
		t.Errorf("Resource() = %s", gr)
	}
}

// The wire values are kube-ovn's API; a renamed constant would silently break compatibility.
func TestDnatConstantsAndJSONNames(t *testing.T) {
	if kubeovnv1.DnatRuleTypeExclusive != "exclusive" || kubeovnv1.DnatRuleTypeShare != "share" ||
		kubeovnv1.DnatSessionAffinityNone != "" || kubeovnv1.DnatSessionAffinityClientIP != "ClientIP" ||
		kubeovnv1.DefaultDnatSessionAffinityTimeoutSeconds != 10800 {
		t.Fatal("DNAT constants differ from kube-ovn's values")
	}

	spec := kubeovnv1.IptablesDnatRuleSpec{
		EIP: "e", ExternalPort: "80", Protocol: "tcp", InternalIP: "10.0.0.1", InternalPort: "8080",
		Type: kubeovnv1.DnatRuleTypeShare, SessionAffinity: kubeovnv1.DnatSessionAffinityClientIP,
		SessionAffinityTimeoutSeconds: 30, ClusterIP: "10.96.0.1",
	}
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"eip":"e","externalPort":"80","protocol":"tcp","internalIp":"10.0.0.1","internalPort":"8080",` +
		`"type":"share","sessionAffinity":"ClientIP","sessionAffinityTimeoutSeconds":30,"clusterIP":"10.96.0.1"}`
	if string(b) != want {
		t.Errorf("spec JSON\n got %s\nwant %s", b, want)
	}

	for timeout, want := range map[int32]int32{0: 10800, 1: 1, 86400: 86400} {
		s := kubeovnv1.IptablesDnatRuleSpec{SessionAffinityTimeoutSeconds: timeout}
		if got := s.EffectiveSessionAffinityTimeoutSeconds(); got != want {
			t.Errorf("effective timeout of %d = %d, want %d", timeout, got, want)
		}
	}
}

func TestConditionsSet(t *testing.T) {
	var c kubeovnv1.Conditions
	c.Set(kubeovnv1.Ready, corev1.ConditionFalse, "Pending", "waiting", 1)
	if len(c) != 1 || c.IsTrue(kubeovnv1.Ready) {
		t.Fatalf("after first Set: %+v", c)
	}

	// An identical Set changes nothing, so status writes stay idempotent.
	before := c[0]
	c.Set(kubeovnv1.Ready, corev1.ConditionFalse, "Pending", "waiting", 1)
	if c[0] != before {
		t.Errorf("identical Set changed the condition: %+v -> %+v", before, c[0])
	}

	past := metav1.NewTime(time.Now().Add(-time.Hour))
	c[0].LastTransitionTime = past
	c.Set(kubeovnv1.Ready, corev1.ConditionFalse, "StillPending", "waiting", 1)
	if c[0].LastTransitionTime != past {
		t.Errorf("LastTransitionTime moved without a status change")
	}
	c.Set(kubeovnv1.Ready, corev1.ConditionTrue, "Programmed", "", 2)
	if len(c) != 1 || !c.IsTrue(kubeovnv1.Ready) || c[0].ObservedGeneration != 2 || !c[0].LastTransitionTime.After(past.Time) {
		t.Errorf("after status change: %+v", c)
	}
	c.Set(kubeovnv1.Validated, corev1.ConditionTrue, "", "", 2)
	if len(c) != 2 || c.Get(kubeovnv1.Validated) == nil || c.Get(kubeovnv1.Error) != nil {
		t.Errorf("second type: %+v", c)
	}

	st := kubeovnv1.SubnetStatus{Conditions: c}
	if !st.IsValidated() {
		t.Error("Subnet with Validated=True is not IsValidated")
	}
}
