// covers: O2 (the kubectl plugin against the lab cluster beside the real kube-ovn-controller)
package kubeovn

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vpcgw/vpcgw/internal/cluster"
	"github.com/vpcgw/vpcgw/internal/inspect"
	"github.com/vpcgw/vpcgw/internal/kubeovnrun"
	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/status"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

// pluginRun is one run of the plugin binary.
type pluginRun struct {
	code           int
	stdout, stderr string
}

// buildPlugin builds cmd/kubectl-vpcgw into a directory of its own (kubectl finds it there on
// the PATH as kubectl-vpcgw).
func buildPlugin(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("go", "build", "-o", dir+"/", "github.com/vpcgw/vpcgw/cmd/kubectl-vpcgw").CombinedOutput()
	if err != nil {
		t.Fatalf("building kubectl-vpcgw: %v\n%s", err, out)
	}
	return filepath.Join(dir, "kubectl-vpcgw")
}

func runPlugin(t *testing.T, bin, kubeconfig string, args ...string) pluginRun {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	r := pluginRun{stdout: out.String(), stderr: errOut.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("kubectl-vpcgw %v: %v", args, err)
	}
	t.Logf("$ kubectl vpcgw %s  (exit %d)\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	return r
}

func (r pluginRun) want(t *testing.T, code int) pluginRun {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
	return r
}

func decodeRun[T any](t *testing.T, r pluginRun) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, r.stdout)
	}
	return v
}

// contextKubeconfig copies the lab's kubeconfig with its current context set to namespace ns,
// as a kubectl user's context names their namespace.
func contextKubeconfig(t *testing.T, from, ns string) string {
	t.Helper()
	kc, err := clientcmd.LoadFromFile(from)
	if err != nil {
		t.Fatal(err)
	}
	kc.Contexts[kc.CurrentContext].Namespace = ns
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// The plugin, built as shipped and run against the lab with kube-ovn-controller and vpcgw's
// controller as their own processes: it reads what the controller publishes (its version, gates,
// each gateway's instances and their acknowledged generation), explains the served demo Service
// (identities, backends, record Ready, routes), a Service kube-ovn's EIP is missing for (its
// reason is the controller's event text, with the fix, exit code 3), the gateway, and, with the
// controller stopped, says that no controller is running.
// covers: O2, T3, D7, V1
func TestKubectlPluginInTheLab(t *testing.T) {
	c := lab(t)
	bin := buildPlugin(t)
	ctx := context.Background()
	demoKC := contextKubeconfig(t, c.Kubeconfig, cluster.DemoNamespace)
	plugin := func(args ...string) pluginRun { return runPlugin(t, bin, demoKC, args...) }

	// The controller's status names the gateway's instance, acknowledged.
	var pub status.Published
	eventually(t, 90*time.Second, "the controller's published status names the gateway's instance, acknowledged", func(ctx context.Context) (bool, error) {
		var cm corev1.ConfigMap
		if err := c.Client.Get(ctx, client.ObjectKey{Namespace: status.DefaultNamespace, Name: status.ConfigMapName}, &cm); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		p, err := status.Decode(cm.Data)
		if err != nil {
			return false, err
		}
		pub = p
		g := p.Gateways[cluster.GatewayName]
		return p.Stopped.IsZero() && g.Generation > 0 && len(g.Instances) == 1 && g.Instances[0].AckedGeneration == g.Generation &&
			g.Routes != nil && g.Routes.Synced, nil
	})
	if pub.Version == "" || !pub.Gates.EnableGwNftableLbSvc || !pub.Gates.EnableGwNftableSvcClusterIP || !pub.Flags.VIPRoutes || pub.Flags.KubeOVNNamespace != kubeovnrun.Namespace {
		t.Errorf("published %+v", pub)
	}

	// The served demo Service, in the context's namespace (no -n), as JSON.
	ex := decodeRun[inspect.ServiceExplanation](t, plugin("explain", "svc/"+cluster.DemoService, "-o", "json").want(t, 0))
	svc := service(t, c, cluster.DemoNamespace, cluster.DemoService)
	if !ex.Served || ex.Service.State != inspect.StateServed || !ex.Controller.Running || ex.Controller.GatesAssumed || ex.Controller.Version != pub.Version {
		t.Errorf("explain demo/web: served %v state %s controller %+v", ex.Served, ex.Service.State, ex.Controller)
	}
	if ex.Service.EIPPart.VIP != cluster.EIPAddress || ex.Service.ClusterIPPart.VIP != svc.Spec.ClusterIP || !slices.Equal(ex.Service.Ingress, []string{cluster.EIPAddress}) {
		t.Errorf("parts %+v %+v ingress %v", ex.Service.EIPPart, ex.Service.ClusterIPPart, ex.Service.Ingress)
	}
	vpc := netip.MustParsePrefix(cluster.VPCCIDR)
	got := map[string]bool{}
	for _, id := range ex.Service.Identities {
		got[id.Part+" "+id.VIP+":"+strconv.Itoa(int(id.Port))+"/"+id.Protocol] = true
		if len(id.Backends) == 0 {
			t.Errorf("identity %+v has no backend", id)
		}
		port := uint16(cluster.BackendPort)
		if id.Port == cluster.FlowsPort {
			port = cluster.FlowsBackendPort // the flow protocol's port of the echo server
		}
		for _, b := range id.Backends {
			if ap, err := netip.ParseAddrPort(b); err != nil || !vpc.Contains(ap.Addr()) || ap.Port() != port {
				t.Errorf("backend %q of %s:%d is not a VPC address on the echo port %d", b, id.VIP, id.Port, port)
			}
		}
	}
	flows := ":" + strconv.Itoa(cluster.FlowsPort)
	for _, want := range []string{"EIP " + cluster.EIPAddress + ":80/tcp", "EIP " + cluster.EIPAddress + ":5353/udp",
		"ClusterIP " + svc.Spec.ClusterIP + ":80/tcp", "ClusterIP " + svc.Spec.ClusterIP + ":5353/udp",
		"EIP " + cluster.EIPAddress + flows + "/tcp", "EIP " + cluster.EIPAddress + flows + "/udp",
		"ClusterIP " + svc.Spec.ClusterIP + flows + "/tcp", "ClusterIP " + svc.Spec.ClusterIP + flows + "/udp"} {
		if !got[want] {
			t.Errorf("no identity %s in %v", want, got)
		}
	}
	if r := ex.Service.Record; r == nil || r.Kind != "ServiceRecord" || len(r.Names) != 1 || !r.Ready {
		t.Errorf("record %+v", r)
	}
	g := ex.Gateway
	if g == nil || g.Name != cluster.GatewayName || !g.Exists || g.Vpc != cluster.VpcName || g.Programmed == nil || g.Programmed.Generation == 0 || len(g.Instances) != 1 {
		t.Fatalf("gateway %+v", g)
	}
	in := g.Instances[0]
	if in.Pod != kubeovnrun.Namespace+"/"+c.GatewayPodName() || !in.Initialized || in.LanIP != cluster.GatewayLanIP || !in.Reported || in.AckedGeneration == 0 ||
		in.AgentVersion == "" || in.LastError != "" {
		t.Errorf("instance %+v", in)
	}
	if rt := ex.Routes; rt == nil || !rt.Written || rt.Router != cluster.VpcName || !slices.Equal(rt.NextHops, []string{cluster.GatewayLanIP}) ||
		!slices.Contains(rt.VIPs, cluster.EIPAddress) || rt.Synced == nil || !*rt.Synced {
		t.Errorf("routes %+v", ex.Routes)
	}

	// Every namespace, and the gateway.
	l := decodeRun[inspect.ServiceStatusList](t, plugin("status", "-A", "-o", "json").want(t, 0))
	if !slices.ContainsFunc(l.Items, func(s inspect.ServiceStatus) bool {
		return s.Namespace == cluster.DemoNamespace && s.Name == cluster.DemoService && s.State == inspect.StateServed && s.Ready
	}) {
		t.Errorf("status -A has no served demo/web: %+v", l.Items)
	}
	gs := decodeRun[inspect.GatewayStatus](t, plugin("status", "gw/"+cluster.GatewayName, "-o", "json").want(t, 0))
	if gs.Kind != inspect.KindGatewayStatus || !gs.Exists || len(gs.Instances) != 1 || !gs.Instances[0].Reported || gs.Routes.Synced == nil ||
		!slices.ContainsFunc(gs.Services, func(s inspect.ServiceStatus) bool { return s.Name == cluster.DemoService }) {
		t.Errorf("status gw/%s: %+v", cluster.GatewayName, gs)
	}
	txt := plugin("status", "gw/"+cluster.GatewayName).want(t, 0)
	if !strings.Contains(txt.stdout, "Gateway "+cluster.GatewayName+" (Vpc "+cluster.VpcName) || !strings.Contains(txt.stdout, c.GatewayPodName()) {
		t.Errorf("status gw/%s:\n%s", cluster.GatewayName, txt.stdout)
	}

	// A Service whose EIP does not exist (admitted: S4): not served through an EIP, with the
	// controller's own event text, its reason and the fix; exit code 3.
	missing := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.DemoNamespace, Name: "plugin-no-eip",
		Annotations: map[string]string{model.AnnotationGateway: cluster.GatewayName, model.AnnotationEIP: "plugin-missing-eip"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, AllocateLoadBalancerNodePorts: ptr.To(false), Selector: map[string]string{"app": cluster.DemoDeployment},
			Ports: []corev1.ServicePort{{Name: "http", Port: 8096, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(cluster.BackendPort)}}}}
	if err := c.Client.Create(ctx, missing); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Client.Delete(context.Background(), missing) })
	var event string
	eventually(t, 60*time.Second, "the controller's event on plugin-no-eip", func(ctx context.Context) (bool, error) {
		var evs corev1.EventList
		if err := c.Client.List(ctx, &evs, client.InNamespace(cluster.DemoNamespace)); err != nil {
			return false, err
		}
		for _, ev := range evs.Items {
			if ev.InvolvedObject.Name == missing.Name && ev.Reason == model.ReasonEIPMissing {
				event = ev.Message
				return true, nil
			}
		}
		return false, nil
	})
	nx := decodeRun[inspect.ServiceExplanation](t, plugin("explain", "svc/"+missing.Name, "-o", "json").want(t, 3))
	p := nx.Service.EIPPart
	if nx.Served || nx.Service.State != inspect.StatePartiallyServed || p.State != inspect.PartNotServed || p.Reason != event || p.EventReason != model.ReasonEIPMissing ||
		!strings.Contains(p.Fix, "create IptablesEIP plugin-missing-eip with spec.natGwDp: "+cluster.GatewayName) {
		t.Errorf("explain plugin-no-eip: state %s part %+v; want the controller's event %q with its fix", nx.Service.State, p, event)
	}
	plugin("explain", "svc/"+missing.Name).want(t, 3)
	// A Service that names no gateway at all, in another namespace (-n after the verb).
	nk := decodeRun[inspect.ServiceExplanation](t, plugin("explain", "svc/kubernetes", "-n", "default", "-o", "json").want(t, 3))
	if nk.Service.ClusterIPPart.EventReason != inspect.ReasonNotOptedIn || !strings.Contains(nk.Service.ClusterIPPart.Fix, "kubectl annotate service kubernetes -n default") {
		t.Errorf("explain default/kubernetes: %+v", nk.Service.ClusterIPPart)
	}

	// The gateway's table, through the exec API into kube-ovn's container.
	rs := plugin("ruleset", cluster.GatewayName).want(t, 0)
	if !strings.Contains(rs.stdout, "table ip kube-ovn") || !strings.Contains(rs.stdout, cluster.EIPAddress+" . tcp . 80 : goto dnat-") {
		t.Errorf("ruleset:\n%s", rs.stdout)
	}

	// version: the controller's, as it publishes it.
	v := decodeRun[inspect.VersionInfo](t, plugin("version", "-o", "json").want(t, 0))
	if !v.Controller.Running || v.Controller.Version != pub.Version || v.Plugin == "" {
		t.Errorf("version %+v", v)
	}

	// As a kubectl plugin: kubectl finds kubectl-vpcgw on the PATH and passes everything on.
	t.Run("through kubectl", func(t *testing.T) {
		kubectl := testutil.ToolFromEnv(t, "VPCGW_KUBECTL", "make assets")
		cmd := exec.Command(kubectl, "vpcgw", "explain", "svc/"+cluster.DemoService, "-o", "json")
		cmd.Env = append(os.Environ(), "KUBECONFIG="+demoKC, "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"))
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("kubectl vpcgw explain: %v\n%s", err, out)
		}
		if ex := decodeRun[inspect.ServiceExplanation](t, pluginRun{stdout: string(out)}); !ex.Served {
			t.Errorf("through kubectl: %+v", ex)
		}
	})

	// With the controller stopped, the plugin says so (its clean stop is published at once) and
	// does not apply the rules: the demo, whose ingress holds its EIP's address, is served on
	// that basis (the data plane still serves); a Service nothing shows is Unknown (exit 4).
	c.StopController()
	restarted := false
	t.Cleanup(func() {
		if restarted {
			return
		}
		if err := c.StartController(context.Background()); err != nil {
			t.Errorf("restarting the controller: %v", err)
		}
		if _, err := c.WaitIngress(context.Background(), cluster.DemoNamespace, cluster.DemoService, 2*time.Minute); err != nil {
			t.Errorf("the demo after the restart: %v", err)
		}
	})
	r := plugin("status", "-A", "-o", "json")
	stopped := decodeRun[inspect.ServiceStatusList](t, r)
	unknown := slices.ContainsFunc(stopped.Items, func(s inspect.ServiceStatus) bool { return s.ReadyStatus == inspect.ReadyUnknown })
	if want := map[bool]int{true: 4, false: 0}[unknown]; r.code != want {
		t.Errorf("status -A with the controller stopped: exit %d, want %d (a Service Unknown: %v)", r.code, want, unknown)
	}
	if !strings.Contains(r.stderr, "Warning: no vpcgw controller is running (ConfigMap vpcgw-system/vpcgw-controller: controller ") || !strings.Contains(r.stderr, "stopped at") ||
		!strings.Contains(r.stderr, "the controller's rules are not applied") {
		t.Errorf("status with the controller stopped: stderr %q", r.stderr)
	}
	ex = decodeRun[inspect.ServiceExplanation](t, plugin("explain", "svc/"+cluster.DemoService, "-o", "json").want(t, 0))
	if ex.Controller.Running || !ex.Controller.GatesAssumed || ex.Controller.GatesSource != inspect.GatesLastPublished || ex.Controller.Stopped.IsZero() ||
		!strings.HasPrefix(ex.Service.Basis, "its ingress holds ") {
		t.Errorf("controller while stopped: %+v, basis %q", ex.Controller, ex.Service.Basis)
	}
	v = decodeRun[inspect.VersionInfo](t, plugin("version", "-o", "json").want(t, 0))
	if v.Controller.Running || !strings.HasPrefix(v.Controller.Message, "no vpcgw controller is running (ConfigMap vpcgw-system/vpcgw-controller") {
		t.Errorf("version while stopped: %+v", v.Controller)
	}

	// Back: the restarted controller publishes again, and the heartbeat's age is checked
	// (--stale-after shorter than its age makes it stale without waiting two minutes).
	restarted = true
	if err := c.StartController(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the restarted controller running, by the plugin", func(context.Context) (bool, error) {
		v := decodeRun[inspect.VersionInfo](t, runPlugin(t, bin, demoKC, "version", "-o", "json"))
		return v.Controller.Running, nil
	})
	r = plugin("version", "--stale-after", "1ms")
	if !strings.Contains(r.stdout, "no vpcgw controller is running (ConfigMap vpcgw-system/vpcgw-controller: its heartbeat is") {
		t.Errorf("version --stale-after 1ms:\n%s", r.stdout)
	}
}
