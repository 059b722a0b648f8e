// covers: O2 (every --help of the plugin binary exits 0 and prints readable help, without a cluster)
package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unicode"
)

// covers: O2
func TestHelpOfTheBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the plugin")
	}
	dir := t.TempDir()
	exe := filepath.Join(dir, "kubectl-vpcgw")
	if out, err := exec.Command("go", "build", "-o", exe, module+"/cmd/kubectl-vpcgw").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		args  []string
		usage string   // the usage line
		flags []string // the verb's own flags the help lists
	}{
		{[]string{"--help"}, "kubectl vpcgw [command]", []string{"--controller-namespace", "--stale-after", "--kubeconfig", "-n, --namespace"}},
		{[]string{"-h"}, "kubectl vpcgw [command]", nil},
		{[]string{"help"}, "kubectl vpcgw [command]", nil},
		{[]string{"status", "--help"}, "kubectl vpcgw status [gw/<gateway>] [flags]",
			[]string{"-A, --all-namespaces", "-l, --selector string", "--no-headers", "-o, --output string", "--template string"}},
		{[]string{"help", "status"}, "kubectl vpcgw status [gw/<gateway>] [flags]", []string{"-l, --selector string"}},
		{[]string{"status", "-h", "-o", "bogus"}, "kubectl vpcgw status [gw/<gateway>] [flags]", nil},
		{[]string{"explain", "--help"}, "kubectl vpcgw explain svc/<name> [flags]", []string{"-o, --output string", "--no-headers"}},
		{[]string{"ruleset", "--help"}, "kubectl vpcgw ruleset <gateway> [flags]", nil},
		{[]string{"version", "--help"}, "kubectl vpcgw version [flags]", []string{"--client", "-o, --output string"}},
		{[]string{"completion", "--help"}, "kubectl vpcgw completion [command]", nil},
		{[]string{"completion", "bash", "--help"}, "kubectl vpcgw completion bash", nil},
	} {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(exe, tc.args...)
		// No cluster: help needs none.
		cmd.Env = append(cmd.Environ(), "KUBECONFIG="+filepath.Join(dir, "no-such-kubeconfig"))
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Errorf("kubectl-vpcgw %q: %v (want exit 0)\nstderr: %s", tc.args, err, stderr.String())
			continue
		}
		out := stdout.String()
		if stderr.Len() != 0 {
			t.Errorf("kubectl-vpcgw %q wrote to stderr: %q", tc.args, stderr.String())
		}
		desc, rest, ok := strings.Cut(out, "\nUsage:\n  "+tc.usage+"\n")
		if !ok || strings.TrimSpace(desc) == "" {
			t.Errorf("kubectl-vpcgw %q: no description and usage line %q:\n%s", tc.args, tc.usage, out)
			continue
		}
		for _, f := range tc.flags {
			if !strings.Contains(rest, "  "+f+" ") && !strings.Contains(rest, "  "+f+"\n") {
				t.Errorf("kubectl-vpcgw %q: the help lacks the flag %q:\n%s", tc.args, f, out)
			}
		}
		// The text before Usage is the verb's own, for a person: lines of at most 100 columns.
		for _, line := range strings.Split(desc, "\n") {
			if len([]rune(line)) > 100 {
				t.Errorf("kubectl-vpcgw %q: line of %d columns: %q", tc.args, len([]rune(line)), line)
			}
		}
		for _, r := range out {
			if !unicode.IsPrint(r) && r != '\n' && r != '\t' {
				t.Errorf("kubectl-vpcgw %q: unprintable %q in the help", tc.args, r)
				break
			}
		}
		if strings.Contains(out, "%!") {
			t.Errorf("kubectl-vpcgw %q: a formatting mistake in the help:\n%s", tc.args, out)
		}
	}
}
