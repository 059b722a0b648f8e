// covers: O2, O5 (the shipped plugin links no lab, bench or test code and no code that runs
// `ip netns exec` on the user's machine)
package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/vpcgw/vpcgw"

// forbidden are the packages the plugin must not link, each a path or a prefix ending "/...",
// with why.
var forbidden = []struct{ pkg, why string }{
	{module + "/internal/lab/...", "the benchmark lab"},
	{module + "/internal/cluster/...", "the lab cluster"},
	{module + "/internal/labnode/...", "the lab node"},
	{module + "/internal/labbin/...", "the lab's binaries"},
	{module + "/internal/bench/...", "the bench"},
	{module + "/internal/netlab/...", "the lab's namespaces (it runs ip netns exec), echo and probe"},
	{module + "/internal/kubeovnrun/...", "the lab's kube-ovn-controller"},
	{module + "/internal/kcm/...", "the lab's kube-controller-manager"},
	{module + "/internal/testutil/...", "test code"},
	{module + "/internal/transport/...", "the controller's agent transport (its local transport runs ip netns exec)"},
	{module + "/internal/dataplane/...", "the agent"},
	{module + "/internal/controller/...", "the controller"},
	{module + "/internal/webhook/...", "the webhook"},
	{module + "/internal/ovn/...", "the controller's OVN writer"},
	{"sigs.k8s.io/controller-runtime/pkg/envtest/...", "envtest (the tests' API server)"},
	{"sigs.k8s.io/controller-runtime/tools/...", "envtest's set-up tools"},
	{"gonum.org/...", "the bench's plots"},
	{"testing/...", "test code"},
	{"net/http/httptest/...", "test code"},
}

// ownAllowed are the only packages of this module the plugin may link: a new one is a decision,
// made here.
var ownAllowed = map[string]bool{
	module + "/cmd/kubectl-vpcgw":   true,
	module + "/api/kubeovn/v1":      true,
	module + "/api/vpcgw/v1alpha1":  true,
	module + "/internal/gwinstance": true, // the model's rule of which Pods are a gateway's instances (SPEC N5)
	module + "/internal/gwstate":    true,
	module + "/internal/inspect":    true,
	module + "/internal/model":      true,
	module + "/internal/status":     true,
	module + "/internal/version":    true,
}

func matches(pkg, pattern string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == prefix || strings.HasPrefix(pkg, prefix+"/")
	}
	return pkg == pattern
}

// `go list -deps` of the plugin as the release builds its krew archives (CGO_ENABLED=0).
// covers: O2, O5
func TestPluginLinksNoLabBenchOrTestCode(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", module+"/cmd/kubectl-vpcgw")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list -deps: %v\n%s", err, stderr)
	}
	deps := strings.Fields(string(out))
	t.Logf("go list -deps ./cmd/kubectl-vpcgw: %d packages", len(deps))
	if len(deps) == 0 {
		t.Fatal("go list -deps listed nothing")
	}
	for _, p := range deps {
		for _, f := range forbidden {
			if matches(p, f.pkg) {
				t.Errorf("the plugin links %s (%s)", p, f.why)
			}
		}
		if matches(p, module+"/...") && !ownAllowed[p] {
			t.Errorf("the plugin links %s: not one of the packages it may link (ownAllowed in this test)", p)
		}
	}
}
