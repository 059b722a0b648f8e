package deploy

// covers: O3

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/vpcgw/vpcgw/internal/controller"
)

// monitoringOn renders the chart with every monitoring object on.
var monitoringOn = []string{
	"--set", "monitoring.serviceMonitor.enabled=true",
	"--set", "monitoring.prometheusRule.enabled=true",
	"--set", "monitoring.dashboard.enabled=true",
}

const dashboardFile = chartDir + "/files/grafana-dashboard.json"

// The alerts the chart ships (SPEC O3); the user guide lists each. The last four watch the
// ServiceMonitors' scrape jobs (webhook_availability_test.go).
var wantAlerts = []string{
	"VpcgwGatewayProgrammingFailing", "VpcgwGatewaySyncStale", "VpcgwGatewayAgentDisconnected",
	"VpcgwServicesQuarantined", "VpcgwGatewayBoundReached", "VpcgwStandsAsideForKubeOVN",
	"VpcgwControllerDown", "VpcgwControllerAbsent", "VpcgwWebhookDown", "VpcgwWebhookAbsent",
}

// scrapeSeries are the series Prometheus itself writes for every target, which alerts may read
// beside the controller's metrics.
var scrapeSeries = []string{"up"}

// covers: O3
// By default the chart renders no ServiceMonitor, PrometheusRule or dashboard: none of them
// needs the Prometheus Operator or Grafana unless asked for.
func TestChartMonitoringOffByDefault(t *testing.T) {
	m := manifest(render(t))
	if n := m.count("ServiceMonitor") + m.count("PrometheusRule"); n != 0 {
		t.Fatalf("%d monitoring objects rendered by default", n)
	}
	if m.find("ConfigMap", "kube-system", "vpcgw-dashboard") != nil {
		t.Fatal("the dashboard ConfigMap is rendered by default")
	}
}

// covers: O3, N6
// With the monitoring values on: the ServiceMonitor scrapes the controller's metrics Service over
// HTTPS with the scraper's token (the controller reviews it), at the interval and with the labels
// given; the PrometheusRule holds the alerts with a summary, a description, a runbook of kubectl
// commands (`kubectl vpcgw` for a gateway's) and a runbook_url, its stale threshold from
// syncStaleAfter; the dashboard ConfigMap holds
// files/grafana-dashboard.json with the sidecar's labels.
func TestChartMonitoring(t *testing.T) {
	m := manifest(render(t, append(slices.Clone(monitoringOn),
		"--set", "monitoring.serviceMonitor.interval=15s", "--set", "monitoring.serviceMonitor.labels.release=kps",
		"--set", "monitoring.prometheusRule.labels.role=alert-rules", "--set", "monitoring.prometheusRule.syncStaleAfter=1h30m")...))

	sm := m.must(t, "ServiceMonitor", "kube-system", "vpcgw-controller")
	if sm.GetAPIVersion() != "monitoring.coreos.com/v1" || sm.GetLabels()["release"] != "kps" {
		t.Errorf("ServiceMonitor %s with labels %v", sm.GetAPIVersion(), sm.GetLabels())
	}
	svc := m.must(t, "Service", "kube-system", "vpcgw-controller-metrics")
	sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	for k, v := range sel {
		if svc.GetLabels()[k] != v {
			t.Errorf("the ServiceMonitor selects %s=%s; the metrics Service has %v", k, v, svc.GetLabels())
		}
	}
	if ns, _, _ := unstructured.NestedStringSlice(sm.Object, "spec", "namespaceSelector", "matchNames"); !slices.Equal(ns, []string{"kube-system"}) {
		t.Errorf("namespaceSelector %v", ns)
	}
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	if len(eps) != 1 || len(ports) != 1 {
		t.Fatalf("endpoints %v, Service ports %v", eps, ports)
	}
	ep := eps[0].(map[string]any)
	tlsConfig, _ := ep["tlsConfig"].(map[string]any)
	if ep["port"] != ports[0].(map[string]any)["name"] || ep["scheme"] != "https" || ep["path"] != "/metrics" || ep["interval"] != "15s" ||
		ep["bearerTokenFile"] != "/var/run/secrets/kubernetes.io/serviceaccount/token" || tlsConfig["insecureSkipVerify"] != true {
		t.Errorf("endpoint %v", ep)
	}

	pr := m.must(t, "PrometheusRule", "kube-system", "vpcgw-controller")
	if pr.GetLabels()["role"] != "alert-rules" {
		t.Errorf("PrometheusRule labels %v", pr.GetLabels())
	}
	rules := alertRules(t, pr)
	var names []string
	for _, r := range rules {
		names = append(names, r.Alert)
		for _, a := range []string{"summary", "description", "runbook", "runbook_url"} {
			if r.Annotations[a] == "" {
				t.Errorf("alert %s has no %s", r.Alert, a)
			}
		}
		// An alert on a gateway's series names the gateway and starts from `kubectl vpcgw`; the
		// controller-wide ones (K10, the scrape jobs) have no gateway.
		perGateway := strings.Contains(r.Expr, "vpcgw_gateway_")
		if !strings.Contains(r.Annotations["runbook"], "kubectl ") || perGateway && (!strings.Contains(r.Annotations["summary"], "{{ $labels.gateway }}") ||
			!strings.Contains(r.Annotations["runbook"], "kubectl vpcgw")) {
			t.Errorf("alert %s: runbook %q without kubectl (vpcgw for a gateway), or summary %q without the gateway", r.Alert, r.Annotations["runbook"], r.Annotations["summary"])
		}
		if r.Labels["severity"] == "" {
			t.Errorf("alert %s has no severity", r.Alert)
		}
	}
	if !slices.Equal(names, wantAlerts) {
		t.Errorf("alerts %v, want %v", names, wantAlerts)
	}
	stale := rules[slices.Index(names, "VpcgwGatewaySyncStale")]
	if !strings.Contains(stale.Expr, "> 5400 ") || !strings.Contains(stale.Annotations["description"], "1h30m") {
		t.Errorf("VpcgwGatewaySyncStale with syncStaleAfter=1h30m: %q, %q", stale.Expr, stale.Annotations["description"])
	}

	cm := m.must(t, "ConfigMap", "kube-system", "vpcgw-dashboard")
	if cm.GetLabels()["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap labels %v", cm.GetLabels())
	}
	want, err := os.ReadFile(dashboardFile)
	must(t, err)
	got, _, _ := unstructured.NestedString(cm.Object, "data", "vpcgw.json")
	if got != string(bytes.TrimRight(want, "\n")) {
		t.Errorf("the dashboard ConfigMap does not hold %s as it is", dashboardFile)
	}
	if !json.Valid([]byte(got)) {
		t.Error("the dashboard is not JSON")
	}
}

// covers: O3
// The default stale threshold is the controller's --sync-stale-after default.
func TestChartSyncStaleDefault(t *testing.T) {
	m := manifest(render(t, monitoringOn...))
	rules := alertRules(t, m.must(t, "PrometheusRule", "kube-system", "vpcgw-controller"))
	for _, r := range rules {
		if r.Alert == "VpcgwGatewaySyncStale" && !strings.Contains(r.Expr, "> 300 ") {
			t.Errorf("VpcgwGatewaySyncStale by default: %q, want > 300 (--sync-stale-after's %s)", r.Expr, controller.DefaultSyncStaleAfter)
		}
	}
	if controller.DefaultSyncStaleAfter.Seconds() != 300 {
		t.Errorf("--sync-stale-after defaults to %s; the chart's syncStaleAfter says 5m", controller.DefaultSyncStaleAfter)
	}
}

// covers: O3
// A ServiceMonitor without the metrics Service it would scrape, and malformed durations, fail the
// render with a message that says what to change.
func TestChartMonitoringRejects(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "monitoring.serviceMonitor.enabled=true", "--set", "controller.metricsSecure=false"}, "monitoring.serviceMonitor.enabled needs controller.metricsSecure"},
		{[]string{"--set", "monitoring.serviceMonitor.enabled=true", "--set", "webhook.metricsSecure=false"}, "monitoring.serviceMonitor.enabled needs webhook.metricsSecure"},
		{[]string{"--set", "monitoring.serviceMonitor.enabled=true", "--set", "monitoring.serviceMonitor.interval=often"}, "monitoring.serviceMonitor.interval must be a Prometheus duration"},
		{[]string{"--set", "monitoring.prometheusRule.enabled=true", "--set", "monitoring.prometheusRule.syncStaleAfter=5 minutes"}, "monitoring.prometheusRule.syncStaleAfter must be a duration"},
		{[]string{"--set", "monitoring.prometheusRule.enabled=true", "--set", "monitoring.prometheusRule.syncStaleAfter=0s"}, "monitoring.prometheusRule.syncStaleAfter must be longer than 0"},
	} {
		_, err := renderErr(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("helm template %v: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
	// Rules and the dashboard do not need the Service: another scraper may read the controller.
	render(t, "--set", "controller.metricsSecure=false", "--set", "monitoring.prometheusRule.enabled=true", "--set", "monitoring.dashboard.enabled=true")
	// Nor does the controller's ServiceMonitor need the webhook's metrics without a webhook.
	render(t, "--set", "monitoring.serviceMonitor.enabled=true", "--set", "webhook.enabled=false", "--set", "webhook.metricsSecure=false")
}

// covers: O3
// Every metric an alert or a dashboard panel reads is one the controller registers (or a series
// Prometheus writes per target: up), so that a renamed metric fails here, not on an operator's
// empty dashboard; the dashboard shows what SPEC
// O3 lists. github.com/prometheus/prometheus (its PromQL parser) is not in the module graph and
// is not added for this: expressions are checked by promqlMetricNames below and for balanced
// brackets and quotes.
func TestMonitoringExpressionsUseServedMetrics(t *testing.T) {
	served := servedMetrics(t)
	m := manifest(render(t, monitoringOn...))
	exprs := map[string]string{}
	for _, r := range alertRules(t, m.must(t, "PrometheusRule", "kube-system", "vpcgw-controller")) {
		exprs["alert "+r.Alert] = r.Expr
	}
	data, _, _ := unstructured.NestedString(m.must(t, "ConfigMap", "kube-system", "vpcgw-dashboard").Object, "data", "vpcgw.json")
	for k, v := range dashboardExprs(t, []byte(data)) {
		exprs[k] = v
	}
	used := map[string]bool{}
	for where, expr := range exprs {
		if err := balanced(expr); err != nil {
			t.Errorf("%s: %q: %v", where, expr, err)
		}
		names := promqlMetricNames(expr)
		if len(names) == 0 {
			t.Errorf("%s: %q reads no metric", where, expr)
		}
		for _, n := range names {
			if strings.HasPrefix(where, "alert ") && slices.Contains(scrapeSeries, n) {
				continue
			}
			base, ok := servedName(n, served)
			if !ok {
				t.Errorf("%s reads %s, which the controller does not register (registered: %v)", where, n, keys(served))
			}
			used[base] = true
		}
	}
	// SPEC O3's list, on the dashboard.
	for _, name := range []string{
		"vpcgw_network_programming_latency_seconds", "vpcgw_reconcile_duration_seconds", "vpcgw_gateway_sync_failures_total",
		"vpcgw_gateway_identities", "vpcgw_gateway_backends", "vpcgw_gateway_agents_connected",
		"vpcgw_gateway_last_successful_sync_timestamp_seconds", "vpcgw_conntrack_entries_deleted_total", "vpcgw_build_info",
	} {
		if !used[name] {
			t.Errorf("neither the dashboard nor an alert reads %s", name)
		}
	}
}

// covers: O3
// The user guide names every alert the chart ships and the dashboard's file.
func TestUserGuideListsTheAlerts(t *testing.T) {
	guide, err := os.ReadFile("../docs/user-guide.md")
	must(t, err)
	sec := monitoringSection(t, string(guide))
	for _, a := range append(slices.Clone(wantAlerts), "files/grafana-dashboard.json", "monitoring.serviceMonitor.enabled", "--sync-stale-after") {
		if !strings.Contains(sec, "`"+a+"`") {
			t.Errorf("the user guide's Monitoring section does not name `%s`", a)
		}
	}
}

func monitoringSection(t *testing.T, guide string) string {
	t.Helper()
	_, sec, ok := strings.Cut(guide, "\n## Monitoring\n")
	if !ok {
		t.Fatal("docs/user-guide.md has no ## Monitoring section")
	}
	if i := strings.Index(sec, "\n## "); i >= 0 {
		sec = sec[:i]
	}
	return sec
}

type alertRule struct {
	Alert, Expr, For    string
	Labels, Annotations map[string]string
}

func alertRules(t *testing.T, pr *unstructured.Unstructured) []alertRule {
	t.Helper()
	var spec struct {
		Groups []struct {
			Name  string
			Rules []alertRule
		}
	}
	js, err := json.Marshal(pr.Object["spec"])
	must(t, err)
	must(t, json.Unmarshal(js, &spec))
	var out []alertRule
	for _, g := range spec.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) == 0 {
		t.Fatal("the PrometheusRule has no rules")
	}
	return out
}

// dashboardExprs are the PromQL expressions of a Grafana dashboard: every panel's targets (rows'
// nested panels too) and the query variables, keyed by where they are.
func dashboardExprs(t *testing.T, data []byte) map[string]string {
	t.Helper()
	type panel struct {
		Title   string
		Targets []struct {
			Expr  string
			RefID string `json:"refId"`
		}
		Panels []json.RawMessage
	}
	var d struct {
		Panels     []json.RawMessage
		Templating struct {
			List []struct {
				Name, Type string
				Query      json.RawMessage
			}
		}
	}
	must(t, json.Unmarshal(data, &d))
	out := map[string]string{}
	var walk func([]json.RawMessage)
	walk = func(ps []json.RawMessage) {
		for _, raw := range ps {
			var p panel
			must(t, json.Unmarshal(raw, &p))
			for _, tg := range p.Targets {
				out["panel "+p.Title+" "+tg.RefID] = tg.Expr
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		if err := json.Unmarshal(v.Query, &q); err != nil || q.Query == "" {
			must(t, json.Unmarshal(v.Query, &q.Query)) // the older form: the query as a string
		}
		out["variable "+v.Name] = q.Query
	}
	return out
}

// servedMetrics are the vpcgw metrics the controller registers, by name, with their type.
func servedMetrics(t *testing.T) map[string]string {
	t.Helper()
	ms, err := controller.RegisteredMetrics()
	must(t, err)
	out := map[string]string{}
	for _, m := range ms {
		out[m.Name] = m.Type
	}
	return out
}

// servedName maps a series name to its registered metric: a histogram serves <name>_bucket,
// _sum and _count.
func servedName(series string, served map[string]string) (string, bool) {
	if _, ok := served[series]; ok && served[series] != "histogram" {
		return series, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(series, suffix); ok && served[base] == "histogram" {
			return base, true
		}
	}
	return series, false
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

var (
	promStrings    = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	promBraces     = regexp.MustCompile(`\{[^{}]*\}`)
	promBrackets   = regexp.MustCompile(`\[[^\[\]]*\]`)
	promGrouping   = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	grafanaValues  = regexp.MustCompile(`\blabel_values\(\s*([^,()]+?)\s*,[^()]*\)`)
	grafanaVars    = regexp.MustCompile(`\$\{[^}]*\}|\$\w+`)
	promIdentifier = regexp.MustCompile(`(^|[^A-Za-z0-9_:.])([A-Za-z_:][A-Za-z0-9_:]*)`)
	promKeywords   = map[string]bool{
		"and": true, "or": true, "unless": true, "by": true, "without": true, "on": true, "ignoring": true,
		"group_left": true, "group_right": true, "offset": true, "bool": true, "inf": true, "nan": true, "atan2": true,
	}
)

// promqlMetricNames extracts the metric names an expression reads, without a PromQL parser:
// strings, label matchers, ranges, grouping label lists and Grafana variables are removed, and
// of the identifiers left those are metric names that are neither keywords nor called (a
// function or an aggregation is followed by "("). Grafana's label_values(metric, label) reads
// its metric.
func promqlMetricNames(expr string) []string {
	s := grafanaValues.ReplaceAllString(expr, "$1")
	s = promStrings.ReplaceAllString(s, `""`)
	s = grafanaVars.ReplaceAllString(s, "1")
	for _, re := range []*regexp.Regexp{promBraces, promBrackets, promGrouping} {
		s = re.ReplaceAllString(s, " ")
	}
	var out []string
	for _, m := range promIdentifier.FindAllStringSubmatchIndex(s, -1) {
		name, end := s[m[4]:m[5]], m[5]
		if promKeywords[strings.ToLower(name)] || strings.HasPrefix(strings.TrimLeft(s[end:], " \t\n"), "(") {
			continue
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// balanced checks that an expression's brackets and quotes are closed in order.
func balanced(expr string) error {
	var stack []rune
	var quote rune
	escaped := false
	for _, c := range expr {
		switch {
		case quote != 0:
			if escaped {
				escaped = false
			} else if c == '\\' && quote != '`' {
				escaped = true
			} else if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'' || c == '`':
			quote = c
		case c == '(' || c == '[' || c == '{':
			stack = append(stack, c)
		case c == ')' || c == ']' || c == '}':
			open := map[rune]rune{')': '(', ']': '[', '}': '{'}[c]
			if len(stack) == 0 || stack[len(stack)-1] != open {
				return errUnbalanced(string(c))
			}
			stack = stack[:len(stack)-1]
		}
	}
	if quote != 0 || len(stack) > 0 {
		return errUnbalanced("unclosed")
	}
	return nil
}

type errUnbalanced string

func (e errUnbalanced) Error() string { return "unbalanced brackets or quotes: " + string(e) }

// covers: O3
// The metric name extraction finds exactly the metrics of the PromQL forms the alerts and the
// dashboard use.
func TestPromQLMetricNames(t *testing.T) {
	for expr, want := range map[string]string{
		`histogram_quantile(0.99, sum by (le, kind) (rate(a_bucket{result="ok",x=~"$gateway"}[$__rate_interval])))`: "a_bucket",
		`increase(b_total[10m]) > 0 and on (namespace, gateway) (time() - c > 60 and c > 0)`:                        "b_total c",
		`sum(rate(d[5m])) by (gateway) / ignoring(x) group_left e offset 5m`:                                        "d e",
		`count(f < g) or vector(0)`:             "f g",
		`label_values(h, gateway)`:              "h",
		`1e3 * i{a="and or j"} > bool 2`:        "i",
		`max without (pod) (k:recorded:rate5m)`: "k:recorded:rate5m",
	} {
		if got := strings.Join(promqlMetricNames(expr), " "); got != want {
			t.Errorf("promqlMetricNames(%q) = %q, want %q", expr, got, want)
		}
	}
	if balanced(`sum(rate(x[5m])`) == nil || balanced(`x{a="}"}`) != nil {
		t.Error("balanced misjudges")
	}
}
