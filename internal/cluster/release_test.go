// covers: O1, O6 (the lab's --no-vpcgw reads the release it installs from, and refuses what is not one)

package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeRelease(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestOpenReleaseNamesItsFiles(t *testing.T) {
	dir := writeRelease(t, map[string]string{
		"SHA256SUMS":  "",
		"images.json": `{"vpcgw": {"tag": "v0.3.0", "digest": "sha256:aa"}, "vpcgw-agent": {"tag": "v0.3.0"}}`,
	})
	r, err := OpenRelease(dir)
	if err != nil {
		t.Fatal(err)
	}
	if r.Version != "v0.3.0" {
		t.Errorf("version %q, want v0.3.0", r.Version)
	}
	if want := filepath.Join(dir, "vpcgw-0.3.0.tgz"); r.Chart() != want {
		t.Errorf("chart %s, want %s", r.Chart(), want)
	}
	imgs := r.Images()
	if imgs[ReleaseImageRepo] != filepath.Join(dir, "vpcgw-v0.3.0.oci.tar") || imgs[ReleaseAgentRepo] != filepath.Join(dir, "vpcgw-agent-v0.3.0.oci.tar") {
		t.Errorf("images %v", imgs)
	}
}

func TestOpenReleaseRefusesWhatIsNoRelease(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"empty directory", nil, "no release in"},
		{"no images.json", map[string]string{"SHA256SUMS": ""}, "images.json"},
		{"images.json not JSON", map[string]string{"SHA256SUMS": "", "images.json": "{"}, "images.json"},
		{"no vpcgw tag", map[string]string{"SHA256SUMS": "", "images.json": `{"vpcgw-agent": {"tag": "v1"}}`}, "names no tag for vpcgw"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := OpenRelease(writeRelease(t, tc.files))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func TestLabNoVpcgwRefusesAMissingReleaseBeforeStarting(t *testing.T) {
	dir := t.TempDir()
	err := Main(t.Context(), []string{"--no-vpcgw", "--release", dir, "--assets", dir, "--kube-ovn", dir})
	if err == nil || !strings.Contains(err.Error(), "--no-vpcgw: no release in "+dir) {
		t.Fatalf("error %v, want one saying --no-vpcgw finds no release in %s", err, dir)
	}
}
