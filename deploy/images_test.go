package deploy

// covers: O5, O4 (the chart and the install script use the images `make images` builds: by tag,
// pinned by digest, run as the images' user, with the agent builds they carry)

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/vpcgw/vpcgw/internal/testutil"
	"github.com/vpcgw/vpcgw/internal/transport"
)

// testDigest is a well-formed digest (no image has it).
var testDigest = "sha256:" + strings.Repeat("0123456789abcdef", 4)

// chartAppVersion is Chart.yaml's appVersion.
func chartAppVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	// One version: the release tag (make release TAG=) requires it, and the source chart then
	// renders the image that tag builds.
	if c.AppVersion != "v"+c.Version {
		t.Errorf("Chart.yaml: version %q and appVersion %q; want appVersion v<version>, the release tag", c.Version, c.AppVersion)
	}
	return c.AppVersion
}

// images returns the image of every container of the controller and webhook Deployments.
func images(t *testing.T, m manifest) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, d := range []struct{ deployment, container string }{{"vpcgw-controller", "controller"}, {"vpcgw-webhook", "webhook"}} {
		dep := m.must(t, "Deployment", m.installNS(), d.deployment)
		out[d.container], _ = container(t, dep, d.container)["image"].(string)
		cs, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
		ics, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "initContainers")
		if len(cs) != 1 || len(ics) != 0 {
			t.Errorf("%s: %d containers and %d init containers, want the one (whose image is checked)", d.deployment, len(cs), len(ics))
		}
	}
	return out
}

func wantImages(t *testing.T, m manifest, want string) {
	t.Helper()
	for c, got := range images(t, m) {
		if got != want {
			t.Errorf("%s image = %q, want %q", c, got, want)
		}
	}
}

// covers: O5
// TestChartImage: the controller and the webhook run the vpcgw image, by the chart's appVersion
// as tag by default, and by digest when image.digest pins it.
func TestChartImage(t *testing.T) {
	helmBin(t)
	app := chartAppVersion(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "ghcr.io/vpcgw/vpcgw:" + app},
		{[]string{"--set", "image.repository=registry.local:5000/vpcgw", "--set-string", "image.tag=1.2"}, "registry.local:5000/vpcgw:1.2"},
		// Pinned: the digest alone, or tag and digest (the runtime pulls by the digest).
		{[]string{"--set", "image.digest=" + testDigest}, "ghcr.io/vpcgw/vpcgw@" + testDigest},
		{[]string{"--set", "image.digest=" + testDigest, "--set", "image.tag=v0.3.0-4-gabcdef0-dirty", "--set", "image.repository=registry.local/team/vpcgw"},
			"registry.local/team/vpcgw:v0.3.0-4-gabcdef0-dirty@" + testDigest},
	} {
		wantImages(t, manifest(render(t, tc.args...)), tc.want)
	}
	// The shipped manifests: by the chart's default tag.
	b, err := os.ReadFile("manifests/vpcgw.yaml")
	if err != nil {
		t.Fatal(err)
	}
	wantImages(t, manifest(decode(t, b)), "ghcr.io/vpcgw/vpcgw:"+app)

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "image.digest=latest"}, "image.digest must be sha256:<64 hex digits>"},
		{[]string{"--set", "image.digest=sha256:ABC"}, "image.digest must be sha256:<64 hex digits>"},
		{[]string{"--set", "image.repository=ghcr.io/vpcgw/vpcgw:v1"}, "image.repository must be an image repository"},
		{[]string{"--set", "image.repository=ghcr.io/vpcgw/vpcgw@" + testDigest}, "image.repository must be an image repository"},
		{[]string{"--set-string", "image.tag=v1 --privileged"}, "image.tag must be an image tag"},
		{[]string{"--set", "agentBinaries=relative/dir"}, "agentBinaries must be an absolute directory"},
	} {
		if _, err := renderErr(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("helm template %v: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}

// covers: O5
// TestChartRunsAsTheImagesUser: both containers run as the user the vpcgw image declares
// (65532:65532, not root), read-only, without privilege escalation or capabilities.
func TestChartRunsAsTheImagesUser(t *testing.T) {
	helmBin(t)
	m := manifest(render(t))
	for _, d := range []struct{ deployment, container string }{{"vpcgw-controller", "controller"}, {"vpcgw-webhook", "webhook"}} {
		dep := m.must(t, "Deployment", m.installNS(), d.deployment)
		pod, _, _ := unstructured.NestedMap(dep.Object, "spec", "template", "spec", "securityContext")
		c := container(t, dep, d.container)
		sc, _, _ := unstructured.NestedMap(c, "securityContext")
		// A container's own setting wins over the pod's.
		get := func(k string) any {
			if v, ok := sc[k]; ok {
				return v
			}
			return pod[k]
		}
		for k, want := range map[string]any{"runAsNonRoot": true, "runAsUser": int64(65532), "runAsGroup": int64(65532),
			"readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false} {
			if got := get(k); got != want {
				t.Errorf("%s: securityContext %s = %v (%T), want %v", d.deployment, k, got, got, want)
			}
		}
		if drop, _, _ := unstructured.NestedStringSlice(sc, "capabilities", "drop"); len(drop) != 1 || drop[0] != "ALL" {
			t.Errorf("%s: capabilities.drop = %v, want [ALL]", d.deployment, drop)
		}
		if add, ok, _ := unstructured.NestedSlice(sc, "capabilities", "add"); ok && len(add) > 0 {
			t.Errorf("%s: capabilities.add = %v, want none", d.deployment, add)
		}
		if p, _ := sc["privileged"].(bool); p {
			t.Errorf("%s runs privileged", d.deployment)
		}
	}
}

// covers: O5
// TestChartDeliversTheImagesAgents: with the exec transport the controller copies the agent
// builds of its own image (transport.AgentBinariesDir, where hack/tools/images puts them) into the
// gateway containers; agentBinaries="" turns that off, and the local transport has no copy.
func TestChartDeliversTheImagesAgents(t *testing.T) {
	helmBin(t)
	controllerArgs := func(m manifest) []string {
		return args(t, container(t, m.must(t, "Deployment", m.installNS(), "vpcgw-controller"), "controller"))
	}
	wantFlags(t, controllerArgs(manifest(render(t))), map[string]string{"transport": "exec", "agent-binaries": transport.AgentBinariesDir})
	wantFlags(t, controllerArgs(manifest(render(t, "--set", "agentBinaries="))), map[string]string{"agent-binaries": ""})
	wantFlags(t, controllerArgs(manifest(render(t, "--set", "transport=local"))), map[string]string{"agent-binaries": "<absent>"})
	// The controller's flag exists (cmd/vpcgw) with that default.
	src, err := os.ReadFile("../cmd/vpcgw/commands.go")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`fs\.String(Var)?\((&[\w.]+,\s*)?"agent-binaries",\s*transport\.AgentBinariesDir`).Match(src) {
		t.Errorf("cmd/vpcgw/commands.go defines no --agent-binaries flag defaulting to transport.AgentBinariesDir, which the chart passes")
	}
}

// covers: O5
// TestChartDefaultTagIsTheReleaseImage: the chart's default image tag is its appVersion, the git
// tag of the release (v<major>.<minor>.<patch>[-pre]); `make images` tags the images with VERSION,
// which is `git describe` (so that tag on the release commit) with '+' and '/' made '-'.
func TestChartDefaultTagIsTheReleaseImage(t *testing.T) {
	helmBin(t)
	app := chartAppVersion(t)
	if !regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`).MatchString(app) {
		t.Errorf("Chart.yaml appVersion %q is not a release tag like v0.1.0 (what git describe gives the release commit)", app)
	}
	wantImages(t, manifest(render(t)), "ghcr.io/vpcgw/vpcgw:"+app)
	mk, err := exec.LookPath("make")
	if err != nil {
		testutil.Skip(t, "make is not installed: cannot check the tag `make images` gives (apt-get install -y make)")
	}
	for version, tag := range map[string]string{app: app, "v1.2.3+build.5": "v1.2.3-build.5", "feature/x-3-gabc": "feature-x-3-gabc"} {
		cmd := exec.Command(mk, "--no-print-directory", "-n", "images", "VERSION="+version)
		cmd.Dir = ".."
		// Not the environment of a make that runs this test (its jobserver, its variables).
		for _, kv := range os.Environ() {
			if k, _, _ := strings.Cut(kv, "="); k != "MAKEFLAGS" && k != "MFLAGS" && k != "MAKELEVEL" && k != "MAKEOVERRIDES" {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make -n images: %v\n%s", err, out)
		}
		m := regexp.MustCompile(`hack/tools/images run .* --version "?([^" ]+)"?`).FindSubmatch(out)
		if m == nil {
			t.Fatalf("make -n images VERSION=%s runs no hack/tools/images with --version:\n%s", version, out)
		}
		if string(m[1]) != tag {
			t.Errorf("make images VERSION=%s tags %q, want %q", version, m[1], tag)
		}
	}
}

// covers: O5
// TestInstallScriptImage: IMAGE_DIGEST pins the image, IMAGE gives all of it at once, IMAGES_JSON
// takes tag and digest from what `make images` wrote; malformed values stop the script.
func TestInstallScriptImage(t *testing.T) {
	app := chartAppVersion(t)
	imagesJSON := filepath.Join(t.TempDir(), "images.json")
	// As hack/tools/images writes it.
	if err := os.WriteFile(imagesJSON, []byte(`{
  "vpcgw": {
    "tag": "v0.3.0-2-gabcdef0",
    "digest": "`+testDigest+`",
    "platforms": {
      "linux/amd64": "sha256:`+strings.Repeat("1", 64)+`",
      "linux/arm64": "sha256:`+strings.Repeat("2", 64)+`"
    }
  },
  "vpcgw-agent": {
    "tag": "v0.3.0-2-gabcdef0",
    "digest": "sha256:`+strings.Repeat("3", 64)+`",
    "platforms": {}
  }
}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{nil, "ghcr.io/vpcgw/vpcgw:" + app},
		{map[string]string{"IMAGE_DIGEST": testDigest}, "ghcr.io/vpcgw/vpcgw@" + testDigest},
		{map[string]string{"IMAGE_REPOSITORY": "registry.local:5000/vpcgw", "IMAGE_TAG": "v0.3.0", "IMAGE_DIGEST": testDigest}, "registry.local:5000/vpcgw:v0.3.0@" + testDigest},
		{map[string]string{"IMAGE": "registry.local:5000/team/vpcgw:v0.3.0@" + testDigest}, "registry.local:5000/team/vpcgw:v0.3.0@" + testDigest},
		{map[string]string{"IMAGE": "registry.local:5000/vpcgw@" + testDigest}, "registry.local:5000/vpcgw@" + testDigest},
		{map[string]string{"IMAGE": "registry.local:5000/vpcgw"}, "registry.local:5000/vpcgw:" + app},
		{map[string]string{"IMAGE": "vpcgw:dev"}, "vpcgw:dev"},
		{map[string]string{"IMAGE_REPOSITORY": "registry.local/vpcgw", "IMAGES_JSON": imagesJSON}, "registry.local/vpcgw:v0.3.0-2-gabcdef0@" + testDigest},
	} {
		out, stderr, err := installScript(t, tc.env, "--dry-run")
		if err != nil {
			t.Errorf("install.sh %v: %v\n%s", tc.env, err, stderr)
			continue
		}
		m := manifest(decode(t, []byte(out)))
		wantImages(t, m, tc.want)
		checkCommon(t, m)
	}

	marker := filepath.Join(t.TempDir(), "pwned")
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"IMAGE_DIGEST": "sha256:abc"}, "IMAGE_DIGEST"},
		{map[string]string{"IMAGE_DIGEST": testDigest + "\"\n  pwned: \"1"}, "IMAGE_DIGEST"},
		{map[string]string{"IMAGE": "registry.local/vpcgw:v1$(touch " + marker + ")"}, "is not valid"},
		{map[string]string{"IMAGE": "registry.local/vpcgw@sha256:nothex"}, "IMAGE_DIGEST"},
		{map[string]string{"IMAGE": ":v1"}, "has no repository"},
		{map[string]string{"IMAGE": "registry.local/vpcgw", "IMAGE_TAG": "v1"}, "IMAGE names the whole image"},
		{map[string]string{"IMAGES_JSON": imagesJSON, "IMAGE_DIGEST": testDigest}, "IMAGES_JSON gives the tag and the digest"},
		{map[string]string{"IMAGES_JSON": filepath.Join(t.TempDir(), "none.json")}, "no such file"},
		{map[string]string{"IMAGES_JSON": marker + "-empty"}, "no such file"},
	} {
		out, stderr, err := installScript(t, tc.env, "--dry-run")
		if err == nil || !strings.Contains(stderr, tc.want) || out != "" {
			t.Errorf("install.sh %v: err %v, stdout %d bytes, stderr %q; want a failure naming %q and no output", tc.env, err, len(out), stderr, tc.want)
		}
	}
	empty := filepath.Join(t.TempDir(), "images.json")
	if err := os.WriteFile(empty, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, stderr, err := installScript(t, map[string]string{"IMAGES_JSON": empty}, "--dry-run"); err == nil || !strings.Contains(stderr, "has no vpcgw image") {
		t.Errorf("install.sh with an images.json without vpcgw: %v %s", err, stderr)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a value was executed")
	}
}
