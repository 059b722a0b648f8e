package controller

import (
	"context"
	"fmt"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vpcgw/vpcgw/internal/controller/wake"
	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/status"
)

// secondWriter reads whether kube-ovn-controller serves Services through the gateways itself
// (SPEC K10), and makes the metric, the status condition and the log say what it found. An error
// reading the cache counts as "serves": vpcgw writes only when it knows it is the only writer.
func (r *GatewayReconciler) secondWriter(ctx context.Context) model.SecondWriter {
	w, err := ReadSecondWriter(ctx, r.Client, r.Flags)
	if err != nil {
		w = model.SecondWriter{Serves: true, Reason: model.ReasonKubeOVNUnreadable, Message: "cannot read: " + err.Error()}
	}
	return r.noteSecondWriter(w)
}

// ReadSecondWriter reads kube-ovn-controller's Deployment and configuration (SPEC K10) and says
// whether kube-ovn serves Services itself. An error is returned, not taken for either answer:
// the controller takes it for "serves", and a release that cannot know must not report success.
func ReadSecondWriter(ctx context.Context, c client.Reader, f Flags) (model.SecondWriter, error) {
	ns, name := f.kubeOVNNamespace(), f.kubeOVNControllerDeployment()
	var d *appsv1.Deployment
	var got appsv1.Deployment
	switch err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &got); {
	case err == nil:
		d = &got
	case !apierrors.IsNotFound(err):
		return model.SecondWriter{}, fmt.Errorf("reading kube-ovn-controller's Deployment %s/%s: %w", ns, name, err)
	}
	var cm corev1.ConfigMap
	var natConfig map[string]string
	switch err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: model.GatewayConfigMap}, &cm); {
	case err == nil:
		natConfig = cm.Data
	case !apierrors.IsNotFound(err):
		return model.SecondWriter{}, fmt.Errorf("reading kube-ovn's ConfigMap %s/%s: %w", ns, model.GatewayConfigMap, err)
	}
	return model.KubeOVNServesServices(d, natConfig), nil
}

func (r *GatewayReconciler) noteSecondWriter(w model.SecondWriter) model.SecondWriter {
	was, changed := r.second.swap(w)
	if !changed {
		return w
	}
	kubeOVNServes.Set(boolGauge(w.Serves))
	if w.Serves {
		r.Log.Info("kube-ovn-controller serves Services through the gateways itself: vpcgw serves and releases nothing", "reason", w.Reason, "why", w.Message)
	} else {
		r.Log.Info("vpcgw serves", "reason", w.Reason, "why", w.Message)
		if was != nil && was.Serves {
			r.events.ForgetReason(model.ReasonKubeOVNServesEvent) // a later stand-aside is news again
		}
	}
	if r.Status != nil {
		st := metav1.ConditionTrue
		if w.Serves {
			st = metav1.ConditionFalse
		}
		r.Status.SetCondition(metav1.Condition{Type: status.ConditionServing, Status: st, Reason: w.Reason, Message: w.Message})
	}
	return w
}

// lastSecondWriter is what the controller last found of kube-ovn's own Service controller.
type lastSecondWriter struct {
	mu   sync.Mutex
	last *model.SecondWriter // nil: not read yet
}

// swap keeps w and returns what was found before (nil: nothing) and whether w differs.
func (l *lastSecondWriter) swap(w model.SecondWriter) (was *model.SecondWriter, changed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	was, l.last = l.last, &w
	return was, was == nil || *was != w
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// standAside is a sync of gateway key while kube-ovn serves Services itself (SPEC K10): nothing is
// written, released or programmed. The gateway's agent streams are closed, so that no agent of
// vpcgw acts in the gateway, and its planner forgets what it planned, so that the first sync after
// kube-ovn stands down plans and programs the whole gateway again. Each Service bound to it is told
// why once.
func (r *GatewayReconciler) standAside(ctx context.Context, key string, w model.SecondWriter) (reconcile.Result, error) {
	r.planners.of(key).Invalidate()
	r.sessions.closeGateway(key, false)
	var svcs corev1.ServiceList
	if err := r.Client.List(ctx, &svcs, client.MatchingFields{wake.IndexServiceGateway: key}); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing the Services of gateway %q: %w", key, err)
	}
	for i := range svcs.Items {
		svc := &svcs.Items[i]
		r.events.Emit(client.ObjectKeyFromObject(svc), svc.UID, model.Event{Type: corev1.EventTypeWarning,
			Reason: model.ReasonKubeOVNServesEvent, Message: "kube-ovn-controller may serve this Service itself, so vpcgw serves and releases nothing for it: " + w.Message})
	}
	return reconcile.Result{}, nil
}

// secondWriterChanged wakes every gateway and the Services bound to none, when kube-ovn's
// configuration changed: each stands aside or resumes (SPEC K10).
func (r *GatewayReconciler) secondWriterChanged(ctx context.Context, o client.Object) []reconcile.Request {
	r.secondWriter(ctx)
	return append(r.wake.AllGateways(ctx, o), reconcile.Request{NamespacedName: client.ObjectKey{Name: unboundKey}})
}
