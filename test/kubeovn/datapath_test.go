package kubeovn

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vpcgw/vpcgw/internal/cluster"
	"github.com/vpcgw/vpcgw/internal/kubeovnrun"
	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/netlab"
	"github.com/vpcgw/vpcgw/internal/status"
)

// The lab's Vpc runs on OVN's own data path, kube-ovn's build of it: ovn-northd with kube-ovn's
// "modify src route priority" patch ranks the Subnet's src-ip route below the Vpc's default route
// (so a backend's answer to an external client leaves toward the gateway), and the Vpc's Pods,
// the VPC client and the gateway's eth0 are ports of the lab node's chassis.
// covers: V1, O1
func TestOVNCarriesTheVpc(t *testing.T) {
	c := lab(t)
	ctx := t.Context()

	// northd's logical flows: the Subnet's src-ip route ranks below the Vpc's 0.0.0.0/0.
	flows, err := c.OVN.SBCtl("lflow-list", cluster.VpcName)
	if err != nil {
		t.Fatal(err)
	}
	src := routePriority(t, flows, "ip4.src == "+cluster.VPCCIDR)
	def := routePriority(t, flows, "ip4.dst == 0.0.0.0/0")
	if src >= def {
		t.Fatalf("lr_in_ip_routing ranks the Subnet's src-ip route %s at %d, not below the Vpc's default route (%d): not kube-ovn's northd", cluster.VPCCIDR, src, def)
	}

	// ovn-trace of a backend's answer to the external client: routed to the gateway's lanIp.
	pod := demoBackend(t, c)
	lrpMAC, err := c.OVN.NBCtl("get", "Logical_Router_Port", cluster.VpcName+"-"+cluster.VpcSubnetName, "mac")
	if err != nil {
		t.Fatal(err)
	}
	flow := fmt.Sprintf(`inport == %q && eth.src == %s && eth.dst == %s && ip4.src == %s && ip4.dst == %s && ip.ttl == 64 && tcp && tcp.src == %d && tcp.dst == 40000`,
		pod.Name+"."+pod.Namespace, pod.Annotations["ovn.kubernetes.io/mac_address"], strings.Trim(strings.TrimSpace(lrpMAC), `"`),
		pod.Status.PodIP, cluster.ExternalIP, cluster.BackendPort)
	trace, err := netlab.Run("ovn-trace", "--db="+c.OVN.SBSocket(), cluster.VpcSubnetName, flow)
	if err != nil {
		t.Fatalf("ovn-trace: %v\n%s", err, trace)
	}
	if !strings.Contains(string(trace), "reg0 = "+cluster.GatewayLanIP) || strings.Contains(string(trace), "reg0 = "+cluster.VPCGatewayIP+";") {
		t.Fatalf("ovn-trace does not send the backend's answer to %s via the gateway %s:\n%s", cluster.ExternalIP, cluster.GatewayLanIP, trace)
	}

	// Every VPC port is the chassis's: the client's, the gateway's eth0 and each backend's.
	ports, err := c.Chassis.VSCtl(ctx, "--columns=external_ids", "find", "Interface", "external_ids:ovn-installed=true")
	if err != nil {
		t.Fatal(err)
	}
	for _, lsp := range []string{cluster.VPCClientPod + "." + cluster.VPCClientNamespace, c.GatewayPodName() + "." + kubeovnrun.Namespace, pod.Name + "." + pod.Namespace} {
		if !strings.Contains(ports, `iface-id="`+lsp+`"`) && !strings.Contains(ports, "iface-id="+lsp+",") && !strings.Contains(ports, "iface-id="+lsp+"}") {
			t.Errorf("no port of the chassis is ovn-installed for logical switch port %s:\n%s", lsp, ports)
		}
	}
	cip := service(t, c, cluster.DemoNamespace, cluster.DemoService).Spec.ClusterIP
	for _, probe := range []struct{ ns, target string }{
		{c.VPCClient(), cip + ":80"}, {c.VPCClient(), cluster.EIPAddress + ":80"}, {c.ExternalClient(), cluster.EIPAddress + ":80"},
	} {
		r, err := c.Probe(probe.ns, "tcp", probe.target, 10)
		if err != nil || r.Total() != 10 {
			t.Errorf("from %s to %s: %d of 10 answered (%v)", probe.ns, probe.target, r.Total(), err)
		}
	}
}

// V3 on OVN's real data path: a discard route for the Service CIDR in the Vpc's router drops the
// VIPs before vpcgw's policy applies (OVN routes before its policies); vpcgw says so (a Warning
// on the Service, the count in its status), and the route's removal serves them again, which
// vpcgw says too. Without the Vpc's default route, the Subnets' src-ip routes (kube-ovn writes
// one per Subnet) still carry their clients to the policy stage: served, nothing reported.
// covers: V3
func TestVIPsTheVpcDropsOnOVN(t *testing.T) {
	c := lab(t)
	ctx := t.Context()
	svc := service(t, c, cluster.DemoNamespace, cluster.DemoService)
	target := svc.Spec.ClusterIP + ":80"
	if err := c.WaitReachable(ctx, c.VPCClient(), "tcp", target, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	removed := false
	del := func() {
		if removed {
			return
		}
		if _, err := c.OVN.NBCtl("--if-exists", "lr-route-del", cluster.VpcName, cluster.ServiceCIDR); err != nil {
			t.Error(err)
		}
		removed = true
	}
	// An operator's route, added by hand (kube-ovn keeps routes it did not mark).
	if _, err := c.OVN.NBCtl("lr-route-add", cluster.VpcName, cluster.ServiceCIDR, "discard"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(del)
	eventually(t, 30*time.Second, "the discard route drops the ClusterIP", func(context.Context) (bool, error) {
		r, err := c.Probe(c.VPCClient(), "tcp", target, 3)
		return err == nil && r.Total() == 0, nil
	})
	eventually(t, 60*time.Second, "vpcgw warns that the Vpc drops the VIP", func(ctx context.Context) (bool, error) {
		return hasEvent(ctx, c, svc, model.ReasonVIPNotRouted)
	})
	eventually(t, 60*time.Second, "vpcgw's status counts the unrouted VIPs", func(ctx context.Context) (bool, error) {
		n, err := unroutedVIPs(ctx, c)
		return n > 0, err
	})
	del()
	if err := c.WaitReachable(ctx, c.VPCClient(), "tcp", target, 30*time.Second); err != nil {
		t.Fatalf("once the discard route is gone: %v", err)
	}
	eventually(t, 60*time.Second, "vpcgw says the VIP is carried again", func(ctx context.Context) (bool, error) {
		return hasEvent(ctx, c, svc, model.ReasonVIPRouted)
	})
	eventually(t, 60*time.Second, "vpcgw's status counts no unrouted VIP", func(ctx context.Context) (bool, error) {
		n, err := unroutedVIPs(ctx, c)
		return n == 0, err
	})
}

// The data path's own faults: ovn-controller, ovs-vswitchd and ovn-northd restarted, each while
// the EIP serves. Traffic through the EIP is back within 5 s of the restart, and nothing vpcgw
// wrote is lost: the gateway's table and the Vpc router's VIP policies are as before.
// covers: V1, D5, L1
func TestDataPathFaults(t *testing.T) {
	c := lab(t)
	ctx := t.Context()
	target := cluster.EIPAddress + ":80"
	if err := c.WaitReachable(ctx, c.ExternalClient(), "tcp", target, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	table := func() string {
		ns, ok := c.GatewayNetns()
		if !ok {
			t.Fatal("the gateway Pod has no namespace")
		}
		out, err := netlab.Run("ip", "netns", "exec", ns, "nft", "list", "table", "ip", "kube-ovn")
		if err != nil {
			t.Fatalf("nft list table: %v\n%s", err, out)
		}
		return nftCounters.ReplaceAllString(string(out), "counter")
	}
	policies := func() string {
		out, err := c.OVN.NBCtl("lr-policy-list", cluster.VpcName)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, fault := range []struct {
		name   string
		inject func(context.Context) error
	}{
		{"ovn-controller restarted", c.Chassis.RestartOVNController},
		{"ovs-vswitchd restarted", c.Chassis.RestartVswitchd},
		{"ovn-northd restarted", func(context.Context) error { return c.OVN.RestartNorthd() }},
	} {
		t.Run(fault.name, func(t *testing.T) {
			tableBefore, policiesBefore := table(), policies()
			begin := time.Now()
			if err := fault.inject(ctx); err != nil {
				t.Fatal(err)
			}
			restarted := time.Since(begin)
			if err := c.WaitReachable(ctx, c.ExternalClient(), "tcp", target, 5*time.Second); err != nil {
				t.Fatalf("traffic through the EIP not back within 5 s of the restart (which took %s): %v", restarted.Round(time.Millisecond), err)
			}
			t.Logf("%s: restart took %s, traffic through the EIP back %s after the fault began", fault.name,
				restarted.Round(time.Millisecond), time.Since(begin).Round(time.Millisecond))
			if after := table(); after != tableBefore {
				t.Errorf("the gateway's table changed:\nbefore:\n%s\nafter:\n%s", tableBefore, after)
			}
			if after := policies(); after != policiesBefore {
				t.Errorf("the Vpc's policies changed:\nbefore:\n%s\nafter:\n%s", policiesBefore, after)
			}
			r, err := c.Probe(c.ExternalClient(), "tcp", target, 20)
			if err != nil || r.Total() != 20 {
				t.Errorf("after the restart: %d of 20 answered (%v)", r.Total(), err)
			}
		})
	}
}

// nftCounters are the counters nft lists, which traffic changes.
var nftCounters = regexp.MustCompile(`counter packets \d+ bytes \d+`)

var lflowPriority = regexp.MustCompile(`lr_in_ip_routing\s*\), priority=(\d+)`)

// routePriority is the priority of the lr_in_ip_routing flow whose match holds match.
func routePriority(t *testing.T, flows, match string) int {
	t.Helper()
	for _, l := range strings.Split(flows, "\n") {
		if !strings.Contains(l, match+")") && !strings.Contains(l, match+" ") && !strings.Contains(l, match+"&") {
			continue
		}
		if m := lflowPriority.FindStringSubmatch(l); m != nil {
			p, err := strconv.Atoi(m[1])
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
	}
	t.Fatalf("no lr_in_ip_routing flow matches %q in:\n%s", match, flows)
	return 0
}

// demoBackend is one running, ready backend Pod of the demo.
func demoBackend(t *testing.T, c *cluster.Cluster) *corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := c.Client.List(t.Context(), &pods, client.InNamespace(cluster.DemoNamespace)); err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && p.DeletionTimestamp == nil {
			return p
		}
	}
	t.Fatal("no running demo backend")
	return nil
}

// unroutedVIPs is the count of VIPs the lab gateway's Vpc drops, from vpcgw's published status.
func unroutedVIPs(ctx context.Context, c *cluster.Cluster) (int, error) {
	var cm corev1.ConfigMap
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: status.DefaultNamespace, Name: status.ConfigMapName}, &cm); err != nil {
		return 0, err
	}
	p, err := status.Decode(cm.Data)
	if err != nil {
		return 0, err
	}
	gw, ok := p.Gateways[cluster.GatewayName]
	if !ok || gw.Routes == nil {
		return 0, fmt.Errorf("no routes of gateway %s in the status", cluster.GatewayName)
	}
	return gw.Routes.UnroutedVIPs, nil
}
