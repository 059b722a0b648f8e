// covers: O5, O6 (the images `make images` builds, read back: OCI layouts, blobs, platforms,
// config, labels and annotations, layers, static binaries, LICENSE and SBOM; the agent run from
// them in a network namespace; a rebuild gives the same digests)
package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/netlab"
	"github.com/vpcgw/vpcgw/internal/testutil"
	"github.com/vpcgw/vpcgw/internal/transport"
)

// ImagesEnv names the directory `make images` writes (the Makefile exports it); default
// <repository>/bin/images.
const ImagesEnv = "VPCGW_IMAGES"

const module = "github.com/vpcgw/vpcgw"

// OCI media types.
const (
	mtIndex    = "application/vnd.oci.image.index.v1+json"
	mtManifest = "application/vnd.oci.image.manifest.v1+json"
	mtConfig   = "application/vnd.oci.image.config.v1+json"
	mtLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// ociKeys are the org.opencontainers.image.* keys every image carries.
var ociKeys = []string{"title", "description", "version", "revision", "created", "source", "url", "documentation", "vendor", "authors", "licenses"}

// platforms are the ones every image is built for.
var platforms = []string{"linux/amd64", "linux/arm64"}

var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// binary is an executable an image must hold.
type binary struct {
	arch string // the GOARCH it is built for; "" the platform's
	cmd  string // its main package, ./cmd/<cmd>
}

// wantFile is a file or directory an image must hold.
type wantFile struct {
	mode fs.FileMode // permission bits and type (fs.ModeDir), as in the tar header
	bin  *binary
}

// spec is what one image must be.
type spec struct {
	entrypoint, user string
	files            func(arch string) map[string]wantFile
}

// licensePath is where every image keeps vpcgw's LICENSE, and sbomPath its SBOM.
const licensePath = "usr/share/doc/vpcgw/LICENSE"

func sbomPath(image string) string { return "usr/share/doc/vpcgw/" + image + ".spdx.json" }

func baseFiles() map[string]wantFile {
	return map[string]wantFile{
		"etc/passwd":    {mode: 0o644},
		"etc/group":     {mode: 0o644},
		"tmp/":          {mode: fs.ModeDir | fs.ModeSticky | 0o777},
		"home/nonroot/": {mode: fs.ModeDir | 0o700},
		licensePath:     {mode: 0o644},
	}
}

// agentPath is where the vpcgw image keeps the agent build for arch: the controller reads it from
// there (--agent-binaries, transport.AgentBinariesDir) to copy it into the gateway containers.
func agentPath(arch string) string {
	return strings.TrimPrefix(path.Join(transport.AgentBinariesDir, transport.DefaultAgentBinary+"-linux-"+arch), "/")
}

var specs = map[string]spec{
	// The controller and the webhook, non-root, with the agent of every architecture.
	"vpcgw": {entrypoint: "/usr/bin/vpcgw", user: "65532:65532", files: func(arch string) map[string]wantFile {
		files := baseFiles()
		files[sbomPath("vpcgw")] = wantFile{mode: 0o644}
		files["usr/bin/vpcgw"] = wantFile{mode: 0o755, bin: &binary{cmd: "vpcgw"}}
		for _, p := range platforms {
			a := strings.TrimPrefix(p, "linux/")
			files[agentPath(a)] = wantFile{mode: 0o755, bin: &binary{arch: a, cmd: "vpcgw-agent"}}
		}
		return files
	}},
	// The agent alone, as root (it programs nftables), for a gateway image of one's own.
	"vpcgw-agent": {entrypoint: "/usr/bin/vpcgw-agent", user: "0:0", files: func(string) map[string]wantFile {
		files := baseFiles()
		files[sbomPath("vpcgw-agent")] = wantFile{mode: 0o644}
		files["usr/bin/vpcgw-agent"] = wantFile{mode: 0o755, bin: &binary{cmd: "vpcgw-agent"}}
		return files
	}},
}

// OCI structures, the fields checked.
type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *platform         `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type platform struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Variant      string `json:"variant,omitempty"`
}

type index struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Manifests     []descriptor      `json:"manifests"`
	Annotations   map[string]string `json:"annotations"`
}

type manifest struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Config        descriptor        `json:"config"`
	Layers        []descriptor      `json:"layers"`
	Annotations   map[string]string `json:"annotations"`
}

type configFile struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Created      string `json:"created"`
	Config       struct {
		Entrypoint []string          `json:"Entrypoint"`
		Cmd        []string          `json:"Cmd"`
		User       string            `json:"User"`
		Env        []string          `json:"Env"`
		Labels     map[string]string `json:"Labels"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// summary is one image's entry in images.json.
type summary struct {
	Tag       string            `json:"tag"`
	Digest    string            `json:"digest"`
	Platforms map[string]string `json:"platforms"`
}

// image is one layout as read.
type image struct {
	name, dir   string
	tag         string // the index's org.opencontainers.image.ref.name
	digest      string // the image index's digest
	annotations map[string]string
	platforms   map[string]*platformImage
}

type platformImage struct {
	digest   string
	manifest manifest
	config   configFile
	files    map[string]*file // the merged file system, names without a leading slash, dirs with a trailing one
}

type file struct {
	hdr    tar.Header
	sha256 string // regular files
}

// layouts is what the images directory holds, read once for every test.
type layouts struct {
	dir      string
	images   map[string]*image
	summary  map[string]summary
	problems []string
}

var (
	loadOnce sync.Once
	loaded   *layouts
	loadSkip string
)

func imagesDir() string {
	if d := os.Getenv(ImagesEnv); d != "" {
		return d
	}
	return filepath.Join(repoRoot(), "bin", "images")
}

func repoRoot() string {
	d, err := filepath.Abs("../..")
	if err != nil {
		panic(err)
	}
	return d
}

// load reads and checks the layouts; it skips (saying what is missing) when there are none.
func load(t *testing.T) *layouts {
	t.Helper()
	loadOnce.Do(func() {
		dir := imagesDir()
		for _, f := range []string{"images.json", "vpcgw/index.json", "vpcgw-agent/index.json"} {
			if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
				loadSkip = fmt.Sprintf("no images to check: %s has no %s (build them with `make images`, or point %s at the directory hack/tools/images wrote)", dir, f, ImagesEnv)
				return
			}
		}
		loaded = &layouts{dir: dir, images: map[string]*image{}}
		for _, name := range slices.Sorted(maps.Keys(specs)) {
			loaded.images[name] = loaded.read(name, filepath.Join(dir, name))
		}
		b, err := os.ReadFile(filepath.Join(dir, "images.json"))
		if err == nil {
			err = json.Unmarshal(b, &loaded.summary)
		}
		if err != nil {
			loaded.problemf("images.json: %v", err)
		}
	})
	if loadSkip != "" {
		testutil.Skip(t, loadSkip)
	}
	return loaded
}

func (l *layouts) problemf(format string, args ...any) {
	l.problems = append(l.problems, fmt.Sprintf(format, args...))
}

// read reads one layout, checking every blob against its digest and size on the way.
func (l *layouts) read(name, dir string) *image {
	img := &image{name: name, dir: dir, platforms: map[string]*platformImage{}}
	fail := func(format string, args ...any) { l.problemf(name+": "+format, args...) }

	var lay struct {
		Version string `json:"imageLayoutVersion"`
	}
	if b, err := os.ReadFile(filepath.Join(dir, "oci-layout")); err != nil || json.Unmarshal(b, &lay) != nil || lay.Version != "1.0.0" {
		fail("oci-layout: %q, %v; want imageLayoutVersion 1.0.0", lay.Version, err)
	}
	// Every blob is named by its content's digest.
	onDisk := map[string]int64{}
	_ = filepath.WalkDir(filepath.Join(dir, "blobs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			fail("blobs: %v", err)
			return nil
		}
		rel, _ := filepath.Rel(filepath.Join(dir, "blobs"), p)
		if d.IsDir() {
			if rel != "." && rel != "sha256" {
				fail("blobs/%s: only blobs/sha256 expected", rel)
			}
			return nil
		}
		sum, size, err := sha256File(p)
		if err != nil {
			fail("%v", err)
			return nil
		}
		if "sha256/"+sum != filepath.ToSlash(rel) {
			fail("blob %s has sha256 %s", rel, sum)
		}
		onDisk["sha256:"+sum] = size
		return nil
	})
	referenced := map[string]bool{}
	blob := func(what string, d descriptor, mediaType string) []byte {
		referenced[d.Digest] = true
		if d.MediaType != mediaType {
			fail("%s: media type %q, want %q", what, d.MediaType, mediaType)
		}
		size, ok := onDisk[d.Digest]
		if !ok {
			fail("%s: blob %s missing", what, d.Digest)
			return nil
		}
		if size != d.Size {
			fail("%s: blob %s has %d bytes, the descriptor says %d", what, d.Digest, size, d.Size)
		}
		if mediaType == mtLayer {
			return nil // streamed
		}
		b, err := os.ReadFile(l.blobPath(dir, d.Digest))
		if err != nil {
			fail("%s: %v", what, err)
		}
		return b
	}

	var top index
	if b, err := os.ReadFile(filepath.Join(dir, "index.json")); err != nil || json.Unmarshal(b, &top) != nil {
		fail("index.json: %v", err)
		return img
	}
	if top.SchemaVersion != 2 || (top.MediaType != "" && top.MediaType != mtIndex) || len(top.Manifests) != 1 {
		fail("index.json: schemaVersion %d, mediaType %q, %d manifests; want 2, %s and the image's index alone", top.SchemaVersion, top.MediaType, len(top.Manifests), mtIndex)
		return img
	}
	img.tag = top.Manifests[0].Annotations["org.opencontainers.image.ref.name"]
	img.digest = top.Manifests[0].Digest
	if img.tag == "" {
		fail("index.json: the image has no org.opencontainers.image.ref.name (its tag)")
	}
	var idx index
	if err := json.Unmarshal(blob("image index", top.Manifests[0], mtIndex), &idx); err != nil {
		fail("image index: %v", err)
		return img
	}
	if idx.SchemaVersion != 2 || idx.MediaType != mtIndex {
		fail("image index: schemaVersion %d, mediaType %q", idx.SchemaVersion, idx.MediaType)
	}
	img.annotations = idx.Annotations
	var got []string
	for _, d := range idx.Manifests {
		if d.Platform == nil {
			fail("image index: manifest %s has no platform", d.Digest)
			continue
		}
		p := d.Platform.OS + "/" + d.Platform.Architecture
		if d.Platform.Variant != "" && !(p == "linux/arm64" && d.Platform.Variant == "v8") {
			p += "/" + d.Platform.Variant
		}
		got = append(got, p)
		img.platforms[p] = l.readPlatform(img, p, d, blob, fail)
	}
	if slices.Sort(got); !slices.Equal(got, platforms) {
		fail("image index: platforms %v, want exactly %v", got, platforms)
	}
	for d := range onDisk {
		if !referenced[d] {
			fail("blob %s is referenced by nothing", d)
		}
	}
	return img
}

func (l *layouts) blobPath(dir, digest string) string {
	return filepath.Join(dir, "blobs", "sha256", strings.TrimPrefix(digest, "sha256:"))
}

func (l *layouts) readPlatform(img *image, p string, d descriptor, blob func(string, descriptor, string) []byte, fail func(string, ...any)) *platformImage {
	pi := &platformImage{digest: d.Digest, files: map[string]*file{}}
	arch := strings.TrimPrefix(p, "linux/")
	what := p + " manifest"
	if err := json.Unmarshal(blob(what, d, mtManifest), &pi.manifest); err != nil {
		fail("%s: %v", what, err)
		return pi
	}
	m := pi.manifest
	if m.SchemaVersion != 2 || m.MediaType != mtManifest {
		fail("%s: schemaVersion %d, mediaType %q", what, m.SchemaVersion, m.MediaType)
	}
	if err := json.Unmarshal(blob(p+" config", m.Config, mtConfig), &pi.config); err != nil {
		fail("%s config: %v", p, err)
		return pi
	}
	c := pi.config
	sp := specs[img.name]
	if c.OS != "linux" || c.Architecture != arch {
		fail("%s config: os/architecture %s/%s", p, c.OS, c.Architecture)
	}
	if !slices.Equal(c.Config.Entrypoint, []string{sp.entrypoint}) || len(c.Config.Cmd) != 0 {
		fail("%s config: Entrypoint %q, Cmd %q; want [%s] and no Cmd", p, c.Config.Entrypoint, c.Config.Cmd, sp.entrypoint)
	}
	if c.Config.User != sp.user {
		fail("%s config: User %q, want %q", p, c.Config.User, sp.user)
	}
	if v := c.Config.Labels["org.opencontainers.image.version"]; v != img.tag {
		fail("%s config: label org.opencontainers.image.version %q, want the tag %q", p, v, img.tag)
	}
	// The OCI keys (https://github.com/opencontainers/image-spec/blob/main/annotations.md), the
	// same as config labels and as the manifest's annotations.
	for _, k := range ociKeys {
		if c.Config.Labels["org.opencontainers.image."+k] == "" {
			fail("%s config: no label org.opencontainers.image.%s", p, k)
		}
	}
	if !maps.Equal(m.Annotations, c.Config.Labels) {
		fail("%s: manifest annotations %v are not the config's labels %v", p, m.Annotations, c.Config.Labels)
	}
	if rev := c.Config.Labels["org.opencontainers.image.revision"]; !regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?$`).MatchString(rev) {
		fail("%s config: revision %q is not a git commit", p, rev)
	}
	if l := c.Config.Labels["org.opencontainers.image.licenses"]; l != "Apache-2.0" {
		fail("%s config: licenses %q, want Apache-2.0", p, l)
	}
	created := c.Config.Labels["org.opencontainers.image.created"]
	if ct, err := time.Parse(time.RFC3339, created); err != nil || created != c.Created {
		fail("%s config: created %q, label org.opencontainers.image.created %q (%v); want the same RFC 3339 time", p, c.Created, created, err)
	} else if !ct.Before(time.Now().Add(24 * time.Hour)) {
		fail("%s config: created %s is in the future", p, ct)
	}
	if c.RootFS.Type != "layers" || len(c.RootFS.DiffIDs) != len(m.Layers) || len(m.Layers) == 0 {
		fail("%s config: rootfs %s with %d diff_ids for %d layers", p, c.RootFS.Type, len(c.RootFS.DiffIDs), len(m.Layers))
	}
	want := sp.files(arch)
	license, err := os.ReadFile(filepath.Join(repoRoot(), "LICENSE"))
	if err != nil {
		fail("%v", err)
	}
	sbom, err := os.ReadFile(filepath.Join(l.dir, img.name+".spdx.json"))
	if err != nil {
		fail("the SBOM beside the layout: %v", err)
	}
	for i, ld := range m.Layers {
		blob(fmt.Sprintf("%s layer %d", p, i), ld, mtLayer)
		diffID, err := l.readLayer(l.blobPath(img.dir, ld.Digest), func(h *tar.Header, r io.Reader) error {
			f := &file{hdr: *h}
			if h.Typeflag == tar.TypeReg {
				data, err := io.ReadAll(r)
				if err != nil {
					return err
				}
				if w, ok := want[h.Name]; ok && w.bin != nil {
					checkBinary(fail, p+" "+h.Name, data, w.bin, arch, img.tag)
				}
				s := sha256.Sum256(data)
				f.sha256 = hex.EncodeToString(s[:])
				if h.Name == "etc/passwd" && !strings.Contains(string(data), ":65532:65532:") {
					fail("%s /etc/passwd has no user 65532: %q", p, data)
				}
				if h.Name == licensePath && !bytes.Equal(data, license) {
					fail("%s /%s is not the repository's LICENSE", p, h.Name)
				}
				if h.Name == sbomPath(img.name) && !bytes.Equal(data, sbom) {
					fail("%s /%s is not %s.spdx.json beside the layout", p, h.Name, img.name)
				}
			}
			pi.files[h.Name] = f
			return nil
		})
		if err != nil {
			fail("%s layer %d: %v", p, i, err)
		} else if i < len(c.RootFS.DiffIDs) && c.RootFS.DiffIDs[i] != diffID {
			fail("%s layer %d: uncompressed %s, config's diff_id %s", p, i, diffID, c.RootFS.DiffIDs[i])
		}
	}
	// The files, their modes, owners and times.
	mtime := time.Time{}
	for name, f := range pi.files {
		h := f.hdr
		if w, ok := want[name]; ok {
			if got := h.FileInfo().Mode() & (fs.ModeType | fs.ModePerm | fs.ModeSticky | fs.ModeSetuid | fs.ModeSetgid); got != w.mode {
				fail("%s /%s: mode %v, want %v", p, name, got, w.mode)
			}
		}
		if h.Typeflag != tar.TypeReg && h.Typeflag != tar.TypeDir {
			fail("%s /%s: type %q: only regular files and directories expected", p, name, h.Typeflag)
		}
		if h.Mode&0o6000 != 0 {
			fail("%s /%s: setuid or setgid", p, name)
		}
		if strings.HasPrefix(name, "/") || slices.Contains(strings.Split(name, "/"), "..") {
			fail("%s %s: not a relative path inside the image", p, name)
		}
		owner := [2]int{h.Uid, h.Gid}
		if wantOwner := ([2]int{}); name == "home/nonroot/" {
			if owner != [2]int{65532, 65532} {
				fail("%s /%s: owner %v, want 65532:65532", p, name, owner)
			}
		} else if owner != wantOwner {
			fail("%s /%s: owner %v, want 0:0", p, name, owner)
		}
		if mtime.IsZero() {
			mtime = h.ModTime
		} else if !h.ModTime.Equal(mtime) {
			fail("%s /%s: mtime %s, others %s: every entry has the same fixed time", p, name, h.ModTime, mtime)
		}
	}
	for name := range want {
		if _, ok := pi.files[name]; !ok {
			fail("%s: no /%s", p, name)
		}
	}
	return pi
}

// readLayer gunzips and untars one layer, calling each for every entry, and returns the
// uncompressed stream's digest (the diff_id).
func (l *layouts) readLayer(p string, each func(*tar.Header, io.Reader) error) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }() // read only
	zr, err := gzip.NewReader(f)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	tr := tar.NewReader(io.TeeReader(zr, h))
	seen := map[string]bool{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", err
		}
		if seen[hdr.Name] {
			return "", fmt.Errorf("%s twice in one layer", hdr.Name)
		}
		seen[hdr.Name] = true
		if err := each(hdr, tr); err != nil {
			return "", err
		}
	}
	// The tar's end-of-archive padding is part of the diff_id.
	if _, err := io.Copy(io.Discard, io.TeeReader(zr, h)); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// checkBinary: the right ELF machine, static (no interpreter, no shared library), built from the
// module's command with CGO_ENABLED=0 and -trimpath, without VCS stamps, with the image's version.
func checkBinary(fail func(string, ...any), what string, data []byte, b *binary, platformArch, tag string) {
	arch := b.arch
	if arch == "" {
		arch = platformArch
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		fail("%s: not an ELF file: %v", what, err)
		return
	}
	defer func() { _ = f.Close() }() // read only
	if f.Class != elf.ELFCLASS64 || f.Machine != elfMachine[arch] {
		fail("%s: ELF %v %v, want ELFCLASS64 %v (%s)", what, f.Class, f.Machine, elfMachine[arch], arch)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			fail("%s: has an ELF interpreter (PT_INTERP): not static", what)
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		fail("%s: shared libraries %v (%v): not static", what, libs, err)
	}
	bi, err := buildinfo.Read(bytes.NewReader(data))
	if err != nil {
		fail("%s: no Go build information: %v", what, err)
		return
	}
	if bi.Path != module+"/cmd/"+b.cmd {
		fail("%s: built from %s, want %s/cmd/%s", what, bi.Path, module, b.cmd)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
		if strings.HasPrefix(s.Key, "vcs") {
			fail("%s: VCS stamp %s=%s (a rebuild elsewhere would differ)", what, s.Key, s.Value)
		}
	}
	for k, v := range map[string]string{"CGO_ENABLED": "0", "GOOS": "linux", "GOARCH": arch, "-trimpath": "true"} {
		if settings[k] != v {
			fail("%s: built with %s=%q, want %q", what, k, settings[k], v)
		}
	}
	// -trimpath keeps -ldflags out of the build information: the version is looked for in the
	// data (and TestAgentFromImageRuns runs --version).
	if !bytes.Contains(data, []byte(tag)) {
		fail("%s: the version %s is nowhere in the binary", what, tag)
	}
}

// extract returns the content of one file of one platform of an image.
func (l *layouts) extract(t *testing.T, img *image, p, name string) []byte {
	t.Helper()
	pi := img.platforms[p]
	if pi == nil {
		t.Fatalf("%s has no %s", img.name, p)
	}
	var data []byte
	for _, ld := range pi.manifest.Layers {
		if _, err := l.readLayer(l.blobPath(img.dir, ld.Digest), func(h *tar.Header, r io.Reader) error {
			if h.Name != name {
				return nil
			}
			var err error
			data, err = io.ReadAll(r)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	if data == nil {
		t.Fatalf("%s %s has no /%s", img.name, p, name)
	}
	return data
}

func sha256File(p string) (string, int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", 0, err
	}
	defer func() { _ = f.Close() }() // read only
	h := sha256.New()
	n, err := io.Copy(h, f)
	return hex.EncodeToString(h.Sum(nil)), n, err
}

// TestImageLayouts reads both layouts back: index.json → the image's index of exactly linux/amd64
// and linux/arm64; every blob matches its digest and size and is referenced; each platform's
// config (os, architecture, entrypoint, user, labels, diff_ids) and layers (gzip tars: the
// expected files with their modes and owners, one fixed time); the binaries static ELF files of
// the right machine. The agent builds in the vpcgw image are those of the vpcgw-agent image.
//
// covers: O5
func TestImageLayouts(t *testing.T) {
	l := load(t)
	for _, p := range l.problems {
		t.Error(p)
	}
	agent, vpcgw := l.images["vpcgw-agent"], l.images["vpcgw"]
	if agent.tag != vpcgw.tag {
		t.Errorf("tags differ: vpcgw %q, vpcgw-agent %q", vpcgw.tag, agent.tag)
	}
	for _, p := range platforms {
		arch := strings.TrimPrefix(p, "linux/")
		a, ok := agent.platforms[p]
		if !ok {
			continue
		}
		want := a.files["usr/bin/vpcgw-agent"]
		for _, vp := range platforms {
			v, ok := vpcgw.platforms[vp]
			if !ok || want == nil {
				continue
			}
			if got := v.files[agentPath(arch)]; got == nil || got.sha256 != want.sha256 {
				t.Errorf("vpcgw %s /%s is not the vpcgw-agent image's %s /usr/bin/vpcgw-agent", vp, agentPath(arch), p)
			}
		}
	}
	for name, img := range l.images {
		// The index carries the annotations of its platforms' manifests.
		for p, pi := range img.platforms {
			if !maps.Equal(img.annotations, pi.manifest.Annotations) {
				t.Errorf("%s: the index's annotations %v are not the %s manifest's %v", name, img.annotations, p, pi.manifest.Annotations)
			}
		}
		for p, pi := range img.platforms {
			n := 0
			for _, f := range pi.files {
				if f.hdr.Typeflag == tar.TypeReg {
					n++
				}
			}
			t.Logf("%s:%s %s %s: %d layers, %d files", name, img.tag, p, pi.digest, len(pi.manifest.Layers), n)
		}
	}
}

// TestImagesJSON: images.json lists exactly the two images with the layouts' tag, index digest
// and per-platform manifest digests (what the chart's image.digest and install.sh's IMAGES_JSON
// pin).
//
// covers: O5
func TestImagesJSON(t *testing.T) {
	l := load(t)
	if got := slices.Sorted(maps.Keys(l.summary)); !slices.Equal(got, []string{"vpcgw", "vpcgw-agent"}) {
		t.Errorf("images.json lists %v, want vpcgw and vpcgw-agent", got)
	}
	for name, img := range l.images {
		s := l.summary[name]
		want := summary{Tag: img.tag, Digest: img.digest, Platforms: map[string]string{}}
		for p, pi := range img.platforms {
			want.Platforms[p] = pi.digest
		}
		if s.Tag != want.Tag || s.Digest != want.Digest || !maps.Equal(s.Platforms, want.Platforms) {
			t.Errorf("images.json %s = %+v, the layout has %+v", name, s, want)
		}
	}
}

// TestAgentFromImageRuns extracts the agent for this machine's architecture from the vpcgw-agent
// image and from the vpcgw image's agent builds (what the controller copies into a gateway), and
// runs it: --version prints the image's tag, and in a fresh network namespace it applies a state
// read on stdin to nftables (table ip kube-ovn) and acknowledges it.
//
// covers: O5
func TestAgentFromImageRuns(t *testing.T) {
	l := load(t)
	p := "linux/" + runtime.GOARCH
	if !slices.Contains(platforms, p) {
		testutil.Skip(t, fmt.Sprintf("this machine is %s: the images run on %v only", p, platforms))
	}
	vpcgw, agent := l.images["vpcgw"], l.images["vpcgw-agent"]
	bins := map[string][]byte{
		"vpcgw-agent image /usr/bin/vpcgw-agent":    l.extract(t, agent, p, "usr/bin/vpcgw-agent"),
		"vpcgw image /" + agentPath(runtime.GOARCH): l.extract(t, vpcgw, p, agentPath(runtime.GOARCH)),
	}
	for what, data := range bins {
		t.Run(what, func(t *testing.T) {
			exe := filepath.Join(t.TempDir(), "vpcgw-agent")
			if err := os.WriteFile(exe, data, 0o755); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(exe, "--version").CombinedOutput()
			if err != nil || string(out) != "vpcgw-agent "+agent.tag+"\n" {
				t.Errorf("vpcgw-agent --version: %q, %v; want %q", out, err, "vpcgw-agent "+agent.tag+"\n")
			}
			runAgentInNetns(t, exe, agent.tag)
		})
	}
}

func runAgentInNetns(t *testing.T, exe, tag string) {
	t.Helper()
	if err := netlab.Available(); err != nil {
		testutil.Skip(t, fmt.Sprintf("running the image's agent in a network namespace: %v", err))
	}
	if _, err := exec.LookPath("nft"); err != nil {
		testutil.Skip(t, "running the image's agent in a network namespace needs the nft command (apt-get install -y nftables)")
	}
	lab, err := netlab.New("img")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lab.Cleanup(); err != nil {
			t.Errorf("lab cleanup: %v", err)
		}
	})
	ns, err := lab.AddNetns("gw")
	if err != nil {
		t.Fatal(err)
	}
	a, err := lab.StartAgent(ns, exe)
	if err != nil {
		t.Fatal(err)
	}
	id := gwstate.Identity{VIP: netip.MustParseAddr("172.31.0.10"), Port: 80, Protocol: gwstate.TCP, Backends: []gwstate.Backend{{IP: netip.MustParseAddr("10.0.1.5"), Port: 8080}}}
	ack, err := a.Send(gwstate.State{Generation: 1, Identities: []gwstate.Identity{id}})
	if err != nil {
		t.Fatal(err)
	}
	if ack.Generation != 1 || ack.Error != "" || ack.AgentVersion != tag {
		t.Fatalf("ack %+v, want generation 1, no error, agentVersion %q (stderr: %s)", ack, tag, a.Stderr())
	}
	table, err := lab.Exec(ns, "nft", "list", "table", "ip", "kube-ovn")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"172.31.0.10 . tcp . 80 : goto", "dnat to 10.0.1.5:8080"} {
		if !strings.Contains(string(table), want) {
			t.Errorf("table ip kube-ovn lacks %q:\n%s", want, table)
		}
	}
	// The identity withdrawn: gone from the table.
	if ack, err := a.Send(gwstate.State{Generation: 2}); err != nil || ack.Generation != 2 || ack.Error != "" {
		t.Fatalf("generation 2: ack %+v, %v", ack, err)
	}
	if table, err := lab.Exec(ns, "nft", "list", "table", "ip", "kube-ovn"); err != nil || strings.Contains(string(table), "172.31.0.10") {
		t.Errorf("after the empty state: %v\n%s", err, table)
	}
	if err := a.Close(); err != nil {
		t.Errorf("agent at EOF: %v", err)
	}
}

// TestImagesReproducible rebuilds the images with hack/tools/images, with the version, the
// revision and the creation time of the built ones (their labels), and requires the same digests:
// the images are a function of the sources, the version, the revision and the epoch alone.
//
// covers: O5
func TestImagesReproducible(t *testing.T) {
	l := load(t)
	img := l.images["vpcgw"]
	pi := img.platforms["linux/amd64"]
	if pi == nil {
		t.Fatal("vpcgw has no linux/amd64 image")
	}
	version := pi.config.Config.Labels["org.opencontainers.image.version"]
	revision := pi.config.Config.Labels["org.opencontainers.image.revision"]
	created, err := time.Parse(time.RFC3339, pi.config.Config.Labels["org.opencontainers.image.created"])
	if err != nil || version == "" || revision == "" {
		t.Fatalf("vpcgw's labels %v: %v", pi.config.Config.Labels, err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		testutil.Skip(t, "the go command is not on PATH: cannot rebuild the images to compare")
	}
	build := func() map[string]summary {
		out := t.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		repo := repoRoot()
		cmd := exec.CommandContext(ctx, goBin, "-C", filepath.Join(repo, "hack", "tools", "images"), "run", ".",
			"--repo", repo, "--out", out, "--version", version, "--revision", revision, "--source-date-epoch", fmt.Sprint(created.Unix()))
		start := time.Now()
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, b)
		}
		t.Logf("rebuilt in %s", time.Since(start).Round(time.Millisecond))
		var s map[string]summary
		b, err := os.ReadFile(filepath.Join(out, "images.json"))
		if err == nil {
			err = json.Unmarshal(b, &s)
		}
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	same := func(a, b map[string]summary) bool {
		return maps.EqualFunc(a, b, func(x, y summary) bool {
			return x.Tag == y.Tag && x.Digest == y.Digest && maps.Equal(x.Platforms, y.Platforms)
		})
	}
	first := build()
	if same(first, l.summary) {
		return
	}
	// Which is it: a build that differs each time, or sources changed since `make images`?
	if second := build(); !same(first, second) {
		t.Fatalf("two builds of the same sources, version %s and epoch %d differ: not reproducible\n%+v\n%+v", version, created.Unix(), first, second)
	}
	t.Fatalf("%s is not what the sources build now (version %s, epoch %d), though two rebuilds agree: it is stale, run `make images`\nbuilt: %+v\nnow:   %+v",
		l.dir, version, created.Unix(), l.summary, first)
}
