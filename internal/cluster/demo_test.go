package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	"github.com/vpcgw/vpcgw/internal/cluster"
	"github.com/vpcgw/vpcgw/internal/kubeovnrun"
	"github.com/vpcgw/vpcgw/internal/netlab"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

// The demo `vpcgw-lab lab` shows, step by step as Main runs it, against one lab cluster beside the
// real kube-ovn-controller: kube-ovn's gateway pod listed Ready 1/1, the EXTERNAL-IP from
// kube-ovn's EIP, traffic through the EIP (TCP, UDP) and the ClusterIP, the Deployment scaled
// 2 → 5 → 1 through the scale subresource moving the answering backends exactly, lab.json
// naming everything a user needs, and the real kubectl driving the lab (get pods, scale).
//
// covers: O1
func TestLabDemo(t *testing.T) {
	c := startCluster(t, cluster.Options{})
	// kube-ovn's gateway pod, Ready 1/1 and Running, in a pods listing.
	gatewayListed := regexp.MustCompile(`(?m)^` + kubeovnrun.Namespace + `\s+` + regexp.QuoteMeta(c.GatewayPodName()) + `\s+1/1\s+Running\s`)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out bytes.Buffer
	t.Cleanup(func() { t.Logf("demo output:\n%s", out.String()) })
	const requests = 20
	d := &cluster.Demo{C: c, Out: &out, Requests: requests, Timeout: 90 * time.Second}

	svc, err := d.Served(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// The listing shows kube-ovn's gateway pod, where kube-ovn put it, Ready 1/1, and the backends.
	rows, err := cluster.ListPods(ctx, c.Client)
	if err != nil {
		t.Fatal(err)
	}
	var listing bytes.Buffer
	if err := cluster.WritePods(&listing, rows); err != nil {
		t.Fatal(err)
	}
	out.Write(listing.Bytes())
	if !gatewayListed.Match(listing.Bytes()) {
		t.Errorf("the pods listing does not show %s/%s Ready 1/1 Running:\n%s", kubeovnrun.Namespace, c.GatewayPodName(), listing.String())
	}
	backends := 0
	for _, r := range rows {
		if r.Namespace == cluster.DemoNamespace && strings.HasPrefix(r.Name, cluster.DemoDeployment+"-") && r.Ready == "1/1" && r.Status == "Running" {
			backends++
		}
	}
	if backends != 2 {
		t.Errorf("the listing shows %d Ready backends of %s/%s, want 2:\n%s", backends, cluster.DemoNamespace, cluster.DemoDeployment, listing.String())
	}

	// EXTERNAL-IP is the address kube-ovn gave the EIP.
	var eip kubeovnv1.IptablesEIP
	if err := c.Client.Get(ctx, client.ObjectKey{Name: cluster.EIPName}, &eip); err != nil {
		t.Fatal(err)
	}
	if ext := svc.Status.LoadBalancer.Ingress[0].IP; ext != eip.Status.IP || ext != cluster.EIPAddress {
		t.Fatalf("EXTERNAL-IP %s, kube-ovn's EIP status IP %s, want both %s", ext, eip.Status.IP, cluster.EIPAddress)
	}

	// Every request through the EIP and the ClusterIP is answered, by both backends.
	two, err := c.ReadyBackends(ctx, cluster.DemoNamespace, cluster.DemoDeployment)
	if err != nil {
		t.Fatal(err)
	}
	runs, err := d.Traffic(ctx, svc)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) < 4 {
		t.Fatalf("%d probes, want TCP and UDP through the EIP and the ClusterIP", len(runs))
	}
	for _, r := range runs {
		if got := slices.Sorted(maps.Keys(r.Result.Answers)); r.Result.Total() != requests || !slices.Equal(got, two) {
			t.Errorf("%s %s from %s: %d of %d answered, by %v, want all by %v", r.Proto, r.Target, r.FromName, r.Result.Total(), requests, got, two)
		}
	}

	// Scaling moves the backends: exactly the new Ready pods answer, and the gateway's table
	// sends to exactly their addresses.
	var five []string
	for _, n := range []int32{5, 1} {
		pods, err := d.Scale(ctx, svc, n)
		if err != nil {
			t.Fatal(err)
		}
		var dep appsv1.Deployment
		if err := c.Client.Get(ctx, client.ObjectKey{Namespace: cluster.DemoNamespace, Name: cluster.DemoDeployment}, &dep); err != nil {
			t.Fatal(err)
		}
		if *dep.Spec.Replicas != n {
			t.Errorf("deployment spec.replicas %d after scaling to %d", *dep.Spec.Replicas, n)
		}
		ready, err := c.ReadyBackends(ctx, cluster.DemoNamespace, cluster.DemoDeployment)
		if err != nil {
			t.Fatal(err)
		}
		if len(ready) != int(n) || !slices.Equal(ready, pods) {
			t.Fatalf("after scaling to %d: Ready pods %v, the demo saw %v", n, ready, pods)
		}
		res, err := c.Probe(c.ExternalClient(), "tcp", svc.Status.LoadBalancer.Ingress[0].IP+":80", 10*int(n))
		if err != nil {
			t.Fatal(err)
		}
		if got := slices.Sorted(maps.Keys(res.Answers)); res.Errors > 0 || !slices.Equal(got, ready) {
			t.Errorf("after scaling to %d: answers from %v (%d failed), want exactly %v", n, got, res.Errors, ready)
		}
		switch n {
		case 5:
			five = ready
			if !containsAll(five, two) {
				t.Errorf("scaling 2 → 5 replaced backends: %v then %v", two, five)
			}
		case 1:
			if !containsAll(five, ready) {
				t.Errorf("scaling 5 → 1 left %v, not one of %v", ready, five)
			}
		}
	}

	dp, err := d.ShowDataPlane()
	if err != nil {
		t.Fatal(err)
	}
	for _, vip := range []string{svc.Spec.ClusterIP, cluster.EIPAddress} {
		if !regexp.MustCompile(`ip4.dst == ` + regexp.QuoteMeta(vip) + `\s+reroute\s+` + regexp.QuoteMeta(cluster.GatewayLanIP)).MatchString(dp.Policies) {
			t.Errorf("lr-policy-list %s has no reroute of %s to the gateway %s:\n%s", cluster.VpcName, vip, cluster.GatewayLanIP, dp.Policies)
		}
	}
	var last corev1.Pod
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: cluster.DemoNamespace, Name: onlyBackend(ctx, t, c)}, &last); err != nil {
		t.Fatal(err)
	}
	targets := slices.Compact(slices.Sorted(slices.Values(regexp.MustCompile(`dnat to ([0-9.]+):`).FindAllString(dp.Table, -1))))
	if want := "dnat to " + last.Status.PodIP + ":"; len(targets) != 1 || targets[0] != want {
		t.Errorf("the gateway's table DNATs to %v, want only the last backend (%s):\n%s", targets, want, dp.Table)
	}

	// lab.json names the KUBECONFIG, the OVN databases, every namespace with its role, and
	// commands that work as written. Read once the scale-down has settled: a Pod still
	// terminating is listed with its namespace, which its kubelet then removes (the flake of
	// issue 34 was that race, not a wrong description).
	noneTerminating(ctx, t, c, cluster.DemoNamespace)
	path, _, err := c.WriteDescription(ctx)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var desc cluster.Description
	if err := json.Unmarshal(raw, &desc); err != nil {
		t.Fatalf("lab.json does not parse: %v\n%s", err, raw)
	}
	if _, err := os.Stat(desc.Kubeconfig); err != nil || desc.Kubeconfig != c.Kubeconfig {
		t.Errorf("lab.json kubeconfig %q (lab's %q): %v", desc.Kubeconfig, c.Kubeconfig, err)
	}
	if desc.OVN.NB != c.OVN.NBAddr() || desc.OVN.SB != c.OVN.SBAddr() {
		t.Errorf("lab.json OVN %+v, want NB %s SB %s", desc.OVN, c.OVN.NBAddr(), c.OVN.SBAddr())
	}
	gwNetns, _ := c.GatewayNetns()
	wantNetns := map[string]string{
		c.ExternalClient(): string(cluster.RoleExternalClient), c.VPCClient(): string(cluster.RoleVPCClient),
		c.Chassis.Netns(): string(cluster.RoleChassis), gwNetns: kubeovnrun.Namespace + "/" + c.GatewayPodName(),
	}
	for _, n := range desc.Namespaces {
		if want, ok := wantNetns[n.Name]; ok && (want == string(n.Role) || want == n.Pod) {
			delete(wantNetns, n.Name)
		}
		if _, err := netlab.Run("ip", "netns", "exec", n.Name, "true"); err != nil {
			t.Errorf("lab.json names namespace %s (%s), which does not exist: %v", n.Name, n.Role, err)
		}
	}
	if len(wantNetns) > 0 {
		t.Errorf("lab.json lacks namespaces (name → role or pod) %v:\n%s", wantNetns, raw)
	}
	if logs, err := os.ReadFile(desc.Logs); err != nil || !bytes.Contains(logs, []byte("== kube-ovn-controller")) {
		t.Errorf("lab.json's logs %s lack kube-ovn-controller's (%v)", desc.Logs, err)
	}
	if !slices.ContainsFunc(desc.Created, func(r cluster.ObjectRef) bool { return r.Kind == "VpcNatGateway" && r.Name == cluster.GatewayName }) {
		t.Errorf("lab.json's created objects lack VpcNatGateway %s: %+v", cluster.GatewayName, desc.Created)
	}
	if len(desc.Commands) == 0 {
		t.Fatalf("lab.json has no commands")
	}
	probe := desc.Commands[0].Argv // the external client's TCP probe through the EIP
	pout, err := exec.Command(probe[0], probe[1:]...).Output()
	if err != nil {
		t.Fatalf("lab.json command %q: %v", probe, err)
	}
	var pres netlab.ProbeResult
	if err := json.Unmarshal(pout, &pres); err != nil || pres.Total() == 0 || pres.Errors > 0 {
		t.Errorf("lab.json command %q printed %s (%v), want every request answered", probe, pout, err)
	}

	// The real kubectl, with the lab's KUBECONFIG, lists kube-ovn's gateway pod and scales the
	// Deployment: the lab is driven with kubectl alone.
	t.Run("kubectl", func(t *testing.T) {
		assets, missing := testutil.EnvtestAssets("kubectl")
		if missing != "" {
			testutil.Skip(t, missing)
		}
		kubectl := func(args ...string) string {
			t.Helper()
			cmd := exec.CommandContext(ctx, assets+"/kubectl", append([]string{"--kubeconfig", desc.Kubeconfig}, args...)...)
			b, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, b)
			}
			return string(b)
		}
		if got := kubectl("get", "pods", "-A"); !gatewayListed.MatchString(got) {
			t.Errorf("kubectl get pods -A does not list %s/%s Ready 1/1 Running:\n%s", kubeovnrun.Namespace, c.GatewayPodName(), got)
		}
		// lab.json follows: it names the new Pods' namespaces while the lab stays up.
		keepCtx, stopKeeping := context.WithCancel(ctx)
		kept := make(chan struct{})
		go func() {
			defer close(kept)
			c.KeepDescription(keepCtx, 200*time.Millisecond, func(err error) { t.Errorf("refreshing lab.json: %v", err) })
		}()
		defer func() { stopKeeping(); <-kept }()

		kubectl("scale", "deployment/"+cluster.DemoDeployment, "-n", cluster.DemoNamespace, "--replicas=3")
		three, _, err := d.WaitBackends(ctx, svc, 3)
		if err != nil {
			t.Fatal(err)
		}
		var absent []string
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			raw, err := os.ReadFile(path)
			if err != nil {
				return false, err
			}
			var desc cluster.Description
			if err := json.Unmarshal(raw, &desc); err != nil {
				return false, fmt.Errorf("lab.json does not parse: %w", err)
			}
			absent = slices.DeleteFunc(slices.Clone(three), func(pod string) bool {
				return slices.ContainsFunc(desc.Namespaces, func(n cluster.Netns) bool {
					return n.Role == cluster.RolePod && n.Pod == cluster.DemoNamespace+"/"+pod
				})
			})
			return len(absent) == 0, nil
		})
		if err != nil {
			t.Errorf("lab.json does not name the namespaces of pods %v after kubectl scale: %v", absent, err)
		}
	})
}

// onlyBackend is the name of the demo Deployment's one Ready pod.
// noneTerminating waits until no Pod of namespace ns is being deleted, and none is left whose
// deletion the kubelet has not finished.
func noneTerminating(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string) {
	t.Helper()
	var last []string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var pods corev1.PodList
		if err := c.Client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return false, err
		}
		last = last[:0]
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				last = append(last, p.Name)
			}
		}
		return len(last) == 0, nil
	})
	if err != nil {
		t.Fatalf("Pods of %s still terminating %v: %v", ns, last, err)
	}
}

func onlyBackend(ctx context.Context, t *testing.T, c *cluster.Cluster) string {
	t.Helper()
	ready, err := c.ReadyBackends(ctx, cluster.DemoNamespace, cluster.DemoDeployment)
	if err != nil || len(ready) != 1 {
		t.Fatalf("Ready backends %v (%v), want one", ready, err)
	}
	return ready[0]
}

func containsAll(set, sub []string) bool {
	for _, s := range sub {
		if !slices.Contains(set, s) {
			return false
		}
	}
	return true
}
