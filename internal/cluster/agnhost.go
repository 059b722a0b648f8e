package cluster

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// AgnhostRepo is the repository of Kubernetes' e2e test image agnhost, the backend the user
// guide's walkthrough deploys. The lab has no registry: `make assets` builds agnhost from the same
// k8s.io/kubernetes module as the control plane (test/images/agnhost), and with NoVpcgw the lab
// node serves it as this repository at the version it was built from (agnhost.version).
const AgnhostRepo = "registry.k8s.io/e2e-test-images/agnhost"

// AgnhostImage is the reference the lab node serves for the agnhost of assetsDir
// (registry.k8s.io/e2e-test-images/agnhost:2.66.1), or an error when make assets did not build it.
func AgnhostImage(assetsDir string) (string, error) {
	v, err := agnhostVersion(assetsDir)
	if err != nil {
		return "", err
	}
	return AgnhostRepo + ":" + v, nil
}

func agnhostVersion(assetsDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(assetsDir, "agnhost.version"))
	if err != nil {
		return "", fmt.Errorf("agnhost is not built (make assets): %w", err)
	}
	// "agnhost 2.66.1 from k8s.io/kubernetes v1.37.2" (hack/tools/build-assets.sh)
	f := strings.Fields(string(b))
	if len(f) < 2 || f[0] != "agnhost" || f[1] == "" {
		return "", fmt.Errorf("%s: %q names no agnhost version", filepath.Join(assetsDir, "agnhost.version"), b)
	}
	return f[1], nil
}

// nodeImages are the lab node's images: Options.Images, and agnhost with Options.Agnhost.
func (c *Cluster) nodeImages() (map[string]string, error) {
	if !c.opts.Agnhost {
		return c.opts.Images, nil
	}
	images := maps.Clone(c.opts.Images)
	if images == nil {
		images = map[string]string{}
	}
	layout := filepath.Join(c.dir, "agnhost-oci")
	if err := writeAgnhostLayout(c.opts.AssetsDir, layout); err != nil {
		return nil, fmt.Errorf("the lab node's agnhost image: %w", err)
	}
	images[AgnhostRepo] = layout
	return images, nil
}

// writeAgnhostLayout writes an OCI image layout into dir holding agnhost as the image does: the
// binary at /agnhost, the entrypoint ["/agnhost"], tagged with its version (the index's
// org.opencontainers.image.ref.name, as `make images` tags vpcgw's).
func writeAgnhostLayout(assetsDir, dir string) error {
	v, err := agnhostVersion(assetsDir)
	if err != nil {
		return err
	}
	blobs := filepath.Join(dir, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return err
	}
	layer, err := writeBinaryLayer(filepath.Join(assetsDir, "agnhost"), blobs, "agnhost")
	if err != nil {
		return err
	}
	config := map[string]any{
		"architecture": runtime.GOARCH, "os": "linux",
		"config": map[string]any{"Entrypoint": []string{"/agnhost"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layer.Digest}},
	}
	cfg, err := writeJSONBlob(blobs, "application/vnd.oci.image.config.v1+json", config)
	if err != nil {
		return err
	}
	manifest, err := writeJSONBlob(blobs, "application/vnd.oci.image.manifest.v1+json", map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "config": cfg, "layers": []ociBlob{layer},
	})
	if err != nil {
		return err
	}
	manifest.Annotations = map[string]string{"org.opencontainers.image.ref.name": v}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []ociBlob{manifest}})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "index.json"), index, 0o644)
}

// ociBlob is an OCI descriptor.
type ociBlob struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// writeBinaryLayer writes an uncompressed layer holding binary as /name (mode 0755).
func writeBinaryLayer(binary, blobs, name string) (ociBlob, error) {
	in, err := os.Open(binary)
	if err != nil {
		return ociBlob{}, err
	}
	defer func() { _ = in.Close() }() // read only
	fi, err := in.Stat()
	if err != nil {
		return ociBlob{}, err
	}
	tmp, err := os.CreateTemp(blobs, "layer-")
	if err != nil {
		return ociBlob{}, err
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // gone already once renamed
	h := sha256.New()
	tw := tar.NewWriter(io.MultiWriter(tmp, h))
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: fi.Size(), Typeflag: tar.TypeReg, ModTime: fi.ModTime()}); err != nil {
		return ociBlob{}, err
	}
	if _, err := io.Copy(tw, in); err != nil {
		return ociBlob{}, fmt.Errorf("layer of %s: %w", binary, err)
	}
	if err := tw.Close(); err != nil {
		return ociBlob{}, err
	}
	size, err := tmp.Seek(0, io.SeekCurrent)
	if err != nil {
		return ociBlob{}, err
	}
	if err := tmp.Close(); err != nil {
		return ociBlob{}, err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if err := os.Rename(tmp.Name(), filepath.Join(blobs, sum)); err != nil {
		return ociBlob{}, err
	}
	return ociBlob{MediaType: "application/vnd.oci.image.layer.v1.tar", Digest: "sha256:" + sum, Size: size}, nil
}

func writeJSONBlob(blobs, mediaType string, v any) (ociBlob, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return ociBlob{}, err
	}
	sum := sha256.Sum256(b)
	hexSum := hex.EncodeToString(sum[:])
	if err := os.WriteFile(filepath.Join(blobs, hexSum), b, 0o644); err != nil {
		return ociBlob{}, err
	}
	return ociBlob{MediaType: mediaType, Digest: "sha256:" + hexSum, Size: int64(len(b))}, nil
}
