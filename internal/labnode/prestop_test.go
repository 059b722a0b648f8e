// covers: L11
//
// preStop hooks, as a kubelet runs them when a Pod is deleted: the hook first (exec, sleep,
// httpGet), then SIGTERM, then SIGKILL, all within the grace period; the Pod stays Terminating in
// the API meanwhile, its readiness still probed and reported.
package labnode_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// drainMain is the "drain" role: `--listen ip:port --dir D [--exit F] [--close-on-term]`, a server
// that answers HTTP on the address (GET /prestop, a preStop httpGet hook, creates D/hook). On
// SIGTERM it writes D/term, "<unix nanoseconds> <whether D/hook existed>", then exits; with --exit
// it keeps serving (or, with --close-on-term, stops listening) until F exists, as a server
// draining its connections.
func drainMain(args []string) error {
	fs := flag.NewFlagSet("drain", flag.ContinueOnError)
	listen := fs.String("listen", "", "address to serve HTTP on")
	dir := fs.String("dir", "", "directory of the hook and term files")
	exit := fs.String("exit", "", "after SIGTERM, exit once this file exists")
	closeOnTerm := fs.Bool("close-on-term", false, "stop listening on SIGTERM")
	if err := fs.Parse(args); err != nil {
		return err
	}
	// Before listening: once the readiness probe passes, a SIGTERM is recorded.
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	hook := filepath.Join(*dir, "hook")
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/prestop" {
			if err := os.WriteFile(hook, []byte(r.UserAgent()), 0o644); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		_, _ = io.WriteString(w, "ok")
	})}
	go func() { _ = srv.Serve(ln) }()
	<-term
	_, statErr := os.Stat(hook)
	// Written whole, then renamed: the test never reads half of it.
	tmp := filepath.Join(*dir, "term.tmp")
	if err := os.WriteFile(tmp, fmt.Appendf(nil, "%d %t", time.Now().UnixNano(), statErr == nil), 0o644); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(*dir, "term")); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	if *exit == "" {
		return nil
	}
	if *closeOnTerm {
		_ = srv.Close()
	}
	for {
		if _, err := os.Stat(*exit); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// drainContainer runs the drain role on the Pod's IP at port, with dir as $DIR; ready while it
// listens.
func drainContainer(t *testing.T, name, dir string, port int32, args ...string) corev1.Container {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return corev1.Container{
		Name: name, Image: "example.com/drain:v1",
		Command: []string{self},
		Args:    append([]string{"--listen", "$(POD_IP):" + strconv.Itoa(int(port)), "--dir", dir}, args...),
		Env: []corev1.EnvVar{
			{Name: roleEnv, Value: "drain"},
			{Name: "DIR", Value: dir},
			{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		},
		ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, FailureThreshold: 1,
			ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(port)}}},
	}
}

func drainPod(ns, name, ip, mac string, grace *int64, containers ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Annotations: ovnAnnotations("sw-a", ip, "10.91.0.0/24", "10.91.0.1", mac)},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: grace, Containers: containers},
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Error(err)
	}
}

// readTerm reads what the drain role wrote in dir on SIGTERM: when, and whether its hook had run.
func readTerm(t *testing.T, dir string) (time.Time, bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "term"))
	if err != nil {
		t.Fatal(err)
	}
	var nanos int64
	var hooked bool
	if _, err := fmt.Sscanf(string(b), "%d %t", &nanos, &hooked); err != nil {
		t.Fatalf("term file %q: %v", b, err)
	}
	return time.Unix(0, nanos), hooked
}

func containerReady(p *corev1.Pod, name string) bool {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == name {
			return cs.Ready
		}
	}
	return false
}

// deletePod deletes the Pod, with grace seconds when given (else its own), and returns when the
// request was made.
func deletePod(t *testing.T, e *env, ns, name string, grace *int64) time.Time {
	t.Helper()
	start := time.Now()
	if err := e.cs.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: grace}); err != nil {
		t.Fatal(err)
	}
	return start
}

// waitGone waits for the node to delete the Pod object of uid.
func waitGone(t *testing.T, e *env, ns, name string, uid types.UID, within time.Duration) {
	t.Helper()
	waitFor(t, within, "pod "+ns+"/"+name+" deleted by the node", func() (bool, string) {
		p, err := e.cs.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return p.UID != uid, fmt.Sprintf("deletionTimestamp %v, containers %+v", p.DeletionTimestamp, p.Status.ContainerStatuses)
	})
}

// covers: L11
// On deletion each container's preStop hook runs before its SIGTERM (an exec hook, held by the
// test, and a sleep hook), the containers keep running and are probed meanwhile, and the Pod stays
// Terminating in the API, with the readiness its probes find (what the EndpointSlice controller
// turns into serving and terminating), until every container exited.
func TestPreStopHooksRunBeforeSIGTERM(t *testing.T) {
	e := cluster(t)
	createNamespace(t, e, "prestop")
	base := t.TempDir()
	webDir, sleeperDir := filepath.Join(base, "web"), filepath.Join(base, "sleeper")
	release, exit := filepath.Join(base, "release"), filepath.Join(base, "exit")
	web := drainContainer(t, "web", webDir, 8080, "--exit", exit)
	web.Env = append(web.Env, corev1.EnvVar{Name: "RELEASE", Value: release})
	// The hook marks that it runs, then holds until the test releases it.
	web.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{
		Command: []string{"sh", "-c", `touch "$DIR/hook" && until test -e "$RELEASE"; do sleep 0.1; done`}}}}
	sleeper := drainContainer(t, "sleeper", sleeperDir, 8081, "--exit", exit, "--close-on-term")
	sleeper.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 5}}}
	grace := int64(60)
	createPod(t, e, drainPod("prestop", "hooks", "10.91.0.91", "00:00:00:5a:0b:91", &grace, web, sleeper))
	// Whatever happens below, the containers can end (cleanups run last-in first).
	t.Cleanup(func() { touch(t, release); touch(t, exit) })
	uid := waitReady(t, e, "prestop", "hooks").UID

	start := deletePod(t, e, "prestop", "hooks", nil)
	waitFor(t, 30*time.Second, "web's preStop hook running", func() (bool, string) { return exists(filepath.Join(webDir, "hook")), "" })
	p := getPod(t, e, "prestop", "hooks")
	sleeperTermed := exists(filepath.Join(sleeperDir, "term"))
	if exists(filepath.Join(webDir, "term")) {
		t.Fatal("web got SIGTERM while its preStop hook runs")
	}
	if p.DeletionTimestamp == nil || !containerReady(p, "web") {
		t.Errorf("during web's hook: deletionTimestamp %v, containers %+v; want Terminating with web ready", p.DeletionTimestamp, p.Status.ContainerStatuses)
	}
	if !sleeperTermed && condition(p, corev1.PodReady) != corev1.ConditionTrue {
		t.Errorf("during both hooks the Pod is not Ready (serving): %+v", p.Status.Conditions)
	}

	// The sleep hook ends, then sleeper gets SIGTERM and stops listening: its probe fails, and the
	// node reports it while the Pod still terminates.
	waitFor(t, 30*time.Second, "sleeper's SIGTERM", func() (bool, string) { return exists(filepath.Join(sleeperDir, "term")), "" })
	if at, _ := readTerm(t, sleeperDir); at.Sub(start) < 5*time.Second {
		t.Errorf("sleeper got SIGTERM %s after the deletion, before its 5 s sleep hook ended", at.Sub(start))
	}
	waitFor(t, 30*time.Second, "sleeper unready, web ready, the Pod Terminating and not Ready", func() (bool, string) {
		p := getPod(t, e, "prestop", "hooks")
		return p.DeletionTimestamp != nil && !containerReady(p, "sleeper") && containerReady(p, "web") &&
				condition(p, corev1.PodReady) == corev1.ConditionFalse,
			fmt.Sprintf("containers %+v, conditions %+v", p.Status.ContainerStatuses, p.Status.Conditions)
	})
	if exists(filepath.Join(webDir, "term")) {
		t.Fatal("web got SIGTERM while its preStop hook runs")
	}

	touch(t, release)
	waitFor(t, 30*time.Second, "web's SIGTERM", func() (bool, string) { return exists(filepath.Join(webDir, "term")), "" })
	if _, hooked := readTerm(t, webDir); !hooked {
		t.Error("web got SIGTERM before its preStop hook ran")
	}
	// Both containers still drain: the Pod stays until they exit.
	if p := getPod(t, e, "prestop", "hooks"); p.UID != uid || p.DeletionTimestamp == nil || !containerReady(p, "web") {
		t.Errorf("while web drains after SIGTERM: %+v", p.Status.ContainerStatuses)
	}
	touch(t, exit)
	waitGone(t, e, "prestop", "hooks", uid, 30*time.Second)
}

// covers: L11
// The grace period bounds the hook: a hook of 60 s is abandoned once the grace period of 3 s ran
// out, and SIGTERM then SIGKILL (the container ignores SIGTERM) follow within the kubelet's
// minimum of 2 s; the Pod goes long before the hook's 60 s. The API refuses a sleep hook as long
// as terminationGracePeriodSeconds, so the 3 s are the deletion's for the sleep hook, and the
// spec's for an exec hook running sleep 60.
func TestPreStopHookBoundedByGracePeriod(t *testing.T) {
	e := cluster(t)
	ns := "prestop-grace"
	createNamespace(t, e, ns)
	base := t.TempDir()
	three, ninety := int64(3), int64(90)
	cases := []struct {
		name, ip, mac string
		hook          corev1.LifecycleHandler
		specGrace     *int64
		deleteGrace   *int64
	}{
		{"sleep-hook", "10.91.0.92", "00:00:00:5a:0b:92",
			corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 60}}, &ninety, &three},
		{"exec-hook", "10.91.0.94", "00:00:00:5a:0b:94",
			corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sleep", "60"}}}, &three, nil},
	}
	type running struct {
		dir string
		uid types.UID
		pid int
	}
	pods := map[string]running{}
	for _, c := range cases {
		dir := filepath.Join(base, c.name)
		web := drainContainer(t, "web", dir, 8080, "--exit", filepath.Join(dir, "never"))
		web.Lifecycle = &corev1.Lifecycle{PreStop: &c.hook}
		createPod(t, e, drainPod(ns, c.name, c.ip, c.mac, c.specGrace, web))
	}
	for _, c := range cases {
		uid := waitReady(t, e, ns, c.name).UID
		pid, ok := e.node.ContainerPID(ns, c.name, "web")
		if !ok {
			t.Fatalf("%s: no pid for web", c.name)
		}
		pods[c.name] = running{filepath.Join(base, c.name), uid, pid}
	}

	// Both at once: their grace periods run side by side.
	starts := map[string]time.Time{}
	for _, c := range cases {
		starts[c.name] = deletePod(t, e, ns, c.name, c.deleteGrace)
	}
	for _, c := range cases {
		r, start := pods[c.name], starts[c.name]
		waitGone(t, e, ns, c.name, r.uid, 30*time.Second)
		if took := time.Since(start); took >= 30*time.Second {
			t.Errorf("%s: termination took %s: the 60 s hook was not bounded by the 3 s grace period", c.name, took)
		}
		if !exists(filepath.Join(r.dir, "term")) {
			t.Errorf("%s: web got no SIGTERM after its hook used up the grace period", c.name)
			continue
		}
		if at, _ := readTerm(t, r.dir); at.Sub(start) < 3*time.Second {
			t.Errorf("%s: SIGTERM %s after the deletion: before the hook had its 3 s", c.name, at.Sub(start))
		}
		if err := syscall.Kill(r.pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s: web's process %d, which ignores SIGTERM, was not killed: %v", c.name, r.pid, err)
		}
	}
}

// covers: L11
// A failing exec hook does not stop the deletion: the container gets SIGTERM and the Pod goes,
// with a Warning event FailedPreStopHook about the container. Beside it, an httpGet hook reaches
// its container's server before that container's SIGTERM.
func TestFailingPreStopHookDoesNotStopDeletion(t *testing.T) {
	e := cluster(t)
	ns := "prestop-fail"
	createNamespace(t, e, ns)
	base := t.TempDir()
	badDir, webDir := filepath.Join(base, "bad"), filepath.Join(base, "web")
	bad := drainContainer(t, "bad", badDir, 8080)
	bad.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{
		Command: []string{"sh", "-c", "echo cannot drain >&2; exit 3"}}}}
	web := drainContainer(t, "web", webDir, 8081)
	web.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{
		Path: "/prestop", Port: intstr.FromInt32(8081)}}}
	createPod(t, e, drainPod(ns, "bad-hook", "10.91.0.93", "00:00:00:5a:0b:93", nil, bad, web))
	uid := waitReady(t, e, ns, "bad-hook").UID

	deletePod(t, e, ns, "bad-hook", nil)
	// Well within the default 30 s: the failed hook ends at once and SIGTERM ends the container.
	waitGone(t, e, ns, "bad-hook", uid, 25*time.Second)
	if !exists(filepath.Join(badDir, "term")) {
		t.Error("bad got no SIGTERM after its hook failed")
	}
	if !exists(filepath.Join(webDir, "term")) {
		t.Fatal("web got no SIGTERM")
	}
	if _, hooked := readTerm(t, webDir); !hooked {
		t.Error("web got SIGTERM before its httpGet hook reached it")
	}
	if ua, err := os.ReadFile(filepath.Join(webDir, "hook")); err != nil || !strings.HasPrefix(string(ua), "kube-lifecycle/") {
		t.Errorf("the httpGet hook's User-Agent %q (%v), want the kubelet's kube-lifecycle/…", ua, err)
	}
	waitFor(t, 10*time.Second, "FailedPreStopHook and Killing events", func() (bool, string) {
		list, err := e.cs.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		seen := map[string]bool{}
		var saw []string
		for _, ev := range list.Items {
			if ev.InvolvedObject.UID != uid {
				continue
			}
			key := ev.Type + "/" + ev.Reason + "/" + ev.InvolvedObject.FieldPath
			seen[key] = true
			saw = append(saw, key+": "+ev.Message)
		}
		return seen["Warning/FailedPreStopHook/spec.containers{bad}"] && !seen["Warning/FailedPreStopHook/spec.containers{web}"] &&
			seen["Normal/Killing/spec.containers{bad}"] && seen["Normal/Killing/spec.containers{web}"], strings.Join(saw, "; ")
	})
}
