package labnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
)

// Volumes are prepared as the kubelet's volume plugins prepare them (k8s.io/kubernetes
// pkg/volume): emptyDir, hostPath, secret, configMap, downwardAPI and projected, the last four
// written with the kubelet's atomic-writer layout so that programs watching ..data see what they
// see on a real node.
//
// Service-account tokens are written once: the kubelet refreshes a projected token when 80% of
// its lifetime has passed, and the lab's Pods live shorter than the 1 h default. ConfigMaps and
// Secrets are likewise not re-synced while the Pod runs. fsGroup, defaultUser and per-item user
// are not applied: the files are root's, readable as their mode says (the default 0644 serves a
// container of any user; a 0400 file is not readable by a non-root container here, where a node
// would chown it to the fsGroup or the token to the container's user).

const (
	// defaultVolumeMode is the API's default defaultMode of secret, configMap, downwardAPI and
	// projected volumes (the API server sets it; a Pod built in memory may lack it).
	defaultVolumeMode int32 = 0o644
	// defaultTokenExpiration is the API's default expirationSeconds of a token projection.
	defaultTokenExpiration int64 = 3600
	// emptyDirPerm is the kubelet's mode for an emptyDir (and the emptyDir that secret,
	// configMap, downwardAPI and projected volumes wrap), whatever the umask.
	emptyDirPerm os.FileMode = 0o777

	dataDirName    = "..data"
	newDataDirName = "..data_tmp"
	// The atomic writer's limits on payload paths.
	maxFileNameLength = 255
	maxPathLength     = 4096
)

// podVolume is one prepared volume of a Pod: the host directory (or file) that a container's
// volumeMount binds, and whether the kubelet mounts it read-only whatever the mount says.
type podVolume struct {
	Path     string
	ReadOnly bool
}

// mountSpec is one bind mount of a container: host source, container path, read-only.
type mountSpec struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"readOnly,omitempty"`
}

// fileProjection is one file of an atomic-writer payload.
type fileProjection struct {
	data []byte
	mode int32
}

// prepareVolumes writes every volume of pod under dir (dir/<volume name>) and returns them by
// name. Calling it again for the same Pod updates the volumes in place as the kubelet's resync
// does: an emptyDir keeps its content, an atomic-writer volume gets a new payload directory.
func prepareVolumes(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, dir string) (map[string]podVolume, error) {
	// The kubelet's pod directories are 0750.
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("volumes of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	vols := make(map[string]podVolume, len(pod.Spec.Volumes))
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		fail := func(err error) (map[string]podVolume, error) {
			return nil, fmt.Errorf("volume %s of pod %s/%s: %w", v.Name, pod.Namespace, pod.Name, err)
		}
		// The API server guarantees DNS labels; checked again because the name is a path element.
		if errs := validation.IsDNS1123Label(v.Name); len(errs) > 0 {
			return fail(fmt.Errorf("invalid volume name: %s", strings.Join(errs, "; ")))
		}
		if _, dup := vols[v.Name]; dup {
			return fail(errors.New("duplicate volume name"))
		}
		pv, err := prepareVolume(ctx, cs, pod, v, filepath.Join(dir, v.Name))
		if err != nil {
			return fail(err)
		}
		vols[v.Name] = pv
	}
	return vols, nil
}

func prepareVolume(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, v *corev1.Volume, path string) (podVolume, error) {
	// secret, configMap, downwardAPI and projected volumes are read-only whatever the
	// volumeMount says (the kubelet's ReadOnlyAPIDataVolumes); emptyDir and hostPath are not.
	api := podVolume{Path: path, ReadOnly: true}
	switch src := v.VolumeSource; {
	case src.EmptyDir != nil:
		switch src.EmptyDir.Medium {
		case corev1.StorageMediumDefault, corev1.StorageMediumMemory:
			// Memory is a tmpfs on a real node; a directory behaves the same for the lab's
			// containers (sizeLimit, which the kubelet enforces by eviction, is not).
		default:
			return podVolume{}, fmt.Errorf("emptyDir medium %q is not supported by the lab node", src.EmptyDir.Medium)
		}
		if err := setupDir(path, src.EmptyDir.Mode); err != nil {
			return podVolume{}, err
		}
		return podVolume{Path: path}, nil
	case src.HostPath != nil:
		return hostPathVolume(src.HostPath)
	case src.Secret != nil:
		s := src.Secret
		payload, err := secretPayload(ctx, cs, pod.Namespace, s.SecretName, s.Items, modeOr(s.DefaultMode), isTrue(s.Optional))
		if err != nil {
			return podVolume{}, err
		}
		return api, writeVolume(path, payload)
	case src.ConfigMap != nil:
		c := src.ConfigMap
		payload, err := configMapPayload(ctx, cs, pod.Namespace, c.Name, c.Items, modeOr(c.DefaultMode), isTrue(c.Optional))
		if err != nil {
			return podVolume{}, err
		}
		return api, writeVolume(path, payload)
	case src.DownwardAPI != nil:
		payload, err := downwardAPIPayload(pod, src.DownwardAPI.Items, modeOr(src.DownwardAPI.DefaultMode))
		if err != nil {
			return podVolume{}, err
		}
		return api, writeVolume(path, payload)
	case src.Projected != nil:
		payload, err := projectedPayload(ctx, cs, pod, src.Projected)
		if err != nil {
			return podVolume{}, err
		}
		return api, writeVolume(path, payload)
	default:
		kind := volumeKind(&v.VolumeSource)
		if kind == "" {
			return podVolume{}, errors.New("no volume source")
		}
		return podVolume{}, fmt.Errorf("%s volumes are not supported by the lab node", kind)
	}
}

// volumeKind is the JSON name of the volume source that is set ("persistentVolumeClaim", ...).
func volumeKind(src *corev1.VolumeSource) string {
	v := reflect.ValueOf(src).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
			return name
		}
	}
	return ""
}

func modeOr(m *int32) int32 {
	if m == nil {
		return defaultVolumeMode
	}
	return *m
}

func isTrue(b *bool) bool { return b != nil && *b }

// setupDir makes an emptyDir as the kubelet does: mode (default 0777) set by chmod so that the
// umask does not narrow it.
func setupDir(dir string, mode *int32) error {
	perm := emptyDirPerm
	if mode != nil {
		perm = os.FileMode(*mode & 0o777)
		if *mode&0o1000 != 0 {
			perm |= os.ModeSticky
		}
	}
	if err := os.MkdirAll(dir, perm); err != nil {
		return err
	}
	return os.Chmod(dir, perm)
}

// hostPathVolume checks a hostPath as the kubelet's hostPath plugin does; the volume is the
// path itself.
func hostPathVolume(src *corev1.HostPathVolumeSource) (podVolume, error) {
	p := src.Path
	if err := noBacksteps(p); err != nil {
		return podVolume{}, fmt.Errorf("invalid hostPath %q: %w", p, err)
	}
	// The kubelet would resolve a relative path against its working directory, which means
	// nothing for a Pod; the bind mounts need an absolute source.
	if !filepath.IsAbs(p) {
		return podVolume{}, fmt.Errorf("invalid hostPath %q: not an absolute path", p)
	}
	t := corev1.HostPathUnset
	if src.Type != nil {
		t = *src.Type
	}
	if err := checkHostPathType(p, t); err != nil {
		return podVolume{}, err
	}
	return podVolume{Path: p}, nil
}

// checkHostPathType is the kubelet's checkTypeInternal: the *OrCreate types create a missing
// path (directory 0755, file 0644, umask applying as on a node) and check an existing one.
func checkHostPathType(p string, t corev1.HostPathType) error {
	switch t {
	case corev1.HostPathUnset:
		return nil
	case corev1.HostPathDirectoryOrCreate:
		if !pathExists(p) {
			if err := os.MkdirAll(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("hostPath %s: %w", p, err)
			}
			return nil
		}
		fallthrough
	case corev1.HostPathDirectory:
		return hostPathTypeIs(p, corev1.HostPathDirectory, "directory")
	case corev1.HostPathFileOrCreate:
		if !pathExists(p) {
			f, err := os.OpenFile(p, os.O_CREATE, 0o644)
			if f != nil {
				_ = f.Close()
			}
			if err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("hostPath %s: %w", p, err)
			}
			return nil
		}
		fallthrough
	case corev1.HostPathFile:
		return hostPathTypeIs(p, corev1.HostPathFile, "file")
	case corev1.HostPathSocket:
		return hostPathTypeIs(p, corev1.HostPathSocket, "socket file")
	case corev1.HostPathCharDev:
		return hostPathTypeIs(p, corev1.HostPathCharDev, "character device")
	case corev1.HostPathBlockDev:
		return hostPathTypeIs(p, corev1.HostPathBlockDev, "block device")
	default:
		return fmt.Errorf("%s is an invalid volume type", t)
	}
}

func pathExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func hostPathTypeIs(p string, want corev1.HostPathType, what string) error {
	got, err := hostFileType(p)
	if err != nil {
		return fmt.Errorf("hostPath type check failed, %s is not a %s, unable to determine its type: %w", p, what, err)
	}
	if got != want {
		return fmt.Errorf("hostPath type check failed: %s is not a %s, it's a %s", p, what, got)
	}
	return nil
}

// hostFileType is the kubelet's GetFileType: stat, following symlinks.
func hostFileType(p string) (corev1.HostPathType, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return "", err
	}
	m := fi.Mode()
	switch {
	case m&fs.ModeSocket != 0:
		return corev1.HostPathSocket, nil
	case m&fs.ModeCharDevice != 0:
		return corev1.HostPathCharDev, nil
	case m&fs.ModeDevice != 0:
		return corev1.HostPathBlockDev, nil
	case m.IsDir():
		return corev1.HostPathDirectory, nil
	case m.IsRegular():
		return corev1.HostPathFile, nil
	}
	return "", errors.New("only recognise file, directory, socket, block device and character device")
}

// noBacksteps is the API's ValidatePathNoBacksteps: no ".." element.
func noBacksteps(p string) error {
	if slices.Contains(strings.Split(filepath.ToSlash(p), "/"), "..") {
		return errors.New("must not contain '..'")
	}
	return nil
}

// Item paths are checked where they are read so that an error names the object; the atomic
// writer checks the whole payload again.

// secretPayload is the kubelet's secret.MakePayload over the Secret read through cs: all keys
// without items, else the items (a missing key is skipped when optional). A Secret that does not
// exist is an empty one when optional.
func secretPayload(ctx context.Context, cs kubernetes.Interface, ns, name string, items []corev1.KeyToPath, mode int32, optional bool) (map[string]fileProjection, error) {
	s, err := cs.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if !(apierrors.IsNotFound(err) && optional) {
			return nil, fmt.Errorf("secret %s/%s: %w", ns, name, err)
		}
		s = &corev1.Secret{}
	}
	payload := make(map[string]fileProjection, len(s.Data))
	if len(items) == 0 {
		for k, v := range s.Data {
			payload[k] = fileProjection{data: v, mode: mode}
		}
		return payload, nil
	}
	for _, it := range items {
		v, ok := s.Data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return nil, fmt.Errorf("secret %s/%s has no key %s", ns, name, it.Key)
		}
		if err := validatePayloadPath(it.Path); err != nil {
			return nil, fmt.Errorf("secret %s/%s key %s: %w", ns, name, it.Key, err)
		}
		payload[it.Path] = fileProjection{data: v, mode: itemMode(it.Mode, mode)}
	}
	return payload, nil
}

// configMapPayload is the kubelet's configmap.MakePayload: Data and BinaryData.
func configMapPayload(ctx context.Context, cs kubernetes.Interface, ns, name string, items []corev1.KeyToPath, mode int32, optional bool) (map[string]fileProjection, error) {
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if !(apierrors.IsNotFound(err) && optional) {
			return nil, fmt.Errorf("configmap %s/%s: %w", ns, name, err)
		}
		cm = &corev1.ConfigMap{}
	}
	payload := make(map[string]fileProjection, len(cm.Data)+len(cm.BinaryData))
	if len(items) == 0 {
		for k, v := range cm.Data {
			payload[k] = fileProjection{data: []byte(v), mode: mode}
		}
		for k, v := range cm.BinaryData {
			payload[k] = fileProjection{data: v, mode: mode}
		}
		return payload, nil
	}
	for _, it := range items {
		var data []byte
		if s, ok := cm.Data[it.Key]; ok {
			data = []byte(s)
		} else if b, ok := cm.BinaryData[it.Key]; ok {
			data = b
		} else {
			if optional {
				continue
			}
			return nil, fmt.Errorf("configmap %s/%s has no key %s", ns, name, it.Key)
		}
		if err := validatePayloadPath(it.Path); err != nil {
			return nil, fmt.Errorf("configmap %s/%s key %s: %w", ns, name, it.Key, err)
		}
		payload[it.Path] = fileProjection{data: data, mode: itemMode(it.Mode, mode)}
	}
	return payload, nil
}

func itemMode(m *int32, def int32) int32 {
	if m != nil {
		return *m
	}
	return def
}

// downwardAPIPayload is the kubelet's downwardapi.CollectData for the fields a volume may
// carry (the kubelet's fieldpath.ExtractFieldPathAsString): metadata.name, .namespace, .uid,
// .labels and .annotations (whole, as sorted key="value" lines, or one key by subscript).
// resourceFieldRef needs the node's allocatable resources, which the lab node does not model.
func downwardAPIPayload(pod *corev1.Pod, items []corev1.DownwardAPIVolumeFile, mode int32) (map[string]fileProjection, error) {
	payload := make(map[string]fileProjection, len(items))
	var errs []error
	for _, it := range items {
		if err := validatePayloadPath(it.Path); err != nil {
			errs = append(errs, fmt.Errorf("downwardAPI item: %w", err))
			continue
		}
		f := fileProjection{mode: itemMode(it.Mode, mode)}
		switch {
		case it.FieldRef != nil:
			v, err := downwardAPIField(pod, it.FieldRef.FieldPath)
			if err != nil {
				errs = append(errs, fmt.Errorf("downwardAPI %s: %w", it.Path, err))
				continue
			}
			f.data = []byte(v)
		case it.ResourceFieldRef != nil:
			errs = append(errs, fmt.Errorf("downwardAPI %s: resourceFieldRef is not supported by the lab node", it.Path))
			continue
		}
		payload[filepath.Clean(it.Path)] = f
	}
	return payload, errors.Join(errs...)
}

func downwardAPIField(pod *corev1.Pod, path string) (string, error) {
	switch {
	case path == "metadata.name", path == "metadata.namespace", path == "metadata.uid",
		path == "metadata.labels", path == "metadata.annotations",
		strings.HasPrefix(path, "metadata.labels['"), strings.HasPrefix(path, "metadata.annotations['"):
		// fieldValue (env.go) formats these as the kubelet's fieldpath package does.
		return fieldValue(pod, path, "", "")
	}
	return "", fmt.Errorf("unsupported fieldPath %q (a volume carries metadata.name, metadata.namespace, metadata.uid, metadata.labels and metadata.annotations)", path)
}

// projectedPayload is the kubelet's projected collectData: every source's files in one payload
// (a later source wins a path), all sources tried and their errors returned together.
func projectedPayload(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, src *corev1.ProjectedVolumeSource) (map[string]fileProjection, error) {
	mode := modeOr(src.DefaultMode)
	payload := make(map[string]fileProjection)
	var errs []error
	add := func(p map[string]fileProjection, err error) {
		if err != nil {
			errs = append(errs, err)
			return
		}
		maps.Copy(payload, p)
	}
	for i, s := range src.Sources {
		switch {
		case s.Secret != nil:
			add(secretPayload(ctx, cs, pod.Namespace, s.Secret.Name, s.Secret.Items, mode, isTrue(s.Secret.Optional)))
		case s.ConfigMap != nil:
			add(configMapPayload(ctx, cs, pod.Namespace, s.ConfigMap.Name, s.ConfigMap.Items, mode, isTrue(s.ConfigMap.Optional)))
		case s.DownwardAPI != nil:
			add(downwardAPIPayload(pod, s.DownwardAPI.Items, mode))
		case s.ServiceAccountToken != nil:
			if err := validatePayloadPath(s.ServiceAccountToken.Path); err != nil {
				errs = append(errs, fmt.Errorf("serviceAccountToken: %w", err))
				continue
			}
			token, err := tokenFor(ctx, cs, pod, s.ServiceAccountToken)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			// The kubelet makes the token 0600 when fsGroup is set, then 0640 owned by that
			// group; with root processes the default mode serves.
			payload[s.ServiceAccountToken.Path] = fileProjection{data: []byte(token), mode: mode}
		case s.ClusterTrustBundle != nil:
			errs = append(errs, fmt.Errorf("source %d: clusterTrustBundle projections are not supported by the lab node", i))
		case s.PodCertificate != nil:
			errs = append(errs, fmt.Errorf("source %d: podCertificate projections are not supported by the lab node", i))
		}
	}
	return payload, errors.Join(errs...)
}

// tokenFor requests a service account token for pod (TokenRequest, bound to the Pod) as the
// kubelet's token manager does for a serviceAccountToken projection.
func tokenFor(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, p *corev1.ServiceAccountTokenProjection) (string, error) {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default" // the ServiceAccount admission plugin's default
	}
	var auds []string // none: the API server's own audience
	if p.Audience != "" {
		auds = []string{p.Audience}
	}
	exp := p.ExpirationSeconds
	if exp == nil {
		d := defaultTokenExpiration
		exp = &d
	}
	tr, err := cs.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			Audiences:         auds,
			ExpirationSeconds: exp,
			BoundObjectRef: &authenticationv1.BoundObjectReference{
				Kind:       "Pod",
				APIVersion: "v1",
				Name:       pod.Name,
				UID:        pod.UID,
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token of service account %s/%s: %w", pod.Namespace, sa, err)
	}
	if tr.Status.Token == "" {
		return "", fmt.Errorf("token of service account %s/%s: the TokenRequest returned no token", pod.Namespace, sa)
	}
	return tr.Status.Token, nil
}

// writeVolume makes the wrapped emptyDir (as the kubelet's API-data plugins do) and writes the
// payload into it.
func writeVolume(dir string, payload map[string]fileProjection) error {
	if err := setupDir(dir, nil); err != nil {
		return err
	}
	return atomicWrite(dir, payload)
}

// atomicWrite is the kubelet's AtomicWriter.Write: the payload goes into a new timestamped
// directory ..<timestamp>, the symlink ..data is switched to it by a rename (atomic), each
// top-level path is a symlink <path> -> ..data/<path>, and the previous payload and the
// top-level paths it alone had are removed. An unchanged payload is not rewritten.
func atomicWrite(dir string, payload map[string]fileProjection) error {
	clean := make(map[string]fileProjection, len(payload))
	for p, f := range payload {
		if err := validatePayloadPath(p); err != nil {
			return err
		}
		clean[filepath.Clean(p)] = f
	}
	top := make(map[string]bool)
	for p := range clean {
		first, _, _ := strings.Cut(p, string(filepath.Separator))
		top[first] = true
	}

	dataDir := filepath.Join(dir, dataDirName)
	oldTs, err := os.Readlink(dataDir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		oldTs = ""
	}
	var stale []string
	write := true
	if oldTs != "" {
		if strings.Contains(oldTs, string(filepath.Separator)) || !strings.HasPrefix(oldTs, "..") {
			return fmt.Errorf("%s points to %q, not a payload directory", dataDir, oldTs)
		}
		entries, err := os.ReadDir(filepath.Join(dir, oldTs))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		for _, e := range entries {
			if !top[e.Name()] {
				stale = append(stale, e.Name())
			}
		}
		if len(stale) == 0 && samePayload(filepath.Join(dir, oldTs), clean) {
			write, oldTs = false, ""
		}
	}

	if write {
		tsDir, err := os.MkdirTemp(dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
		if err != nil {
			return err
		}
		// 0755 so that group and other can traverse it, whatever the umask.
		err = os.Chmod(tsDir, 0o755)
		if err == nil {
			err = writePayload(tsDir, clean)
		}
		newDataDir := filepath.Join(dir, newDataDirName)
		if err == nil {
			// A ..data_tmp left by an interrupted write would make the symlink fail.
			_ = os.Remove(newDataDir)
			err = os.Symlink(filepath.Base(tsDir), newDataDir)
		}
		if err == nil {
			if err = os.Rename(newDataDir, dataDir); err != nil {
				_ = os.Remove(newDataDir)
			}
		}
		if err != nil {
			_ = os.RemoveAll(tsDir)
			return err
		}
	}

	// Created after ..data so that they never dangle.
	for _, name := range slices.Sorted(maps.Keys(top)) {
		visible := filepath.Join(dir, name)
		if _, err := os.Lstat(visible); errors.Is(err, fs.ErrNotExist) {
			if err := os.Symlink(filepath.Join(dataDirName, name), visible); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
	}
	var lastErr error
	for _, name := range stale {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			lastErr = err
		}
	}
	if lastErr != nil {
		return lastErr
	}
	if oldTs != "" {
		return os.RemoveAll(filepath.Join(dir, oldTs))
	}
	return nil
}

// validatePayloadPath is the atomic writer's validatePath: relative, no ".." element, not
// starting with ".." (the writer's own names), file names of at most 255 bytes, at most 4096 in
// all. Other paths are cleaned as the writer cleans them ("a//b" is "a/b"); one that cleans to
// the volume itself is rejected.
func validatePayloadPath(p string) error {
	switch {
	case p == "":
		return errors.New("invalid path: must not be empty")
	case filepath.IsAbs(p):
		return fmt.Errorf("invalid path %q: must be a relative path", p)
	case len(p) > maxPathLength:
		return fmt.Errorf("invalid path: must be less than or equal to %d characters", maxPathLength)
	case filepath.Clean(p) == ".":
		return fmt.Errorf("invalid path %q: must name a file inside the volume", p)
	}
	items := strings.Split(p, string(filepath.Separator))
	for _, it := range items {
		if it == ".." {
			return fmt.Errorf("invalid path %q: must not contain '..'", p)
		}
		if len(it) > maxFileNameLength {
			return fmt.Errorf("invalid path %q: file names must be less than or equal to %d characters", p, maxFileNameLength)
		}
	}
	// Checked on the cleaned path too: "./..data" would otherwise land on the writer's names.
	first, _, _ := strings.Cut(filepath.Clean(p), string(filepath.Separator))
	if (strings.HasPrefix(items[0], "..") && len(items[0]) > 2) || strings.HasPrefix(first, "..") {
		return fmt.Errorf("invalid path %q: must not start with '..'", p)
	}
	return nil
}

// samePayload tells whether the payload directory already holds the payload's data (the
// writer compares content only, as the kubelet's shouldWritePayload does).
func samePayload(tsDir string, payload map[string]fileProjection) bool {
	for p, f := range payload {
		b, err := os.ReadFile(filepath.Join(tsDir, p))
		if err != nil || !bytes.Equal(b, f.data) {
			return false
		}
	}
	return true
}

func writePayload(tsDir string, payload map[string]fileProjection) error {
	for _, p := range slices.Sorted(maps.Keys(payload)) {
		f := payload[p]
		full := filepath.Join(tsDir, p)
		if err := os.MkdirAll(filepath.Dir(full), os.ModePerm); err != nil {
			return err
		}
		mode := os.FileMode(f.mode).Perm()
		if err := os.WriteFile(full, f.data, mode); err != nil {
			return err
		}
		// WriteFile's mode is narrowed by the umask; the item's mode must hold as written.
		if err := os.Chmod(full, mode); err != nil {
			return err
		}
	}
	return nil
}

// volumeMounts resolves a container's volumeMounts against the prepared volumes: host source,
// container path, read-only, in the order given (subPath supported: the source is Path/subPath,
// which must stay inside Path). An unknown volume name or a bad subPath is an error naming the
// container and the mount.
func volumeMounts(c *corev1.Container, vols map[string]podVolume) ([]mountSpec, error) {
	mounts := make([]mountSpec, 0, len(c.VolumeMounts))
	for _, m := range c.VolumeMounts {
		fail := func(err error) ([]mountSpec, error) {
			return nil, fmt.Errorf("container %s volumeMount %s at %s: %w", c.Name, m.Name, m.MountPath, err)
		}
		v, ok := vols[m.Name]
		if !ok {
			return fail(fmt.Errorf("the pod has no volume %s", m.Name))
		}
		if m.MountPath == "" {
			return fail(errors.New("empty mountPath"))
		}
		if m.SubPathExpr != "" {
			// The kubelet expands it with the container's environment, which is not at hand.
			return fail(errors.New("subPathExpr is not supported by the lab node"))
		}
		src := v.Path
		if m.SubPath != "" {
			var err error
			if src, err = subPathSource(v.Path, m.SubPath); err != nil {
				return fail(err)
			}
		}
		target := m.MountPath
		if !filepath.IsAbs(target) {
			target = "/" + target // the kubelet's MakeAbsolutePath on Linux
		}
		mounts = append(mounts, mountSpec{Source: src, Target: target, ReadOnly: m.ReadOnly || v.ReadOnly})
	}
	return mounts, nil
}

// subPathSource resolves subPath inside the volume at base as the kubelet does: no absolute path
// or ".." element, a missing path created as directories with the volume's mode (inside the
// volume), and the result, symlinks resolved, inside the volume. The resolved path is returned
// so that the bind mount cannot be redirected by a symlink swapped in afterwards. (The kubelet
// goes further with openat and bind-mounting /proc/self/fd; the lab's Pods are trusted.)
func subPathSource(base, subPath string) (string, error) {
	if filepath.IsAbs(subPath) {
		return "", fmt.Errorf("subPath %q must not be an absolute path", subPath)
	}
	if err := noBacksteps(subPath); err != nil {
		return "", fmt.Errorf("subPath %q %w", subPath, err)
	}
	realBase, err := filepath.EvalSymlinks(base)
	if err != nil {
		return "", fmt.Errorf("subPath %q: resolving the volume: %w", subPath, err)
	}
	full := filepath.Join(realBase, subPath)
	if _, err := os.Stat(full); errors.Is(err, fs.ErrNotExist) {
		if err := makeSubPathDirs(realBase, subPath); err != nil {
			return "", fmt.Errorf("subPath %q: %w", subPath, err)
		}
	}
	resolved, err := filepath.EvalSymlinks(full)
	if err != nil {
		return "", fmt.Errorf("subPath %q: %w", subPath, err)
	}
	if !pathWithin(resolved, realBase) {
		return "", fmt.Errorf("subPath %q resolves to %s, outside the volume", subPath, resolved)
	}
	return resolved, nil
}

// makeSubPathDirs is the kubelet's SafeMakeDir: the existing part of subPath must resolve inside
// base; the missing rest is created with base's mode.
func makeSubPathDirs(base, subPath string) error {
	fi, err := os.Stat(base)
	if err != nil {
		return err
	}
	perm := fi.Mode().Perm()
	elems := strings.Split(filepath.Clean(subPath), string(filepath.Separator))
	existing, i := base, 0
	for ; i < len(elems); i++ {
		next := filepath.Join(existing, elems[i])
		if _, err := os.Lstat(next); errors.Is(err, fs.ErrNotExist) {
			break
		} else if err != nil {
			return err
		}
		existing = next
	}
	cur, err := filepath.EvalSymlinks(existing)
	if err != nil {
		return err
	}
	if !pathWithin(cur, base) {
		return fmt.Errorf("%s resolves to %s, outside the volume", existing, cur)
	}
	for _, e := range elems[i:] {
		cur = filepath.Join(cur, e)
		if err := os.Mkdir(cur, perm); err != nil {
			return err
		}
		if err := os.Chmod(cur, perm); err != nil {
			return err
		}
	}
	return nil
}

// pathWithin is mount-utils' PathWithinBase.
func pathWithin(p, base string) bool {
	rel, err := filepath.Rel(base, p)
	if err != nil {
		return false
	}
	return rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
