// Package testutil holds what tests share: the rule for skipping.
package testutil

import (
	"os"
	"testing"
)

// RequireAllEnv, when "1" (make test and CI set it), turns every skip into a failure: on a machine
// that should have everything, a missing piece is a broken set-up, not a reason to pass.
const RequireAllEnv = "VPCGW_REQUIRE_ALL"

// Skip skips the test with the reason, or fails it when RequireAllEnv is set.
func Skip(t testing.TB, reason string) {
	t.Helper()
	if os.Getenv(RequireAllEnv) == "1" {
		t.Fatalf("%s=1 but this test cannot run: %s", RequireAllEnv, reason)
	}
	t.Skip(reason)
}
