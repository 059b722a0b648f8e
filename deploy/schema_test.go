package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// schemaFreeForm names the objects of values.yaml whose keys are the user's (labels and
// annotations, Kubernetes objects passed through as they are, kube-ovn's func section): the schema
// leaves them open. Every other object is closed (additionalProperties: false).
var schemaFreeForm = []string{"func", "resources", "podAnnotations", "annotations", "nodeSelector", "affinity",
	"podSecurityContext", "securityContext", "issuerRef", "labels"}

// schemaOnly are properties of the schema that values.yaml does not have: gatewayNamespaces is
// gone, and the schema lets it through only so that the chart refuses it naming its replacement.
var schemaOnly = []string{"gatewayNamespaces"}

// covers: O4
// TestChartSchemaCoversValues: values.schema.json types every key of values.yaml and is closed at
// every level but the free-form maps, so that a typo anywhere is an error rather than a value that
// is silently ignored; and it has no key values.yaml lacks.
func TestChartSchemaCoversValues(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	must(t, err)
	var values map[string]any
	must(t, yaml.Unmarshal(data, &values))
	data, err = os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	must(t, err)
	var schema map[string]any
	must(t, json.Unmarshal(data, &schema))
	if schema["$schema"] != "http://json-schema.org/draft-07/schema#" {
		t.Errorf("$schema = %v, want draft-07 (what helm 3 validates)", schema["$schema"])
	}
	checkSchemaNode(t, "", values, schema)
}

// checkSchemaNode checks the schema node of the value at path (dotted, "" for the root).
func checkSchemaNode(t *testing.T, path string, value any, node map[string]any) {
	t.Helper()
	if path != "" && node["type"] == nil && node["enum"] == nil {
		t.Errorf("%s: the schema gives neither a type nor an enum", path)
	}
	last := path[strings.LastIndex(path, ".")+1:]
	switch v := value.(type) {
	case map[string]any:
		props, _ := node["properties"].(map[string]any)
		closed := node["additionalProperties"] == false
		if free := slices.Contains(schemaFreeForm, last); free == closed {
			t.Errorf("%s: additionalProperties %v; want it false except on the free-form maps %v", path, node["additionalProperties"], schemaFreeForm)
		}
		for _, k := range sortedKeys(v) {
			sub, ok := props[k].(map[string]any)
			if !ok {
				if closed {
					t.Errorf("%s: key %q of values.yaml is not in the schema", path, k)
				}
				continue
			}
			checkSchemaNode(t, strings.TrimPrefix(path+"."+k, "."), v[k], sub)
		}
		if !closed {
			return
		}
		for _, k := range sortedKeys(props) {
			if _, ok := v[k]; !ok && !(path == "" && slices.Contains(schemaOnly, k)) {
				t.Errorf("%s: the schema has %q, which values.yaml does not", path, k)
			}
		}
	case []any:
		items, ok := node["items"].(map[string]any)
		if !ok || items["type"] == nil {
			t.Errorf("%s: an array without a typed items schema", path)
			return
		}
		// Objects in lists are closed too, except Kubernetes' own (tolerations).
		if items["type"] == "object" && last != "tolerations" && items["additionalProperties"] != false {
			t.Errorf("%s: its items are objects that are not closed", path)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// covers: O4
// TestChartSchemaRejects: the chart renders with its defaults, and helm refuses values the schema
// does not allow, naming the key, before any template runs: an unknown key at the top and deeper
// down (a typo of a gate's name would otherwise render as the default), a wrong type and a value
// outside an enum.
func TestChartSchemaRejects(t *testing.T) {
	helmBin(t)
	if _, err := renderErr(t); err != nil {
		t.Fatalf("helm template with the defaults: %v", err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"unknown top-level key", []string{"--set", "enableGwNftableLoadbalancerService=true"},
			[]string{"additional properties 'enableGwNftableLoadbalancerService' not allowed"}},
		{"unknown nested key: a typo of the LoadBalancer gate", []string{"--set", "features.enableGwNftableLbSvc=true"},
			[]string{"/features", "additional properties 'enableGwNftableLbSvc' not allowed"}},
		{"unknown nested key in monitoring", []string{"--set", "monitoring.serviceMonitor.intervall=1m"},
			[]string{"/monitoring/serviceMonitor", "additional properties 'intervall' not allowed"}},
		{"wrong type: a string for an integer", []string{"--set-string", "controller.replicas=two"},
			[]string{"/controller/replicas", "want integer"}},
		{"wrong type: a string for a boolean", []string{"--set-string", "monitoring.dashboard.enabled=yes"},
			[]string{"/monitoring/dashboard/enabled", "want boolean"}},
		{"wrong type: a number for a string", []string{"--set", "kubeOvn.controllerDeployment=1"},
			[]string{"/kubeOvn/controllerDeployment", "want string"}},
		{"wrong type: a label that is not a string", []string{"--set", "monitoring.prometheusRule.labels.release=1"},
			[]string{"/monitoring/prometheusRule/labels/release", "want string"}},
		{"bad enum: transport", []string{"--set", "transport=ssh"}, []string{"/transport", "'exec'", "'local'"}},
		{"bad enum: ledger", []string{"--set", "ledger=configmap"}, []string{"/ledger", "'service-record'", "'iptables-dnat-rule'"}},
		{"bad enum: backendPick", []string{"--set", "backendPick=maglev"}, []string{"/backendPick", "'hash'", "'random'"}},
		{"bad enum: pullPolicy", []string{"--set", "image.pullPolicy=Sometimes"}, []string{"/image/pullPolicy", "'IfNotPresent'"}},
		{"bad enum: a gate that is not true or false", []string{"--set-string", "features.enableGwNftableServiceClusterIp=yes"},
			[]string{"/features/enableGwNftableServiceClusterIp", "'true'", "'false'"}},
		{"the NB address without its scheme", []string{"--set", "ovn.nbAddr=10.0.0.1:6641"}, []string{"/ovn/nbAddr", "does not match pattern"}},
		{"a quantity that is none", []string{"--set", "controller.resources.limits.memory=lots"}, []string{"/controller/resources/limits/memory", "does not match pattern"}},
		{"a resource that is none", []string{"--set", "webhook.resources.limits.gpu=1"}, []string{"/webhook/resources/limits", "additional properties 'gpu' not allowed"}},
		{"a gate conflict: the ClusterIP gate beside OVN's load balancers", []string{"--set", "features.enableGwNftableServiceClusterIp=true"},
			[]string{"/enableLb", "false"}},
		{"a gate conflict: the LoadBalancer gate beside kube-ovn's LB pods", []string{"--set", "enableLbSvc=true"},
			[]string{"/features/enableGwNftableLoadbalancerService", "false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderErr(t, tc.args...)
			if err == nil {
				t.Fatalf("helm template %v rendered", tc.args)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("helm template %v: %v\nwant an error with %q", tc.args, err, w)
				}
			}
		})
	}
	// helm install checks the same schema.
	if cfg != nil {
		if _, err := installDryRun(t, kubeconfigFor(t, env), "--set", "features.enableGwNftableLbSvc=true"); err == nil ||
			!strings.Contains(err.Error(), "additional properties 'enableGwNftableLbSvc' not allowed") {
			t.Errorf("helm install with a misspelt gate: %v, want the schema's refusal naming it", err)
		}
	}
	// The new keys of the other parts of issue 22 are there with their defaults and types.
	if _, err := renderErr(t, "--set", "monitoring.serviceMonitor.enabled=false", "--set", "monitoring.serviceMonitor.interval=1m",
		"--set", "monitoring.serviceMonitor.labels.release=prom", "--set", "monitoring.prometheusRule.syncStaleAfter=10m",
		"--set", "monitoring.dashboard.labels.grafana_dashboard=1", "--set", "kubeOvn.controllerDeployment=kube-ovn-controller"); err == nil ||
		!strings.Contains(err.Error(), "/monitoring/dashboard/labels/grafana_dashboard") {
		// --set makes 1 a number: a label value must be a string (--set-string).
		t.Errorf("helm template with a numeric dashboard label: %v, want the schema's refusal", err)
	}
	if _, err := renderErr(t, "--set", "monitoring.serviceMonitor.interval=1m", "--set", "monitoring.serviceMonitor.labels.release=prom",
		"--set", "monitoring.prometheusRule.syncStaleAfter=10m", "--set-string", "monitoring.dashboard.labels.grafana_dashboard=1",
		"--set", "kubeOvn.controllerDeployment=kube-ovn-controller"); err != nil {
		t.Errorf("helm template with the monitoring and kubeOvn.controllerDeployment keys set: %v", err)
	}
}

// installDryRun runs `helm install --dry-run=client` on the chart against the API server of
// kubeconfig and returns helm's output. It renders NOTES.txt, which helm template does not; helm 3
// needs a reachable cluster for it (only helm template renders without one), but the client dry
// run creates nothing and looks nothing up.
func installDryRun(t *testing.T, kubeconfig string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helmBin(t), append([]string{"install", "vpcgw", chartDir, "--dry-run=client", "--namespace", "kube-system",
		"--kubeconfig", kubeconfig}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%w: %s", err, stderr.String())
	}
	return string(out), nil
}

// covers: O4, F2
// TestChartLintRefusesGateConflicts: `helm lint --strict` fails on a gate conflict (lint shows a
// template's fail only as information; the schema makes it an error), on an NB address without
// its scheme and on a quantity that is none, and passes the same values made right.
func TestChartLintRefusesGateConflicts(t *testing.T) {
	helm := helmBin(t)
	lint := func(args ...string) (string, error) {
		out, err := exec.Command(helm, append([]string{"lint", "--strict", chartDir}, args...)...).CombinedOutput()
		return string(out), err
	}
	for _, args := range [][]string{
		{"--set", "features.enableGwNftableServiceClusterIp=true"},
		{"--set", "func.ENABLE_GW_NFTABLE_SVC_CLUSTER_IP=true", "--set", "features.enableGwNftableServiceClusterIp=true", "--set", "func.ENABLE_LB=true"},
		{"--set", "enableLbSvc=true"},
		{"--set", "ovn.nbAddr=10.0.0.1:6641"},
		{"--set", "controller.resources.requests.cpu=fast"},
	} {
		if out, err := lint(args...); err == nil {
			t.Errorf("helm lint --strict %v passed:\n%s", args, out)
		}
	}
	for _, args := range [][]string{
		nil,
		{"--set", "features.enableGwNftableServiceClusterIp=true", "--set", "enableLb=false"},
		{"--set", "features.enableGwNftableServiceClusterIp=true", "--set", "func.ENABLE_LB=false"},
		{"--set", "enableLbSvc=true", "--set", "features.enableGwNftableLoadbalancerService=false"},
		{"--set", "enableLbSvc=true", "--set", "func.ENABLE_GW_NFTABLE_LB_SVC=false"},
		{"--set", `ovn.nbAddr=ssl:10.0.0.1:6641\,ssl:10.0.0.2:6641`, "--set", "controller.resources.requests.cpu=250m"},
	} {
		if out, err := lint(args...); err != nil {
			t.Errorf("helm lint --strict %v: %v\n%s", args, err, out)
		}
	}
}
