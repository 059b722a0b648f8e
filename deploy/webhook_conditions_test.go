package deploy

// covers: W4, W7, K7
//
// The chart's ValidatingWebhookConfiguration, evaluated by the real API server: which requests
// call vpcgw's webhook at all is decided by the API server from rules and matchConditions, so
// that is where they are checked. The copy registered here differs from the rendered one only in
// where it calls (a closed port) and in failing every call (failurePolicy Fail), so that each
// request that reaches a webhook is refused with that webhook's name and every other is admitted.

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vpcgw/vpcgw/internal/controller"
	"github.com/vpcgw/vpcgw/internal/model"
)

const (
	kubeOVNUser = "system:serviceaccount:kube-system:ovn"
	someUser    = "alice"
)

func kubeOVNObject(kind, name string, spec map[string]any, labels map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion("kubeovn.io/v1")
	u.SetKind(kind)
	u.SetName(name)
	u.SetLabels(labels)
	return u
}

func serviceRecord(name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"service": map[string]any{"namespace": "cond-svc", "name": "web", "uid": "0d3c0c6e-0000-4000-8000-000000000001"},
		"gateway": "cond-gw", "ports": []any{map[string]any{"port": int64(80), "protocol": "tcp"}},
	}}}
	u.SetAPIVersion("vpcgw.io/v1alpha1")
	u.SetKind("ServiceRecord")
	u.SetName(name)
	u.SetLabels(map[string]string{"ovn.kubernetes.io/nftable-lb-svc-record": "true"})
	return u
}

// as returns a client that makes requests as user (RBAC allows everything: only the user name
// matters to the matchConditions).
func as(t *testing.T, user string) client.Client {
	t.Helper()
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:masters", "system:authenticated"}}
	scheme, err := controller.Scheme()
	must(t, err)
	cl, err := client.New(c, client.Options{Scheme: scheme})
	must(t, err)
	return cl
}

// calledWebhook names the webhook an admission error says the API server called ("" if none).
func calledWebhook(err error) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	_, rest, ok := strings.Cut(msg, `failed calling webhook "`)
	if !ok {
		return "<other error: " + msg + ">"
	}
	name, _, _ := strings.Cut(rest, `"`)
	return name
}

// covers: W4, W7, K7, N5
func TestWebhookMatchConditionsOnAPIServer(t *testing.T) {
	helmBin(t)
	needAPIServer(t)
	ctx := context.Background()
	m := manifest(render(t))

	// vpcgw's CRD as the chart installs it, and objects the requests below act on.
	crd := m.must(t, "CustomResourceDefinition", "", "servicerecords.vpcgw.io")
	applyOne(t, crd, false)
	waitEstablished(t, crd.GetName())
	createNamespace(t, "cond-svc")
	record := map[string]string{"ovn.kubernetes.io/nftable-lb-svc-record": "true"}
	dnat := func(name string, labels map[string]string) *unstructured.Unstructured {
		return kubeOVNObject("IptablesDnatRule", name, map[string]any{"eip": "cond-eip", "externalPort": "80", "internalIp": "10.9.2.10", "internalPort": "8080", "protocol": "tcp"}, labels)
	}
	annotated := func() *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "cond-svc",
			Annotations: map[string]string{"ovn.kubernetes.io/vpc_nat_gw": "cond-gw", "ovn.kubernetes.io/eip": "cond-eip"}},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	}
	existingSvc := annotated()
	existingSvc.Name = "existing"
	existing := []client.Object{
		kubeOVNObject("VpcNatGateway", "cond-gw", map[string]any{"vpc": "cond-vpc", "subnet": "cond-subnet", "lanIp": "10.9.2.254"}, nil),
		kubeOVNObject("IptablesEIP", "cond-eip", map[string]any{"natGwDp": "cond-gw", "v4ip": "172.19.2.10"}, nil),
		dnat("cond-record", record),
		existingSvc,
	}
	for _, o := range existing {
		must(t, client.IgnoreAlreadyExists(k8s.Create(ctx, o)))
	}

	var vwc admissionregistrationv1.ValidatingWebhookConfiguration
	must(t, runtime.DefaultUnstructuredConverter.FromUnstructured(m.must(t, "ValidatingWebhookConfiguration", "", "vpcgw").Object, &vwc))
	vwc = admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "vpcgw-conditions-test"}, Webhooks: vwc.Webhooks}
	fail := admissionregistrationv1.Fail
	for i := range vwc.Webhooks {
		h := &vwc.Webhooks[i]
		url := "https://127.0.0.1:1" + *h.ClientConfig.Service.Path
		h.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url}
		h.FailurePolicy = &fail
	}
	must(t, k8s.Create(ctx, &vwc))
	alice, kubeOVN, ctrl := as(t, someUser), as(t, kubeOVNUser), as(t, controllerUser)
	probe := func() error { return alice.Create(ctx, dnat("cond-probe", record), client.DryRunAll) }
	// The API server picks the configuration up (and drops it) asynchronously.
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
	t.Cleanup(func() {
		_ = k8s.Delete(ctx, &vwc)
		waitFor("the test's webhook configuration to be gone", func() bool { return probe() == nil })
	})
	waitFor("the test's webhook configuration to be in force", func() bool { return calledWebhook(probe()) == "iptables-dnat-rules.vpcgw.kubeovn.io" })

	plain := func() *corev1.Service {
		s := annotated()
		s.Annotations = nil
		return s
	}
	statusUpdate := func(c client.Client) error {
		cur := &unstructured.Unstructured{}
		cur.SetGroupVersionKind(dnat("", nil).GroupVersionKind())
		if err := k8s.Get(ctx, client.ObjectKey{Name: "cond-record"}, cur); err != nil {
			return err
		}
		if err := unstructured.SetNestedField(cur.Object, true, "status", "ready"); err != nil {
			return err
		}
		return c.Status().Update(ctx, cur, client.DryRunAll)
	}
	// The controller's finalizer patch (internal/controller/kubewrite/kubewrite.go:PatchFinalizer), the one
	// Service write it makes (its admission policy, not the webhook, bounds it: SPEC N5).
	finalizer := func(c client.Client) error {
		return c.Patch(ctx, existingSvc.DeepCopy(), client.RawPatch(types.StrategicMergePatchType,
			[]byte(`{"metadata":{"finalizers":["`+model.Finalizer+`"]}}`)), client.DryRunAll)
	}
	del := func(c client.Client, kind, name string) error {
		return c.Delete(ctx, kubeOVNObject(kind, name, nil, nil), client.DryRunAll)
	}
	for _, tc := range []struct {
		what string
		req  func() error
		want string // the webhook called, "" for none
	}{
		// Services: only annotated ones, never the controller's or kube-ovn's writes (K7).
		{"alice creates an annotated Service", func() error { return alice.Create(ctx, annotated(), client.DryRunAll) }, "services.vpcgw.kubeovn.io"},
		{"alice creates a plain Service", func() error { return alice.Create(ctx, plain(), client.DryRunAll) }, ""},
		{"kube-ovn creates an annotated Service", func() error { return kubeOVN.Create(ctx, annotated(), client.DryRunAll) }, ""},
		{"alice adds a finalizer to an annotated Service", func() error { return finalizer(alice) }, "services.vpcgw.kubeovn.io"},
		{"the controller adds its finalizer to an annotated Service", func() error { return finalizer(ctrl) }, ""},
		// ServiceRecords: every write by anyone but the controller (W4), never kube-ovn's (K7).
		{"alice creates a ServiceRecord", func() error { return alice.Create(ctx, serviceRecord("cond-sr"), client.DryRunAll) }, "servicerecords.vpcgw.kubeovn.io"},
		{"kube-ovn creates a ServiceRecord", func() error { return kubeOVN.Create(ctx, serviceRecord("cond-sr"), client.DryRunAll) }, ""},
		{"the controller creates a ServiceRecord", func() error { return ctrl.Create(ctx, serviceRecord("cond-sr"), client.DryRunAll) }, ""},
		// IptablesDnatRules: vpcgw's records by their label, status included (W4); other rules
		// and kube-ovn's writes never (K7).
		{"alice creates a labelled record", func() error { return alice.Create(ctx, dnat("cond-new", record), client.DryRunAll) }, "iptables-dnat-rules.vpcgw.kubeovn.io"},
		{"alice creates an unlabelled DNAT rule", func() error { return alice.Create(ctx, dnat("cond-new", nil), client.DryRunAll) }, ""},
		{"alice creates a rule labelled record=false", func() error {
			return alice.Create(ctx, dnat("cond-new", map[string]string{"ovn.kubernetes.io/nftable-lb-svc-record": "false"}), client.DryRunAll)
		}, ""},
		{"kube-ovn creates a labelled record", func() error { return kubeOVN.Create(ctx, dnat("cond-new", record), client.DryRunAll) }, ""},
		{"the controller creates a labelled record", func() error { return ctrl.Create(ctx, dnat("cond-new", record), client.DryRunAll) }, ""},
		{"alice writes a record's status", func() error { return statusUpdate(alice) }, "iptables-dnat-rules.vpcgw.kubeovn.io"},
		{"kube-ovn writes a record's status", func() error { return statusUpdate(kubeOVN) }, ""},
		{"alice deletes a record", func() error { return del(alice, "IptablesDnatRule", "cond-record") }, "iptables-dnat-rules.vpcgw.kubeovn.io"},
		{"kube-ovn deletes a record", func() error { return del(kubeOVN, "IptablesDnatRule", "cond-record") }, ""},
		// EIP and gateway deletes: checked for everyone but kube-ovn (its GC deletes gateways, C9).
		{"alice deletes an EIP", func() error { return del(alice, "IptablesEIP", "cond-eip") }, "iptables-eips.vpcgw.kubeovn.io"},
		{"kube-ovn deletes an EIP", func() error { return del(kubeOVN, "IptablesEIP", "cond-eip") }, ""},
		{"alice deletes a gateway", func() error { return del(alice, "VpcNatGateway", "cond-gw") }, "vpc-nat-gateways.vpcgw.kubeovn.io"},
		{"kube-ovn's GC deletes a gateway", func() error { return del(kubeOVN, "VpcNatGateway", "cond-gw") }, ""},
	} {
		err := tc.req()
		if got := calledWebhook(err); got != tc.want {
			t.Errorf("%s: webhook called %q, want %q (%v)", tc.what, got, tc.want, err)
		}
	}
}
