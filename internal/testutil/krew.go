package testutil

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// KrewPlugin is a krew plugin manifest (krew.googlecontainertools.github.com/v1alpha2, kind Plugin).
type KrewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string `json:"version"`
		Homepage         string `json:"homepage"`
		ShortDescription string `json:"shortDescription"`
		Description      string `json:"description"`
		Caveats          string `json:"caveats"`
		Platforms        []struct {
			URI      string `json:"uri"`
			SHA256   string `json:"sha256"`
			Bin      string `json:"bin"`
			Selector *struct {
				MatchLabels      map[string]string `json:"matchLabels"`
				MatchExpressions []any             `json:"matchExpressions"`
			} `json:"selector"`
			Files []struct {
				From string `json:"from"`
				To   string `json:"to"`
			} `json:"files"`
		} `json:"platforms"`
	} `json:"spec"`
}

var (
	krewSafeName = regexp.MustCompile(`^[\w-]+$`)
	krewSHA256   = regexp.MustCompile(`^[a-f0-9]{64}$`)
	// krewSemver: krew's version rule (a v-prefixed semantic version).
	krewSemver = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)` +
		`(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)
	krewWindowsNames = []string{"CON", "PRN", "AUX", "NUL", "COM1", "COM2", "COM3", "COM4", "COM5", "COM6", "COM7", "COM8", "COM9",
		"LPT1", "LPT2", "LPT3", "LPT4", "LPT5", "LPT6", "LPT7", "LPT8", "LPT9"}
)

// ValidateKrewManifest checks a krew manifest read from the file path by the rules of krew's
// validate-krew-manifest (sigs.k8s.io/krew v0.4.3, internal/index/validation.ValidatePlugin):
// the plugin's name is the file's name without .yaml and a safe name, the apiVersion and kind,
// a one-line short description, a semver version, and per platform a uri, a sha256, a bin, files
// with from and to, and a non-empty selector. (The tool itself also downloads each platform's
// archive to install it, which needs the published release.)
func ValidateKrewManifest(path string, data []byte) (*KrewPlugin, error) {
	var p KrewPlugin
	if err := yaml.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	name := strings.TrimSuffix(filepath.Base(path), ".yaml")
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(p.APIVersion == "krew.googlecontainertools.github.com/v1alpha2", "apiVersion %q is not krew.googlecontainertools.github.com/v1alpha2", p.APIVersion)
	check(p.Kind == "Plugin", "kind %q is not Plugin", p.Kind)
	safe := krewSafeName.MatchString(name)
	for _, w := range krewWindowsNames {
		safe = safe && !strings.EqualFold(w, name)
	}
	check(safe, "the plugin name %q (from the file name) is not allowed, must match %s", name, krewSafeName)
	check(p.Metadata.Name == name, "plugin should be named %q (its file's name), not %q", name, p.Metadata.Name)
	check(p.Spec.ShortDescription != "" && !strings.ContainsAny(p.Spec.ShortDescription, "\r\n"), "the short description must be one non-empty line")
	check(krewSemver.MatchString(p.Spec.Version), "version %q is not a v-prefixed semantic version", p.Spec.Version)
	check(len(p.Spec.Platforms) > 0, "no platform")
	for i, pl := range p.Spec.Platforms {
		check(pl.URI != "", "platform %d: no uri", i)
		check(krewSHA256.MatchString(pl.SHA256), "platform %d: sha256 %q is not 64 lowercase hex digits", i, pl.SHA256)
		check(pl.Bin != "", "platform %d: no bin", i)
		check(pl.Files == nil || len(pl.Files) > 0, "platform %d: files must be unset or non-empty", i)
		for _, f := range pl.Files {
			check(f.From != "" && f.To != "", "platform %d: a file without from or to", i)
		}
		check(pl.Selector != nil && (len(pl.Selector.MatchLabels) > 0 || len(pl.Selector.MatchExpressions) > 0), "platform %d: an empty selector", i)
	}
	return &p, errors.Join(errs...)
}
