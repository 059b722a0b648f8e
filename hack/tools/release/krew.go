package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// The kubectl plugin's krew archives (https://krew.sigs.k8s.io/docs/developer-guide/plugin-manifest/):
// one kubectl-vpcgw_<os>_<arch>.tar.gz per platform with the plugin (static, -trimpath), its
// completion helper kubectl_complete-vpcgw and the LICENSE, and the krew manifest, the template
// deploy/krew/vpcgw.yaml with the version, the download URL and each archive's sha256 filled in.

var defaultPlatforms = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"}

type krewOptions struct {
	repo, out, version, baseURL, manifest, goCmd string
	platforms                                    []string
	epoch                                        time.Time
}

// completion is what kubectl runs to complete a plugin's arguments: kubectl_complete-<plugin> on
// the PATH.
const completion = "#!/bin/sh\nexec kubectl-vpcgw __complete \"$@\"\n"

// runKrew is `release krew`, what deploy/krew/build.sh runs.
func runKrew(args []string) error {
	fs := flag.NewFlagSet("krew", flag.ContinueOnError)
	repo := fs.String("repo", ".", "the vpcgw repository")
	out := fs.String("out", "", "output directory (default <repo>/bin/krew)")
	version := fs.String("version", "", "VERSION, made a v-prefixed semantic version (default: git describe)")
	baseURL := fs.String("base-url", "", "where the archives are published (default: the GitHub release of the version)")
	platforms := fs.String("platforms", strings.Join(defaultPlatforms, " "), "os/arch list, space-separated")
	epoch := fs.Int64("source-date-epoch", -1, "the archives' file times (default: the commit's time)")
	goCmd := fs.String("go", "go", "the go command")
	if err := fs.Parse(args); err != nil {
		return err
	}
	in, err := inputs(*repo, *version, *epoch)
	if err != nil {
		return err
	}
	o := krewOptions{repo: in.repo, out: *out, version: in.version, baseURL: *baseURL, manifest: "vpcgw.yaml",
		goCmd: *goCmd, platforms: strings.Fields(*platforms), epoch: in.epoch}
	if o.out == "" {
		o.out = filepath.Join(in.repo, "bin", "krew")
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	files, err := buildKrew(o)
	for _, f := range files {
		fmt.Println(f)
	}
	return err
}

func releaseURL(version string) string {
	return "https://github.com/vpcgw/vpcgw/releases/download/" + version
}

// buildKrew writes the archives and the manifest into o.out and returns their paths.
func buildKrew(o krewOptions) ([]string, error) {
	if o.baseURL == "" {
		o.baseURL = releaseURL(o.version)
	}
	license, err := os.ReadFile(filepath.Join(o.repo, "LICENSE"))
	if err != nil {
		return nil, fmt.Errorf("the krew archives carry the LICENSE: %w", err)
	}
	tmpl, err := os.ReadFile(filepath.Join(o.repo, "deploy", "krew", "vpcgw.yaml"))
	if err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "vpcgw-krew-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	subst := map[string]string{"@VERSION@": o.version, "@BASE_URL@": o.baseURL}
	var written []string
	for _, p := range o.platforms {
		goos, goarch, ok := strings.Cut(p, "/")
		if !ok || !slices.Contains(defaultPlatforms, p) {
			return written, fmt.Errorf("platform %q: want one of %v", p, defaultPlatforms)
		}
		bin := filepath.Join(work, goos+"-"+goarch, "kubectl-vpcgw")
		if err := goBuild(o.goCmd, o.repo, "./cmd/kubectl-vpcgw", goos, goarch, o.version, bin); err != nil {
			return written, err
		}
		archive := filepath.Join(o.out, "kubectl-vpcgw_"+goos+"_"+goarch+".tar.gz")
		if err := writeArchive(archive, []entry{
			{name: "LICENSE", mode: 0o644, data: license},
			{name: "kubectl-vpcgw", mode: 0o755, path: bin},
			{name: "kubectl_complete-vpcgw", mode: 0o755, data: []byte(completion)},
		}, o.epoch, true); err != nil {
			return written, err
		}
		sum, err := fileSHA256(archive)
		if err != nil {
			return written, err
		}
		subst["@SHA256_"+goos+"_"+goarch+"@"] = sum
		written = append(written, archive)
	}
	manifest, err := krewManifest(tmpl, o.platforms, subst)
	if err != nil {
		return written, err
	}
	path := filepath.Join(o.out, o.manifest)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return written, err
	}
	if err := os.WriteFile(path, manifest, 0o644); err != nil {
		return written, err
	}
	return append(written, path), nil
}

var placeholder = regexp.MustCompile(`@[A-Za-z0-9_]+@`)

// krewManifest fills the template in: of the platforms (each begins with a "# @platform os/arch"
// comment) those built, with the placeholders replaced.
func krewManifest(tmpl []byte, built []string, subst map[string]string) ([]byte, error) {
	var out bytes.Buffer
	inPlatforms, keep := false, true
	sc := bufio.NewScanner(bytes.NewReader(tmpl))
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "    # @platform "); ok {
			keep = slices.Contains(built, strings.TrimSpace(p))
			continue
		}
		if strings.HasPrefix(line, "  platforms:") {
			inPlatforms = true
		} else if inPlatforms && !keep {
			continue
		}
		for k, v := range subst {
			line = strings.ReplaceAll(line, k, v)
		}
		out.WriteString(line + "\n")
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if left := placeholder.FindAll(out.Bytes(), -1); len(left) > 0 {
		return nil, fmt.Errorf("deploy/krew/vpcgw.yaml: placeholders left: %s", bytes.Join(left, []byte(" ")))
	}
	return out.Bytes(), nil
}

// goBuild cross-compiles one command, static, without anything that differs between builds (no
// paths, build ID or VCS stamp), with the version vpcgw's binaries print.
func goBuild(goCmd, repo, pkg, goos, goarch, version, out string) error {
	c := exec.Command(goCmd, "build", "-trimpath", "-buildvcs=false",
		"-ldflags", "-s -w -buildid= -X github.com/vpcgw/vpcgw/internal/version.Version="+version,
		"-o", out, pkg)
	c.Dir = repo
	c.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch, "GOFLAGS=")
	c.Stdout, c.Stderr = os.Stderr, os.Stderr
	if err := c.Run(); err != nil {
		return fmt.Errorf("building %s for %s/%s: %w", pkg, goos, goarch, err)
	}
	return nil
}

func fileSHA256(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:]), nil
}
