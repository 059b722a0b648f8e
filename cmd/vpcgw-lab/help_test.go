package main

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// covers: O2
// Every subcommand's --help exits 0 and lists its flags (the lab's and the soak's shared ones
// included); an unknown flag exits 1 and names it. Before, --help exited 1 with "flag: help
// requested".
func TestSubcommandHelp(t *testing.T) {
	exe := filepath.Join(t.TempDir(), "vpcgw-lab")
	if out, err := exec.Command("go", "build", "-o", exe, "github.com/vpcgw/vpcgw/cmd/vpcgw-lab").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	run := func(args ...string) (string, int) {
		var out bytes.Buffer
		cmd := exec.Command(exe, args...)
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return out.String(), exit.ExitCode()
		}
		if err != nil {
			t.Fatalf("vpcgw-lab %v: %v", args, err)
		}
		return out.String(), 0
	}
	shared := []string{"-assets string", "-kube-ovn string", "-vpcgw string", "-agent string", "-v\t"}
	for _, tc := range []struct {
		cmd  string
		want []string
	}{
		{"lab", append([]string{"-stay", "-requests int"}, shared...)},
		{"soak", append([]string{"-duration duration", "-steps string", "-converge-timeout duration"}, shared...)},
		{"bench", nil},
		{"echo", []string{"-name string"}},
		{"probe", nil},
	} {
		out, code := run(tc.cmd, "--help")
		if code != 0 || !strings.Contains(out, "Usage of "+tc.cmd) {
			t.Errorf("vpcgw-lab %s --help: exit %d, want 0 and its usage:\n%s", tc.cmd, code, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("vpcgw-lab %s --help lacks %q:\n%s", tc.cmd, w, out)
			}
		}
		if out, code := run(tc.cmd, "--no-such-flag"); code != 1 || !strings.Contains(out, "no-such-flag") {
			t.Errorf("vpcgw-lab %s --no-such-flag: exit %d, want 1 naming the flag:\n%s", tc.cmd, code, out)
		}
	}
}
