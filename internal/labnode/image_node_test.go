package labnode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/vpcgw/vpcgw/internal/labnode"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

// inspectImage builds testdata/inspect statically into an OCI image layout, registers it with the
// node as registry.test/inspect, and returns the digest of its index.
func inspectImage(t *testing.T, e *env) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "inspect")
	build := exec.Command("go", "build", "-o", bin, "./testdata/inspect")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building testdata/inspect: %v\n%s", err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	layout := filepath.Join(dir, "layout")
	digest := labnode.WriteTestImage(t, layout, "v1", []string{"/usr/bin/inspect"}, "app",
		[]string{"PATH=/usr/bin", "FROM_IMAGE=image", "OVERRIDDEN=image"},
		labnode.TestImageFile{Name: "usr/", Dir: true, Mode: 0o755},
		labnode.TestImageFile{Name: "usr/bin/", Dir: true, Mode: 0o755},
		labnode.TestImageFile{Name: "usr/bin/inspect", Data: string(data), Mode: 0o755},
		labnode.TestImageFile{Name: "etc/", Dir: true, Mode: 0o755},
		labnode.TestImageFile{Name: "etc/passwd", Data: "root:x:0:0:root:/root:/sbin/nologin\napp:x:1234:1234:app:/work:/sbin/nologin\n", Mode: 0o644},
		labnode.TestImageFile{Name: "etc/group", Data: "root:x:0:\napp:x:1234:\n", Mode: 0o644},
		labnode.TestImageFile{Name: "tmp/", Dir: true, Mode: 0o1777},
		labnode.TestImageFile{Name: "work/", Dir: true, Mode: 0o755},
	)
	e.node.AddImages(map[string]string{"registry.test/inspect": layout})
	return digest
}

// waitPhase waits for the Pod to reach phase and returns it.
func waitPhase(t *testing.T, e *env, ns, name string, phase corev1.PodPhase) *corev1.Pod {
	t.Helper()
	var p *corev1.Pod
	waitFor(t, 60*time.Second, "pod "+ns+"/"+name+" "+string(phase), func() (bool, string) {
		p = getPod(t, e, ns, name)
		return p.Status.Phase == phase, p.Status.String()
	})
	return p
}

func podLogs(t *testing.T, e *env, ns, name string) string {
	t.Helper()
	out, err := e.cs.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(context.Background())
	if err != nil {
		t.Fatalf("logs of %s/%s: %v", ns, name, err)
	}
	return string(out)
}

// A container whose image is one of the node's runs from that image, as a kubelet with a CRI
// runtime runs it: the image's entrypoint with the Pod's args, the image's env under the Pod's,
// the image's named user with the Pod's supplemental groups, the image's working directory, a
// read-only root when asked, the kubelet-managed /etc/hostname, the kubelet's service
// environment (enableServiceLinks honoured), and its volumes (secret,
// configMap, emptyDir, and the projected service account token and namespace that every Pod
// gets) at their mount paths. It runs in a hostNetwork Pod and in a Pod of kube-ovn's network,
// pulled by tag and by digest; an exec joins the running container's root. What cannot run says
// why in the container's waiting state: a tag the image layout lacks (ErrImagePull) and a root
// user with runAsNonRoot (CreateContainerConfigError).
// covers: O1
func TestImageContainer(t *testing.T) {
	e := cluster(t)
	ctx := context.Background()
	ns := "images"
	createNamespace(t, e, ns)
	// The Service first: the node reads the service environment from its informer's cache, as
	// the kubelet does, and building the image below gives the watch seconds to bring it there.
	if _, err := e.cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "back-end"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	digest := inspectImage(t, e)
	if _, err := e.cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := e.cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds"},
		Data: map[string][]byte{"user": []byte("alice")}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := e.cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"},
		Data: map[string]string{"mode": "fast"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	backend, err := e.cs.CoreV1().Services(ns).Get(ctx, "back-end", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	master, err := e.cs.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	yes, no, zero := true, false, int64(0)
	expiry := int64(3600)
	saDir := "/var/run/secrets/kubernetes.io/serviceaccount"
	report := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "report", Namespace: ns},
		Spec: corev1.PodSpec{
			HostNetwork: true, RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: &zero,
			ServiceAccountName: "default",
			SecurityContext:    &corev1.PodSecurityContext{SupplementalGroups: []int64{5555}},
			Containers: []corev1.Container{{
				Name: "inspect", Image: "registry.test/inspect:v1",
				Args:            []string{"report", "/etc/creds/user", "/etc/settings/mode", saDir + "/token", saDir + "/namespace", "/scratch/.", "/etc/hostname"},
				Env:             []corev1.EnvVar{{Name: "OVERRIDDEN", Value: "pod"}},
				SecurityContext: &corev1.SecurityContext{RunAsNonRoot: &yes, ReadOnlyRootFilesystem: &yes},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "creds", MountPath: "/etc/creds", ReadOnly: true},
					{Name: "settings", MountPath: "/etc/settings"},
					{Name: "scratch", MountPath: "/scratch"},
					{Name: "kube-api-access", MountPath: saDir, ReadOnly: true},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds"}}},
				{Name: "settings", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}},
				{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &expiry}},
					{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
						{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
				}}}},
			},
		},
	}
	createPod(t, e, report)
	p := waitPhase(t, e, ns, "report", corev1.PodSucceeded)
	if got, want := p.Status.ContainerStatuses[0].ImageID, "registry.test/inspect@"+digest; got != want {
		t.Errorf("imageID %q, want %q", got, want)
	}
	var seen struct {
		UID, GID     int
		Groups       []int
		Cwd          string
		Hostname     string
		Env          []string
		Files        map[string]string
		RootWritable bool
	}
	logs := podLogs(t, e, ns, "report")
	if err := json.Unmarshal([]byte(strings.TrimSpace(logs)), &seen); err != nil {
		t.Fatalf("the container's report: %v\n%s", err, logs)
	}
	if seen.UID != 1234 || seen.GID != 1234 || !slices.Contains(seen.Groups, 5555) {
		t.Errorf("ran as uid %d gid %d groups %v, want the image's user app (1234:1234) with group 5555", seen.UID, seen.GID, seen.Groups)
	}
	if seen.Cwd != "/work" {
		t.Errorf("working directory %q, want the image's /work", seen.Cwd)
	}
	// The kubelet's service environment: the API server's Service, and the namespace's.
	serviceVars := []string{"KUBERNETES_SERVICE_HOST=" + master.Spec.ClusterIP, "KUBERNETES_SERVICE_PORT=443",
		"BACK_END_SERVICE_HOST=" + backend.Spec.ClusterIP, "BACK_END_SERVICE_PORT_HTTP=80",
		"BACK_END_PORT=tcp://" + backend.Spec.ClusterIP + ":80", "BACK_END_PORT_80_TCP_ADDR=" + backend.Spec.ClusterIP}
	for _, kv := range append([]string{"PATH=/usr/bin", "FROM_IMAGE=image", "OVERRIDDEN=pod"}, serviceVars...) {
		if !slices.Contains(seen.Env, kv) {
			t.Errorf("env lacks %s: %v", kv, seen.Env)
		}
	}
	if seen.RootWritable {
		t.Error("the root was writable with readOnlyRootFilesystem")
	}
	host, _ := os.Hostname()
	for path, want := range map[string]string{"/etc/creds/user": "alice", "/etc/settings/mode": "fast", saDir + "/namespace": ns, "/etc/hostname": host + "\n"} {
		if seen.Files[path] != want {
			t.Errorf("%s holds %q, want %q", path, seen.Files[path], want)
		}
	}
	if tok := seen.Files[saDir+"/token"]; strings.Count(tok, ".") != 2 {
		t.Errorf("the service account token is not a JWT: %q", tok)
	}
	if !strings.Contains(seen.Files["/scratch/."], "is a directory") {
		t.Errorf("the emptyDir is not a directory in the container: %q", seen.Files["/scratch/."])
	}

	// enableServiceLinks false: the API server's Service only.
	createPod(t, e, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "no-links", Namespace: ns},
		Spec: corev1.PodSpec{HostNetwork: true, RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: &zero, EnableServiceLinks: &no,
			Containers: []corev1.Container{{Name: "inspect", Image: "registry.test/inspect:v1", Args: []string{"report"}}}},
	})
	waitPhase(t, e, ns, "no-links", corev1.PodSucceeded)
	var noLinks struct{ Env []string }
	if logs := podLogs(t, e, ns, "no-links"); json.Unmarshal([]byte(strings.TrimSpace(logs)), &noLinks) != nil {
		t.Fatalf("the no-links container's report: %s", logs)
	}
	if !slices.Contains(noLinks.Env, serviceVars[0]) || slices.ContainsFunc(noLinks.Env, func(kv string) bool { return strings.HasPrefix(kv, "BACK_END_") }) {
		t.Errorf("with enableServiceLinks false, want the API server's Service's variables and none of the namespace's: %v", noLinks.Env)
	}

	// In kube-ovn's network, by digest; an exec sees what the container wrote in its root.
	serve := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "serve", Namespace: ns, Annotations: ovnAnnotations("img-sw", "10.91.7.10", "10.91.7.0/24", "10.91.7.1", "0a:00:00:00:07:10")},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &zero, Containers: []corev1.Container{{
			Name: "inspect", Image: "registry.test/inspect@" + digest, Args: []string{"serve"}}}},
	}
	createPod(t, e, serve)
	waitReady(t, e, ns, "serve")
	out, errOut, err := spdyExec(e, ns, "serve", "inspect", "inspect", "cat", "/tmp/served")
	if err != nil || !strings.HasPrefix(out, "served by ") {
		t.Errorf("exec into the image container: %q, stderr %q, %v; want the file its process wrote", out, errOut, err)
	}

	for _, tc := range []struct {
		name, image, reason, message string
		sc                           *corev1.SecurityContext
	}{
		{name: "missing-tag", image: "registry.test/inspect:v9", reason: "ErrImagePull", message: "tag v9 not found"},
		{name: "root-refused", image: "registry.test/inspect:v1", reason: "CreateContainerConfigError", message: "runAsNonRoot",
			sc: &corev1.SecurityContext{RunAsUser: &zero, RunAsNonRoot: &yes}},
	} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: tc.name, Namespace: ns},
			Spec: corev1.PodSpec{HostNetwork: true, RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: &zero,
				Containers: []corev1.Container{{Name: "inspect", Image: tc.image, Args: []string{"report"}, SecurityContext: tc.sc}}},
		}
		createPod(t, e, pod)
		waitFor(t, 60*time.Second, tc.name+" waiting with "+tc.reason, func() (bool, string) {
			p := getPod(t, e, ns, tc.name)
			for _, cs := range p.Status.ContainerStatuses {
				if w := cs.State.Waiting; w != nil && w.Reason == tc.reason && strings.Contains(w.Message, tc.message) {
					return true, ""
				}
			}
			return false, p.Status.String()
		})
	}
}

// The vpcgw image `make images` wrote runs on the node: its entrypoint /usr/bin/vpcgw as user
// 65532 prints its version.
// covers: O1, O5
func TestVpcgwImageRuns(t *testing.T) {
	e := cluster(t)
	images := os.Getenv("VPCGW_IMAGES")
	if images == "" {
		images = "../../bin/images"
	}
	var summary map[string]struct {
		Tag, Digest string
	}
	data, err := os.ReadFile(filepath.Join(images, "images.json"))
	if err != nil {
		testutil.Skip(t, "no images built (make images writes bin/images): "+err.Error())
	}
	if err := json.Unmarshal(data, &summary); err != nil {
		t.Fatalf("images.json: %v", err)
	}
	vpcgw, ok := summary["vpcgw"]
	if !ok {
		t.Fatalf("images.json lacks vpcgw: %s", data)
	}
	e.node.AddImages(map[string]string{"ghcr.io/vpcgw/vpcgw": filepath.Join(images, "vpcgw")})
	ns := "vpcgw-image"
	createNamespace(t, e, ns)
	zero := int64(0)
	createPod(t, e, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "version", Namespace: ns},
		Spec: corev1.PodSpec{HostNetwork: true, RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: &zero,
			Containers: []corev1.Container{{Name: "vpcgw", Image: "ghcr.io/vpcgw/vpcgw:" + vpcgw.Tag, Args: []string{"version"}}}},
	})
	p := waitPhase(t, e, ns, "version", corev1.PodSucceeded)
	if got, want := p.Status.ContainerStatuses[0].ImageID, "ghcr.io/vpcgw/vpcgw@"+vpcgw.Digest; got != want {
		t.Errorf("imageID %q, want %q", got, want)
	}
	if logs := podLogs(t, e, ns, "version"); !strings.Contains(logs, vpcgw.Tag) {
		t.Errorf("vpcgw version printed %q, want the image's version %s", logs, vpcgw.Tag)
	}
}

// A hostNetwork Pod's readiness probe dials from the node, as the kubelet's does: the Pod's
// address is the node's, and its server listens in the node's network namespace.
// covers: O1
func TestHostNetworkPodReadiness(t *testing.T) {
	e := cluster(t)
	ns := "host-network"
	createNamespace(t, e, ns)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	pod := echoPod(t, ns, "web", nil)
	pod.Spec.HostNetwork = true
	web := &pod.Spec.Containers[0]
	web.Args = []string{"--name", "$(POD_NAME)", "--listen", fmt.Sprintf("$(POD_IP):%d", port)}
	web.ReadinessProbe.TCPSocket.Port = intstr.FromInt(port)
	createPod(t, e, pod)
	p := waitReady(t, e, ns, "web")
	if p.Status.PodIP != "127.0.0.1" {
		t.Errorf("a hostNetwork Pod's IP is %q, want the node's 127.0.0.1", p.Status.PodIP)
	}
}
