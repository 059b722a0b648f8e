// covers: D2
package main

import (
	"slices"
	"strings"
	"testing"
)

// The controller's --backend-pick reaches the agents as their --pick; the default adds nothing,
// so that an agent built into a gateway image without --pick still starts.
func TestBackendPickBecomesTheAgentsPick(t *testing.T) {
	for _, tc := range []struct {
		pick    string
		want    []string
		wantErr string
	}{
		{pick: "hash"},
		{pick: "random", want: []string{"--pick=random"}},
		{pick: "maglev", wantErr: `--backend-pick="maglev": want hash or random`},
		{pick: "", wantErr: `--backend-pick="": want hash or random`},
	} {
		cf := controllerFlags{backendPick: tc.pick}
		got, err := cf.agentArgs()
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: error %v, want %q", tc.pick, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%q: %q, %v; want %q", tc.pick, got, err, tc.want)
		}
	}
}
