package webhook

import (
	"context"
	"encoding/json"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// covers: W1, W3, W4, N4, N6
// FuzzAdmissionRequests: the API server forwards whatever a user sent. Every handler answers any
// request, whatever its objects hold, without panicking, and with an answer the API server can
// act on: allowed, or refused with a reason. A Service request whose object is not a Service is
// never allowed.
func FuzzAdmissionRequests(f *testing.F) {
	lb := corev1.ServiceTypeLoadBalancer
	svcJSON, _ := json.Marshal(svc("web", lb, a(gwAnn, "gw1", eipAnn, "eip1")))
	ruleJSON, _ := json.Marshal(rule("r1", "share", map[string]string{"ovn.kubernetes.io/nftable-lb-svc-record": "true"}))
	for _, seed := range [][]byte{svcJSON, ruleJSON, []byte(`{}`), []byte(`{"metadata":{"annotations":{"ovn.kubernetes.io/vpc_nat_gw":"GW"}}}`),
		[]byte(`{"spec":{"ports":[{"port":70000,"protocol":"SCTP"}]}}`), []byte(`not json`), nil} {
		f.Add(uint8(0), uint8(0), seed, []byte(nil), "alice")
		f.Add(uint8(1), uint8(1), seed, svcJSON, ctrlUser)
	}
	h := newTestHandlers(f, svc("old", lb, a(gwAnn, "gw1", eipAnn, "eip1"), created(10)), eipObj("eip1", "gw1"), admittedGW.DeepCopy(), admittedVpc.DeepCopy())
	handlers := []func(context.Context, admission.Request) admission.Response{h.Service, h.Record, h.ServiceRecord, h.EIP, h.Gateway}
	ops := []admissionv1.Operation{admissionv1.Create, admissionv1.Update, admissionv1.Delete, admissionv1.Connect}
	f.Fuzz(func(t *testing.T, which, op uint8, obj, old []byte, user string) {
		req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			Operation: ops[int(op)%len(ops)], Name: "x", Namespace: "ns", UserInfo: authenticationv1.UserInfo{Username: user},
			Object: runtime.RawExtension{Raw: obj}, OldObject: runtime.RawExtension{Raw: old},
		}}
		i := int(which) % len(handlers)
		resp := handlers[i](context.Background(), req)
		if !resp.Allowed && (resp.Result == nil || resp.Result.Message == "") {
			t.Fatalf("handler %d refused without a reason: %+v", i, resp.Result)
		}
		if i == 0 && resp.Allowed && req.Operation != admissionv1.Delete && len(obj) > 0 {
			var s corev1.Service
			if err := json.Unmarshal(obj, &s); err != nil {
				t.Fatalf("a Service request whose object does not decode (%v) was allowed", err)
			}
		}
	})
}
