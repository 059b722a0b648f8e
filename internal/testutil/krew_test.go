// covers: O2, O6 (the krew manifest checked by krew's own rules: the release's once failed the
// name rule, its file named vpcgw.krew.yaml)

package testutil

import (
	"strings"
	"testing"
)

const goodKrew = `apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: vpcgw
spec:
  version: v0.2.0
  homepage: https://github.com/vpcgw/vpcgw
  shortDescription: Inspect Services served by kube-ovn VPC NAT gateways
  platforms:
    - selector: {matchLabels: {os: linux, arch: amd64}}
      uri: https://example.test/v0.2.0/kubectl-vpcgw_linux_amd64.tar.gz
      sha256: ` + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" + `
      bin: kubectl-vpcgw
      files: [{from: kubectl-vpcgw, to: .}, {from: LICENSE, to: .}]
`

func TestValidateKrewManifest(t *testing.T) {
	if _, err := ValidateKrewManifest("plugins/vpcgw.yaml", []byte(goodKrew)); err != nil {
		t.Fatalf("a good manifest: %v", err)
	}
	for _, tc := range []struct{ what, path, manifest, want string }{
		{"the file not named as the plugin", "vpcgw.krew.yaml", goodKrew, `not allowed`},
		{"another name", "plugins/other.yaml", goodKrew, `should be named "other"`},
		{"no semver", "vpcgw.yaml", strings.Replace(goodKrew, "v0.2.0\n", "0.2.0\n", 1), "not a v-prefixed semantic version"},
		{"a bad sha256", "vpcgw.yaml", strings.Replace(goodKrew, "0123456789abcdef0123", "0123456789ABCDEF0123", 1), "sha256"},
		{"two-line description", "vpcgw.yaml", strings.Replace(goodKrew, "shortDescription: Inspect", "shortDescription: \"a\\nb\"\n  x: Inspect", 1), "one non-empty line"},
		{"no selector", "vpcgw.yaml", strings.Replace(goodKrew, "    - selector: {matchLabels: {os: linux, arch: amd64}}\n      uri", "    - uri", 1), "empty selector"},
	} {
		if _, err := ValidateKrewManifest(tc.path, []byte(tc.manifest)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.what, err, tc.want)
		}
	}
}
