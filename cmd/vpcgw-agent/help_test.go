// covers: O2, O5 (the agent's --help exits 0 and prints readable help on stdout)
package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unicode"
)

// buildAgent builds the agent as `make build` does (CGO_ENABLED=0).
func buildAgent(t *testing.T) string {
	t.Helper()
	exe := filepath.Join(t.TempDir(), "vpcgw-agent")
	build := exec.Command("go", "build", "-o", exe, module+"/cmd/vpcgw-agent")
	build.Env = append(build.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return exe
}

// readable: printable text in lines of at most 100 columns, no fmt mistakes (%!).
func readable(t *testing.T, what, s string) {
	t.Helper()
	for i, line := range strings.Split(s, "\n") {
		if len([]rune(line)) > 100 {
			t.Errorf("%s: line %d is %d columns long: %q", what, i+1, len([]rune(line)), line)
		}
		for _, r := range line {
			if !unicode.IsPrint(r) && r != '\t' {
				t.Errorf("%s: line %d has the unprintable %q", what, i+1, r)
				break
			}
		}
	}
	if strings.Contains(s, "%!") {
		t.Errorf("%s has a formatting mistake:\n%s", what, s)
	}
}

// covers: O2, O5
func TestAgentHelp(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the agent")
	}
	exe := buildAgent(t)
	for _, args := range [][]string{{"--help"}, {"-h"}, {"-help"}, {"--v", "2", "--help"}} {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(exe, args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Errorf("vpcgw-agent %v: %v (want exit 0)\nstderr: %s", args, err, stderr.String())
			continue
		}
		out := stdout.String()
		if stderr.Len() != 0 {
			t.Errorf("vpcgw-agent %v wrote to stderr: %q", args, stderr.String())
		}
		if !strings.HasPrefix(out, "vpcgw-agent programs a kube-ovn VPC NAT gateway's nftables table ip kube-ovn") ||
			!strings.Contains(out, "\nUsage:\n  vpcgw-agent [flags]\n  vpcgw-agent --version\n") {
			t.Errorf("vpcgw-agent %v: no description and usage:\n%s", args, out)
		}
		for _, flag := range []string{"-vpc-interface string", "-verify-interval duration", "-retry-max duration", "-text-path", "-v int", "-version"} {
			if !strings.Contains(out, "  "+flag+"\n") {
				t.Errorf("vpcgw-agent %v: the help lacks %q:\n%s", args, flag, out)
			}
		}
		readable(t, "vpcgw-agent --help", out)
	}
	// A wrong flag is an error that points at --help, not the help itself.
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(exe, "--bogus")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err == nil || stdout.Len() != 0 ||
		!strings.Contains(stderr.String(), "flag provided but not defined: -bogus (see vpcgw-agent --help)") || strings.Contains(stderr.String(), "Usage:") {
		t.Errorf("vpcgw-agent --bogus: %v\nstdout %q\nstderr %q", err, stdout.String(), stderr.String())
	}
}
