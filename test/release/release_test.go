// covers: O6 (the release `make release` writes, read back: every piece there and in
// SHA256SUMS, the LICENSE in every archive, the chart's version, appVersion and pinned digest, the
// krew manifest's semver and sha256s, the OCI archives' labels and SBOMs, the release notes)
package release

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/vpcgw/vpcgw/internal/testutil"
)

// ReleaseEnv names the directory `make release` writes (the Makefile exports it). Unset, the
// tests read <repository>/bin/release when it holds a release, and otherwise write one into a
// temporary directory with hack/tools/release (a minute or two; helm from HelmEnv).
const (
	ReleaseEnv = "VPCGW_RELEASE"
	HelmEnv    = "VPCGW_HELM"
)

var (
	semver = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)` +
		`(-(0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)(\.(0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*))*)?$`)
	digestRe = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
)

var imageNames = []string{"vpcgw", "vpcgw-agent"}

var krewPlatforms = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"}

// The OCI annotations every image index, manifest and config carries.
var ociKeys = []string{"title", "description", "version", "revision", "created", "source", "url", "documentation", "vendor", "authors", "licenses"}

type imageSummary struct {
	Tag       string            `json:"tag"`
	Digest    string            `json:"digest"`
	Platforms map[string]string `json:"platforms"`
	SBOM      string            `json:"sbom"`
}

// rel is the release directory as read.
type rel struct {
	dir     string
	version string // the vpcgw image's tag in images.json: the release's version
	images  map[string]imageSummary
}

func (r *rel) path(name string) string { return filepath.Join(r.dir, name) }

// krewManifest is the release's krew manifest, where krew's index keeps it: krew requires the file
// to be named as the plugin.
const krewManifest = "plugins/vpcgw.yaml"

// expected is every file the release must hold.
func (r *rel) expected() []string {
	v := r.version
	files := []string{"vpcgw-" + strings.TrimPrefix(v, "v") + ".tgz", "images.json", krewManifest, "vpcgw.yaml",
		"install.sh", "LICENSE", "RELEASE-NOTES.md", "SHA256SUMS"}
	for _, n := range imageNames {
		files = append(files, n+"-"+v+".oci.tar", n+"-"+v+".spdx.json")
	}
	for _, p := range krewPlatforms {
		files = append(files, "kubectl-vpcgw_"+strings.ReplaceAll(p, "/", "_")+".tar.gz")
	}
	if r.signed() {
		files = append(files, signatureFile, publicKeyFile)
	}
	slices.Sort(files)
	return files
}

var (
	loadOnce sync.Once
	loaded   *rel
	loadSkip string
	loadErr  error
	tempDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if tempDir != "" {
		if err := os.RemoveAll(tempDir); err != nil {
			fmt.Fprintf(os.Stderr, "remove %s: %v\n", tempDir, err)
		}
	}
	os.Exit(code)
}

func repoRoot() string {
	d, err := filepath.Abs("../..")
	if err != nil {
		panic(err)
	}
	return d
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// load finds (or writes) the release and reads images.json; it skips, saying why, when there is
// none and none can be written.
func load(t *testing.T) *rel {
	t.Helper()
	loadOnce.Do(func() {
		dir := os.Getenv(ReleaseEnv)
		switch {
		case dir != "" && !exists(filepath.Join(dir, "SHA256SUMS")):
			loadSkip = fmt.Sprintf("%s=%s holds no release (no SHA256SUMS): run `make release`", ReleaseEnv, dir)
			return
		case dir == "" && exists(filepath.Join(repoRoot(), "bin", "release", "SHA256SUMS")):
			dir = filepath.Join(repoRoot(), "bin", "release")
		case dir == "":
			dir, loadSkip, loadErr = writeRelease()
			if dir == "" {
				return
			}
		}
		r := &rel{dir: dir}
		b, err := os.ReadFile(r.path("images.json"))
		if err == nil {
			err = json.Unmarshal(b, &r.images)
		}
		if err != nil {
			loadErr = fmt.Errorf("the release in %s has no readable images.json: %w", dir, err)
			return
		}
		r.version = r.images["vpcgw"].Tag
		loaded = r
	})
	if loadSkip != "" {
		testutil.Skip(t, loadSkip)
	}
	if loadErr != nil {
		t.Fatal(loadErr)
	}
	return loaded
}

// writeRelease runs hack/tools/release into a temporary directory.
func writeRelease() (dir, skip string, err error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", "no release to check and no go command to write one: run `make release`", nil
	}
	helm := os.Getenv(HelmEnv)
	if helm == "" || !exists(helm) {
		return "", fmt.Sprintf("no release to check, and %s=%q is no helm to write one with: run `make release`", HelmEnv, helm), nil
	}
	if tempDir, err = os.MkdirTemp("", "vpcgw-release-test-"); err != nil {
		return "", "", err
	}
	dir = filepath.Join(tempDir, "release")
	cmd := exec.Command(goBin, "-C", filepath.Join(repoRoot(), "hack", "tools", "release"), "run", ".",
		"--repo", repoRoot(), "--out", dir, "--helm", helm)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	return dir, "", nil
}

func git(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", repoRoot()}, args...)...).Output()
	if err != nil {
		t.Fatalf("git %v: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("the release lacks a piece: %v", err)
	}
	return b
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// readTar returns the regular files of a tar (gzipped when gz) by name, and every entry's name in
// order.
func readTar(r io.Reader, gz bool) (map[string][]byte, []string, error) {
	if gz {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, nil, err
		}
		r = zr
	}
	files := map[string][]byte{}
	var names []string
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, names, nil
		}
		if err != nil {
			return nil, nil, err
		}
		names = append(names, h.Name)
		if h.Typeflag == tar.TypeReg {
			if files[h.Name], err = io.ReadAll(tr); err != nil {
				return nil, nil, err
			}
		}
	}
}

func readArchive(t *testing.T, p string) (map[string][]byte, []string) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatalf("the release lacks a piece: %v", err)
	}
	defer func() { _ = f.Close() }() // read only
	files, names, err := readTar(bufio.NewReader(f), !strings.HasSuffix(p, ".oci.tar"))
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return files, names
}

// TestReleaseFiles: the release holds exactly its pieces, named by the version (a v-prefixed
// semver), and SHA256SUMS lists each other file once with its sha256, as `sha256sum -c` reads it.
//
// covers: O6
func TestReleaseFiles(t *testing.T) {
	r := load(t)
	if !semver.MatchString(r.version) {
		t.Errorf("images.json: the release's version (the vpcgw image's tag) %q is not a v-prefixed semantic version", r.version)
	}
	var got []string
	err := filepath.WalkDir(r.dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel, err := filepath.Rel(r.dir, path)
		got = append(got, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := r.expected()
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("%s: missing %s", r.dir, w)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			t.Errorf("%s: unexpected %s", r.dir, g)
		}
	}
	listed := map[string]string{}
	for i, line := range strings.Split(strings.TrimSuffix(string(readFile(t, r.path("SHA256SUMS"))), "\n"), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok || len(sum) != 64 {
			t.Errorf("SHA256SUMS line %d %q is not \"<sha256>  <file>\"", i+1, line)
			continue
		}
		if _, dup := listed[name]; dup {
			t.Errorf("SHA256SUMS lists %s twice", name)
		}
		listed[name] = sum
	}
	for _, g := range got {
		if g == "SHA256SUMS" || g == signatureFile {
			continue
		}
		sum, ok := listed[g]
		if !ok {
			t.Errorf("SHA256SUMS does not list %s", g)
		} else if s := sha256Hex(readFile(t, r.path(g))); s != sum {
			t.Errorf("SHA256SUMS: %s has sha256 %s, listed %s", g, s, sum)
		}
		delete(listed, g)
	}
	for name := range listed {
		t.Errorf("SHA256SUMS lists %s, which the release does not hold", name)
	}
}

// TestReleaseVersion: hack/tools/release makes a v-prefixed semantic version of any VERSION, so
// that krew, Helm and image tags take it: a tag as is, a later commit after the tag and before the
// next patch, an untagged repository's hash as v0.0.0-<hash>.
//
// covers: O6
func TestReleaseVersion(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		testutil.Skip(t, "the go command is not on PATH: cannot run hack/tools/release")
	}
	cases := []struct{ in, want string }{
		{"v0.3.0", "v0.3.0"},
		{"v0.3.0-rc.1", "v0.3.0-rc.1"},
		{"v0.3.0-4-gabcdef0", "v0.3.1-dev.4.gabcdef0"},
		{"v0.3.0-4-gabcdef0-dirty", "v0.3.1-dev.4.gabcdef0.dirty"},
		{"v0.3.0-rc.1-4-gabcdef0", "v0.3.0-rc.1.dev.4.gabcdef0"},
		{"v0.3.0-dirty", "v0.3.1-dev.0.dirty"},
		{"7dbcc4c", "v0.0.0-7dbcc4c"},
		{"7dbcc4c-dirty", "v0.0.0-7dbcc4c-dirty"},
		{"0123456", "v0.0.0-g0123456"},
		{"feature/x", "v0.0.0-feature-x"},
		{"dev", "v0.0.0-dev"},
		{"v1.2.3+build.5", "error: "},
	}
	args := []string{"-C", filepath.Join(repoRoot(), "hack", "tools", "release"), "run", ".", "version"}
	for _, c := range cases {
		args = append(args, c.in)
	}
	out, err := exec.Command(goBin, args...).Output()
	if err != nil {
		t.Fatalf("hack/tools/release version: %v", err)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(cases) {
		t.Fatalf("hack/tools/release version printed %q for %d versions", out, len(cases))
	}
	for i, c := range cases {
		if got := lines[i]; got != c.want && !(strings.HasSuffix(c.want, ": ") && strings.HasPrefix(got, c.want)) {
			t.Errorf("VERSION %s gives %q, want %q", c.in, got, c.want)
		}
		if !strings.HasPrefix(c.want, "error") && !semver.MatchString(c.want) {
			t.Errorf("the want %q is no semver", c.want)
		}
	}
}

// TestReleaseLicense: the repository's LICENSE is Apache-2.0; the release holds it, and so does
// every archive: the chart, both OCI archives (beside the layout, and in every platform's image),
// every krew archive.
//
// covers: O6
func TestReleaseLicense(t *testing.T) {
	license := readFile(t, filepath.Join(repoRoot(), "LICENSE"))
	for _, want := range []string{"Apache License", "Version 2.0, January 2004", "http://www.apache.org/licenses/", "END OF TERMS AND CONDITIONS"} {
		if !bytes.Contains(license, []byte(want)) {
			t.Errorf("LICENSE has no %q: not the Apache License 2.0", want)
		}
	}
	r := load(t)
	if !bytes.Equal(readFile(t, r.path("LICENSE")), license) {
		t.Errorf("the release's LICENSE is not the repository's")
	}
	var archives []string
	for _, f := range r.expected() {
		if strings.HasSuffix(f, ".tgz") || strings.HasSuffix(f, ".tar.gz") || strings.HasSuffix(f, ".tar") {
			archives = append(archives, f)
		}
	}
	for _, a := range archives {
		files, _ := readArchive(t, r.path(a))
		name := "LICENSE"
		if strings.HasSuffix(a, ".tgz") {
			name = "vpcgw/LICENSE" // a chart archive holds the chart's directory
		}
		if got, ok := files[name]; !ok {
			t.Errorf("%s has no %s", a, name)
		} else if !bytes.Equal(got, license) {
			t.Errorf("%s: %s is not the repository's LICENSE", a, name)
		}
		if strings.HasSuffix(a, ".oci.tar") {
			for p, img := range readOCI(t, r, a).platforms {
				if got, ok := img.files["usr/share/doc/vpcgw/LICENSE"]; !ok || !bytes.Equal(got, license) {
					t.Errorf("%s %s: /usr/share/doc/vpcgw/LICENSE is missing or not the repository's LICENSE", a, p)
				}
			}
		}
	}
}

// TestReleaseChart: the packaged chart's version is the release's version without the v, its
// appVersion the version, its values pin the vpcgw image's digest (the OCI archive's index); it
// renders the controller and the webhook with that image, by the version's tag when the digest is
// unset; the plain manifests and install.sh install the same image.
//
// covers: O6, O5
func TestReleaseChart(t *testing.T) {
	r := load(t)
	chartFile := "vpcgw-" + strings.TrimPrefix(r.version, "v") + ".tgz"
	files, _ := readArchive(t, r.path(chartFile))
	var chart struct {
		Name       string `json:"name"`
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(files["vpcgw/Chart.yaml"], &chart); err != nil || chart.Name != "vpcgw" {
		t.Fatalf("%s: vpcgw/Chart.yaml: %v (%+v)", chartFile, err, chart)
	}
	if chart.Version != strings.TrimPrefix(r.version, "v") || chart.AppVersion != r.version {
		t.Errorf("%s: version %q, appVersion %q; want %q and %q (the release's version)", chartFile, chart.Version, chart.AppVersion, strings.TrimPrefix(r.version, "v"), r.version)
	}
	var values struct {
		Image struct{ Repository, Tag, Digest string } `json:"image"`
	}
	if err := yaml.Unmarshal(files["vpcgw/values.yaml"], &values); err != nil {
		t.Fatalf("%s: vpcgw/values.yaml: %v", chartFile, err)
	}
	digest := r.images["vpcgw"].Digest
	if values.Image.Digest != digest || !digestRe.MatchString(digest) {
		t.Errorf("%s: image.digest %q, want the vpcgw image's %q (images.json)", chartFile, values.Image.Digest, digest)
	}
	if oci := readOCI(t, r, "vpcgw-"+r.version+".oci.tar"); oci.digest != digest {
		t.Errorf("images.json's vpcgw digest %s is not the OCI archive's image index %s", digest, oci.digest)
	}
	if !bytes.Contains(files["vpcgw/values.yaml"], []byte("# sha256:<64 hex>: pins the image by digest")) {
		t.Errorf("%s: values.yaml lost the chart's comments", chartFile)
	}
	pinned := "ghcr.io/vpcgw/vpcgw@" + digest
	// The plain manifests: rendered from the packaged chart.
	if got := deploymentImages(t, readFile(t, r.path("vpcgw.yaml"))); len(got) != 2 || got[0] != pinned || got[1] != pinned {
		t.Errorf("vpcgw.yaml: the Deployments' images %v, want %s twice", got, pinned)
	}

	helm := os.Getenv(HelmEnv)
	if helm == "" || !exists(helm) {
		testutil.Skip(t, HelmEnv+" names no helm: cannot render the packaged chart (make helm)")
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, pinned},
		{[]string{"--set", "image.digest="}, "ghcr.io/vpcgw/vpcgw:" + r.version},
		{[]string{"--set", "image.repository=registry.example/vpcgw"}, "registry.example/vpcgw@" + digest},
	} {
		out, err := exec.Command(helm, append([]string{"template", "vpcgw", r.path(chartFile), "--namespace", "kube-system"}, tc.args...)...).Output()
		if err != nil {
			t.Fatalf("helm template %s %v: %v", chartFile, tc.args, err)
		}
		if got := deploymentImages(t, out); len(got) != 2 || got[0] != tc.want || got[1] != tc.want {
			t.Errorf("helm template %s %v: images %v, want %s twice", chartFile, tc.args, got, tc.want)
		}
	}
	// install.sh in the release installs the chart beside it, keeping its pinned image.
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{nil, pinned},
		{[]string{"IMAGE_REPOSITORY=registry.example/vpcgw"}, "registry.example/vpcgw@" + digest},
		{[]string{"IMAGES_JSON=" + r.path("images.json"), "IMAGE_REPOSITORY=registry.example/vpcgw"}, "registry.example/vpcgw:" + r.version + "@" + digest},
	} {
		cmd := exec.Command("bash", r.path("install.sh"), "--dry-run")
		cmd.Env = append(os.Environ(), append([]string{"HELM=" + helm}, tc.env...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("the release's install.sh --dry-run %v: %v\n%s", tc.env, err, stderr.Bytes())
		}
		if got := deploymentImages(t, out); len(got) != 2 || got[0] != tc.want || got[1] != tc.want {
			t.Errorf("the release's install.sh --dry-run %v: images %v, want %s twice", tc.env, got, tc.want)
		}
	}
}

// deploymentImages returns the images of the Deployments in a multi-document YAML, in order.
func deploymentImages(t *testing.T, manifests []byte) []string {
	t.Helper()
	var out []string
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(manifests), -1) {
		var o struct {
			Kind string `json:"kind"`
			Spec struct {
				Template struct {
					Spec struct {
						Containers []struct{ Image string } `json:"containers"`
					} `json:"spec"`
				} `json:"template"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("decoding manifests: %v", err)
		}
		if o.Kind == "Deployment" {
			for _, c := range o.Spec.Template.Spec.Containers {
				out = append(out, c.Image)
			}
		}
	}
	return out
}

// krewPlugin is krew's Plugin manifest (krew.googlecontainertools.github.com/v1alpha2).
type krewPlugin = testutil.KrewPlugin

// TestReleaseKrew: the krew manifest's version is the release's, a v-prefixed semver (krew
// rejects anything else); each of the four platforms points at its archive in the release's
// download directory with the archive's sha256; each archive holds exactly the files the manifest
// installs; this machine's plugin prints the version.
//
// covers: O6, O2
func TestReleaseKrew(t *testing.T) {
	r := load(t)
	var m krewPlugin
	if err := yaml.Unmarshal(readFile(t, r.path(krewManifest)), &m); err != nil {
		t.Fatalf("%s: %v", krewManifest, err)
	}
	// krew's own rules, as validate-krew-manifest checks them (its name rule among them).
	if _, err := testutil.ValidateKrewManifest(r.path(krewManifest), readFile(t, r.path(krewManifest))); err != nil {
		t.Errorf("the release's krew manifest: %v", err)
	}
	if m.Metadata.Name != "vpcgw" || m.Spec.Version != r.version || !semver.MatchString(m.Spec.Version) {
		t.Errorf(krewManifest+": plugin %q version %q; want vpcgw, the release's version %q (a v-prefixed semver)", m.Metadata.Name, m.Spec.Version, r.version)
	}
	var got []string
	for _, p := range m.Spec.Platforms {
		osArch := p.Selector.MatchLabels["os"] + "/" + p.Selector.MatchLabels["arch"]
		got = append(got, osArch)
		archive := "kubectl-vpcgw_" + strings.ReplaceAll(osArch, "/", "_") + ".tar.gz"
		if !strings.HasSuffix(p.URI, "/"+r.version+"/"+archive) {
			t.Errorf("%s: uri %s is not the release's %s/%s", osArch, p.URI, r.version, archive)
		}
		data := readFile(t, r.path(archive))
		if s := sha256Hex(data); p.SHA256 != s {
			t.Errorf("%s: sha256 %s, the archive %s has %s", osArch, p.SHA256, archive, s)
		}
		files, names := readArchive(t, r.path(archive))
		var from []string
		for _, f := range p.Files {
			from = append(from, f.From)
		}
		slices.Sort(from)
		if !slices.Equal(names, from) || p.Bin != "kubectl-vpcgw" || !slices.Contains(names, "LICENSE") {
			t.Errorf("%s: the archive holds %v, the manifest installs %v (bin %s); want the same, with the LICENSE", osArch, names, from, p.Bin)
		}
		if osArch == runtime.GOOS+"/"+runtime.GOARCH {
			exe := filepath.Join(t.TempDir(), "kubectl-vpcgw")
			if err := os.WriteFile(exe, files["kubectl-vpcgw"], 0o755); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(exe, "version", "--client").Output()
			if want := "kubectl-vpcgw: " + r.version; err != nil || strings.TrimSpace(string(out)) != want {
				t.Errorf("%s version --client: %q, %v; want %q", archive, out, err, want)
			}
		}
	}
	if !slices.Equal(got, krewPlatforms) {
		t.Errorf(krewManifest+" platforms %v, want %v", got, krewPlatforms)
	}
}

// oci is an OCI archive as read.
type oci struct {
	annotations map[string]string // the image index's
	refName     string            // index.json's org.opencontainers.image.ref.name
	digest      string            // the image index's
	platforms   map[string]*ociImage
}

type ociImage struct {
	annotations map[string]string // the manifest's
	labels      map[string]string // the config's
	created     string            // the config's
	files       map[string][]byte // the merged file system
}

type descriptor struct {
	MediaType   string `json:"mediaType"`
	Digest      string `json:"digest"`
	Platform    *struct{ OS, Architecture string }
	Annotations map[string]string `json:"annotations"`
}

var ociCache sync.Map // archive path → *oci

// readOCI reads an OCI archive: index.json, the image index, each platform's manifest, config and
// layers (every blob checked against its digest).
func readOCI(t *testing.T, r *rel, name string) *oci {
	t.Helper()
	if o, ok := ociCache.Load(r.path(name)); ok {
		return o.(*oci)
	}
	files, _ := readArchive(t, r.path(name))
	blob := func(d string) []byte {
		b, ok := files["blobs/sha256/"+strings.TrimPrefix(d, "sha256:")]
		if !ok {
			t.Fatalf("%s: blob %s missing", name, d)
		}
		if "sha256:"+sha256Hex(b) != d {
			t.Fatalf("%s: blob %s does not match its digest", name, d)
		}
		return b
	}
	var top struct{ Manifests []descriptor }
	if err := json.Unmarshal(files["index.json"], &top); err != nil || len(top.Manifests) != 1 {
		t.Fatalf("%s: index.json: %v, %d manifests; want the image index alone", name, err, len(top.Manifests))
	}
	var lay struct {
		Version string `json:"imageLayoutVersion"`
	}
	if err := json.Unmarshal(files["oci-layout"], &lay); err != nil || lay.Version != "1.0.0" {
		t.Errorf("%s: oci-layout %q", name, files["oci-layout"])
	}
	o := &oci{refName: top.Manifests[0].Annotations["org.opencontainers.image.ref.name"], digest: top.Manifests[0].Digest, platforms: map[string]*ociImage{}}
	var idx struct {
		Manifests   []descriptor
		Annotations map[string]string
	}
	if err := json.Unmarshal(blob(o.digest), &idx); err != nil {
		t.Fatalf("%s: image index: %v", name, err)
	}
	o.annotations = idx.Annotations
	for _, d := range idx.Manifests {
		if d.Platform == nil {
			t.Fatalf("%s: manifest %s has no platform", name, d.Digest)
		}
		var m struct {
			Config      descriptor
			Layers      []descriptor
			Annotations map[string]string
		}
		if err := json.Unmarshal(blob(d.Digest), &m); err != nil {
			t.Fatalf("%s: manifest %s: %v", name, d.Digest, err)
		}
		var cf struct {
			Created string
			Config  struct{ Labels map[string]string }
		}
		if err := json.Unmarshal(blob(m.Config.Digest), &cf); err != nil {
			t.Fatalf("%s: config %s: %v", name, m.Config.Digest, err)
		}
		img := &ociImage{annotations: m.Annotations, labels: cf.Config.Labels, created: cf.Created, files: map[string][]byte{}}
		for _, l := range m.Layers {
			fs, _, err := readTar(bytes.NewReader(blob(l.Digest)), true)
			if err != nil {
				t.Fatalf("%s: layer %s: %v", name, l.Digest, err)
			}
			maps.Copy(img.files, fs)
		}
		o.platforms[d.Platform.OS+"/"+d.Platform.Architecture] = img
	}
	if got := slices.Sorted(maps.Keys(o.platforms)); !slices.Equal(got, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("%s: platforms %v, want linux/amd64 and linux/arm64", name, got)
	}
	ociCache.Store(r.path(name), o)
	return o
}

// TestReleaseImageLabels: each OCI archive is tagged with the release's version; its image index,
// every manifest (annotations) and every config (labels) carry the same full set of
// org.opencontainers.image.* keys: the version, the revision HEAD (the commit the release is made
// from), the created time of the config, licenses Apache-2.0, the source repository.
//
// covers: O6, O5
func TestReleaseImageLabels(t *testing.T) {
	r := load(t)
	head := git(t, "rev-parse", "HEAD")
	for _, name := range imageNames {
		archive := name + "-" + r.version + ".oci.tar"
		o := readOCI(t, r, archive)
		if o.refName != r.version {
			t.Errorf("%s: tagged %q, want %q", archive, o.refName, r.version)
		}
		if s := r.images[name]; s.Digest != o.digest {
			t.Errorf("images.json: %s digest %s, the archive's index %s", name, s.Digest, o.digest)
		}
		sets := map[string]map[string]string{"image index": o.annotations}
		for p, img := range o.platforms {
			sets[p+" manifest"] = img.annotations
			sets[p+" config labels"] = img.labels
			if c := img.labels["org.opencontainers.image.created"]; c != img.created {
				t.Errorf("%s %s: created label %q, the config's created %q", archive, p, c, img.created)
			}
		}
		for what, a := range sets {
			for _, k := range ociKeys {
				if a["org.opencontainers.image."+k] == "" {
					t.Errorf("%s %s: no org.opencontainers.image.%s", archive, what, k)
				}
			}
			for k, want := range map[string]string{"version": r.version, "revision": head, "licenses": "Apache-2.0",
				"source": "https://github.com/vpcgw/vpcgw", "created": o.annotations["org.opencontainers.image.created"]} {
				if got := a["org.opencontainers.image."+k]; got != want {
					msg := ""
					if k == "revision" {
						msg = " (HEAD; a release made from an earlier commit is stale: run `make release`)"
					}
					t.Errorf("%s %s: org.opencontainers.image.%s %q, want %q%s", archive, what, k, got, want, msg)
				}
			}
			if _, err := time.Parse(time.RFC3339, a["org.opencontainers.image.created"]); err != nil {
				t.Errorf("%s %s: created: %v", archive, what, err)
			}
		}
	}
}

// spdx is the part of an SPDX 2.3 document checked here.
type spdx struct {
	SPDXVersion       string `json:"spdxVersion"`
	DataLicense       string `json:"dataLicense"`
	SPDXID            string `json:"SPDXID"`
	DocumentNamespace string `json:"documentNamespace"`
	CreationInfo      struct {
		Created  string   `json:"created"`
		Creators []string `json:"creators"`
	} `json:"creationInfo"`
	Packages []struct {
		Name        string `json:"name"`
		SPDXID      string `json:"SPDXID"`
		VersionInfo string `json:"versionInfo"`
		Checksums   []struct {
			Algorithm     string `json:"algorithm"`
			ChecksumValue string `json:"checksumValue"`
		} `json:"checksums"`
		LicenseDeclared string `json:"licenseDeclared"`
		ExternalRefs    []struct {
			ReferenceType    string `json:"referenceType"`
			ReferenceLocator string `json:"referenceLocator"`
		} `json:"externalRefs"`
	} `json:"packages"`
	Relationships []struct {
		Element string `json:"spdxElementId"`
		Type    string `json:"relationshipType"`
		Related string `json:"relatedSpdxElement"`
	} `json:"relationships"`
}

// goSum returns go.sum's h1: hash of a module version of the repository.
func goSum(t *testing.T, path, version string) string {
	t.Helper()
	for line := range strings.Lines(string(readFile(t, filepath.Join(repoRoot(), "go.sum")))) {
		if f := strings.Fields(line); len(f) == 3 && f[0] == path && f[1] == version {
			return f[2]
		}
	}
	t.Fatalf("go.sum has no %s %s", path, version)
	return ""
}

// TestReleaseSBOM: each image's SBOM, next to its archive, is the one in every platform's image
// (/usr/share/doc/vpcgw/<image>.spdx.json); it is SPDX 2.3 JSON describing the image; it lists
// every binary of every platform with its sha256, and every module each binary's Go build
// information names (what `go version -m` prints) with that version and checksum, which the
// binary DEPENDS_ON; for the vpcgw image k8s.io/client-go at go.mod's version with go.sum's hash.
//
// covers: O6, O5
func TestReleaseSBOM(t *testing.T) {
	r := load(t)
	goMod := string(readFile(t, filepath.Join(repoRoot(), "go.mod")))
	cg := regexp.MustCompile(`(?m)^\s*k8s\.io/client-go (v\S+)`).FindStringSubmatch(goMod)
	if cg == nil {
		t.Fatal("go.mod requires no k8s.io/client-go")
	}
	for _, name := range imageNames {
		sbomFile := name + "-" + r.version + ".spdx.json"
		data := readFile(t, r.path(sbomFile))
		if s := r.images[name].SBOM; s != sbomFile {
			t.Errorf("images.json: %s's sbom %q, want %q", name, s, sbomFile)
		}
		var doc spdx
		if err := json.Unmarshal(data, &doc); err != nil {
			t.Fatalf("%s: %v", sbomFile, err)
		}
		if doc.SPDXVersion != "SPDX-2.3" || doc.DataLicense != "CC0-1.0" || doc.SPDXID != "SPDXRef-DOCUMENT" || doc.DocumentNamespace == "" || len(doc.CreationInfo.Creators) == 0 {
			t.Errorf("%s: %s, data license %s, id %s, namespace %q, creators %v: not an SPDX 2.3 document", sbomFile, doc.SPDXVersion, doc.DataLicense, doc.SPDXID, doc.DocumentNamespace, doc.CreationInfo.Creators)
		}
		type pkg struct{ name, id, version, sha256, license string }
		pkgs := map[string][]pkg{} // name → packages
		byID := map[string]pkg{}
		for _, p := range doc.Packages {
			var sum string
			for _, c := range p.Checksums {
				if c.Algorithm == "SHA256" {
					sum = c.ChecksumValue
				}
			}
			pk := pkg{p.Name, p.SPDXID, p.VersionInfo, sum, p.LicenseDeclared}
			pkgs[p.Name] = append(pkgs[p.Name], pk)
			byID[p.SPDXID] = pk
		}
		rel := map[string]bool{}
		var described []pkg
		for _, x := range doc.Relationships {
			rel[x.Element+" "+x.Type+" "+x.Related] = true
			if x.Element == "SPDXRef-DOCUMENT" && x.Type == "DESCRIBES" {
				described = append(described, byID[x.Related])
			}
		}
		if len(described) != 1 || described[0].name != name || described[0].version != r.version || described[0].license != "Apache-2.0" {
			t.Fatalf("%s: the document DESCRIBES %+v; want the image alone, %s %s, Apache-2.0", sbomFile, described, name, r.version)
		}
		img := described
		// find returns the SPDX id of the package name@version with the sha256, or "".
		find := func(name, version, sum string) string {
			for _, p := range pkgs[name] {
				if p.version == version && p.sha256 == sum {
					return p.id
				}
			}
			return ""
		}
		o := readOCI(t, r, name+"-"+r.version+".oci.tar")
		binaries := 0
		for p, pi := range o.platforms {
			if got := pi.files["usr/share/doc/vpcgw/"+name+".spdx.json"]; !bytes.Equal(got, data) {
				t.Errorf("%s %s: /usr/share/doc/vpcgw/%s.spdx.json is not %s", name, p, name, sbomFile)
			}
			for f, b := range pi.files {
				if !strings.HasPrefix(f, "usr/bin/") && !strings.HasPrefix(f, "usr/lib/vpcgw/agents/") {
					continue
				}
				binaries++
				bi, err := buildinfo.Read(bytes.NewReader(b))
				if err != nil {
					t.Errorf("%s %s /%s: %v", name, p, f, err)
					continue
				}
				cmd := strings.TrimPrefix(bi.Path, "github.com/vpcgw/vpcgw/cmd/")
				id := find(cmd, r.version, sha256Hex(b))
				if id == "" || !rel[img[0].id+" CONTAINS "+id] {
					t.Errorf("%s: no package %s %s with the sha256 of %s /%s that the image CONTAINS", sbomFile, cmd, r.version, p, f)
					continue
				}
				deps := append([]*debugModule{{"stdlib", bi.GoVersion, ""}}, modules(bi)...)
				for _, d := range deps {
					want := ""
					if d.sum != "" {
						raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(d.sum, "h1:"))
						if err != nil {
							t.Fatalf("%s: %v", d.sum, err)
						}
						want = hex.EncodeToString(raw)
					}
					mid := find(d.path, d.version, want)
					if mid == "" {
						t.Errorf("%s: %s /%s links %s %s (%s), which the SBOM does not list with that version and checksum", sbomFile, p, f, d.path, d.version, d.sum)
					} else if !rel[id+" DEPENDS_ON "+mid] {
						t.Errorf("%s: %s does not DEPEND_ON %s", sbomFile, id, mid)
					}
				}
			}
		}
		if binaries == 0 {
			t.Errorf("%s: no binary found in the images", name)
		}
		if name == "vpcgw" {
			sum, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(goSum(t, "k8s.io/client-go", cg[1]), "h1:"))
			if find("k8s.io/client-go", cg[1], hex.EncodeToString(sum)) == "" {
				t.Errorf("%s lists no k8s.io/client-go %s with go.sum's checksum", sbomFile, cg[1])
			}
		}
	}
}

type debugModule struct{ path, version, sum string }

func modules(bi *buildinfo.BuildInfo) []*debugModule {
	var out []*debugModule
	for _, d := range bi.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		out = append(out, &debugModule{d.Path, d.Version, d.Sum})
	}
	return out
}

// TestReleaseNotes: the notes name the version and the commit, and say what the release brings
// in the words of CHANGELOG.md's section for it (Unreleased between releases), not as commit
// subjects.
//
// covers: O6
func TestReleaseNotes(t *testing.T) {
	r := load(t)
	notes := string(readFile(t, r.path("RELEASE-NOTES.md")))
	head := git(t, "rev-parse", "HEAD")
	section := changelogSection(t, string(readFile(t, filepath.Join(repoRoot(), "CHANGELOG.md"))), r.version)
	for what, want := range map[string]string{"title": "# vpcgw " + r.version + "\n", "commit": head, "CHANGELOG.md's section": section} {
		if !strings.Contains(notes, want) {
			t.Errorf("RELEASE-NOTES.md has no %s %q (a release made before the last commit is stale: run `make release`)", what, want)
		}
	}
	if n := strings.Count(notes, "\n- "); n > 40 {
		t.Errorf("RELEASE-NOTES.md lists %d items: an operator reads the CHANGELOG's section, not every commit", n)
	}
}

// changelogSection is the body of "## <version>", else of "## Unreleased".
func changelogSection(t *testing.T, changelog, version string) string {
	t.Helper()
	for _, title := range []string{version, "Unreleased"} {
		_, rest, ok := strings.Cut(changelog, "\n## "+title+"\n")
		if !ok {
			continue
		}
		body, _, _ := strings.Cut(rest, "\n## ")
		if body = strings.TrimSpace(body); body != "" {
			return body
		}
	}
	t.Fatalf("CHANGELOG.md has no section for %s nor Unreleased", version)
	return ""
}
