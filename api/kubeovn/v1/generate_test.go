// covers: R1, R6, S7 (generated API stays in sync)
package v1_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"testing"

	"github.com/vpcgw/vpcgw/internal/testutil"
)

// repoRoot is the module root, three levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate test source file")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// TestGeneratedFilesUpToDate regenerates deepcopy and CRD YAML into a temp dir and requires the
// committed files to match byte for byte, so a type change without `hack/generate.sh` fails CI.
func TestGeneratedFilesUpToDate(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		testutil.Skip(t, "skipping: the go command is not in PATH, cannot run controller-gen")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		testutil.Skip(t, "skipping: bash is not in PATH, cannot run hack/generate.sh")
	}
	root := repoRoot(t)
	out := t.TempDir()
	cmd := exec.Command(bash, filepath.Join(root, "hack", "generate.sh"), out)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/generate.sh %s: %v\n%s", out, err, b)
	}

	const hint = "generated files are stale: run hack/generate.sh"
	compare := func(rel string) {
		want, err := os.ReadFile(filepath.Join(out, rel))
		if err != nil {
			t.Fatalf("read regenerated %s: %v", rel, err)
		}
		got, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Errorf("%s is missing: %v (%s)", rel, err, hint)
			return
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from controller-gen output (%s)", rel, hint)
		}
	}
	compare(filepath.Join("api", "kubeovn", "v1", "zz_generated.deepcopy.go"))
	compare(filepath.Join("api", "vpcgw", "v1alpha1", "zz_generated.deepcopy.go"))

	names := func(dir string) []string {
		m, err := filepath.Glob(filepath.Join(dir, "config", "crd", "*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for i := range m {
			m[i] = filepath.Base(m[i])
		}
		sort.Strings(m)
		return m
	}
	generated, committed := names(out), names(root)
	if len(generated) == 0 {
		t.Fatal("controller-gen produced no CRD YAML")
	}
	for _, n := range generated {
		compare(filepath.Join("config", "crd", n))
	}
	// A committed CRD that is no longer generated would still be installed by envtest and the lab.
	gen := map[string]bool{}
	for _, n := range generated {
		gen[n] = true
	}
	for _, n := range committed {
		if !gen[n] {
			t.Errorf("config/crd/%s is no longer generated (%s)", n, hint)
		}
	}
}
