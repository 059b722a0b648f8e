package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// chartFile is the source chart, whose version and appVersion a release tag must match.
const chartFile = "deploy/helm/vpcgw/Chart.yaml"

// runTag cuts the release tag VERSION at HEAD (`make release TAG=v0.3.0`): the tag is what
// `git describe` then gives, so the images, the chart's default image tag (its appVersion) and the
// release all carry the one version. It refuses a version without its section in CHANGELOG.md, a VERSION that is not a release's (a v-prefixed
// semantic version without build metadata, such as v0.3.0 or v0.3.0-rc.1), a tree with
// uncommitted changes, a source chart whose version and appVersion are not VERSION's, and a tag
// that exists on another commit. A tag already on HEAD is kept (the command can be run again).
func runTag(args []string) error {
	fset := flag.NewFlagSet("tag", flag.ContinueOnError)
	repo := fset.String("repo", ".", "the repository")
	if err := fset.Parse(args); err != nil {
		return err
	}
	if fset.NArg() != 1 {
		return errors.New("usage: release tag [--repo DIR] vX.Y.Z")
	}
	v := fset.Arg(0)
	if !semverRe.MatchString(v) || strings.Contains(v, "dev.") {
		return fmt.Errorf("TAG %q is not a release version: want vX.Y.Z or vX.Y.Z-rc.N (a v-prefixed semantic version)", v)
	}
	status, err := git(*repo, "status", "--porcelain", "--untracked-files=no")
	if err != nil {
		return err
	}
	if strings.TrimSpace(status) != "" {
		return fmt.Errorf("TAG %s: the repository has uncommitted changes; a release tag names a commit, commit them first:\n%s", v, status)
	}
	if err := checkChartVersion(filepath.Join(*repo, chartFile), v); err != nil {
		return fmt.Errorf("TAG %s: %w", v, err)
	}
	changelog, err := os.ReadFile(filepath.Join(*repo, "CHANGELOG.md"))
	if err != nil {
		return fmt.Errorf("TAG %s: %w", v, err)
	}
	if title, _, err := changelogSection(changelog, v); err != nil || title != v {
		return fmt.Errorf("TAG %s: CHANGELOG.md has no section \"## %s\": say what the release brings there, commit, then tag", v, v)
	}
	head, err := git(*repo, "rev-parse", "HEAD")
	if err != nil {
		return err
	}
	if at, err := git(*repo, "rev-parse", "--verify", "--quiet", "refs/tags/"+v+"^{commit}"); err == nil {
		if strings.TrimSpace(at) == strings.TrimSpace(head) {
			fmt.Fprintf(os.Stderr, "release: tag %s is already on HEAD\n", v)
			return nil
		}
		return fmt.Errorf("TAG %s: the tag exists on commit %s, not on HEAD %s; a release version names one commit", v, strings.TrimSpace(at), strings.TrimSpace(head))
	}
	if _, err := git(*repo, "tag", "--annotate", "--message", "vpcgw "+v, v); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "release: tagged HEAD %s as %s\n", strings.TrimSpace(head), v)
	return nil
}

var chartFieldRe = regexp.MustCompile(`^(version|appVersion):\s*"?([^"\s]*)"?\s*$`)

// checkChartVersion checks that the chart's version is v without its "v" and its appVersion is v:
// the source chart then renders the release's image tag.
func checkChartVersion(path, v string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	got := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := chartFieldRe.FindStringSubmatch(sc.Text()); m != nil {
			got[m[1]] = m[2]
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	want := map[string]string{"version": strings.TrimPrefix(v, "v"), "appVersion": v}
	if got["version"] != want["version"] || got["appVersion"] != want["appVersion"] {
		return fmt.Errorf("%s has version %q and appVersion %q; set them to %q and %q and commit, then tag",
			chartFile, got["version"], got["appVersion"], want["version"], want["appVersion"])
	}
	return nil
}
