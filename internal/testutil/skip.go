// Package testutil holds what tests share: the rule for skipping.
package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// RequireAllEnv names the variable that, when "1" (make test and CI set it), turns every skip
// into a failure: on a machine that should have everything, a missing piece is a broken set-up,
// not a reason to pass.
const RequireAllEnv = "VPCGW_REQUIRE_ALL"

// Skip skips the test with the reason, or fails it when RequireAllEnv is set.
func Skip(t testing.TB, reason string) {
	t.Helper()
	if os.Getenv(RequireAllEnv) == "1" {
		t.Fatalf("%s=1 but this test cannot run: %s", RequireAllEnv, reason)
	}
	t.Skip(reason)
}

// EnvtestAssets returns the directory of the envtest binaries (KUBEBUILDER_ASSETS) when it holds
// the named ones, and otherwise "" and what is missing, as a skip reason.
func EnvtestAssets(binaries ...string) (dir, missing string) {
	dir = os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		return "", "KUBEBUILDER_ASSETS is not set: point it at the directory hack/tools/build-assets.sh fills (make test does)"
	}
	for _, b := range binaries {
		if st, err := os.Stat(filepath.Join(dir, b)); err != nil || st.IsDir() {
			return "", fmt.Sprintf("KUBEBUILDER_ASSETS=%s has no %s (hack/tools/build-assets.sh builds it)", dir, b)
		}
	}
	return dir, ""
}

// Lazy holds a test environment shared by a package's tests, started on first use.
type Lazy[T any] struct {
	once sync.Once
	v    T
	skip string
	err  error
}

// Get starts the environment with start on the first call and returns it; start returns a skip
// reason (something this machine lacks) or an error. Every caller skips or fails alike.
func (l *Lazy[T]) Get(t testing.TB, start func() (T, string, error)) T {
	t.Helper()
	l.once.Do(func() { l.v, l.skip, l.err = start() })
	if l.skip != "" {
		Skip(t, l.skip)
	}
	if l.err != nil {
		t.Fatalf("starting the shared test environment: %v", l.err)
	}
	return l.v
}

// Value is what was started (the zero value if nothing was), for TestMain's cleanup.
func (l *Lazy[T]) Value() T { return l.v }

// KubeOVNAssetsEnv names the directory hack/tools/kubeovn/build.sh fills: kube-ovn-controller
// v1.16.2, kube-ovn's CRDs, the OVN NB/SB schemas its models were generated from, its gateway
// script and the NetworkAttachmentDefinition CRD (make test sets it).
const KubeOVNAssetsEnv = "VPCGW_KUBEOVN"

// KubeOVNAssets returns that directory when it holds the named files, and otherwise "" and what is
// missing, as a skip reason.
func KubeOVNAssets(files ...string) (dir, missing string) {
	dir = os.Getenv(KubeOVNAssetsEnv)
	if dir == "" {
		return "", KubeOVNAssetsEnv + " is not set: point it at the directory hack/tools/kubeovn/build.sh fills (make test does)"
	}
	for _, f := range files {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.IsDir() {
			return "", fmt.Sprintf("%s=%s has no %s (hack/tools/kubeovn/build.sh builds it)", KubeOVNAssetsEnv, dir, f)
		}
	}
	return dir, ""
}

// ToolFromEnv returns the binary the environment variable env names (VPCGW_HELM, VPCGW_KUBECTL:
// make test sets them), or skips through Skip saying how to get it (build, e.g. "make helm") when
// it is unset or missing.
func ToolFromEnv(t testing.TB, env, build string) string {
	t.Helper()
	p := os.Getenv(env)
	if p == "" {
		Skip(t, env+" is not set: "+build+" builds it and make test sets it")
	}
	if _, err := os.Stat(p); err != nil {
		Skip(t, env+"="+p+": "+err.Error())
	}
	return p
}
