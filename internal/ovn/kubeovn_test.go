// covers: K3, V1, V2, V3

package ovn

// VIP policies next to the real kube-ovn-controller v1.16.2 (clash C8 of the interop reference):
// its VPC reconcile deletes every policy of a custom VPC's router the Vpc does not list, unless
// the row is exempt.

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vpcgw/vpcgw/internal/kubeovnrun"
	"github.com/vpcgw/vpcgw/internal/kubeovnrun/kubeovntest"
)

func TestMain(m *testing.M) {
	// kube-ovn-controller is started through this test binary, re-executed as the mount helper.
	if kubeovnrun.MaybeRunMountHelper() {
		return
	}
	os.Exit(m.Run())
}

const (
	koNode   = "ovn-test-node"
	koVPC    = "vip-vpc"
	koSubnet = "vip-vpc-subnet"
	koGW     = "vip-gw"
	koLanIP  = "10.78.1.254"
)

// kubeOVN is a running kube-ovn-controller with its API server and OVN.
type kubeOVN struct {
	k    client.Client
	o    *kubeovnrun.OVN
	ctrl *kubeovnrun.Controller
}

func startKubeOVN(ctx context.Context, t *testing.T) *kubeOVN {
	t.Helper()
	e := kubeovntest.Start(ctx, t, koNode)
	k, o, ctrl := e.Client, e.OVN, e.Controller

	// What a kube-ovn user creates for a VPC NAT gateway.
	for _, obj := range []*unstructured.Unstructured{
		koObject("Vpc", koVPC, map[string]any{}),
		koObject("Subnet", koSubnet, map[string]any{
			"vpc": koVPC, "cidrBlock": "10.78.1.0/24", "gateway": "10.78.1.1", "protocol": "IPv4", "namespaces": []any{},
		}),
		koObject("Subnet", kubeovnrun.ExternalNetwork, map[string]any{
			"cidrBlock": "172.31.101.0/24", "gateway": "172.31.101.1", "protocol": "IPv4",
			"provider": kubeovnrun.ExternalSubnetProvider, "excludeIps": []any{"172.31.101.1..172.31.101.9"},
		}),
		koObject("VpcNatGateway", koGW, map[string]any{
			"vpc": koVPC, "subnet": koSubnet, "lanIp": koLanIP, "externalSubnets": []any{kubeovnrun.ExternalNetwork},
		}),
	} {
		if err := k.Create(ctx, obj); err != nil {
			t.Fatalf("creating %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
	ko := &kubeOVN{k: k, o: o, ctrl: ctrl}
	waitEvery(t, 60*time.Second, 100*time.Millisecond, "kube-ovn-controller creates the VPC's router and reconciles the VPC", func() (bool, string) {
		out, err := o.NBCtl("lr-list")
		return err == nil && strings.Contains(out, "("+koVPC+")") &&
			len(ctrl.LogLines("handle add/update vpc "+koVPC)) > 0, out
	})
	return ko
}

func koObject(kind, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion("kubeovn.io/v1")
	u.SetKind(kind)
	u.SetName(name)
	return u
}

func (ko *kubeOVN) nbctl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := ko.o.NBCtl(args...)
	if err != nil {
		t.Fatalf("ovn-nbctl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return out
}

// vipRows reads the VIP policies of gw on the VPC's router with ovn-nbctl: VIP -> row UUID.
func (ko *kubeOVN) vipRows(t *testing.T, gw string) map[string]string {
	t.Helper()
	router := strings.TrimSpace(ko.nbctl(t, "--bare", "--columns=policies", "find", "Logical_Router", "name="+koVPC))
	onRouter := strings.Fields(router)
	out := ko.nbctl(t, "--format=csv", "--data=bare", "--no-headings", "--columns=_uuid,match", "find", "Logical_Router_Policy",
		"external_ids:vipRoute=true", "external_ids:vpc-nat-gateway="+gw, "priority=29210")
	rows := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		u, match, ok := strings.Cut(l, ",")
		if ok && slices.Contains(onRouter, u) {
			rows[matchVIP(match)] = u
		}
	}
	return rows
}

// patchVPC merge-patches the Vpc as a user's kubectl would.
func (ko *kubeOVN) patchVPC(ctx context.Context, t *testing.T, patch string) {
	t.Helper()
	if err := ko.k.Patch(ctx, koObject("Vpc", koVPC, nil), client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatalf("patching Vpc %s with %s: %v", koVPC, patch, err)
	}
}

// addCanary adds a policy on the VPC's router as a user might with ovn-nbctl: not in the Vpc's
// spec.policyRoutes and not exempt, so kube-ovn's VPC reconcile deletes it and logs that. Its
// deletion after a trigger proves that the reconcile's delete pass ran over the router.
func (ko *kubeOVN) addCanary(t *testing.T, vip string) {
	t.Helper()
	ko.nbctl(t, "lr-policy-add", koVPC, "29210", "ip4.dst == "+vip, "reroute", koLanIP)
}

// waitReconciled waits until kube-ovn deleted the canary of vip and logged it.
func (ko *kubeOVN) waitReconciled(t *testing.T, vip, trigger string) time.Duration {
	t.Helper()
	line := fmt.Sprintf("delete policy route for router: %s, priority: 29210, match ip4.dst == %s", koVPC, vip)
	return waitEvery(t, 60*time.Second, 100*time.Millisecond, trigger+": kube-ovn's VPC reconcile deletes the canary "+vip, func() (bool, string) {
		out := ko.nbctl(t, "--bare", "--columns=_uuid", "find", "Logical_Router_Policy", `match="ip4.dst == `+vip+`"`)
		return strings.TrimSpace(out) == "" && len(ko.ctrl.LogLines(line)) > 0, "rows " + out
	})
}

// TestKubeOVNReconcileKeepsVIPRoutes writes VIP policies for two VIPs next to the real
// kube-ovn-controller and runs every VPC reconcile trigger the reference found to delete them
// (§6: an annotation with ".kubernetes.io/" on the Vpc, adding and removing a staticRoutes
// entry, a controller restart, a Subnet of the VPC created and deleted). With the exemption, the
// rows are never deleted: same UUIDs throughout, no repair needed. Without it (as older versions
// wrote them), kube-ovn deletes them and the writer puts them back by itself, within a second.
func TestKubeOVNReconcileKeepsVIPRoutes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	ko := startKubeOVN(ctx, t)

	w, err := NewWriter(ctx, Config{Address: ko.o.NBAddr()}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	vips := []string{"10.96.0.10", "172.31.101.12"} // a ClusterIP and an EIP
	if err := w.Sync(ctx, VIPRoutes{Router: koVPC, Gateway: koGW, NextHops: []string{koLanIP}, VIPs: vips}); err != nil {
		t.Fatal(err)
	}
	rows := ko.vipRows(t, koGW)
	if len(rows) != 2 || rows[vips[0]] == "" || rows[vips[1]] == "" {
		t.Fatalf("VIP policies written: %v", rows)
	}
	for _, vip := range vips {
		if ext := strings.TrimSpace(ko.nbctl(t, "get", "Logical_Router_Policy", rows[vip], "external_ids:vpc-egress-gateway")); ext != `"vpcgw:`+koGW+`"` {
			t.Fatalf("VIP %s: vpc-egress-gateway = %s", vip, ext)
		}
	}
	wantList := func(t *testing.T) {
		t.Helper()
		out := ko.nbctl(t, "lr-policy-list", koVPC)
		for _, vip := range vips {
			if !slices.ContainsFunc(strings.Split(out, "\n"), func(l string) bool {
				f := strings.Fields(l)
				return len(f) == 6 && f[0] == "29210" && strings.Join(f[1:4], " ") == "ip4.dst == "+vip && f[4] == "reroute" && f[5] == koLanIP
			}) {
				t.Fatalf("ovn-nbctl lr-policy-list %s has no 29210 reroute of %s via %s:\n%s", koVPC, vip, koLanIP, out)
			}
		}
	}
	wantList(t)

	triggers := []struct {
		name string
		do   func(t *testing.T)
	}{
		{"annotation with .kubernetes.io/ on the Vpc", func(t *testing.T) {
			ko.patchVPC(ctx, t, `{"metadata":{"annotations":{"test.kubernetes.io/trigger":"1"}}}`)
		}},
		{"staticRoutes entry added", func(t *testing.T) {
			ko.patchVPC(ctx, t, `{"spec":{"staticRoutes":[{"cidr":"192.168.250.0/24","nextHopIP":"`+koLanIP+`","policy":"policyDst"}]}}`)
		}},
		{"staticRoutes entry removed", func(t *testing.T) { ko.patchVPC(ctx, t, `{"spec":{"staticRoutes":null}}`) }},
		{"kube-ovn-controller restart", func(t *testing.T) {
			if err := ko.ctrl.Restart(); err != nil {
				t.Fatal(err)
			}
			if err := ko.ctrl.WaitReady(ctx, ko.k, ko.o); err != nil {
				t.Fatal(err)
			}
		}},
		{"Subnet added to the VPC", func(t *testing.T) {
			if err := ko.k.Create(ctx, koObject("Subnet", koSubnet+"-2", map[string]any{
				"vpc": koVPC, "cidrBlock": "10.78.2.0/24", "gateway": "10.78.2.1", "protocol": "IPv4", "namespaces": []any{},
			})); err != nil {
				t.Fatal(err)
			}
		}},
		{"Subnet of the VPC deleted", func(t *testing.T) {
			if err := ko.k.Delete(ctx, koObject("Subnet", koSubnet+"-2", nil)); err != nil {
				t.Fatal(err)
			}
		}},
	}

	t.Run("exempt policies are never deleted", func(t *testing.T) {
		// covers: K3, V1, V2
		for i, tr := range triggers {
			canary := fmt.Sprintf("10.96.99.%d", i+1)
			ko.addCanary(t, canary)
			start := time.Now()
			tr.do(t)
			ko.waitReconciled(t, canary, tr.name)
			t.Logf("%s: kube-ovn's reconcile deleted the canary %s after %s", tr.name, canary, time.Since(start).Round(time.Millisecond))
			if got := ko.vipRows(t, koGW); !maps.Equal(got, rows) {
				t.Fatalf("%s: VIP policy rows %v, want the same rows %v", tr.name, got, rows)
			}
			wantList(t)
			if n := w.rep.count.Load(); n != 0 {
				t.Fatalf("%s: %d repairs, want none: the exemption should have kept the rows", tr.name, n)
			}
		}
	})

	t.Run("without the exemption the writer repairs", func(t *testing.T) {
		// covers: K3, V1
		// Rows as vpcgw wrote them before the exemption: kube-ovn deletes them (C8 holds).
		old, err := newWriter(ctx, Config{Address: ko.o.NBAddr()}, testr.New(t), writerOptions{noExemption: true})
		if err != nil {
			t.Fatal(err)
		}
		defer old.Close()
		const oldGW = "vip-gw-old"
		oldVIPs := []string{"10.96.0.20", "172.31.101.13"}
		if err := old.Sync(ctx, VIPRoutes{Router: koVPC, Gateway: oldGW, NextHops: []string{koLanIP}, VIPs: oldVIPs}); err != nil {
			t.Fatal(err)
		}
		before := ko.vipRows(t, oldGW)
		if len(before) != 2 {
			t.Fatalf("rows without the exemption: %v", before)
		}
		canary := "10.96.99.100"
		ko.addCanary(t, canary)
		start := time.Now()
		ko.patchVPC(ctx, t, `{"metadata":{"annotations":{"test.kubernetes.io/trigger":"2"}}}`)
		ko.waitReconciled(t, canary, "annotation")
		for _, vip := range oldVIPs {
			line := fmt.Sprintf("delete policy route for router: %s, priority: 29210, match ip4.dst == %s", koVPC, vip)
			waitEvery(t, 10*time.Second, 20*time.Millisecond, "kube-ovn deletes the unexempt policy of "+vip, func() (bool, string) {
				return len(ko.ctrl.LogLines(line)) > 0, ""
			})
		}
		took := waitEvery(t, 10*time.Second, 20*time.Millisecond, "the writer puts the deleted policies back", func() (bool, string) {
			got := ko.vipRows(t, oldGW)
			return len(got) == 2 && got[oldVIPs[0]] != before[oldVIPs[0]] && got[oldVIPs[1]] != before[oldVIPs[1]] &&
				got[oldVIPs[0]] != "" && got[oldVIPs[1]] != "", fmt.Sprint(got)
		})
		t.Logf("unexempt policies deleted by kube-ovn and back %s after the trigger (%s after kube-ovn logged their deletion)",
			time.Since(start).Round(time.Millisecond), took.Round(time.Millisecond))
		if n := old.rep.count.Load(); n == 0 {
			t.Fatal("policies are back but no repair was counted")
		}
		// The exempt rows of the first writer went through this reconcile too, untouched.
		if got := ko.vipRows(t, koGW); !maps.Equal(got, rows) || w.rep.count.Load() != 0 {
			t.Fatalf("exempt rows %v (want %v), repairs %d", got, rows, w.rep.count.Load())
		}
		wantList(t)
	})

	t.Run("the Vpc's static routes carry the VIPs", func(t *testing.T) {
		// covers: V3
		// The routes the real kube-ovn-controller writes, read from the writer's cache and told
		// through OnRoutesChanged. kube-ovn writes a src-ip route for the Subnet (10.78.1.0/24
		// via 10.78.1.1), which its OVN ranks below every dst-ip route: with no dst-ip route the
		// Subnet's clients reach the policy stage through it. A discard route covering the VIPs
		// drops them before their policy, unless a longer route carries them.
		changed := make(chan string, 64)
		w.OnRoutesChanged(func(router string) {
			select {
			case changed <- router:
			default:
			}
		})
		routed := func(want bool, wantWhy string) {
			t.Helper()
			waitEvery(t, 60*time.Second, 50*time.Millisecond, fmt.Sprintf("the VIPs routed: %v", want), func() (bool, string) {
				rs, err := w.RouterRoutes(ctx, koVPC)
				if err != nil {
					return false, err.Error()
				}
				ok, why := Routed(rs, netip.MustParseAddr(vips[0]))
				return ok == want && why == wantWhy, fmt.Sprint(ok, " ", why, " ", rs)
			})
		}
		const discards = "route 10.96.0.0/12 discards it"
		routed(true, "")
		rs, err := w.RouterRoutes(ctx, koVPC)
		if err != nil || !slices.ContainsFunc(rs, func(r Route) bool { return r.Source && r.Prefix.String() == "10.78.1.0/24" }) {
			t.Fatalf("kube-ovn's src-ip route of the Subnet is not among the routes read: %v, %v", rs, err)
		}
		// A discard route for the Service CIDR, added by hand (no kube-ovn mark: it stays).
		ko.nbctl(t, "lr-route-add", koVPC, "10.96.0.0/12", "discard")
		routed(false, discards)
		for len(changed) > 0 {
			<-changed
		}
		// The Vpc's usual 0.0.0.0/0 loses to the longer discard; a route for the VIP's /16 wins.
		ko.patchVPC(ctx, t, `{"spec":{"staticRoutes":[{"cidr":"0.0.0.0/0","nextHopIP":"`+koLanIP+`","policy":"policyDst"}]}}`)
		waitEvery(t, 60*time.Second, 50*time.Millisecond, "kube-ovn wrote the Vpc's 0.0.0.0/0", func() (bool, string) {
			rs, err := w.RouterRoutes(ctx, koVPC)
			return err == nil && slices.ContainsFunc(rs, func(r Route) bool { return !r.Source && !r.Connected && r.Prefix.Bits() == 0 }), fmt.Sprint(rs, err)
		})
		routed(false, discards)
		ko.patchVPC(ctx, t, `{"spec":{"staticRoutes":[{"cidr":"10.96.0.0/16","nextHopIP":"`+koLanIP+`","policy":"policyDst"}]}}`)
		routed(true, "")
		waitEvery(t, 10*time.Second, 20*time.Millisecond, "the route change told", func() (bool, string) {
			for len(changed) > 0 {
				if <-changed == koVPC {
					return true, ""
				}
			}
			return false, ""
		})
		ko.patchVPC(ctx, t, `{"spec":{"staticRoutes":null}}`)
		routed(false, discards)
		ko.nbctl(t, "lr-route-del", koVPC, "10.96.0.0/12")
		routed(true, "")

		// Routes added behind the Vpc's back: kube-ovn's next VPC reconcile deletes one with its
		// mark (vendor=kube-ovn) that the Vpc does not list, and leaves an unmarked one, which no
		// Vpc object then shows.
		ko.nbctl(t, "--", "--id=@r", "create", "Logical_Router_Static_Route", "ip_prefix=10.96.0.0/12", "nexthop=discard",
			"external_ids:vendor=kube-ovn", "--", "add", "Logical_Router", koVPC, "static_routes", "@r")
		routed(false, discards)
		ko.addCanary(t, "10.96.99.200")
		ko.patchVPC(ctx, t, `{"metadata":{"annotations":{"test.kubernetes.io/trigger":"3"}}}`)
		ko.waitReconciled(t, "10.96.99.200", "annotation")
		routed(true, "")
		ko.nbctl(t, "lr-route-add", koVPC, "10.96.0.0/12", "discard")
		routed(false, discards)
		ko.addCanary(t, "10.96.99.201")
		ko.patchVPC(ctx, t, `{"metadata":{"annotations":{"test.kubernetes.io/trigger":"4"}}}`)
		ko.waitReconciled(t, "10.96.99.201", "annotation")
		routed(false, discards)
		ko.nbctl(t, "lr-route-del", koVPC, "10.96.0.0/12")
		routed(true, "")
	})
}
