package soak

import (
	"strings"
	"testing"
)

// covers: L6, L7, L8, L11 (the soak's report, which shows them over time)
func TestReportClaimsNoLeakOnlyWhenChecked(t *testing.T) {
	steps := []StepResult{{Name: "the API server restarted", Kind: Harmless}}
	for _, tc := range []struct {
		name          string
		rep           Report
		noLeak, early bool
	}{
		{"stopped early", Report{Steps: steps}, false, true},
		{"checked, clean", Report{Steps: steps, LeaksChecked: true}, true, false},
		{"checked, leaking", Report{Steps: steps, LeaksChecked: true, Leaks: []string{"VIP routes: 2 at the start, 3 at the end"}}, false, false},
	} {
		var b strings.Builder
		if err := WriteReport(&b, &tc.rep); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		out := b.String()
		if got := strings.Contains(out, "no leak"); got != tc.noLeak {
			t.Errorf("%s: report says \"no leak\": %v, want %v\n%s", tc.name, got, tc.noLeak, out)
		}
		if !strings.Contains(out, "long-lived flows (rr, upload, download, UDP; external and hairpin) across the gateway's replacements: 0 of 0 broken") {
			t.Errorf("%s: report does not count the long-lived flows:\n%s", tc.name, out)
		}
		if got := strings.Contains(out, "the leak check did not run"); got != tc.early {
			t.Errorf("%s: report says the check did not run: %v, want %v\n%s", tc.name, got, tc.early, out)
		}
	}
}
