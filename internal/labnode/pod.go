package labnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"golang.org/x/sys/unix"

	"github.com/vpcgw/vpcgw/internal/netlab"
)

// podWorker runs one Pod bound to the node: its sandbox (a network namespace with the NICs
// kube-ovn allocated), its containers, its status, and its termination.
type podWorker struct {
	n   *Node
	log logr.Logger

	wake chan struct{} // buffered 1: the pod changed or a container did
	done chan struct{}

	mu         sync.Mutex
	pod        *corev1.Pod // latest seen; nil once deleted from the API
	gone       bool
	lab        *netlab.Lab
	netns      string
	nics       []NIC
	attached   []NIC
	dir        string // the pod's state directory
	startTime  metav1.Time
	containers map[string]*containerRunner
	etcMounted bool
	// volumes are the Pod's prepared volumes (volumes.go), nil until prepared; only Pods with a
	// container of a pulled image get them (see needsVolumes).
	volumes    map[string]podVolume
	waiting    string // what the sandbox waits for, logged once per change
	sandboxErr string
}

func newPodWorker(n *Node, pod *corev1.Pod) *podWorker {
	return &podWorker{
		n:          n,
		log:        n.log.WithValues("pod", pod.Namespace+"/"+pod.Name),
		wake:       make(chan struct{}, 1),
		done:       make(chan struct{}),
		pod:        pod,
		startTime:  metav1.NewTime(time.Now().Truncate(time.Second)),
		containers: map[string]*containerRunner{},
	}
}

// update hands the worker the Pod's latest version (nil: deleted from the API).
func (w *podWorker) update(pod *corev1.Pod) {
	w.mu.Lock()
	if pod == nil {
		w.gone = true
	} else if !w.gone {
		w.pod = pod
	}
	w.mu.Unlock()
	w.poke()
}

func (w *podWorker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *podWorker) netnsName() (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.netns, w.netns != "" && w.nics != nil
}

func (w *podWorker) stateDir() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dir
}

func (w *podWorker) container(name string) *containerRunner {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.containers[name]
}

func (w *podWorker) run() {
	defer close(w.done)
	retry := time.NewTicker(time.Second)
	defer retry.Stop()
	for {
		select {
		case <-w.n.ctx.Done():
			w.teardown(2 * time.Second)
			return
		case <-w.wake:
		case <-retry.C:
		}
		w.mu.Lock()
		pod, gone := w.pod, w.gone
		w.mu.Unlock()
		switch {
		case gone:
			// Removed from the API without us (force deletion): nothing left to report.
			w.teardown(0)
			return
		case pod.DeletionTimestamp != nil:
			w.terminate(pod)
			return
		}
		w.step(pod)
	}
}

// step brings the Pod one step towards running and reports its status.
func (w *podWorker) step(pod *corev1.Pod) {
	if isTerminal(pod.Status.Phase) && len(w.containers) == 0 {
		return // finished before this node saw it (e.g. before a node restart)
	}
	if len(pod.Spec.InitContainers) > 0 {
		// Refused rather than run half-faithfully: status says so (Initialized False).
		if w.sandboxErr == "" {
			w.sandboxErr = "init containers are not run by the lab node"
			w.log.Info("pod not run: it has init containers, which the lab node does not run")
		}
	} else if w.nics == nil {
		if err := w.makeSandbox(pod); err != nil {
			w.mu.Lock()
			changed := w.sandboxErr != err.Error()
			w.sandboxErr = err.Error()
			w.mu.Unlock()
			if changed {
				w.log.Error(err, "pod sandbox not ready (retrying)")
			}
		}
	}
	needsVolumes := w.n.needsVolumes(pod)
	if w.nics != nil && w.volumes == nil && needsVolumes {
		w.prepareVolumes(pod)
	}
	if w.nics != nil && len(w.containers) == 0 && (w.volumes != nil || !needsVolumes) {
		w.startContainers(pod)
	}
	if err := w.syncStatus(w.n.ctx, pod); err != nil && w.n.ctx.Err() == nil && !apierrors.IsNotFound(err) {
		w.log.Error(err, "updating pod status")
	}
}

func isTerminal(p corev1.PodPhase) bool { return p == corev1.PodSucceeded || p == corev1.PodFailed }

// makeSandbox waits for kube-ovn's annotations, then creates the namespace and plumbs each NIC.
// A hostNetwork Pod gets neither: its processes run in the node's network namespace, with the
// node's address as the Pod's (kube-ovn allocates nothing for it).
func (w *podWorker) makeSandbox(pod *corev1.Pod) error {
	if pod.Spec.HostNetwork {
		dir := filepath.Join(w.n.cfg.StateDir, string(pod.UID))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		w.mu.Lock()
		w.dir, w.nics = dir, []NIC{}
		w.mu.Unlock()
		w.log.Info("pod sandbox ready", "hostNetwork", true)
		return nil
	}
	nics, waiting, err := podNICs(pod)
	if err != nil {
		return fmt.Errorf("reading kube-ovn's annotations: %w", err)
	}
	if waiting != "" {
		if waiting != w.waiting {
			w.log.Info("waiting for kube-ovn to allocate the pod's network", "annotation", waiting)
			w.waiting = waiting
		}
		return nil
	}
	if w.lab == nil {
		lab, err := netlab.New(w.n.cfg.NetnsPrefix)
		if err != nil {
			return err
		}
		short := pod.Name
		if len(short) > 40 {
			short = short[:40]
		}
		ns, err := lab.AddNetns(short)
		w.mu.Lock()
		w.lab, w.netns = lab, ns
		w.mu.Unlock()
		if err != nil {
			return fmt.Errorf("creating network namespace: %w", err)
		}
		dir := filepath.Join(w.n.cfg.StateDir, string(pod.UID))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		w.mu.Lock()
		w.dir = dir
		w.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(w.n.ctx, time.Minute)
	defer cancel()
	// A failure leaves no half-plumbed sandbox: the next attempt starts from a new namespace.
	fail := func(err error) error {
		w.removeSandbox()
		return err
	}
	for _, nic := range nics {
		if err := w.n.cfg.Network.Attach(ctx, pod, w.netns, nic); err != nil {
			return fail(fmt.Errorf("attaching %s (provider %s, switch %q): %w", nic.Name, nic.Provider, nic.LogicalSwitch, err))
		}
		w.mu.Lock()
		w.attached = append(w.attached, nic)
		w.mu.Unlock()
	}
	if err := w.annotateNetworkStatus(ctx, pod, nics); err != nil {
		return fail(fmt.Errorf("writing the network-status annotation: %w", err))
	}
	w.mu.Lock()
	w.nics = nics
	w.mu.Unlock()
	w.log.Info("pod sandbox ready", "netns", w.netns, "nics", len(nics))
	return nil
}

// annotateNetworkStatus writes what multus would: the NICs the pod got.
func (w *podWorker) annotateNetworkStatus(ctx context.Context, pod *corev1.Pod, nics []NIC) error {
	status, err := networkStatus(nics)
	if err != nil {
		return err
	}
	if pod.Annotations[networkStatusAnnotation] == status {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid": pod.UID, "annotations": map[string]string{networkStatusAnnotation: status}}})
	if err != nil {
		return err
	}
	_, err = w.n.cs.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

func (w *podWorker) startContainers(pod *corev1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range pod.Spec.Containers {
		c := newContainerRunner(w, pod, &pod.Spec.Containers[i])
		w.containers[c.spec.Name] = c
		c.start()
	}
}

// podIP is the first address of eth0.
func (w *podWorker) podIPs() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pod != nil && w.pod.Spec.HostNetwork {
		return []string{w.n.cfg.InternalIP.String()}
	}
	var out []string
	for _, nic := range w.nics {
		if nic.Name == "eth0" {
			for _, p := range nic.IPs {
				out = append(out, p.Addr().String())
			}
		}
	}
	return out
}

// helperSpec is where the Pod's processes run; image decides whether they get kube-ovn's
// gateway root.
func (w *podWorker) helperSpec(image, workingDir string) (helperSpec, error) {
	w.mu.Lock()
	netns, dir := w.netns, w.dir
	w.mu.Unlock()
	spec := helperSpec{Netns: netns, WorkingDir: workingDir}
	if !w.n.cfg.IsGatewayImage(image) {
		return spec, nil
	}
	if w.n.cfg.NatGatewayScript == "" {
		return spec, fmt.Errorf("image %s is kube-ovn's vpc-nat-gateway, but no nat-gateway.sh is configured (set VPCGW_KUBEOVN)", image)
	}
	if _, err := os.Stat(w.n.cfg.NatGatewayScript); err != nil {
		return spec, fmt.Errorf("kube-ovn's nat-gateway.sh: %w", err)
	}
	root, err := os.MkdirTemp(dir, "root-")
	if err != nil {
		return spec, err
	}
	etc, err := w.podEtc()
	if err != nil {
		return spec, err
	}
	run, err := os.MkdirTemp(dir, "run-")
	if err != nil {
		return spec, err
	}
	spec.Root, spec.Script, spec.Etc, spec.Run, spec.Busybox = root, w.n.cfg.NatGatewayScript, etc, run, w.n.cfg.Busybox
	return spec, nil
}

// podEtc returns the pod's /etc: one overlay of the host's /etc per pod (mounted on first use,
// unmounted at teardown), so that what the gateway's script writes there (nat-gateway.env) stays
// the pod's and is seen by its later execs.
func (w *podWorker) podEtc() (string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	merged := filepath.Join(w.dir, "etc")
	if w.etcMounted {
		return merged, nil
	}
	upper, work := filepath.Join(w.dir, "etc-upper"), filepath.Join(w.dir, "etc-work")
	for _, d := range []string{merged, upper, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
	}
	opts := "lowerdir=/etc,upperdir=" + upper + ",workdir=" + work
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		return "", fmt.Errorf("mounting the pod's /etc overlay (%s): %w", opts, err)
	}
	w.etcMounted = true
	return merged, nil
}

// stopContainers stops every container within grace (the preStop hook when preStop, SIGTERM,
// then SIGKILL), all at once as the kubelet does.
func (w *podWorker) stopContainers(grace time.Duration, preStop bool) {
	w.mu.Lock()
	cs := make([]*containerRunner, 0, len(w.containers))
	for _, c := range w.containers {
		cs = append(cs, c)
	}
	w.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() { defer wg.Done(); c.stop(grace, preStop) }()
	}
	wg.Wait()
}

// teardown stops the containers without their preStop hooks (the node stops, or the Pod is gone
// from the API) and removes the sandbox and the pod's state.
func (w *podWorker) teardown(grace time.Duration) {
	w.stopContainers(grace, false)
	w.removePodState()
}

// removePodState removes the sandbox and the pod's state, once its containers stopped.
func (w *podWorker) removePodState() {
	w.removeSandbox()
	w.mu.Lock()
	etcMounted, dir := w.etcMounted, w.dir
	w.mu.Unlock()
	if etcMounted {
		if err := unix.Unmount(filepath.Join(dir, "etc"), unix.MNT_DETACH); err != nil {
			// Removing the directory would reach into the overlay: leave it.
			w.log.Error(err, "unmounting the pod's /etc; its state directory stays", "dir", dir)
			return
		}
	}
	if dir != "" {
		if err := os.RemoveAll(dir); err != nil {
			w.log.Error(err, "removing the pod's state")
		}
	}
}

// removeSandbox detaches the NICs and deletes the namespace.
func (w *podWorker) removeSandbox() {
	w.mu.Lock()
	pod, lab, netns, attached := w.pod, w.lab, w.netns, w.attached
	w.attached, w.lab, w.netns, w.nics = nil, nil, "", nil
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := len(attached) - 1; i >= 0; i-- {
		if err := w.n.cfg.Network.Detach(ctx, pod, netns, attached[i]); err != nil {
			w.log.Error(err, "detaching NIC", "nic", attached[i].Name)
		}
	}
	if lab != nil {
		if err := lab.Cleanup(); err != nil {
			w.log.Error(err, "removing the pod's namespace", "netns", netns)
		}
	}
}

// terminate is the kubelet's part of a graceful deletion: stop the containers within the grace
// period (preStop hooks first), tear the sandbox down, report the final status, then delete the
// Pod with grace 0 and a UID precondition. The Pod stays in the API (Terminating) until then.
func (w *podWorker) terminate(pod *corev1.Pod) {
	grace := podGracePeriod(pod)
	w.log.Info("terminating pod", "grace", grace)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		w.stopContainers(grace, true)
	}()
	w.reportUntil(stopped)
	w.removePodState()
	w.mu.Lock()
	if !w.gone {
		pod = w.pod
	}
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(w.n.ctx, 30*time.Second)
	defer cancel()
	if err := w.syncStatus(ctx, pod); err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		w.log.Error(err, "reporting the final status")
	}
	zero := int64(0)
	uid := pod.UID
	err := w.n.cs.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		w.log.Error(err, "deleting the terminated pod")
		return
	}
	w.log.Info("pod terminated and deleted")
}

// reportUntil keeps the Pod's status current until done closes. The containers of a terminating
// Pod are still probed for readiness, and the kubelet reports it: the EndpointSlice controller
// then marks the Pod's endpoints serving (or not) and terminating while it drains.
func (w *podWorker) reportUntil(done <-chan struct{}) {
	retry := time.NewTicker(time.Second)
	defer retry.Stop()
	for {
		select {
		case <-done:
			return
		case <-w.n.ctx.Done():
			<-done
			return
		case <-w.wake:
		case <-retry.C:
		}
		w.mu.Lock()
		pod, gone := w.pod, w.gone
		w.mu.Unlock()
		if gone {
			continue // forced out of the API: no status to report
		}
		if err := w.syncStatus(w.n.ctx, pod); err != nil && w.n.ctx.Err() == nil && !apierrors.IsNotFound(err) {
			w.log.Error(err, "updating the terminating pod's status")
		}
	}
}

// syncStatus writes the status this node observes, when it differs from the API's.
func (w *podWorker) syncStatus(ctx context.Context, pod *corev1.Pod) error {
	desired := w.status(pod)
	if apiequality.Semantic.DeepEqual(desired, pod.Status) {
		return nil
	}
	err := retryOnConflict(func() error {
		cur, err := w.n.cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != pod.UID {
			return apierrors.NewNotFound(corev1.Resource("pods"), pod.Name)
		}
		cur.Status = w.status(cur)
		_, err = w.n.cs.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	return err
}

func retryOnConflict(f func() error) error {
	var err error
	for range 5 {
		if err = f(); !apierrors.IsConflict(err) {
			return err
		}
	}
	return err
}

// status is the Pod's status as a kubelet reports it, on top of what the API holds (conditions
// this node does not own are kept).
func (w *podWorker) status(pod *corev1.Pod) corev1.PodStatus {
	st := *pod.Status.DeepCopy()
	w.mu.Lock()
	sandbox := w.nics != nil
	runners := make([]*containerRunner, 0, len(w.containers))
	for _, c := range w.containers {
		runners = append(runners, c)
	}
	w.mu.Unlock()

	hostIP := w.n.cfg.InternalIP.String()
	st.HostIP, st.HostIPs = hostIP, []corev1.HostIP{{IP: hostIP}}
	if st.StartTime == nil {
		t := w.startTime
		st.StartTime = &t
	}
	if sandbox {
		ips := w.podIPs()
		st.PodIPs = nil
		for _, ip := range ips {
			st.PodIPs = append(st.PodIPs, corev1.PodIP{IP: ip})
		}
		if len(ips) > 0 {
			st.PodIP = ips[0]
		}
	}

	byName := map[string]corev1.ContainerStatus{}
	for _, c := range runners {
		byName[c.spec.Name] = c.status()
	}
	statuses := make([]corev1.ContainerStatus, 0, len(pod.Spec.Containers))
	for _, c := range pod.Spec.Containers {
		cs, ok := byName[c.Name]
		if !ok {
			cs = corev1.ContainerStatus{Name: c.Name, Image: c.Image,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}
		}
		statuses = append(statuses, cs)
	}
	// kube-ovn reads ContainerStatuses[0]; a kubelet sorts them by name.
	sort.Slice(statuses, func(i, j int) bool { return statuses[i].Name < statuses[j].Name })
	st.ContainerStatuses = statuses

	running, waiting, succeeded, failed, ready := 0, 0, 0, 0, 0
	for _, cs := range statuses {
		switch {
		case cs.State.Running != nil:
			running++
		case cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0:
			succeeded++
		case cs.State.Terminated != nil:
			failed++
		case cs.LastTerminationState.Terminated != nil:
			// waiting to restart: it ran before
			running++
		default:
			waiting++
		}
		if cs.Ready {
			ready++
		}
	}
	switch {
	case waiting > 0:
		st.Phase = corev1.PodPending
	case running > 0:
		st.Phase = corev1.PodRunning
	case failed > 0:
		st.Phase = corev1.PodFailed
	case succeeded > 0:
		st.Phase = corev1.PodSucceeded
	default:
		st.Phase = corev1.PodPending
	}
	allReady := len(statuses) > 0 && ready == len(statuses)
	notReady := ""
	if !allReady {
		var names []string
		for _, cs := range statuses {
			if !cs.Ready {
				names = append(names, cs.Name)
			}
		}
		notReady = fmt.Sprintf("containers with unready status: %v", names)
	}
	cond := func(t corev1.PodConditionType, ok bool, reason, msg string) {
		c := corev1.PodCondition{Type: t, Status: corev1.ConditionFalse, Reason: reason, Message: msg}
		if ok {
			c.Status, c.Reason, c.Message = corev1.ConditionTrue, "", ""
		}
		setCondition(&st, c)
	}
	cond(corev1.PodScheduled, true, "", "")
	cond(corev1.PodReadyToStartContainers, sandbox, "", "")
	if len(pod.Spec.InitContainers) > 0 {
		cond(corev1.PodInitialized, false, "ContainersNotInitialized", "init containers are not run by the lab node")
	} else {
		cond(corev1.PodInitialized, true, "", "")
	}
	cond(corev1.ContainersReady, allReady, "ContainersNotReady", notReady)
	cond(corev1.PodReady, allReady, "ContainersNotReady", notReady)
	return st
}

// setCondition sets c, keeping the transition time when the status did not change.
func setCondition(st *corev1.PodStatus, c corev1.PodCondition) {
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	for i := range st.Conditions {
		if st.Conditions[i].Type != c.Type {
			continue
		}
		old := st.Conditions[i]
		c.LastTransitionTime = old.LastTransitionTime
		if old.Status != c.Status || c.LastTransitionTime.IsZero() {
			c.LastTransitionTime = now
		}
		c.LastProbeTime = old.LastProbeTime
		c.ObservedGeneration = old.ObservedGeneration
		st.Conditions[i] = c
		return
	}
	c.LastTransitionTime = now
	st.Conditions = append(st.Conditions, c)
}

var errNotRunning = errors.New("container is not running")
