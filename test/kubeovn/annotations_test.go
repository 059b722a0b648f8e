package kubeovn

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/vpcgw/vpcgw/internal/cluster"
	"github.com/vpcgw/vpcgw/internal/cluster/clustertest"
	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/netlab"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

// With kube-ovn's --enable-lb=true (its default) kube-ovn-controller annotates every LoadBalancer
// Service whose ingress lies in one of its Subnets with
// ovn.kubernetes.io/service_external_ip_from_subnet, by a full Update: vpcgw's EIP ingress gets it.
// The update is admitted, changes nothing that is served (no withdrawal, no flap), and kube-ovn's
// Service worker logs no error. vpcgw runs the EIP gate only here (SPEC F2 with --enable-lb).
// kube-ovn runs with a natGwNamePrefix of its own here, and vpcgw finds the gateway Pod by it.
// covers: K4, K7, S6, K5 (clashes C7, C11)
func TestKubeOVNServiceAnnotationsChangeNothing(t *testing.T) {
	opts, skip, err := clustertest.Options()
	if skip != "" {
		testutil.Skip(t, skip)
	}
	if err != nil {
		t.Fatal(err)
	}
	opts.KubeOVNArgs = []string{"--enable-lb=true"}
	opts.ControllerArgs = []string{"--enable-gw-nftable-lb-svc", "--enable-lb=true"}
	opts.GatewayNamePrefix = "kgw"
	c, err := startCluster(opts) // waits until the demo is served: vpcgw found the Pod
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(tail(c.Logs(), 150))
		}
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	ctx := context.Background()
	if name, ok := c.GatewayNetns(); !ok || c.GatewayPodName() != "kgw-"+cluster.GatewayName+"-0" {
		t.Fatalf("gateway Pod %s (netns %q)", c.GatewayPodName(), name)
	}
	eventually(t, 60*time.Second, "kube-ovn annotates the served Service", func(context.Context) (bool, error) {
		svc := service(t, c, cluster.DemoNamespace, cluster.DemoService)
		return svc.Annotations["ovn.kubernetes.io/service_external_ip_from_subnet"] == cluster.ExternalSubnetName, nil
	})
	stop := make(chan struct{})
	seen := withdrawals(t, c, stop)
	// Every later update of the Service makes kube-ovn write the annotation again (v1.16.2 does a
	// full Update each time): update it a few times and serve through all of it.
	for i := range 3 {
		svc := service(t, c, cluster.DemoNamespace, cluster.DemoService)
		if svc.Labels == nil {
			svc.Labels = map[string]string{}
		}
		svc.Labels["touch"] = string(rune('a' + i))
		if err := c.Client.Update(ctx, svc); err != nil {
			t.Fatal(err)
		}
		r, err := c.Probe(c.ExternalClient(), "tcp", cluster.EIPAddress+":80", 10)
		if err != nil || r.Total() != 10 {
			t.Fatalf("traffic after kube-ovn's update %d: %+v %v", i, r, err)
		}
	}
	svc := service(t, c, cluster.DemoNamespace, cluster.DemoService)
	if got := svc.Status.LoadBalancer.Ingress; len(got) != 1 || got[0].IP != cluster.EIPAddress {
		t.Fatalf("ingress %v", got)
	}
	close(stop)
	if w := <-seen; len(w) > 0 {
		t.Fatalf("withdrawn after kube-ovn's annotation: %v", w)
	}
	for _, bad := range []string{"failed to update service", "denied the request", "admission webhook"} {
		if ls := c.KubeOVN.LogLines(bad); len(ls) > 0 {
			t.Fatalf("kube-ovn-controller logged %q: %v", bad, ls[:min(3, len(ls))])
		}
	}
	if !slices.Contains(svc.Finalizers, "kubeovn.io/kube-ovn-controller") {
		t.Fatal("finalizer gone")
	}
	ovnLoadBalancersServeClusterIPs(t, c, svc)
}

// ovnLoadBalancersServeClusterIPs shows what a user gets with kube-ovn's --enable-lb=true beside
// vpcgw's EIP gate: the ClusterIP is kube-ovn's, in the Vpc's OVN load balancers, and the VPC
// client reaches it through them, not through the gateway (whose table holds no ClusterIP),
// while the EIP is served through the gateway. ovs-vswitchd carries both (Debian's OVS 3.1
// aborted in its userspace conntrack with OVN load balancers on the switches; kube-ovn's 3.5 is
// checked to stay up here).
// covers: F2, K4, T3
func ovnLoadBalancersServeClusterIPs(t *testing.T, c *cluster.Cluster, svc *corev1.Service) {
	t.Helper()
	cip := svc.Spec.ClusterIP
	// vpcgw says who serves the ClusterIP, once, as a Normal event (not a fault).
	ev := waitEvent(t, c, svc.Name, model.ReasonClusterIPByOVN)
	if ev.Type != corev1.EventTypeNormal || !strings.Contains(ev.Message, cip) || !strings.Contains(ev.Message, "OVN load balancers") {
		t.Fatalf("event %s: %s %q", ev.Reason, ev.Type, ev.Message)
	}
	eventually(t, 60*time.Second, "kube-ovn puts the ClusterIP in the Vpc's OVN load balancers", func(context.Context) (bool, error) {
		vips, err := c.OVN.NBCtl("--bare", "--columns=vips", "list", "Load_Balancer")
		return err == nil && strings.Contains(vips, cip+":80"), err
	})
	ns, ok := c.GatewayNetns()
	if !ok {
		t.Fatal("the gateway Pod has no namespace")
	}
	table, err := netlab.Run("ip", "netns", "exec", ns, "nft", "list", "table", "ip", "kube-ovn")
	if err != nil {
		t.Fatalf("nft list table: %v\n%s", err, table)
	}
	if strings.Contains(string(table), cip) {
		t.Fatalf("the gateway's table holds ClusterIP %s, which kube-ovn's load balancers serve:\n%s", cip, table)
	}
	for _, p := range []struct{ ns, target string }{
		{c.VPCClient(), cip + ":80"}, {c.ExternalClient(), cluster.EIPAddress + ":80"}, {c.VPCClient(), cip + ":80"},
	} {
		r, err := c.Probe(p.ns, "tcp", p.target, 100)
		if err != nil || r.Total() != 100 {
			t.Fatalf("from %s to %s: %d of 100 answered (%v)", p.ns, p.target, r.Total(), err)
		}
	}
	if err := c.Chassis.Check(); err != nil {
		t.Fatalf("the chassis after traffic through OVN's load balancers: %v", err)
	}
}
