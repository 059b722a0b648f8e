// covers: O1 (helpers of the lab node's image tests, exported to package labnode_test)
package labnode

import "testing"

// TestImageFile is one file of an image WriteTestImage writes (a directory when Dir).
type TestImageFile struct {
	Name, Data string
	Mode       int64
	Dir        bool
}

// WriteTestImage writes an OCI image layout at dir holding one image, tagged tag, of one layer
// of files, with the given entrypoint, user and env; it returns the digest of the image's index.
func WriteTestImage(t *testing.T, dir, tag string, entrypoint []string, user string, env []string, files ...TestImageFile) string {
	t.Helper()
	entries := make([]tarEntry, 0, len(files))
	for _, f := range files {
		entries = append(entries, tarEntry{name: f.Name, data: f.Data, mode: f.Mode, dir: f.Dir})
	}
	l := testLayout{t: t, dir: dir}
	return l.image(tag, imageConfig{Entrypoint: entrypoint, User: user, Env: env, WorkingDir: "/work"}, layerTar(t, true, entries...))
}
