// Package ovsbuild finds the Open vSwitch and OVN the lab and the tests run: kube-ovn v1.16.2's
// build (OVS branch-3.5 and OVN branch-25.03 with kube-ovn's patches), made by
// hack/tools/ovn/build.sh into the tools cache. Debian's packages are not a substitute: their
// ovn-northd (23.03) ranks a Subnet's src-ip route above a Vpc's default route, which kube-ovn's
// patch "modify src route priority" reverses, so a custom Vpc's traffic would take a path no
// kube-ovn user's takes.
//
// The programs are run by name, from PATH: the Makefile puts the build first on it, and UsePath
// does the same for a process started without the Makefile.
package ovsbuild

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// EnvDir names the build's directory (the Makefile's OVN_DIR).
const EnvDir = "VPCGW_OVN"

// DefaultSubdir is the build's directory under the tools cache, as hack/tools/ovn/build.sh names
// it from its pins.
const DefaultSubdir = "vpcgw/ovn-25.03-4eddbd952d0c-ovs-3.5-cb3bb5a5c15e"

// OVNSeries is the OVN release the build reports (`ovn-northd --version`).
const OVNSeries = "25.03."

// Dir is the build's directory: $VPCGW_OVN, or the cache's default.
func Dir() string {
	if d := os.Getenv(EnvDir); d != "" {
		return d
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(cache, DefaultSubdir)
}

// UsePath puts the build's bin and sbin first on this process's PATH (its children inherit it)
// when the build exists, and reports whether it did.
func UsePath() bool {
	d := Dir()
	if d == "" {
		return false
	}
	if _, err := os.Stat(filepath.Join(d, "VERSION")); err != nil {
		return false
	}
	bin, sbin := filepath.Join(d, "bin"), filepath.Join(d, "sbin")
	path := os.Getenv("PATH")
	if strings.HasPrefix(path, bin+string(os.PathListSeparator)+sbin) {
		return true
	}
	return os.Setenv("PATH", bin+string(os.PathListSeparator)+sbin+string(os.PathListSeparator)+path) == nil
}

// Check puts the build first on PATH when it exists (UsePath), then reports what is wrong with
// the OVS and OVN on PATH for the lab: a missing program, or an ovn-northd that is not kube-ovn's
// build. nil when everything is there.
func Check(programs ...string) error {
	UsePath()
	var missing []string
	for _, p := range append([]string{"ovn-northd"}, programs...) {
		if _, err := exec.LookPath(p); err != nil {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s not found: build kube-ovn's OVS and OVN with `make ovn` (into %s) and put its bin and sbin on PATH (the Makefile does)",
			strings.Join(missing, ", "), Dir())
	}
	northd, _ := exec.LookPath("ovn-northd")
	out, err := exec.Command(northd, "--version").Output()
	if err != nil {
		return fmt.Errorf("%s --version: %w", northd, err)
	}
	first, _, _ := bytes.Cut(out, []byte("\n"))
	if !bytes.Contains(first, []byte(" "+OVNSeries)) {
		return fmt.Errorf("%s is %q, not kube-ovn's OVN %sx build: run `make ovn` and put %s/bin first on PATH", northd, first, OVNSeries, Dir())
	}
	return nil
}

// Schema is the path of a schema file the build installed, by its name: vswitch.ovsschema,
// ovn-nb.ovsschema, ovn-sb.ovsschema. It is found beside the ovsdb-server on PATH
// (<prefix>/sbin/ovsdb-server, <prefix>/share/{openvswitch,ovn}/).
func Schema(name string) (string, error) {
	server, err := exec.LookPath("ovsdb-server")
	if err != nil {
		return "", errors.New("ovsdb-server not found: `make ovn`")
	}
	server, err = filepath.EvalSymlinks(server)
	if err != nil {
		return "", err
	}
	prefix := filepath.Dir(filepath.Dir(server))
	sub := "openvswitch"
	if strings.HasPrefix(name, "ovn-") {
		sub = "ovn"
	}
	p := filepath.Join(prefix, "share", sub, name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("schema %s not found beside %s: %w", name, server, err)
	}
	return p, nil
}
