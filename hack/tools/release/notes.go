package main

import (
	"bytes"
	"fmt"
	"os/exec"
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

// changelogSection is the section of CHANGELOG.md for version: "## <version>", or, for a version
// that no section names (a build between releases), "## Unreleased". What an operator reads
// about a release is written for them there, not derived from commit subjects.
func changelogSection(changelog []byte, version string) (title, body string, err error) {
	sections := map[string]string{}
	var cur string
	var b strings.Builder
	flush := func() {
		if cur != "" {
			sections[cur] = strings.TrimSpace(b.String())
		}
		b.Reset()
	}
	for line := range strings.Lines(string(changelog)) {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			flush()
			cur = strings.TrimSpace(h)
			continue
		}
		b.WriteString(line)
	}
	flush()
	for _, title := range []string{version, "Unreleased"} {
		if body, ok := sections[title]; ok && body != "" {
			return title, body, nil
		}
	}
	return "", "", fmt.Errorf("CHANGELOG.md has no section \"## %s\" (nor \"## Unreleased\"): write what the release brings there", version)
}

// releaseNotes are the notes' Markdown: what is released, the CHANGELOG's section for it, and how
// many commits it holds since the previous release.
func releaseNotes(r release, prev string, commits []commit, images map[string]imageSummary, title, changelog string) []byte {
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
	b.WriteString("- Plain manifests `vpcgw.yaml`, install script `install.sh`, `LICENSE` (Apache-2.0), `SHA256SUMS`\n")
	if r.signer != nil {
		fmt.Fprintf(&b, "- Signed: `%s` signs `SHA256SUMS` with the ECDSA P-256 key `%s`, whose SHA-256 fingerprint (of its DER) is `%s`: compare it with the fingerprint the project publishes, then\n", signatureFile, publicKeyFile, r.signer.fingerprint())
		fmt.Fprintf(&b, "  `cosign verify-blob --key %s --signature %s SHA256SUMS` (or `base64 -d %s > sig.der && openssl dgst -sha256 -verify %s -signature sig.der SHA256SUMS`), then `sha256sum -c SHA256SUMS`\n\n", publicKeyFile, signatureFile, signatureFile, publicKeyFile)
	} else {
		b.WriteString("- Not signed (built without a signing key)\n\n")
	}

	heading := "What it brings"
	if title == "Unreleased" {
		heading = "What it brings (unreleased: a build between releases)"
	}
	fmt.Fprintf(&b, "## %s\n\n%s\n\n", heading, changelog)
	if prev != "" {
		fmt.Fprintf(&b, "%d commits since %s (`git log %s..%s`).\n", len(commits), prev, prev, r.revision)
	} else {
		fmt.Fprintf(&b, "%d commits: the first release (`git log %s`).\n", len(commits), r.revision)
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
