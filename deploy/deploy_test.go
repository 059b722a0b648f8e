package deploy

// covers: F4, O4, O2, W4, W7, K1, K7

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	goflag "flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	shippedwebhook "github.com/vpcgw/vpcgw/deploy/webhook"
	"github.com/vpcgw/vpcgw/internal/controller"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

// HelmEnv names the helm binary (built by hack/tools/helm/build.sh; `make test` sets it).
const HelmEnv = "VPCGW_HELM"

const chartDir = "helm/vpcgw"

var (
	env     *envtest.Environment
	cfg     *rest.Config
	k8s     client.Client
	envSkip string
)

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	_, missing := testutil.EnvtestAssets("kube-apiserver", "etcd")
	if missing == "" {
		// Every install path is applied on top of kube-ovn's own CRDs, as in a real cluster.
		_, missing = testutil.KubeOVNAssets(kubeOVNCRDFile)
	}
	if missing != "" {
		envSkip = missing
		return m.Run()
	}
	env = &envtest.Environment{}
	var err error
	if cfg, err = env.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "starting envtest:", err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	scheme, err := controller.Scheme()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if k8s, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if kubeOVNBefore, err = installKubeOVNCRDs(context.Background(), k8s); err != nil {
		fmt.Fprintln(os.Stderr, "installing kube-ovn's CRDs:", err)
		return 1
	}
	return m.Run()
}

func helmBin(t *testing.T) string {
	t.Helper()
	return testutil.ToolFromEnv(t, HelmEnv, "hack/tools/helm/build.sh (make helm)")
}

func needAPIServer(t *testing.T) {
	t.Helper()
	if cfg == nil {
		testutil.Skip(t, envSkip)
	}
}

// render runs `helm template` on the chart with args; it fails the test when helm fails.
func render(t *testing.T, args ...string) []*unstructured.Unstructured {
	t.Helper()
	out, err := renderErr(t, args...)
	if err != nil {
		t.Fatalf("helm template %v: %v", args, err)
	}
	return decode(t, out)
}

func renderErr(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(helmBin(t), append([]string{"template", "vpcgw", chartDir, "--namespace", "kube-system"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, stderr.String())
	}
	return out, nil
}

func decode(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatal(err)
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatalf("decoding %q: %v", doc, err)
		}
		if s := strings.TrimSpace(string(js)); s == "null" || s == "{}" {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(js); err != nil {
			t.Fatalf("decoding %s: %v", js, err)
		}
		objs = append(objs, u)
	}
}

// manifest is a rendered set of objects with lookups.
type manifest []*unstructured.Unstructured

// installNS is the namespace vpcgw runs in, in these manifests: its controller's ServiceAccount's
// (kube-system where a test renders there, vpcgw-system for the shipped manifests and install.sh's
// defaults).
func (m manifest) installNS() string {
	for _, o := range m {
		if o.GetKind() == "ServiceAccount" && o.GetName() == "vpcgw-controller" {
			return o.GetNamespace()
		}
	}
	return ""
}

func (m manifest) find(kind, namespace, name string) *unstructured.Unstructured {
	for _, o := range m {
		if o.GetKind() == kind && o.GetName() == name && o.GetNamespace() == namespace {
			return o
		}
	}
	return nil
}

func (m manifest) must(t *testing.T, kind, namespace, name string) *unstructured.Unstructured {
	t.Helper()
	o := m.find(kind, namespace, name)
	if o == nil {
		t.Fatalf("%s %s/%s not rendered; have %v", kind, namespace, name, m.names())
	}
	return o
}

func (m manifest) count(kind string) int {
	n := 0
	for _, o := range m {
		if o.GetKind() == kind {
			n++
		}
	}
	return n
}

func (m manifest) names() []string {
	var out []string
	for _, o := range m {
		out = append(out, o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName())
	}
	return out
}

// container returns the named container of a Deployment.
func container(t *testing.T, d *unstructured.Unstructured, name string) map[string]any {
	t.Helper()
	cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	for _, c := range cs {
		if m := c.(map[string]any); m["name"] == name {
			return m
		}
	}
	t.Fatalf("deployment %s has no container %s", d.GetName(), name)
	return nil
}

func args(t *testing.T, c map[string]any) []string {
	t.Helper()
	var out []string
	for _, a := range c["args"].([]any) {
		out = append(out, a.(string))
	}
	return out
}

// flag returns the value of --name=value in args ("" and false when absent).
func flag(as []string, name string) (string, bool) {
	for _, a := range as {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

func wantFlags(t *testing.T, as []string, want map[string]string) {
	t.Helper()
	for k, v := range want {
		got, ok := flag(as, k)
		if v == "<absent>" {
			if ok {
				t.Errorf("--%s=%s given, want it absent (args %v)", k, got, as)
			}
			continue
		}
		if !ok || got != v {
			t.Errorf("--%s = %q (present %v), want %q (args %v)", k, got, ok, v, as)
		}
	}
}

// rules flattens RBAC rules to "group/resource" -> sorted verbs.
func rules(t *testing.T, o *unstructured.Unstructured) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	rs, _, _ := unstructured.NestedSlice(o.Object, "rules")
	for _, r := range rs {
		m := r.(map[string]any)
		for _, u := range asList(m["nonResourceURLs"]) {
			key := "nonResourceURL:" + u.(string)
			for _, v := range m["verbs"].([]any) {
				out[key] = append(out[key], v.(string))
			}
			sort.Strings(out[key])
		}
		for _, g := range asList(m["apiGroups"]) {
			for _, res := range m["resources"].([]any) {
				key := g.(string) + "/" + res.(string)
				for _, v := range m["verbs"].([]any) {
					out[key] = append(out[key], v.(string))
				}
				sort.Strings(out[key])
			}
		}
	}
	return out
}

func wantRules(t *testing.T, o *unstructured.Unstructured, want map[string][]string) {
	t.Helper()
	got := rules(t, o)
	for k := range want {
		sort.Strings(want[k])
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s %s rules:\n got %v\nwant %v", o.GetKind(), o.GetName(), got, want)
	}
}

// asList is a rule's list field, nil when absent.
func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// execRules is what the controller needs in each gateway namespace: the agent's exec stream, and
// reading the Pod's owner chain before it (internal/transport/verify.go).
var execRules = map[string][]string{
	"/pods/exec":        {"create", "get"},
	"/pods":             {"get"},
	"apps/statefulsets": {"get"},
	"apps/replicasets":  {"get"},
	"apps/deployments":  {"get"},
}

// controllerRules is what the controller's code needs cluster-wide (see the comments in
// helm/vpcgw/templates/rbac-controller.yaml for the code behind each verb).
var controllerRules = map[string][]string{
	"/services":                       {"list", "watch", "patch"},
	"/services/status":                {"patch"},
	"/pods":                           {"list", "watch"},
	"apps/statefulsets":               {"list", "watch"}, // kube-ovn's gateway StatefulSets: instances (SPEC N5)
	"discovery.k8s.io/endpointslices": {"list", "watch"},
	"kubeovn.io/vpc-nat-gateways":     {"list", "watch"},
	"kubeovn.io/iptables-eips":        {"list", "watch"},
	"kubeovn.io/subnets":              {"list", "watch"},
	"kubeovn.io/ips":                  {"list", "watch"},
	"kubeovn.io/iptables-fip-rules":   {"list", "watch"},
	"kubeovn.io/iptables-dnat-rules":  {"list", "watch", "delete"}, // the other ledger form's, released only
	"vpcgw.io/servicerecords":         {"get", "list", "watch", "create", "update", "patch", "delete"},
	"kubeovn.io/vpcs":                 {"get", "list", "watch"},
	"events.k8s.io/events":            {"create", "patch"},
}

// TestChartRenders renders the chart with default and non-default values, checks the objects
// that matter and applies each rendering to the real API server (CRDs for real, the rest with a
// server-side dry run, which runs the API server's full validation and admission).
func TestChartRenders(t *testing.T) {
	helmBin(t)
	v1Values := filepath.Join(t.TempDir(), "kube-ovn-v1.yaml")
	// A kube-ovn v1 values file: strings as well as booleans.
	if err := os.WriteFile(v1Values, []byte("func:\n  ENABLE_GW_NFTABLE_LB_SVC: true\n  ENABLE_GW_NFTABLE_SVC_CLUSTER_IP: \"true\"\n  ENABLE_LB: false\n  ENABLE_LB_SVC: false\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		args  []string
		check func(t *testing.T, m manifest)
		// nsToCreate must exist before the dry run (Roles in the gateways' namespaces).
		nsToCreate []string
	}{{
		name: "defaults",
		check: func(t *testing.T, m manifest) {
			d := m.must(t, "Deployment", m.installNS(), "vpcgw-controller")
			c := container(t, d, "controller")
			as := args(t, c)
			if as[0] != "controller" {
				t.Errorf("controller args start with %q", as[0])
			}
			// The chart serves LoadBalancer Services by default; ClusterIPs stay opt-in (SPEC O4).
			wantFlags(t, as, map[string]string{
				"enable-gw-nftable-lb-svc": "true", "enable-gw-nftable-svc-cluster-ip": "false",
				"enable-lb": "true", "enable-lb-svc": "false", "transport": "exec", "leader-elect": "true",
				"leader-election-namespace": m.installNS(), "metrics-bind-address": ":8443", "metrics-secure": "true",
				"health-probe-bind-address": ":8081", "min-sync-interval": "20ms", "ovn-nb-addr": "<absent>",
				"enable-nftable-lb-svc": "<absent>", "ledger": "service-record", "kube-ovn-namespace": "kube-system",
				"backend-pick": "hash",
			})
			for probe, path := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz"} {
				p, _, _ := unstructured.NestedMap(c, probe, "httpGet")
				if p["path"] != path || p["port"] != "health" {
					t.Errorf("%s = %v, want %s on port health", probe, p, path)
				}
			}
			ports, _, _ := unstructured.NestedSlice(c, "ports")
			if fmt.Sprint(ports) != "[map[containerPort:8443 name:metrics] map[containerPort:8081 name:health]]" {
				t.Errorf("ports = %v", ports)
			}
			if sc, _, _ := unstructured.NestedMap(c, "securityContext"); sc["readOnlyRootFilesystem"] != true || sc["allowPrivilegeEscalation"] != false {
				t.Errorf("securityContext = %v", sc)
			}
			if r, _, _ := unstructured.NestedMap(c, "resources"); r["requests"] == nil || r["limits"] == nil {
				t.Errorf("resources = %v", r)
			}
			if sa, _, _ := unstructured.NestedString(d.Object, "spec", "template", "spec", "serviceAccountName"); sa != "vpcgw-controller" {
				t.Errorf("serviceAccountName = %q", sa)
			}
			if n, _, _ := unstructured.NestedInt64(d.Object, "spec", "replicas"); n != 1 {
				t.Errorf("replicas = %d", n)
			}
			m.must(t, "ServiceAccount", "kube-system", "vpcgw-controller")
			wantRules(t, m.must(t, "ClusterRole", "", "vpcgw-controller"), controllerRules)
			m.must(t, "ClusterRoleBinding", "", "vpcgw-controller")
			// pods/exec only in the gateways' namespace, never in the ClusterRole.
			wantRules(t, m.must(t, "Role", "kube-system", "vpcgw-controller-exec"), execRules)
			m.must(t, "RoleBinding", "kube-system", "vpcgw-controller-exec")
			// Secure metrics (SPEC N6): the controller may review tokens and access, readers get /metrics.
			wantRules(t, m.must(t, "ClusterRole", "", "vpcgw-controller-metrics-auth"), map[string][]string{
				"authentication.k8s.io/tokenreviews": {"create"}, "authorization.k8s.io/subjectaccessreviews": {"create"}})
			m.must(t, "ClusterRoleBinding", "", "vpcgw-controller-metrics-auth")
			wantRules(t, m.must(t, "ClusterRole", "", "vpcgw-metrics-reader"), map[string][]string{"nonResourceURL:/metrics": {"get"}})
			m.must(t, "Service", m.installNS(), "vpcgw-controller-metrics")
			// kube-ovn's ConfigMap ovn-vpc-nat-config and kube-ovn-controller's Deployment (SPEC K10),
			// read only, in kube-ovn's namespace only.
			wantRules(t, m.must(t, "Role", "kube-system", "vpcgw-controller-kube-ovn-config"), map[string][]string{"/configmaps": {"get", "list", "watch"}, "apps/deployments": {"get", "list", "watch"}})
			m.must(t, "RoleBinding", "kube-system", "vpcgw-controller-kube-ovn-config")
			// The controller's published status (SPEC O2): its ConfigMap in its namespace, readable
			// by nobody else by default (controller.statusReaders, SPEC N8), the namespace from the
			// downward API.
			wantRules(t, m.must(t, "Role", "kube-system", "vpcgw-controller-status"), map[string][]string{"/configmaps": {"get", "update", "create"}})
			m.must(t, "RoleBinding", "kube-system", "vpcgw-controller-status")
			if rb := m.find("RoleBinding", "kube-system", "vpcgw-status-reader"); rb != nil {
				t.Errorf("by default someone may read the controller's status: %v", rb.Object["subjects"])
			}
			readers := manifest(render(t, "--set", "controller.statusReaders={system:authenticated}"))
			wantRules(t, readers.must(t, "Role", "kube-system", "vpcgw-status-reader"), map[string][]string{"/configmaps": {"get"}})
			if rb := readers.must(t, "RoleBinding", "kube-system", "vpcgw-status-reader"); fmt.Sprint(rb.Object["subjects"]) != "[map[apiGroup:rbac.authorization.k8s.io kind:Group name:system:authenticated]]" {
				t.Errorf("status reader subjects = %v", rb.Object["subjects"])
			}
			if env, _, _ := unstructured.NestedSlice(c, "env"); !strings.Contains(fmt.Sprint(env), "name:POD_NAMESPACE valueFrom:map[fieldRef:map[fieldPath:metadata.namespace]]") {
				t.Errorf("controller env = %v: want POD_NAMESPACE from the downward API (where it publishes its status)", env)
			}
			// SPEC P2: Go's soft memory limit follows the container's limit.
			if env, _, _ := unstructured.NestedSlice(c, "env"); !strings.Contains(fmt.Sprint(env), "name:GOMEMLIMIT valueFrom:map[resourceFieldRef:map[resource:limits.memory]]") {
				t.Errorf("controller env = %v: want GOMEMLIMIT from the container's memory limit", env)
			}
			// Leader election is on with one replica too: the uninstall's release Job takes the
			// Lease so that the running controller stands by (SPEC O4).
			if m.count("Role") != 5 || m.find("Role", m.installNS(), "vpcgw-controller-leader-election") == nil {
				t.Errorf("five Roles expected (pods/exec, kube-ovn's ConfigMap, the status ConfigMap, its reader (bound to nobody by default), leader election): %v", m.names())
			}
			if _, err := renderErr(t, "--set", "controller.leaderElect=false"); err == nil || !strings.Contains(err.Error(), "release.enabled needs leader election") {
				t.Errorf("controller.leaderElect=false with the release hook: %v, want the render refused", err)
			}
			if off := manifest(render(t, "--set", "controller.leaderElect=false", "--set", "release.enabled=false")); off.find("Role", off.installNS(), "vpcgw-controller-leader-election") != nil {
				t.Errorf("controller.leaderElect=false still grants the leader election Role")
			}
			// vpcgw's own CRD, and never kube-ovn's (SPEC K1).
			checkNoKubeOVNCRDs(t, m, true)
			crd := m.must(t, "CustomResourceDefinition", "", "servicerecords.vpcgw.io")
			if crd.GetAnnotations()["helm.sh/resource-policy"] == "keep" {
				t.Errorf("servicerecords.vpcgw.io annotations %v: helm uninstall must delete the CRD by default (SPEC O4; crds.keep=true keeps it)", crd.GetAnnotations())
			}
			if scope, _, _ := unstructured.NestedString(crd.Object, "spec", "scope"); scope != "Cluster" {
				t.Errorf("servicerecords.vpcgw.io scope %q", scope)
			}
			checkWebhook(t, m, "generated")
			checkKubeOVNExcluded(t, m, "system:serviceaccount:kube-system:ovn")
		},
	}, {
		name: "v2 gates",
		args: []string{"--set", "features.enableGwNftableLoadbalancerService=true", "--set", "features.enableGwNftableServiceClusterIp=true", "--set", "enableLb=false",
			"--set", "ovn.nbAddr=tcp:10.96.0.10:6641", "--set", "ovn.tls.secretName=kube-ovn-tls"},
		check: func(t *testing.T, m manifest) {
			d := m.must(t, "Deployment", m.installNS(), "vpcgw-controller")
			wantFlags(t, args(t, container(t, d, "controller")), map[string]string{
				"enable-gw-nftable-lb-svc": "true", "enable-gw-nftable-svc-cluster-ip": "true", "enable-lb": "false",
				"ovn-nb-addr": "tcp:10.96.0.10:6641", "ovn-nb-cert": "/var/run/vpcgw/ovn-tls/cert",
				"ovn-nb-key": "/var/run/vpcgw/ovn-tls/key", "ovn-nb-ca": "/var/run/vpcgw/ovn-tls/cacert",
			})
			vols, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "volumes")
			if !strings.Contains(fmt.Sprint(vols), "secretName:kube-ovn-tls") {
				t.Errorf("volumes = %v", vols)
			}
		},
	}, {
		name: "v1 gates from a kube-ovn values file",
		args: []string{"--values", v1Values},
		check: func(t *testing.T, m manifest) {
			wantFlags(t, args(t, container(t, m.must(t, "Deployment", m.installNS(), "vpcgw-controller"), "controller")), map[string]string{
				"enable-gw-nftable-lb-svc": "true", "enable-gw-nftable-svc-cluster-ip": "true", "enable-lb": "false", "enable-lb-svc": "false",
			})
		},
	}, {
		name: "both layouts: features wins over func",
		args: []string{"--values", v1Values, "--set", "features.enableGwNftableLoadbalancerService=false"},
		check: func(t *testing.T, m manifest) {
			wantFlags(t, args(t, container(t, m.must(t, "Deployment", m.installNS(), "vpcgw-controller"), "controller")), map[string]string{
				"enable-gw-nftable-lb-svc": "false", "enable-gw-nftable-svc-cluster-ip": "true",
			})
		},
	}, {
		// The default is the last rule of the precedence: a v1 key set to false turns it off.
		name: "v1 key turns the default LoadBalancer gate off",
		args: []string{"--set", "func.ENABLE_GW_NFTABLE_LB_SVC=false"},
		check: func(t *testing.T, m manifest) {
			wantFlags(t, args(t, container(t, m.must(t, "Deployment", m.installNS(), "vpcgw-controller"), "controller")), map[string]string{
				"enable-gw-nftable-lb-svc": "false", "enable-gw-nftable-svc-cluster-ip": "false",
			})
		},
	}, {
		name: "LoadBalancer gate off beside kube-ovn's LB pods",
		args: []string{"--set", "features.enableGwNftableLoadbalancerService=false", "--set", "enableLbSvc=true"},
		check: func(t *testing.T, m manifest) {
			wantFlags(t, args(t, container(t, m.must(t, "Deployment", m.installNS(), "vpcgw-controller"), "controller")), map[string]string{
				"enable-gw-nftable-lb-svc": "false", "enable-lb-svc": "true", "enable-lb": "true",
			})
		},
	}, {
		name: "CRDs skipped",
		args: []string{"--set", "crds.install=false"},
		check: func(t *testing.T, m manifest) {
			checkNoKubeOVNCRDs(t, m, false)
		},
	}, {
		// kube-ovn's own pick (SPEC D2): numgen random in the gateways.
		name: "backend pick random",
		args: []string{"--set", "backendPick=random"},
		check: func(t *testing.T, m manifest) {
			wantFlags(t, args(t, container(t, m.must(t, "Deployment", m.installNS(), "vpcgw-controller"), "controller")), map[string]string{
				"backend-pick": "random",
			})
		},
	}, {
		name:       "the seed's ledger, kube-ovn in its own namespace",
		args:       []string{"--set", "ledger=iptables-dnat-rule", "--set", "kubeOvn.namespace=kube-ovn", "--set", "kubeOvn.serviceAccount=system:serviceaccount:kube-ovn:kube-ovn-app"},
		nsToCreate: []string{"kube-ovn"},
		check: func(t *testing.T, m manifest) {
			wantFlags(t, args(t, container(t, m.must(t, "Deployment", m.installNS(), "vpcgw-controller"), "controller")), map[string]string{
				"ledger": "iptables-dnat-rule", "kube-ovn-namespace": "kube-ovn",
			})
			wantRules(t, m.must(t, "Role", "kube-ovn", "vpcgw-controller-kube-ovn-config"), map[string][]string{"/configmaps": {"get", "list", "watch"}, "apps/deployments": {"get", "list", "watch"}})
			// The seed's ledger form reads kube-ovn's IptablesDnatRule CRD (that one only) to refuse
			// a schema that prunes the record fields.
			want := map[string][]string{"apiextensions.k8s.io/customresourcedefinitions": {"get"}}
			for k, v := range controllerRules {
				want[k] = v
			}
			// Ledger form by ledger form (SPEC N5): records are written as IptablesDnatRules, and
			// ServiceRecords of the other form are only read and released.
			want["kubeovn.io/iptables-dnat-rules"] = []string{"list", "watch", "create", "update", "delete"}
			want["kubeovn.io/iptables-dnat-rules/status"] = []string{"update"}
			want["vpcgw.io/servicerecords"] = []string{"list", "watch", "delete"}
			cr := m.must(t, "ClusterRole", "", "vpcgw-controller")
			wantRules(t, cr, want)
			if !strings.Contains(fmt.Sprint(cr.Object["rules"]), "resourceNames:[iptables-dnat-rules.kubeovn.io]") {
				t.Errorf("CRD read not limited to iptables-dnat-rules.kubeovn.io: %v", cr.Object["rules"])
			}
			if m.find("Role", "kube-system", "vpcgw-controller-kube-ovn-config") != nil {
				t.Error("kube-ovn's ConfigMap readable in kube-system although kube-ovn runs in kube-ovn")
			}
			// The ledger's CRD stays: records of both forms may exist across a switch.
			checkNoKubeOVNCRDs(t, m, true)
			checkKubeOVNExcluded(t, m, "system:serviceaccount:kube-ovn:kube-ovn-app")
			wantFlags(t, args(t, container(t, m.must(t, "Deployment", m.installNS(), "vpcgw-webhook"), "webhook")), map[string]string{
				"kube-ovn-user": "system:serviceaccount:kube-ovn:kube-ovn-app",
			})
		},
	}, {
		name: "cert-manager",
		args: []string{"--set", "webhook.certManager.enabled=true"},
		check: func(t *testing.T, m manifest) {
			checkWebhook(t, m, "cert-manager")
		},
	}, {
		name: "existing certificate",
		args: []string{"--set", "webhook.certs.existingSecret=true", "--set", "webhook.certs.caBundle=Q0E="},
		check: func(t *testing.T, m manifest) {
			checkWebhook(t, m, "existing")
		},
	}, {
		name:       "replicas 2 and two gateway namespaces",
		args:       []string{"--set", "controller.replicas=2", "--set", "extraGatewayNamespaces={gw-a}"},
		nsToCreate: []string{"gw-a"},
		check: func(t *testing.T, m manifest) {
			d := m.must(t, "Deployment", m.installNS(), "vpcgw-controller")
			wantFlags(t, args(t, container(t, d, "controller")), map[string]string{"leader-elect": "true", "leader-election-namespace": "kube-system"})
			if n, _, _ := unstructured.NestedInt64(d.Object, "spec", "replicas"); n != 2 {
				t.Errorf("replicas = %d", n)
			}
			wantRules(t, m.must(t, "Role", "kube-system", "vpcgw-controller-leader-election"), map[string][]string{
				"coordination.k8s.io/leases": {"get", "create", "update"}, "/events": {"create", "patch"},
			})
			m.must(t, "RoleBinding", "kube-system", "vpcgw-controller-leader-election")
			for _, ns := range []string{"kube-system", "gw-a"} {
				wantRules(t, m.must(t, "Role", ns, "vpcgw-controller-exec"), execRules)
				m.must(t, "RoleBinding", ns, "vpcgw-controller-exec")
			}
		},
	}, {
		name: "metrics on the pod's loopback only",
		args: []string{"--set", "controller.metricsSecure=false", "--set", "controller.metricsPort=9090",
			"--set", "webhook.metricsSecure=false", "--set", "webhook.metricsPort=9091"},
		check: func(t *testing.T, m manifest) {
			for _, d := range []struct{ deployment, container, addr string }{
				{"vpcgw-controller", "controller", "127.0.0.1:9090"}, {"vpcgw-webhook", "webhook", "127.0.0.1:9091"}} {
				c := container(t, m.must(t, "Deployment", m.installNS(), d.deployment), d.container)
				wantFlags(t, args(t, c), map[string]string{"metrics-bind-address": d.addr, "metrics-secure": "<absent>"})
				if ports, _, _ := unstructured.NestedSlice(c, "ports"); strings.Contains(fmt.Sprint(ports), "metrics") {
					t.Errorf("a metrics port is declared for loopback-only metrics of %s: %v", d.container, ports)
				}
			}
			for _, o := range []struct{ kind, ns, name string }{{"Service", "kube-system", "vpcgw-controller-metrics"},
				{"ClusterRole", "", "vpcgw-controller-metrics-auth"}, {"ClusterRole", "", "vpcgw-metrics-reader"},
				{"Service", "kube-system", "vpcgw-webhook-metrics"}, {"ClusterRole", "", "vpcgw-webhook-metrics-auth"}} {
				if m.find(o.kind, o.ns, o.name) != nil {
					t.Errorf("%s %s rendered for loopback-only metrics", o.kind, o.name)
				}
			}
		},
	}, {
		name: "metrics readers bound",
		args: []string{"--set", "controller.metricsReaders[0].name=prometheus-k8s", "--set", "controller.metricsReaders[0].namespace=monitoring"},
		check: func(t *testing.T, m manifest) {
			b := m.must(t, "ClusterRoleBinding", "", "vpcgw-metrics-reader")
			if got := fmt.Sprint(b.Object["subjects"], b.Object["roleRef"]); !strings.Contains(got, "name:prometheus-k8s namespace:monitoring") || !strings.Contains(got, "name:vpcgw-metrics-reader") {
				t.Errorf("metrics reader binding %s", got)
			}
		},
	}, {
		name: "webhook off, local transport",
		args: []string{"--set", "webhook.enabled=false", "--set", "transport=local"},
		check: func(t *testing.T, m manifest) {
			for _, kind := range []string{"ValidatingWebhookConfiguration", "Secret"} {
				if m.count(kind) != 0 {
					t.Errorf("%s rendered: %v", kind, m.names())
				}
			}
			if m.find("Role", "kube-system", "vpcgw-controller-exec") != nil {
				t.Errorf("pods/exec granted with the local transport: %v", m.names())
			}
			wantFlags(t, args(t, container(t, m.must(t, "Deployment", m.installNS(), "vpcgw-controller"), "controller")), map[string]string{"transport": "local"})
		},
	}, {
		// Who may call the webhook (SPEC N8): the NetworkPolicy selects exactly the webhook's Pods
		// and opens its HTTPS port to the given peers only, its health port to the probes.
		name: "webhook network policy",
		args: []string{"--set", "webhook.networkPolicy.enabled=true", "--set", "webhook.networkPolicy.from[0].ipBlock.cidr=192.0.2.10/32"},
		check: func(t *testing.T, m manifest) {
			np := m.must(t, "NetworkPolicy", m.installNS(), "vpcgw-webhook")
			sel, _, _ := unstructured.NestedStringMap(np.Object, "spec", "podSelector", "matchLabels")
			podLabels, _, _ := unstructured.NestedStringMap(m.must(t, "Deployment", m.installNS(), "vpcgw-webhook").Object, "spec", "template", "metadata", "labels")
			for k, v := range sel {
				if podLabels[k] != v {
					t.Errorf("the policy selects %s=%s, the webhook's Pods have %v", k, v, podLabels)
				}
			}
			if m.find("NetworkPolicy", m.installNS(), "vpcgw-webhook") == nil || sel["app.kubernetes.io/component"] != "webhook" {
				t.Errorf("the policy must select the webhook's Pods only: %v", sel)
			}
			ingress, _, _ := unstructured.NestedSlice(np.Object, "spec", "ingress")
			// The metrics port is open too: each scrape is authenticated and authorized by the API server.
			if got := fmt.Sprint(ingress); len(ingress) != 2 ||
				got != "[map[from:[map[ipBlock:map[cidr:192.0.2.10/32]]] ports:[map[port:9443 protocol:TCP]]] map[ports:[map[port:8081 protocol:TCP] map[port:8443 protocol:TCP]]]]" {
				t.Errorf("ingress %s", got)
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			m := manifest(render(t, tc.args...))
			tc.check(t, m)
			checkCommon(t, m)
			if cfg == nil {
				testutil.Skip(t, "the renderings are checked; applying them needs the API server: "+envSkip)
			}
			for _, ns := range tc.nsToCreate {
				createNamespace(t, ns)
			}
			if strings.Contains(strings.Join(tc.args, " "), "certManager") {
				installCertManagerCRDs(t)
			}
			apply(t, m, true)
			checkKubeOVNCRDsUnchanged(t, "the chart ("+tc.name+") applied")
		})
	}
}

// checkCommon: what every rendering must satisfy.
func checkCommon(t *testing.T, m manifest) {
	t.Helper()
	// The controller's own flag definitions and startup validation (SPEC F2) accept the gates, the
	// ledger form and kube-ovn's namespace.
	for _, d := range m {
		if d.GetKind() != "Deployment" || d.GetName() != "vpcgw-controller" {
			continue
		}
		fs := goflag.NewFlagSet("controller", goflag.ContinueOnError)
		var f controller.Flags
		f.Register(fs)
		var gates []string
		for _, a := range args(t, container(t, d, "controller")) {
			if strings.HasPrefix(a, "--enable-") || strings.HasPrefix(a, "--ledger=") || strings.HasPrefix(a, "--kube-ovn-namespace=") {
				gates = append(gates, a)
			}
		}
		if err := fs.Parse(gates); err != nil {
			t.Errorf("controller flags %v: %v", gates, err)
		} else if err := f.Validate(); err != nil {
			t.Errorf("controller flags %v refused: %v", gates, err)
		}
		// Whatever the values, the controller's identity is bounded by its admission policy (SPEC N5).
		sa, _, _ := unstructured.NestedString(d.Object, "spec", "template", "spec", "serviceAccountName")
		checkControllerPolicy(t, m, "system:serviceaccount:"+d.GetNamespace()+":"+sa)
	}
	for _, o := range m {
		if o.GetKind() == "ClusterRole" || o.GetKind() == "Role" {
			for k, verbs := range rules(t, o) {
				if strings.Contains(k, "*") || slices.Contains(verbs, "*") {
					t.Errorf("%s %s grants a wildcard: %s %v", o.GetKind(), o.GetName(), k, verbs)
				}
				if o.GetKind() == "ClusterRole" && k == "/pods/exec" {
					t.Errorf("ClusterRole %s grants pods/exec cluster-wide", o.GetName())
				}
				if k == "/secrets" {
					t.Errorf("%s %s reads Secrets", o.GetKind(), o.GetName())
				}

			}
		}
		// CRDs: at most reading named ones, never writing any (SPEC K1).
		if o.GetKind() == "ClusterRole" || o.GetKind() == "Role" {
			rs, _, _ := unstructured.NestedSlice(o.Object, "rules")
			for _, r := range rs {
				rm := r.(map[string]any)
				if !strings.Contains(fmt.Sprint(rm["resources"]), "customresourcedefinitions") && !strings.Contains(fmt.Sprint(rm["apiGroups"]), "apiextensions") {
					continue
				}
				if fmt.Sprint(rm["verbs"]) != "[get]" || len(fmt.Sprint(rm["resourceNames"])) <= len("[]") {
					t.Errorf("%s %s may %v CRDs %v: only get of named ones is allowed (SPEC K1)", o.GetKind(), o.GetName(), rm["verbs"], rm["resourceNames"])
				}
			}
		}
		if ns := o.GetNamespace(); ns == "" && namespaced(o.GetKind()) {
			t.Errorf("%s %s has no namespace", o.GetKind(), o.GetName())
		}
		// Never a kube-ovn CRD, whatever the values (SPEC K1).
		if group, _, _ := unstructured.NestedString(o.Object, "spec", "group"); o.GetKind() == "CustomResourceDefinition" && (group != "vpcgw.io" || strings.HasSuffix(o.GetName(), ".kubeovn.io")) {
			t.Errorf("rendering holds CRD %s of group %q; only vpcgw.io's are vpcgw's", o.GetName(), group)
		}
	}
}

// checkKubeOVNExcluded: kube-ovn-controller's requests never reach any vpcgw webhook (SPEC K7),
// and vpcgw's IptablesDnatRule records are selected by their label, which kube-ovn's CRD keeps
// (spec.type is pruned by kube-ovn v1.16.2, SPEC W4).
func checkKubeOVNExcluded(t *testing.T, m manifest, kubeOVNUser string) {
	t.Helper()
	vwc := m.must(t, "ValidatingWebhookConfiguration", "", "vpcgw")
	hooks, _, _ := unstructured.NestedSlice(vwc.Object, "webhooks")
	if len(hooks) == 0 {
		t.Fatal("no webhooks")
	}
	for _, h := range hooks {
		hm := h.(map[string]any)
		mcs, _, _ := unstructured.NestedSlice(hm, "matchConditions")
		excluded, byLabel := false, false
		for _, mc := range mcs {
			e := strings.Join(strings.Fields(mc.(map[string]any)["expression"].(string)), " ")
			excluded = excluded || e == "request.userInfo.username != '"+kubeOVNUser+"'"
			byLabel = byLabel || strings.Contains(e, "'ovn.kubernetes.io/nftable-lb-svc-record' in object.metadata.labels") &&
				strings.Contains(e, "object.metadata.labels['ovn.kubernetes.io/nftable-lb-svc-record'] == 'true'") &&
				strings.Contains(e, "oldObject.metadata.labels['ovn.kubernetes.io/nftable-lb-svc-record'] == 'true'")
			if strings.Contains(e, "spec.type") {
				t.Errorf("webhook %s selects by spec.type, which kube-ovn's CRD prunes: %s", hm["name"], e)
			}
		}
		if !excluded {
			t.Errorf("webhook %s does not exclude kube-ovn-controller (%s): %v", hm["name"], kubeOVNUser, mcs)
		}
		if hm["name"] == "iptables-dnat-rules.vpcgw.kubeovn.io" && !byLabel {
			t.Errorf("webhook %s does not select records by the record label: %v", hm["name"], mcs)
		}
	}
}

func namespaced(kind string) bool {
	return !slices.Contains([]string{"ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "ValidatingWebhookConfiguration",
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "Namespace"}, kind)
}

// checkWebhook checks the webhook's objects for one certificate mode.
func checkWebhook(t *testing.T, m manifest, mode string) {
	t.Helper()
	d := m.must(t, "Deployment", m.installNS(), "vpcgw-webhook")
	c := container(t, d, "webhook")
	as := args(t, c)
	if as[0] != "webhook" {
		t.Errorf("webhook args start with %q", as[0])
	}
	ns := m.installNS()
	user := "system:serviceaccount:" + ns + ":vpcgw-controller"
	wantFlags(t, as, map[string]string{"controller-user": user, "port": "9443", "cert-dir": "/var/run/vpcgw/webhook-certs", "health-probe-bind-address": ":8081",
		"kube-ovn-user": "system:serviceaccount:kube-system:ovn", "metrics-bind-address": ":8443", "metrics-secure": "true"})
	m.must(t, "Service", m.installNS(), "vpcgw-webhook")
	m.must(t, "Service", m.installNS(), "vpcgw-webhook-metrics")
	m.must(t, "PodDisruptionBudget", m.installNS(), "vpcgw-webhook")
	wantRules(t, m.must(t, "ClusterRole", "", "vpcgw-webhook"), map[string][]string{
		"/services": {"list", "watch"}, "kubeovn.io/iptables-eips": {"list", "watch"}, "kubeovn.io/iptables-dnat-rules": {"list", "watch"},
		"vpcgw.io/servicerecords": {"list", "watch"}, "kubeovn.io/subnets": {"list", "watch"},
		"kubeovn.io/vpc-nat-gateways": {"list", "watch"}, "kubeovn.io/vpcs": {"list", "watch"},
		"kubeovn.io/iptables-fip-rules": {"list", "watch"},
	})
	vwc := m.must(t, "ValidatingWebhookConfiguration", "", "vpcgw")
	hooks, _, _ := unstructured.NestedSlice(vwc.Object, "webhooks")
	var caBundles []string
	registered := map[string]string{}
	for _, h := range hooks {
		hm := h.(map[string]any)
		ca, _, _ := unstructured.NestedString(hm, "clientConfig", "caBundle")
		caBundles = append(caBundles, ca)
		svc, _, _ := unstructured.NestedMap(hm, "clientConfig", "service")
		if svc["name"] != "vpcgw-webhook" || svc["namespace"] != m.installNS() {
			t.Errorf("webhook %s calls %v", hm["name"], svc)
		}
		rs, _, _ := unstructured.NestedSlice(hm, "rules")
		for _, r := range rs {
			rm := r.(map[string]any)
			registered[fmt.Sprint(rm["resources"])] = fmt.Sprint(rm["operations"])
		}
		if mc := fmt.Sprint(hm["matchConditions"]); slices.Contains([]any{"services.vpcgw.kubeovn.io", "servicerecords.vpcgw.kubeovn.io", "iptables-dnat-rules.vpcgw.kubeovn.io"}, hm["name"]) && !strings.Contains(mc, "'"+user+"'") {
			t.Errorf("webhook %s does not exclude the controller: %s", hm["name"], mc)
		}
	}
	// SPEC W7: exactly these operations.
	want := map[string]string{"[services]": "[CREATE UPDATE]", "[servicerecords]": "[CREATE UPDATE DELETE]",
		"[iptables-dnat-rules iptables-dnat-rules/status]": "[CREATE UPDATE DELETE]", "[iptables-eips]": "[DELETE]", "[vpc-nat-gateways]": "[DELETE]"}
	if fmt.Sprint(registered) != fmt.Sprint(want) {
		t.Errorf("registered %v, want %v", registered, want)
	}
	secret := m.find("Secret", m.installNS(), "vpcgw-webhook-cert")
	inject := vwc.GetAnnotations()["cert-manager.io/inject-ca-from"]
	switch mode {
	case "generated":
		if secret == nil {
			t.Fatal("no generated Secret vpcgw-webhook-cert")
		}
		ca, _, _ := unstructured.NestedString(secret.Object, "data", "ca.crt")
		for _, b := range caBundles {
			if b == "" || b != ca {
				t.Errorf("caBundle %.20q... is not the Secret's ca.crt %.20q...", b, ca)
			}
		}
		pem, err := base64.StdEncoding.DecodeString(ca)
		if err != nil || !strings.Contains(string(pem), "BEGIN CERTIFICATE") {
			t.Errorf("ca.crt is not a base64 PEM certificate: %v", err)
		}
		if inject != "" || m.count("Certificate") != 0 || m.count("Issuer") != 0 {
			t.Errorf("cert-manager objects rendered without cert-manager")
		}
	case "cert-manager":
		if secret != nil {
			t.Error("Secret rendered although cert-manager writes it")
		}
		if inject != ns+"/vpcgw-webhook" {
			t.Errorf("inject-ca-from = %q", inject)
		}
		cert := m.must(t, "Certificate", m.installNS(), "vpcgw-webhook")
		if s, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName"); s != "vpcgw-webhook-cert" {
			t.Errorf("Certificate writes %q", s)
		}
		dns, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
		if !slices.Contains(dns, "vpcgw-webhook."+ns+".svc") {
			t.Errorf("dnsNames = %v", dns)
		}
		m.must(t, "Issuer", m.installNS(), "vpcgw-selfsigned")
		for _, b := range caBundles {
			if b != "" {
				t.Error("caBundle set although cert-manager injects it")
			}
		}
	case "existing":
		if secret != nil || inject != "" {
			t.Error("Secret or injection rendered for an existing certificate")
		}
		for _, b := range caBundles {
			if b != "Q0E=" {
				t.Errorf("caBundle = %q, want the given one", b)
			}
		}
	}
}

// TestChartRejects: the chart refuses what the controller would refuse at startup (SPEC F2),
// with the controller's words, and malformed values.
func TestChartRejects(t *testing.T) {
	helmBin(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		// The schema refuses a conflict of explicit keys (so that helm lint --strict does too),
		// naming the key to set; the templates refuse the rest with the whole reason.
		{[]string{"--set", "features.enableGwNftableServiceClusterIp=true"}, "at '/enableLb': value must be one of false"},
		{[]string{"--set", "func.ENABLE_GW_NFTABLE_SVC_CLUSTER_IP=true", "--set", "func.ENABLE_LB=true"}, "--enable-gw-nftable-svc-cluster-ip and --enable-lb"},
		{[]string{"--set", "features.enableGwNftableLoadbalancerService=true", "--set", "enableLbSvc=true"}, "at '/features/enableGwNftableLoadbalancerService': value must be one of false"},
		// The LoadBalancer gate is on by default: kube-ovn's LB pods beside it are refused, naming the switch.
		{[]string{"--set", "enableLbSvc=true"}, "at '/features/enableGwNftableLoadbalancerService': value must be one of false"},
		{[]string{"--set-string", "func.ENABLE_LB_SVC=true"}, "--enable-gw-nftable-lb-svc and --enable-lb-svc both claim LoadBalancer ingress: turn one off (the LoadBalancer gate is on unless features.enableGwNftableLoadbalancerService=false)"},
		{[]string{"--set", "func.ENABLE_LB_SVC=true"}, "--enable-gw-nftable-lb-svc and --enable-lb-svc both claim"},
		{[]string{"--set", "enableLbSvc=true", "--set", "enableLb=false", "--set", "features.enableGwNftableLoadbalancerService=false"}, "--enable-lb-svc needs ClusterIPs to be served"},
		// The schema refuses these first (TestChartSchemaRejects); the templates' own checks stay
		// for a render that skips it.
		{[]string{"--set-string", "features.enableGwNftableLoadbalancerService=yes"}, "/features/enableGwNftableLoadbalancerService': value must be one of"},
		{[]string{"--skip-schema-validation", "--set-string", "features.enableGwNftableLoadbalancerService=yes"}, "must be true or false"},
		{[]string{"--set", "transport=ssh"}, "/transport': value must be one of 'exec', 'local'"},
		{[]string{"--skip-schema-validation", "--set", "transport=ssh"}, "transport must be exec or local"},
		{[]string{"--set", "controller.replicas=2", "--set", "controller.leaderElect=false"}, "needs leader election"},
		{[]string{"--set", "webhook.certs.existingSecret=true"}, "needs webhook.certs.caBundle"},
		{[]string{"--set", "ledger=configmap"}, "/ledger': value must be one of 'service-record', 'iptables-dnat-rule'"},
		{[]string{"--skip-schema-validation", "--set", "ledger=configmap"}, "ledger must be service-record or iptables-dnat-rule"},
		{[]string{"--set", "kubeOvn.namespace=Kube_OVN"}, "kubeOvn.namespace must be a namespace name"},
		// Quoted into CEL: nothing may end the string.
		{[]string{"--set-string", "kubeOvn.serviceAccount=ovn' || true || '"}, "kubeOvn.serviceAccount must be kube-ovn-controller's user name"},
		{[]string{"--set", "kubeOvn.serviceAccount="}, "kubeOvn.serviceAccount must be"},
		// No cluster-wide pods/exec, and the old key is not silently ignored (SPEC N5).
		{[]string{"--set", "extraGatewayNamespaces={*}"}, "extraGatewayNamespaces must list namespace names"},
		{[]string{"--set", "gatewayNamespaces={kube-system}"}, "gatewayNamespaces is gone"},
		// A policy that lets nobody in would fail every admission call.
		{[]string{"--set", "webhook.networkPolicy.enabled=true"}, "webhook.networkPolicy.from must list who may call the webhook"},
	} {
		_, err := renderErr(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("helm template %v: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}

// TestChartLints: helm lint --strict passes.
func TestChartLints(t *testing.T) {
	out, err := exec.Command(helmBin(t), "lint", "--strict", chartDir).CombinedOutput()
	if err != nil {
		t.Fatalf("helm lint --strict: %v\n%s", err, out)
	}
}

// TestChartCRDsAreTheGeneratedOnes: the chart's CRDs are exactly vpcgw's own generated ones
// (config/crd/vpcgw.io_*.yaml), byte for byte, and none of kube-ovn's (SPEC K1).
func TestChartCRDsAreTheGeneratedOnes(t *testing.T) {
	want, _ := filepath.Glob("../config/crd/vpcgw.io_*.yaml")
	got, _ := filepath.Glob(chartDir + "/files/crds/*.yaml")
	base := func(ps []string) []string {
		var out []string
		for _, p := range ps {
			out = append(out, filepath.Base(p))
		}
		return out
	}
	if !slices.Equal(base(want), []string{"vpcgw.io_servicerecords.yaml"}) || !slices.Equal(base(got), base(want)) {
		t.Fatalf("chart has %v, config/crd has vpcgw's %v; want vpcgw.io_servicerecords.yaml in both", base(got), base(want))
	}
	for _, w := range want {
		a, err1 := os.ReadFile(w)
		b, err2 := os.ReadFile(filepath.Join(chartDir, "files/crds", filepath.Base(w)))
		if err := errors.Join(err1, err2); err != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs from the chart's copy (%v): run cp config/crd/vpcgw.io_*.yaml deploy/helm/vpcgw/files/crds/", w, err)
		}
	}
}

// TestPlainManifestsUpToDate: deploy/manifests/vpcgw.yaml is the chart rendered as its header says.
func TestPlainManifestsUpToDate(t *testing.T) {
	h := helmBin(t)
	cmd := exec.Command("bash", "manifests/generate.sh", "-")
	cmd.Env = append(os.Environ(), "HELM="+h)
	want, err := cmd.Output()
	if err != nil {
		t.Fatalf("manifests/generate.sh: %v", err)
	}
	got, err := os.ReadFile("manifests/vpcgw.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("deploy/manifests/vpcgw.yaml is stale: run deploy/manifests/generate.sh")
	}
	m := manifest(decode(t, got))
	// The plain manifests serve LoadBalancer Services, as the chart does by default (SPEC O4).
	wantFlags(t, args(t, container(t, m.must(t, "Deployment", m.installNS(), "vpcgw-controller"), "controller")), map[string]string{
		"enable-gw-nftable-lb-svc": "true", "enable-gw-nftable-svc-cluster-ip": "false", "enable-lb": "true", "enable-lb-svc": "false"})
	checkWebhook(t, m, "cert-manager")
	checkCommon(t, m)
	checkNoKubeOVNCRDs(t, m, true)
	checkKubeOVNExcluded(t, m, "system:serviceaccount:kube-system:ovn")
	if cfg == nil {
		testutil.Skip(t, "the manifests are checked; applying them needs the API server: "+envSkip)
	}
	installCertManagerCRDs(t)
	createNamespace(t, m.installNS()) // the manifests' Namespace is there, but a dry run does not create it
	apply(t, m, true)
	checkKubeOVNCRDsUnchanged(t, "deploy/manifests/vpcgw.yaml applied")
}

// TestRBACJustified: every verb of every rule in the chart's RBAC templates is named in the comment
// above its rule, next to the code that needs it.
func TestRBACJustified(t *testing.T) {
	verbsRe := regexp.MustCompile(`^\s*verbs:\s*\[(.*)\]`)
	justRe := regexp.MustCompile(`^\s*#\s*([a-z]+(?:,\s*[a-z]+)*):`)
	for _, f := range []string{"rbac-controller.yaml", "rbac-view.yaml", "webhook.yaml"} {
		data, err := os.ReadFile(filepath.Join(chartDir, "templates", f))
		if err != nil {
			t.Fatal(err)
		}
		justified := map[string]bool{}
		cites := false
		for i, line := range strings.Split(string(data), "\n") {
			if m := justRe.FindStringSubmatch(line); m != nil {
				for _, v := range strings.Split(m[1], ",") {
					justified[strings.TrimSpace(v)] = true
				}
			}
			if strings.Contains(line, "#") && (strings.Contains(line, "internal/") || strings.Contains(line, "controller-runtime") || strings.Contains(line, "client-go")) {
				cites = true
			}
			if m := verbsRe.FindStringSubmatch(line); m != nil {
				for _, v := range strings.Split(m[1], ",") {
					if v = strings.TrimSpace(v); !justified[v] || !cites {
						t.Errorf("%s:%d: verb %q has no justification naming the code in the comment above its rule", f, i+1, v)
					}
				}
				justified, cites = map[string]bool{}, false
			}
			if strings.HasPrefix(strings.TrimSpace(line), "---") {
				justified, cites = map[string]bool{}, false
			}
		}
	}
}

// apply server-side applies objects: CRDs for real first (and waits until they are served), then
// the rest, for real or as a server-side dry run.
func apply(t *testing.T, objs []*unstructured.Unstructured, dryRun bool) {
	t.Helper()
	var crds []string
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" {
			applyOne(t, o, false)
			crds = append(crds, o.GetName())
		}
	}
	for _, name := range crds {
		waitEstablished(t, name)
	}
	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" {
			applyOne(t, o, dryRun)
		}
	}
}

func applyOne(t *testing.T, o *unstructured.Unstructured, dryRun bool) {
	t.Helper()
	opts := []client.PatchOption{client.FieldOwner("vpcgw-deploy-test"), client.ForceOwnership}
	if dryRun {
		opts = append(opts, client.DryRunAll)
	}
	obj := o.DeepCopy()
	//nolint:staticcheck // server-side apply of unstructured objects as they were rendered
	if err := k8s.Patch(context.Background(), obj, client.Apply, opts...); err != nil {
		t.Fatalf("applying %s %s/%s (dry run %v): %v", o.GetKind(), o.GetNamespace(), o.GetName(), dryRun, err)
	}
}

func waitEstablished(t *testing.T, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var crd apiextensionsv1.CustomResourceDefinition
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("apiextensions.k8s.io/v1")
		u.SetKind("CustomResourceDefinition")
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, u); err != nil {
			return false, nil
		}
		if err := runtimeFromUnstructured(u, &crd); err != nil {
			return false, err
		}
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("CRD %s not established: %v", name, err)
	}
}

func createNamespace(t *testing.T, name string) {
	t.Helper()
	ns := &unstructured.Unstructured{}
	ns.SetAPIVersion("v1")
	ns.SetKind("Namespace")
	ns.SetName(name)
	if err := k8s.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// installCertManagerCRDs installs stand-ins for cert-manager's Issuer and Certificate CRDs
// (cert-manager itself is not available here), so that the chart's objects can be applied.
func installCertManagerCRDs(t *testing.T) {
	t.Helper()
	for _, kind := range []string{"Issuer", "Certificate"} {
		plural := strings.ToLower(kind) + "s"
		crd := map[string]any{
			"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
			"metadata": map[string]any{"name": plural + ".cert-manager.io"},
			"spec": map[string]any{
				"group": "cert-manager.io", "scope": "Namespaced",
				"names": map[string]any{"kind": kind, "listKind": kind + "List", "plural": plural, "singular": strings.ToLower(kind)},
				"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
					"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
			},
		}
		u := &unstructured.Unstructured{Object: crd}
		applyOne(t, u, false)
		waitEstablished(t, u.GetName())
	}
}

func runtimeFromUnstructured(u *unstructured.Unstructured, into any) error {
	data, err := u.MarshalJSON()
	if err != nil {
		return err
	}
	return yaml.Unmarshal(data, into)
}

// TestChartWebhookIsTheShippedOne: the chart's ValidatingWebhookConfiguration, rendered in
// kube-system, registers exactly what deploy/webhook ships (same hooks, rules, policies, timeouts,
// match conditions), so the two cannot drift apart.
func TestChartWebhookIsTheShippedOne(t *testing.T) {
	// deploy/webhook is for vpcgw's own namespace, the default install's (the last --namespace wins).
	m := manifest(render(t, "--namespace", "vpcgw-system", "--set", "webhook.certManager.enabled=true"))
	var got admissionregistrationv1.ValidatingWebhookConfiguration
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m.must(t, "ValidatingWebhookConfiguration", "", "vpcgw").Object, &got); err != nil {
		t.Fatal(err)
	}
	want, err := shippedwebhook.Configuration()
	if err != nil {
		t.Fatal(err)
	}
	norm := func(c *admissionregistrationv1.ValidatingWebhookConfiguration) string {
		var parts []string
		for _, h := range c.Webhooks {
			h.ClientConfig.CABundle = nil
			for i := range h.MatchConditions {
				h.MatchConditions[i].Expression = strings.Join(strings.Fields(h.MatchConditions[i].Expression), " ")
			}
			js, _ := json.Marshal(h)
			parts = append(parts, string(js))
		}
		return strings.Join(parts, "\n")
	}
	if g, w := norm(&got), norm(want); g != w {
		t.Errorf("chart's webhooks differ from deploy/webhook/validatingwebhookconfiguration.yaml:\n chart %s\n shipped %s", g, w)
	}
	if got.Annotations["cert-manager.io/inject-ca-from"] != want.Annotations["cert-manager.io/inject-ca-from"] {
		t.Errorf("inject-ca-from %q, shipped %q", got.Annotations["cert-manager.io/inject-ca-from"], want.Annotations["cert-manager.io/inject-ca-from"])
	}
}
