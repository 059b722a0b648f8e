// covers: O5 (the agent is a small, static binary with no lab, bench, test or Kubernetes client code)
package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/vpcgw/vpcgw"

// agentDeps is `go list -deps` of the agent as `make build` builds it (CGO_ENABLED=0).
func agentDeps(t *testing.T) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", module+"/cmd/vpcgw-agent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, stderrOf(err))
	}
	return strings.Fields(string(out))
}

func stderrOf(err error) []byte {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.Stderr
	}
	return nil
}

// forbidden are the packages the agent must not link, each a path or a path prefix ("/..." at
// the end), with why.
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
	{module + "/internal/controller/...", "the controller"},
	{module + "/internal/webhook/...", "the webhook"},
	{module + "/internal/model/...", "the controller's model"},
	{module + "/internal/ovn/...", "the controller's OVN writer"},
	{"k8s.io/...", "Kubernetes libraries (client-go, apimachinery): the agent speaks JSON lines on stdin/stdout"},
	{"sigs.k8s.io/controller-runtime/...", "controller-runtime (and envtest)"},
	{"gonum.org/...", "the bench's plots"},
	{"testing/...", "test code"},
	{"github.com/stretchr/testify/...", "test code"},
	{"net/http/httptest/...", "test code"},
}

// ownAllowed are the only packages of this module the agent may link: a new one is a decision,
// made here.
var ownAllowed = map[string]bool{
	module + "/cmd/vpcgw-agent":           true,
	module + "/internal/dataplane":        true,
	module + "/internal/gwstate":          true,
	module + "/internal/transport/lineio": true,
	module + "/internal/version":          true,
}

func matches(pkg, pattern string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == prefix || strings.HasPrefix(pkg, prefix+"/")
	}
	return pkg == pattern
}

// covers: O5
func TestAgentLinksNoLabBenchTestOrKubernetesClientCode(t *testing.T) {
	deps := agentDeps(t)
	t.Logf("go list -deps ./cmd/vpcgw-agent: %d packages", len(deps))
	for _, p := range deps {
		for _, f := range forbidden {
			if matches(p, f.pkg) {
				t.Errorf("the agent links %s (%s)", p, f.why)
			}
		}
		if matches(p, module+"/...") && !ownAllowed[p] {
			t.Errorf("the agent links %s: not one of the packages it may link (ownAllowed in this test)", p)
		}
	}
}

// covers: O5
func TestAgentBuildsStatic(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the agent")
	}
	exe := filepath.Join(t.TempDir(), "vpcgw-agent")
	// As `make build` builds it; -X sets internal/version.Version.
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w -X "+module+"/internal/version.Version=v0.0.0-test", "-o", exe, module+"/cmd/vpcgw-agent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }() // read only
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the agent is dynamically linked (program header %v)", p.Type)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the agent needs shared libraries %v", libs)
	}
	st, err := os.Stat(exe)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("vpcgw-agent (CGO_ENABLED=0, -trimpath, -s -w): %d bytes", st.Size())
	out, err := exec.Command(exe, "--version").Output()
	if err != nil {
		t.Fatalf("vpcgw-agent --version: %v\n%s", err, stderrOf(err))
	}
	if got, want := string(out), "vpcgw-agent v0.0.0-test\n"; got != want {
		t.Errorf("vpcgw-agent --version printed %q, want %q (set by -ldflags -X)", got, want)
	}
}
