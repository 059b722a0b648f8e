package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vpcgw/vpcgw/internal/kubeovnrun"
	"github.com/vpcgw/vpcgw/internal/netlab"
	"github.com/vpcgw/vpcgw/internal/transport"
)

// The faults the soak and the restart tests inject, each as an operator or a crash would cause
// it, on this lab's own processes and objects only.

// AgentProcess is a delivered agent running in the gateway container: its host PID and argv[0],
// the path it was started by in the container's view.
type AgentProcess struct {
	PID   int
	Argv0 string
}

// GatewayAgents are the delivered agents running in this lab's gateway Pod: the processes of its
// network namespace (the lab node runs no PID namespace, so the host sees the container's
// processes), never the machine's, where another lab's agents may run.
func (c *Cluster) GatewayAgents() ([]AgentProcess, error) {
	ns, ok := c.GatewayNetns()
	if !ok {
		return nil, nil
	}
	out, err := netlab.Run("ip", "netns", "pids", ns)
	if err != nil {
		return nil, fmt.Errorf("listing the processes of the gateway's namespace %s: %w", ns, err)
	}
	prefix := transport.AgentInstallDir + "/" + transport.DefaultAgentBinary + "-"
	var agents []AgentProcess
	for _, f := range strings.Fields(string(out)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + f + "/cmdline")
		if argv0, _, _ := strings.Cut(string(cmdline), "\x00"); err == nil && strings.HasPrefix(argv0, prefix) {
			agents = append(agents, AgentProcess{PID: pid, Argv0: argv0})
		}
	}
	return agents, nil
}

// KillAgents SIGKILLs every agent in the gateway Pod (a crash, or the OOM killer) and returns how
// many it killed.
func (c *Cluster) KillAgents() (int, error) {
	agents, err := c.GatewayAgents()
	if err != nil {
		return 0, err
	}
	for _, a := range agents {
		if err := syscall.Kill(a.PID, syscall.SIGKILL); err != nil && err != syscall.ESRCH {
			return 0, fmt.Errorf("killing agent %d: %w", a.PID, err)
		}
	}
	return len(agents), nil
}

// KillController SIGKILLs the vpcgw controller (no shutdown of its own) and waits for it to end;
// StartController starts it again.
func (c *Cluster) KillController() {
	if c.Controller != nil {
		c.Controller.kill()
	}
}

// DeleteGatewayPod deletes kube-ovn's gateway Pod, as `kubectl delete pod` does, and waits until
// that Pod is gone; kube-ovn's StatefulSet makes a new one, which kube-ovn initialises again.
func (c *Cluster) DeleteGatewayPod(ctx context.Context) error {
	key := client.ObjectKey{Namespace: kubeovnrun.Namespace, Name: c.GatewayPodName()}
	var pod corev1.Pod
	if err := c.Client.Get(ctx, key, &pod); err != nil {
		return fmt.Errorf("reading the gateway Pod %s: %w", key, err)
	}
	old := pod.UID
	if err := c.Client.Delete(ctx, &pod, client.Preconditions{UID: &old}); err != nil {
		return fmt.Errorf("deleting the gateway Pod %s: %w", key, err)
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var now corev1.Pod
		err := c.Client.Get(ctx, key, &now)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return err == nil && now.UID != old, nil
	})
}

// apiServerStartTimeout is how long kube-apiserver may take to answer /healthz after it starts.
const apiServerStartTimeout = 2 * time.Minute

// RestartAPIServer stops kube-apiserver and starts it again on the same address, certificates and
// etcd: every client sees its connections cut and its watches end, as in a control-plane
// upgrade.
func (c *Cluster) RestartAPIServer(ctx context.Context) error {
	api := c.env.ControlPlane.APIServer
	// envtest sends SIGTERM and, when kube-apiserver's graceful shutdown (which waits for the
	// lab's long-running exec streams) outlasts its stop timeout, SIGKILL: a terminationGracePeriod
	// as the kubelet gives. Either way the old server must be gone before the new one binds.
	if err := api.Stop(); err != nil && !strings.Contains(err.Error(), "timeout waiting for process") {
		return fmt.Errorf("stopping kube-apiserver: %w", err)
	}
	addr := net.JoinHostPort(api.Address, api.Port)
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return true, nil
		}
		_ = conn.Close() // a probe: it connected, that was the answer
		return false, nil
	}); err != nil {
		return fmt.Errorf("kube-apiserver still listens on %s after it was stopped: %w", addr, err)
	}
	// Restarting under load (the soak beside a test run) takes longer than envtest's 20 s default.
	api.StartTimeout = apiServerStartTimeout
	if err := api.Start(); err != nil {
		return fmt.Errorf("starting kube-apiserver again (%s allowed): %w", apiServerStartTimeout, err)
	}
	var ns corev1.Namespace
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return c.Client.Get(ctx, client.ObjectKey{Name: "default"}, &ns) == nil, nil
	})
}
