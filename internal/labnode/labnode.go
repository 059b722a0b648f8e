// Package labnode is a lab node that plays the kubelet (SPEC O1) where no kubelet or container
// runtime can run: it registers a Node and keeps its Lease, binds pending Pods to it as the
// scheduler would (none runs in the lab), runs each bound Pod as a network namespace plumbed from
// kube-ovn's IPAM annotations with its containers as processes of the host's filesystem, reports
// Pod status through the /status subresource as a kubelet does, deletes terminated Pods as a
// kubelet does, and serves the kubelet's exec API with the kubelet's own streaming server, so that
// `kubectl exec` and kube-ovn's exec calls cross the real API server.
//
// Wiring it in:
//
//   - Every binary that hosts a Node calls MaybeRunExecHelper first thing in main (or TestMain):
//     containers and execs are that binary re-executed as a helper that enters the pod's
//     namespaces and then execs the container's argv.
//   - kube-apiserver must reach the node at its InternalIP: --kubelet-preferred-address-types=
//     InternalIP (and, for kube-ovn's gateway, --allow-privileged=true). It does not verify the
//     node's self-signed certificate unless given --kubelet-certificate-authority.
//   - The caller's Network plugs NICs into its switches; the node configures them as kube-ovn's
//     CNI would (see Network).
//
// What a Pod gets: its processes run as root in the pod's network namespace and a mount
// namespace of their own (sysfs of the pod's network), on the host's filesystem; kube-ovn's
// vpc-nat-gateway image additionally gets a root of its own with /kube-ovn/nat-gateway.sh and a
// per-pod /etc. A container whose image is one of the node's (Config.Images, OCI layouts) runs
// from that image instead: its root an overlay of the unpacked image, its command, environment
// and user from the image and the Pod spec, its volumes (secret, configMap, projected service
// account token, downward API, emptyDir, hostPath) prepared as the kubelet does. hostNetwork Pods
// run in the node's network namespace. Deletion is the kubelet's (SPEC L11): each container's
// preStop hook (exec, sleep, httpGet), then SIGTERM, then SIGKILL, within the grace period, the Pod
// Terminating meanwhile with its probed readiness reported. There is no PID, user-namespace or
// cgroup isolation, no init containers, and only readiness probes are run.
package labnode

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	"github.com/vpcgw/vpcgw/internal/netlab"
)

// Config describes one lab node.
type Config struct {
	// NodeName is the Node to register (created, or updated when the caller created it).
	NodeName string
	// REST is the API server connection (the node's credentials).
	REST *rest.Config
	// Network plugs Pod NICs into the lab's switches.
	Network Network
	// InternalIP is the Node's address, where the API server reaches the exec server
	// (default 127.0.0.1; the exec server listens on it).
	InternalIP netip.Addr
	// NetnsPrefix starts the Pods' namespace names (default "ln"); each Pod gets
	// "<prefix><6 hex>-<pod name>".
	NetnsPrefix string
	// IsGatewayImage tells kube-ovn's vpc-nat-gateway image (default: the repository's last path
	// element is "vpc-nat-gateway"); its containers see NatGatewayScript at
	// /kube-ovn/nat-gateway.sh and a private /etc.
	IsGatewayImage func(image string) bool
	// NatGatewayScript is kube-ovn's script (default $VPCGW_KUBEOVN/nat-gateway.sh).
	NatGatewayScript string
	// RestartBackoff and MaxRestartBackoff bound the crash-loop back-off (kubelet: 10s, 5m).
	RestartBackoff, MaxRestartBackoff time.Duration
	// StateDir holds the Pods' container roots, /etc layers and logs (default: a new temporary
	// directory, removed at Stop).
	StateDir string
	// Busybox is the busybox binary the gateway containers take kube-ovn's Alpine base tools
	// from (default: busybox on the PATH; none: the host's tools).
	Busybox string
	// StreamIdleTimeout ends an exec stream that carried nothing for this long (the kubelet's
	// streamingConnectionIdleTimeout; default 4h, as the kubelet's). SetStreamIdleTimeout
	// changes it for the streams opened after.
	StreamIdleTimeout time.Duration
	// Images are the node's images, which it "pulls" as a container runtime would: repository
	// (e.g. ghcr.io/vpcgw/vpcgw) to an OCI image layout, a directory or a tar of one (the
	// archives of `make images` and `make release`). A container whose image's repository is
	// here runs from the image (image.go, imagerun.go); others keep the host's filesystem.
	Images map[string]string
	Log    logr.Logger
}

// DefaultStreamIdleTimeout is the kubelet's default streamingConnectionIdleTimeout.
const DefaultStreamIdleTimeout = 4 * time.Hour

const (
	defaultSchedulerName = corev1.DefaultSchedulerName
	leaseDuration        = 40 * time.Second
	leaseRenewInterval   = 10 * time.Second
	nodeStatusInterval   = time.Minute
)

// Node is a running lab node.
type Node struct {
	cfg    Config
	cs     kubernetes.Interface
	log    logr.Logger
	server *http.Server
	port   int
	// idleTimeout is the exec streams' idle timeout (a time.Duration).
	idleTimeout atomic.Int64

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	tmpDir bool

	images   *imageStore
	services corelisters.ServiceLister

	mu      sync.Mutex
	workers map[types.UID]*podWorker
	byName  map[string]*podWorker // "<ns>/<name>"
	labels  map[string]string
}

// Start registers the Node, starts the exec server and begins running the Pods bound to it.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.NodeName == "" || cfg.REST == nil || cfg.Network == nil {
		return nil, errors.New("labnode: NodeName, REST and Network are required")
	}
	if err := netlab.Available(); err != nil {
		return nil, fmt.Errorf("labnode: %w", err)
	}
	if !cfg.InternalIP.IsValid() {
		cfg.InternalIP = netip.MustParseAddr("127.0.0.1")
	}
	if cfg.NetnsPrefix == "" {
		cfg.NetnsPrefix = "ln"
	}
	if cfg.IsGatewayImage == nil {
		cfg.IsGatewayImage = IsKubeOVNGatewayImage
	}
	if cfg.NatGatewayScript == "" {
		if dir := os.Getenv("VPCGW_KUBEOVN"); dir != "" {
			cfg.NatGatewayScript = filepath.Join(dir, "nat-gateway.sh")
		}
	}
	if cfg.Busybox == "" {
		if p, err := exec.LookPath("busybox"); err == nil {
			cfg.Busybox = p
		}
	}
	if cfg.RestartBackoff <= 0 {
		cfg.RestartBackoff = 10 * time.Second
	}
	if cfg.MaxRestartBackoff < cfg.RestartBackoff {
		cfg.MaxRestartBackoff = max(5*time.Minute, cfg.RestartBackoff)
	}
	cs, err := kubernetes.NewForConfig(cfg.REST)
	if err != nil {
		return nil, fmt.Errorf("labnode: client: %w", err)
	}
	n := &Node{cfg: cfg, cs: cs, log: cfg.Log.WithValues("node", cfg.NodeName),
		workers: map[types.UID]*podWorker{}, byName: map[string]*podWorker{}}
	n.SetStreamIdleTimeout(cfg.StreamIdleTimeout)
	if n.cfg.StateDir == "" {
		if n.cfg.StateDir, err = os.MkdirTemp("", "vpcgw-labnode-"); err != nil {
			return nil, err
		}
		n.tmpDir = true
	}
	n.images = newImageStore(cfg.Images, filepath.Join(n.cfg.StateDir, "images"))
	n.ctx, n.cancel = context.WithCancel(context.Background())
	ok := false
	defer func() {
		if !ok {
			_ = n.Stop()
		}
	}()
	if err := n.startExecServer(); err != nil {
		return nil, fmt.Errorf("labnode: exec server: %w", err)
	}
	if err := n.register(ctx); err != nil {
		return nil, fmt.Errorf("labnode: registering Node %s: %w", cfg.NodeName, err)
	}
	if err := n.renewLease(ctx); err != nil {
		return nil, fmt.Errorf("labnode: Lease of %s: %w", cfg.NodeName, err)
	}
	n.loop(leaseRenewInterval, func(ctx context.Context) error { return n.renewLease(ctx) }, "renewing the Lease")
	n.loop(nodeStatusInterval, func(ctx context.Context) error { return n.updateNodeStatus(ctx) }, "updating Node status")

	factory := informers.NewSharedInformerFactory(cs, 0)
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { n.podChanged(obj) },
		UpdateFunc: func(_, obj any) { n.podChanged(obj) },
		DeleteFunc: n.podDeleted,
	}); err != nil {
		return nil, err
	}
	// The containers' service environment is read from a cache, as the kubelet's is, so that a
	// container (re)started while the API server is away still starts.
	svcInf := factory.Core().V1().Services()
	n.services = svcInf.Lister()
	factory.Start(n.ctx.Done())
	n.wg.Add(1)
	go func() { defer n.wg.Done(); <-n.ctx.Done(); factory.Shutdown() }()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced, svcInf.Informer().HasSynced) {
		return nil, errors.New("labnode: pod and service informers did not sync")
	}
	ok = true
	n.log.Info("lab node running", "internalIP", cfg.InternalIP, "execPort", n.port, "stateDir", n.cfg.StateDir)
	return n, nil
}

// IsKubeOVNGatewayImage reports whether image is kube-ovn's vpc-nat-gateway image (any registry,
// tag or digest).
func IsKubeOVNGatewayImage(image string) bool {
	repo := image
	if i := strings.Index(repo, "@"); i >= 0 {
		repo = repo[:i]
	}
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	return path.Base(repo) == "vpc-nat-gateway"
}

// SetStreamIdleTimeout sets the idle timeout of the exec streams opened from now on (0: the
// default), as an operator setting the kubelet's streamingConnectionIdleTimeout would.
func (n *Node) SetStreamIdleTimeout(d time.Duration) {
	if d <= 0 {
		d = DefaultStreamIdleTimeout
	}
	n.idleTimeout.Store(int64(d))
}

// Name is the Node's name.
func (n *Node) Name() string { return n.cfg.NodeName }

// ExecPort is the port of the kubelet exec server (status.daemonEndpoints.kubeletEndpoint).
func (n *Node) ExecPort() int { return n.port }

// PodNetns returns the network namespace of the running Pod <ns>/<name>.
func (n *Node) PodNetns(namespace, name string) (string, bool) {
	n.mu.Lock()
	w := n.byName[namespace+"/"+name]
	n.mu.Unlock()
	if w == nil {
		return "", false
	}
	return w.netnsName()
}

// ContainerPID returns the pid of a running container's process.
func (n *Node) ContainerPID(namespace, name, container string) (int, bool) {
	n.mu.Lock()
	w := n.byName[namespace+"/"+name]
	n.mu.Unlock()
	if w == nil {
		return 0, false
	}
	c := w.container(container)
	if c == nil {
		return 0, false
	}
	return c.runningPID()
}

// Stop stops every Pod's processes, removes their namespaces and state, and stops serving. The
// Node and Pod objects stay in the API, as when a machine goes away.
func (n *Node) Stop() error {
	n.cancel()
	n.mu.Lock()
	workers := make([]*podWorker, 0, len(n.workers))
	for _, w := range n.workers {
		workers = append(workers, w)
	}
	n.mu.Unlock()
	for _, w := range workers {
		<-w.done
	}
	var errs []error
	if n.server != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := n.server.Shutdown(ctx); err != nil {
			_ = n.server.Close()
		}
		cancel()
	}
	n.wg.Wait()
	if n.tmpDir {
		if err := os.RemoveAll(n.cfg.StateDir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (n *Node) loop(every time.Duration, f func(context.Context) error, what string) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-n.ctx.Done():
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(n.ctx, every)
				if err := f(ctx); err != nil && n.ctx.Err() == nil {
					n.log.Error(err, what)
				}
				cancel()
			}
		}
	}()
}

func (n *Node) register(ctx context.Context) error {
	node, err := n.cs.CoreV1().Nodes().Get(ctx, n.cfg.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		node, err = n.cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.cfg.NodeName}}, metav1.CreateOptions{})
	}
	if err != nil {
		return err
	}
	want := map[string]string{
		corev1.LabelHostname: n.cfg.NodeName, corev1.LabelOSStable: runtime.GOOS, corev1.LabelArchStable: runtime.GOARCH,
	}
	missing := false
	for k, v := range want {
		if node.Labels[k] != v {
			missing = true
		}
	}
	if missing {
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			node, err := n.cs.CoreV1().Nodes().Get(ctx, n.cfg.NodeName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if node.Labels == nil {
				node.Labels = map[string]string{}
			}
			for k, v := range want {
				node.Labels[k] = v
			}
			_, err = n.cs.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			return err
		}
	}
	return n.updateNodeStatus(ctx)
}

func (n *Node) updateNodeStatus(ctx context.Context) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := n.cs.CoreV1().Nodes().Get(ctx, n.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.mu.Lock()
		n.labels = node.Labels
		n.mu.Unlock()
		now := metav1.Now()
		res := nodeResources()
		node.Status.Capacity, node.Status.Allocatable = res, res.DeepCopy()
		node.Status.Addresses = []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: n.cfg.InternalIP.String()},
			{Type: corev1.NodeHostName, Address: n.cfg.NodeName},
		}
		node.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(n.port)
		node.Status.NodeInfo = corev1.NodeSystemInfo{
			MachineID: "labnode-" + n.cfg.NodeName, SystemUUID: "labnode-" + n.cfg.NodeName, BootID: "labnode",
			KernelVersion: kernelVersion(), OSImage: "vpcgw lab node (host filesystem as image)",
			ContainerRuntimeVersion: "labnode://0.1", KubeletVersion: "v1.37.2-labnode",
			OperatingSystem: runtime.GOOS, Architecture: runtime.GOARCH,
		}
		conds := []corev1.NodeCondition{
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory", Message: "kubelet has sufficient memory available"},
			{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure", Message: "kubelet has no disk pressure"},
			{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID", Message: "kubelet has sufficient PID available"},
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "lab node is posting ready status"},
		}
		for i := range conds {
			conds[i].LastHeartbeatTime, conds[i].LastTransitionTime = now, now
			for _, old := range node.Status.Conditions {
				if old.Type == conds[i].Type && old.Status == conds[i].Status {
					conds[i].LastTransitionTime = old.LastTransitionTime
				}
			}
		}
		node.Status.Conditions = conds
		_, err = n.cs.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
}

func kernelVersion() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// renewLease keeps kube-node-lease/<node> as a kubelet does (holder, 40s, renewed every 10s).
func (n *Node) renewLease(ctx context.Context) error {
	leases := n.cs.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	dur := int32(leaseDuration / time.Second)
	lease, err := leases.Get(ctx, n.cfg.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		node, err := n.cs.CoreV1().Nodes().Get(ctx, n.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		holder := n.cfg.NodeName
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: n.cfg.NodeName, Namespace: corev1.NamespaceNodeLease,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, RenewTime: &now},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	holder := n.cfg.NodeName
	lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds, lease.Spec.RenewTime = &holder, &dur, &now
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}

func (n *Node) podChanged(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	switch {
	case pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil && isDefaultScheduler(pod):
		if n.schedulable(pod) {
			n.wg.Add(1)
			go func() { defer n.wg.Done(); n.bind(pod) }()
		}
	case pod.Spec.NodeName == n.cfg.NodeName:
		n.worker(pod).update(pod)
	}
}

func isDefaultScheduler(pod *corev1.Pod) bool {
	return pod.Spec.SchedulerName == "" || pod.Spec.SchedulerName == defaultSchedulerName
}

// schedulable is the part of the scheduler's filter a single lab node needs: its nodeSelector
// must match the Node's labels.
func (n *Node) schedulable(pod *corev1.Pod) bool {
	n.mu.Lock()
	labels := n.labels
	n.mu.Unlock()
	for k, v := range pod.Spec.NodeSelector {
		if labels[k] != v {
			n.log.Info("pod's nodeSelector does not match the node; left pending", "pod", pod.Namespace+"/"+pod.Name, "label", k)
			return false
		}
	}
	return true
}

// bind assigns the Pod to this Node through pods/binding, as kube-scheduler does.
func (n *Node) bind(pod *corev1.Pod) {
	err := retry.OnError(retry.DefaultBackoff, func(err error) bool { return !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) }, func() error {
		return n.cs.CoreV1().Pods(pod.Namespace).Bind(n.ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
			Target:     corev1.ObjectReference{Kind: "Node", Name: n.cfg.NodeName},
		}, metav1.CreateOptions{})
	})
	switch {
	case err == nil:
		n.log.Info("bound pod", "pod", pod.Namespace+"/"+pod.Name)
	case apierrors.IsConflict(err), apierrors.IsNotFound(err), n.ctx.Err() != nil:
		// Bound already (another binder, a repeated event) or gone.
	default:
		n.log.Error(err, "binding pod", "pod", pod.Namespace+"/"+pod.Name)
	}
}

func (n *Node) podDeleted(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	n.mu.Lock()
	w := n.workers[pod.UID]
	n.mu.Unlock()
	if w != nil {
		w.update(nil)
	}
}

// worker returns the Pod's worker, starting it on first sight.
func (n *Node) worker(pod *corev1.Pod) *podWorker {
	n.mu.Lock()
	defer n.mu.Unlock()
	if w := n.workers[pod.UID]; w != nil {
		return w
	}
	w := newPodWorker(n, pod)
	if n.ctx.Err() != nil {
		close(w.done)
		return w
	}
	n.workers[pod.UID] = w
	n.byName[pod.Namespace+"/"+pod.Name] = w
	go func() {
		w.run()
		n.mu.Lock()
		delete(n.workers, pod.UID)
		if n.byName[pod.Namespace+"/"+pod.Name] == w {
			delete(n.byName, pod.Namespace+"/"+pod.Name)
		}
		n.mu.Unlock()
	}()
	return w
}

// nodeResources is what the lab node reports as its capacity and allocatable resources (and
// what the downward API gives for a limit a container does not set).
func nodeResources() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		corev1.ResourceMemory:           resource.MustParse("8Gi"),
		corev1.ResourcePods:             resource.MustParse("110"),
		corev1.ResourceEphemeralStorage: resource.MustParse("20Gi"),
	}
}
