package kubeovnrun_test

// covers: O1, V2 (harness for the K tests: the real kube-ovn-controller v1.16.2, OVN NB/SB from
// kube-ovn's schema with ovn-northd, kube-apiserver, kube-controller-manager)

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/vpcgw/vpcgw/internal/kcm"
	"github.com/vpcgw/vpcgw/internal/kubeovnrun"
	"github.com/vpcgw/vpcgw/internal/kubeovnrun/kubeovntest"
	"github.com/vpcgw/vpcgw/internal/ovn"
)

// waitFor bounds each wait for kube-ovn-controller or kube-controller-manager to act. It is a
// liveness bound, not a speed check: alone a run takes under 30 s, but CI runs this package beside
// every other one on two cores, and kube-ovn's start-up (NB migrations, default VPC, join subnet)
// then took longer than 30 s.
const waitFor = 2 * time.Minute

func TestMain(m *testing.M) {
	// kube-ovn-controller is started through this binary, re-executed as the mount helper.
	if kubeovnrun.MaybeRunMountHelper() {
		return
	}
	os.Exit(m.Run())
}

const (
	nodeName  = "kubeovnrun-node"
	vpcName   = "t-vpc"
	subnet    = "t-vpc-subnet"
	gwName    = "t-gw"
	lanIP     = "10.77.1.254"
	extSubnet = kubeovnrun.ExternalNetwork
)

// eventually polls cond every 100ms until it returns true or the deadline passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s (last: %s)", what, timeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func kubeOVNObject(kind, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion("kubeovn.io/v1")
	u.SetKind(kind)
	u.SetName(name)
	return u
}

// TestRealKubeOVNMakesTheGateway starts the real kube-ovn-controller with everything it needs
// and creates the objects a kube-ovn user creates for a VPC NAT gateway; kube-ovn-controller
// must make the VPC's logical router and the gateway StatefulSet, kube-controller-manager the
// gateway Pod with kube-ovn's annotations; vpcgw's NB client must read and write policies in
// kube-ovn's schema.
func TestRealKubeOVNMakesTheGateway(t *testing.T) {
	assets, kubeOVN := kubeovntest.Requirements(t)
	_, statErr := os.Stat("/var/log/kube-ovn")
	hostHadLogDir := statErr == nil
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	begin := time.Now()

	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	kubeovnrun.ConfigureEnvtest(env, kubeOVN, "")
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting the API server: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	apiUp := time.Since(begin)
	k, err := client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	// envtest installed the CRDs already; the install is applied again, as an operator's install
	// would run on a cluster that has them (idempotent).
	if err := kubeovnrun.InstallCluster(ctx, k, kubeOVN); err != nil {
		t.Fatal(err)
	}

	// A short directory: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "kor-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	o, err := kubeovnrun.StartOVN(dir, kubeOVN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Stop)
	if err := kubeovnrun.AddNode(ctx, k, o, kubeovnrun.Node{Name: nodeName, Address: "127.0.0.1"}); err != nil {
		t.Fatal(err)
	}

	kc, err := kubeovnrun.AdminKubeconfig(env, "cluster-admin")
	if err != nil {
		t.Fatal(err)
	}
	kcmProc, err := kcm.StartWith(assets, kc, dir, kcm.Options{Controllers: kcm.WorkloadControllers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kcmProc.Stop)

	ctrl, err := kubeovnrun.Start(kubeovnrun.Options{
		KubeOVNDir: kubeOVN, Dir: dir, Kubeconfig: kc,
		NBAddr: o.NBAddr(), SBAddr: o.SBAddr(),
		NodeName: nodeName, ServiceCIDR: kubeovnrun.ServiceCIDR(env),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctrl.Stop()
		if t.Failed() || os.Getenv("VPCGW_TEST_LOGS") == "1" {
			t.Logf("kube-ovn-controller output (last 20 KiB):\n%s", tail(ctrl.Logs(), 20<<10))
			t.Logf("kube-controller-manager output (last 8 KiB):\n%s", tail(kcmProc.Output(), 8<<10))
		}
	})
	if err := ctrl.WaitReady(ctx, k, o); err != nil {
		t.Fatal(err)
	}
	// Its hard-coded log file landed in the run's directory, and nothing on the host.
	if _, err := os.Stat(ctrl.LogFile()); err != nil {
		t.Errorf("kube-ovn-controller's log file is not in the run's directory: %v", err)
	}
	if _, err := os.Stat("/var/log/kube-ovn/kube-ovn-controller.log"); err == nil && !hostHadLogDir {
		t.Errorf("kube-ovn-controller wrote its log file on the host's /var/log/kube-ovn")
	}
	leading := time.Since(begin)
	// kube-ovn's own cluster router and the node's join port show that it reconciles with OVN.
	eventually(t, waitFor, "kube-ovn-controller creates ovn-cluster and accepts the node", func() (bool, string) {
		out, err := o.NBCtl("--bare", "--columns=name", "list", "Logical_Router")
		if err != nil || !strings.Contains(out, "ovn-cluster") {
			return false, out + errString(err)
		}
		var n corev1.Node
		if err := k.Get(ctx, client.ObjectKey{Name: nodeName}, &n); err != nil {
			return false, err.Error()
		}
		return n.Annotations["ovn.kubernetes.io/allocated"] == "true", "node annotations " + strings.Join(mapKeys(n.Annotations), ",")
	})

	// What a kube-ovn user creates for a VPC NAT gateway.
	gwCreated := time.Now()
	for _, obj := range []*unstructured.Unstructured{
		kubeOVNObject("Vpc", vpcName, map[string]any{}),
		kubeOVNObject("Subnet", subnet, map[string]any{
			"vpc": vpcName, "cidrBlock": "10.77.1.0/24", "gateway": "10.77.1.1", "protocol": "IPv4",
			"namespaces": []any{},
		}),
		kubeOVNObject("Subnet", extSubnet, map[string]any{
			"cidrBlock": "172.31.100.0/24", "gateway": "172.31.100.1", "protocol": "IPv4",
			"provider": kubeovnrun.ExternalSubnetProvider, "excludeIps": []any{"172.31.100.1..172.31.100.9"},
		}),
		kubeOVNObject("VpcNatGateway", gwName, map[string]any{
			"vpc": vpcName, "subnet": subnet, "lanIp": lanIP, "externalSubnets": []any{extSubnet},
		}),
	} {
		if err := k.Create(ctx, obj); err != nil {
			t.Fatalf("creating %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
	}

	eventually(t, waitFor, "kube-ovn-controller creates the VPC's logical router", func() (bool, string) {
		out, err := o.NBCtl("lr-list")
		return err == nil && slices.ContainsFunc(strings.Split(out, "\n"), func(l string) bool {
			return strings.HasSuffix(l, "("+vpcName+")")
		}), out + errString(err)
	})
	stsName := "vpc-nat-gw-" + gwName
	var sts appsv1.StatefulSet
	eventually(t, waitFor, "kube-ovn-controller creates the gateway StatefulSet", func() (bool, string) {
		err := k.Get(ctx, client.ObjectKey{Namespace: kubeovnrun.Namespace, Name: stsName}, &sts)
		return err == nil, errString(err)
	})
	if img := sts.Spec.Template.Spec.Containers[0].Image; img != kubeovnrun.NatGatewayImage {
		t.Errorf("StatefulSet image %q, want %q from ConfigMap %s", img, kubeovnrun.NatGatewayImage, kubeovnrun.NatConfigMap)
	}
	var pod corev1.Pod
	eventually(t, waitFor, "kube-controller-manager creates the gateway Pod", func() (bool, string) {
		err := k.Get(ctx, client.ObjectKey{Namespace: kubeovnrun.Namespace, Name: stsName + "-0"}, &pod)
		return err == nil, errString(err)
	})
	gwPodAfter := time.Since(gwCreated)
	for key, want := range map[string]string{
		"k8s.v1.cni.cncf.io/networks":      kubeovnrun.Namespace + "/" + kubeovnrun.ExternalNetwork,
		"ovn.kubernetes.io/vpc_nat_gw":     gwName,
		"ovn.kubernetes.io/logical_switch": subnet,
		"ovn.kubernetes.io/ip_address":     lanIP,
	} {
		if got := pod.Annotations[key]; got != want {
			t.Errorf("gateway Pod annotation %s = %q, want %q", key, got, want)
		}
	}
	if !slices.ContainsFunc(pod.OwnerReferences, func(r metav1.OwnerReference) bool { return r.Kind == "StatefulSet" && r.Name == stsName }) {
		t.Errorf("gateway Pod owners %+v, want StatefulSet %s", pod.OwnerReferences, stsName)
	}

	rss, err := ctrl.RSS()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("bring-up: API server %.1fs, kube-ovn-controller leading %.1fs after start; gateway Pod %.1fs after the VpcNatGateway; kube-ovn-controller RSS %d MiB",
		apiUp.Seconds(), leading.Seconds(), gwPodAfter.Seconds(), rss>>20)

	t.Run("vpcgw's NB client in kube-ovn's schema", func(t *testing.T) {
		// covers: V2
		w, err := ovn.NewWriter(ctx, ovn.Config{Address: o.NBAddr()}, testr.New(t))
		if err != nil {
			t.Fatalf("vpcgw's NB client against kube-ovn's NB schema: %v", err)
		}
		defer w.Close()
		const vip = "10.96.0.10"
		// kube-ovn's own policies on the router (if any) must come through unchanged.
		before, err := o.NBCtl("lr-policy-list", vpcName)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Sync(ctx, ovn.VIPRoutes{Router: vpcName, Gateway: gwName, NextHops: []string{lanIP}, VIPs: []string{vip}}); err != nil {
			t.Fatalf("writing a VIP policy: %v", err)
		}
		pols, err := w.Policies(ctx, vpcName, gwName)
		if err != nil {
			t.Fatal(err)
		}
		if len(pols) != 1 || pols[0].VIP != vip || pols[0].Priority != ovn.VIPPolicyPriority || !slices.Equal(pols[0].NextHops, []string{lanIP}) {
			t.Fatalf("policies read back: %+v", pols)
		}
		out, err := o.NBCtl("lr-policy-list", vpcName)
		if err != nil {
			t.Fatal(err)
		}
		if want := "ip4.dst == " + vip; !strings.Contains(out, want) || !strings.Contains(out, "reroute") || !strings.Contains(out, lanIP) {
			t.Fatalf("ovn-nbctl lr-policy-list %s:\n%s\nwant a reroute policy %q via %s", vpcName, out, want, lanIP)
		}
		if err := w.Sync(ctx, ovn.VIPRoutes{Router: vpcName, Gateway: gwName}); err != nil {
			t.Fatalf("removing the VIP policy: %v", err)
		}
		if after, err := o.NBCtl("lr-policy-list", vpcName); err != nil || after != before {
			t.Fatalf("lr-policy-list %s after removing the VIP policy:\n%s(%v)\nwant it as before:\n%s", vpcName, after, err, before)
		}
	})

	t.Run("garbage collector and namespace controller", func(t *testing.T) {
		// kube-ovn deletes the StatefulSet with the VpcNatGateway; the garbage collector then
		// deletes its Pod.
		if err := k.Delete(ctx, kubeOVNObject("VpcNatGateway", gwName, nil)); err != nil {
			t.Fatal(err)
		}
		gcBegin := time.Now()
		eventually(t, waitFor, "the gateway Pod goes with its VpcNatGateway", func() (bool, string) {
			err := k.Get(ctx, client.ObjectKeyFromObject(&pod), &corev1.Pod{})
			return apierrors.IsNotFound(err), errString(err)
		})
		t.Logf("gateway Pod gone %.1fs after the VpcNatGateway's deletion", time.Since(gcBegin).Seconds())
		nsBegin := time.Now()
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kubeovnrun-ns"}}
		if err := k.Create(ctx, ns); err != nil {
			t.Fatal(err)
		}
		if err := k.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: ns.Name}}); err != nil {
			t.Fatal(err)
		}
		if err := k.Delete(ctx, ns); err != nil {
			t.Fatal(err)
		}
		eventually(t, waitFor, "a deleted namespace is emptied and removed", func() (bool, string) {
			err := k.Get(ctx, client.ObjectKeyFromObject(ns), &corev1.Namespace{})
			return apierrors.IsNotFound(err), errString(err)
		})
		t.Logf("namespace gone %.1fs after its deletion", time.Since(nsBegin).Seconds())
	})

	t.Run("restart takes the Lease back and finishes its start", func(t *testing.T) {
		restartBegin := time.Now()
		if err := ctrl.Restart(); err != nil {
			t.Fatal(err)
		}
		if err := ctrl.WaitReady(ctx, k, o); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(restartBegin); d > 20*time.Second {
			t.Errorf("restart took %s to lead again; with the same POD_NAME it should take its Lease back at once", d)
		}
		t.Logf("restart to leading: %.1fs", time.Since(restartBegin).Seconds())
	})

	if lines := ctrl.LogLines("handle add/update vpc nat gateway"); len(lines) == 0 {
		t.Errorf("kube-ovn-controller never logged handling the gateway")
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func mapKeys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
