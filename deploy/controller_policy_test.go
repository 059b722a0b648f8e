// covers: N5, W4, W7, T1, T2, R1, R3, R4
//
// The chart's ValidatingAdmissionPolicy for the controller's identity (templates/controller-policy.yaml),
// evaluated by the real API server: the webhook lets every request of the controller's user
// through (W7), RBAC cannot limit fields, so this policy is what bounds that identity to the writes
// it needs (N5): its finalizer, its ingress, its own records.
package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vpcgw/vpcgw/internal/controller"
	"github.com/vpcgw/vpcgw/internal/model"
)

// The policy's messages (what is refused and why).
const (
	policyDenied       = "ValidatingAdmissionPolicy 'vpcgw-controller' with binding 'vpcgw-controller' denied request"
	onlyFinalizers     = "the vpcgw controller may only change a Service's finalizers"
	onlyLoadBalancer   = "the vpcgw controller may only change a Service's status.loadBalancer and its claim stamp vpcgw.io/EIPClaimed through services/status"
	onlyStamps         = "the vpcgw controller may stamp a claim (vpcgw.io/EIPClaimed: True, reason ClaimSeen) only on a Service that names a gateway and an EIP"
	noServiceLifecycle = "the vpcgw controller may not create Service"
	onlyRecords        = "the vpcgw controller may only write its own IptablesDnatRule records, labelled ovn.kubernetes.io/nftable-lb-svc-record: \"true\""
	onlyOwnFinalizer   = "the vpcgw controller may only add or remove its own finalizer"
	onlyIPIngress      = "the vpcgw controller may publish an ingress only of IP addresses, on a Service that names a gateway"
	onlyStatusConfig   = "the vpcgw controller may only write its status ConfigMap kube-system/vpcgw-controller"
)

// checkControllerPolicy: the rendering bounds the controller's user (its service account in its
// namespace) with the policy, failing closed and denying (SPEC N5).
func checkControllerPolicy(t *testing.T, m manifest, user string) {
	t.Helper()
	p := m.find("ValidatingAdmissionPolicy", "", "vpcgw-controller")
	b := m.find("ValidatingAdmissionPolicyBinding", "", "vpcgw-controller")
	if p == nil || b == nil {
		t.Errorf("no ValidatingAdmissionPolicy and binding vpcgw-controller bound the controller's identity (SPEC N5): %v", m.names())
		return
	}
	if fp, _, _ := unstructured.NestedString(p.Object, "spec", "failurePolicy"); fp != "Fail" {
		t.Errorf("policy failurePolicy %q, want Fail", fp)
	}
	mcs, _, _ := unstructured.NestedSlice(p.Object, "spec", "matchConditions")
	if got := fmt.Sprint(mcs); !strings.Contains(got, "expression:request.userInfo.username == '"+user+"'") {
		t.Errorf("policy matchConditions %s do not select the controller's user %s", got, user)
	}
	rules, _, _ := unstructured.NestedSlice(p.Object, "spec", "matchConstraints", "resourceRules")
	if got := fmt.Sprint(rules); !strings.Contains(got, "resources:[services services/status]") || !strings.Contains(got, "resources:[iptables-dnat-rules iptables-dnat-rules/status]") ||
		strings.Contains(got, "servicerecords") {
		t.Errorf("policy resourceRules %s: want services(/status) and iptables-dnat-rules(/status), not servicerecords", got)
	}
	if name, _, _ := unstructured.NestedString(b.Object, "spec", "policyName"); name != "vpcgw-controller" {
		t.Errorf("binding names policy %q", name)
	}
	if acts, _, _ := unstructured.NestedStringSlice(b.Object, "spec", "validationActions"); fmt.Sprint(acts) != "[Deny]" {
		t.Errorf("binding validationActions %v, want [Deny]", acts)
	}
}

// controllerAs is a client that authenticates as the controller's service account does (its user
// and the groups the API server gives service account tokens), so only the chart's RBAC applies.
func controllerAs(t *testing.T) client.Client {
	t.Helper()
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: controllerUser, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}}
	scheme, err := controller.Scheme()
	must(t, err)
	cl, err := client.New(c, client.Options{Scheme: scheme})
	must(t, err)
	return cl
}

// policyProbe is a request only the policy refuses: the controller's user, with every RBAC
// permission (system:masters), creating a Service (server-side dry run: nothing is created).
func policyProbe(ctx context.Context, t *testing.T) error {
	return as(t, controllerUser).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "policy-probe", Namespace: "default"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}, client.DryRunAll)
}

// waitControllerPolicy waits until the API server enforces the controller's policy (it picks
// policies up asynchronously), or, with inForce false, until it no longer does.
func waitControllerPolicy(t *testing.T, inForce bool) {
	t.Helper()
	ctx := context.Background()
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		last = policyProbe(ctx, t)
		denied := last != nil && strings.Contains(last.Error(), policyDenied)
		return denied == inForce, nil
	})
	if err != nil {
		t.Fatalf("waiting for the controller's policy to be in force=%v: %v (last probe: %v)", inForce, err, last)
	}
}

// applyControllerPolicy applies the rendering's policy and binding for real and waits until they
// are in force; the test's cleanup removes them again.
func applyControllerPolicy(t *testing.T, m manifest) {
	t.Helper()
	p, b := m.must(t, "ValidatingAdmissionPolicy", "", "vpcgw-controller"), m.must(t, "ValidatingAdmissionPolicyBinding", "", "vpcgw-controller")
	applyOne(t, p, false)
	applyOne(t, b, false)
	t.Cleanup(func() {
		_ = k8s.Delete(context.Background(), b.DeepCopy())
		_ = k8s.Delete(context.Background(), p.DeepCopy())
		waitControllerPolicy(t, false)
	})
	waitControllerPolicy(t, true)
}

// covers: N5, T1, T2, R1, R3, R4, W7
func TestControllerPolicyOnAPIServer(t *testing.T) {
	helmBin(t)
	needAPIServer(t)
	ctx := context.Background()
	m := manifest(render(t))
	checkControllerPolicy(t, m, controllerUser)

	// The controller's RBAC as the chart grants it, so that its requests are authorized and only
	// the policy decides; vpcgw's CRD for its ServiceRecords.
	for _, o := range m {
		switch o.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			applyOne(t, o, false)
		}
	}
	crd := m.must(t, "CustomResourceDefinition", "", "servicerecords.vpcgw.io")
	applyOne(t, crd, false)
	waitEstablished(t, crd.GetName())
	applyControllerPolicy(t, m)

	const ns = "policy-svc"
	createNamespace(t, ns)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns,
		Labels:      map[string]string{"app": "web"},
		Annotations: map[string]string{model.AnnotationGateway: "policy-gw", model.AnnotationEIP: "policy-eip"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, AllocateLoadBalancerNodePorts: ptr.To(false),
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}}}
	must(t, k8s.Create(ctx, svc))
	record := map[string]string{model.LabelRecord: "true", model.LabelRecordUID: string(svc.UID)}
	dnat := func(name string, labels map[string]string) *unstructured.Unstructured {
		return kubeOVNObject("IptablesDnatRule", name, map[string]any{"eip": "policy-eip", "externalPort": "80", "internalIp": "10.9.3.10", "internalPort": "8080", "protocol": "tcp"}, labels)
	}
	// A user's DNAT rule, which the controller must never touch.
	must(t, k8s.Create(ctx, dnat("policy-users-rule", nil)))

	ctrl := controllerAs(t)
	cur := func(t *testing.T) *corev1.Service {
		t.Helper()
		var s corev1.Service
		must(t, k8s.Get(ctx, client.ObjectKeyFromObject(svc), &s))
		return &s
	}
	getRule := func(t *testing.T, name string) *unstructured.Unstructured {
		t.Helper()
		u := dnat(name, nil)
		must(t, k8s.Get(ctx, client.ObjectKey{Name: name}, u))
		return u
	}
	// finalizerPatch is the controller's own request (kubewrite.go:PatchFinalizer): a strategic
	// merge patch naming the Service's UID and only the finalizer.
	finalizerPatch := func(add bool, extra map[string]any) client.Patch {
		meta := map[string]any{"uid": string(svc.UID)}
		if add {
			meta["finalizers"] = []string{model.Finalizer}
		} else {
			meta["$deleteFromPrimitiveList/finalizers"] = []string{model.Finalizer}
		}
		for k, v := range extra {
			meta[k] = v
		}
		data, err := json.Marshal(map[string]any{"metadata": meta})
		must(t, err)
		return client.RawPatch(types.StrategicMergePatchType, data)
	}
	merge := func(patch string) client.Patch { return client.RawPatch(types.MergePatchType, []byte(patch)) }
	admitted := func(t *testing.T, what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v, want it admitted", what, err)
		}
	}
	denied := func(t *testing.T, what string, err error, msg string) {
		t.Helper()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), policyDenied) || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: %v, want it denied by the controller's policy with %q", what, err, msg)
		}
	}

	t.Run("finalizer and ingress admitted", func(t *testing.T) {
		admitted(t, "the controller adds its finalizer", ctrl.Patch(ctx, cur(t), finalizerPatch(true, nil)))
		s := cur(t)
		if !slices.Contains(s.Finalizers, model.Finalizer) {
			t.Errorf("finalizers %v after the controller's patch", s.Finalizers)
		}
		// kubewrite.go:PublishIngress: a merge patch of status.loadBalancer.ingress.
		patch := client.MergeFrom(s.DeepCopy())
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "172.19.3.10"}}
		admitted(t, "the controller publishes the ingress", ctrl.Status().Patch(ctx, s, patch))
		if ing := cur(t).Status.LoadBalancer.Ingress; len(ing) != 1 || ing[0].IP != "172.19.3.10" {
			t.Errorf("ingress %v after the controller's status patch", ing)
		}
		s = cur(t)
		patch = client.MergeFrom(s.DeepCopy())
		s.Status.LoadBalancer.Ingress = nil
		admitted(t, "the controller clears the ingress", ctrl.Status().Patch(ctx, s, patch))
		admitted(t, "the controller publishes the ingress again", ctrl.Status().Patch(ctx, cur(t), merge(`{"status":{"loadBalancer":{"ingress":[{"ip":"172.19.3.10"}]}}}`)))
	})

	t.Run("claim stamp admitted, other conditions denied", func(t *testing.T) {
		// reconcile.go:writeClaim: a strategic merge patch of the one condition (SPEC I2).
		stamp := func(t *testing.T, eip string, when time.Time) error {
			s := cur(t)
			orig := s.DeepCopy()
			claim := model.ServicePlan{Gateway: "policy-gw", Claim: model.ClaimStamp, ClaimedEIP: eip}
			claim.ApplyClaim(s, when)
			return ctrl.Status().Patch(ctx, s, client.StrategicMergeFrom(orig))
		}
		// Another writer's condition stays beside the stamp, untouched.
		must(t, k8s.Status().Patch(ctx, cur(t), client.RawPatch(types.StrategicMergePatchType,
			[]byte(`{"status":{"conditions":[{"type":"example.com/Other","status":"True","reason":"Theirs","message":"m","lastTransitionTime":"2024-01-01T00:00:00Z"}]}}`))))
		admitted(t, "the controller stamps a claim", stamp(t, "policy-eip", time.Now()))
		if since, ok := model.ClaimedSince(cur(t)); !ok || since.IsZero() {
			t.Errorf("no current claim stamp after the controller's patch: %+v", cur(t).Status.Conditions)
		}
		admitted(t, "the controller stamps a claim again", stamp(t, "policy-eip", time.Now().Add(time.Second)))
		s := cur(t)
		orig := s.DeepCopy()
		meta.RemoveStatusCondition(&s.Status.Conditions, model.ConditionEIPClaimed)
		admitted(t, "the controller removes the claim stamp", ctrl.Status().Patch(ctx, s, client.StrategicMergeFrom(orig)))
		if s := cur(t); model.HasClaimStamp(s) || meta.FindStatusCondition(s.Status.Conditions, "example.com/Other") == nil {
			t.Errorf("conditions after the stamp's removal: %+v, want only the other writer's", s.Status.Conditions)
		}
		denied(t, "the controller removes another writer's condition", ctrl.Status().Patch(ctx, cur(t),
			client.RawPatch(types.StrategicMergePatchType, []byte(`{"status":{"conditions":[{"type":"example.com/Other","$patch":"delete"}]}}`)), client.DryRunAll), onlyLoadBalancer)
		denied(t, "the controller writes a stamp that is not True", ctrl.Status().Patch(ctx, cur(t), client.RawPatch(types.StrategicMergePatchType,
			[]byte(`{"status":{"conditions":[{"type":"`+model.ConditionEIPClaimed+`","status":"False","reason":"ClaimSeen","message":"m","lastTransitionTime":"2024-01-01T00:00:00Z"}]}}`)), client.DryRunAll), onlyStamps)
		denied(t, "the controller writes a stamp of another reason", ctrl.Status().Patch(ctx, cur(t), client.RawPatch(types.StrategicMergePatchType,
			[]byte(`{"status":{"conditions":[{"type":"`+model.ConditionEIPClaimed+`","status":"True","reason":"Other","message":"m","lastTransitionTime":"2024-01-01T00:00:00Z"}]}}`)), client.DryRunAll), onlyStamps)
		// A Service without an EIP annotation claims nothing to stamp.
		plain := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "no-eip", Namespace: ns, Annotations: map[string]string{model.AnnotationGateway: "policy-gw"}},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
		must(t, k8s.Create(ctx, plain))
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), plain) })
		denied(t, "the controller stamps a Service that names no EIP", ctrl.Status().Patch(ctx, plain, client.RawPatch(types.StrategicMergePatchType,
			[]byte(`{"status":{"conditions":[{"type":"`+model.ConditionEIPClaimed+`","status":"True","reason":"ClaimSeen","message":"m","lastTransitionTime":"2024-01-01T00:00:00Z"}]}}`)), client.DryRunAll), onlyStamps)
	})

	t.Run("everything else on a Service denied", func(t *testing.T) {
		for _, tc := range []struct {
			what  string
			patch client.Patch
		}{
			{"an annotation", merge(`{"metadata":{"annotations":{"` + model.AnnotationEIP + `":"another-eip"}}}`)},
			{"a new annotation", merge(`{"metadata":{"annotations":{"example.com/x":"y"}}}`)},
			{"a label", merge(`{"metadata":{"labels":{"app":"other"}}}`)},
			{"spec.ports", merge(`{"spec":{"ports":[{"name":"http","port":81,"protocol":"TCP","targetPort":8080}]}}`)},
			{"spec.selector", merge(`{"spec":{"selector":{"app":"other"}}}`)},
			{"spec.type", merge(`{"spec":{"type":"ClusterIP"}}`)},
			// The garbage collector would delete the Service for an owner that does not exist.
			{"an owner reference", merge(`{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"gone","uid":"0d3c0c6e-0000-4000-8000-0000000000ff"}]}}`)},
			{"its finalizer and an annotation together", finalizerPatch(true, map[string]any{"annotations": map[string]string{"example.com/x": "y"}})},
		} {
			denied(t, "the controller changes "+tc.what, ctrl.Patch(ctx, cur(t), tc.patch, client.DryRunAll), onlyFinalizers)
		}
		denied(t, "the controller writes status.conditions", ctrl.Status().Patch(ctx, cur(t),
			merge(`{"status":{"conditions":[{"type":"Probe","status":"True","reason":"Test","message":"m","lastTransitionTime":"2024-01-01T00:00:00Z"}]}}`), client.DryRunAll), onlyLoadBalancer)
		denied(t, "the controller writes the ingress and status.conditions together", ctrl.Status().Patch(ctx, cur(t),
			merge(`{"status":{"loadBalancer":{"ingress":[{"ip":"172.19.3.11"}]},"conditions":[{"type":"Probe","status":"True","reason":"Test","message":"m","lastTransitionTime":"2024-01-01T00:00:00Z"}]}}`), client.DryRunAll), onlyLoadBalancer)
		denied(t, "the controller changes a label through services/status", ctrl.Status().Patch(ctx, cur(t),
			merge(`{"metadata":{"labels":{"app":"other"}},"status":{"loadBalancer":{"ingress":[{"ip":"172.19.3.10"}]}}}`), client.DryRunAll), onlyLoadBalancer)
		denied(t, "the controller changes its finalizer through services/status", ctrl.Status().Patch(ctx, cur(t),
			merge(`{"metadata":{"finalizers":null}}`), client.DryRunAll), onlyLoadBalancer)
		// RBAC already refuses these; the policy refuses them even where RBAC would not.
		denied(t, "the controller, with every RBAC permission, creates a Service", policyProbe(ctx, t), noServiceLifecycle)
		err := as(t, controllerUser).Delete(ctx, cur(t), client.DryRunAll)
		denied(t, "the controller, with every RBAC permission, deletes a Service", err, "the vpcgw controller may not delete Service "+ns+"/web")
		s := cur(t)
		if s.Annotations[model.AnnotationEIP] != "policy-eip" || s.Labels["app"] != "web" || s.Spec.Ports[0].Port != 80 || len(s.OwnerReferences) != 0 {
			t.Errorf("the Service changed: %+v", s.ObjectMeta)
		}
	})

	t.Run("its own finalizer, IP ingress on its Services, its status ConfigMap only", func(t *testing.T) {
		// Another controller's finalizer on the Service: the vpcgw controller may neither remove
		// nor add one.
		must(t, k8s.Patch(ctx, cur(t), merge(`{"metadata":{"finalizers":["example.com/keep"]}}`)))
		denied(t, "the controller removes another finalizer", ctrl.Patch(ctx, cur(t), merge(`{"metadata":{"finalizers":null}}`), client.DryRunAll), onlyOwnFinalizer)
		denied(t, "the controller adds another finalizer", ctrl.Patch(ctx, cur(t),
			merge(`{"metadata":{"finalizers":["example.com/keep","example.com/mine"]}}`), client.DryRunAll), onlyOwnFinalizer)
		admitted(t, "the controller adds its own beside another", ctrl.Patch(ctx, cur(t), finalizerPatch(true, nil), client.DryRunAll))
		must(t, k8s.Patch(ctx, cur(t), merge(`{"metadata":{"finalizers":null}}`)))

		denied(t, "the controller publishes a hostname", ctrl.Status().Patch(ctx, cur(t),
			merge(`{"status":{"loadBalancer":{"ingress":[{"hostname":"evil.example.com"}]}}}`), client.DryRunAll), onlyIPIngress)
		plain := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: ns},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, AllocateLoadBalancerNodePorts: ptr.To(false),
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}}}
		must(t, k8s.Create(ctx, plain))
		denied(t, "the controller sets the ingress of a Service that names no gateway", ctrl.Status().Patch(ctx, plain,
			merge(`{"status":{"loadBalancer":{"ingress":[{"ip":"172.19.3.10"}]}}}`), client.DryRunAll), onlyIPIngress)
		admitted(t, "the controller clears the ingress of a Service that names no gateway", ctrl.Status().Patch(ctx, plain,
			merge(`{"status":{"loadBalancer":{"ingress":null}}}`), client.DryRunAll))

		cm := func(ns, name string) *corev1.ConfigMap {
			return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		}
		// With every RBAC permission: the policy alone decides.
		all := as(t, controllerUser)
		admitted(t, "the controller creates its status ConfigMap", all.Create(ctx, cm("kube-system", "vpcgw-controller"), client.DryRunAll))
		denied(t, "the controller creates another ConfigMap of its namespace", all.Create(ctx, cm("kube-system", "coredns-override"), client.DryRunAll), onlyStatusConfig)
		denied(t, "the controller creates a ConfigMap elsewhere", all.Create(ctx, cm("default", "vpcgw-controller"), client.DryRunAll), onlyStatusConfig)
	})

	t.Run("records only", func(t *testing.T) {
		// The chart grants record writes as IptablesDnatRules only with ledger iptables-dnat-rule;
		// with every RBAC permission, the policy alone decides here.
		ctrl := as(t, controllerUser)
		denied(t, "the controller creates an unlabelled DNAT rule", ctrl.Create(ctx, dnat("policy-new", nil), client.DryRunAll), onlyRecords)
		denied(t, "the controller creates a rule labelled record=false", ctrl.Create(ctx,
			dnat("policy-new", map[string]string{model.LabelRecord: "false"}), client.DryRunAll), onlyRecords)
		users := getRule(t, "policy-users-rule")
		spec := users.DeepCopy()
		must(t, unstructured.SetNestedField(spec.Object, "9090", "spec", "internalPort"))
		denied(t, "the controller updates a user's rule", ctrl.Update(ctx, spec, client.DryRunAll), onlyRecords)
		takeover := users.DeepCopy()
		takeover.SetLabels(record)
		denied(t, "the controller labels a user's rule as its record", ctrl.Update(ctx, takeover, client.DryRunAll), onlyRecords)
		status := users.DeepCopy()
		must(t, unstructured.SetNestedField(status.Object, true, "status", "ready"))
		denied(t, "the controller writes a user's rule's status", ctrl.Status().Update(ctx, status, client.DryRunAll), onlyRecords)
		denied(t, "the controller deletes a user's rule", ctrl.Delete(ctx, users.DeepCopy(), client.DryRunAll), onlyRecords)

		// Its own records: create, update, status, delete (kubewrite.go:WriteRecords,
		// writeRecordStatus, deleteRecords).
		admitted(t, "the controller creates a labelled record", ctrl.Create(ctx, dnat("policy-record", record)))
		rec := getRule(t, "policy-record")
		must(t, unstructured.SetNestedField(rec.Object, "8081", "spec", "internalPort"))
		admitted(t, "the controller updates its record", ctrl.Update(ctx, rec))
		rec = getRule(t, "policy-record")
		must(t, unstructured.SetNestedField(rec.Object, true, "status", "ready"))
		admitted(t, "the controller writes its record's status", ctrl.Status().Update(ctx, rec))
		unlabel := getRule(t, "policy-record")
		unlabel.SetLabels(map[string]string{model.LabelRecordUID: string(svc.UID)})
		denied(t, "the controller drops the record label", ctrl.Update(ctx, unlabel, client.DryRunAll), onlyRecords)
		rec = getRule(t, "policy-record")
		admitted(t, "the controller deletes its record", ctrl.Delete(ctx, rec, client.Preconditions{UID: ptr.To(rec.GetUID())}))

		// ServiceRecords are its own kind: not the policy's business.
		admitted(t, "the controller writes a ServiceRecord", ctrl.Create(ctx, serviceRecord("policy-sr"), client.DryRunAll))
	})

	t.Run("others unaffected", func(t *testing.T) {
		// An administrator, and another identity with the controller's permissions and more.
		for _, c := range []struct {
			who string
			cl  client.Client
		}{{"the admin", k8s}, {"another service account", as(t, "system:serviceaccount:kube-system:vpcgw-other")}} {
			for _, tc := range []struct {
				what  string
				patch client.Patch
			}{
				{"an annotation", merge(`{"metadata":{"annotations":{"example.com/x":"y"}}}`)},
				{"a label", merge(`{"metadata":{"labels":{"tier":"front"}}}`)},
				{"spec.ports", merge(`{"spec":{"ports":[{"name":"http","port":81,"protocol":"TCP","targetPort":8080}]}}`)},
				{"spec.selector", merge(`{"spec":{"selector":{"app":"other"}}}`)},
			} {
				admitted(t, c.who+" changes "+tc.what, c.cl.Patch(ctx, cur(t), tc.patch, client.DryRunAll))
			}
			admitted(t, c.who+" writes status.conditions", c.cl.Status().Patch(ctx, cur(t),
				merge(`{"status":{"conditions":[{"type":"Probe","status":"True","reason":"Test","message":"m","lastTransitionTime":"2024-01-01T00:00:00Z"}]}}`), client.DryRunAll))
			admitted(t, c.who+" creates an unlabelled DNAT rule", c.cl.Create(ctx, dnat("policy-new", nil), client.DryRunAll))
			admitted(t, c.who+" deletes a user's rule", c.cl.Delete(ctx, getRule(t, "policy-users-rule"), client.DryRunAll))
			admitted(t, c.who+" creates a Service", c.cl.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: ns},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}, client.DryRunAll))
		}
	})

	t.Run("release on delete admitted", func(t *testing.T) {
		// The Service is deleted while it carries the finalizer; the controller releases it.
		if !slices.Contains(cur(t).Finalizers, model.Finalizer) {
			admitted(t, "the controller adds its finalizer", ctrl.Patch(ctx, cur(t), finalizerPatch(true, nil)))
		}
		must(t, k8s.Delete(ctx, cur(t)))
		if cur(t).DeletionTimestamp == nil {
			t.Fatal("the Service is not being deleted")
		}
		admitted(t, "the controller removes its finalizer", ctrl.Patch(ctx, cur(t), finalizerPatch(false, nil)))
		var s corev1.Service
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(svc), &s); !apierrors.IsNotFound(err) {
			t.Errorf("the Service after its finalizer was released: %v (finalizers %v)", err, s.Finalizers)
		}
	})
	must(t, client.IgnoreNotFound(k8s.Delete(ctx, dnat("policy-users-rule", nil))))
}
