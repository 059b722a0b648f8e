package main

// covers: O2, O4, T1, T3, N8 (the plugin as the chart's viewer roles let it run: a tenant bound to
// vpcgw-tenant-view in its namespace alone, an operator bound to vpcgw-view cluster-wide; what it
// may not read it says, and it never guesses)

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vpcgw/vpcgw/deploy/manifests"
	"github.com/vpcgw/vpcgw/internal/inspect"
	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

// createForTest creates objs with the admin client and deletes them when the test ends.
func createForTest(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := k8s.Create(context.Background(), o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
		t.Cleanup(func() {
			if err := client.IgnoreNotFound(k8s.Delete(context.Background(), o)); err != nil {
				t.Errorf("deleting %T %s: %v", o, o.GetName(), err)
			}
		})
	}
}

// shippedClusterRole is the ClusterRole name of the plain manifests (the chart's defaults).
func shippedClusterRole(t *testing.T, name string) *rbacv1.ClusterRole {
	t.Helper()
	objs, err := manifests.Objects("ClusterRole")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetName() != name {
			continue
		}
		var cr rbacv1.ClusterRole
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &cr); err != nil {
			t.Fatal(err)
		}
		return &cr
	}
	t.Fatalf("the manifests ship no ClusterRole %s", name)
	return nil
}

// controllerEvent is an event of the controller's on Service svc, as its recorder writes it
// (events.k8s.io, reporting controller vpcgw-controller).
func controllerEvent(name string, svc *corev1.Service, typ, reason, note string, at time.Time) *eventsv1.Event {
	return &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: svc.Namespace, Name: name},
		EventTime: metav1.NewMicroTime(at), ReportingController: inspect.EventReporter, ReportingInstance: "vpcgw-controller-abc",
		Action: "Reconcile", Type: typ, Reason: reason, Note: note,
		Regarding: corev1.ObjectReference{APIVersion: "v1", Kind: "Service", Namespace: svc.Namespace, Name: svc.Name, UID: svc.UID}}
}

// A tenant bound to vpcgw-tenant-view in namespace demo only (and not to the status reader Role):
// the plugin cannot read the controller's status, kube-ovn's objects or the records, says so and
// which permission is missing, and never fails for it. demo/web's ingress holds its EIP's
// address: served (exit 0), on that basis. demo/noeip: nothing shows it: Unknown (exit 4), until
// the controller's Warning event says its EIP part is not served (exit 3). A ClusterIP Service
// with the controller's NftableLbSvcServed event: served (exit 0).
// covers: O2, O4, T1, T3
func TestTenantViewRole(t *testing.T) {
	if k8s == nil {
		testutil.Skip(t, envSkip)
	}
	cr := shippedClusterRole(t, "vpcgw-tenant-view")
	cr.ResourceVersion = ""
	createForTest(t, cr, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "tenant-view"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "tenant"}}})
	tenant := func(args ...string) result { return plugin(t, append([]string{"--as", "tenant"}, args...)...) }

	r := tenant("status", "-o", "json").want(t, exitUnknown)
	l := decode[inspect.ServiceStatusList](t, r)
	if got := names(l); !slices.Equal(got, []string{"demo/noeip", "demo/web"}) {
		t.Errorf("tenant's status lists %v", got)
	}
	web := item(t, l, "demo", "web")
	if web.ReadyStatus != "True" || web.State != inspect.StateServed || web.EIPPart.VIP != eipAddr ||
		!strings.Contains(web.Basis, "its ingress holds "+eipAddr+", which only the controller writes, as the address of IptablesEIP "+eipName+" (you may not read the EIP to compare)") {
		t.Errorf("demo/web as the tenant sees it %+v", web)
	}
	if noeip := item(t, l, "demo", "noeip"); noeip.ReadyStatus != "Unknown" || noeip.State != inspect.StateUnknown ||
		!strings.Contains(noeip.EIPPart.Reason, "you may not list vpc-nat-gateways.kubeovn.io, iptables-eips.kubeovn.io, subnets.kubeovn.io, vpcs.kubeovn.io, ips.kubeovn.io") {
		t.Errorf("demo/noeip as the tenant sees it %+v", noeip)
	}
	forbidden := "get configmaps vpcgw-controller in namespace vpcgw-system: forbidden"
	for _, w := range []string{forbidden, "Role " + inspect.StatusReaderRole + " there", "list vpc-nat-gateways.kubeovn.io: forbidden (the ClusterRole vpcgw-view grants it)"} {
		if !slices.ContainsFunc(l.Unknown, func(u string) bool { return strings.Contains(u, w) }) {
			t.Errorf("unknown %q lacks %q", l.Unknown, w)
		}
	}
	for _, w := range []string{"Warning: the vpcgw controller's status is unknown: " + forbidden, "you may not list services, endpointslices.discovery.k8s.io, pods in all namespaces",
		"you may not list vpc-nat-gateways.kubeovn.io", "list servicerecords.vpcgw.io, iptables-dnat-rules.kubeovn.io (whether the records are Ready is unknown)", "The chart's ClusterRole vpcgw-view grants these reads"} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
		}
	}
	table := singleSpaced(tenant("status").want(t, exitUnknown).stdout)
	if !strings.Contains(table, "\nweb gw1 eip1 "+eipAddr+" - - None True ") || !strings.Contains(table, "\nnoeip gw1 missing - - - None Unknown ") {
		t.Errorf("the tenant's status table:\n%s", table)
	}

	ex := decode[inspect.ServiceExplanation](t, tenant("explain", "svc/web", "-o", "json").want(t, exitOK))
	if !ex.Served || !strings.HasPrefix(ex.Summary, "Service demo/web is served through EIP "+eipAddr+": its ingress holds") || ex.Service.Record == nil ||
		!strings.Contains(ex.Service.Record.Message, "unknown: you may not read the records") {
		t.Errorf("explain svc/web as the tenant %+v", ex)
	}
	r = tenant("explain", "svc/noeip").want(t, exitUnknown)
	for _, w := range []string{"Whether Service demo/noeip is served is unknown", "Unknown:\n  - the vpcgw controller's status is unknown: " + forbidden, "Ready:      Unknown"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("explain svc/noeip as the tenant lacks %q:\n%s", w, r.stdout)
		}
	}
	gs := tenant("status", "gw/gw1").want(t, exitUnknown)
	if !strings.Contains(gs.stdout, "Gateway gw1: unknown (you may not list vpc-nat-gateways.kubeovn.io)") || !strings.Contains(singleSpaced(gs.stdout), "\ndemo web gw1 ") {
		t.Errorf("status gw/gw1 as the tenant:\n%s", gs.stdout)
	}

	// The controller's events: the latest that says whether the Service is served decides.
	var noeip corev1.Service
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: "demo", Name: "noeip"}, &noeip); err != nil {
		t.Fatal(err)
	}
	missing := "gateway gw1 has no IptablesEIP missing (test)"
	now := time.Now()
	createForTest(t, controllerEvent("noeip-old", &noeip, corev1.EventTypeNormal, inspect.ReasonServed, "served (test)", now.Add(-time.Hour)),
		controllerEvent("noeip-missing", &noeip, corev1.EventTypeWarning, model.ReasonEIPMissing, missing, now.Add(-time.Minute)),
		// Another reporter's event of the same reason is not the controller's word.
		&eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "noeip-other"}, EventTime: metav1.NewMicroTime(now),
			ReportingController: "someone-else", ReportingInstance: "x", Action: "A", Type: corev1.EventTypeNormal, Reason: inspect.ReasonServed, Note: "no",
			Regarding: corev1.ObjectReference{APIVersion: "v1", Kind: "Service", Namespace: "demo", Name: "noeip", UID: noeip.UID}})
	ex = decode[inspect.ServiceExplanation](t, tenant("explain", "svc/noeip", "-o", "json").want(t, exitNotServed))
	if p := ex.Service.EIPPart; p.State != inspect.PartNotServed || p.EventReason != model.ReasonEIPMissing || p.Reason != missing ||
		ex.Service.ClusterIPPart.State != inspect.PartUnknown || ex.Service.ReadyStatus != "False" || !strings.Contains(ex.Service.Basis, "the controller's latest event on it is Warning "+model.ReasonEIPMissing) {
		t.Errorf("explain svc/noeip with the controller's Warning %+v", ex.Service)
	}

	cip := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "cip", Annotations: map[string]string{model.AnnotationGateway: gwName}},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 53, Protocol: corev1.ProtocolUDP}}}}
	createForTest(t, cip)
	tenant("explain", "svc/cip").want(t, exitUnknown)
	createForTest(t, controllerEvent("cip-served", cip, corev1.EventTypeNormal, inspect.ReasonServed, "served (test)", now))
	ex = decode[inspect.ServiceExplanation](t, tenant("explain", "svc/cip", "-o", "json").want(t, exitOK))
	if p := ex.Service.ClusterIPPart; p.State != inspect.PartServed || p.VIP != cip.Spec.ClusterIP || ex.Service.EIPPart.State != inspect.PartNotApplicable ||
		!strings.Contains(ex.Service.Basis, "the controller's latest event on it is Normal "+inspect.ReasonServed) {
		t.Errorf("explain svc/cip with the controller's %s event %+v", inspect.ReasonServed, ex.Service)
	}

	// Someone without even that role: nothing to show, and the error names the role.
	r = plugin(t, "--as", "nobody", "status").want(t, exitError)
	if !strings.Contains(r.stderr, "forbidden") || !strings.Contains(r.stderr, "vpcgw-tenant-view") {
		t.Errorf("status without a role: %q", r.stderr)
	}
}

// An operator bound to vpcgw-view cluster-wide reads everything the plugin reads, the
// controller's status included: the rules apply, with no warning, as for an administrator.
// covers: O2, O4
func TestViewRole(t *testing.T) {
	if k8s == nil {
		testutil.Skip(t, envSkip)
	}
	cr := shippedClusterRole(t, "vpcgw-view")
	cr.ResourceVersion = ""
	createForTest(t, cr, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "operator-view"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "operator"}}})
	r := plugin(t, "--as", "operator", "status", "-A", "-o", "json").want(t, exitOK)
	l := decode[inspect.ServiceStatusList](t, r)
	if !l.Controller.Running || len(l.Warnings) != 0 || len(l.Unknown) != 0 || r.stderr != "" {
		t.Errorf("status -A as the operator: controller %+v, warnings %q, unknown %q, stderr %q", l.Controller, l.Warnings, l.Unknown, r.stderr)
	}
	admin := decode[inspect.ServiceStatusList](t, plugin(t, "status", "-A", "-o", "json").want(t, exitOK))
	for _, it := range admin.Items {
		if got := item(t, l, it.Namespace, it.Name); got.State != it.State || got.ReadyStatus != it.ReadyStatus || got.Basis != inspect.BasisRules {
			t.Errorf("%s/%s as the operator %s/%s (%s), as an administrator %s/%s", it.Namespace, it.Name, got.State, got.ReadyStatus, got.Basis, it.State, it.ReadyStatus)
		}
	}
	plugin(t, "--as", "operator", "explain", "svc/web", "-n", "demo").want(t, exitOK)
}
