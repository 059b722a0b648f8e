package labnode

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// tokenRequests records the TokenRequests a fake clientset received.
type tokenRequests struct {
	mu   sync.Mutex
	sa   []string
	reqs []*authenticationv1.TokenRequest
}

func (r *tokenRequests) get() ([]string, []*authenticationv1.TokenRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.sa...), append([]*authenticationv1.TokenRequest(nil), r.reqs...)
}

// fakeCS is a fake clientset holding objs whose TokenRequest API answers "token-for-<sa>" for
// each audience-less request and "token-for-<sa>-<audience>" otherwise.
func fakeCS(objs ...runtime.Object) (*fake.Clientset, *tokenRequests) {
	cs := fake.NewClientset(objs...)
	rec := &tokenRequests{}
	cs.PrependReactor("create", "serviceaccounts", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "token" {
			return false, nil, nil
		}
		create := action.(k8stesting.CreateActionImpl)
		tr := create.GetObject().(*authenticationv1.TokenRequest).DeepCopy()
		rec.mu.Lock()
		rec.sa = append(rec.sa, action.GetNamespace()+"/"+create.Name)
		rec.reqs = append(rec.reqs, tr.DeepCopy())
		rec.mu.Unlock()
		tr.Status.Token = "token-for-" + create.Name
		if len(tr.Spec.Audiences) > 0 {
			tr.Status.Token += "-" + strings.Join(tr.Spec.Audiences, ",")
		}
		return true, tr, nil
	})
	return cs, rec
}

func volumePod(vols ...corev1.Volume) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   "ns1",
			Name:        "gw-0",
			UID:         "0b6a2d5c-1111-2222-3333-444455556666",
			Labels:      map[string]string{"app": "gw", "tier": `a"b`},
			Annotations: map[string]string{"z": "last", "a": "first"},
		},
		Spec: corev1.PodSpec{ServiceAccountName: "gw", Volumes: vols},
	}
}

func ptr[T any](v T) *T { return &v }

// readVolumeFile reads name under the volume, following its symlinks, and returns its content
// and mode.
func readVolumeFile(t *testing.T, vol, name string) (string, fs.FileMode) {
	t.Helper()
	p := filepath.Join(vol, name)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("reading %s: %v", name, err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), fi.Mode().Perm()
}

// checkAtomicLayout checks the atomic writer's layout: ..data a symlink to a ..<timestamp>
// directory of the volume, each top-level name a symlink to ..data/<name>, nothing else
// visible.
func checkAtomicLayout(t *testing.T, vol string, top ...string) string {
	t.Helper()
	ts, err := os.Readlink(filepath.Join(vol, "..data"))
	if err != nil {
		t.Fatalf("..data: %v", err)
	}
	if !strings.HasPrefix(ts, "..") || strings.Contains(ts, "/") || ts == "..data" {
		t.Fatalf("..data -> %q, want a ..<timestamp> directory", ts)
	}
	if fi, err := os.Lstat(filepath.Join(vol, ts)); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o755 {
		t.Fatalf("%s: %v %v, want a 0755 directory", ts, fi, err)
	}
	want := map[string]bool{"..data": true, ts: true}
	for _, name := range top {
		want[name] = true
		link, err := os.Readlink(filepath.Join(vol, name))
		if err != nil {
			t.Fatalf("%s is not a symlink: %v", name, err)
		}
		if link != filepath.Join("..data", name) {
			t.Errorf("%s -> %s, want ..data/%s", name, link, name)
		}
	}
	entries, err := os.ReadDir(vol)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !want[e.Name()] {
			t.Errorf("unexpected %s in the volume", e.Name())
		}
		delete(want, e.Name())
	}
	for name := range want {
		t.Errorf("%s missing from the volume", name)
	}
	return ts
}

// covers: O1
func TestPrepareVolumesKubeAPIAccess(t *testing.T) {
	// The volume the ServiceAccount admission plugin adds to every Pod, as it writes it.
	kubeAPIAccess := corev1.Volume{Name: "kube-api-access-x7k2p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: ptr(int32(0o644)),
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{ExpirationSeconds: ptr(int64(3607)), Path: "token"}},
			{ConfigMap: &corev1.ConfigMapProjection{
				LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
			}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{
				Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"},
			}}}},
		},
	}}}
	// A token for another audience with the API's defaults left out, and pod metadata.
	other := corev1.Volume{Name: "vault", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: ptr(int32(0o600)),
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: "vault", Path: "sa/token"}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
				{Path: "meta/annotations", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations"}, Mode: ptr(int32(0o444))},
				{Path: "meta/name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}},
				{Path: "meta/uid", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}},
				{Path: "meta/app", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['app']"}},
			}}},
		},
	}}}
	pod := volumePod(kubeAPIAccess, other)
	const ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	cs, rec := fakeCS(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "kube-root-ca.crt"},
		Data:       map[string]string{"ca.crt": ca},
	})
	dir := t.TempDir()
	vols, err := prepareVolumes(context.Background(), cs, pod, dir)
	if err != nil {
		t.Fatal(err)
	}

	v := vols[kubeAPIAccess.Name]
	if v.Path != filepath.Join(dir, kubeAPIAccess.Name) || !v.ReadOnly {
		t.Fatalf("kube-api-access volume %+v, want %s read-only", v, filepath.Join(dir, kubeAPIAccess.Name))
	}
	ts := checkAtomicLayout(t, v.Path, "ca.crt", "namespace", "token")
	for name, want := range map[string]string{"token": "token-for-gw", "ca.crt": ca, "namespace": "ns1"} {
		got, mode := readVolumeFile(t, v.Path, name)
		if got != want || mode != 0o644 {
			t.Errorf("%s: %q mode %o, want %q mode 644", name, got, mode, want)
		}
		// The payload is a regular file in the timestamped directory.
		if fi, err := os.Lstat(filepath.Join(v.Path, ts, name)); err != nil || !fi.Mode().IsRegular() {
			t.Errorf("%s/%s: %v %v, want a regular file", ts, name, fi, err)
		}
	}

	v = vols["vault"]
	checkAtomicLayout(t, v.Path, "labels", "meta", "sa")
	for name, want := range map[string]struct {
		data string
		mode fs.FileMode
	}{
		"sa/token":         {"token-for-gw-vault", 0o600},
		"labels":           {"app=\"gw\"\ntier=\"a\\\"b\"", 0o600},
		"meta/annotations": {"a=\"first\"\nz=\"last\"", 0o444},
		"meta/name":        {"gw-0", 0o600},
		"meta/uid":         {string(pod.UID), 0o600},
		"meta/app":         {"gw", 0o600},
	} {
		got, mode := readVolumeFile(t, v.Path, name)
		if got != want.data || mode != want.mode {
			t.Errorf("%s: %q mode %o, want %q mode %o", name, got, mode, want.data, want.mode)
		}
	}

	sas, reqs := rec.get()
	if len(reqs) != 2 {
		t.Fatalf("%d TokenRequests, want 2", len(reqs))
	}
	for i, want := range []struct {
		auds []string
		exp  int64
	}{{nil, 3607}, {[]string{"vault"}, 3600}} {
		r := reqs[i].Spec
		if sas[i] != "ns1/gw" {
			t.Errorf("request %d for service account %s, want ns1/gw", i, sas[i])
		}
		if strings.Join(r.Audiences, ",") != strings.Join(want.auds, ",") || (want.auds == nil) != (r.Audiences == nil) {
			t.Errorf("request %d audiences %q, want %q", i, r.Audiences, want.auds)
		}
		if r.ExpirationSeconds == nil || *r.ExpirationSeconds != want.exp {
			t.Errorf("request %d expirationSeconds %v, want %d", i, r.ExpirationSeconds, want.exp)
		}
		ref := r.BoundObjectRef
		if ref == nil || ref.Kind != "Pod" || ref.APIVersion != "v1" || ref.Name != pod.Name || ref.UID != pod.UID {
			t.Errorf("request %d boundObjectRef %+v, want the pod", i, ref)
		}
	}

	// Without serviceAccountName the token is the "default" service account's.
	pod.Spec.ServiceAccountName = ""
	if _, err := prepareVolumes(context.Background(), cs, pod, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if sas, _ := rec.get(); sas[2] != "ns1/default" {
		t.Errorf("request for service account %s, want ns1/default", sas[2])
	}
}

// covers: O1
func TestPrepareVolumesSecretItemsAndDefaultMode(t *testing.T) {
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "creds"},
		Data:       map[string][]byte{"user": []byte("admin"), "pass": []byte("s3cret"), "extra": []byte("x")},
	}
	pod := volumePod(
		corev1.Volume{Name: "items", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName:  "creds",
			DefaultMode: ptr(int32(0o440)),
			Items: []corev1.KeyToPath{
				{Key: "user", Path: "db/user", Mode: ptr(int32(0o400))},
				{Key: "pass", Path: "db/pass"},
			},
		}}},
		corev1.Volume{Name: "all", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds"}}},
	)
	cs, _ := fakeCS(secret)
	dir := t.TempDir()
	vols, err := prepareVolumes(context.Background(), cs, pod, dir)
	if err != nil {
		t.Fatal(err)
	}
	items := vols["items"]
	if !items.ReadOnly {
		t.Error("a secret volume is read-only")
	}
	if fi, err := os.Stat(items.Path); err != nil || fi.Mode().Perm() != 0o777 {
		t.Errorf("volume directory %v %v, want mode 777 (the wrapped emptyDir's)", fi, err)
	}
	checkAtomicLayout(t, items.Path, "db")
	for name, want := range map[string]struct {
		data string
		mode fs.FileMode
	}{"db/user": {"admin", 0o400}, "db/pass": {"s3cret", 0o440}} {
		got, mode := readVolumeFile(t, items.Path, name)
		if got != want.data || mode != want.mode {
			t.Errorf("%s: %q mode %o, want %q mode %o", name, got, mode, want.data, want.mode)
		}
	}
	all := vols["all"]
	checkAtomicLayout(t, all.Path, "extra", "pass", "user")
	for k, want := range secret.Data {
		got, mode := readVolumeFile(t, all.Path, k)
		if got != string(want) || mode != 0o644 {
			t.Errorf("%s: %q mode %o, want %q mode 644", k, got, mode, want)
		}
	}

	// Prepared again after the Secret changed: a new payload, the old one and the key that
	// went away removed, as the kubelet's resync does.
	oldTs, _ := os.Readlink(filepath.Join(all.Path, "..data"))
	secret.Data = map[string][]byte{"user": []byte("root"), "pass": []byte("s3cret")}
	if _, err := cs.CoreV1().Secrets("ns1").Update(context.Background(), secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := prepareVolumes(context.Background(), cs, pod, dir); err != nil {
		t.Fatal(err)
	}
	newTs := checkAtomicLayout(t, all.Path, "pass", "user")
	if newTs == oldTs {
		t.Error("..data still points to the old payload")
	}
	if got, _ := readVolumeFile(t, all.Path, "user"); got != "root" {
		t.Errorf("user %q after the update, want root", got)
	}
	// Unchanged: not rewritten.
	if _, err := prepareVolumes(context.Background(), cs, pod, dir); err != nil {
		t.Fatal(err)
	}
	if ts := checkAtomicLayout(t, all.Path, "pass", "user"); ts != newTs {
		t.Errorf("an unchanged payload was rewritten (%s -> %s)", newTs, ts)
	}
}

// covers: O1
func TestPrepareVolumesConfigMapBinaryData(t *testing.T) {
	blob := []byte{0, 1, 2, 0xfe, 0xff}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "cfg"},
		Data:       map[string]string{"app.conf": "listen 80\n"},
		BinaryData: map[string][]byte{"blob.bin": blob},
	}
	pod := volumePod(
		corev1.Volume{Name: "all", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"},
		}}},
		corev1.Volume{Name: "one", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"},
			Items:                []corev1.KeyToPath{{Key: "blob.bin", Path: "data/b", Mode: ptr(int32(0o600))}},
		}}},
	)
	cs, _ := fakeCS(cm)
	vols, err := prepareVolumes(context.Background(), cs, pod, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	all := vols["all"]
	checkAtomicLayout(t, all.Path, "app.conf", "blob.bin")
	if got, mode := readVolumeFile(t, all.Path, "app.conf"); got != "listen 80\n" || mode != 0o644 {
		t.Errorf("app.conf %q mode %o", got, mode)
	}
	if got, mode := readVolumeFile(t, all.Path, "blob.bin"); got != string(blob) || mode != 0o644 {
		t.Errorf("blob.bin %q mode %o, want %q", got, mode, blob)
	}
	one := vols["one"]
	checkAtomicLayout(t, one.Path, "data")
	if got, mode := readVolumeFile(t, one.Path, "data/b"); got != string(blob) || mode != 0o600 {
		t.Errorf("data/b %q mode %o, want %q mode 600", got, mode, blob)
	}
}

// covers: O1
func TestPrepareVolumesOptional(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "cfg"}, Data: map[string]string{"a": "1"}}
	cs, _ := fakeCS(cm)

	// Optional: a missing object is an empty volume, a missing key is skipped.
	pod := volumePod(
		corev1.Volume{Name: "nosecret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: "missing", Optional: ptr(true),
		}}},
		corev1.Volume{Name: "nokey", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"},
			Optional:             ptr(true),
			Items:                []corev1.KeyToPath{{Key: "a", Path: "a"}, {Key: "b", Path: "b"}},
		}}},
		corev1.Volume{Name: "proj", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{
				{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "missing"}, Optional: ptr(true)}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}},
			},
		}}},
	)
	vols, err := prepareVolumes(context.Background(), cs, pod, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	checkAtomicLayout(t, vols["nosecret"].Path)
	checkAtomicLayout(t, vols["nokey"].Path, "a")
	checkAtomicLayout(t, vols["proj"].Path, "a")

	// Required: an error naming the pod, the volume and the object (or key).
	for _, tc := range []struct {
		name string
		vol  corev1.Volume
		want []string
	}{
		{"secret", corev1.Volume{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "missing"}}},
			[]string{"volume creds of pod ns1/gw-0: secret ns1/missing: ", "not found"}},
		{"optional false", corev1.Volume{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "missing", Optional: ptr(false)}}},
			[]string{"volume creds of pod ns1/gw-0: secret ns1/missing: ", "not found"}},
		{"configmap key", corev1.Volume{Name: "conf", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"},
			Items:                []corev1.KeyToPath{{Key: "b", Path: "b"}},
		}}}, []string{"volume conf of pod ns1/gw-0: configmap ns1/cfg has no key b"}},
		{"projected", corev1.Volume{Name: "proj", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "nocm"}}}},
		}}}, []string{"volume proj of pod ns1/gw-0: configmap ns1/nocm: ", "not found"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := prepareVolumes(context.Background(), cs, volumePod(tc.vol), dir)
			if err == nil {
				t.Fatal("no error")
			}
			t.Log(err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if _, err := os.Lstat(filepath.Join(dir, tc.vol.Name)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the failed volume was created (%v)", err)
			}
		})
	}
}

// covers: O1
func TestPrepareVolumesBadPaths(t *testing.T) {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "s"}, Data: map[string][]byte{"k": []byte("v")}}
	cs, _ := fakeCS(secret)
	for _, p := range []string{"../escape", "a/../../escape", "a/../b", "/etc/escape", "..data", "..2026_01_01", "./..data", ".", ""} {
		t.Run(p, func(t *testing.T) {
			dir := t.TempDir()
			pod := volumePod(corev1.Volume{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: "s", Items: []corev1.KeyToPath{{Key: "k", Path: p}},
			}}})
			_, err := prepareVolumes(context.Background(), cs, pod, filepath.Join(dir, "pod"))
			t.Log(err)
			if err == nil || !strings.Contains(err.Error(), "volume s of pod ns1/gw-0: secret ns1/s key k: invalid path") {
				t.Fatalf("path %q: error %v, want an invalid path error", p, err)
			}
			// Nothing written anywhere: the payload is validated first.
			_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					t.Errorf("%s written", p)
				}
				return nil
			})
		})
	}
	// Unclean but harmless paths are cleaned as the kubelet's atomic writer cleans them.
	pod := volumePod(corev1.Volume{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: "s", Items: []corev1.KeyToPath{{Key: "k", Path: "./a//b"}},
	}}})
	vols, err := prepareVolumes(context.Background(), cs, pod, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := readVolumeFile(t, vols["s"].Path, "a/b"); got != "v" {
		t.Errorf("a/b %q, want v", got)
	}
}

// covers: O1
func TestPrepareVolumesEmptyDirAndUnsupported(t *testing.T) {
	cs, _ := fakeCS()
	dir := t.TempDir()
	pod := volumePod(
		corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		corev1.Volume{Name: "mem", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
	)
	vols, err := prepareVolumes(context.Background(), cs, pod, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"scratch", "mem"} {
		v := vols[name]
		if v.Path != filepath.Join(dir, name) || v.ReadOnly {
			t.Errorf("%s: %+v, want %s read-write", name, v, filepath.Join(dir, name))
		}
		if fi, err := os.Stat(v.Path); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o777 {
			t.Errorf("%s: %v %v, want a 0777 directory", name, fi, err)
		}
		if entries, _ := os.ReadDir(v.Path); len(entries) != 0 {
			t.Errorf("%s is not empty: %v", name, entries)
		}
	}
	// Content survives a second preparation (a container restart keeps an emptyDir).
	if err := os.WriteFile(filepath.Join(dir, "scratch", "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := prepareVolumes(context.Background(), cs, pod, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "scratch", "f")); err != nil {
		t.Errorf("emptyDir content lost: %v", err)
	}

	pvc := volumePod(corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c"},
	}})
	_, err = prepareVolumes(context.Background(), cs, pvc, t.TempDir())
	if want := "volume data of pod ns1/gw-0: persistentVolumeClaim volumes are not supported by the lab node"; err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
	huge := volumePod(corev1.Volume{Name: "hp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumHugePages}}})
	if _, err := prepareVolumes(context.Background(), cs, huge, t.TempDir()); err == nil || !strings.Contains(err.Error(), "medium") {
		t.Errorf("hugepages emptyDir: error %v", err)
	}
	badField := volumePod(corev1.Volume{Name: "dw", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
		Items: []corev1.DownwardAPIVolumeFile{{Path: "node", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
	}}})
	if _, err := prepareVolumes(context.Background(), cs, badField, t.TempDir()); err == nil || !strings.Contains(err.Error(), `unsupported fieldPath "spec.nodeName"`) {
		t.Errorf("downwardAPI spec.nodeName: error %v", err)
	}
}

// covers: O1
func TestPrepareVolumesHostPath(t *testing.T) {
	cs, _ := fakeCS()
	host := t.TempDir()
	file := filepath.Join(host, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(host, "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	hp := func(name, path string, typ corev1.HostPathType) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &typ}}}
	}
	created := filepath.Join(host, "new", "dir")
	newFile := filepath.Join(host, "new-file")
	pod := volumePod(
		hp("created", created, corev1.HostPathDirectoryOrCreate),
		hp("dir", host, corev1.HostPathDirectory),
		hp("file", file, corev1.HostPathFile),
		hp("newfile", newFile, corev1.HostPathFileOrCreate),
		hp("sock", sock, corev1.HostPathSocket),
		hp("any", "/nonexistent/anything", corev1.HostPathUnset),
	)
	vols, err := prepareVolumes(context.Background(), cs, pod, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"created": created, "dir": host, "file": file, "newfile": newFile, "sock": sock, "any": "/nonexistent/anything"} {
		if v := vols[name]; v.Path != want || v.ReadOnly {
			t.Errorf("%s: %+v, want %s read-write", name, v, want)
		}
	}
	if fi, err := os.Stat(created); err != nil || !fi.IsDir() {
		t.Errorf("DirectoryOrCreate: %v %v, want a directory", fi, err)
	}
	if fi, err := os.Stat(newFile); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("FileOrCreate: %v %v, want a file", fi, err)
	}

	for _, tc := range []struct {
		vol  corev1.Volume
		want string
	}{
		{hp("f", host, corev1.HostPathFile), "volume f of pod ns1/gw-0: hostPath type check failed: " + host + " is not a file, it's a Directory"},
		{hp("f", file, corev1.HostPathDirectoryOrCreate), "is not a directory, it's a File"},
		{hp("f", file, corev1.HostPathSocket), "is not a socket file, it's a File"},
		{hp("f", filepath.Join(host, "missing"), corev1.HostPathDirectory), "unable to determine its type"},
		{hp("f", host, "Bogus"), "Bogus is an invalid volume type"},
		{hp("f", host+"/../etc", corev1.HostPathUnset), "must not contain '..'"},
		{hp("f", "relative", corev1.HostPathUnset), "not an absolute path"},
	} {
		_, err := prepareVolumes(context.Background(), cs, volumePod(tc.vol), t.TempDir())
		t.Log(err)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("hostPath %s (%s): error %v, want %q", tc.vol.HostPath.Path, *tc.vol.HostPath.Type, err, tc.want)
		}
	}
}

// covers: O1
func TestVolumeMounts(t *testing.T) {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "s"}, Data: map[string][]byte{"tls.key": []byte("k")}}
	cs, _ := fakeCS(secret)
	pod := volumePod(
		corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		corev1.Volume{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}},
	)
	vols, err := prepareVolumes(context.Background(), cs, pod, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	scratch, tls := vols["scratch"].Path, vols["tls"].Path
	realScratch, err := filepath.EvalSymlinks(scratch) // t.TempDir may sit under a symlink
	if err != nil {
		t.Fatal(err)
	}
	ts, _ := os.Readlink(filepath.Join(tls, "..data"))
	realTLS, _ := filepath.EvalSymlinks(tls)

	c := &corev1.Container{Name: "app", VolumeMounts: []corev1.VolumeMount{
		{Name: "tls", MountPath: "/etc/tls"},
		{Name: "scratch", MountPath: "/var/log/app", SubPath: "logs/app"},
		{Name: "tls", MountPath: "/etc/app/key.pem", SubPath: "tls.key"},
		{Name: "scratch", MountPath: "/data", ReadOnly: true},
	}}
	got, err := volumeMounts(c, vols)
	if err != nil {
		t.Fatal(err)
	}
	want := []mountSpec{
		{Source: tls, Target: "/etc/tls", ReadOnly: true},
		{Source: filepath.Join(realScratch, "logs/app"), Target: "/var/log/app"},
		{Source: filepath.Join(realTLS, ts, "tls.key"), Target: "/etc/app/key.pem", ReadOnly: true},
		{Source: scratch, Target: "/data", ReadOnly: true},
	}
	if len(got) != len(want) {
		t.Fatalf("mounts %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("mount %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	// The missing subPath was created as directories with the volume's mode.
	if fi, err := os.Stat(filepath.Join(scratch, "logs", "app")); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o777 {
		t.Errorf("subPath directory: %v %v, want a 0777 directory", fi, err)
	}

	// A symlink in the volume pointing out of it.
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(scratch, "out")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		m    corev1.VolumeMount
		want string
	}{
		{corev1.VolumeMount{Name: "nope", MountPath: "/x"}, "container app volumeMount nope at /x: the pod has no volume nope"},
		{corev1.VolumeMount{Name: "scratch", MountPath: "/x", SubPath: "../escape"}, "container app volumeMount scratch at /x: subPath \"../escape\" must not contain '..'"},
		{corev1.VolumeMount{Name: "scratch", MountPath: "/x", SubPath: "a/../../escape"}, "must not contain '..'"},
		{corev1.VolumeMount{Name: "scratch", MountPath: "/x", SubPath: "/etc"}, "must not be an absolute path"},
		{corev1.VolumeMount{Name: "scratch", MountPath: "/x", SubPath: "out"}, "outside the volume"},
		{corev1.VolumeMount{Name: "scratch", MountPath: "/x", SubPath: "out/new/dir"}, "outside the volume"},
		{corev1.VolumeMount{Name: "scratch", MountPath: "/x", SubPathExpr: "$(POD_NAME)"}, "subPathExpr is not supported"},
	} {
		c := &corev1.Container{Name: "app", VolumeMounts: []corev1.VolumeMount{{Name: "tls", MountPath: "/ok"}, tc.m}}
		_, err := volumeMounts(c, vols)
		t.Log(err)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("mount %+v: error %v, want %q", tc.m, err, tc.want)
		}
	}
	if _, err := os.Lstat(filepath.Join(outside, "new")); err == nil {
		t.Error("a subPath directory was created outside the volume")
	}
}
