package kubeovn

// Tests moved from test/e2e (the older lab that played kube-ovn's part) to the lab beside the real
// kube-ovn-controller: here kube-ovn itself makes the EIPs Ready and programs them in its gateway
// Pod.

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	"github.com/vpcgw/vpcgw/internal/cluster"
	"github.com/vpcgw/vpcgw/internal/dataplane"
	"github.com/vpcgw/vpcgw/internal/model"
)

// webService is a LoadBalancer Service of the demo's backends on port, with annotations.
func webService(name string, port int32, annotations map[string]string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: cluster.DemoNamespace, Annotations: annotations},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app": cluster.DemoDeployment},
			Ports:    []corev1.ServicePort{{Name: "http", Port: port, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(cluster.BackendPort)}},
		},
	}
}

// deleteAndWait deletes o and waits until it is gone (its finalizers released).
func deleteAndWait(t *testing.T, c *cluster.Cluster, o client.Object) {
	t.Helper()
	if err := c.Client.Delete(context.Background(), o); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting %T %s: %v", o, o.GetName(), err)
		return
	}
	eventually(t, time.Minute, "deleted "+o.GetName()+" gone", func(ctx context.Context) (bool, error) {
		err := c.Client.Get(ctx, client.ObjectKeyFromObject(o), o)
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}

// waitEvent waits for an event of reason on the demo namespace's Service svcName.
func waitEvent(t *testing.T, c *cluster.Cluster, svcName, reason string) corev1.Event {
	t.Helper()
	var found corev1.Event
	eventually(t, 30*time.Second, "event "+reason+" on Service "+svcName, func(ctx context.Context) (bool, error) {
		var evs corev1.EventList
		if err := c.Client.List(ctx, &evs, client.InNamespace(cluster.DemoNamespace)); err != nil {
			return false, err
		}
		for _, ev := range evs.Items {
			if ev.InvolvedObject.Kind == "Service" && ev.InvolvedObject.Name == svcName && ev.Reason == reason {
				found = ev
				return true, nil
			}
		}
		return false, nil
	})
	return found
}

// identityOn8081 finds the identities of port 8081/tcp in vpcgw's table (elements "<vip> . tcp .
// 8081 : goto dnat-...").
var identityOn8081 = regexp.MustCompile(`(\d+\.\d+\.\d+\.\d+) \. tcp \. 8081 : goto`)

// gatewayTable is vpcgw's nft table in kube-ovn's gateway Pod.
func gatewayTable(t *testing.T, c *cluster.Cluster) string {
	t.Helper()
	return inGateway(t, c, "nft", "list", "table", "ip", dataplane.TableName)
}

func assertNoIngress(t *testing.T, c *cluster.Cluster, name string) {
	t.Helper()
	if ing := service(t, c, cluster.DemoNamespace, name).Status.LoadBalancer.Ingress; len(ing) != 0 {
		t.Fatalf("Service %s has ingress %v, want none", name, ing)
	}
}

// A LoadBalancer Service with the gateway annotation but no EIP annotation: the webhook refuses
// to create one, naming the missing annotation; a Service that gets there anyway (a ClusterIP
// Service on the gateway, served on its ClusterIP, turned into a LoadBalancer without an EIP) is
// reported with a Warning event naming the missing annotation, no EIP identity is programmed and
// no ingress published, while its ClusterIP part stays served (the lab runs the ClusterIP gate
// too, and S2 needs only the gateway for it).
// covers: S2, T3
func TestLoadBalancerWithoutEIPAnnotation(t *testing.T) {
	c := lab(t)
	ctx := context.Background()
	svc := webService("no-eip", 8081, map[string]string{model.AnnotationGateway: cluster.GatewayName})
	err := c.Client.Create(ctx, svc.DeepCopy())
	if err == nil || !strings.Contains(err.Error(), model.AnnotationEIP) {
		t.Fatalf("creating a LoadBalancer Service with only %s: %v, want the webhook's refusal naming %s", model.AnnotationGateway, err, model.AnnotationEIP)
	}

	svc.Spec.Type = corev1.ServiceTypeClusterIP
	if err := c.Client.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteAndWait(t, c, svc) })
	cip := service(t, c, svc.Namespace, svc.Name).Spec.ClusterIP
	if err := c.WaitReachable(ctx, c.VPCClient(), "tcp", cip+":8081", 30*time.Second); err != nil {
		t.Fatalf("the ClusterIP Service on the gateway: %v", err)
	}
	cur := service(t, c, svc.Namespace, svc.Name)
	cur.Spec.Type = corev1.ServiceTypeLoadBalancer
	if err := c.Client.Update(ctx, cur); err != nil {
		t.Fatalf("turning the Service into a LoadBalancer: %v", err)
	}
	ev := waitEvent(t, c, svc.Name, model.ReasonEIPMissing)
	if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, model.AnnotationEIP) {
		t.Fatalf("event = %s %q, want a Warning naming %s", ev.Type, ev.Message, model.AnnotationEIP)
	}
	// The sync that reported it has planned the Service: its ClusterIP is still served, and no
	// EIP identity was added for it.
	if err := c.WaitReachable(ctx, c.VPCClient(), "tcp", cip+":8081", 30*time.Second); err != nil {
		t.Fatalf("the LoadBalancer without an EIP lost its ClusterIP: %v", err)
	}
	table := gatewayTable(t, c)
	for _, m := range identityOn8081.FindAllStringSubmatch(table, -1) {
		if m[1] != cip {
			t.Fatalf("an identity %s:8081 other than the ClusterIP %s was programmed for a Service without EIP annotation:\n%s", m[1], cip, table)
		}
	}
	if r, err := c.Probe(c.ExternalClient(), "tcp", cluster.EIPAddress+":8081", 3); err != nil || r.Total() != 0 {
		t.Fatalf("the external client got answers on %s:8081 (%+v, %v); nothing serves it there", cluster.EIPAddress, r, err)
	}
	assertNoIngress(t, c, svc.Name)
}

// A Service whose EIP exists but is not Ready is not programmed on it (event, no ingress); it is
// served as soon as kube-ovn makes the EIP Ready, woken by the EIP's own update: no restart of
// vpcgw, no resync wait. kube-ovn-controller is stopped while the EIP is created, so the EIP stays
// as the user wrote it until kube-ovn is back and runs its eip-add in the gateway.
// covers: S4, T1, T3
func TestEIPBecomesReady(t *testing.T) {
	c := lab(t)
	ctx := context.Background()
	const eipName, eipIP = "late-eip", "172.31.100.11"
	// Cleanups run last first: the Service goes, kube-ovn runs again, then the EIP goes (kube-ovn
	// releases its finalizer; vpcgw's webhook refuses to delete an EIP in use).
	t.Cleanup(func() { deleteAndWait(t, c, &kubeovnv1.IptablesEIP{ObjectMeta: metav1.ObjectMeta{Name: eipName}}) })
	t.Cleanup(func() {
		if c.KubeOVN.Exited() {
			if err := c.KubeOVN.Restart(); err != nil {
				t.Errorf("starting kube-ovn-controller again: %v", err)
			}
		}
	})
	c.KubeOVN.Stop()
	if err := c.Client.Create(ctx, cluster.EIP(eipName, eipIP)); err != nil {
		t.Fatal(err)
	}
	svc := webService("late", 80, map[string]string{model.AnnotationGateway: cluster.GatewayName, model.AnnotationEIP: eipName})
	if err := c.Client.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteAndWait(t, c, svc) })

	// The ClusterIP part is served: the sync that left the EIP identity out has run.
	cip := service(t, c, svc.Namespace, svc.Name).Spec.ClusterIP
	if err := c.WaitReachable(ctx, c.VPCClient(), "tcp", cip+":80", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, c, svc.Name, model.ReasonEIPNotReady)
	if table := gatewayTable(t, c); strings.Contains(table, eipIP) {
		t.Fatalf("a Service with a not-Ready EIP was programmed:\n%s", table)
	}
	assertNoIngress(t, c, svc.Name)

	if err := c.KubeOVN.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := c.EIPReady(ctx, eipName, 90*time.Second); err != nil {
		t.Fatalf("kube-ovn did not make %s Ready: %v", eipName, err)
	}
	ip, err := c.WaitIngress(ctx, svc.Namespace, svc.Name, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ip != eipIP {
		t.Fatalf("ingress = %s, want %s", ip, eipIP)
	}
	if err := c.WaitReachable(ctx, c.ExternalClient(), "tcp", eipIP+":80", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	res, err := c.Probe(c.ExternalClient(), "tcp", eipIP+":80", 10)
	if err != nil {
		t.Fatal(err)
	}
	if res.Total() != 10 {
		t.Fatalf("through the late EIP: answers %v, %d errors (%s)", res.Answers, res.Errors, res.LastError)
	}
}

// The controller's /metrics has the vpcgw series, and they move when kube-controller-manager
// rewrites the demo's EndpointSlice (stamped with its last-change-trigger-time) after a scale.
// covers: O3
func TestMetricsScraped(t *testing.T) {
	c := lab(t)
	ctx := context.Background()
	before, err := c.ControllerMetrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gw := `{gateway="` + cluster.GatewayName + `"}`
	for _, series := range []string{
		`vpcgw_gateway_sync_duration_seconds_count{result="ok"}`, "vpcgw_network_programming_latency_seconds_count",
		"vpcgw_gateway_identities" + gw, "vpcgw_gateway_backends" + gw,
		"vpcgw_conntrack_entries_deleted_total", "vpcgw_gateway_agents_connected" + gw,
	} {
		if _, ok := before[series]; !ok {
			t.Errorf("series %s missing from %s", series, c.MetricsURL())
		}
	}
	if v := before["vpcgw_gateway_identities"+gw]; v < 2 {
		t.Errorf("vpcgw_gateway_identities%s = %v, want the demo's identities (at least its EIP's TCP and UDP)", gw, v)
	}
	if err := c.ScaleDeployment(ctx, cluster.DemoNamespace, cluster.DemoDeployment, 3); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.ScaleDeployment(context.Background(), cluster.DemoNamespace, cluster.DemoDeployment, 2); err != nil {
			t.Error(err)
		}
		eventually(t, 2*time.Minute, "the demo back at 2 Ready backends", func(ctx context.Context) (bool, error) {
			b, err := c.ReadyBackends(ctx, cluster.DemoNamespace, cluster.DemoDeployment)
			return err == nil && len(b) == 2 && len(demoPods(t, c)) == 2, nil
		})
	})
	eventually(t, 2*time.Minute, "the latency and sync metrics move after an endpoint change", func(ctx context.Context) (bool, error) {
		after, err := c.ControllerMetrics(ctx)
		if err != nil {
			return false, nil
		}
		return after["vpcgw_network_programming_latency_seconds_count"] > before["vpcgw_network_programming_latency_seconds_count"] &&
			after[`vpcgw_gateway_sync_duration_seconds_count{result="ok"}`] > before[`vpcgw_gateway_sync_duration_seconds_count{result="ok"}`] &&
			after["vpcgw_gateway_backends"+gw] > before["vpcgw_gateway_backends"+gw] &&
			recordWrites(after) > recordWrites(before), nil
	})
}

// recordWrites adds vpcgw_records_written_total over its operations (a series appears with its
// operation's first write).
func recordWrites(samples map[string]float64) float64 {
	total := 0.0
	for series, v := range samples {
		if strings.HasPrefix(series, "vpcgw_records_written_total{") {
			total += v
		}
	}
	return total
}

// A client inside the VPC reaches a Service's ClusterIP and EIP through the gateway (hairpin: the
// gateway SNATs, so replies come back), both backends answering, and vpcgw wrote the VIP policy
// into the Vpc's router in OVN (priority 29210, reroute to the gateway's lanIp). When the Service
// leaves the mode (both annotations cleared), the policy goes and the ClusterIP answers no more.
// covers: V1, V2, D4, I1, L2
func TestVPCClientThroughRouterPolicies(t *testing.T) {
	c := lab(t)
	ctx := context.Background()
	svc := webService("vpc-web", 8090, map[string]string{model.AnnotationGateway: cluster.GatewayName, model.AnnotationEIP: cluster.EIPName})
	if err := c.Client.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteAndWait(t, c, svc) })
	if _, err := c.WaitIngress(ctx, svc.Namespace, svc.Name, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	cip := service(t, c, svc.Namespace, svc.Name).Spec.ClusterIP
	backends := demoPods(t, c)
	for _, target := range []string{cip + ":8090", cluster.EIPAddress + ":8090"} {
		if err := c.WaitReachable(ctx, c.VPCClient(), "tcp", target, 30*time.Second); err != nil {
			t.Fatalf("VPC client to %s: %v", target, err)
		}
		// 40 new connections; each of the 2 backends answers at least once unless dispatch is
		// broken (a fair coin misses one 40 times with probability 2^-39).
		res, err := c.Probe(c.VPCClient(), "tcp", target, 40)
		if err != nil {
			t.Fatal(err)
		}
		if res.Errors != 0 || len(res.Answers) != len(backends) {
			t.Fatalf("VPC client to %s: answers %v from backends %v, %d errors (%s)", target, res.Answers, backends, res.Errors, res.LastError)
		}
		for name := range res.Answers {
			if _, ok := backends[name]; !ok {
				t.Fatalf("VPC client to %s: an answer from %q, not a demo backend (%v)", target, name, backends)
			}
		}
	}
	policies, err := c.OVN.NBCtl("lr-policy-list", cluster.VpcName)
	if err != nil {
		t.Fatal(err)
	}
	wantLine := regexp.MustCompile(`(?m)^\s*29210\s+ip4\.dst == ` + regexp.QuoteMeta(cip) + `\s+reroute\s+` + regexp.QuoteMeta(cluster.GatewayLanIP) + `\s*$`)
	if !wantLine.MatchString(policies) {
		t.Fatalf("lr-policy-list %s has no VIP policy for %s:\n%s", cluster.VpcName, cip, policies)
	}

	// Leave the mode: both annotations cleared.
	cur := service(t, c, svc.Namespace, svc.Name)
	patch := client.MergeFrom(cur.DeepCopy())
	delete(cur.Annotations, model.AnnotationGateway)
	delete(cur.Annotations, model.AnnotationEIP)
	if err := c.Client.Patch(ctx, cur, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the VIP policy of "+cip+" removed", func(context.Context) (bool, error) {
		p, err := c.OVN.NBCtl("lr-policy-list", cluster.VpcName)
		return err == nil && !strings.Contains(p, cip), nil
	})
	eventually(t, 30*time.Second, "the ClusterIP unreachable after the Service left the mode", func(context.Context) (bool, error) {
		res, err := c.Probe(c.VPCClient(), "tcp", cip+":8090", 1)
		return err == nil && res.Total() == 0, nil
	})
}
