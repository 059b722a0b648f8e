// covers: O6 (make release TAG= cuts the release tag only on a clean commit whose source chart
// carries that version, and builds the images and the release of it)

package release

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/vpcgw/vpcgw/internal/testutil"
)

// gitRepo makes a repository with one commit holding the source chart's Chart.yaml at version.
func gitRepo(t *testing.T, version string) string {
	t.Helper()
	dir := t.TempDir()
	for _, args := range [][]string{{"init", "-q"}, {"config", "user.email", "test@vpcgw.invalid"}, {"config", "user.name", "test"}} {
		gitIn(t, dir, args...)
	}
	writeChart(t, dir, version)
	changelog := "# Changelog\n\n## Unreleased\n\n- next\n\n## " + version + "\n\n- what it brings\n"
	if err := os.WriteFile(filepath.Join(dir, "CHANGELOG.md"), []byte(changelog), 0o644); err != nil {
		t.Fatal(err)
	}
	gitIn(t, dir, "add", "-A")
	gitIn(t, dir, "commit", "-q", "-m", "chart "+version)
	return dir
}

func writeChart(t *testing.T, dir, version string) {
	t.Helper()
	path := filepath.Join(dir, "deploy", "helm", "vpcgw", "Chart.yaml")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	chart := "apiVersion: v2\nname: vpcgw\nversion: " + strings.TrimPrefix(version, "v") + "\nappVersion: \"" + version + "\"\n"
	if err := os.WriteFile(path, []byte(chart), 0o644); err != nil {
		t.Fatal(err)
	}
}

func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// tag runs the release tool's tag command on repo.
func tag(t *testing.T, repo, version string) (string, error) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		testutil.Skip(t, "go is not on PATH")
	}
	out, err := exec.Command(goBin, "-C", filepath.Join(repoRoot(), "hack", "tools", "release"), "run", ".", "tag", "--repo", repo, version).CombinedOutput()
	return string(out), err
}

func TestReleaseTagIsCutOnlyWhereItNamesTheChartsVersion(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		testutil.Skip(t, "git is not installed (apt-get install -y git)")
	}
	repo := gitRepo(t, "v0.3.0")
	for _, tc := range []struct{ what, version, want string }{
		{"not a release version", "0.3.0", "is not a release version"},
		{"a development version", "v0.3.1-dev.4.gabcdef0", "is not a release version"},
		{"build metadata", "v0.3.0+build.1", "is not a release version"},
		{"another version than the chart's", "v0.4.0", `has version "0.3.0" and appVersion "v0.3.0"; set them to "0.4.0" and "v0.4.0"`},
	} {
		out, err := tag(t, repo, tc.version)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("%s: tag %s gave %v:\n%s\nwant an error saying %q", tc.what, tc.version, err, out, tc.want)
		}
	}
	if tags := gitIn(t, repo, "tag"); tags != "" {
		t.Fatalf("refused tags made tags: %q", tags)
	}

	// A version the CHANGELOG says nothing of: Unreleased is no release's notes.
	other := gitRepo(t, "v0.5.0")
	if err := os.WriteFile(filepath.Join(other, "CHANGELOG.md"), []byte("# Changelog\n\n## Unreleased\n\n- next\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitIn(t, other, "commit", "-q", "-a", "-m", "no section")
	if out, err := tag(t, other, "v0.5.0"); err == nil || !strings.Contains(out, `CHANGELOG.md has no section "## v0.5.0"`) {
		t.Errorf("a version without its CHANGELOG section: %v\n%s", err, out)
	}

	// Uncommitted changes: a tag names a commit.
	writeChart(t, repo, "v0.3.1")
	if out, err := tag(t, repo, "v0.3.1"); err == nil || !strings.Contains(out, "uncommitted changes") {
		t.Errorf("a dirty tree: %v\n%s", err, out)
	}
	gitIn(t, repo, "checkout", "-q", "--", ".")

	if out, err := tag(t, repo, "v0.3.0"); err != nil {
		t.Fatalf("tag v0.3.0: %v\n%s", err, out)
	}
	head := gitIn(t, repo, "rev-parse", "HEAD")
	if at := gitIn(t, repo, "rev-parse", "v0.3.0^{commit}"); at != head {
		t.Fatalf("tag v0.3.0 is on %s, want HEAD %s", at, head)
	}
	if d := gitIn(t, repo, "describe", "--tags", "--always", "--dirty"); d != "v0.3.0" {
		t.Errorf("git describe on the tagged commit gives %q, want v0.3.0 (the VERSION of the release)", d)
	}
	if out, err := tag(t, repo, "v0.3.0"); err != nil || !strings.Contains(out, "already on HEAD") {
		t.Errorf("tagging again: %v\n%s", err, out)
	}

	// A later commit cannot take the same version.
	gitIn(t, repo, "commit", "-q", "--allow-empty", "-m", "later")
	if out, err := tag(t, repo, "v0.3.0"); err == nil || !strings.Contains(out, "the tag exists on commit "+head) {
		t.Errorf("the tag on an earlier commit: %v\n%s", err, out)
	}
}

// make release TAG=v0.3.0 cuts the tag, then builds the images and the release with that version.
func TestMakeReleaseTagBuildsThatVersion(t *testing.T) {
	mk, err := exec.LookPath("make")
	if err != nil {
		testutil.Skip(t, "make is not installed (apt-get install -y make)")
	}
	cmd := exec.Command(mk, "--no-print-directory", "-n", "release", "TAG=v0.3.0")
	cmd.Dir = repoRoot()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "MAKEFLAGS" && k != "MFLAGS" && k != "MAKELEVEL" && k != "MAKEOVERRIDES" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n release TAG=v0.3.0: %v\n%s", err, out)
	}
	steps := []*regexp.Regexp{
		regexp.MustCompile(`hack/tools/release run \. tag --repo \S+ "?v0\.3\.0"?`),
		regexp.MustCompile(`hack/tools/images run \. .*--version "?v0\.3\.0"?`),
		regexp.MustCompile(`hack/tools/release run \. --repo .*--version "?v0\.3\.0"?`),
	}
	at := 0
	for _, re := range steps {
		loc := re.FindIndex(out[at:])
		if loc == nil {
			t.Fatalf("make -n release TAG=v0.3.0 does not run %s after what came before:\n%s", re, out)
		}
		at += loc[1]
	}
}
