// covers: K5, O5, L6 (clash C12: the agent in kube-ovn's stock gateway container)
package kubeovn

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vpcgw/vpcgw/internal/cluster"
	"github.com/vpcgw/vpcgw/internal/kubeovnrun"
	"github.com/vpcgw/vpcgw/internal/transport"
)

// execInGateway runs argv in kube-ovn's gateway container through the API server, as
// `kubectl exec` would, and returns its stdout.
func execInGateway(ctx context.Context, c *cluster.Cluster, argv ...string) (string, error) {
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return "", err
	}
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(kubeovnrun.Namespace).Name(c.GatewayPodName()).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: transport.DefaultExecContainer, Command: argv, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	exe, err := remotecommand.NewSPDYExecutor(c.Config, "POST", req.URL())
	if err != nil {
		return "", err
	}
	var out, errOut bytes.Buffer
	if err := exe.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut}); err != nil {
		return out.String(), &execError{err: err, stderr: errOut.String()}
	}
	return out.String(), nil
}

type execError struct {
	err    error
	stderr string
}

func (e *execError) Error() string { return e.err.Error() + ": " + strings.TrimSpace(e.stderr) }

func fileDigest(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// runningAgent is the executable of the agent running in the gateway container, as the container
// sees it ("" while none runs), and that file's SHA-256 read in the container.
func runningAgent(ctx context.Context, t *testing.T, c *cluster.Cluster) (exe, digest string) {
	for _, a := range gatewayAgents(t, c) {
		sum, err := execInGateway(ctx, c, "sha256sum", a.Argv0)
		if f := strings.Fields(sum); err == nil && len(f) > 0 {
			return a.Argv0, f[0]
		}
	}
	return "", ""
}

// covers: K5, O5, L6
// kube-ovn's gateway container holds no vpcgw binary: the controller copies the agent in through
// the exec API, verified by digest, and runs it from there. Killing the container's processes
// (the container restarts with an empty /run, and kube-ovn recreates the Pod) and deleting the Pod
// both heal without anyone's help, and a new agent build (a vpcgw upgrade) reaches the running
// gateway at the controller's next start.
func TestAgentDeliveredIntoKubeOVNsContainer(t *testing.T) {
	c := lab(t)
	ctx := context.Background()
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(tail(c.Logs(), 4000))
		}
	})
	served := func(what string) {
		t.Helper()
		if err := c.WaitReachable(ctx, c.ExternalClient(), "tcp", cluster.EIPAddress+":80", 90*time.Second); err != nil {
			t.Fatalf("%s: the EIP: %v", what, err)
		}
		cip := service(t, c, cluster.DemoNamespace, cluster.DemoService).Spec.ClusterIP
		if err := c.WaitReachable(ctx, c.VPCClient(), "tcp", cip+":80", 60*time.Second); err != nil {
			t.Fatalf("%s: the ClusterIP: %v", what, err)
		}
	}
	delivered := func(what, digest string) {
		t.Helper()
		eventually(t, 90*time.Second, what+": the delivered agent runs in the container", func(ctx context.Context) (bool, error) {
			exe, sum := runningAgent(ctx, t, c)
			return sum == digest && exe == transport.AgentInstallDir+"/"+transport.DefaultAgentBinary+"-"+digest[:16], nil
		})
	}
	want := fileDigest(t, c.AgentBinary())

	// The container has only what kube-ovn's image has: no agent on its PATH.
	if out, err := execInGateway(ctx, c, transport.DefaultAgentBinary, "--version"); err == nil {
		t.Fatalf("the gateway container has an agent of its own: %q", out)
	}
	delivered("at start", want)
	served("at start")

	// Kill every process of the container: the agent goes with it.
	var pod corev1.Pod
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: kubeovnrun.Namespace, Name: c.GatewayPodName()}, &pod); err != nil {
		t.Fatal(err)
	}
	pid, ok := c.Node.ContainerPID(pod.Namespace, pod.Name, transport.DefaultExecContainer)
	if !ok {
		t.Fatal("the gateway container runs no process")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	delivered("after the container's processes were killed", want)
	served("after the container's processes were killed")

	// Delete the Pod: kube-ovn's StatefulSet makes a new one, which gets the agent anew.
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: kubeovnrun.Namespace, Name: c.GatewayPodName()}, &pod); err != nil {
		t.Fatal(err)
	}
	if err := c.Client.Delete(ctx, &pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, "a new gateway Pod", func(ctx context.Context) (bool, error) {
		var p corev1.Pod
		if err := c.Client.Get(ctx, client.ObjectKey{Namespace: kubeovnrun.Namespace, Name: c.GatewayPodName()}, &p); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return p.UID != pod.UID && p.Status.Phase == corev1.PodRunning, nil
	})
	delivered("after the Pod was replaced", want)
	served("after the Pod was replaced")

	// An upgrade: a new agent build in the controller's agents directory, the controller
	// restarted (a new image rolls out). The running gateway gets the new build, the old copy is
	// removed, traffic goes on.
	next := filepath.Join(t.TempDir(), transport.DefaultAgentBinary)
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-X github.com/vpcgw/vpcgw/internal/version.Version=v0.0.0-upgrade-test", "-o", next, "github.com/vpcgw/vpcgw/cmd/vpcgw-agent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the next agent: %v\n%s", err, out)
	}
	old := c.AgentBinary()
	c.SetAgentBinary(next)
	t.Cleanup(func() { c.SetAgentBinary(old) })
	upgraded := fileDigest(t, next)
	if upgraded == want {
		t.Fatal("the next agent build is the same file")
	}
	c.StopController()
	if err := c.StartController(ctx); err != nil {
		t.Fatal(err)
	}
	delivered("after the upgrade", upgraded)
	served("after the upgrade")
	if out, err := execInGateway(ctx, c, "ls", transport.AgentInstallDir); err != nil || strings.Contains(out, want[:16]) {
		t.Fatalf("the old agent copy is still in the container: %q %v", out, err)
	}
	if out, err := execInGateway(ctx, c, transport.AgentInstallDir+"/"+transport.DefaultAgentBinary+"-"+upgraded[:16], "--version"); err != nil || !strings.Contains(out, "v0.0.0-upgrade-test") {
		t.Fatalf("the delivered agent's version: %q %v", out, err)
	}

	// Back to the lab's own build for the tests after this one.
	c.SetAgentBinary(old)
	c.StopController()
	if err := c.StartController(ctx); err != nil {
		t.Fatal(err)
	}
	delivered("back to the lab's build", want)
}

// gatewayAgents are the delivered agents running in this lab's gateway Pod, found through the
// Pod's network namespace (cluster.GatewayAgents), never machine-wide.
func gatewayAgents(t *testing.T, c *cluster.Cluster) []cluster.AgentProcess {
	t.Helper()
	agents, err := c.GatewayAgents()
	if err != nil {
		t.Fatal(err)
	}
	return agents
}

// agentPIDs are the host PIDs of gatewayAgents.
func agentPIDs(t *testing.T, c *cluster.Cluster) []int {
	t.Helper()
	var pids []int
	for _, a := range gatewayAgents(t, c) {
		pids = append(pids, a.PID)
	}
	return pids
}

// covers: K5, L6
// The kubelet ends exec streams idle for its streamingConnectionIdleTimeout. With a short one, the
// agent stream stays up well past it while the controller's keepalives run on it: the same agent
// process, no new stream, and the pings never disturb the state (traffic goes on). client-go's own
// transport pings (WebSocket and SPDY, every 5 s) reach the kubelet as well, so this part would
// hold without vpcgw's keepalives too; what only they give is the next part: an agent that hangs
// (its stream open, the API server and kubelet answering) is noticed by its unanswered
// keepalives within seconds and replaced, with no state change to trigger it.
func TestAgentStreamKeptAlive(t *testing.T) {
	c := lab(t)
	ctx := context.Background()
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(tail(c.Logs(), 400))
		}
	})
	const idle = 12 * time.Second // above the controller's 5 s keepalive, far below the kubelet's 4 h
	c.Node.SetStreamIdleTimeout(idle)
	t.Cleanup(func() { c.Node.SetStreamIdleTimeout(0) })
	opened := func() int { return strings.Count(c.ControllerOutput(), "agent stream opened") }
	ended := func() int { return strings.Count(c.ControllerOutput(), "agent stream ended") }

	// A new controller, so that its stream is opened under the short idle timeout.
	c.StopController()
	if err := c.StartController(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReachable(ctx, c.ExternalClient(), "tcp", cluster.EIPAddress+":80", 60*time.Second); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the agent stream opened", func(context.Context) (bool, error) { return opened() == 1 && len(agentPIDs(t, c)) == 1, nil })
	pids := agentPIDs(t, c)
	// Consistently, for 2.5 idle timeouts: the poll ends by its deadline unless the stream is cut.
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, idle*5/2, true, func(context.Context) (bool, error) {
		if ended() != 0 || opened() != 1 {
			return false, fmt.Errorf("the idle stream was cut (ended %d, opened %d)", ended(), opened())
		}
		return false, nil
	})
	if !wait.Interrupted(err) {
		t.Fatal(err)
	}
	if now := agentPIDs(t, c); len(now) != 1 || now[0] != pids[0] {
		t.Fatalf("the agent process changed: %v then %v", pids, now)
	}
	if r, err := c.Probe(c.ExternalClient(), "tcp", cluster.EIPAddress+":80", 10); err != nil || r.Total() != 10 {
		t.Fatalf("traffic after the keepalives: %+v %v", r, err)
	}

	// A hung agent: stopped, it answers nothing; its keepalive fails and a new agent takes over.
	hung := pids[0]
	before := opened()
	if err := syscall.Kill(hung, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(hung, syscall.SIGKILL) })
	eventually(t, 60*time.Second, "a new agent stream after the hung one", func(context.Context) (bool, error) { return opened() > before, nil })
	if !strings.Contains(c.ControllerOutput(), "answered no keepalive") {
		t.Fatal("the new stream was not opened because of the unanswered keepalive")
	}
	if err := syscall.Kill(hung, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReachable(ctx, c.ExternalClient(), "tcp", cluster.EIPAddress+":80", 60*time.Second); err != nil {
		t.Fatal(err)
	}
}
