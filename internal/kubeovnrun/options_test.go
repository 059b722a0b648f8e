package kubeovnrun

// covers: O1 (the harness refuses what kube-ovn-controller cannot run with, with a clear error)

import (
	"context"
	"os"
	"strings"
	"testing"
)

func TestStartRefusesIncompleteOptions(t *testing.T) {
	ok := Options{KubeOVNDir: t.TempDir(), Dir: t.TempDir(), Kubeconfig: []byte("x"), NodeName: "n",
		ServiceCIDR: "10.96.0.0/16", NBAddr: "tcp:127.0.0.1:1", SBAddr: "tcp:127.0.0.1:2"}
	for name, tc := range map[string]struct {
		mutate func(*Options)
		want   string
	}{
		"no node":          {func(o *Options) { o.NodeName = "" }, "need Dir, Kubeconfig, NodeName and ServiceCIDR"},
		"no kubeconfig":    {func(o *Options) { o.Kubeconfig = nil }, "need Dir, Kubeconfig, NodeName and ServiceCIDR"},
		"unix NB":          {func(o *Options) { o.NBAddr = "unix:/run/ovn/ovnnb_db.sock" }, "kube-ovn needs tcp: OVN addresses"},
		"no SB":            {func(o *Options) { o.SBAddr = "" }, "kube-ovn needs tcp: OVN addresses"},
		"no binary in dir": {func(*Options) {}, "kube-ovn-controller not found"},
	} {
		t.Run(name, func(t *testing.T) {
			o := ok
			tc.mutate(&o)
			c, err := Start(o)
			if err == nil {
				c.Stop()
				t.Fatal("Start succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestAddNodeRefusesBadAddress(t *testing.T) {
	for _, n := range []Node{{Name: "", Address: "10.0.0.1"}, {Name: "n", Address: "node-1"}, {Name: "n", Address: "fd00::1"}} {
		// The address is checked before the API server or OVN is touched: nil clients suffice.
		err := AddNode(context.Background(), nil, nil, n)
		if err == nil || !strings.Contains(err.Error(), "want a name and an IPv4 InternalIP") {
			t.Errorf("AddNode(%+v): %v, want a clear refusal", n, err)
		}
	}
}

func TestMountHelperOnlyWhenInvokedAsHelper(t *testing.T) {
	t.Setenv(helperEnv, "") // restored after the test
	if err := os.Unsetenv(helperEnv); err != nil {
		t.Fatal(err)
	}
	if MaybeRunMountHelper() {
		t.Fatal("MaybeRunMountHelper claimed an ordinary process")
	}
	if err := runMountHelper(t.TempDir(), nil); err == nil || !strings.Contains(err.Error(), "no command") {
		t.Errorf("the helper without a command to exec: %v, want a clear error", err)
	}
}
