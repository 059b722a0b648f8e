// covers: O3, O4, W7 (the webhook is never the outage: replicas spread over nodes under a
// PodDisruptionBudget, at least one replica, its metrics scraped, alerts when the controller or the
// webhook is down, and a runbook for every alert)
package deploy

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/vpcgw/vpcgw/internal/testutil"
	"github.com/vpcgw/vpcgw/internal/webhook"
)

// webhookPodLabels are the labels of the webhook's pods in a rendering.
func webhookPodLabels(t *testing.T, m manifest) map[string]string {
	t.Helper()
	l, _, _ := unstructured.NestedStringMap(m.must(t, "Deployment", m.installNS(), "vpcgw-webhook").Object, "spec", "template", "metadata", "labels")
	return l
}

// selects reports whether a matchLabels selector selects objects with labels (an empty selector
// selects nothing here: the chart never means everything).
func selects(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// covers: O4, W7
// A node drain never takes every webhook replica at once: by default a policy/v1
// PodDisruptionBudget selects exactly the webhook's pods (not the controller's) with
// maxUnavailable 1. It is not rendered where it could only block a drain or protect nothing (one
// replica), when turned off, or without the webhook; a budget that would let every replica go is
// refused, naming the values.
func TestChartWebhookPodDisruptionBudget(t *testing.T) {
	helmBin(t)
	m := manifest(render(t))
	pdb := m.must(t, "PodDisruptionBudget", m.installNS(), "vpcgw-webhook")
	if pdb.GetAPIVersion() != "policy/v1" {
		t.Errorf("PodDisruptionBudget %s, want policy/v1", pdb.GetAPIVersion())
	}
	if mu, _, _ := unstructured.NestedInt64(pdb.Object, "spec", "maxUnavailable"); mu != 1 {
		t.Errorf("maxUnavailable %d, want 1", mu)
	}
	if _, has, _ := unstructured.NestedFieldNoCopy(pdb.Object, "spec", "minAvailable"); has {
		t.Error("minAvailable set: with one replica left it would block every drain")
	}
	sel, _, _ := unstructured.NestedStringMap(pdb.Object, "spec", "selector", "matchLabels")
	controllerPods, _, _ := unstructured.NestedStringMap(m.must(t, "Deployment", m.installNS(), "vpcgw-controller").Object, "spec", "template", "metadata", "labels")
	if !selects(sel, webhookPodLabels(t, m)) || selects(sel, controllerPods) {
		t.Errorf("the budget selects %v; the webhook's pods have %v, the controller's %v", sel, webhookPodLabels(t, m), controllerPods)
	}
	if n, _, _ := unstructured.NestedInt64(m.must(t, "Deployment", m.installNS(), "vpcgw-webhook").Object, "spec", "replicas"); n != 2 {
		t.Errorf("webhook replicas %d by default, want 2", n)
	}

	three := manifest(render(t, "--set", "webhook.replicas=3", "--set", "webhook.podDisruptionBudget.maxUnavailable=2"))
	if mu, _, _ := unstructured.NestedInt64(three.must(t, "PodDisruptionBudget", "kube-system", "vpcgw-webhook").Object, "spec", "maxUnavailable"); mu != 2 {
		t.Errorf("maxUnavailable %d with webhook.podDisruptionBudget.maxUnavailable=2", mu)
	}
	for _, args := range [][]string{
		{"--set", "webhook.replicas=1"},
		{"--set", "webhook.podDisruptionBudget.enabled=false"},
		{"--set", "webhook.enabled=false"},
	} {
		if n := manifest(render(t, args...)).count("PodDisruptionBudget"); n != 0 {
			t.Errorf("helm template %v: %d PodDisruptionBudgets, want none", args, n)
		}
	}
	_, err := renderErr(t, "--set", "webhook.podDisruptionBudget.maxUnavailable=2")
	if err == nil || !strings.Contains(err.Error(), "webhook.podDisruptionBudget.maxUnavailable (2) must be below webhook.replicas (2)") {
		t.Errorf("maxUnavailable 2 of 2 replicas: %v, want a refusal naming both values", err)
	}
	if cfg == nil {
		testutil.Skip(t, "the renderings are checked; applying the budget needs the API server: "+envSkip)
	}
	apply(t, []*unstructured.Unstructured{pdb}, true)
}

// covers: O4
// The webhook's replicas prefer different nodes (an anti-affinity on kubernetes.io/hostname over
// its own pods, preferred so that a one-node cluster still runs them); webhook.affinity replaces
// it as given.
func TestChartWebhookAffinity(t *testing.T) {
	helmBin(t)
	m := manifest(render(t))
	d := m.must(t, "Deployment", m.installNS(), "vpcgw-webhook")
	terms, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "affinity", "podAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution")
	if len(terms) != 1 {
		t.Fatalf("preferred anti-affinity terms %v, want one", terms)
	}
	term, _ := terms[0].(map[string]any)
	key, _, _ := unstructured.NestedString(term, "podAffinityTerm", "topologyKey")
	sel, _, _ := unstructured.NestedStringMap(term, "podAffinityTerm", "labelSelector", "matchLabels")
	if key != "kubernetes.io/hostname" || !selects(sel, webhookPodLabels(t, m)) {
		t.Errorf("anti-affinity on %q over %v; want kubernetes.io/hostname over the webhook's pods %v", key, sel, webhookPodLabels(t, m))
	}
	if _, has, _ := unstructured.NestedFieldNoCopy(d.Object, "spec", "template", "spec", "affinity", "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution"); has {
		t.Error("a required anti-affinity: a cluster with fewer nodes than replicas could not run them all")
	}

	own := manifest(render(t, "--set", "webhook.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=node-role",
		"--set", "webhook.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists"))
	aff, _, _ := unstructured.NestedMap(own.must(t, "Deployment", own.installNS(), "vpcgw-webhook").Object, "spec", "template", "spec", "affinity")
	if got := fmt.Sprint(aff); got != "map[nodeAffinity:map[requiredDuringSchedulingIgnoredDuringExecution:map[nodeSelectorTerms:[map[matchExpressions:[map[key:node-role operator:Exists]]]]]]]" {
		t.Errorf("affinity with webhook.affinity set: %s, want exactly the one given", got)
	}
}

// covers: O4
// The schema refuses fewer than one replica of the webhook (whose Fail rules would then refuse
// EIP and gateway deletes) and of the controller, naming the key, before any template runs.
func TestChartReplicasAtLeastOne(t *testing.T) {
	helmBin(t)
	for _, key := range []string{"webhook.replicas", "controller.replicas"} {
		_, err := renderErr(t, "--set", key+"=0")
		path := "/" + strings.ReplaceAll(key, ".", "/")
		if err == nil || !strings.Contains(err.Error(), "at '"+path+"'") || !strings.Contains(err.Error(), "minimum") {
			t.Errorf("helm template --set %s=0: %v, want the schema's refusal naming %s", key, err, path)
		}
		render(t, "--set", key+"=1")
	}
}

// covers: O3, N6
// The webhook serves its metrics as the controller does: the chart runs it with HTTPS metrics on
// webhook.metricsPort (flags the webhook's own command line accepts), declares the port, puts a
// Service in front of its pods, and lets the webhook review scrapes; the reader ClusterRole (get
// /metrics) covers it.
func TestChartWebhookMetrics(t *testing.T) {
	helmBin(t)
	m := manifest(render(t))
	c := container(t, m.must(t, "Deployment", m.installNS(), "vpcgw-webhook"), "webhook")
	as := args(t, c)
	wantFlags(t, as, map[string]string{"metrics-bind-address": ":8443", "metrics-secure": "true"})
	if ports, _, _ := unstructured.NestedSlice(c, "ports"); !strings.Contains(fmt.Sprint(ports), "map[containerPort:8443 name:metrics]") {
		t.Errorf("webhook ports %v, want metrics on 8443", ports)
	}
	checkWebhookFlagsAccepted(t, as)

	svc := m.must(t, "Service", m.installNS(), "vpcgw-webhook-metrics")
	sel, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	if !selects(sel, webhookPodLabels(t, m)) || fmt.Sprint(ports) != "[map[name:metrics port:8443 targetPort:metrics]]" {
		t.Errorf("Service vpcgw-webhook-metrics selects %v with ports %v; want the webhook's pods, port metrics", sel, ports)
	}
	wantRules(t, m.must(t, "ClusterRole", "", "vpcgw-webhook-metrics-auth"), map[string][]string{
		"authentication.k8s.io/tokenreviews": {"create"}, "authorization.k8s.io/subjectaccessreviews": {"create"}})
	b := m.must(t, "ClusterRoleBinding", "", "vpcgw-webhook-metrics-auth")
	if got := fmt.Sprint(b.Object["subjects"]); got != "[map[kind:ServiceAccount name:vpcgw-webhook namespace:kube-system]]" {
		t.Errorf("webhook metrics review binding subjects %s, want the webhook's service account", got)
	}
	// Without the controller's secure metrics the reader role stays, for the webhook's.
	only := manifest(render(t, "--set", "controller.metricsSecure=false"))
	wantRules(t, only.must(t, "ClusterRole", "", "vpcgw-metrics-reader"), map[string][]string{"nonResourceURL:/metrics": {"get"}})
}

// checkWebhookFlagsAccepted runs `vpcgw webhook` with the chart's arguments and a kubeconfig that
// does not exist: it must get past its flags (which fail first) to loading the configuration.
func checkWebhookFlagsAccepted(t *testing.T, as []string) {
	t.Helper()
	t.Setenv("KUBECONFIG", "") // webhook.Main sets it from --kubeconfig; restored after the test
	missing := t.TempDir() + "/no-kubeconfig"
	err := webhook.Main(context.Background(), append(slices.Clone(as[1:]), "--kubeconfig="+missing))
	if err == nil || !strings.Contains(err.Error(), "loading kubeconfig") {
		t.Errorf("vpcgw webhook %v: %v, want only the missing kubeconfig refused", as[1:], err)
	}
}

// scrapeJobs maps each ServiceMonitor of m to the job label Prometheus gives its targets: the name
// of the Service it selects that has the endpoint's port (the Prometheus Operator's default, no
// jobLabel).
func scrapeJobs(t *testing.T, m manifest) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, sm := range m {
		if sm.GetKind() != "ServiceMonitor" {
			continue
		}
		if _, has, _ := unstructured.NestedFieldNoCopy(sm.Object, "spec", "jobLabel"); has {
			t.Errorf("ServiceMonitor %s sets jobLabel: the alerts expect the Service's name", sm.GetName())
		}
		sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
		eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
		if len(eps) != 1 {
			t.Fatalf("ServiceMonitor %s endpoints %v, want one", sm.GetName(), eps)
		}
		port := eps[0].(map[string]any)["port"]
		var jobs []string
		for _, svc := range m {
			ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
			named := slices.ContainsFunc(ports, func(p any) bool { return p.(map[string]any)["name"] == port })
			if svc.GetKind() == "Service" && svc.GetNamespace() == sm.GetNamespace() && selects(sel, svc.GetLabels()) && named {
				jobs = append(jobs, svc.GetName())
			}
		}
		if len(jobs) != 1 {
			t.Fatalf("ServiceMonitor %s scrapes Services %v, want one", sm.GetName(), jobs)
		}
		out[sm.GetName()] = jobs[0]
	}
	return out
}

// covers: O3
// With the ServiceMonitors on, the controller's and the webhook's metrics are both scraped, and
// four alerts watch their jobs: Vpcgw<part>Down (a target's up == 0, warning) and
// Vpcgw<part>Absent (no target up at all, critical), on exactly the job and namespace the
// ServiceMonitors give. Without the ServiceMonitors (their job unknown) they are not rendered;
// without the webhook, neither are its ServiceMonitor and alerts.
func TestChartAvailabilityAlerts(t *testing.T) {
	helmBin(t)
	m := manifest(render(t, monitoringOn...))
	jobs := scrapeJobs(t, m)
	if fmt.Sprint(jobs) != "map[vpcgw-controller:vpcgw-controller-metrics vpcgw-webhook:vpcgw-webhook-metrics]" {
		t.Fatalf("ServiceMonitors and their jobs %v", jobs)
	}
	rules := map[string]alertRule{}
	for _, r := range alertRules(t, m.must(t, "PrometheusRule", "kube-system", "vpcgw-controller")) {
		rules[r.Alert] = r
	}
	for part, job := range map[string]string{"Controller": jobs["vpcgw-controller"], "Webhook": jobs["vpcgw-webhook"]} {
		sel := fmt.Sprintf(`up{job=%q, namespace="kube-system"}`, job)
		for _, want := range []alertRule{
			{Alert: "Vpcgw" + part + "Down", Expr: sel + " == 0", For: "5m", Labels: map[string]string{"severity": "warning"}},
			{Alert: "Vpcgw" + part + "Absent", Expr: "absent(" + sel + " == 1)", For: "5m", Labels: map[string]string{"severity": "critical"}},
		} {
			got, ok := rules[want.Alert]
			if !ok {
				t.Errorf("no alert %s", want.Alert)
				continue
			}
			if strings.TrimSpace(got.Expr) != want.Expr || got.For != want.For || fmt.Sprint(got.Labels) != fmt.Sprint(want.Labels) {
				t.Errorf("alert %s: %q for %s labels %v; want %q for %s labels %v", want.Alert, got.Expr, got.For, got.Labels, want.Expr, want.For, want.Labels)
			}
		}
	}
	if d := rules["VpcgwWebhookAbsent"].Annotations["description"]; !strings.Contains(d, "IptablesEIP") || !strings.Contains(d, "VpcNatGateway") {
		t.Errorf("VpcgwWebhookAbsent's description %q does not say that EIP and gateway deletes are refused", d)
	}

	for _, tc := range []struct {
		args []string
		want []string // the availability alerts rendered
	}{
		{[]string{"--set", "monitoring.prometheusRule.enabled=true"}, nil},
		{append(slices.Clone(monitoringOn), "--set", "webhook.enabled=false"), []string{"VpcgwControllerDown", "VpcgwControllerAbsent"}},
	} {
		o := manifest(render(t, tc.args...))
		var got []string
		for _, r := range alertRules(t, o.must(t, "PrometheusRule", "kube-system", "vpcgw-controller")) {
			if strings.Contains(r.Expr, "up{") {
				got = append(got, r.Alert)
			}
		}
		if !slices.Equal(got, tc.want) || o.find("ServiceMonitor", "kube-system", "vpcgw-webhook") != nil && slices.Contains(tc.args, "webhook.enabled=false") {
			t.Errorf("helm template %v: availability alerts %v, want %v (ServiceMonitors %d)", tc.args, got, tc.want, o.count("ServiceMonitor"))
		}
	}
}

// githubAnchor is the anchor GitHub gives a Markdown heading: lower case, punctuation dropped,
// spaces as hyphens.
func githubAnchor(heading string) string {
	s := strings.ToLower(strings.TrimSpace(heading))
	s = regexp.MustCompile(`[^a-z0-9 _-]`).ReplaceAllString(s, "")
	return strings.ReplaceAll(s, " ", "-")
}

// guideAnchors are the anchors of the user guide's headings (fenced code left out), and those of
// its troubleshooting section alone.
func guideAnchors(t *testing.T) (all, troubleshooting map[string]bool, text string) {
	t.Helper()
	data, err := os.ReadFile("../docs/user-guide.md")
	must(t, err)
	text = regexp.MustCompile("(?s)```.*?```").ReplaceAllString(string(data), "")
	all, troubleshooting = map[string]bool{}, map[string]bool{}
	in := false
	for _, line := range strings.Split(text, "\n") {
		h := regexp.MustCompile(`^(#{1,6}) (.*)$`).FindStringSubmatch(line)
		if h == nil {
			continue
		}
		if len(h[1]) <= 2 {
			in = h[2] == "Troubleshooting by symptom"
		}
		all[githubAnchor(h[2])] = true
		if in {
			troubleshooting[githubAnchor(h[2])] = true
		}
	}
	return all, troubleshooting, text
}

// covers: O3
// Every alert's runbook is under the annotation runbook_url: monitoring.runbookBaseURL with the
// anchor of a heading of the user guide's troubleshooting section, one per alert; the base URL is
// the user's to change, and one that is not an http(s) URL without a fragment is refused. Every
// link inside the guide to one of its headings resolves.
func TestAlertRunbooksInUserGuide(t *testing.T) {
	helmBin(t)
	all, troubleshooting, text := guideAnchors(t)
	const base = "https://docs.example/vpcgw/user-guide.md"
	m := manifest(render(t, append(slices.Clone(monitoringOn), "--set", "monitoring.runbookBaseURL="+base)...))
	seen := map[string]string{}
	for _, r := range alertRules(t, m.must(t, "PrometheusRule", "kube-system", "vpcgw-controller")) {
		u := r.Annotations["runbook_url"]
		anchor, ok := strings.CutPrefix(u, base+"#")
		if !ok || !troubleshooting[anchor] {
			t.Errorf("alert %s: runbook_url %q is not %s#<a heading of the guide's troubleshooting section>", r.Alert, u, base)
		}
		if other, dup := seen[anchor]; dup {
			t.Errorf("alerts %s and %s share the runbook %s", other, r.Alert, anchor)
		}
		seen[anchor] = r.Alert
	}
	if len(seen) != len(wantAlerts) {
		t.Errorf("%d runbooks for %d alerts", len(seen), len(wantAlerts))
	}
	def := manifest(render(t, monitoringOn...))
	for _, r := range alertRules(t, def.must(t, "PrometheusRule", "kube-system", "vpcgw-controller")) {
		if want := "https://github.com/vpcgw/vpcgw/blob/main/docs/user-guide.md#" + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
			t.Errorf("alert %s: default runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
		}
	}
	for _, bad := range []string{"docs/user-guide.md", "https://example.com/guide#runbooks"} {
		if _, err := renderErr(t, "--set", "monitoring.runbookBaseURL="+bad); err == nil || !strings.Contains(err.Error(), "/monitoring/runbookBaseURL") {
			t.Errorf("monitoring.runbookBaseURL=%s: %v, want the schema's refusal naming it", bad, err)
		}
	}
	for _, l := range regexp.MustCompile(`\]\(#([^)]+)\)`).FindAllStringSubmatch(text, -1) {
		if !all[l[1]] {
			t.Errorf("the user guide links to #%s, which is none of its headings", l[1])
		}
	}
}

// covers: W7, O4
// The user guide's troubleshooting section says what a down webhook refuses: it names every rule
// of the rendered ValidatingWebhookConfiguration with its failure policy, says that EIP and
// gateway deletes are refused, and how to get out of it (the pods, the budget, deleting the
// registration and reinstalling).
func TestUserGuideSaysWhatADownWebhookRefuses(t *testing.T) {
	helmBin(t)
	_, _, text := guideAnchors(t)
	_, sec, ok := strings.Cut(text, "\n### The webhook is down\n")
	if !ok {
		t.Fatal("docs/user-guide.md has no ### The webhook is down")
	}
	sec, _, _ = strings.Cut(sec, "\n### ")
	m := manifest(render(t))
	hooks, _, _ := unstructured.NestedSlice(m.must(t, "ValidatingWebhookConfiguration", "", "vpcgw").Object, "webhooks")
	for _, h := range hooks {
		hm := h.(map[string]any)
		row := fmt.Sprintf("| `%s` |", hm["name"])
		i := strings.Index(sec, row)
		if i < 0 {
			t.Errorf("the section has no row for webhook %s", hm["name"])
			continue
		}
		line, _, _ := strings.Cut(sec[i:], "\n")
		if !strings.Contains(line, fmt.Sprintf("| `%s` |", hm["failurePolicy"])) {
			t.Errorf("the row of %s does not give its failurePolicy %s: %s", hm["name"], hm["failurePolicy"], line)
		}
	}
	for _, want := range []string{"**every EIP delete is refused**", "**every gateway delete is refused**", "PodDisruptionBudget",
		"kubectl delete validatingwebhookconfiguration vpcgw", "helm upgrade vpcgw deploy/helm/vpcgw -n <ns> --reuse-values"} {
		if !strings.Contains(sec, want) {
			t.Errorf("the section does not say %q", want)
		}
	}
}
