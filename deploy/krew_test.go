// covers: O2, O6 (the kubectl plugin's krew manifest and archives)
package deploy

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/vpcgw/vpcgw/internal/testutil"
)

// krewPlugin is krew's Plugin manifest (krew.googlecontainertools.github.com/v1alpha2).
type krewPlugin = testutil.KrewPlugin

// The template names the four platforms; build.sh makes an archive per platform asked for, with
// the plugin (of the version asked for), its completion helper and the LICENSE, and a manifest
// whose sha256 is the archive's, with no placeholder left; the same inputs give the same archive.
// A VERSION that is no semantic version (an untagged repository's describe) gets one, as krew
// requires.
// covers: O2, O4, O6
func TestKrewManifest(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		testutil.Skip(t, "the go command is not on the PATH")
	}
	for _, tool := range []string{"bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.Skip(t, tool+" is not installed")
		}
	}
	data, err := os.ReadFile("krew/vpcgw.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var tmpl krewPlugin
	if err := yaml.UnmarshalStrict(data, &tmpl); err != nil {
		t.Fatalf("krew/vpcgw.yaml: %v", err)
	}
	var all []string
	for _, p := range tmpl.Spec.Platforms {
		all = append(all, p.Selector.MatchLabels["os"]+"/"+p.Selector.MatchLabels["arch"])
	}
	if want := []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"}; !slices.Equal(all, want) {
		t.Errorf("template platforms %v, want %v", all, want)
	}

	build := func(dir, version string) {
		t.Helper()
		cmd := exec.Command("bash", "krew/build.sh", dir)
		cmd.Env = append(os.Environ(), "PLATFORMS=linux/amd64", "VERSION="+version, "BASE_URL=https://example.test/dl", "SOURCE_DATE_EPOCH=1700000000")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("krew/build.sh: %v\n%s", err, out)
		}
	}
	dir := t.TempDir()
	build(dir, "v0.0.0-krewtest")
	data, err = os.ReadFile(filepath.Join(dir, "vpcgw.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if regexp.MustCompile(`@[A-Za-z0-9_]+@|@platform`).Match(data) {
		t.Errorf("placeholders left in the manifest:\n%s", data)
	}
	var m krewPlugin
	if err := yaml.UnmarshalStrict(data, &m); err != nil {
		t.Fatalf("the rendered manifest: %v", err)
	}
	// krew's own rules, as validate-krew-manifest checks them (the file named as the plugin).
	if _, err := testutil.ValidateKrewManifest(filepath.Join(dir, "vpcgw.yaml"), data); err != nil {
		t.Errorf("the rendered manifest: %v", err)
	}
	if m.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || m.Kind != "Plugin" || m.Metadata.Name != "vpcgw" || m.Spec.Version != "v0.0.0-krewtest" ||
		m.Spec.ShortDescription == "" || m.Spec.Homepage == "" || !strings.Contains(m.Spec.Description, "kubectl vpcgw explain svc/<name>") {
		t.Errorf("manifest %+v", m)
	}
	// The caveats say what the chart really grants (SPEC O2, O4): the controller's namespace, who
	// may read its status, the viewer roles.
	for _, w := range []string{"vpcgw-system unless --controller-namespace", "controller.statusReaders", "vpcgw-status-reader", "vpcgw-view", "vpcgw-tenant-view", "exit code 4"} {
		if !strings.Contains(m.Spec.Caveats, w) {
			t.Errorf("caveats lack %q:\n%s", w, m.Spec.Caveats)
		}
	}
	for _, w := range []string{"kube-system", "every authenticated user"} {
		if strings.Contains(m.Spec.Caveats, w) {
			t.Errorf("caveats say %q, which the chart does not do:\n%s", w, m.Spec.Caveats)
		}
	}
	if len(m.Spec.Platforms) != 1 {
		t.Fatalf("platforms %+v, want linux/amd64 only", m.Spec.Platforms)
	}
	p := m.Spec.Platforms[0]
	archive := filepath.Join(dir, "kubectl-vpcgw_linux_amd64.tar.gz")
	sum := fileSHA256(t, archive)
	if p.URI != "https://example.test/dl/kubectl-vpcgw_linux_amd64.tar.gz" || p.SHA256 != sum || p.Bin != "kubectl-vpcgw" ||
		fmt.Sprint(p.Selector.MatchLabels) != "map[arch:amd64 os:linux]" || len(p.Files) != 3 {
		t.Errorf("platform %+v (archive sha256 %s)", p, sum)
	}
	// The archive holds exactly the files the manifest names, the programs executable, and the
	// repository's LICENSE.
	license, err := os.ReadFile("../LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	extracted := t.TempDir()
	var names []string
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }() // read only
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if (h.Name == "LICENSE") == (h.Mode&0o111 != 0) || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: mode %o, owner %d:%d", h.Name, h.Mode, h.Uid, h.Gid)
		}
		out, err := os.OpenFile(filepath.Join(extracted, h.Name), os.O_CREATE|os.O_WRONLY, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, tr); err != nil {
			t.Fatal(err)
		}
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
	}
	var from []string
	for _, fl := range p.Files {
		from = append(from, fl.From)
	}
	slices.Sort(from)
	if !slices.Equal(names, []string{"LICENSE", "kubectl-vpcgw", "kubectl_complete-vpcgw"}) || !slices.Equal(from, names) {
		t.Errorf("archive holds %v, the manifest names %v", names, from)
	}
	if b, err := os.ReadFile(filepath.Join(extracted, "LICENSE")); err != nil || !bytes.Equal(b, license) {
		t.Errorf("the archive's LICENSE is not the repository's (%v)", err)
	}
	out, err := exec.Command(filepath.Join(extracted, "kubectl-vpcgw"), "version", "--client").Output()
	if err != nil || strings.TrimSpace(string(out)) != "kubectl-vpcgw: v0.0.0-krewtest" {
		t.Errorf("the archived plugin's version --client: %q %v", out, err)
	}
	// Reproducible: a second build gives the same archive.
	again := t.TempDir()
	build(again, "v0.0.0-krewtest")
	if s := fileSHA256(t, filepath.Join(again, "kubectl-vpcgw_linux_amd64.tar.gz")); s != sum {
		t.Errorf("a second build's archive has sha256 %s, the first %s", s, sum)
	}
	// An untagged repository's describe (a bare commit hash) is made a v-prefixed semver.
	untagged := t.TempDir()
	build(untagged, "7dbcc4c")
	if err := yaml.UnmarshalStrict(mustRead(t, filepath.Join(untagged, "vpcgw.yaml")), &m); err != nil || m.Spec.Version != "v0.0.0-7dbcc4c" {
		t.Errorf("VERSION=7dbcc4c: manifest version %q (%v), want v0.0.0-7dbcc4c", m.Spec.Version, err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
