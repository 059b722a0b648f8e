// Package controller watches Services, EndpointSlices, IptablesEIPs, VpcNatGateways and gateway
// pods, asks the model what each gateway must serve, programs every gateway instance through the
// transport, and then publishes the Services' ingress and events.
package controller

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/transport"
)

// Gateway pod labels and annotation (kube-ovn's names).
const (
	GatewayPodLabel      = "ovn.kubernetes.io/vpc-nat-gw" // "true" on every gateway pod
	GatewayAppLabelPrefx = "vpc-nat-gw-"                  // app=vpc-nat-gw-<gateway>
	GatewayPodAnnotation = model.AnnotationGateway        // the gateway's name, on its pods
	// DefaultGatewayNamespace is where kube-ovn runs gateway pods when spec.namespace is empty.
	DefaultGatewayNamespace = "kube-system"

	indexServiceGateway = "vpcgw.gateway"
	indexServiceEIP     = "vpcgw.eip"
	indexSliceService   = "vpcgw.service"
)

// CacheOptions restricts the Pod informer to gateway pods: vpcgw never needs the others here.
func CacheOptions() cache.Options {
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Pod{}: {Label: labels.SelectorFromSet(labels.Set{GatewayPodLabel: "true"})},
	}}
}

// GatewayReconciler programs one VpcNatGateway per reconcile: all its instances get the same
// complete state, then the Services it serves get their ingress.
type GatewayReconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	Flags    Flags
	Dialer   transport.Dialer
	// ApplyTimeout bounds the wait for an agent's acknowledgement.
	ApplyTimeout time.Duration
	Log          logr.Logger

	sessions *sessions
	// lastEvent remembers the last event per Service UID and reason, so that a cause is reported
	// once, not on every reconcile (SPEC T3).
	eventsMu  sync.Mutex
	lastEvent map[types.UID]map[string]string
}

// SetupWithManager registers the indexes and watches.
func (r *GatewayReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if r.ApplyTimeout == 0 {
		r.ApplyTimeout = 30 * time.Second
	}
	r.sessions = newSessions(r.Dialer, r.ApplyTimeout, r.Log.WithName("sessions"))
	r.lastEvent = map[types.UID]map[string]string{}
	go func() { <-ctx.Done(); r.sessions.closeAll() }()

	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &corev1.Service{}, indexServiceGateway, func(o client.Object) []string {
		return nonEmpty(o.GetAnnotations()[model.AnnotationGateway])
	}); err != nil {
		return fmt.Errorf("indexing Services by gateway: %w", err)
	}
	if err := idx.IndexField(ctx, &corev1.Service{}, indexServiceEIP, func(o client.Object) []string {
		return nonEmpty(o.GetAnnotations()[model.AnnotationEIP])
	}); err != nil {
		return fmt.Errorf("indexing Services by EIP: %w", err)
	}
	if err := idx.IndexField(ctx, &discoveryv1.EndpointSlice{}, indexSliceService, func(o client.Object) []string {
		return nonEmpty(o.GetLabels()[discoveryv1.LabelServiceName])
	}); err != nil {
		return fmt.Errorf("indexing EndpointSlices by Service: %w", err)
	}

	return ctrl.NewControllerManagedBy(mgr).
		Named("vpcgw-gateway").
		For(&kubeovnv1.VpcNatGateway{}).
		Watches(&corev1.Service{}, handler.Funcs{
			CreateFunc: func(_ context.Context, e handlerCreate, q reqQueue) { enqueueGateway(q, e.Object) },
			UpdateFunc: func(_ context.Context, e handlerUpdate, q reqQueue) {
				enqueueGateway(q, e.ObjectOld)
				enqueueGateway(q, e.ObjectNew)
			},
			DeleteFunc:  func(_ context.Context, e handlerDelete, q reqQueue) { enqueueGateway(q, e.Object) },
			GenericFunc: func(_ context.Context, e handlerGeneric, q reqQueue) { enqueueGateway(q, e.Object) },
		}).
		Watches(&discoveryv1.EndpointSlice{}, handler.EnqueueRequestsFromMapFunc(r.gatewayOfSlice)).
		Watches(&kubeovnv1.IptablesEIP{}, handler.EnqueueRequestsFromMapFunc(r.gatewaysOfEIP)).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(gatewayOfPod)).
		Complete(r)
}

// Reconcile programs gateway req.Name.
func (r *GatewayReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := r.Log.WithValues("gateway", req.Name)
	snap, gw, err := r.snapshot(ctx, req.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	plan := model.Compute(snap, r.Flags.Gates())

	programmed := false
	if gw != nil {
		instances, err := r.instances(ctx, gw)
		if err != nil {
			return reconcile.Result{}, err
		}
		state := plan.Gateways[slices.IndexFunc(plan.Gateways, func(g model.GatewayPlan) bool { return g.Name == gw.Name })].State
		switch {
		case len(instances) == 0:
			log.Info("gateway has no running instance yet; waiting for one")
		default:
			if err := r.sessions.apply(ctx, gw.Name, instances, state); err != nil {
				r.emitAll(plan, corev1.EventTypeWarning, "NftableLbSvcProgrammingFailed",
					fmt.Sprintf("programming gateway %s failed, retrying: %v", gw.Name, err))
				return reconcile.Result{}, fmt.Errorf("programming gateway %s: %w", gw.Name, err)
			}
			programmed = true
			log.V(1).Info("gateway programmed", "instances", len(instances), "identities", len(state.Identities))
		}
	}

	var errs []error
	for _, sp := range plan.Services {
		r.emit(sp)
		if !programmed && sp.EIPServed {
			continue // publish ingress only once the gateway serves it (SPEC T1)
		}
		if err := r.publishIngress(ctx, sp); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return reconcile.Result{}, fmt.Errorf("publishing ingress: %v", errs)
	}
	return reconcile.Result{}, nil
}

// snapshot reads what the model needs for one gateway. A missing gateway yields gw == nil.
func (r *GatewayReconciler) snapshot(ctx context.Context, name string) (model.Snapshot, *kubeovnv1.VpcNatGateway, error) {
	var snap model.Snapshot
	var gw *kubeovnv1.VpcNatGateway
	var g kubeovnv1.VpcNatGateway
	switch err := r.Client.Get(ctx, types.NamespacedName{Name: name}, &g); {
	case err == nil:
		gw = &g
		snap.Gateways = []kubeovnv1.VpcNatGateway{g}
	case apierrors.IsNotFound(err):
	default:
		return snap, nil, fmt.Errorf("reading gateway %s: %w", name, err)
	}

	var svcs corev1.ServiceList
	if err := r.Client.List(ctx, &svcs, client.MatchingFields{indexServiceGateway: name}); err != nil {
		return snap, nil, fmt.Errorf("listing Services of gateway %s: %w", name, err)
	}
	snap.Services = svcs.Items
	seenEIP := map[string]bool{}
	for _, svc := range svcs.Items {
		if eipName := svc.Annotations[model.AnnotationEIP]; eipName != "" && !seenEIP[eipName] {
			seenEIP[eipName] = true
			var eip kubeovnv1.IptablesEIP
			switch err := r.Client.Get(ctx, types.NamespacedName{Name: eipName}, &eip); {
			case err == nil:
				snap.EIPs = append(snap.EIPs, eip)
			case !apierrors.IsNotFound(err):
				return snap, nil, fmt.Errorf("reading IptablesEIP %s: %w", eipName, err)
			}
		}
		var es discoveryv1.EndpointSliceList
		if err := r.Client.List(ctx, &es, client.InNamespace(svc.Namespace), client.MatchingFields{indexSliceService: svc.Name}); err != nil {
			return snap, nil, fmt.Errorf("listing EndpointSlices of %s/%s: %w", svc.Namespace, svc.Name, err)
		}
		snap.EndpointSlices = append(snap.EndpointSlices, es.Items...)
	}
	return snap, gw, nil
}

// instances lists the gateway's running pods (kube-ovn's getNatGwPods).
func (r *GatewayReconciler) instances(ctx context.Context, gw *kubeovnv1.VpcNatGateway) ([]transport.Instance, error) {
	ns := gw.Spec.Namespace
	if ns == "" {
		ns = DefaultGatewayNamespace
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{
		"app": GatewayAppLabelPrefx + gw.Name, GatewayPodLabel: "true",
	}); err != nil {
		return nil, fmt.Errorf("listing pods of gateway %s: %w", gw.Name, err)
	}
	var out []transport.Instance
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		out = append(out, transport.Instance{
			Gateway: gw.Name, Namespace: p.Namespace, Pod: p.Name, UID: p.UID,
			Netns: p.Annotations[transport.NetnsAnnotation],
		})
	}
	slices.SortFunc(out, func(a, b transport.Instance) int { return cmp.Compare(a.Pod, b.Pod) })
	return out, nil
}

// publishIngress makes status.loadBalancer.ingress equal to the plan's.
func (r *GatewayReconciler) publishIngress(ctx context.Context, sp model.ServicePlan) error {
	var svc corev1.Service
	if err := r.Client.Get(ctx, sp.Key, &svc); err != nil {
		return client.IgnoreNotFound(err)
	}
	if svc.UID != sp.UID || svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return nil
	}
	if ingressEqual(svc.Status.LoadBalancer.Ingress, sp.Ingress) {
		return nil
	}
	patch := client.MergeFrom(svc.DeepCopy())
	svc.Status.LoadBalancer.Ingress = sp.Ingress
	if err := r.Client.Status().Patch(ctx, &svc, patch); err != nil {
		return fmt.Errorf("service %s: %w", sp.Key, err)
	}
	r.Log.Info("ingress published", "service", sp.Key, "ingress", sp.Ingress)
	return nil
}

func ingressEqual(a, b []corev1.LoadBalancerIngress) bool {
	return slices.EqualFunc(a, b, func(x, y corev1.LoadBalancerIngress) bool { return x.IP == y.IP && x.Hostname == y.Hostname })
}

// emit records the plan's events for one Service, each cause once.
func (r *GatewayReconciler) emit(sp model.ServicePlan) {
	for _, ev := range sp.Events {
		if r.seen(sp.UID, ev.Reason, ev.Message) {
			continue
		}
		r.Recorder.Eventf(serviceRef(sp), nil, ev.Type, ev.Reason, "Reconcile", "%s", ev.Message)
	}
}

func (r *GatewayReconciler) emitAll(plan model.Plan, typ, reason, msg string) {
	for _, sp := range plan.Services {
		if sp.EIPServed && !r.seen(sp.UID, reason, msg) {
			r.Recorder.Eventf(serviceRef(sp), nil, typ, reason, "Program", "%s", msg)
		}
	}
}

func (r *GatewayReconciler) seen(uid types.UID, reason, msg string) bool {
	r.eventsMu.Lock()
	defer r.eventsMu.Unlock()
	m := r.lastEvent[uid]
	if m == nil {
		m = map[string]string{}
		r.lastEvent[uid] = m
	}
	if m[reason] == msg {
		return true
	}
	m[reason] = msg
	return false
}

func serviceRef(sp model.ServicePlan) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: sp.Key.Namespace, Name: sp.Key.Name, UID: sp.UID}
}

func (r *GatewayReconciler) gatewayOfSlice(ctx context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[discoveryv1.LabelServiceName]
	if name == "" {
		return nil
	}
	var svc corev1.Service
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: o.GetNamespace(), Name: name}, &svc); err != nil {
		return nil
	}
	return requests(svc.Annotations[model.AnnotationGateway])
}

// gatewaysOfEIP wakes the gateways of every Service that names the EIP (SPEC S4: served as soon
// as the EIP is Ready, woken by the EIP's own events).
func (r *GatewayReconciler) gatewaysOfEIP(ctx context.Context, o client.Object) []reconcile.Request {
	var svcs corev1.ServiceList
	if err := r.Client.List(ctx, &svcs, client.MatchingFields{indexServiceEIP: o.GetName()}); err != nil {
		r.Log.Error(err, "listing Services of EIP", "eip", o.GetName())
		return nil
	}
	var out []reconcile.Request
	for _, svc := range svcs.Items {
		out = append(out, requests(svc.Annotations[model.AnnotationGateway])...)
	}
	if eip, ok := o.(*kubeovnv1.IptablesEIP); ok {
		out = append(out, requests(eip.Spec.NatGwDp)...)
	}
	return out
}

func gatewayOfPod(_ context.Context, o client.Object) []reconcile.Request {
	return requests(o.GetAnnotations()[GatewayPodAnnotation])
}

func requests(gw string) []reconcile.Request {
	if gw == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: gw}}}
}

func enqueueGateway(q reqQueue, o client.Object) {
	for _, r := range requests(o.GetAnnotations()[model.AnnotationGateway]) {
		q.Add(r)
	}
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}
