// Package controller syncs one VpcNatGateway per pass: it asks the model what the gateway must
// serve and writes that in phases (reconcile.go): finalizers and records first, then every
// gateway instance through the transport and the VIP routes, then record status, ingress and
// releases; one report turns the phases into metrics, status and events (report.go). Its parts
// with a job of their own are packages: wake (which gateways an event wakes; the cache indexes),
// kubewrite (the API writes), readiness, latency, serviceevents, objcache and metricsserve.
package controller

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/controller/kubewrite"
	"github.com/vpcgw/vpcgw/internal/controller/latency"
	"github.com/vpcgw/vpcgw/internal/controller/objcache"
	"github.com/vpcgw/vpcgw/internal/controller/readiness"
	"github.com/vpcgw/vpcgw/internal/controller/refusedpods"
	"github.com/vpcgw/vpcgw/internal/controller/routechecks"
	"github.com/vpcgw/vpcgw/internal/controller/serviceevents"
	"github.com/vpcgw/vpcgw/internal/controller/wake"
	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/ovn"
	"github.com/vpcgw/vpcgw/internal/transport"
)

// unboundKey is the reconcile key of Services that hold the finalizer but name no gateway: they
// only need releasing.
const unboundKey = ""

// CacheOptions keeps the caches small (objcache).
func CacheOptions(f Flags) cache.Options {
	return objcache.Options(f.kubeOVNNamespace(), f.kubeOVNControllerDeployment())
}

// GatewayReconciler programs one VpcNatGateway per reconcile: all its instances get the same
// complete state, and the Services bound to it get their records, ingress and finalizer.
type GatewayReconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	Flags    Flags
	Dialer   transport.Dialer
	// Routes writes the gateways' VIP router policies; nil turns route writing off.
	Routes RouteWriter
	// ApplyTimeout bounds the wait for an agent's acknowledgement.
	ApplyTimeout time.Duration
	// AgentKeepalive: see Options.AgentKeepalive.
	AgentKeepalive time.Duration
	// Workers is how many gateways are synced at once (0: DefaultGatewayWorkers). The work queue
	// never hands one gateway to two workers (SPEC L9).
	Workers int
	// MinSyncInterval is the least time between two syncs of one gateway: a burst of changes is
	// coalesced into one sync, a lone change is synced at once (kube-proxy's minSyncPeriod).
	MinSyncInterval time.Duration
	// Status, when set, learns each gateway's programming for the published status (SPEC O2).
	Status StatusRecorder
	// SyncStaleAfter is how long a gateway's changes may wait unapplied before readiness fails
	// (0: DefaultSyncStaleAfter; negative: never).
	SyncStaleAfter time.Duration
	// OnSynced: see Options.OnSynced.
	OnSynced func(gateway string)
	// Name names the controller (see Options.Name).
	Name string
	Log  logr.Logger

	health *readiness.Tracker

	throttle syncThrottle
	latency  latency.Tracker

	sessions *sessions
	changes  *changeTracker
	planners *planners
	// writer makes the API writes, and knows its own (SPEC R4).
	writer *kubewrite.Writer
	// wake maps events to the gateways they wake.
	wake *wake.Mapper
	// second is what secondWriter last found, for telling changes only.
	second lastSecondWriter
	// events gives each cause once (SPEC T3).
	events *serviceevents.Once
	// refused tells look-alike gateway Pods why they are no instances (SPEC N5).
	refused refusedpods.Memory
	// routeChecks are each gateway's last check of its VIPs against its Vpc's routes (SPEC V3);
	// routeQueue is the work queue once the controller runs, for the NB's route changes.
	routeChecks routechecks.Checks
	routeQueue  atomic.Pointer[routeQueue]
}

// RouteWriter converges one gateway's VIP router policies (SPEC V1) and reads the routes that
// must carry the VIPs to them (SPEC V3). *ovn.Writer is one.
type RouteWriter interface {
	Sync(ctx context.Context, want model.VIPRoutes) error
	// RouterRoutes reads a router's routes, cheaply (from a cache of the NB).
	RouterRoutes(ctx context.Context, router string) ([]ovn.Route, error)
	// OnRoutesChanged registers a func told the name of a router whose routes changed.
	OnRoutesChanged(fn func(router string))
}

// SetupWithManager registers the indexes and watches.
func (r *GatewayReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	ended := r.start(ctx)
	if err := wake.RegisterIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	r.wake = &wake.Mapper{Client: r.Client, Marks: r.changes, Log: r.Log}
	b := r.watches(mgr, ended)
	if r.Routes != nil {
		// A Vpc's routes changed in the NB: its gateways check their VIPs again (SPEC V3). The
		// Vpc's own change comes earlier than kube-ovn's write of the route.
		b = b.WatchesRawSource(source.Func(func(_ context.Context, q routeQueue) error {
			r.routeQueue.Store(&q)
			return nil
		}))
		r.Routes.OnRoutesChanged(r.routesChanged)
	}
	return b.Complete(r)
}

// start makes the reconciler's memory and agent sessions, which end with ctx. A stream that ends
// by itself wakes its gateway through the channel returned.
func (r *GatewayReconciler) start(ctx context.Context) chan event.TypedGenericEvent[client.Object] {
	if r.ApplyTimeout == 0 {
		r.ApplyTimeout = 30 * time.Second
	}
	// A stream that ends by itself wakes its gateway through this channel.
	ended := make(chan event.TypedGenericEvent[client.Object], 64)
	switch {
	case r.AgentKeepalive == 0:
		r.AgentKeepalive = DefaultAgentKeepalive
	case r.AgentKeepalive < 0:
		r.AgentKeepalive = 0
	}
	r.sessions = newSessions(r.Dialer, r.ApplyTimeout, r.Log.WithName("sessions"), func(gw string) {
		select {
		case ended <- event.TypedGenericEvent[client.Object]{Object: &kubeovnv1.VpcNatGateway{ObjectMeta: metav1.ObjectMeta{Name: gw}}}:
		case <-ctx.Done():
		}
	})
	r.sessions.keepalive = r.AgentKeepalive
	r.sessions.status = r.Status
	r.writer = &kubewrite.Writer{Client: r.Client, Log: r.Log}
	r.events = &serviceevents.Once{Recorder: r.Recorder}
	r.changes, r.planners = newChangeTracker(), newPlanners()
	r.throttle.min = r.MinSyncInterval
	staleAfter := r.SyncStaleAfter
	if staleAfter == 0 {
		staleAfter = readiness.DefaultSyncStaleAfter
	}
	r.health = readiness.New(staleAfter, clock.RealClock{})
	r.health.Gauge = func(gw string, since time.Time) {
		if gw == unboundKey {
			return
		}
		v := 0.0
		if !since.IsZero() {
			v = float64(since.UnixNano()) / 1e9
		}
		pendingSince.WithLabelValues(gw).Set(v)
	}
	go func() { <-ctx.Done(); r.sessions.closeAll() }()
	return ended
}

// watches are the controller's watches: what wakes a gateway.
func (r *GatewayReconciler) watches(mgr ctrl.Manager, ended chan event.TypedGenericEvent[client.Object]) *builder.TypedBuilder[reconcile.Request] {
	workers := r.Workers
	if workers <= 0 {
		workers = DefaultGatewayWorkers
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(cmp.Or(r.Name, "vpcgw-gateway")).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers,
			// The queue tells readiness when work for a gateway arrives (SPEC O3).
			NewQueue: func(name string, rl workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
				return readiness.NewQueue(name, rl, r.health, r.Log)
			}}).
		For(&kubeovnv1.VpcNatGateway{}).
		Watches(&corev1.Service{}, handler.Funcs{
			CreateFunc: func(_ context.Context, e handlerCreate, q reqQueue) { wake.Enqueue(q, r.wake.ServiceChanged(e.Object)) },
			UpdateFunc: func(_ context.Context, e handlerUpdate, q reqQueue) {
				wake.Enqueue(q, r.wake.ServiceChanged(e.ObjectOld))
				wake.Enqueue(q, r.wake.ServiceChanged(e.ObjectNew))
			},
			DeleteFunc: func(_ context.Context, e handlerDelete, q reqQueue) {
				wake.Enqueue(q, r.wake.ServiceChanged(e.Object))
				r.events.ForgetService(e.Object.GetUID()) // bounded by live Services (SPEC N4)
			},
			GenericFunc: func(_ context.Context, e handlerGeneric, q reqQueue) {
				wake.Enqueue(q, r.wake.ServiceChanged(e.Object))
			},
		}).
		// A deleted slice's trigger time is forgotten: the tracker holds live slices only (SPEC N4).
		Watches(&discoveryv1.EndpointSlice{}, latency.ForgetOnDelete{EventHandler: handler.EnqueueRequestsFromMapFunc(r.wake.GatewayOfSlice), Forget: r.latency.Forget}).
		Watches(&kubeovnv1.IptablesEIP{}, handler.EnqueueRequestsFromMapFunc(r.wake.GatewaysOfEIP)).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.wake.GatewaysOfPod)).
		// kube-ovn's StatefulSet decides which of a gateway's pods are instances (SPEC N5).
		Watches(&appsv1.StatefulSet{}, handler.EnqueueRequestsFromMapFunc(r.wake.GatewayOfStatefulSet)).
		// kube-ovn's allocations decide a backend's address (SPEC N2).
		Watches(&kubeovnv1.IP{}, handler.EnqueueRequestsFromMapFunc(r.wake.GatewaysOfAddress)).
		// A Subnet's CIDR, gateway and reserved addresses decide what may be a backend.
		Watches(&kubeovnv1.Subnet{}, handler.EnqueueRequestsFromMapFunc(r.wake.GatewaysOfSubnet), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&kubeovnv1.IptablesDnatRule{}, handler.EnqueueRequestsFromMapFunc(r.wake.GatewayOfRecord), builder.WithPredicates(r.recordChangedByOthers())).
		// kube-ovn's floating IPs hold their EIP (SPEC N3).
		Watches(&kubeovnv1.IptablesFIPRule{}, handler.EnqueueRequestsFromMapFunc(r.wake.GatewayOfNatRule)).
		Watches(&vpcgwv1alpha1.ServiceRecord{}, handler.EnqueueRequestsFromMapFunc(r.wake.GatewayOfRecord), builder.WithPredicates(r.recordChangedByOthers())).
		// A Vpc's namespaces admit Services to its gateways (SPEC N1).
		Watches(&kubeovnv1.Vpc{}, handler.EnqueueRequestsFromMapFunc(r.wake.GatewaysOfVpc), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// A new natGwNamePrefix moves every gateway's pods: replan them all. Its keys and
		// kube-ovn-controller's flags may also turn kube-ovn's own Service controller on or off
		// (SPEC K10): every gateway, and the Services bound to none, stand aside or resume.
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.secondWriterChanged)).
		Watches(&appsv1.Deployment{}, handler.EnqueueRequestsFromMapFunc(r.secondWriterChanged), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(source.Channel(ended, &handler.EnqueueRequestForObject{}))
}

// syncThrottle keeps MinSyncInterval between two syncs of one gateway.
type syncThrottle struct {
	min  time.Duration
	mu   sync.Mutex
	last map[string]time.Time
}

// wait reports how long a sync of key must wait to keep min, and otherwise records that a sync
// starts now.
func (t *syncThrottle) wait(key string) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	if wait := t.min - now.Sub(t.last[key]); wait > 0 {
		return wait
	}
	if t.last == nil {
		t.last = map[string]time.Time{}
	}
	t.last[key] = now
	return 0
}

func (t *syncThrottle) forget(gw string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.last, gw)
}

// gatewayExists reports whether gateway gw exists (in the cache); an error counts as existing.
func (r *GatewayReconciler) gatewayExists(ctx context.Context, gw string) bool {
	var g kubeovnv1.VpcNatGateway
	return !apierrors.IsNotFound(r.Client.Get(ctx, types.NamespacedName{Name: gw}, &g))
}

// forgetGateway drops what the controller remembers of a gateway that is gone (its planner, its
// last sync time, its pending work, its agent streams, its metric series): tenants choose gateway
// names in annotations, so nothing keyed by one may outlive the gateway (SPEC N4). Its Services'
// changes stay marked for when it comes back.
func (r *GatewayReconciler) forgetGateway(gw string) {
	r.planners.forget(gw)
	r.throttle.forget(gw)
	r.health.Forget(gw)
	r.sessions.closeGateway(gw, true)
	r.routeChecks.Forget(gw)
	r.refused.Forget(gw)
	deleteGatewaySeries(gw)
}

// placement reads where kube-ovn runs gateway pods: its namespace (a flag) and its natGwNamePrefix
// (ConfigMap ovn-vpc-nat-config there, read as kube-ovn reads it: empty or missing is the default).
func (r *GatewayReconciler) placement(ctx context.Context) (model.GatewayPlacement, error) {
	p := model.GatewayPlacement{KubeOVNNamespace: r.Flags.kubeOVNNamespace()}
	var cm corev1.ConfigMap
	switch err := r.Client.Get(ctx, client.ObjectKey{Namespace: p.KubeOVNNamespace, Name: model.GatewayConfigMap}, &cm); {
	case err == nil:
		p.NamePrefix = cm.Data[model.GatewayConfigNamePrefix]
	case !apierrors.IsNotFound(err):
		return p, fmt.Errorf("reading ConfigMap %s/%s: %w", p.KubeOVNNamespace, model.GatewayConfigMap, err)
	}
	return p, nil
}

// recordChangedByOthers passes the record events that may need repair (SPEC R4): a delete, or a
// change of spec or labels. The controller's own creates, status writes and deletes would only
// wake the gateway for nothing (a wasted sync per backend change).
func (r *GatewayReconciler) recordChangedByOthers() predicate.Funcs {
	return predicate.Funcs{
		// kube-ovn's own rule on an EIP holds its port. A record this controller did not just
		// write (restored from a backup, written by hand, left by another instance) may have no
		// live owner: its owner is replanned at once, and the record removed if it is an orphan
		// (SPEC L10), not only at the next full plan. The controller's own creates pass only when
		// their event arrives before the write's answer was noted: one spare sync.
		CreateFunc: func(e event.CreateEvent) bool {
			if !model.HasRecordLabels(e.Object.GetLabels()) {
				return true
			}
			return !r.writer.OwnWrite(e.Object.GetUID(), e.Object.GetResourceVersion())
		},
		UpdateFunc: func(e event.UpdateEvent) bool {
			// A ServiceRecord has no status subresource: the controller's own write changes its
			// generation too, and is recognised by the resourceVersion the API returned.
			if r.writer.OwnWrite(e.ObjectNew.GetUID(), e.ObjectNew.GetResourceVersion()) {
				return false
			}
			return e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() ||
				!maps.Equal(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels())
		},
		DeleteFunc: func(e event.DeleteEvent) bool {
			return !r.writer.OwnDelete(e.Object.GetUID())
		},
		GenericFunc: func(event.GenericEvent) bool { return true },
	}
}
