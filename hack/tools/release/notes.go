package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strings"
)

// commit is one change of the release notes.
type commit struct{ hash, subject string }

// changes are the commits since the previous release tag (the nearest v<semver> tag reachable
// from the release commit's parents), or every commit when there is none.
func changes(repo, revision string) (prev string, commits []commit, err error) {
	if out, err := git(repo, "describe", "--tags", "--abbrev=0", "--match", "v[0-9]*.[0-9]*.[0-9]*", revision+"^"); err == nil {
		prev = strings.TrimSpace(out)
	}
	rng := revision
	if prev != "" {
		rng = prev + ".." + revision
	}
	out, err := git(repo, "log", "--format=%h%x1f%s", rng)
	if err != nil {
		return "", nil, err
	}
	for line := range strings.Lines(out) {
		h, s, ok := strings.Cut(strings.TrimRight(line, "\n"), "\x1f")
		if ok {
			commits = append(commits, commit{h, s})
		}
	}
	return prev, commits, nil
}

// The groups of the notes, in their order, and what puts a commit in each (the first that
// matches; the rest are Changes). Subjects here begin with what they touch ("docs/sync-path:",
// "User guide:", "test/kubeovn:") or the SPEC ids they serve ("N5, issue 21:").
var groups = []struct {
	title string
	match *regexp.Regexp
}{
	{"Changes", nil},
	{"Tests", regexp.MustCompile(`^(test/[^:]*|[^:]*\btests?|Test[A-Z][A-Za-z0-9_]*\b.*)(:|$)`)},
	{"Documentation", regexp.MustCompile(`(?i)^(readme|user guide|docs?\b|benchmarks?\b)[^:]*:`)},
	{"Maintenance", regexp.MustCompile(`(?i)^(gofmt|go mod|go vet|review|hygiene|back out|revert)\b`)},
	{"Merges", regexp.MustCompile(`^Merge\b`)},
}

var specID = regexp.MustCompile(`\b[A-Z][0-9]{1,2}\b`)

// releaseNotes are the notes' Markdown: what is released, and the changes grouped.
func releaseNotes(r release, prev string, commits []commit, images map[string]imageSummary) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# vpcgw %s\n\n", r.version)
	fmt.Fprintf(&b, "Built from commit %s (%s)", r.revision, r.epoch.Format("2006-01-02"))
	if r.dirty {
		b.WriteString(", with changes not committed")
	}
	b.WriteString(".\n\n")
	fmt.Fprintf(&b, "- Chart: `%s` (version %s, appVersion %s)\n", r.chartFile(), r.chartVersion(), r.version)
	for _, name := range []string{"vpcgw", "vpcgw-agent"} {
		if s, ok := images[name]; ok {
			fmt.Fprintf(&b, "- Image `%s`: `%s` (linux/amd64, linux/arm64), SBOM `%s`, digest `%s`\n", name, r.imageFile(name), r.sbomFile(name), s.Digest)
		}
	}
	fmt.Fprintf(&b, "- kubectl plugin: `kubectl-vpcgw_<os>_<arch>.tar.gz` for %s, krew manifest `%s`\n", strings.Join(defaultPlatforms, ", "), krewManifestName)
	b.WriteString("- Plain manifests `vpcgw.yaml`, install script `install.sh`, `LICENSE` (Apache-2.0), `SHA256SUMS`\n\n")

	if prev != "" {
		fmt.Fprintf(&b, "## Changes since %s (%d commits)\n\n", prev, len(commits))
	} else {
		fmt.Fprintf(&b, "## Changes (%d commits: the first release)\n\n", len(commits))
	}
	byGroup := map[string][]commit{}
	ids := map[string]bool{}
	for _, c := range commits {
		g := groups[0].title
		for _, gr := range groups[1:] {
			if gr.match.MatchString(c.subject) {
				g = gr.title
				break
			}
		}
		byGroup[g] = append(byGroup[g], c)
		for _, id := range specID.FindAllString(c.subject, -1) {
			ids[id] = true
		}
	}
	if len(ids) > 0 {
		keys := make([]string, 0, len(ids))
		for id := range ids {
			keys = append(keys, id)
		}
		slices.Sort(keys)
		fmt.Fprintf(&b, "Requirements named (SPEC ids): %s.\n\n", strings.Join(keys, ", "))
	}
	for _, g := range groups {
		cs := byGroup[g.title]
		if len(cs) == 0 {
			continue
		}
		fmt.Fprintf(&b, "### %s\n\n", g.title)
		for _, c := range cs {
			fmt.Fprintf(&b, "- %s (%s)\n", c.subject, c.hash)
		}
		b.WriteString("\n")
	}
	return b.Bytes()
}

func git(repo string, args ...string) (string, error) {
	var stderr bytes.Buffer
	c := exec.Command("git", append([]string{"-C", repo}, args...)...)
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return string(out), nil
}
