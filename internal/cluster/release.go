package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The image repositories the release's chart and install.sh name (values image.repository, and
// the agent image beside it): the lab node runs what they pull from the release's OCI archives.
const (
	ReleaseImageRepo = "ghcr.io/vpcgw/vpcgw"
	ReleaseAgentRepo = "ghcr.io/vpcgw/vpcgw-agent"
)

// Release is a release directory as `make release` writes it (hack/tools/release).
type Release struct {
	Dir string
	// Version is the release's version, the images' tag (v0.3.0, v0.0.0-<hash>, ...).
	Version string
}

// OpenRelease reads the release in dir: its SHA256SUMS must be there (a release directory, not a
// build in progress) and its images.json must name the vpcgw image's tag.
func OpenRelease(dir string) (Release, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return Release{}, err
	}
	if _, err := os.Stat(filepath.Join(dir, "SHA256SUMS")); err != nil {
		return Release{}, fmt.Errorf("no release in %s (`make release` writes one): %w", dir, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "images.json"))
	if err != nil {
		return Release{}, fmt.Errorf("release %s: %w", dir, err)
	}
	var images map[string]struct {
		Tag string `json:"tag"`
	}
	if err := json.Unmarshal(b, &images); err != nil {
		return Release{}, fmt.Errorf("release %s: images.json: %w", dir, err)
	}
	v := images["vpcgw"].Tag
	if v == "" {
		return Release{}, fmt.Errorf("release %s: images.json names no tag for vpcgw: %s", dir, b)
	}
	return Release{Dir: dir, Version: v}, nil
}

// Path is a file of the release.
func (r Release) Path(name string) string { return filepath.Join(r.Dir, name) }

// Chart is the packaged chart (vpcgw-0.3.0.tgz for v0.3.0).
func (r Release) Chart() string {
	return r.Path("vpcgw-" + strings.TrimPrefix(r.Version, "v") + ".tgz")
}

// Images are the lab node's images for Options.Images: both repositories from the release's OCI
// archives.
func (r Release) Images() map[string]string {
	return map[string]string{
		ReleaseImageRepo: r.Path("vpcgw-" + r.Version + ".oci.tar"),
		ReleaseAgentRepo: r.Path("vpcgw-agent-" + r.Version + ".oci.tar"),
	}
}
