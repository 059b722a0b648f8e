package labnode

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// tarEntry is one entry of a test layer.
type tarEntry struct {
	name, data, link string
	mode             int64
	dir              bool
}

func layerTar(t *testing.T, gz bool, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Size: int64(len(e.data)), Typeflag: tar.TypeReg}
		switch {
		case e.dir:
			h.Typeflag, h.Size = tar.TypeDir, 0
		case e.link != "":
			h.Typeflag, h.Linkname, h.Size = tar.TypeSymlink, e.link, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if !gz {
		return buf.Bytes()
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	_, _ = zw.Write(buf.Bytes())
	_ = zw.Close()
	return z.Bytes()
}

// testLayout writes an OCI image layout as `make images` does: index.json names an image
// index by tag, the index has a manifest for this machine's linux architecture.
type testLayout struct {
	t   *testing.T
	dir string
}

func (l testLayout) blob(media string, data []byte) ociDescriptor {
	sum := sha256.Sum256(data)
	d := ociDescriptor{MediaType: media, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(data))}
	p := filepath.Join(l.dir, "blobs", "sha256", hex.EncodeToString(sum[:]))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		l.t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		l.t.Fatal(err)
	}
	return d
}

func (l testLayout) json(media string, v any) ociDescriptor {
	data, err := json.Marshal(v)
	if err != nil {
		l.t.Fatal(err)
	}
	return l.blob(media, data)
}

// image writes an image of the layers (each tar+gzip) and config under tag, and returns the
// digest of its index.
func (l testLayout) image(tag string, cfg imageConfig, layers ...[]byte) string {
	var descs []ociDescriptor
	for _, data := range layers {
		descs = append(descs, l.blob(mediaLayerGzip, data))
	}
	config := l.json("application/vnd.oci.image.config.v1+json", map[string]any{"os": "linux", "architecture": runtime.GOARCH, "config": cfg})
	manifest := l.json(mediaManifest, ociManifest{MediaType: mediaManifest, Config: config, Layers: descs})
	manifest.Platform = &struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
	}{"linux", runtime.GOARCH}
	idx := l.json(mediaIndex, ociIndex{MediaType: mediaIndex, Manifests: []ociDescriptor{manifest}})
	idx.Annotations = map[string]string{refNameKey: tag}
	var top ociIndex
	_ = readJSONFile(filepath.Join(l.dir, "index.json"), &top)
	top.MediaType = mediaIndex
	top.Manifests = append(top.Manifests, idx)
	data, _ := json.Marshal(top)
	if err := os.WriteFile(filepath.Join(l.dir, "index.json"), data, 0o644); err != nil {
		l.t.Fatal(err)
	}
	return idx.Digest
}

// tarDir writes dir as a tar file (the form of the release's .oci.tar archives).
func tarDir(t *testing.T, dir, out string) {
	t.Helper()
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }() // on a failure; closed and checked below otherwise
	tw := tar.NewWriter(f)
	err = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			_, err = tw.Write(data)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// An image is pulled by tag and by digest from a layout directory and from a tar of it: layers
// applied in order (a whiteout deletes, an opaque directory is emptied, modes kept), the
// configuration read, the platform's manifest chosen; the image ID is the config's digest.
// covers: O1
func TestImagePulledFromLayout(t *testing.T) {
	l := testLayout{t: t, dir: t.TempDir()}
	cfg := imageConfig{Entrypoint: []string{"/usr/bin/app"}, Cmd: []string{"serve"}, Env: []string{"PATH=/usr/bin"}, User: "65532", WorkingDir: "/"}
	digest := l.image("v1.2.3", cfg,
		layerTar(t, true,
			tarEntry{name: "usr/", dir: true, mode: 0o755},
			tarEntry{name: "usr/bin/app", data: "#!app", mode: 0o755},
			tarEntry{name: "etc/gone", data: "x", mode: 0o644},
			tarEntry{name: "cache/a", data: "a", mode: 0o644},
			tarEntry{name: "tmp/", dir: true, mode: 0o1777},
			tarEntry{name: "usr/bin/link", link: "app"},
		),
		layerTar(t, true,
			tarEntry{name: "etc/.wh.gone"},
			tarEntry{name: "cache/.wh..wh..opq"},
			tarEntry{name: "cache/b", data: "b", mode: 0o600},
		),
	)
	archive := filepath.Join(t.TempDir(), "app.oci.tar")
	tarDir(t, l.dir, archive)

	for _, src := range []string{l.dir, archive} {
		s := newImageStore(map[string]string{"registry.example:5000/team/app": src}, t.TempDir())
		for _, ref := range []string{"registry.example:5000/team/app:v1.2.3", "registry.example:5000/team/app@" + digest,
			"registry.example:5000/team/app:other@" + digest} {
			img, err := s.pull(ref)
			if err != nil {
				t.Fatalf("pull %s from %s: %v", ref, src, err)
			}
			if img.RepoDigest != "registry.example:5000/team/app@"+digest || !validDigest(img.ID) {
				t.Errorf("pull %s: repo digest %q, id %q", ref, img.RepoDigest, img.ID)
			}
			if strings.Join(img.Config.Entrypoint, " ") != "/usr/bin/app" || img.Config.User != "65532" || strings.Join(img.Config.Cmd, " ") != "serve" {
				t.Errorf("pull %s: config %+v", ref, img.Config)
			}
			root := img.Rootfs
			if data, err := os.ReadFile(filepath.Join(root, "usr/bin/app")); err != nil || string(data) != "#!app" {
				t.Errorf("usr/bin/app: %q, %v", data, err)
			}
			if fi, err := os.Stat(filepath.Join(root, "usr/bin/app")); err != nil || fi.Mode().Perm() != 0o755 {
				t.Errorf("usr/bin/app mode: %v, %v", fi, err)
			}
			if fi, err := os.Stat(filepath.Join(root, "tmp")); err != nil || fi.Mode()&os.ModeSticky == 0 {
				t.Errorf("tmp is not sticky: %v, %v", fi, err)
			}
			if target, err := os.Readlink(filepath.Join(root, "usr/bin/link")); err != nil || target != "app" {
				t.Errorf("usr/bin/link: %q, %v", target, err)
			}
			if _, err := os.Lstat(filepath.Join(root, "etc/gone")); !os.IsNotExist(err) {
				t.Errorf("etc/gone survived its whiteout: %v", err)
			}
			if _, err := os.Lstat(filepath.Join(root, "cache/a")); !os.IsNotExist(err) {
				t.Errorf("cache/a survived the opaque whiteout: %v", err)
			}
			if data, err := os.ReadFile(filepath.Join(root, "cache/b")); err != nil || string(data) != "b" {
				t.Errorf("cache/b: %q, %v", data, err)
			}
		}
	}
}

// What cannot be pulled fails with an error that says why, and nothing is left half-unpacked: an
// unknown repository, tag or digest, a malformed reference, a blob whose content does not match
// its digest, and layers whose entries would leave the root (an absolute name, "..", a write
// through a symlink).
// covers: O1
func TestImagePullRefusals(t *testing.T) {
	l := testLayout{t: t, dir: t.TempDir()}
	good := l.image("good", imageConfig{}, layerTar(t, true, tarEntry{name: "f", data: "x", mode: 0o644}))
	l.image("escape-dotdot", imageConfig{}, layerTar(t, true, tarEntry{name: "../outside", data: "x", mode: 0o644}))
	l.image("escape-abs", imageConfig{}, layerTar(t, true, tarEntry{name: "/abs/../../outside", data: "x", mode: 0o644}))
	l.image("escape-link", imageConfig{}, layerTar(t, true,
		tarEntry{name: "up", link: "/"},
		tarEntry{name: "up/outside", data: "x", mode: 0o644}))
	corrupt := l.image("corrupt", imageConfig{}, layerTar(t, true, tarEntry{name: "f", data: "y", mode: 0o644}))
	// Corrupt the layer of "corrupt": its blob no longer has its digest.
	var idx ociIndex
	var m ociManifest
	if err := readBlobJSON(l.dir, ociDescriptor{Digest: corrupt, Size: fileSize(t, l.dir, corrupt)}, &idx); err != nil {
		t.Fatal(err)
	}
	if err := readBlobJSON(l.dir, idx.Manifests[0], &m); err != nil {
		t.Fatal(err)
	}
	p, _ := blobPath(l.dir, m.Layers[0])
	data, _ := os.ReadFile(p)
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}

	cache := t.TempDir()
	s := newImageStore(map[string]string{"example/app": l.dir}, cache)
	for _, tc := range []struct{ ref, want string }{
		{"example/other:good", "repository example/other is not in the lab node's images"},
		{"example/app:missing", "tag missing not found"},
		{"example/app@sha256:" + strings.Repeat("0", 64), "digest sha256:000"},
		{"example/app@sha256:abc", "is not sha256:<64 hex>"},
		{"example/app:", "empty tag"},
		{"example/app:escape-dotdot", "leaves the directory"},
		{"example/app:escape-abs", "leaves the directory"},
		{"example/app:escape-link", "is a symlink"},
		{"example/app:corrupt", "content has digest"},
	} {
		_, err := s.pull(tc.ref)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("pull %s: %v, want an error with %q", tc.ref, err, tc.want)
		}
		var pullErr errImagePull
		if err != nil && !errors.As(err, &pullErr) {
			t.Errorf("pull %s: %T is not an image pull error", tc.ref, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(cache), "outside")); !os.IsNotExist(err) {
		t.Errorf("a layer wrote outside the root: %v", err)
	}
	entries, _ := os.ReadDir(filepath.Join(cache, "rootfs"))
	for _, e := range entries {
		t.Errorf("a refused image left a root: %s", e.Name())
	}
	if _, err := s.pull("example/app@" + good); err != nil {
		t.Errorf("the good image after the refusals: %v", err)
	}
}

func fileSize(t *testing.T, layout, digest string) int64 {
	t.Helper()
	p, err := blobPath(layout, ociDescriptor{Digest: digest})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
