package deploy

// covers: F4, O4, O2, T2, R1, R3, K1, K7, N5

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/controller"
	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/status"
	"github.com/vpcgw/vpcgw/internal/transport"
	"github.com/vpcgw/vpcgw/internal/transport/agenttest"
)

// KubectlEnv names the kubectl binary for the install script's apply test (default: kubectl on PATH).
const KubectlEnv = "VPCGW_KUBECTL"

const controllerUser = "system:serviceaccount:kube-system:vpcgw-controller"

// installScript runs deploy/install.sh with args and the environment env (on top of PATH and
// HOME only, so that the caller's environment cannot leak into the test).
func installScript(t *testing.T, env map[string]string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command("bash", append([]string{"install.sh"}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "HELM=" + helmBin(t)}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// TestInstallScriptDryRun: --dry-run prints the manifests, honouring the gate variables, and the
// API server accepts them.
func TestInstallScriptDryRun(t *testing.T) {
	for _, tc := range []struct {
		name  string
		env   map[string]string
		flags map[string]string
		check func(t *testing.T, m manifest)
	}{{
		// The script serves LoadBalancer Services by default, as the chart does (SPEC O4, F4).
		name: "defaults",
		flags: map[string]string{"enable-gw-nftable-lb-svc": "true", "enable-gw-nftable-svc-cluster-ip": "false", "enable-lb": "true", "transport": "exec", "leader-elect": "true",
			"ledger": "service-record", "kube-ovn-namespace": "kube-system"},
		check: func(t *testing.T, m manifest) {
			// vpcgw's own CRD, and never kube-ovn's (SPEC K1).
			checkNoKubeOVNCRDs(t, m, true)
			checkWebhook(t, m, "generated")
		},
	}, {
		name: "both gates, replicas 2, gateway namespaces, OVN NB",
		env: map[string]string{"ENABLE_GW_NFTABLE_LB_SVC": "true", "ENABLE_GW_NFTABLE_SVC_CLUSTER_IP": "true", "ENABLE_LB": "false",
			"CONTROLLER_REPLICAS": "2", "EXTRA_GATEWAY_NAMESPACES": "gw-b", "OVN_NB_ADDR": "tcp:10.0.0.1:6641,tcp:10.0.0.2:6641",
			"IMAGE_REPOSITORY": "registry.local:5000/vpcgw", "IMAGE_TAG": "v0.1.0", "INSTALL_CRDS": "false"},
		flags: map[string]string{"enable-gw-nftable-lb-svc": "true", "enable-gw-nftable-svc-cluster-ip": "true", "enable-lb": "false",
			"leader-elect": "true", "ovn-nb-addr": "tcp:10.0.0.1:6641,tcp:10.0.0.2:6641"},
		check: func(t *testing.T, m manifest) {
			checkNoKubeOVNCRDs(t, m, false)
			for _, ns := range []string{"kube-system", "gw-b"} {
				m.must(t, "Role", ns, "vpcgw-controller-exec")
			}
			c := container(t, m.must(t, "Deployment", m.installNS(), "vpcgw-controller"), "controller")
			if c["image"] != "registry.local:5000/vpcgw:v0.1.0" {
				t.Errorf("image = %v", c["image"])
			}
		},
	}, {
		name:  "LoadBalancer gate off beside kube-ovn's LB pods",
		env:   map[string]string{"ENABLE_GW_NFTABLE_LB_SVC": "false", "ENABLE_LB_SVC": "true"},
		flags: map[string]string{"enable-gw-nftable-lb-svc": "false", "enable-gw-nftable-svc-cluster-ip": "false", "enable-lb-svc": "true"},
		check: func(*testing.T, manifest) {},
	}, {
		// INSTALL_CRDS=auto once meant "kube-ovn's CRDs when missing"; now it is vpcgw's own only.
		name: "INSTALL_CRDS=auto, the seed's ledger, kube-ovn elsewhere",
		env: map[string]string{"INSTALL_CRDS": "auto", "LEDGER": "iptables-dnat-rule", "KUBE_OVN_NAMESPACE": "kube-ovn",
			"KUBE_OVN_SERVICE_ACCOUNT": "system:serviceaccount:kube-ovn:ovn"},
		flags: map[string]string{"ledger": "iptables-dnat-rule", "kube-ovn-namespace": "kube-ovn"},
		check: func(t *testing.T, m manifest) {
			checkNoKubeOVNCRDs(t, m, true)
			wantRules(t, m.must(t, "Role", "kube-ovn", "vpcgw-controller-kube-ovn-config"), map[string][]string{"/configmaps": {"get", "list", "watch"}, "apps/deployments": {"get", "list", "watch"}})
			checkKubeOVNExcluded(t, m, "system:serviceaccount:kube-ovn:ovn")
		},
	}, {
		name:  "cert-manager, namespace",
		env:   map[string]string{"CERT_MANAGER": "true", "NAMESPACE": "vpcgw-system", "ENABLE_GW_NFTABLE_LB_SVC": "true"},
		flags: map[string]string{"enable-gw-nftable-lb-svc": "true", "enable-gw-nftable-svc-cluster-ip": "false", "enable-lb": "true"},
		check: func(t *testing.T, m manifest) {
			m.must(t, "Certificate", "vpcgw-system", "vpcgw-webhook")
			vwc := m.must(t, "ValidatingWebhookConfiguration", "", "vpcgw")
			if got := vwc.GetAnnotations()["cert-manager.io/inject-ca-from"]; got != "vpcgw-system/vpcgw-webhook" {
				t.Errorf("inject-ca-from = %q", got)
			}
			// The controller runs in vpcgw-system; the gateways stay in kube-system.
			if rb := m.must(t, "RoleBinding", "kube-system", "vpcgw-controller-exec"); !strings.Contains(fmt.Sprint(rb.Object["subjects"]), "namespace:vpcgw-system") {
				t.Errorf("exec RoleBinding subjects = %v", rb.Object["subjects"])
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, err := installScript(t, tc.env, "--dry-run")
			if err != nil {
				t.Fatalf("install.sh --dry-run: %v\n%s", err, stderr)
			}
			m := manifest(decode(t, []byte(out)))
			ns := tc.env["NAMESPACE"]
			if ns == "" {
				ns = "vpcgw-system" // its own namespace by default (SPEC N5)
			}
			wantFlags(t, args(t, container(t, m.must(t, "Deployment", ns, "vpcgw-controller"), "controller")), tc.flags)
			tc.check(t, m)
			checkCommon(t, m)
			if cfg == nil {
				return
			}
			for _, n := range []string{ns, "gw-b", "kube-ovn"} {
				createNamespace(t, n)
			}
			if tc.env["CERT_MANAGER"] == "true" {
				installCertManagerCRDs(t)
			}
			apply(t, m, true)
		})
	}
}

// TestInstallScriptRejects: bad values stop the script before it renders or applies anything,
// and nothing in a value is ever run.
func TestInstallScriptRejects(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "pwned")
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"ENABLE_GW_NFTABLE_LB_SVC": "yes"}, "ENABLE_GW_NFTABLE_LB_SVC"},
		// The chart's schema refuses the conflicts, naming the key to set.
		{map[string]string{"ENABLE_GW_NFTABLE_SVC_CLUSTER_IP": "true"}, "at '/enableLb': value must be one of false"},
		// The LoadBalancer gate is on by default: beside kube-ovn's LB pods it must be turned off.
		{map[string]string{"ENABLE_LB_SVC": "true"}, "at '/features/enableGwNftableLoadbalancerService': value must be one of false"},
		{map[string]string{"NAMESPACE": "kube-system; touch " + marker}, "NAMESPACE"},
		{map[string]string{"IMAGE_REPOSITORY": "x\"\n  pwned: \"1"}, "IMAGE_REPOSITORY"},
		{map[string]string{"OVN_NB_ADDR": "tcp:$(touch " + marker + "):6641"}, "OVN_NB_ADDR"},
		{map[string]string{"EXTRA_GATEWAY_NAMESPACES": "gw-b,`touch " + marker + "`"}, "EXTRA_GATEWAY_NAMESPACES"},
		{map[string]string{"GATEWAY_NAMESPACES": "kube-system"}, "GATEWAY_NAMESPACES is gone"},
		{map[string]string{"LEDGER": "configmap"}, "LEDGER"},
		{map[string]string{"KUBE_OVN_NAMESPACE": "Kube_OVN"}, "KUBE_OVN_NAMESPACE"},
		// Quoted into the webhook's CEL expressions: nothing may end the string.
		{map[string]string{"KUBE_OVN_SERVICE_ACCOUNT": "ovn' || true || '"}, "KUBE_OVN_SERVICE_ACCOUNT"},
		// Whatever chart it renders, the script never applies a kubeovn.io CRD (SPEC K1).
		{map[string]string{"CHART": kubeOVNCRDChart(t)}, "contain kube-ovn's CRDs (subnets.kubeovn.io)"},
	} {
		out, stderr, err := installScript(t, tc.env, "--dry-run")
		if err == nil || !strings.Contains(stderr, tc.want) || out != "" {
			t.Errorf("install.sh %v: err %v, stdout %d bytes, stderr %q; want a failure naming %q and no output", tc.env, err, len(out), stderr, tc.want)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a value was executed")
	}
	if _, stderr, err := installScript(t, nil, "--frobnicate"); err == nil || !strings.Contains(stderr, "unknown argument") {
		t.Errorf("unknown argument accepted: %v %s", err, stderr)
	}
}

// kubeOVNCRDChart writes a chart that renders kube-ovn's Subnet CRD, as chart 0.1.0 did.
func kubeOVNCRDChart(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(dir, "templates"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "Chart.yaml"), []byte("apiVersion: v2\nname: old\nversion: 0.1.0\n"), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "templates", "crd.yaml"), []byte(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: subnets.kubeovn.io
spec:
  group: kubeovn.io
  names: {kind: Subnet, plural: subnets}
  scope: Cluster
  versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object}}}]
`), 0o600))
	return dir
}

// TestInstallScriptApply runs the script for real against the API server twice: the second run
// changes nothing (the webhook certificate is kept, the objects stay at their resourceVersion).
func TestInstallScriptApply(t *testing.T) {
	helmBin(t)
	needAPIServer(t)
	kubectl := kubectlBin(t)
	kubeconfig := kubeconfigFor(t, env)
	envs := map[string]string{"KUBECTL": kubectl, "KUBECONFIG": kubeconfig, "ROLLOUT_TIMEOUT": "0", "NAMESPACE": "vpcgw-install",
		"EXTRA_GATEWAY_NAMESPACES": "gw-install", "ENABLE_GW_NFTABLE_LB_SVC": "true"}
	run := func() {
		t.Helper()
		if _, stderr, err := installScript(t, envs); err != nil {
			t.Fatalf("install.sh: %v\n%s", err, stderr)
		}
	}
	run()
	ctx := context.Background()
	snapshot := func() map[string]string {
		out := map[string]string{}
		var sec corev1.Secret
		must(t, k8s.Get(ctx, types.NamespacedName{Namespace: "vpcgw-install", Name: "vpcgw-webhook-cert"}, &sec))
		out["secret"] = sec.ResourceVersion
		out["ca"] = string(sec.Data["ca.crt"])
		for _, name := range []string{"vpcgw-controller", "vpcgw-webhook"} {
			d := &unstructured.Unstructured{}
			d.SetAPIVersion("apps/v1")
			d.SetKind("Deployment")
			must(t, k8s.Get(ctx, types.NamespacedName{Namespace: "vpcgw-install", Name: name}, d))
			out[name] = d.GetResourceVersion()
			if name == "vpcgw-controller" {
				cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
				wantFlags(t, args(t, cs[0].(map[string]any)), map[string]string{"enable-gw-nftable-lb-svc": "true", "enable-gw-nftable-svc-cluster-ip": "false",
					"ledger": "service-record", "kube-ovn-namespace": "kube-system"})
			}
		}
		// vpcgw's own CRD is installed (and served) by the script.
		var crd apiextensionsv1.CustomResourceDefinition
		must(t, k8s.Get(ctx, types.NamespacedName{Name: "servicerecords.vpcgw.io"}, &crd))
		out["crd"] = crd.ResourceVersion
		vwc := &unstructured.Unstructured{}
		vwc.SetAPIVersion("admissionregistration.k8s.io/v1")
		vwc.SetKind("ValidatingWebhookConfiguration")
		must(t, k8s.Get(ctx, types.NamespacedName{Name: "vpcgw"}, vwc))
		out["vwc"] = vwc.GetResourceVersion()
		hooks, _, _ := unstructured.NestedSlice(vwc.Object, "webhooks")
		ca, _, _ := unstructured.NestedString(hooks[0].(map[string]any), "clientConfig", "caBundle")
		if ca == "" || !strings.Contains(out["ca"], "BEGIN CERTIFICATE") {
			t.Errorf("caBundle %q / ca.crt %q", ca, out["ca"])
		}
		return out
	}
	first := snapshot()
	// The webhook registered above would reject record and EIP writes of later tests in this
	// process (nothing serves it here): remove it at the end.
	t.Cleanup(func() {
		vwc := &unstructured.Unstructured{}
		vwc.SetAPIVersion("admissionregistration.k8s.io/v1")
		vwc.SetKind("ValidatingWebhookConfiguration")
		vwc.SetName("vpcgw")
		_ = k8s.Delete(context.Background(), vwc)
	})
	checkKubeOVNCRDsUnchanged(t, "install.sh")
	run()
	if second := snapshot(); fmt.Sprint(first) != fmt.Sprint(second) {
		t.Errorf("second install changed objects:\n first %v\nsecond %v", first, second)
	}
	checkKubeOVNCRDsUnchanged(t, "install.sh run again")
}

// TestControllerRBACSuffices applies the chart's RBAC for real and runs the real controller as its
// service account: it must elect itself leader, add the finalizer, write the records, program the
// gateway (checking pods/exec where the gateway pod runs) and publish the ingress, all with exactly
// the chart's permissions. SubjectAccessReviews then check what it must not be able to do.
func TestControllerRBACSuffices(t *testing.T) {
	helmBin(t)
	needAPIServer(t)
	createNamespace(t, "gw-rbac")
	m := manifest(render(t, "--no-hooks", "--set", "controller.replicas=2", "--set", "extraGatewayNamespaces={gw-rbac}", "--set", "webhook.enabled=false",
		"--set", "controller.statusReaders={system:authenticated}"))
	apply(t, m, false)
	checkKubeOVNCRDsUnchanged(t, "the chart applied")
	// The controller below runs bounded by its admission policy too (SPEC N5), as installed.
	waitControllerPolicy(t, true)

	for _, tc := range []struct {
		attrs authorizationv1.ResourceAttributes
		want  bool
	}{
		{authorizationv1.ResourceAttributes{Verb: "create", Resource: "pods", Subresource: "exec", Namespace: "gw-rbac"}, true},
		{authorizationv1.ResourceAttributes{Verb: "get", Resource: "pods", Subresource: "exec", Namespace: "kube-system"}, true},
		{authorizationv1.ResourceAttributes{Verb: "create", Resource: "pods", Subresource: "exec", Namespace: "default"}, false},
		{authorizationv1.ResourceAttributes{Verb: "patch", Resource: "services", Namespace: "anywhere"}, true},
		{authorizationv1.ResourceAttributes{Verb: "update", Resource: "services", Namespace: "anywhere"}, false},
		{authorizationv1.ResourceAttributes{Verb: "delete", Resource: "services", Namespace: "anywhere"}, false},
		{authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "kube-system"}, false},
		{authorizationv1.ResourceAttributes{Verb: "delete", Group: "kubeovn.io", Resource: "iptables-eips"}, false},
		{authorizationv1.ResourceAttributes{Verb: "update", Group: "kubeovn.io", Resource: "vpc-nat-gateways"}, false},
		// Leases by name only (SPEC N5): vpcgw's, never kube-controller-manager's or kube-scheduler's.
		{authorizationv1.ResourceAttributes{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system", Name: "vpcgw-controller"}, true},
		{authorizationv1.ResourceAttributes{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system", Name: "vpcgw-controller"}, true},
		{authorizationv1.ResourceAttributes{Verb: "create", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system"}, true},
		{authorizationv1.ResourceAttributes{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system", Name: "kube-controller-manager"}, false},
		{authorizationv1.ResourceAttributes{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system", Name: "kube-scheduler"}, false},
		{authorizationv1.ResourceAttributes{Verb: "patch", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system", Name: "vpcgw-controller"}, false},
		{authorizationv1.ResourceAttributes{Verb: "delete", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system", Name: "vpcgw-controller"}, false},
		{authorizationv1.ResourceAttributes{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "default", Name: "vpcgw-controller"}, false},
		// The gateway Pod's owner chain, read where the gateways run only.
		{authorizationv1.ResourceAttributes{Verb: "get", Group: "apps", Resource: "statefulsets", Namespace: "kube-system", Name: "vpc-nat-gw-gw1"}, true},
		{authorizationv1.ResourceAttributes{Verb: "get", Group: "apps", Resource: "statefulsets", Namespace: "default"}, false},
		{authorizationv1.ResourceAttributes{Verb: "update", Group: "apps", Resource: "statefulsets", Namespace: "kube-system"}, false},
		{authorizationv1.ResourceAttributes{Verb: "get", Resource: "pods", Namespace: "gw-rbac"}, true},
		{authorizationv1.ResourceAttributes{Verb: "get", Resource: "pods", Namespace: "default"}, false},
		// Secure metrics: it reviews scrapers' tokens and access.
		{authorizationv1.ResourceAttributes{Verb: "create", Group: "authentication.k8s.io", Resource: "tokenreviews"}, true},
		{authorizationv1.ResourceAttributes{Verb: "create", Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}, true},
		// The ledger (SPEC R6), the default form: ServiceRecords written; IptablesDnatRules of the
		// other form only read and released (SPEC N5).
		{authorizationv1.ResourceAttributes{Verb: "create", Group: "vpcgw.io", Resource: "servicerecords"}, true},
		{authorizationv1.ResourceAttributes{Verb: "patch", Group: "vpcgw.io", Resource: "servicerecords"}, true},
		{authorizationv1.ResourceAttributes{Verb: "delete", Group: "vpcgw.io", Resource: "servicerecords"}, true},
		{authorizationv1.ResourceAttributes{Verb: "get", Group: "vpcgw.io", Resource: "servicerecords"}, true},
		{authorizationv1.ResourceAttributes{Verb: "create", Group: "kubeovn.io", Resource: "iptables-dnat-rules"}, false},
		{authorizationv1.ResourceAttributes{Verb: "update", Group: "kubeovn.io", Resource: "iptables-dnat-rules", Subresource: "status"}, false},
		{authorizationv1.ResourceAttributes{Verb: "delete", Group: "kubeovn.io", Resource: "iptables-dnat-rules"}, true},
		// kube-ovn's Vpcs and its ConfigMap, read only and only in kube-ovn's namespace.
		{authorizationv1.ResourceAttributes{Verb: "watch", Group: "kubeovn.io", Resource: "vpcs"}, true},
		{authorizationv1.ResourceAttributes{Verb: "update", Group: "kubeovn.io", Resource: "vpcs"}, false},
		{authorizationv1.ResourceAttributes{Verb: "get", Resource: "configmaps", Namespace: "kube-system", Name: "ovn-vpc-nat-config"}, true},
		{authorizationv1.ResourceAttributes{Verb: "update", Resource: "configmaps", Namespace: "kube-system", Name: "ovn-vpc-nat-config"}, false},
		{authorizationv1.ResourceAttributes{Verb: "get", Resource: "configmaps", Namespace: "default"}, false},
		// That ConfigMap only (SPEC N5): its informer lists and watches it by name (field selector
		// metadata.name, which the API server authorizes as that resourceName).
		{authorizationv1.ResourceAttributes{Verb: "list", Resource: "configmaps", Namespace: "kube-system", Name: "ovn-vpc-nat-config"}, true},
		{authorizationv1.ResourceAttributes{Verb: "watch", Resource: "configmaps", Namespace: "kube-system", Name: "ovn-vpc-nat-config"}, true},
		{authorizationv1.ResourceAttributes{Verb: "list", Resource: "configmaps", Namespace: "kube-system"}, false},
		{authorizationv1.ResourceAttributes{Verb: "watch", Resource: "configmaps", Namespace: "kube-system"}, false},
		{authorizationv1.ResourceAttributes{Verb: "get", Resource: "configmaps", Namespace: "kube-system", Name: "kube-root-ca.crt"}, false},
		{authorizationv1.ResourceAttributes{Verb: "get", Resource: "configmaps", Namespace: "kube-system", Name: "ovn-config"}, false},
		// Its published status, ConfigMap vpcgw-controller in its namespace, and no other
		// ConfigMap there (SPEC O2, N5); create cannot be restricted by name.
		{authorizationv1.ResourceAttributes{Verb: "get", Resource: "configmaps", Namespace: "kube-system", Name: "vpcgw-controller"}, true},
		{authorizationv1.ResourceAttributes{Verb: "update", Resource: "configmaps", Namespace: "kube-system", Name: "vpcgw-controller"}, true},
		{authorizationv1.ResourceAttributes{Verb: "create", Resource: "configmaps", Namespace: "kube-system"}, true},
		{authorizationv1.ResourceAttributes{Verb: "delete", Resource: "configmaps", Namespace: "kube-system", Name: "vpcgw-controller"}, false},
		{authorizationv1.ResourceAttributes{Verb: "update", Resource: "configmaps", Namespace: "kube-system", Name: "kube-root-ca.crt"}, false},
		{authorizationv1.ResourceAttributes{Verb: "create", Resource: "configmaps", Namespace: "default"}, false},
		// No CRD, kube-ovn's least of all (SPEC K1).
		{authorizationv1.ResourceAttributes{Verb: "update", Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions", Name: "subnets.kubeovn.io"}, false},
		{authorizationv1.ResourceAttributes{Verb: "delete", Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions", Name: "vpc-nat-gateways.kubeovn.io"}, false},
	} {
		if got := allowed(t, controllerUser, tc.attrs); got != tc.want {
			t.Errorf("%s may %+v: %v, want %v", controllerUser, tc.attrs, got, tc.want)
		}
	}

	// With controller.statusReaders={system:authenticated} (the default is nobody, SPEC N8), any
	// authenticated user (a tenant running `kubectl vpcgw explain`) reads the controller's
	// status, that ConfigMap only (SPEC O2).
	for _, tc := range []struct {
		attrs authorizationv1.ResourceAttributes
		want  bool
	}{
		{authorizationv1.ResourceAttributes{Verb: "get", Resource: "configmaps", Namespace: "kube-system", Name: "vpcgw-controller"}, true},
		{authorizationv1.ResourceAttributes{Verb: "update", Resource: "configmaps", Namespace: "kube-system", Name: "vpcgw-controller"}, false},
		{authorizationv1.ResourceAttributes{Verb: "list", Resource: "configmaps", Namespace: "kube-system"}, false},
		{authorizationv1.ResourceAttributes{Verb: "get", Resource: "configmaps", Namespace: "kube-system", Name: "ovn-vpc-nat-config"}, false},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: "tenant", Groups: []string{"system:authenticated"}, ResourceAttributes: &tc.attrs}}
		must(t, k8s.Create(context.Background(), sar))
		if sar.Status.Allowed != tc.want {
			t.Errorf("an authenticated user may %+v: %v, want %v", tc.attrs, sar.Status.Allowed, tc.want)
		}
	}

	// The controller, as its service account, with vpcgw's own ledger (SPEC R6): it serves.
	t.Run("service-record", func(t *testing.T) { runControllerAsItsServiceAccount(t, "service-record", "sr") })

	// With the seed's ledger form the chart also grants reading kube-ovn's IptablesDnatRule CRD,
	// and the controller, reading it, refuses kube-ovn v1.16.2's schema, which prunes the record
	// fields (SPEC K1, R6), before writing anything.
	t.Run("iptables-dnat-rule", func(t *testing.T) {
		apply(t, manifest(render(t, "--no-hooks", "--set", "controller.replicas=2", "--set", "extraGatewayNamespaces={gw-rbac}", "--set", "webhook.enabled=false",
			"--set", "ledger=iptables-dnat-rule")), false)
		checkKubeOVNCRDsUnchanged(t, "the chart (ledger iptables-dnat-rule) applied")
		crd := func(name string) authorizationv1.ResourceAttributes {
			return authorizationv1.ResourceAttributes{Verb: "get", Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions", Name: name}
		}
		for name, want := range map[string]bool{"iptables-dnat-rules.kubeovn.io": true, "subnets.kubeovn.io": false, "servicerecords.vpcgw.io": false} {
			if got := allowed(t, controllerUser, crd(name)); got != want {
				t.Errorf("%s may get CRD %s: %v, want %v", controllerUser, name, got, want)
			}
		}
		as := rest.CopyConfig(cfg)
		as.Impersonate = rest.ImpersonationConfig{UserName: controllerUser, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		err := controller.Run(ctx, as, controller.Options{
			Flags:  controller.Flags{EnableGwNftableLbSvc: true, Ledger: "iptables-dnat-rule", KubeOVNNamespace: "kube-system"},
			Dialer: &checkingAgents{cfg: as}, MetricsAddr: "0", HealthAddr: "0",
		}, zap.New(zap.WriteTo(io.Discard)))
		if err == nil || !strings.Contains(err.Error(), "has no spec.type") || !strings.Contains(err.Error(), "use --ledger=service-record") {
			t.Errorf("controller with --ledger=iptables-dnat-rule on kube-ovn v1.16.2's CRD: %v, want a refusal naming the missing fields", err)
		}
	})
}

// runControllerAsItsServiceAccount runs the real controller with the chart's permissions only and
// waits until it served a Service end to end and released it again.
func runControllerAsItsServiceAccount(t *testing.T, ledger, short string) {
	ctx := context.Background()
	as := rest.CopyConfig(cfg)
	as.Impersonate = rest.ImpersonationConfig{UserName: controllerUser, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}}
	dialer := &checkingAgents{cfg: as}
	gw, ns, eipName := "rbac-gw-"+short, "rbac-svc-"+short, "rbac-eip-"+short
	createNamespace(t, ns)
	must(t, k8s.Create(ctx, &kubeovnv1.Subnet{ObjectMeta: metav1.ObjectMeta{Name: gw + "-subnet"},
		Spec: kubeovnv1.SubnetSpec{Vpc: gw + "-vpc", CIDRBlock: "10.9.1.0/24", Provider: "ovn"}}))
	// The Service's namespace is bound to the gateway's Vpc, as kube-ovn binds tenants (SPEC N1).
	must(t, k8s.Create(ctx, &kubeovnv1.Vpc{ObjectMeta: metav1.ObjectMeta{Name: gw + "-vpc"}, Spec: kubeovnv1.VpcSpec{Namespaces: []string{ns}}}))
	must(t, k8s.Create(ctx, &kubeovnv1.VpcNatGateway{ObjectMeta: metav1.ObjectMeta{Name: gw},
		Spec: kubeovnv1.VpcNatGatewaySpec{Vpc: gw + "-vpc", Subnet: gw + "-subnet", LanIP: "10.9.1.254"}}))
	// kube-ovn v1.16.2's VpcNatGateway has no spec.namespace: its pods run in kube-ovn's namespace,
	// owned by kube-ovn's StatefulSet (no kube-controller-manager here: the Pod is made by hand with
	// the owner reference the StatefulSet controller sets; the transport checks that chain).
	gwLabels := map[string]string{"app": model.GatewayAppPrefix + gw, model.LabelGatewayPod: "true"}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: model.GatewayAppPrefix + gw, Namespace: "kube-system", Labels: gwLabels},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: gwLabels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: gwLabels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "vpc-nat-gw", Image: "x"}}}}}}
	must(t, k8s.Create(ctx, sts))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "vpc-nat-gw-" + gw + "-0", Namespace: "kube-system",
		Labels: gwLabels,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts.Name, UID: sts.UID,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		Annotations: map[string]string{model.AnnotationGatewayPod: gw, model.AnnotationGwInit: "true", "ovn.kubernetes.io/ip_address": "10.9.1.254"}},
		Spec: corev1.PodSpec{NodeName: "n", Containers: []corev1.Container{{Name: "vpc-nat-gw", Image: "x"}}}}
	must(t, k8s.Create(ctx, pod))
	pod.Status.Phase = corev1.PodRunning
	must(t, k8s.Status().Update(ctx, pod))
	eip := &kubeovnv1.IptablesEIP{ObjectMeta: metav1.ObjectMeta{Name: eipName}, Spec: kubeovnv1.IptablesEIPSpec{NatGwDp: gw, V4ip: "172.19.0.10"}}
	must(t, k8s.Create(ctx, eip))
	eip.Status.Ready, eip.Status.IP = true, "172.19.0.10"
	must(t, k8s.Status().Update(ctx, eip))
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns,
		Annotations: map[string]string{model.AnnotationGateway: gw, model.AnnotationEIP: eipName}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, AllocateLoadBalancerNodePorts: ptr.To(false),
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}}}
	must(t, k8s.Create(ctx, svc))
	must(t, k8s.Create(ctx, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: ns,
		Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.9.1.10"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}}}))

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- controller.Run(runCtx, as, controller.Options{
			// The endpoint has no Pod (no kubelet here): an address inside the VPC's Subnet (SPEC N2).
			Flags:  controller.Flags{EnableGwNftableLbSvc: true, Ledger: ledger, KubeOVNNamespace: "kube-system", EndpointsWithoutPods: true},
			Dialer: dialer, MetricsAddr: "0", HealthAddr: "0",
			LeaderElection: true, LeaderElectionNamespace: "kube-system",
			// Its status, published as the chart's RBAC allows (SPEC O2).
			StatusNamespace: "kube-system", StatusHolder: "rbac-" + short, StatusMinInterval: 100 * time.Millisecond,
		}, zap.New(zap.WriteTo(io.Discard)))
	}()
	defer func() {
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("controller: %v", err)
		}
	}()

	owner := client.MatchingLabels{model.LabelRecordName: "web", model.LabelRecordNamespace: ns}
	// records returns how many records of the Service each form holds, and whether all are ready.
	records := func() (serviceRecords, dnatRules int, ready bool) {
		var srs vpcgwv1alpha1.ServiceRecordList
		must(t, k8s.List(ctx, &srs, owner))
		var drs kubeovnv1.IptablesDnatRuleList
		must(t, k8s.List(ctx, &drs, owner))
		ready = true
		for _, r := range srs.Items {
			ready = ready && r.Status.Ready
		}
		for _, r := range drs.Items {
			ready = ready && r.Status.Ready
		}
		return len(srs.Items), len(drs.Items), ready
	}
	eventually(t, "the Service served through the EIP by the controller running as its service account", func() bool {
		if err := dialer.failure(); err != nil {
			t.Fatalf("the controller could not reach the gateway: %v", err)
		}
		var cur corev1.Service
		must(t, k8s.Get(ctx, client.ObjectKeyFromObject(svc), &cur))
		srs, drs, ready := records()
		written := srs > 0 && drs == 0
		if ledger == "iptables-dnat-rule" {
			written = drs > 0 && srs == 0
		}
		ing := cur.Status.LoadBalancer.Ingress
		return slices.Contains(cur.Finalizers, model.Finalizer) && written && ready && len(ing) == 1 && ing[0].IP == "172.19.0.10"
	})
	eventually(t, "the controller's status published, naming the programmed gateway", func() bool {
		var cm corev1.ConfigMap
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: "kube-system", Name: status.ConfigMapName}, &cm); err != nil {
			return false
		}
		pub, err := status.Decode(cm.Data)
		return err == nil && pub.Holder == "rbac-"+short && pub.Gateways[gw].Generation > 0 && pub.Gates.Ledger == ledger
	})
	var lease coordinationv1.Lease
	must(t, k8s.Get(ctx, types.NamespacedName{Namespace: "kube-system", Name: "vpcgw-controller"}, &lease))
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Error("the leader election Lease has no holder")
	}
	if err := dialer.failure(); err != nil {
		t.Error(err)
	}

	// Deleting the Service releases it: records deleted, finalizer removed (T2).
	must(t, k8s.Delete(ctx, svc))
	eventually(t, "the Service released and gone", func() bool {
		var cur corev1.Service
		err := k8s.Get(ctx, client.ObjectKeyFromObject(svc), &cur)
		srs, drs, _ := records()
		return client.IgnoreNotFound(err) == nil && err != nil && srs == 0 && drs == 0
	})
}

func allowed(t *testing.T, user string, attrs authorizationv1.ResourceAttributes) bool {
	t.Helper()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"},
		ResourceAttributes: &attrs,
	}}
	must(t, k8s.Create(context.Background(), sar))
	return sar.Status.Allowed
}

// checkingAgents acknowledges every state like an agent would, after checking with a
// SelfSubjectAccessReview, as the controller, that it may exec into the instance's pod: that is
// what the exec transport needs in a cluster (envtest has no kubelet to exec into).
type checkingAgents struct {
	cfg  *rest.Config
	mu   sync.Mutex
	errs []error
}

func (a *checkingAgents) failure() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return errors.Join(a.errs...)
}

func (a *checkingAgents) Dial(ctx context.Context, inst transport.Instance) (*transport.Conn, error) {
	c, err := client.New(a.cfg, client.Options{})
	if err != nil {
		return nil, err
	}
	for _, verb := range []string{"create", "get"} {
		ssar := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Resource: "pods", Subresource: "exec", Namespace: inst.Namespace, Name: inst.Pod},
		}}
		if err := c.Create(ctx, ssar); err != nil {
			return nil, err
		}
		if !ssar.Status.Allowed {
			err := fmt.Errorf("the controller may not %s pods/exec on %s/%s", verb, inst.Namespace, inst.Pod)
			a.mu.Lock()
			a.errs = append(a.errs, err)
			a.mu.Unlock()
			return nil, err
		}
	}
	// What the exec transport checks before any exec, with the controller's own permissions: the
	// Pod is kube-ovn's StatefulSet's, in kube-ovn's namespace (kube-system here).
	cs, err := kubernetes.NewForConfig(a.cfg)
	if err != nil {
		return nil, err
	}
	if inst.WorkloadNamespace == "" {
		inst.WorkloadNamespace = "kube-system"
	}
	if err := (&transport.OwnerChainVerifier{Client: cs}).VerifyPod(ctx, inst, transport.DefaultExecContainer); err != nil {
		a.mu.Lock()
		a.errs = append(a.errs, err)
		a.mu.Unlock()
		return nil, err
	}
	conn, _ := agenttest.Pipe(nil)
	return conn, nil
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestInstallScriptDryRunPrintsNoSecret: --dry-run never prints a private key (the webhook's
// serving key, which the chart generates), with the generated certificate or cert-manager's.
//
// covers: O4, N6
func TestInstallScriptDryRunPrintsNoSecret(t *testing.T) {
	for _, env := range []map[string]string{nil, {"CERT_MANAGER": "true"}} {
		out, stderr, err := installScript(t, env, "--dry-run")
		if err != nil {
			t.Fatalf("install.sh --dry-run (%v): %v\n%s", env, err, stderr)
		}
		if strings.Contains(out, "PRIVATE KEY") {
			t.Errorf("install.sh --dry-run (%v) prints a PEM private key", env)
		}
		secrets := 0
		for _, o := range decode(t, []byte(out)) {
			if o.GetKind() != "Secret" {
				continue
			}
			secrets++
			data, _, _ := unstructured.NestedStringMap(o.Object, "data")
			for k, v := range data {
				b, err := base64.StdEncoding.DecodeString(v)
				if err != nil {
					t.Errorf("Secret %s data %s is not base64: %v", o.GetName(), k, err)
				}
				if strings.Contains(string(b), "PRIVATE KEY") {
					t.Errorf("install.sh --dry-run (%v) prints Secret %s's %s, a private key", env, o.GetName(), k)
				}
			}
			if _, ok := data["tls.key"]; !ok && o.Object["type"] == "kubernetes.io/tls" {
				t.Errorf("Secret %s lost its tls.key: the dry run's output must still apply as a TLS Secret", o.GetName())
			}
		}
		if env == nil && secrets == 0 {
			t.Error("the default dry run renders no Secret: the test checks nothing")
		}
	}
}
