// Package kcm runs the real kube-controller-manager with only its EndpointSlice controllers
// against an envtest API server, so that the lab and the tests get EndpointSlices exactly as a
// cluster makes them (with the trigger-time annotation), from Pods whose status the harness sets
// as a kubelet would.
package kcm

import (
	"bytes"
	"context"

	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Binary is the file name looked up in the assets directory (KUBEBUILDER_ASSETS).
const Binary = "kube-controller-manager"

// Process is a running kube-controller-manager.
type Process struct {
	cmd    *exec.Cmd
	done   chan struct{}
	mu     sync.Mutex
	output bytes.Buffer
}

// EndpointSliceControllers are the controllers Start runs: EndpointSlices (with mirroring) only.
var EndpointSliceControllers = []string{"endpointslice-controller", "endpointslice-mirroring-controller"}

// WorkloadControllers are the controllers a cluster runs for workloads such as kube-ovn's VPC NAT
// gateway StatefulSets: the workload controllers, EndpointSlices (with mirroring), the garbage
// collector (owner references: a deleted StatefulSet takes its Pods) and the namespace controller
// (a deleted namespace is emptied and goes away).
var WorkloadControllers = []string{
	"statefulset-controller", "replicaset-controller", "deployment-controller",
	"endpointslice-controller", "endpointslice-mirroring-controller",
	"garbage-collector-controller", "namespace-controller",
}

// ClusterControllers are WorkloadControllers and what Pods of an installed workload need from
// the controller manager: each namespace's default ServiceAccount (the ServiceAccount admission
// plugin refuses a Pod whose account is missing), the cluster CA in every namespace
// (kube-root-ca.crt, read through each Pod's projected token volume; needs Options.RootCAFile),
// and Jobs (helm's hooks).
var ClusterControllers = append(slices.Clone(WorkloadControllers),
	"serviceaccount-controller", "root-ca-certificate-publisher-controller", "job-controller")

// Options says which controllers StartWith runs.
type Options struct {
	// Controllers are kube-controller-manager's controller names (--controllers); empty means
	// EndpointSliceControllers.
	Controllers []string
	// RootCAFile is the cluster CA the root-CA publisher puts into every namespace
	// (--root-ca-file).
	RootCAFile string
}

// Start runs <assetsDir>/kube-controller-manager with the EndpointSlice and EndpointSlice
// mirroring controllers only, against the API server of kubeconfig (written to dir).
func Start(assetsDir string, kubeconfig []byte, dir string) (*Process, error) {
	return StartWith(assetsDir, kubeconfig, dir, Options{})
}

// StartWith runs <assetsDir>/kube-controller-manager with the controllers of opts, against the
// API server of kubeconfig (written to dir). It serves nothing (--secure-port=0) and runs without
// leader election, so several can run side by side against different API servers.
func StartWith(assetsDir string, kubeconfig []byte, dir string, opts Options) (*Process, error) {
	bin := filepath.Join(assetsDir, Binary)
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%s not found in %s (hack/tools/build-assets.sh builds it): %w", Binary, assetsDir, err)
	}
	controllers := opts.Controllers
	if len(controllers) == 0 {
		controllers = EndpointSliceControllers
	}
	kc := filepath.Join(dir, "kcm.kubeconfig")
	if err := os.WriteFile(kc, kubeconfig, 0o600); err != nil {
		return nil, err
	}
	args := []string{"--kubeconfig=" + kc}
	if opts.RootCAFile != "" {
		args = append(args, "--root-ca-file="+opts.RootCAFile)
	}
	p := &Process{done: make(chan struct{})}
	p.cmd = exec.Command(bin, append(args,
		"--controllers="+strings.Join(controllers, ","),
		"--leader-elect=false",
		"--secure-port=0",
		"--use-service-account-credentials=false",
		// Publish every change at once: the tests and benchmarks measure vpcgw, not batching.
		"--endpointslice-updates-batch-period=0",
		"--concurrent-service-endpoint-syncs=10",
	)...)
	p.cmd.Stdout, p.cmd.Stderr = &lockedWriter{p: p}, &lockedWriter{p: p}
	// No Pdeathsig: it fires when the forking *thread* ends, and the bench's baseline ends the
	// threads it locks into a namespace (internal/bench/baseline.go), which killed this process
	// whenever that thread was the one that had started it. Stop ends it.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", Binary, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	return p, nil
}

type lockedWriter struct{ p *Process }

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	if w.p.output.Len() < 1<<20 {
		w.p.output.Write(b)
	}
	return len(b), nil
}

// Output is what the process printed so far (the first MiB).
func (p *Process) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.output.String()
}

// Exited reports whether the process is gone.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop ends the process and waits for it.
func (p *Process) Stop() {
	if p == nil || p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// EnsureNode creates the Node that harness Pods name: the EndpointSlice controller leaves out
// the endpoints of Pods whose Node it cannot find.
func EnsureNode(ctx context.Context, c client.Client, name string) error {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Create(ctx, n); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating Node %s: %w", name, err)
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if err := c.Status().Update(ctx, n); err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("marking Node %s Ready: %w", name, err)
	}
	return nil
}

// SetPodRunning sets the status a kubelet would: Running, the Pod IP, and Ready.
func SetPodRunning(ctx context.Context, c client.Client, pod *corev1.Pod, ip string, ready bool) error {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, HostIP: "192.0.2.1",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}},
	}
	if err := c.Status().Update(ctx, pod); err != nil {
		return fmt.Errorf("setting pod %s/%s status: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}
