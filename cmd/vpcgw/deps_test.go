// covers: O5 (the product binary, controller and webhook, carries no lab, bench or test code)
package main

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/vpcgw/vpcgw"

// forbidden are what only cmd/vpcgw-lab and the tests may link: a path, or a prefix ending "/...".
var forbidden = []struct{ pkg, why string }{
	{module + "/internal/lab/...", "the benchmark lab"},
	{module + "/internal/cluster/...", "the lab cluster"},
	{module + "/internal/labnode/...", "the lab node"},
	{module + "/internal/labbin/...", "the lab's binaries"},
	{module + "/internal/bench/...", "the bench"},
	{module + "/internal/netlab/...", "the lab's namespaces, echo and probe"},
	{module + "/internal/kubeovnrun/...", "the lab's kube-ovn-controller"},
	{module + "/internal/kcm/...", "the lab's kube-controller-manager"},
	{module + "/internal/testutil/...", "test code"},
	{module + "/internal/transport/agenttest/...", "test code"},
	{module + "/internal/dataplane/...", "the agent (its own binary, cmd/vpcgw-agent)"},
	{"sigs.k8s.io/controller-runtime/pkg/envtest/...", "envtest (the tests' API server)"},
	{"sigs.k8s.io/controller-runtime/tools/...", "envtest's set-up tools"},
	{"gonum.org/...", "the bench's plots"},
}

func matches(pkg, pattern string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == prefix || strings.HasPrefix(pkg, prefix+"/")
	}
	return pkg == pattern
}

// covers: O5
func TestProductLinksNoLabBenchOrTestCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", module+"/cmd/vpcgw").Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list -deps: %v\n%s", err, stderr)
	}
	deps := strings.Fields(string(out))
	t.Logf("go list -deps ./cmd/vpcgw: %d packages", len(deps))
	for _, p := range deps {
		for _, f := range forbidden {
			if matches(p, f.pkg) {
				t.Errorf("vpcgw links %s (%s)", p, f.why)
			}
		}
	}
}
