// covers: O4, O5, O6, K10, T1, T2, N5 (the release installed as an operator installs it, beside the real kube-ovn-controller: served without a value set, uninstalled leaving nothing, by helm and by install.sh)

package kubeovn

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vpcgw/vpcgw/internal/cluster"
	"github.com/vpcgw/vpcgw/internal/cluster/clustertest"
	"github.com/vpcgw/vpcgw/internal/controller"
	"github.com/vpcgw/vpcgw/internal/ovn"
	"github.com/vpcgw/vpcgw/internal/release"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

const installNamespace = cluster.InstallNamespace

// releaseLab starts a lab without vpcgw whose node runs vpcgw's Pods from the release (as an
// operator's cluster pulls them), with the options edit changes, stopped at the test's end; and
// the helm and kubectl of the tests.
func releaseLab(t *testing.T, edit func(*cluster.Options)) (rel cluster.Release, c *cluster.Cluster, helm, kubectl string) {
	t.Helper()
	opts, skip, err := clustertest.Options()
	if skip != "" {
		testutil.Skip(t, skip)
	}
	if err != nil {
		t.Fatal(err)
	}
	rel = loadRelease(t)
	helm = testutil.ToolFromEnv(t, "VPCGW_HELM", "make helm")
	kubectl = testutil.ToolFromEnv(t, "VPCGW_KUBECTL", "make assets")
	opts.NoVpcgw = true
	opts.Images = rel.Images()
	if edit != nil {
		edit(&opts)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	c, err = cluster.Start(ctx, opts)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(tail(c.Logs(), 80))
			t.Log(installedPodLogs(c, kubectl))
		}
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	return rel, c, helm, kubectl
}

func loadRelease(t *testing.T) cluster.Release {
	t.Helper()
	dir := os.Getenv("VPCGW_RELEASE")
	if dir == "" {
		dir = filepath.Join("..", "..", "bin", "release")
	}
	if _, err := os.Stat(filepath.Join(dir, "SHA256SUMS")); err != nil {
		testutil.Skip(t, "no release in "+dir+" (run `make release`): "+err.Error())
	}
	r, err := cluster.OpenRelease(dir)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A newcomer takes bin/release, installs the packaged chart into the lab beside kube-ovn without
// setting a value and sees the demo served through its EIP; helm uninstall leaves nothing vpcgw
// wrote. Then the same with the release's install.sh and `install.sh uninstall`. vpcgw's Pods
// (controller, webhook, the uninstall's Job) run on the lab node from the release's OCI archives,
// as the chart's service accounts with their projected tokens, reaching the API server through the
// `kubernetes` Service; the API server reaches the webhook Pods at their addresses.
func TestReleaseInstallServesAndUninstallLeavesNothing(t *testing.T) {
	var log logr.Logger
	rel, c, helm, kubectl := releaseLab(t, func(o *cluster.Options) { log = o.Log })
	nb, err := ovn.NewWriter(context.Background(), ovn.Config{Address: c.OVN.NBAddr()}, log.WithName("test-nb"))
	if err != nil {
		t.Fatal(err)
	}
	defer nb.Close()
	chart := rel.Chart()
	kc := []string{"--kubeconfig", c.Kubeconfig}

	// helm install, no value set.
	out := run(t, nil, append([]string{helm, "install", "vpcgw", chart, "--namespace", installNamespace, "--create-namespace",
		"--wait", "--timeout", "5m"}, kc...)...)
	for _, want := range []string{"LoadBalancer Services: served", "kubectl vpcgw explain"} {
		if !strings.Contains(out, want) {
			t.Errorf("helm install's notes do not say %q:\n%s", want, out)
		}
	}
	assertDemoServed(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	run(t, nil, append([]string{helm, "uninstall", "vpcgw", "--namespace", installNamespace, "--wait", "--timeout", "8m"}, kc...)...)
	assertUninstalled(ctx, t, c, nb)

	// The uninstall's release still holds the controller's Lease (what made the old controller
	// stand by), for minutes after the uninstall.
	var lease coordinationv1.Lease
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: installNamespace, Name: controller.LeaderElectionID}, &lease); err != nil ||
		!strings.HasPrefix(ptr.Deref(lease.Spec.HolderIdentity, ""), release.IdentityPrefix) {
		t.Fatalf("after helm uninstall the Lease is %+v (%v), want it held by the release", lease.Spec, err)
	}

	// install.sh from the release directory (it installs the chart beside it), into the same
	// namespace at once: the new controller frees the Lease the uninstall's release still holds
	// (for 10 minutes, so that the uninstalled controller stood by) and serves within the
	// assertion's 3 minutes.
	env := append(os.Environ(), "KUBECONFIG="+c.Kubeconfig, "HELM="+helm, "KUBECTL="+kubectl)
	run(t, env, rel.Path("install.sh"))
	assertDemoServed(t, c)
	run(t, env, rel.Path("install.sh"), "uninstall")
	assertUninstalled(ctx, t, c, nb)
	// The namespace is the operator's to delete (helm's --create-namespace, or install.sh's):
	// with it go the Lease and the published status.
	deleteNamespace(ctx, t, c, installNamespace)
}

// assertDemoServed waits until the demo Service has the EIP as its EXTERNAL-IP and answers through
// it from the external client, from every backend.
func assertDemoServed(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ip, err := c.WaitIngress(ctx, cluster.DemoNamespace, cluster.DemoService, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if ip != cluster.EIPAddress {
		t.Fatalf("EXTERNAL-IP %s, want the EIP %s", ip, cluster.EIPAddress)
	}
	target := net.JoinHostPort(ip, "80") // the demo Service's TCP port
	if err := c.WaitReachable(ctx, c.ExternalClient(), "tcp", target, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	res, err := c.Probe(c.ExternalClient(), "tcp", target, 40)
	if err != nil {
		t.Fatal(err)
	}
	if res.Total() != 40 || len(res.Answers) != 2 {
		t.Fatalf("through the EIP: %d of 40 answered, by %d backends (want 2): %+v", res.Total(), len(res.Answers), res)
	}
}

// assertUninstalled checks that nothing vpcgw wrote remains: in the gateway and OVN, on the
// Services, its CRD (and with it every ServiceRecord), and the chart's objects.
func assertUninstalled(ctx context.Context, t *testing.T, c *cluster.Cluster, nb *ovn.Writer) {
	t.Helper()
	assertNothingOfVpcgwInGateway(ctx, t, c, nb)
	assertNothingOfVpcgwOnServices(ctx, t, c)
	eventually(t, 2*time.Minute, "vpcgw's CRD and Deployments gone", func(ctx context.Context) (bool, error) {
		crd := crdObject("servicerecords.vpcgw.io")
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(crd), crd); !apierrors.IsNotFound(err) {
			return false, client.IgnoreNotFound(err)
		}
		var ds appsv1.DeploymentList
		if err := c.Client.List(ctx, &ds, client.InNamespace(installNamespace)); err != nil {
			return false, err
		}
		var pods corev1.PodList
		if err := c.Client.List(ctx, &pods, client.InNamespace(installNamespace)); err != nil {
			return false, err
		}
		return len(ds.Items) == 0 && len(pods.Items) == 0, nil
	})
	if err := c.Client.Get(ctx, client.ObjectKey{Name: "vpc-nat-gateways.kubeovn.io"}, crdObject("")); err != nil {
		t.Errorf("kube-ovn's CRD after the uninstall: %v", err)
	}
	assertInstallNamespaceEmptied(ctx, t, c)
}

// assertInstallNamespaceEmptied checks what the uninstall leaves in the install namespace, which
// the operator deletes (docs/user-guide.md, Uninstalling): only the leader election Lease the
// release holds and the controller's published status, beside what kube-controller-manager puts
// in every namespace (the default ServiceAccount, kube-root-ca.crt).
func assertInstallNamespaceEmptied(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	in := client.InNamespace(installNamespace)
	var cms corev1.ConfigMapList
	var sas corev1.ServiceAccountList
	var secrets corev1.SecretList
	var svcs corev1.ServiceList
	var leases coordinationv1.LeaseList
	var roles rbacv1.RoleList
	var bindings rbacv1.RoleBindingList
	var jobs batchv1.JobList
	for _, l := range []client.ObjectList{&cms, &sas, &secrets, &svcs, &leases, &roles, &bindings, &jobs} {
		if err := c.Client.List(ctx, l, in); err != nil {
			t.Fatal(err)
		}
	}
	var left []string
	for _, o := range cms.Items {
		if o.Name != "kube-root-ca.crt" && o.Name != "vpcgw-controller" {
			left = append(left, "ConfigMap "+o.Name)
		}
	}
	for _, o := range sas.Items {
		if o.Name != "default" {
			left = append(left, "ServiceAccount "+o.Name)
		}
	}
	for _, o := range leases.Items {
		if o.Name != "vpcgw-controller" {
			left = append(left, "Lease "+o.Name)
		}
	}
	for _, o := range secrets.Items {
		left = append(left, "Secret "+o.Name)
	}
	for _, o := range svcs.Items {
		left = append(left, "Service "+o.Name)
	}
	for _, o := range roles.Items {
		left = append(left, "Role "+o.Name)
	}
	for _, o := range bindings.Items {
		left = append(left, "RoleBinding "+o.Name)
	}
	for _, o := range jobs.Items {
		left = append(left, "Job "+o.Name)
	}
	// The chart's cluster-wide objects, all named vpcgw or vpcgw-*.
	var crs rbacv1.ClusterRoleList
	var crbs rbacv1.ClusterRoleBindingList
	var hooks admissionregistrationv1.ValidatingWebhookConfigurationList
	var policies admissionregistrationv1.ValidatingAdmissionPolicyList
	var policyBindings admissionregistrationv1.ValidatingAdmissionPolicyBindingList
	for _, l := range []client.ObjectList{&crs, &crbs, &hooks, &policies, &policyBindings} {
		if err := c.Client.List(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	vpcgws := func(kind, name string) {
		if name == "vpcgw" || strings.HasPrefix(name, "vpcgw-") {
			left = append(left, kind+" "+name)
		}
	}
	for _, o := range crs.Items {
		vpcgws("ClusterRole", o.Name)
	}
	for _, o := range crbs.Items {
		vpcgws("ClusterRoleBinding", o.Name)
	}
	for _, o := range hooks.Items {
		vpcgws("ValidatingWebhookConfiguration", o.Name)
	}
	for _, o := range policies.Items {
		vpcgws("ValidatingAdmissionPolicy", o.Name)
	}
	for _, o := range policyBindings.Items {
		vpcgws("ValidatingAdmissionPolicyBinding", o.Name)
	}
	if len(left) > 0 {
		t.Errorf("after the uninstall these are left (namespace %s, cluster-wide): %v", installNamespace, left)
	}
}

func deleteNamespace(ctx context.Context, t *testing.T, c *cluster.Cluster, name string) {
	t.Helper()
	ns := &corev1.Namespace{}
	ns.Name = name
	if err := c.Client.Delete(ctx, ns); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "namespace "+name+" gone", func(ctx context.Context) (bool, error) {
		err := c.Client.Get(ctx, client.ObjectKey{Name: name}, ns)
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}

// run runs argv (env: the process's environment, nil for this one's) and returns its output; it
// fails the test when the command fails.
func run(t *testing.T, env []string, argv ...string) string {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, tail(string(out), 60))
	}
	return string(out)
}

// installedPodLogs is what the Pods of the install namespace logged, through the API server as
// `kubectl logs` reads it, for a failed test's report.
func installedPodLogs(c *cluster.Cluster, kubectl string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var pods corev1.PodList
	if err := c.Client.List(ctx, &pods, client.InNamespace(installNamespace)); err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "== pod %s (%s)\n", p.Name, p.Status.Phase)
		out, _ := exec.CommandContext(ctx, kubectl, "--kubeconfig", c.Kubeconfig, "logs", "-n", installNamespace, p.Name, "--all-containers", "--tail", "40").CombinedOutput()
		b.Write(out)
	}
	return b.String()
}
