package deploy

// covers: K1, O4
//
// Without kube-ovn there is nothing for vpcgw to work with, and installing kube-ovn's CRDs is
// kube-ovn's job: the install script refuses before it creates anything and the chart's install
// (lookup) fails, each saying to install kube-ovn first. Run on an API server of its own that
// starts without kube-ovn's CRDs.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/vpcgw/vpcgw/internal/testutil"
)

// bareAPIServer is a real API server of its own, without kube-ovn's CRDs.
type bareAPIServer struct {
	client     client.Client
	kubeconfig string
}

func startBareAPIServer(t *testing.T) *bareAPIServer {
	t.Helper()
	e := &envtest.Environment{}
	c, err := e.Start()
	if err != nil {
		t.Fatalf("starting a second API server: %v", err)
	}
	t.Cleanup(func() { _ = e.Stop() })
	scheme := runtime.NewScheme()
	must(t, clientgoscheme.AddToScheme(scheme))
	must(t, apiextensionsv1.AddToScheme(scheme))
	cl, err := client.New(c, client.Options{Scheme: scheme})
	must(t, err)
	return &bareAPIServer{client: cl, kubeconfig: kubeconfigFor(t, e)}
}

// kubeconfigFor writes a kubeconfig of a cluster admin of e (for helm and kubectl).
func kubeconfigFor(t *testing.T, e *envtest.Environment) string {
	t.Helper()
	user, err := e.AddUser(envtest.User{Name: "installer", Groups: []string{"system:masters"}}, nil)
	must(t, err)
	kc, err := user.KubeConfig()
	must(t, err)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	must(t, os.WriteFile(path, kc, 0o600))
	return path
}

func kubectlBin(t *testing.T) string {
	t.Helper()
	if k := os.Getenv(KubectlEnv); k != "" {
		return k
	}
	k, err := exec.LookPath("kubectl")
	if err != nil {
		testutil.Skip(t, "kubectl not found: set "+KubectlEnv+" or put kubectl on PATH")
	}
	return k
}

func TestRefusesWithoutKubeOVN(t *testing.T) {
	helmBin(t)
	needAPIServer(t)
	kubectl := kubectlBin(t)
	bare := startBareAPIServer(t)
	ctx := context.Background()

	// The install script: refused, with the message, before it creates anything.
	out, stderr, err := installScript(t, map[string]string{"KUBECTL": kubectl, "KUBECONFIG": bare.kubeconfig, "ROLLOUT_TIMEOUT": "0",
		"NAMESPACE": "vpcgw-refused", "EXTRA_GATEWAY_NAMESPACES": "gw-refused"})
	if err == nil || !strings.Contains(stderr, "install kube-ovn first") || !strings.Contains(stderr, "vpc-nat-gateways.kubeovn.io") || out != "" {
		t.Errorf("install.sh without kube-ovn: err %v, stdout %q, stderr %q; want a refusal saying to install kube-ovn first", err, out, stderr)
	}
	var nss corev1.NamespaceList
	must(t, bare.client.List(ctx, &nss))
	for _, ns := range nss.Items {
		if ns.Name == "vpcgw-refused" || ns.Name == "gw-refused" {
			t.Errorf("the refused install created namespace %s", ns.Name)
		}
	}
	var crds apiextensionsv1.CustomResourceDefinitionList
	must(t, bare.client.List(ctx, &crds))
	if len(crds.Items) != 0 {
		t.Errorf("the refused install left %d CRDs (%s...)", len(crds.Items), crds.Items[0].Name)
	}
	var roles rbacv1.ClusterRoleList
	must(t, bare.client.List(ctx, &roles))
	for _, r := range roles.Items {
		if strings.HasPrefix(r.Name, "vpcgw") {
			t.Errorf("the refused install created ClusterRole %s", r.Name)
		}
	}
	var hooks admissionregistrationv1.ValidatingWebhookConfigurationList
	must(t, bare.client.List(ctx, &hooks))
	if len(hooks.Items) != 0 {
		t.Errorf("the refused install registered webhook %s", hooks.Items[0].Name)
	}

	// The chart at install time (lookup; helm template --dry-run=server renders as helm install).
	online := []string{"--dry-run=server", "--kubeconfig", bare.kubeconfig}
	if _, err := renderErr(t, online...); err == nil || !strings.Contains(err.Error(), "install kube-ovn first") {
		t.Errorf("chart rendered against a cluster without kube-ovn: %v, want a failure saying to install kube-ovn first", err)
	}

	// An upgrade from chart 0.1.0, whose release owned kube-ovn's CRDs without the keep policy,
	// would delete them: refused with the command that prevents it.
	kubeOVN, err := readKubeOVNCRDs()
	must(t, err)
	vpcs := kubeOVN[slices.IndexFunc(kubeOVN, func(u *unstructured.Unstructured) bool { return u.GetName() == "vpcs.kubeovn.io" })].DeepCopy()
	vpcs.SetAnnotations(map[string]string{"meta.helm.sh/release-name": "vpcgw", "meta.helm.sh/release-namespace": "kube-system"})
	//nolint:staticcheck // server-side apply, as helm 0.1.0's release would have created it
	must(t, bare.client.Patch(ctx, vpcs, client.Apply, client.FieldOwner("helm")))
	must(t, waitCRDEstablished(ctx, bare.client, "vpcs.kubeovn.io"))
	if _, err := renderErr(t, online...); err == nil || !strings.Contains(err.Error(), "kubectl annotate crd vpcs.kubeovn.io helm.sh/resource-policy=keep") {
		t.Errorf("upgrade over a release-owned kube-ovn CRD without keep: %v, want a refusal naming the annotate command", err)
	}
	keep := &apiextensionsv1.CustomResourceDefinition{}
	keep.SetName("vpcs.kubeovn.io")
	must(t, bare.client.Patch(ctx, keep, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"helm.sh/resource-policy":"keep"}}}`))))
	_, err = renderErr(t, online...)
	if err == nil || !strings.Contains(err.Error(), "install kube-ovn first") || strings.Contains(err.Error(), "vpcs.kubeovn.io") {
		t.Errorf("with the kept CRD: %v, want only the other missing CRDs named", err)
	}

	// With kube-ovn's CRDs installed the chart installs, and renders vpcgw's own CRD only.
	for _, u := range kubeOVN {
		//nolint:staticcheck // server-side apply of unstructured objects as kube-ovn ships them
		must(t, bare.client.Patch(ctx, u.DeepCopy(), client.Apply, client.FieldOwner(kubeOVNFieldManager), client.ForceOwnership))
	}
	for _, u := range kubeOVN {
		must(t, waitCRDEstablished(ctx, bare.client, u.GetName()))
	}
	before, err := kubeOVNCRDState(ctx, bare.client)
	must(t, err)
	rendered, err := renderErr(t, online...)
	if err != nil {
		t.Fatalf("chart against a cluster with kube-ovn: %v", err)
	}
	checkNoKubeOVNCRDs(t, manifest(decode(t, rendered)), true)

	// cert-manager asked for where there is none: the chart refuses (install.sh leaves the check
	// to it), saying what to do; a render without a cluster cannot look and does not refuse.
	if _, err := renderErr(t, append(slices.Clone(online), "--set", "webhook.certManager.enabled=true")...); err == nil ||
		!strings.Contains(err.Error(), "cert-manager is not installed") {
		t.Errorf("cert-manager asked for on a cluster without it: %v, want the refusal", err)
	}
	out, stderr, err = installScript(t, map[string]string{"KUBECTL": kubectl, "KUBECONFIG": bare.kubeconfig, "ROLLOUT_TIMEOUT": "0", "CERT_MANAGER": "true"})
	if err == nil || !strings.Contains(stderr, "cert-manager is not installed") || out != "" {
		t.Errorf("install.sh CERT_MANAGER=true without cert-manager: err %v, stdout %q, stderr %q; want the chart's refusal", err, out, stderr)
	}
	if _, err := renderErr(t, "--set", "webhook.certManager.enabled=true"); err != nil {
		t.Errorf("helm template without a cluster, cert-manager asked for: %v", err)
	}

	// The check the other tests rely on sees an overwrite like install.sh 0.1.0's.
	if d := diffKubeOVNCRDs(before, before); len(d) != 0 {
		t.Errorf("no change reported as %v", d)
	}
	old := kubeOVN[slices.IndexFunc(kubeOVN, func(u *unstructured.Unstructured) bool { return u.GetName() == "subnets.kubeovn.io" })].DeepCopy()
	must(t, unstructured.SetNestedSlice(old.Object, []any{map[string]any{"name": "v1", "served": true, "storage": true,
		"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}, "spec", "versions"))
	//nolint:staticcheck // server-side apply with --force-conflicts, as install.sh 0.1.0 did
	must(t, bare.client.Patch(ctx, old, client.Apply, client.FieldOwner("vpcgw-install"), client.ForceOwnership))
	after, err := kubeOVNCRDState(ctx, bare.client)
	must(t, err)
	d := strings.Join(diffKubeOVNCRDs(before, after), "\n")
	if !strings.Contains(d, "subnets.kubeovn.io was written") || !strings.Contains(d, "vpcgw field manager vpcgw-install") {
		t.Errorf("an overwrite of kube-ovn's Subnet CRD reported as %q", d)
	}
}
