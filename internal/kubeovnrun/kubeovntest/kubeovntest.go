// Package kubeovntest starts, for one test, the real kube-ovn-controller v1.16.2 with what it
// needs: a kube-apiserver (envtest) with kube-ovn's CRDs and prerequisites, OVN NB/SB and
// ovn-northd from kube-ovn's schemas, a Node with its SB Chassis, and kube-controller-manager with
// the workload controllers (kube-ovn's gateways are StatefulSets). It skips, through testutil,
// where this machine cannot run them. The test binary's TestMain must call
// kubeovnrun.MaybeRunMountHelper first.
package kubeovntest

import (
	"context"
	"os"
	"slices"
	"testing"

	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/vpcgw/vpcgw/internal/kcm"
	"github.com/vpcgw/vpcgw/internal/kubeovnrun"
	"github.com/vpcgw/vpcgw/internal/ovsbuild"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

// Env is a running kube-ovn-controller with its API server and OVN; everything stops at the end
// of the test.
type Env struct {
	API        *envtest.Environment
	Config     *rest.Config
	Client     client.Client // an admin's, with client-go's scheme
	OVN        *kubeovnrun.OVN
	Controller *kubeovnrun.Controller
	// Assets and KubeOVNDir are the envtest and kube-ovn asset directories.
	Assets, KubeOVNDir string
}

// Requirements returns the envtest and kube-ovn asset directories, skipping t (through testutil)
// when this machine cannot run kube-ovn-controller.
func Requirements(t *testing.T) (assets, kubeOVNDir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.Skip(t, "needs root: kube-ovn-controller runs in a private mount namespace")
	}
	if err := ovsbuild.Check("ovsdb-server", "ovsdb-tool", "ovn-nbctl", "ovn-sbctl"); err != nil {
		testutil.Skip(t, err.Error())
	}
	assets, missing := testutil.EnvtestAssets("kube-apiserver", "etcd", kcm.Binary)
	if missing != "" {
		testutil.Skip(t, missing)
	}
	kubeOVNDir, missing = testutil.KubeOVNAssets(append(slices.Clone(kubeovnrun.AssetFiles), "VERSION")...)
	if missing != "" {
		testutil.Skip(t, missing)
	}
	return assets, kubeOVNDir
}

// Start brings kube-ovn-controller up for t on a Node named node and waits until it has finished
// its start (Controller.WaitReady).
func Start(ctx context.Context, t *testing.T, node string) *Env {
	t.Helper()
	e := &Env{}
	e.Assets, e.KubeOVNDir = Requirements(t)
	e.API = &envtest.Environment{BinaryAssetsDirectory: e.Assets}
	kubeovnrun.ConfigureEnvtest(e.API, e.KubeOVNDir, "")
	var err error
	if e.Config, err = e.API.Start(); err != nil {
		t.Fatalf("starting the API server: %v", err)
	}
	t.Cleanup(func() { _ = e.API.Stop() })
	if e.Client, err = client.New(e.Config, client.Options{Scheme: clientgoscheme.Scheme}); err != nil {
		t.Fatal(err)
	}
	if err := kubeovnrun.InstallCluster(ctx, e.Client, e.KubeOVNDir); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "kot-") // short: unix socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if e.OVN, err = kubeovnrun.StartOVN(dir, e.KubeOVNDir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.OVN.Stop)
	if err := kubeovnrun.AddNode(ctx, e.Client, e.OVN, kubeovnrun.Node{Name: node, Address: "127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	kc, err := kubeovnrun.AdminKubeconfig(e.API, "cluster-admin")
	if err != nil {
		t.Fatal(err)
	}
	kcmProc, err := kcm.StartWith(e.Assets, kc, dir, kcm.Options{Controllers: kcm.WorkloadControllers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kcmProc.Stop)
	if e.Controller, err = kubeovnrun.Start(kubeovnrun.Options{
		KubeOVNDir: e.KubeOVNDir, Dir: dir, Kubeconfig: kc, NBAddr: e.OVN.NBAddr(), SBAddr: e.OVN.SBAddr(),
		NodeName: node, ServiceCIDR: kubeovnrun.ServiceCIDR(e.API),
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.Controller.Stop()
		if t.Failed() || os.Getenv("VPCGW_TEST_LOGS") == "1" {
			logs := e.Controller.Logs()
			t.Logf("kube-ovn-controller output (last 24 KiB):\n%s", logs[max(0, len(logs)-24<<10):])
		}
	})
	if err := e.Controller.WaitReady(ctx, e.Client, e.OVN); err != nil {
		t.Fatal(err)
	}
	return e
}
