// covers: W7, W4, K7
//
// The shipped ValidatingWebhookConfiguration (deploy/webhook) registers exactly SPEC W7's
// resources and operations, at the paths the server serves, with a failure policy per resource,
// and keeps the controller's own requests away from the webhook.
package webhook_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	deploywebhook "github.com/vpcgw/vpcgw/deploy/webhook"
	"github.com/vpcgw/vpcgw/internal/webhook"
)

func TestShippedConfiguration(t *testing.T) {
	c, err := deploywebhook.Configuration()
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		path, group, resource string
		version               string
		resources             []string
		ops                   []admissionregistrationv1.OperationType
		policy                admissionregistrationv1.FailurePolicyType
	}
	const (
		create = admissionregistrationv1.Create
		update = admissionregistrationv1.Update
		del    = admissionregistrationv1.Delete
	)
	wants := map[string]want{
		"services.vpcgw.kubeovn.io":            {webhook.PathService, "", "services", "v1", nil, []admissionregistrationv1.OperationType{create, update}, admissionregistrationv1.Ignore},
		"servicerecords.vpcgw.kubeovn.io":      {webhook.PathServiceRecord, "vpcgw.io", "servicerecords", "v1alpha1", nil, []admissionregistrationv1.OperationType{create, update, del}, admissionregistrationv1.Fail},
		"iptables-dnat-rules.vpcgw.kubeovn.io": {webhook.PathRecord, "kubeovn.io", "iptables-dnat-rules", "v1", []string{"iptables-dnat-rules", "iptables-dnat-rules/status"}, []admissionregistrationv1.OperationType{create, update, del}, admissionregistrationv1.Fail},
		"iptables-eips.vpcgw.kubeovn.io":       {webhook.PathEIP, "kubeovn.io", "iptables-eips", "v1", nil, []admissionregistrationv1.OperationType{del}, admissionregistrationv1.Fail},
		"vpc-nat-gateways.vpcgw.kubeovn.io":    {webhook.PathGateway, "kubeovn.io", "vpc-nat-gateways", "v1", nil, []admissionregistrationv1.OperationType{del}, admissionregistrationv1.Fail},
	}
	if len(c.Webhooks) != len(wants) {
		t.Fatalf("%d webhooks, want %d", len(c.Webhooks), len(wants))
	}
	for _, h := range c.Webhooks {
		w, ok := wants[h.Name]
		if !ok {
			t.Errorf("unexpected webhook %s", h.Name)
			continue
		}
		if s := h.ClientConfig.Service; s == nil || s.Path == nil || *s.Path != w.path || s.Name != "vpcgw-webhook" || s.Namespace != "vpcgw-system" {
			t.Errorf("%s: clientConfig %+v, want service vpcgw-system/vpcgw-webhook path %s", h.Name, h.ClientConfig, w.path)
		}
		if len(h.Rules) != 1 {
			t.Fatalf("%s: %d rules, want 1", h.Name, len(h.Rules))
		}
		r := h.Rules[0]
		resources := w.resources // record rules cover their status too (SPEC W4: status writes included)
		if resources == nil {
			resources = []string{w.resource}
		}
		if !slices.Equal(r.APIGroups, []string{w.group}) || !slices.Equal(r.APIVersions, []string{w.version}) ||
			!slices.Equal(r.Resources, resources) || !slices.Equal(r.Operations, w.ops) {
			t.Errorf("%s: rule %+v, want %s/%s %s %v", h.Name, r, w.group, w.version, w.resource, w.ops)
		}
		if h.FailurePolicy == nil || *h.FailurePolicy != w.policy {
			t.Errorf("%s: failurePolicy %v, want %s", h.Name, h.FailurePolicy, w.policy)
		}
		if h.SideEffects == nil || *h.SideEffects != admissionregistrationv1.SideEffectClassNone || h.TimeoutSeconds == nil || *h.TimeoutSeconds > 5 {
			t.Errorf("%s: sideEffects %v timeoutSeconds %v, want None and at most 5", h.Name, h.SideEffects, h.TimeoutSeconds)
		}
		// The webhooks the controller writes through exclude its user (W7: the controller never
		// depends on the webhook), with the same user name as --controller-user's default.
		has := func(expr string) bool {
			return slices.ContainsFunc(h.MatchConditions, func(m admissionregistrationv1.MatchCondition) bool { return strings.TrimSpace(m.Expression) == expr })
		}
		if w.resource == "services" || w.resource == "iptables-dnat-rules" || w.resource == "servicerecords" {
			if exclude := fmt.Sprintf("request.userInfo.username != '%s'", webhook.DefaultControllerUser); !has(exclude) {
				t.Errorf("%s: no matchCondition %q", h.Name, exclude)
			}
		}
		// kube-ovn-controller's own operations never reach the webhook (SPEC K7).
		if exclude := fmt.Sprintf("request.userInfo.username != '%s'", webhook.DefaultKubeOVNUser); !has(exclude) {
			t.Errorf("%s: no matchCondition %q (K7)", h.Name, exclude)
		}
	}
}

// TestShippedDeploymentUser: the Deployment runs the server with the same controller user the
// configuration's matchConditions exclude.
func TestShippedDeploymentUser(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "webhook", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "--controller-user=" + webhook.DefaultControllerUser; !strings.Contains(string(data), want) {
		t.Errorf("deployment.yaml does not pass %s", want)
	}
}
