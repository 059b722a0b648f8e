package kubeovn

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/cluster"
	"github.com/vpcgw/vpcgw/internal/model"
)

// demoPods are the names and addresses of the demo Deployment's running Pods.
func demoPods(t *testing.T, c *cluster.Cluster) map[string]string {
	t.Helper()
	var pods corev1.PodList
	if err := c.Client.List(context.Background(), &pods, client.InNamespace(cluster.DemoNamespace), client.MatchingLabels{"app": cluster.DemoDeployment}); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && p.DeletionTimestamp == nil {
			out[p.Name] = p.Status.PodIP
		}
	}
	return out
}

// The ledger lives in vpcgw's own kind, which kube-ovn-controller knows nothing of: it writes no
// IptablesDnatRule, so kube-ovn programs nothing, adds no finalizer and loops on nothing of
// vpcgw's; and a user's own IptablesDnatRule on the same EIP is programmed by kube-ovn as usual and
// serves beside vpcgw's identities.
// covers: K2, R6, K8 (clashes C2, C3, C14)
func TestKubeOVNLeavesTheLedgerAlone(t *testing.T) {
	c := lab(t)
	ctx := context.Background()

	var recs vpcgwv1alpha1.ServiceRecordList
	if err := c.Client.List(ctx, &recs, client.MatchingLabels{model.LabelRecordName: cluster.DemoService}); err != nil {
		t.Fatal(err)
	}
	if len(recs.Items) != 1 || !recs.Items[0].Status.Ready || len(recs.Items[0].Finalizers) != 0 {
		t.Fatalf("ServiceRecords of the demo: %+v", recs.Items)
	}
	var rules kubeovnv1.IptablesDnatRuleList
	if err := c.Client.List(ctx, &rules); err != nil {
		t.Fatal(err)
	}
	if len(rules.Items) != 0 {
		t.Fatalf("IptablesDnatRules exist before any user made one: %d (vpcgw must write none)", len(rules.Items))
	}

	// A user's exclusive DNAT on vpcgw's EIP, another port: kube-ovn programs it.
	pods := demoPods(t, c)
	var backend, backendIP string
	for name, ip := range pods {
		backend, backendIP = name, ip
		break
	}
	user := &kubeovnv1.IptablesDnatRule{ObjectMeta: metav1.ObjectMeta{Name: "user-dnat-2222"}, Spec: kubeovnv1.IptablesDnatRuleSpec{
		EIP: cluster.EIPName, ExternalPort: "2222", Protocol: "tcp", InternalIP: backendIP, InternalPort: "8080"}}
	if err := c.Client.Create(ctx, user); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Deleted through kube-ovn (its finalizer, dnat-del), before the next test looks at the
		// gateway's iptables.
		_ = c.Client.Delete(context.Background(), user)
		eventually(t, 60*time.Second, "kube-ovn removes the user's DNAT", func(ctx context.Context) (bool, error) {
			err := c.Client.Get(ctx, client.ObjectKeyFromObject(user), &kubeovnv1.IptablesDnatRule{})
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		})
	})
	eventually(t, 60*time.Second, "kube-ovn programs the user's DNAT", func(ctx context.Context) (bool, error) {
		var r kubeovnv1.IptablesDnatRule
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(user), &r); err != nil {
			return false, err
		}
		return r.Status.Ready && slices.Contains(r.Finalizers, model.Finalizer), nil
	})
	if err := c.WaitReachable(ctx, c.ExternalClient(), "tcp", cluster.EIPAddress+":2222", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	r, err := c.Probe(c.ExternalClient(), "tcp", cluster.EIPAddress+":2222", 10)
	if err != nil || r.Answers[backend] != 10 {
		t.Fatalf("kube-ovn's DNAT to %s: %+v %v", backend, r, err)
	}
	// vpcgw's identity on the same EIP still serves every backend.
	r, err = c.Probe(c.ExternalClient(), "tcp", cluster.EIPAddress+":80", 20)
	if err != nil || r.Total() != 20 || len(r.Answers) != len(pods) {
		t.Fatalf("vpcgw's identity beside kube-ovn's DNAT: %+v %v", r, err)
	}

	// kube-ovn executed in the gateway only its own operations: init, routes, the EIP, the user's
	// DNAT; nothing for vpcgw's record, and no retry loop on a vpcgw object.
	var execs []string
	for _, l := range c.KubeOVN.LogLines("executing NAT gateway command") {
		execs = append(execs, l[strings.Index(l, "nat-gateway.sh")+len("nat-gateway.sh "):])
	}
	for _, e := range execs {
		op := strings.Fields(e)[0]
		if !slices.Contains([]string{"init", "subnet-route-add", "subnet-route-del", "eip-add", "dnat-add", "get-iptables-version"}, op) {
			t.Errorf("kube-ovn executed %q in the gateway", e)
		}
		if op == "dnat-add" && !strings.Contains(e, ",2222,tcp,"+backendIP+",8080") {
			t.Errorf("kube-ovn programmed a DNAT that is not the user's: %q", e)
		}
	}
	rec := recs.Items[0].Name
	for _, bad := range []string{rec, "duplicate", "eip cannot be empty", "servicerecord"} {
		if ls := c.KubeOVN.LogLines(bad); len(ls) > 0 {
			t.Errorf("kube-ovn-controller logged %q: %v", bad, ls[:min(len(ls), 3)])
		}
	}
	t.Logf("kube-ovn-controller executed in the gateway: %q", execs)
}

// kube-ovn's iptables chains and the EIP it put on net1 survive vpcgw's syncs and its repair of
// a table flushed by hand; kube-ovn's own hairpin rule for the EIP stays.
// covers: K8, D8, L6 (clash C5 for v1.16.2: iptables side)
func TestKubeOVNGatewayStateSurvives(t *testing.T) {
	c := lab(t)
	before := inGateway(t, c, "iptables-legacy-save", "-t", "nat")
	for _, chain := range []string{":SHARED_DNAT", ":SNAT_FILTER", ":HAIRPIN_SNAT", ":EXCLUSIVE_DNAT"} {
		if !strings.Contains(before, chain) {
			t.Fatalf("kube-ovn's init made no %s chain:\n%s", chain, before)
		}
	}
	if !strings.Contains(before, "--ctorigdst "+cluster.EIPAddress) {
		t.Fatalf("kube-ovn's eip-add made no hairpin rule for the EIP:\n%s", before)
	}
	if !strings.Contains(inGateway(t, c, "ip", "-4", "addr", "show", "dev", "net1"), cluster.EIPAddress+"/") {
		t.Fatal("the EIP is not on net1")
	}
	// Drift: the table flushed by hand is repaired by vpcgw (SPEC L6) and kube-ovn's rules are
	// left as they were.
	inGateway(t, c, "nft", "flush", "table", "ip", "kube-ovn")
	eventually(t, 30*time.Second, "vpcgw repairs the flushed table", func(context.Context) (bool, error) {
		return strings.Contains(inGateway(t, c, "nft", "list", "map", "ip", "kube-ovn", "service-ips"), cluster.EIPAddress), nil
	})
	if err := c.WaitReachable(context.Background(), c.ExternalClient(), "tcp", cluster.EIPAddress+":80", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if after := inGateway(t, c, "iptables-legacy-save", "-t", "nat"); stripCounters(after) != stripCounters(before) {
		t.Fatalf("kube-ovn's iptables rules changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if !strings.Contains(inGateway(t, c, "ip", "-4", "addr", "show", "dev", "net1"), cluster.EIPAddress+"/") {
		t.Fatal("the EIP left net1")
	}
}

// stripCounters drops iptables-save's comment and counter lines, which change with traffic.
func stripCounters(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasPrefix(l, ":") {
			if i := strings.Index(l, " ["); i > 0 {
				l = l[:i]
			}
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// VIP routes survive kube-ovn: while kube-ovn-controller restarts and the Vpc is edited (its VPC
// reconcile deletes every policy the Vpc does not list), the VPC client's requests to the ClusterIP
// and to the EIP never fail.
// covers: K3, V1 (clash C8)
func TestVIPRoutesSurviveKubeOVN(t *testing.T) {
	c := lab(t)
	ctx := context.Background()
	cip := service(t, c, cluster.DemoNamespace, cluster.DemoService).Spec.ClusterIP
	for _, target := range []string{cip + ":80", cluster.EIPAddress + ":80"} {
		if err := c.WaitReachable(ctx, c.VPCClient(), "tcp", target, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	reconciles := len(c.KubeOVN.LogLines("handle add/update vpc " + cluster.VpcName))
	stop := make(chan struct{})
	failures := make(chan string, 1000)
	sent := make(chan int, 1)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				sent <- n
				return
			default:
			}
			for _, target := range []string{cip + ":80", cluster.EIPAddress + ":80"} {
				r, err := c.Probe(c.VPCClient(), "tcp", target, 5)
				n += 5
				if err != nil || r.Total() != 5 {
					select {
					case failures <- target:
					default:
					}
				}
			}
		}
	}()
	// A Vpc edit that makes kube-ovn reconcile the VPC's policies, then a kube-ovn restart (it
	// reconciles every VPC at start).
	var vpc kubeovnv1.Vpc
	if err := c.Client.Get(ctx, client.ObjectKey{Name: cluster.VpcName}, &vpc); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(vpc.DeepCopy())
	if vpc.Annotations == nil {
		vpc.Annotations = map[string]string{}
	}
	vpc.Annotations["test.kubernetes.io/touch"] = "1"
	if err := c.Client.Patch(ctx, &vpc, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "kube-ovn reconciles the Vpc", func(context.Context) (bool, error) {
		return len(c.KubeOVN.LogLines("handle add/update vpc "+cluster.VpcName)) > reconciles, nil
	})
	reconciles = len(c.KubeOVN.LogLines("handle add/update vpc " + cluster.VpcName))
	if err := c.KubeOVN.Restart(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the restarted kube-ovn reconciles the Vpc", func(context.Context) (bool, error) {
		return len(c.KubeOVN.LogLines("handle add/update vpc "+cluster.VpcName)) > reconciles, nil
	})
	close(stop)
	n := <-sent
	close(failures)
	var failed []string
	for f := range failures {
		failed = append(failed, f)
	}
	if len(failed) > 0 {
		t.Fatalf("%d failed requests from the VPC client (of %d) while kube-ovn reconciled: %v", len(failed), n, failed)
	}
	if n == 0 {
		t.Fatal("no request was sent during the reconciles")
	}
	t.Logf("%d requests from the VPC client during a Vpc reconcile and a kube-ovn restart, none failed", n)
}

// A LoadBalancer Service of another implementation's class is left alone: no ingress, no record,
// no finalizer, an event that says why.
// covers: K9
func TestOtherLoadBalancerClassLeftAlone(t *testing.T) {
	c := lab(t)
	ctx := context.Background()
	svc := cluster.DemoServiceObject()
	svc.Name = "metallb-web"
	svc.Spec.LoadBalancerClass = ptr.To("metallb.io/metallb")
	svc.Spec.Ports = []corev1.ServicePort{{Name: "http", Port: 8081, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(cluster.BackendPort)}}
	if err := c.Client.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Client.Delete(context.Background(), svc) })
	eventually(t, 30*time.Second, "an event on the other class's Service", func(ctx context.Context) (bool, error) {
		var evs corev1.EventList
		if err := c.Client.List(ctx, &evs, client.InNamespace(svc.Namespace)); err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == svc.Name && strings.Contains(e.Message, "metallb.io/metallb") {
				return true, nil
			}
		}
		return false, nil
	})
	got := service(t, c, svc.Namespace, svc.Name)
	if len(got.Status.LoadBalancer.Ingress) != 0 || slices.Contains(got.Finalizers, model.Finalizer) {
		t.Fatalf("vpcgw touched another class's Service: ingress %v finalizers %v", got.Status.LoadBalancer.Ingress, got.Finalizers)
	}
}

// The vpcgw controller is a process of its own under the shipped RBAC: stopping and restarting it
// interrupts no traffic (nothing is flushed; the agent's state stays in the kernel) and the
// restarted controller adopts what is there.
// covers: L7, O1
func TestControllerRestartKeepsTraffic(t *testing.T) {
	c := lab(t)
	ctx := context.Background()
	stop := make(chan struct{})
	seen := withdrawals(t, c, stop)
	c.StopController()
	r, err := c.Probe(c.ExternalClient(), "tcp", cluster.EIPAddress+":80", 20)
	if err != nil || r.Total() != 20 {
		t.Fatalf("traffic while the controller is down: %+v %v", r, err)
	}
	if err := c.StartController(ctx); err != nil {
		t.Fatal(err)
	}
	r, err = c.Probe(c.ExternalClient(), "tcp", cluster.EIPAddress+":80", 20)
	if err != nil || r.Total() != 20 {
		t.Fatalf("traffic after the restart: %+v %v", r, err)
	}
	close(stop)
	if w := <-seen; len(w) > 0 {
		t.Fatalf("withdrawn over a controller restart: %v", w)
	}
}

// A namespace that kube-ovn's Vpc does not bind cannot publish through the VPC's gateway: the
// webhook, reading the Vpc as kube-ovn keeps it, rejects the binding with a message that names
// only what the user named; a namespace bound to the Vpc may.
// covers: N1, N8
func TestTenancyBesideKubeOVN(t *testing.T) {
	c := lab(t)
	ctx := context.Background()
	if err := c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant-b"}}); err != nil {
		t.Fatal(err)
	}
	svc := cluster.DemoServiceObject()
	svc.Namespace, svc.Name = "tenant-b", "squat"
	svc.Spec.Ports = []corev1.ServicePort{{Name: "http", Port: 8082, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(cluster.BackendPort)}}
	err := c.Client.Create(ctx, svc)
	if err == nil || !strings.Contains(err.Error(), "namespace tenant-b may not use VpcNatGateway "+cluster.GatewayName+": it does not exist, or neither") || strings.Contains(err.Error(), cluster.DemoNamespace) {
		t.Fatalf("a Service of a namespace the Vpc does not bind: %v", err)
	}
	ok := cluster.DemoServiceObject()
	ok.Name = "admitted"
	ok.Spec.Ports = []corev1.ServicePort{{Name: "http", Port: 8083, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(cluster.BackendPort)}}
	if err := c.Client.Create(ctx, ok); err != nil {
		t.Fatalf("a Service of the Vpc's namespace: %v", err)
	}
	t.Cleanup(func() { _ = c.Client.Delete(context.Background(), ok) })
	if _, err := c.WaitIngress(ctx, ok.Namespace, ok.Name, 30*time.Second); err != nil {
		t.Fatal(err)
	}
}

// spec.loadBalancerSourceRanges is enforced at kube-ovn's gateway: a source outside the ranges
// gets no answer through the EIP, one inside does, and the ClusterIP stays open to the VPC.
// covers: N7
func TestSourceRangesAtTheGateway(t *testing.T) {
	c := lab(t)
	ctx := context.Background()
	svc := cluster.DemoServiceObject()
	svc.Name = "ranged"
	svc.Spec.Ports = []corev1.ServicePort{{Name: "http", Port: 8084, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(cluster.BackendPort)}}
	svc.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/24"} // not the external client
	if err := c.Client.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Client.Delete(context.Background(), svc) })
	if _, err := c.WaitIngress(ctx, svc.Namespace, svc.Name, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	cip := service(t, c, svc.Namespace, svc.Name).Spec.ClusterIP
	if err := c.WaitReachable(ctx, c.VPCClient(), "tcp", cip+":8084", 30*time.Second); err != nil {
		t.Fatal(err) // the ClusterIP is not restricted, and proves the Service is programmed
	}
	r, err := c.Probe(c.ExternalClient(), "tcp", cluster.EIPAddress+":8084", 5)
	if err != nil {
		t.Fatal(err)
	}
	if r.Total() != 0 || r.Errors != 5 {
		t.Fatalf("a source outside the ranges got %d answers (%d errors) through the EIP", r.Total(), r.Errors)
	}
	// The ranges now include the external client.
	cur := service(t, c, svc.Namespace, svc.Name)
	cur.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/24", cluster.ExternalIP + "/32"}
	if err := c.Client.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReachable(ctx, c.ExternalClient(), "tcp", cluster.EIPAddress+":8084", 30*time.Second); err != nil {
		t.Fatal(err)
	}
}
