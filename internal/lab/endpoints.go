package lab

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

const (
	managedBy         = "lab.vpcgw.io"
	triggerAnnotation = "endpoints.kubernetes.io/last-change-trigger-time"
)

// endpointSlices plays kube-controller-manager's EndpointSlice controller (envtest runs none):
// for every Service with a selector it keeps one IPv4 EndpointSlice of the matching pods.
type endpointSlices struct {
	client client.Client
}

func (e *endpointSlices) setup(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("lab-endpointslices").
		For(&corev1.Service{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(e.servicesOfPod)).
		Complete(e)
}

func (e *endpointSlices) servicesOfPod(ctx context.Context, o client.Object) []reconcile.Request {
	var svcs corev1.ServiceList
	if err := e.client.List(ctx, &svcs, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, s := range svcs.Items {
		if len(s.Spec.Selector) > 0 && labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(o.GetLabels())) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&s)})
		}
	}
	return out
}

func (e *endpointSlices) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	sliceKey := client.ObjectKey{Namespace: req.Namespace, Name: req.Name + "-lab"}
	var svc corev1.Service
	if err := e.client.Get(ctx, req.NamespacedName, &svc); err != nil || len(svc.Spec.Selector) == 0 {
		if err != nil && !apierrors.IsNotFound(err) {
			return reconcile.Result{}, err
		}
		old := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: sliceKey.Namespace, Name: sliceKey.Name}}
		return reconcile.Result{}, client.IgnoreNotFound(e.client.Delete(ctx, old))
	}
	var pods corev1.PodList
	if err := e.client.List(ctx, &pods, client.InNamespace(svc.Namespace), client.MatchingLabels(svc.Spec.Selector)); err != nil {
		return reconcile.Result{}, err
	}
	desired := desiredSlice(&svc, pods.Items)
	desired.Name, desired.Namespace = sliceKey.Name, sliceKey.Namespace

	var cur discoveryv1.EndpointSlice
	switch err := e.client.Get(ctx, sliceKey, &cur); {
	case apierrors.IsNotFound(err):
		desired.Annotations = map[string]string{triggerAnnotation: time.Now().Format(time.RFC3339Nano)}
		return reconcile.Result{}, e.client.Create(ctx, desired)
	case err != nil:
		return reconcile.Result{}, err
	}
	if apiequality.Semantic.DeepEqual(cur.Endpoints, desired.Endpoints) && apiequality.Semantic.DeepEqual(cur.Ports, desired.Ports) {
		return reconcile.Result{}, nil
	}
	cur.Endpoints, cur.Ports = desired.Endpoints, desired.Ports
	if cur.Annotations == nil {
		cur.Annotations = map[string]string{}
	}
	// As kube-controller-manager does: the time of the change, for network programming latency.
	cur.Annotations[triggerAnnotation] = time.Now().Format(time.RFC3339Nano)
	if err := e.client.Update(ctx, &cur); err != nil {
		return reconcile.Result{}, fmt.Errorf("updating EndpointSlice %s: %w", sliceKey, err)
	}
	return reconcile.Result{}, nil
}

func desiredSlice(svc *corev1.Service, pods []corev1.Pod) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{
			discoveryv1.LabelServiceName: svc.Name,
			discoveryv1.LabelManagedBy:   managedBy,
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for _, p := range svc.Spec.Ports {
		name, proto := p.Name, p.Protocol
		port := p.TargetPort.IntVal
		if p.TargetPort.StrVal != "" || port == 0 {
			port = namedPort(pods, p.TargetPort.StrVal, p.Port)
		}
		es.Ports = append(es.Ports, discoveryv1.EndpointPort{Name: &name, Protocol: &proto, Port: &port})
	}
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	for _, pod := range pods {
		if pod.Status.PodIP == "" || pod.DeletionTimestamp != nil {
			continue
		}
		ready := podReady(&pod)
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{pod.Status.PodIP},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
			NodeName:   &pod.Spec.NodeName,
		})
	}
	return es
}

func namedPort(pods []corev1.Pod, name string, fallback int32) int32 {
	for _, pod := range pods {
		for _, c := range pod.Spec.Containers {
			for _, cp := range c.Ports {
				if cp.Name == name {
					return cp.ContainerPort
				}
			}
		}
	}
	return fallback
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
