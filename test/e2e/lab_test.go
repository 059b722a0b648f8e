// Package e2e runs vpcgw end to end in the lab: a real kube-apiserver, the controller, the agent in
// a gateway network namespace, backends serving real TCP and UDP, and an external client.
package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/vpcgw/vpcgw/internal/controller"
	"github.com/vpcgw/vpcgw/internal/lab"
	"github.com/vpcgw/vpcgw/internal/labbin"
	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/netlab"
	"github.com/vpcgw/vpcgw/internal/status"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

var (
	theLab     *lab.Lab
	skipWhy    string
	plugin     string // the kubectl-vpcgw binary
	metricsURL string // the lab controller's /metrics
)

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if why := missing(); why != "" {
		skipWhy = why
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "vpcgw-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bins, err := labbin.Build(context.Background(), dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "building the binaries:", err)
		return 1
	}
	plugin = filepath.Join(dir, "kubectl-vpcgw")
	build := exec.Command("go", "build", "-o", dir+"/", "github.com/vpcgw/vpcgw/cmd/kubectl-vpcgw")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building kubectl-vpcgw:", err)
		return 1
	}
	logFile, err := os.Create(filepath.Join(dir, "lab.log"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	log := zap.New(zap.WriteTo(logFile), zap.UseDevMode(true))
	metricsAddr, err := freeAddr()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	metricsURL = "http://" + metricsAddr + "/metrics"
	theLab, err = lab.Start(context.Background(), lab.Options{Bins: bins, AssetsDir: os.Getenv("KUBEBUILDER_ASSETS"), Log: log,
		Controller: func(o *controller.Options) {
			o.MetricsAddr = metricsAddr
			// The plugin reads what the controller runs from its published status (SPEC O2).
			o.StatusNamespace = status.DefaultNamespace
		}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the lab:", err)
		return 1
	}
	code := m.Run()
	if err := theLab.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the lab:", err)
		code = 1
	}
	if code != 0 {
		data, _ := os.ReadFile(logFile.Name())
		fmt.Fprintf(os.Stderr, "---- lab log (last 8 KiB) ----\n%s\n", tail(data, 8<<10))
	}
	return code
}

// counter reads a counter of the in-process controller.
func counter(name string) (float64, error) {
	mfs, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			sum := 0.0
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
			return sum, nil
		}
	}
	return 0, fmt.Errorf("no metric %s", name)
}

// missing says what this machine lacks for the lab, or "".
func missing() string {
	if err := netlab.Available(); err != nil {
		return err.Error()
	}
	if _, err := exec.LookPath("nft"); err != nil {
		return "nft is not installed (apt-get install -y nftables)"
	}
	if _, missing := testutil.EnvtestAssets("kube-apiserver", "etcd"); missing != "" {
		return missing
	}
	return ""
}

func needLab(t *testing.T) *lab.Lab {
	t.Helper()
	if theLab == nil {
		testutil.Skip(t, "lab not available: "+skipWhy)
	}
	return theLab
}

// TestLoadBalancerServedThroughEIP is the walking skeleton's promise: a LoadBalancer Service gets
// the EIP as its ingress, both backends answer through it, and a backend whose endpoint goes away
// leaves the gateway's map and the traffic.
// covers: S1, S2, B1, D1, D2, T1
func TestLoadBalancerServedThroughEIP(t *testing.T) {
	l := needLab(t)
	ctx := context.Background()

	ip, err := l.WaitIngress(ctx, lab.DemoNamespace, lab.DemoService, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ip != lab.EIPAddress {
		t.Fatalf("ingress = %s, want the EIP %s", ip, lab.EIPAddress)
	}

	// 40 new connections; each backend answers at least once unless dispatch is broken
	// (a fair coin misses one backend 40 times with probability 2^-39).
	for _, p := range []struct {
		proto string
		port  int
	}{{"tcp", 80}, {"udp", 5353}} {
		res, err := l.Probe(l.ExternalClient(), p.proto, fmt.Sprintf("%s:%d", ip, p.port), 40)
		if err != nil {
			t.Fatal(err)
		}
		if res.Errors != 0 || res.Answers["web-be1"] == 0 || res.Answers["web-be2"] == 0 || res.Total() != 40 {
			t.Fatalf("%s through the EIP: answers %v, %d errors (%s); want both backends and no error", p.proto, res.Answers, res.Errors, res.LastError)
		}
	}

	be2 := l.Backends["web-be2"].IP
	if err := lab.SetPodReady(ctx, l.Client, lab.DemoNamespace, "web-be2", false); err != nil {
		t.Fatal(err)
	}
	waitTable(t, l, "backend "+be2+" removed", func(table string) bool { return !strings.Contains(table, be2) })
	res, err := l.Probe(l.ExternalClient(), "tcp", ip+":80", 20)
	if err != nil {
		t.Fatal(err)
	}
	if res.Answers["web-be1"] != 20 {
		t.Fatalf("after web-be2 left: answers %v, %d errors (%s); want all 20 from web-be1", res.Answers, res.Errors, res.LastError)
	}

	if err := lab.SetPodReady(ctx, l.Client, lab.DemoNamespace, "web-be2", true); err != nil {
		t.Fatal(err)
	}
	waitTable(t, l, "backend "+be2+" back", func(table string) bool { return strings.Contains(table, be2) })
}

// TestLoadBalancerWithoutEIPAnnotation: the gateway annotation alone on a LoadBalancer Service is
// reported with a Warning event, no EIP identity is programmed and no ingress published; the lab
// runs with the ClusterIP gate too, so the ClusterIP part is served (S2: it needs only the gateway).
// covers: S2, T3
func TestLoadBalancerWithoutEIPAnnotation(t *testing.T) {
	l := needLab(t)
	ctx := context.Background()
	svc := webService("no-eip", 8081, map[string]string{model.AnnotationGateway: lab.GatewayName})
	if err := l.Client.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Client.Delete(ctx, svc) })

	ev := waitEvent(t, l, svc.Name, model.ReasonEIPMissing)
	if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, model.AnnotationEIP) {
		t.Fatalf("event = %s %q, want a Warning naming %s", ev.Type, ev.Message, model.AnnotationEIP)
	}
	table, err := l.NftTable()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(table, lab.EIPAddress+" . tcp . 8081") {
		t.Fatalf("an EIP identity of a Service without EIP annotation was programmed:\n%s", table)
	}
	assertNoIngress(t, l, svc.Name)
}

// TestEIPBecomesReady: a Service whose EIP is not Ready is not programmed, and is served as soon
// as the EIP turns Ready, woken by the EIP's own update (no restart, no resync wait).
// covers: S4, T1, T3
func TestEIPBecomesReady(t *testing.T) {
	l := needLab(t)
	ctx := context.Background()
	const eipName, eipIP = "late-eip", "172.31.100.11"
	if err := l.AddEIP(ctx, eipName, eipIP, false); err != nil {
		t.Fatal(err)
	}
	svc := webService("late", 80, map[string]string{model.AnnotationGateway: lab.GatewayName, model.AnnotationEIP: eipName})
	if err := l.Client.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Client.Delete(ctx, svc) })

	waitEvent(t, l, svc.Name, model.ReasonEIPNotReady)
	table, err := l.NftTable()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(table, eipIP) {
		t.Fatalf("a Service with a not-Ready EIP was programmed:\n%s", table)
	}
	assertNoIngress(t, l, svc.Name)

	if err := l.MarkEIPReady(ctx, eipName); err != nil {
		t.Fatal(err)
	}
	ip, err := l.WaitIngress(ctx, svc.Namespace, svc.Name, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ip != eipIP {
		t.Fatalf("ingress = %s, want %s", ip, eipIP)
	}
	res, err := l.Probe(l.ExternalClient(), "tcp", eipIP+":80", 10)
	if err != nil {
		t.Fatal(err)
	}
	if res.Total() != 10 {
		t.Fatalf("through the late EIP: answers %v, %d errors (%s)", res.Answers, res.Errors, res.LastError)
	}
}

func webService(name string, port int32, annotations map[string]string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: lab.DemoNamespace, Annotations: annotations},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app": lab.DemoService},
			Ports:    []corev1.ServicePort{{Name: "http", Port: port, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(lab.BackendPort)}},
		},
	}
}

func waitTable(t *testing.T, l *lab.Lab, what string, ok func(string) bool) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		table, err := l.NftTable()
		if err != nil {
			return false, err
		}
		last = table
		return ok(table), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v; table:\n%s", what, err, last)
	}
}

func waitEvent(t *testing.T, l *lab.Lab, svcName, reason string) corev1.Event {
	t.Helper()
	var found corev1.Event
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var evs corev1.EventList
		if err := l.Client.List(ctx, &evs, client.InNamespace(lab.DemoNamespace)); err != nil {
			return false, err
		}
		for _, ev := range evs.Items {
			if ev.InvolvedObject.Name == svcName && ev.Reason == reason {
				found = ev
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("waiting for event %s on Service %s: %v", reason, svcName, err)
	}
	return found
}

func assertNoIngress(t *testing.T, l *lab.Lab, name string) {
	t.Helper()
	var svc corev1.Service
	if err := l.Client.Get(context.Background(), client.ObjectKey{Namespace: lab.DemoNamespace, Name: name}, &svc); err != nil {
		t.Fatal(err)
	}
	if len(svc.Status.LoadBalancer.Ingress) != 0 {
		t.Fatalf("Service %s has ingress %v, want none", name, svc.Status.LoadBalancer.Ingress)
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// TestVPCClientThroughRouterPolicies: a client inside the VPC reaches the ClusterIP only because
// vpcgw wrote a VIP policy (the lab's router has no route for the Service CIDR and follows the NB
// policies), and the EIP too; the gateway SNATs it so replies come back (hairpin). When the
// Service leaves the mode, the policy and the route go and the ClusterIP is unreachable.
// covers: V1, V2, D4, I1, L2
func TestVPCClientThroughRouterPolicies(t *testing.T) {
	l := needLab(t)
	ctx := context.Background()
	svc := webService("vpc-web", 8090, map[string]string{model.AnnotationGateway: lab.GatewayName, model.AnnotationEIP: lab.EIPName})
	if err := l.Client.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Client.Delete(ctx, svc) })
	if _, err := l.WaitIngress(ctx, svc.Namespace, svc.Name, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := l.Client.Get(ctx, client.ObjectKeyFromObject(svc), svc); err != nil {
		t.Fatal(err)
	}
	cip := svc.Spec.ClusterIP
	for _, target := range []string{cip + ":8090", lab.EIPAddress + ":8090"} {
		if err := l.WaitReachable(ctx, l.VPCClient(), "tcp", target, 20*time.Second); err != nil {
			t.Fatalf("VPC client to %s: %v", target, err)
		}
		res, err := l.Probe(l.VPCClient(), "tcp", target, 40)
		if err != nil {
			t.Fatal(err)
		}
		if res.Errors != 0 || res.Answers["web-be1"] == 0 || res.Answers["web-be2"] == 0 {
			t.Fatalf("VPC client to %s: answers %v, %d errors (%s)", target, res.Answers, res.Errors, res.LastError)
		}
	}
	policies, err := l.LRPolicyList()
	if err != nil {
		t.Fatal(err)
	}
	wantLine := regexp.MustCompile(`(?m)^\s*29210\s+ip4\.dst == ` + regexp.QuoteMeta(cip) + `\s+reroute\s+` + regexp.QuoteMeta(lab.GatewayLanIP) + `\s*$`)
	if !wantLine.MatchString(policies) {
		t.Fatalf("lr-policy-list has no VIP policy for %s:\n%s", cip, policies)
	}

	// Leave the mode: both annotations cleared.
	patch := client.MergeFrom(svc.DeepCopy())
	svc.Annotations = nil
	if err := l.Client.Patch(ctx, svc, patch); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		p, err := l.LRPolicyList()
		return err == nil && !strings.Contains(p, cip), err
	})
	if err != nil {
		t.Fatalf("the VIP policy of %s stayed: %v", cip, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		res, err := l.Probe(l.VPCClient(), "tcp", cip+":8090", 1)
		return err == nil && res.Total() == 0, err
	})
	if err != nil {
		t.Fatalf("the ClusterIP is still reachable after the Service left the mode: %v", err)
	}
}

// TestKubectlPlugin runs `kubectl vpcgw` against the lab: status lists the demo Service as served
// through its EIP, explain says why a Service is not served, and ruleset does not run ip netns
// exec on the machine (it goes through the exec API, which this lab does not serve).
// covers: O2, T3
func TestKubectlPlugin(t *testing.T) {
	l := needLab(t)
	ctx := context.Background()
	if _, err := l.WaitIngress(ctx, lab.DemoNamespace, lab.DemoService, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	_, kubeconfig, err := l.Describe()
	if err != nil {
		t.Fatal(err)
	}
	svc := webService("plugin-no-eip", 8095, map[string]string{model.AnnotationGateway: lab.GatewayName})
	if err := l.Client.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Client.Delete(ctx, svc) })

	run := func(code int, args ...string) string {
		t.Helper()
		out, err := exec.Command(plugin, append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
		got := 0
		if ee, ok := err.(*exec.ExitError); ok {
			got = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("kubectl-vpcgw %v: %v\n%s", args, err, out)
		}
		if got != code {
			t.Fatalf("kubectl-vpcgw %v: exit code %d, want %d\n%s", args, got, code, out)
		}
		return string(out)
	}
	status := run(0, "status", "-A")
	line := regexp.MustCompile(`(?m)^demo/web\s+lab-gw\s+lab-eip\s+` + regexp.QuoteMeta(lab.EIPAddress) + `\s+\S*` +
		regexp.QuoteMeta(lab.EIPAddress) + `:80/tcp\S*\s+\S*10\.77\.1\.11:8080\S*\s+None\s+true\s+-$`)
	if !line.MatchString(status) {
		t.Fatalf("status has no served line for demo/web:\n%s", status)
	}
	explain := run(3, "-n", lab.DemoNamespace, "explain", "svc/plugin-no-eip")
	if !strings.Contains(explain, "ClusterIP") || !strings.Contains(explain, model.AnnotationEIP) {
		t.Fatalf("explain does not say that the EIP annotation is missing:\n%s", explain)
	}
	// The plugin reads a gateway's table only through the exec API (it never runs ip netns exec
	// on the user's machine, SPEC O2). This lab has no kubelet, so ruleset is an error that names
	// the instance; test/kubeovn's TestKubectlPluginInTheLab checks ruleset's table through the
	// lab node's exec API. Here the table is read from the gateway's namespace by the test.
	ruleset := run(1, "ruleset", lab.GatewayName)
	if pod := model.GatewayAppPrefix + lab.GatewayName + "-0"; !strings.Contains(ruleset, pod+": ") {
		t.Fatalf("ruleset without a kubelet does not name the instance %s:\n%s", pod, ruleset)
	}
	table, err := l.NftTable()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table, "table ip kube-ovn") || !strings.Contains(table, lab.EIPAddress+" . tcp . 80 : goto dnat-") {
		t.Fatalf("the gateway's table:\n%s", table)
	}
}

// TestControllerRestartDuringTraffic: the controller (and with it the agent's stream) restarts in
// the middle of a long TCP transfer through the EIP; the transfer completes, the table is never
// flushed, and the restarted controller converges without touching the ingress.
// covers: L7, L6, R5
func TestControllerRestartDuringTraffic(t *testing.T) {
	l := needLab(t)
	ctx := context.Background()
	ip, err := l.WaitIngress(ctx, lab.DemoNamespace, lab.DemoService, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		res netlab.ProbeResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := l.ProbeWith(l.ExternalClient(), netlab.ProbeOptions{Target: ip + ":80", Path: "/stream?ms=5000", Count: 1, Timeout: 30 * time.Second})
		done <- result{res, err}
	}()
	time.Sleep(time.Second) // let the transfer start (sequencing, not an assertion)

	element := ip + " . tcp . 80 : goto dnat-"
	l.StopController()
	table, err := l.NftTable()
	if err != nil || !strings.Contains(table, element) {
		t.Fatalf("with the controller stopped the table lost the EIP identity (err %v):\n%s", err, table)
	}
	l.StartController()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	finished := false
	for answer := range r.res.Answers {
		finished = finished || strings.HasSuffix(answer, " done")
	}
	if r.res.Errors != 0 || !finished {
		t.Fatalf("the long transfer broke over the restart: %+v", r.res)
	}
	waitTable(t, l, "the restarted controller's state", func(table string) bool { return strings.Contains(table, element) })
	if got, err := l.WaitIngress(ctx, lab.DemoNamespace, lab.DemoService, 10*time.Second); err != nil || got != ip {
		t.Fatalf("ingress after the restart: %q, %v", got, err)
	}
}

// TestMetricsScraped: the lab controller's /metrics has the vpcgw series, and they move when an
// endpoint changes.
// covers: O3
func TestMetricsScraped(t *testing.T) {
	l := needLab(t)
	ctx := context.Background()
	if _, err := l.WaitIngress(ctx, lab.DemoNamespace, lab.DemoService, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	before := scrape(t)
	for _, series := range []string{
		"vpcgw_gateway_sync_duration_seconds_count", "vpcgw_network_programming_latency_seconds_count",
		"vpcgw_gateway_identities{gateway=\"lab-gw\"}", "vpcgw_gateway_backends{gateway=\"lab-gw\"}",
		"vpcgw_records_written_total", "vpcgw_gateway_sync_failures_total", "vpcgw_conntrack_entries_deleted_total",
	} {
		if _, ok := before[series]; !ok && !strings.HasSuffix(series, "failures_total") {
			t.Errorf("series %s missing from %s", series, metricsURL)
		}
	}
	if err := lab.SetPodReady(ctx, l.Client, lab.DemoNamespace, "web-be1", false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lab.SetPodReady(ctx, l.Client, lab.DemoNamespace, "web-be1", true) })
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		after := scrape(t)
		return after["vpcgw_network_programming_latency_seconds_count"] > before["vpcgw_network_programming_latency_seconds_count"] &&
			after["vpcgw_gateway_sync_duration_seconds_count"] > before["vpcgw_gateway_sync_duration_seconds_count"], nil
	})
	if err != nil {
		t.Fatalf("the metrics did not move after an endpoint change: %v", err)
	}
}

// scrape reads the Prometheus text format: series (name with labels, histogram buckets left
// out) to value; counters and histogram counts summed over their labels under the bare name.
func scrape(t *testing.T) map[string]float64 {
	t.Helper()
	resp, err := http.Get(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "vpcgw_") || strings.Contains(line, "_bucket{") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		series := line[:i]
		out[series] += v
		if j := strings.IndexByte(series, '{'); j > 0 {
			out[series[:j]] += v
		}
	}
	return out
}
