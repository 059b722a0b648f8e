package main

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unicode"
)

func buildVpcgw(t *testing.T) string {
	t.Helper()
	exe := filepath.Join(t.TempDir(), "vpcgw")
	if out, err := exec.Command("go", "build", "-o", exe, "github.com/vpcgw/vpcgw/cmd/vpcgw").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return exe
}

// Every --help of the product binary exits 0 and prints readable help on stdout: what the command
// does, and each flag with its type and default; a command line that cannot be parsed exits 2
// and says where the help is.
// covers: O2, O4
func TestHelpOfTheBinary(t *testing.T) {
	exe := buildVpcgw(t)
	runIt := func(args ...string) (stdout, stderr string, code int) {
		var o, e bytes.Buffer
		cmd := exec.Command(exe, args...)
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit):
			code = exit.ExitCode()
		case err != nil:
			t.Fatalf("vpcgw %v: %v", args, err)
		}
		return o.String(), e.String(), code
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--help"}, []string{"Usage: vpcgw <command> [flags]", "controller", "release", "webhook", "version", "vpcgw <command> --help"}},
		{[]string{"-h"}, []string{"Usage: vpcgw <command> [flags]"}},
		{[]string{"help"}, []string{"Usage: vpcgw <command> [flags]"}},
		{[]string{"controller", "--help"}, []string{"Usage: vpcgw controller [flags]", "programs the VPC NAT gateways",
			"  --enable-gw-nftable-lb-svc\n", "  --kube-ovn-controller-deployment string\n", "  --min-sync-interval duration\n",
			"  --gateway-workers int\n", "  --log-format string\n", `(default "json")`, "  --v int\n", "  --transport string\n", `(default "exec")`}},
		{[]string{"release", "-h"}, []string{"Usage: vpcgw release [flags]", "Releases everything vpcgw wrote", "  --release-timeout duration\n", "  --enable-gw-nftable-lb-svc\n"}},
		{[]string{"webhook", "--help"}, []string{"Usage: vpcgw webhook [flags]", "admission webhook", "  --cert-dir string\n", "  --log-format string\n"}},
		{[]string{"version", "--help"}, []string{"Usage: vpcgw version [flags]"}},
	} {
		out, errOut, code := runIt(tc.args...)
		if code != 0 || errOut != "" {
			t.Errorf("vpcgw %v: exit %d, stderr %q; want 0 and nothing", tc.args, code, errOut)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("vpcgw %v: help lacks %q:\n%s", tc.args, w, out)
			}
		}
		for i, line := range strings.Split(out, "\n") {
			if len([]rune(line)) > 100 || strings.ContainsFunc(line, func(r rune) bool { return !unicode.IsPrint(r) }) || strings.Contains(line, "%!") {
				t.Errorf("vpcgw %v: line %d is not readable: %q", tc.args, i+1, line)
			}
		}
	}
	for _, tc := range []struct {
		args []string
		says string
	}{
		{nil, "Usage: vpcgw <command>"},
		{[]string{"nope"}, `unknown command "nope"`},
		{[]string{"controller", "--bogus"}, "see vpcgw controller --help"},
		{[]string{"controller", "stray"}, `unexpected arguments ["stray"]`},
		{[]string{"controller", "--log-format=xml"}, `--log-format="xml": json or text`},
		{[]string{"webhook", "--port=x"}, "see vpcgw webhook --help"},
		{[]string{"controller", "--enable-nftable-lb-svc"}, "--enable-gw-nftable-lb-svc"},
	} {
		out, errOut, code := runIt(tc.args...)
		if code == 0 || !strings.Contains(errOut, tc.says) || out != "" {
			t.Errorf("vpcgw %v: exit %d, stdout %q, stderr %q; want a failure saying %q", tc.args, code, out, errOut, tc.says)
		}
	}
}
