// Command release writes a vpcgw release (SPEC O6): everything an operator installs, with
// checksums, in one directory (`make release` writes bin/release):
//
//	vpcgw-<chart version>.tgz          the chart, packaged with version and appVersion from the
//	                                   release's version, the vpcgw image's digest pinned in its
//	                                   values (image.digest) and the LICENSE inside
//	vpcgw-<version>.oci.tar            the images as OCI archives (a tar of the OCI image layout
//	vpcgw-agent-<version>.oci.tar      hack/tools/images writes, with the LICENSE at its root):
//	                                   linux/amd64 and linux/arm64, org.opencontainers.image.*
//	                                   labels and annotations, the SBOM in /usr/share/doc/vpcgw
//	vpcgw-<version>.spdx.json          each image's SBOM (SPDX 2.3), as in the image
//	vpcgw-agent-<version>.spdx.json
//	images.json                        the images' tag and digests (install.sh IMAGES_JSON=)
//	kubectl-vpcgw_<os>_<arch>.tar.gz   the kubectl plugin for krew (linux, darwin; amd64, arm64),
//	plugins/vpcgw.yaml                 with the LICENSE, and its krew manifest (krew's index layout)
//	vpcgw.yaml                         the plain manifests (deploy/manifests/generate.sh on the
//	                                   packaged chart: the release's image, pinned)
//	install.sh                         deploy/install.sh, which installs the chart beside it
//	LICENSE                            Apache-2.0
//	RELEASE-NOTES.md                   CHANGELOG.md's section of the version, the commit count
//	SHA256SUMS                         of every other file (sha256sum -c SHA256SUMS)
//	SHA256SUMS.sig, vpcgw-release.pub  with --signing-key: SHA256SUMS signed (sign.go), its key
//
// The version is VERSION (default: git describe) made a semantic version (version.go): v0.3.0 on
// the release tag. The same commit, VERSION and SOURCE_DATE_EPOCH (default: the commit's time)
// give the same files, byte for byte.
//
//	go -C hack/tools/release run . --repo ../../.. --out bin/release --helm /path/to/helm [--version v0.3.0]
//	go -C hack/tools/release run . krew --out bin/krew      the krew archives alone (deploy/krew/build.sh)
//	go -C hack/tools/release run . version [VERSION...]     the release version of each VERSION (default: git describe's)
//	go -C hack/tools/release run . tag --repo ../../.. v0.3.0   cut the release tag at HEAD (tag.go)
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "release: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "krew":
			return runKrew(args[1:])
		case "tag":
			return runTag(args[1:])
		case "version":
			// One line per VERSION: its release version, or "error: ..." (test/release reads them).
			for _, a := range args[1:] {
				if v, err := releaseVersion(a); err != nil {
					fmt.Println("error:", err)
				} else {
					fmt.Println(v)
				}
			}
			if len(args) > 1 {
				return nil
			}
			in, err := inputs(".", "", 0)
			if err != nil {
				return err
			}
			fmt.Println(in.version)
			return nil
		}
	}
	return runRelease(args)
}

// krewManifestName is where the release holds the krew manifest: krew's index layout
// (plugins/<name>.yaml), since krew requires the file to be named as the plugin, and vpcgw.yaml is
// the plain manifests.
const krewManifestName = "plugins/vpcgw.yaml"

// release is what one release is made of.
type release struct {
	repo, version, revision string
	epoch                   time.Time
	dirty                   bool // built from a tree with uncommitted changes
	signer                  *signer
}

func (r release) chartVersion() string         { return strings.TrimPrefix(r.version, "v") }
func (r release) chartFile() string            { return "vpcgw-" + r.chartVersion() + ".tgz" }
func (r release) imageFile(name string) string { return name + "-" + r.version + ".oci.tar" }
func (r release) sbomFile(name string) string  { return name + "-" + r.version + ".spdx.json" }

// inputs resolves the repository, the version (VERSION, default git describe, made a semantic
// version), the commit and the epoch (default the commit's time; epoch < 0: the default).
func inputs(repo, version string, epoch int64) (release, error) {
	var r release
	var err error
	if r.repo, err = filepath.Abs(repo); err != nil {
		return r, err
	}
	if version == "" {
		out, err := git(r.repo, "describe", "--tags", "--always", "--dirty")
		if err != nil {
			return r, fmt.Errorf("no --version and no git describe: %w", err)
		}
		version = strings.TrimSpace(out)
	}
	if r.version, err = releaseVersion(version); err != nil {
		return r, err
	}
	out, err := git(r.repo, "rev-parse", "HEAD")
	if err != nil {
		return r, err
	}
	r.revision = strings.TrimSpace(out)
	if epoch < 0 {
		out, err := git(r.repo, "log", "-1", "--format=%ct")
		if err != nil {
			return r, err
		}
		if epoch, err = strconv.ParseInt(strings.TrimSpace(out), 10, 64); err != nil {
			return r, fmt.Errorf("the commit's time %q: %w", out, err)
		}
	}
	r.epoch = time.Unix(epoch, 0).UTC()
	// As git describe --dirty: changes to tracked files.
	status, err := git(r.repo, "status", "--porcelain", "--untracked-files=no")
	if err != nil {
		return r, err
	}
	r.dirty = strings.TrimSpace(status) != ""
	return r, nil
}

// imageSummary is an entry of hack/tools/images' images.json.
type imageSummary struct {
	Tag       string            `json:"tag"`
	Digest    string            `json:"digest"`
	Platforms map[string]string `json:"platforms"`
	SBOM      string            `json:"sbom"`
}

var imageNames = []string{"vpcgw", "vpcgw-agent"}

func runRelease(args []string) error {
	fset := flag.NewFlagSet("release", flag.ContinueOnError)
	repo := fset.String("repo", ".", "the vpcgw repository")
	out := fset.String("out", "", "the release directory (default <repo>/bin/release); replaced when it holds an earlier release")
	version := fset.String("version", "", "VERSION, made a v-prefixed semantic version (default: git describe --tags --always --dirty)")
	epoch := fset.Int64("source-date-epoch", -1, "every file time and the images' creation time, in seconds since 1970 (default: the commit's time)")
	helm := fset.String("helm", "helm", "the helm command")
	goCmd := fset.String("go", "go", "the go command")
	baseURL := fset.String("base-url", "", "where the krew archives are published (default: the GitHub release of the version)")
	signingKey := fset.String("signing-key", "", "an ECDSA P-256 private key (PEM) that signs SHA256SUMS into SHA256SUMS.sig as cosign sign-blob does, its public key in the release as vpcgw-release.pub (sign.go); empty: unsigned")
	if err := fset.Parse(args); err != nil {
		return err
	}
	if fset.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fset.Args())
	}
	r, err := inputs(*repo, *version, *epoch)
	if err != nil {
		return err
	}
	// Read first: a bad key stops the release before anything is built.
	if r.signer, err = loadSigner(*signingKey); err != nil {
		return err
	}
	if *out == "" {
		*out = filepath.Join(r.repo, "bin", "release")
	}
	if *out, err = filepath.Abs(*out); err != nil {
		return err
	}
	if r.dirty {
		fmt.Fprintf(os.Stderr, "release: warning: %s has uncommitted changes; the release says so in its notes\n", r.repo)
	}
	start := time.Now()
	fmt.Fprintf(os.Stderr, "release %s of %s (epoch %d) into %s\n", r.version, r.revision, r.epoch.Unix(), *out)

	stage, err := staging(*out)
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "vpcgw-release-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	steps := []struct {
		what string
		do   func() error
	}{
		{"images", func() error { return r.images(stage, work, *goCmd) }},
		{"chart", func() error { return r.chart(stage, work, *helm) }},
		{"manifests", func() error { return r.manifests(stage, *helm) }},
		{"krew", func() error {
			_, err := buildKrew(krewOptions{repo: r.repo, out: stage, version: r.version, baseURL: *baseURL,
				manifest: krewManifestName, goCmd: *goCmd, platforms: defaultPlatforms, epoch: r.epoch})
			return err
		}},
		{"license and install script", func() error {
			if err := copyFile(filepath.Join(r.repo, "LICENSE"), filepath.Join(stage, "LICENSE"), 0o644); err != nil {
				return err
			}
			return copyFile(filepath.Join(r.repo, "deploy", "install.sh"), filepath.Join(stage, "install.sh"), 0o755)
		}},
		{"notes", func() error { return r.notes(stage) }},
		{"public key", func() error {
			if r.signer == nil {
				return nil
			}
			return r.signer.writePublicKey(stage)
		}},
		{"checksums", func() error { return checksums(stage) }},
		{"signature", func() error {
			if r.signer == nil {
				return nil
			}
			return r.signer.sign(stage)
		}},
	}
	for _, s := range steps {
		t := time.Now()
		if err := s.do(); err != nil {
			return fmt.Errorf("%s: %w", s.what, err)
		}
		fmt.Fprintf(os.Stderr, "release: %s done in %s\n", s.what, time.Since(t).Round(100*time.Millisecond))
	}
	if err := os.RemoveAll(*out); err != nil {
		return err
	}
	if err := os.Rename(stage, *out); err != nil {
		return err
	}
	entries, err := os.ReadDir(*out)
	if err != nil {
		return err
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			return err
		}
		fmt.Printf("%10d  %s\n", info.Size(), filepath.Join(*out, e.Name()))
	}
	fmt.Fprintf(os.Stderr, "release %s written in %s\n", r.version, time.Since(start).Round(time.Second))
	return nil
}

// staging returns an empty directory beside out to write the release into; it replaces out at
// the end, so that a failed release leaves the previous one whole. out must hold nothing or a
// release: the tool never deletes a directory it did not write.
func staging(out string) (string, error) {
	if entries, err := os.ReadDir(out); err == nil && len(entries) > 0 {
		if _, err := os.Stat(filepath.Join(out, "SHA256SUMS")); err != nil {
			return "", fmt.Errorf("%s is not empty and holds no release (no SHA256SUMS): not replacing it", out)
		}
	} else if err != nil && !os.IsNotExist(err) {
		return "", err
	}
	stage := out + ".partial"
	if err := os.RemoveAll(stage); err != nil {
		return "", err
	}
	return stage, os.MkdirAll(stage, 0o755)
}

// images builds both images with hack/tools/images, tagged with the release's version, and
// archives each layout with the LICENSE beside its index.
func (r release) images(stage, work, goCmd string) error {
	dir := filepath.Join(work, "images")
	c := exec.Command(goCmd, "-C", filepath.Join(r.repo, "hack", "tools", "images"), "run", ".",
		"--repo", r.repo, "--out", dir, "--version", r.version, "--revision", r.revision,
		"--source-date-epoch", strconv.FormatInt(r.epoch.Unix(), 10))
	c.Stdout, c.Stderr = os.Stderr, os.Stderr
	if err := c.Run(); err != nil {
		return fmt.Errorf("hack/tools/images: %w", err)
	}
	summary, err := readImages(filepath.Join(dir, "images.json"))
	if err != nil {
		return err
	}
	for _, name := range imageNames {
		s, ok := summary[name]
		if !ok || s.Tag != r.version {
			return fmt.Errorf("images.json: %s is %+v, want the tag %s", name, s, r.version)
		}
		entries, err := dirEntries(filepath.Join(dir, name), "")
		if err != nil {
			return err
		}
		entries = append(entries, entry{name: "LICENSE", mode: 0o644, path: filepath.Join(r.repo, "LICENSE")})
		if err := writeArchive(filepath.Join(stage, r.imageFile(name)), entries, r.epoch, false); err != nil {
			return err
		}
		if err := copyFile(filepath.Join(dir, s.SBOM), filepath.Join(stage, r.sbomFile(name)), 0o644); err != nil {
			return err
		}
		s.SBOM = r.sbomFile(name)
		summary[name] = s
	}
	b, err := json.MarshalIndent(summary, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(stage, "images.json"), append(b, '\n'), 0o644)
}

func readImages(path string) (map[string]imageSummary, error) {
	var s map[string]imageSummary
	b, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(b, &s)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return s, nil
}

// chart packages deploy/helm/vpcgw from a copy: the LICENSE added, image.digest set to the
// vpcgw image's, version and appVersion the release's.
func (r release) chart(stage, work, helm string) error {
	summary, err := readImages(filepath.Join(stage, "images.json"))
	if err != nil {
		return err
	}
	dir := filepath.Join(work, "chart", "vpcgw")
	if err := copyTree(filepath.Join(r.repo, "deploy", "helm", "vpcgw"), dir); err != nil {
		return err
	}
	if err := copyFile(filepath.Join(r.repo, "LICENSE"), filepath.Join(dir, "LICENSE"), 0o644); err != nil {
		return err
	}
	if err := pinDigest(filepath.Join(dir, "values.yaml"), summary["vpcgw"].Digest); err != nil {
		return err
	}
	c := exec.Command(helm, "package", dir, "--version", r.chartVersion(), "--app-version", r.version, "--destination", stage)
	c.Stdout, c.Stderr = os.Stderr, os.Stderr
	if err := c.Run(); err != nil {
		return fmt.Errorf("helm package: %w", err)
	}
	// helm stamps every entry with the time it packages.
	return normalizeTarGz(filepath.Join(stage, r.chartFile()), r.epoch)
}

// pinDigest sets image.digest in a copy of the chart's values.yaml, as a line edit so that the
// comments an operator reads (helm show values) stay.
func pinDigest(values, digest string) error {
	if !digestRe.MatchString(digest) {
		return fmt.Errorf("the vpcgw image's digest %q is not sha256:<64 hex>", digest)
	}
	b, err := os.ReadFile(values)
	if err != nil {
		return err
	}
	lines := strings.SplitAfter(string(b), "\n")
	in, done := false, false
	for i, l := range lines {
		switch {
		case l == "image:\n":
			in = true
		case in && l != "" && l[0] != ' ' && l[0] != '#' && l != "\n":
			in = false // the next top-level key
		case in && l == "  digest: \"\"\n":
			lines[i] = "  digest: \"" + digest + "\"\n"
			done = true
		}
	}
	if !done {
		return fmt.Errorf("%s: no line `  digest: \"\"` under `image:` to pin the digest in", values)
	}
	return os.WriteFile(values, []byte(strings.Join(lines, "")), 0o644)
}

// manifests renders the packaged chart as deploy/manifests/generate.sh renders the source chart.
func (r release) manifests(stage, helm string) error {
	c := exec.Command("bash", filepath.Join(r.repo, "deploy", "manifests", "generate.sh"), filepath.Join(stage, "vpcgw.yaml"))
	c.Env = append(os.Environ(), "HELM="+helm, "CHART="+filepath.Join(stage, r.chartFile()))
	c.Stdout, c.Stderr = os.Stderr, os.Stderr
	if err := c.Run(); err != nil {
		return fmt.Errorf("deploy/manifests/generate.sh: %w", err)
	}
	return nil
}

func (r release) notes(stage string) error {
	prev, commits, err := changes(r.repo, r.revision)
	if err != nil {
		return err
	}
	images, err := readImages(filepath.Join(stage, "images.json"))
	if err != nil {
		return err
	}
	changelog, err := os.ReadFile(filepath.Join(r.repo, "CHANGELOG.md"))
	if err != nil {
		return err
	}
	title, body, err := changelogSection(changelog, r.version)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(stage, "RELEASE-NOTES.md"), releaseNotes(r, prev, commits, images, title, body), 0o644)
}

// checksums writes SHA256SUMS over every file, as sha256sum writes it.
// Files in directories (plugins/vpcgw.yaml) are listed by their path in the release.
func checksums(dir string) error {
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		if rel == signatureFile {
			return nil // signs SHA256SUMS, written after it
		}
		if !e.Type().IsRegular() || rel == "SHA256SUMS" {
			return fmt.Errorf("%s: the release holds only files, and SHA256SUMS is written last", rel)
		}
		sum, err := fileSHA256(path)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(b.String()), 0o644)
}

func copyFile(from, to string, mode fs.FileMode) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		return err
	}
	return os.Chmod(to, mode)
}

// copyTree copies a directory of regular files.
func copyTree(from, to string) error {
	entries, err := dirEntries(from, "")
	if err != nil {
		return err
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	if err := os.MkdirAll(to, 0o755); err != nil {
		return err
	}
	for _, e := range entries {
		p := filepath.Join(to, filepath.FromSlash(strings.TrimSuffix(e.name, "/")))
		if strings.HasSuffix(e.name, "/") {
			err = os.MkdirAll(p, 0o755)
		} else {
			err = copyFile(e.path, p, 0o644)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
