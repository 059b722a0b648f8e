package labnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// minimumGracePeriod is what the kubelet leaves a container between SIGTERM and SIGKILL however
// much of the grace period its preStop hook took (kuberuntime's minimumGracePeriodInSeconds).
const minimumGracePeriod = 2 * time.Second

// defaultGracePeriod is the API's default terminationGracePeriodSeconds.
const defaultGracePeriod = 30 * time.Second

// podGracePeriod is the grace period the kubelet gives the Pod's containers: the deletion's, else
// the spec's.
func podGracePeriod(pod *corev1.Pod) time.Duration {
	switch {
	case pod.DeletionGracePeriodSeconds != nil:
		return time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		return time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	default:
		return defaultGracePeriod
	}
}

// runHook runs a lifecycle handler as the kubelet's handler runner does: exec in the container,
// sleep, or an HTTP GET whose status code does not matter (only reaching the server does).
func (c *containerRunner) runHook(ctx context.Context, h *corev1.LifecycleHandler) error {
	switch {
	case h.Exec != nil:
		code, out, err := c.execCapture(ctx, h.Exec.Command)
		if err != nil {
			return fmt.Errorf("exec lifecycle hook %q: %w", h.Exec.Command, err)
		}
		if code != 0 {
			return fmt.Errorf("exec lifecycle hook %q exited with %d: %q", h.Exec.Command, code, out)
		}
		return nil
	case h.Sleep != nil:
		t := time.NewTimer(time.Duration(h.Sleep.Seconds) * time.Second)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return errors.New("container terminated before sleep hook finished")
		case <-t.C:
			return nil
		}
	case h.HTTPGet != nil:
		if _, err := c.httpGet(ctx, h.HTTPGet, "lifecycle"); err != nil {
			return fmt.Errorf("HTTP lifecycle hook (%s): %w", h.HTTPGet.Path, err)
		}
		return nil
	default:
		return errors.New("invalid lifecycle handler: no exec, httpGet or sleep")
	}
}

// startKill runs killContainer beside the runner's wait for the process, so that an exit during
// the preStop hook is reported when it happens; the channel closes once the kill is done.
func (c *containerRunner) startKill(p *os.Process, grace time.Duration, preStop bool, message string) chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.killContainer(p, grace, preStop, message)
	}()
	return done
}

// killContainer is the kubelet's: the preStop hook (when asked for and there is a grace period),
// bounded by the grace period, then SIGTERM, then SIGKILL once what is left of the grace period
// (at least minimumGracePeriod) has run out. A grace period of 0 is SIGKILL at once: the lab's
// way of a forced stop, where the kubelet would still give 1 s.
func (c *containerRunner) killContainer(p *os.Process, grace time.Duration, preStop bool, message string) {
	if message == "" {
		message = "Stopping container " + c.spec.Name
	}
	c.w.event(c.pod, c.spec.Name, corev1.EventTypeNormal, "Killing", message)
	if h := c.spec.Lifecycle; preStop && grace > 0 && h != nil && h.PreStop != nil {
		took, abandon := c.runPreStop(h.PreStop, grace)
		// A hook still running goes with the container, as in a runtime (its exec is one of the
		// container's processes): it is ended only once the container is.
		defer abandon()
		grace = max(grace-took, minimumGracePeriod)
	}
	c.signalStop(p, grace)
}

// runPreStop starts the preStop hook and waits for it, at most grace (the kubelet's
// executePreStopHook); it returns the time taken and a func that ends the hook if it still runs.
// A failed hook is reported and the stop goes on.
func (c *containerRunner) runPreStop(h *corev1.LifecycleHandler, grace time.Duration) (time.Duration, func()) {
	start := time.Now()
	ctx, cancel := context.WithCancel(c.w.n.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := c.runHook(ctx, h)
		if err != nil && ctx.Err() == nil {
			c.w.log.Info("preStop hook failed", "container", c.spec.Name, "error", err.Error())
			// The kubelet's message: the hook's error is not put in the event, where it could
			// leak a secret; it is in the log above.
			c.w.event(c.pod, c.spec.Name, corev1.EventTypeWarning, "FailedPreStopHook", "PreStopHook failed")
		}
	}()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		c.w.log.Info("preStop hook not completed in the grace period", "container", c.spec.Name, "grace", grace)
	}
	return time.Since(start), func() { cancel(); <-done }
}

// signalStop sends SIGTERM to the container's process group, and SIGKILL if it has not exited
// within grace (at once for 0).
func (c *containerRunner) signalStop(p *os.Process, grace time.Duration) {
	if c.hasExited(p) {
		return // during the hook: its pid may be another process's by now
	}
	if grace > 0 {
		_ = syscall.Kill(-p.Pid, syscall.SIGTERM)
		deadline := time.Now().Add(grace)
		for syscall.Kill(p.Pid, 0) == nil && !c.hasExited(p) {
			if time.Now().After(deadline) {
				_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		return
	}
	_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
}

// event records an Event on the Pod as the kubelet's recorder does (source kubelet on this node),
// about container when given. Best effort, as the recorder's: a failure is logged.
func (w *podWorker) event(pod *corev1.Pod, container, eventType, reason, message string) {
	if w.n.ctx.Err() != nil {
		return // the node is stopping: no API to tell
	}
	ref := corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
		ResourceVersion: pod.ResourceVersion}
	if container != "" {
		ref.FieldPath = fmt.Sprintf("spec.containers{%s}", container)
	}
	now := time.Now()
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", pod.Name, now.UnixNano()), Namespace: pod.Namespace},
		InvolvedObject: ref, Reason: reason, Message: message, Type: eventType, Count: 1,
		FirstTimestamp: metav1.NewTime(now), LastTimestamp: metav1.NewTime(now),
		Source:              corev1.EventSource{Component: "kubelet", Host: w.n.cfg.NodeName},
		ReportingController: "kubelet", ReportingInstance: w.n.cfg.NodeName,
	}
	ctx, cancel := context.WithTimeout(w.n.ctx, 10*time.Second)
	defer cancel()
	if _, err := w.n.cs.CoreV1().Events(pod.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil && w.n.ctx.Err() == nil {
		w.log.Error(err, "recording an event", "reason", reason, "container", container)
	}
}
