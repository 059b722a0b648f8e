// Command images builds vpcgw's container images without a container engine (SPEC O5): it
// cross-compiles the static binaries and writes OCI image layouts with go-containerregistry.
//
//	go -C hack/tools/images run . --repo ../../.. --out bin/images --version v0.3.0 --source-date-epoch 1700000000
//
// Two images, each an index for linux/amd64 and linux/arm64:
//
//   - vpcgw: the controller and the webhook (/usr/bin/vpcgw, user 65532), with the agent builds of
//     every architecture in /usr/lib/vpcgw/agents, which the controller copies into the gateway
//     containers (internal/transport/deliver.go): a cluster may mix node architectures.
//   - vpcgw-agent: the agent alone (/usr/bin/vpcgw-agent, user 0: it programs nftables), for a
//     gateway image of one's own.
//
// Both carry vpcgw's LICENSE and their SBOM (SPDX 2.3 JSON from the binaries' Go build
// information, sbom.go) in /usr/share/doc/vpcgw, and the org.opencontainers.image.* labels (in
// the config) and annotations (on the index and on every manifest): title, description, version,
// revision, created, source, url, documentation, vendor, authors, licenses. The SBOM is also
// written next to the layout, <out>/<image>.spdx.json.
//
// The result is reproducible: the same sources, version, revision and epoch give the same digests
// (no build IDs, paths or VCS stamps in the binaries; fixed file times, owners and order in the
// layers; the epoch as the creation time). images.json in --out lists the digests, for pinning.
package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Architectures the images are built for.
var archs = []string{"amd64", "arm64"}

const module = "github.com/vpcgw/vpcgw"

// Who publishes the images, and where (the chart's default image.repository is registry/vpcgw).
const (
	vendor    = "The vpcgw Authors"
	copyright = "Copyright 2026 The vpcgw Authors"
	registry  = "ghcr.io/vpcgw"
	homepage  = "https://github.com/vpcgw/vpcgw"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "images: %v\n", err)
		os.Exit(1)
	}
}

type options struct {
	repo, out, version, source, revision, license string
	epoch                                         int64
}

func run(args []string) error {
	fs := flag.NewFlagSet("images", flag.ContinueOnError)
	var o options
	fs.StringVar(&o.repo, "repo", ".", "the vpcgw repository (its go.mod)")
	fs.StringVar(&o.out, "out", "bin/images", "output directory: one OCI layout per image, and images.json")
	fs.StringVar(&o.version, "version", "dev", "the version: the binaries' internal/version.Version and the images' tag")
	fs.StringVar(&o.source, "source", homepage, "org.opencontainers.image.source")
	fs.StringVar(&o.revision, "revision", "", "org.opencontainers.image.revision: the commit the images are built from (default: git rev-parse HEAD in --repo)")
	fs.StringVar(&o.license, "license", "", "the LICENSE file every image carries (default: LICENSE in --repo)")
	fs.Int64Var(&o.epoch, "source-date-epoch", 0, "creation time of the images, in seconds since 1970 (the commit's time makes builds reproducible)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if !validTag(o.version) {
		return fmt.Errorf("--version %q is not a valid image tag ([A-Za-z0-9_][A-Za-z0-9_.-]{0,127})", o.version)
	}
	repo, err := filepath.Abs(o.repo)
	if err != nil {
		return err
	}
	if o.revision == "" {
		out, err := exec.Command("git", "-C", repo, "rev-parse", "HEAD").Output()
		if err != nil {
			return fmt.Errorf("--revision not given and git rev-parse HEAD in %s failed: %w", repo, err)
		}
		o.revision = strings.TrimSpace(string(out))
	}
	if !validRevision(o.revision) {
		return fmt.Errorf("--revision %q is not a git commit (40 or 64 hex digits)", o.revision)
	}
	if o.license == "" {
		o.license = filepath.Join(repo, "LICENSE")
	}
	license, err := os.ReadFile(o.license)
	if err != nil {
		return fmt.Errorf("reading the LICENSE the images carry: %w", err)
	}
	work, err := os.MkdirTemp("", "vpcgw-images-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	// Binaries: vpcgw and vpcgw-agent for every architecture.
	bins := map[string][]byte{}
	for _, arch := range archs {
		for _, cmd := range []string{"vpcgw", "vpcgw-agent"} {
			out := filepath.Join(work, cmd+"-linux-"+arch)
			if err := build(repo, cmd, arch, o.version, out); err != nil {
				return err
			}
			b, err := os.ReadFile(out)
			if err != nil {
				return err
			}
			bins[cmd+"/"+arch] = b
		}
	}

	created := time.Unix(o.epoch, 0).UTC()
	summary := map[string]imageSummary{}
	for _, spec := range []imageSpec{
		{name: "vpcgw", title: "vpcgw controller and webhook", user: "65532:65532", entrypoint: "/usr/bin/vpcgw",
			description: "vpcgw makes a kube-ovn VPC NAT gateway serve Kubernetes Services with nftables: the controller and the " +
				"webhook (/usr/bin/vpcgw), with the gateway agent's static builds for every architecture in /usr/lib/vpcgw/agents",
			files: func(arch string) []file {
				fs := []file{{name: "usr/bin/vpcgw", mode: 0o755, data: bins["vpcgw/"+arch]}}
				for _, a := range archs {
					fs = append(fs, file{name: "usr/lib/vpcgw/agents/vpcgw-agent-linux-" + a, mode: 0o755, data: bins["vpcgw-agent/"+a]})
				}
				return fs
			}},
		{name: "vpcgw-agent", title: "vpcgw gateway agent", user: "0:0", entrypoint: "/usr/bin/vpcgw-agent",
			description: "The vpcgw gateway agent alone (/usr/bin/vpcgw-agent, static), which programs nftables in a kube-ovn " +
				"VPC NAT gateway: for a gateway image of one's own",
			files: func(arch string) []file {
				return []file{{name: "usr/bin/vpcgw-agent", mode: 0o755, data: bins["vpcgw-agent/"+arch]}}
			}},
	} {
		// The SBOM describes every binary of every platform; each platform's image carries it.
		var ibins []imageBinary
		seen := map[string]int{}
		for _, arch := range archs {
			for _, f := range spec.files(arch) {
				cmd, a, ok := binaryOf(f.name, arch)
				if !ok {
					continue
				}
				if i, ok := seen[cmd+"/"+a]; ok {
					if !slices.Contains(ibins[i].paths, "/"+f.name) {
						ibins[i].paths = append(ibins[i].paths, "/"+f.name)
					}
					continue
				}
				seen[cmd+"/"+a] = len(ibins)
				ibins = append(ibins, imageBinary{cmd: cmd, arch: a, paths: []string{"/" + f.name}, data: f.data})
			}
		}
		sbom, err := makeSBOM(spec.name, spec.title, ibins, o, created)
		if err != nil {
			return fmt.Errorf("image %s: SBOM: %w", spec.name, err)
		}
		files := spec.files
		spec.files = func(arch string) []file {
			return append(files(arch), file{name: sbomPath(spec.name), mode: 0o644, data: sbom})
		}
		s, err := writeImage(filepath.Join(o.out, spec.name), spec, o, created, license)
		if err != nil {
			return fmt.Errorf("image %s: %w", spec.name, err)
		}
		s.SBOM = spec.name + ".spdx.json"
		if err := os.WriteFile(filepath.Join(o.out, s.SBOM), sbom, 0o644); err != nil {
			return err
		}
		summary[spec.name] = s
		fmt.Printf("%s:%s %s\n", spec.name, o.version, s.Digest)
	}
	b, err := json.MarshalIndent(summary, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(o.out, "images.json"), append(b, '\n'), 0o644)
}

// binaryOf names the command and architecture of an image file that is one of the binaries:
// /usr/bin/<cmd> is the platform's, /usr/lib/vpcgw/agents/<cmd>-linux-<arch> that arch's.
func binaryOf(name, platformArch string) (cmd, arch string, ok bool) {
	if c, found := strings.CutPrefix(name, "usr/bin/"); found {
		return c, platformArch, true
	}
	if rest, found := strings.CutPrefix(name, "usr/lib/vpcgw/agents/"); found {
		if c, a, found := strings.Cut(rest, "-linux-"); found {
			return c, a, true
		}
	}
	return "", "", false
}

func validRevision(r string) bool {
	if len(r) != 40 && len(r) != 64 {
		return false
	}
	for _, c := range r {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func validTag(t string) bool {
	if t == "" || len(t) > 128 || t[0] == '.' || t[0] == '-' {
		return false
	}
	for _, r := range t {
		if !(r == '_' || r == '.' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

// build cross-compiles one command, static and without anything that differs between builds.
func build(repo, cmd, arch, version, out string) error {
	c := exec.Command("go", "build", "-trimpath", "-buildvcs=false",
		"-ldflags", "-s -w -buildid= -X "+module+"/internal/version.Version="+version,
		"-o", out, "./cmd/"+cmd)
	c.Dir = repo
	c.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOFLAGS=")
	c.Stdout, c.Stderr = os.Stderr, os.Stderr
	if err := c.Run(); err != nil {
		return fmt.Errorf("building %s for linux/%s: %w", cmd, arch, err)
	}
	return nil
}

type imageSpec struct {
	name, title, description, user, entrypoint string
	files                                      func(arch string) []file
}

type file struct {
	name string // without a leading slash
	mode int64
	data []byte
}

// imageSummary is one image's entry in images.json.
type imageSummary struct {
	Tag string `json:"tag"`
	// Digest is the index's: pin "<repository>@<digest>".
	Digest    string            `json:"digest"`
	Platforms map[string]string `json:"platforms"` // linux/<arch> → manifest digest
	SBOM      string            `json:"sbom"`      // its SPDX document, next to images.json
}

// labels are the image's org.opencontainers.image.* labels (config) and annotations (index and
// manifests), https://github.com/opencontainers/image-spec/blob/main/annotations.md.
func labels(spec imageSpec, o options, created time.Time) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":         spec.title,
		"org.opencontainers.image.description":   spec.description,
		"org.opencontainers.image.version":       o.version,
		"org.opencontainers.image.revision":      o.revision,
		"org.opencontainers.image.created":       created.Format(time.RFC3339),
		"org.opencontainers.image.source":        o.source,
		"org.opencontainers.image.url":           homepage,
		"org.opencontainers.image.documentation": homepage + "/blob/" + o.revision + "/docs/user-guide.md",
		"org.opencontainers.image.vendor":        vendor,
		"org.opencontainers.image.authors":       vendor,
		"org.opencontainers.image.licenses":      spdxLicense,
	}
}

func writeImage(dir string, spec imageSpec, o options, created time.Time, license []byte) (imageSummary, error) {
	if err := os.RemoveAll(dir); err != nil {
		return imageSummary{}, err
	}
	s := imageSummary{Tag: o.version, Platforms: map[string]string{}}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	labels := labels(spec, o, created)
	for _, arch := range archs {
		base, err := layer(baseFiles(license))
		if err != nil {
			return s, err
		}
		bin, err := layer(spec.files(arch))
		if err != nil {
			return s, err
		}
		img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
		img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
		if img, err = mutate.AppendLayers(img, base, bin); err != nil {
			return s, err
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return s, err
		}
		cf = cf.DeepCopy()
		cf.OS, cf.Architecture = "linux", arch
		cf.Created = v1.Time{Time: created}
		cf.Config = v1.Config{
			Entrypoint: []string{spec.entrypoint},
			User:       spec.user,
			WorkingDir: "/",
			Env:        []string{"PATH=/usr/bin"},
			Labels:     labels,
		}
		cf.History = nil
		if img, err = mutate.ConfigFile(img, cf); err != nil {
			return s, err
		}
		img = mutate.Annotations(img, labels).(v1.Image)
		d, err := img.Digest()
		if err != nil {
			return s, err
		}
		s.Platforms["linux/"+arch] = d.String()
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: "linux", Architecture: arch},
		}})
	}
	idx = mutate.Annotations(idx, labels).(v1.ImageIndex)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return s, err
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": o.version})); err != nil {
		return s, err
	}
	d, err := idx.Digest()
	if err != nil {
		return s, err
	}
	s.Digest = d.String()
	return s, nil
}

// baseFiles are what any process expects: the users the images run as, and a /tmp; and the
// license of everything in the images.
func baseFiles(license []byte) []file {
	return []file{
		{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{name: "tmp/", mode: 0o1777},
		{name: "home/nonroot/", mode: 0o700},
		{name: licensePath, mode: 0o644, data: license},
	}
}

// layer makes one gzip layer of files: parent directories included, sorted, every time the
// epoch and every owner root (home/nonroot excepted), so that equal files give an equal digest.
func layer(files []file) (v1.Layer, error) {
	entries := map[string]file{}
	for _, f := range files {
		entries[f.name] = f
		for d := path.Dir(strings.TrimSuffix(f.name, "/")); d != "." && d != "/"; d = path.Dir(d) {
			if _, ok := entries[d+"/"]; !ok {
				entries[d+"/"] = file{name: d + "/", mode: 0o755}
			}
		}
	}
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	slices.Sort(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		f := entries[n]
		h := &tar.Header{Name: n, Mode: f.mode, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if strings.HasSuffix(n, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if n == "home/nonroot/" {
			h.Uid, h.Gid = 65532, 65532
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	if len(data) == 0 {
		return nil, errors.New("empty layer")
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer))
}
