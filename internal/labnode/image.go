package labnode

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
)

// The node's images (SPEC O1): the lab has no registry and no container runtime, so the node
// "pulls" an image reference from the OCI image layouts it was given (the archives `make images`
// and `make release` write), as containerd would from a registry: the reference's repository
// picks the layout, its tag (the index's org.opencontainers.image.ref.name) or digest picks the
// image, the platform picks the manifest, every blob is checked against its digest, and the
// layers are unpacked in order into a root filesystem that containers of that image start from.

// Media types the store reads (OCI image spec).
const (
	mediaIndex     = "application/vnd.oci.image.index.v1+json"
	mediaManifest  = "application/vnd.oci.image.manifest.v1+json"
	mediaLayer     = "application/vnd.oci.image.layer.v1.tar"
	mediaLayerGzip = "application/vnd.oci.image.layer.v1.tar+gzip"
	refNameKey     = "org.opencontainers.image.ref.name"
)

// ociDescriptor is the part of an OCI descriptor the store needs.
type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
	} `json:"platform,omitempty"`
}

type ociIndex struct {
	MediaType string          `json:"mediaType"`
	Manifests []ociDescriptor `json:"manifests"`
}

type ociManifest struct {
	MediaType string          `json:"mediaType"`
	Config    ociDescriptor   `json:"config"`
	Layers    []ociDescriptor `json:"layers"`
}

// imageConfig is the runtime part of an image's configuration.
type imageConfig struct {
	Entrypoint []string `json:"Entrypoint"`
	Cmd        []string `json:"Cmd"`
	Env        []string `json:"Env"`
	User       string   `json:"User"`
	WorkingDir string   `json:"WorkingDir"`
}

// pulledImage is an image ready to run: its unpacked root and its configuration.
type pulledImage struct {
	// Rootfs is the unpacked root filesystem, shared by the image's containers (read-only to
	// them: each gets a writable layer over it).
	Rootfs string
	Config imageConfig
	// ID is the config's digest (the image ID a runtime reports); RepoDigest is
	// <repository>@<digest of what the reference resolved to>.
	ID, RepoDigest string
}

// imageStore resolves and unpacks images. Layouts maps a repository (e.g. ghcr.io/vpcgw/vpcgw)
// to an OCI image layout: a directory, or a tar of one.
type imageStore struct {
	layouts map[string]string
	dir     string // where archives are extracted and roots unpacked

	mu       sync.Mutex
	extract  map[string]string // archive path -> extracted layout directory
	unpacked map[string]*pulledImage
}

func newImageStore(layouts map[string]string, dir string) *imageStore {
	s := &imageStore{layouts: map[string]string{}, dir: dir, extract: map[string]string{}, unpacked: map[string]*pulledImage{}}
	s.add(layouts)
	return s
}

// has reports whether the store serves the reference's repository.
func (s *imageStore) has(ref string) bool {
	repo, _, _, err := parseImageRef(ref)
	if err != nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.layouts[repo]
	return ok
}

// add serves more repositories (as images pushed to a registry after the node started).
func (s *imageStore) add(layouts map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for repo, src := range layouts {
		s.layouts[repo] = src
		delete(s.extract, src)
	}
}

// errImagePull is a failure to resolve or unpack an image: the container waits with
// ErrImagePull, as a kubelet's does.
type errImagePull struct{ err error }

func (e errImagePull) Error() string { return e.err.Error() }
func (e errImagePull) Unwrap() error { return e.err }

// parseImageRef splits repository[:tag][@sha256:hex]. A reference with neither tag nor digest
// is :latest, as a runtime reads it.
func parseImageRef(ref string) (repo, tag, digest string, err error) {
	rest := ref
	if i := strings.Index(rest, "@"); i >= 0 {
		rest, digest = rest[:i], rest[i+1:]
		if !validDigest(digest) {
			return "", "", "", fmt.Errorf("image %q: digest %q is not sha256:<64 hex>", ref, digest)
		}
	}
	// A colon after the last slash is the tag (one before it is a registry's port).
	if i := strings.LastIndex(rest, ":"); i > strings.LastIndex(rest, "/") {
		rest, tag = rest[:i], rest[i+1:]
		if tag == "" {
			return "", "", "", fmt.Errorf("image %q: empty tag", ref)
		}
	}
	if rest == "" {
		return "", "", "", fmt.Errorf("image %q: no repository", ref)
	}
	if tag == "" && digest == "" {
		tag = "latest"
	}
	return rest, tag, digest, nil
}

func validDigest(d string) bool {
	hexPart, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(hexPart) != 64 {
		return false
	}
	_, err := hex.DecodeString(hexPart)
	return err == nil && strings.ToLower(hexPart) == hexPart
}

// pull resolves ref for linux/<this machine's architecture> and returns the unpacked image.
// With both a tag and a digest, the digest decides (as a runtime pulls by digest).
func (s *imageStore) pull(ref string) (*pulledImage, error) {
	repo, tag, digest, err := parseImageRef(ref)
	if err != nil {
		return nil, errImagePull{err}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	src, ok := s.layouts[repo]
	if !ok {
		return nil, errImagePull{fmt.Errorf("image %q: repository %s is not in the lab node's images", ref, repo)}
	}
	layout, err := s.layoutDir(src)
	if err != nil {
		return nil, errImagePull{fmt.Errorf("image %q: %w", ref, err)}
	}
	var top ociIndex
	if err := readJSONFile(filepath.Join(layout, "index.json"), &top); err != nil {
		return nil, errImagePull{fmt.Errorf("image %q: layout %s: %w", ref, src, err)}
	}
	var found *ociDescriptor
	for i, d := range top.Manifests {
		if digest != "" && d.Digest == digest || digest == "" && d.Annotations[refNameKey] == tag {
			found = &top.Manifests[i]
			break
		}
	}
	if found == nil {
		want := "tag " + tag
		if digest != "" {
			want = "digest " + digest
		}
		return nil, errImagePull{fmt.Errorf("image %q: %s not found in %s (manifest unknown)", ref, want, src)}
	}
	resolved := found.Digest
	manifest := *found
	if manifest.MediaType == mediaIndex {
		var idx ociIndex
		if err := readBlobJSON(layout, manifest, &idx); err != nil {
			return nil, errImagePull{fmt.Errorf("image %q: %w", ref, err)}
		}
		var match *ociDescriptor
		for i, d := range idx.Manifests {
			if d.Platform != nil && d.Platform.OS == "linux" && d.Platform.Architecture == runtime.GOARCH {
				match = &idx.Manifests[i]
				break
			}
		}
		if match == nil {
			return nil, errImagePull{fmt.Errorf("image %q: no manifest for linux/%s", ref, runtime.GOARCH)}
		}
		manifest = *match
	}
	if manifest.MediaType != mediaManifest {
		return nil, errImagePull{fmt.Errorf("image %q: %s has media type %q, want an OCI manifest", ref, manifest.Digest, manifest.MediaType)}
	}
	if img, ok := s.unpacked[manifest.Digest]; ok {
		return &pulledImage{Rootfs: img.Rootfs, Config: img.Config, ID: img.ID, RepoDigest: repo + "@" + resolved}, nil
	}
	var m ociManifest
	if err := readBlobJSON(layout, manifest, &m); err != nil {
		return nil, errImagePull{fmt.Errorf("image %q: %w", ref, err)}
	}
	var cfg struct {
		OS           string      `json:"os"`
		Architecture string      `json:"architecture"`
		Config       imageConfig `json:"config"`
	}
	if err := readBlobJSON(layout, m.Config, &cfg); err != nil {
		return nil, errImagePull{fmt.Errorf("image %q: config: %w", ref, err)}
	}
	root := filepath.Join(s.dir, "rootfs", strings.TrimPrefix(manifest.Digest, "sha256:"))
	if err := unpackLayers(layout, m.Layers, root); err != nil {
		return nil, errImagePull{fmt.Errorf("image %q: %w", ref, err)}
	}
	img := &pulledImage{Rootfs: root, Config: cfg.Config, ID: m.Config.Digest, RepoDigest: repo + "@" + resolved}
	s.unpacked[manifest.Digest] = img
	return img, nil
}

// layoutDir returns src as a layout directory, extracting it (once) when it is a tar.
func (s *imageStore) layoutDir(src string) (string, error) {
	fi, err := os.Stat(src)
	if err != nil {
		return "", err
	}
	if fi.IsDir() {
		return src, nil
	}
	if d, ok := s.extract[src]; ok {
		return d, nil
	}
	sum := sha256.Sum256([]byte(src))
	dst := filepath.Join(s.dir, "layouts", hex.EncodeToString(sum[:8]))
	if err := os.RemoveAll(dst); err != nil {
		return "", err
	}
	f, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }() // read only
	if err := untar(f, dst, false); err != nil {
		return "", fmt.Errorf("extracting %s: %w", src, err)
	}
	s.extract[src] = dst
	return dst, nil
}

func readJSONFile(p string, v any) error {
	data, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(p), err)
	}
	return nil
}

// blobPath is where a layout keeps a descriptor's blob.
func blobPath(layout string, d ociDescriptor) (string, error) {
	if !validDigest(d.Digest) {
		return "", fmt.Errorf("descriptor digest %q is not sha256:<64 hex>", d.Digest)
	}
	return filepath.Join(layout, "blobs", "sha256", strings.TrimPrefix(d.Digest, "sha256:")), nil
}

// openBlob checks that a blob's size and digest are the descriptor's, as a runtime checks what
// it pulled before using it, and opens it.
func openBlob(layout string, d ociDescriptor) (*os.File, error) {
	p, err := blobPath(layout, d)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", d.Digest, err)
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	switch got := "sha256:" + hex.EncodeToString(h.Sum(nil)); {
	case err != nil:
		err = fmt.Errorf("blob %s: %w", d.Digest, err)
	case n != d.Size:
		err = fmt.Errorf("blob %s: %d bytes, the descriptor says %d", d.Digest, n, d.Size)
	case got != d.Digest:
		err = fmt.Errorf("blob %s: content has digest %s", d.Digest, got)
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

func readBlobJSON(layout string, d ociDescriptor, v any) error {
	r, err := openBlob(layout, d)
	if err != nil {
		return err
	}
	defer func() { _ = r.Close() }() // read only
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("blob %s: %w", d.Digest, err)
	}
	return nil
}

// unpackLayers applies the layers in order into root, unless root is there already (a root
// is only renamed into place complete).
func unpackLayers(layout string, layers []ociDescriptor, root string) error {
	if _, err := os.Stat(root); err == nil {
		return nil
	}
	tmp := root + ".partial"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	for _, l := range layers {
		if err := applyLayer(layout, l, tmp); err != nil {
			_ = os.RemoveAll(tmp)
			return err
		}
	}
	return os.Rename(tmp, root)
}

func applyLayer(layout string, l ociDescriptor, root string) error {
	var gz bool
	switch l.MediaType {
	case mediaLayer:
	case mediaLayerGzip:
		gz = true
	default:
		return fmt.Errorf("layer %s: media type %q is not supported (tar or tar+gzip)", l.Digest, l.MediaType)
	}
	r, err := openBlob(layout, l)
	if err != nil {
		return err
	}
	defer func() { _ = r.Close() }() // read only
	var in io.Reader = r
	if gz {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return fmt.Errorf("layer %s: %w", l.Digest, err)
		}
		defer func() { _ = zr.Close() }() // reading is over; its errors came from the reads
		in = zr
	}
	if err := untar(in, root, true); err != nil {
		return fmt.Errorf("layer %s: %w", l.Digest, err)
	}
	return nil
}

// untar writes the entries of a tar under dst. Names must stay inside dst (no absolute names, no
// ".." climbing out, no writing through a symlink). A layer (layer true) keeps owners and modes
// and applies whiteouts (.wh.<name> deletes <name>, .wh..wh..opq empties its directory).
func untar(r io.Reader, dst string, layer bool) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if name == "." {
			continue
		}
		if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("tar entry %q leaves the directory", h.Name)
		}
		target := filepath.Join(dst, filepath.FromSlash(name))
		if err := noSymlinkBetween(dst, filepath.Dir(target)); err != nil {
			return fmt.Errorf("tar entry %q: %w", h.Name, err)
		}
		base := path.Base(name)
		if layer && strings.HasPrefix(base, ".wh.") {
			dir := filepath.Dir(target)
			if base == ".wh..wh..opq" {
				entries, err := os.ReadDir(dir)
				if err != nil && !errors.Is(err, os.ErrNotExist) {
					return err
				}
				for _, e := range entries {
					if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
						return err
					}
				}
				continue
			}
			if err := os.RemoveAll(filepath.Join(dir, strings.TrimPrefix(base, ".wh."))); err != nil {
				return err
			}
			continue
		}
		mode := os.FileMode(h.Mode & 0o7777)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			_ = os.Remove(target)
			f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, tr); err != nil {
				_ = f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			_ = os.Remove(target)
			if err := os.Symlink(h.Linkname, target); err != nil {
				return err
			}
			continue // a symlink's mode and owner are not set
		default:
			return fmt.Errorf("tar entry %q: type %q is not supported", h.Name, h.Typeflag)
		}
		if !layer {
			continue
		}
		// Owners need root (the node is; a test as another user keeps its own).
		if os.Geteuid() == 0 {
			if err := os.Lchown(target, h.Uid, h.Gid); err != nil {
				return err
			}
		}
		// After chown, which clears set-id bits.
		if err := os.Chmod(target, modeBits(mode)); err != nil {
			return err
		}
	}
}

// modeBits turns tar mode bits into an os.FileMode (set-id and sticky bits included).
func modeBits(m os.FileMode) os.FileMode {
	out := m & 0o777
	if m&0o4000 != 0 {
		out |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		out |= os.ModeSetgid
	}
	if m&0o1000 != 0 {
		out |= os.ModeSticky
	}
	return out
}

// noSymlinkBetween fails when a directory between root (excluded) and dir (included) is a
// symlink: a tar entry must not be written through one, out of the root.
func noSymlinkBetween(root, dir string) error {
	rel, err := filepath.Rel(root, dir)
	if err != nil || rel == "." {
		return err
	}
	p := root
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		p = filepath.Join(p, part)
		fi, err := os.Lstat(p)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			return fmt.Errorf("%s is a symlink", p)
		}
	}
	return nil
}
