package controller

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/ovn"
)

// ReleaseOptions configure vpcgw release (SPEC O4).
type ReleaseOptions struct {
	// Timeout bounds the whole release, the wait for the leader's lease included (0: 5 minutes).
	Timeout time.Duration
	// LeaseHold is how long the leader election Lease stays held after the release (0: 10
	// minutes): a controller still running (helm deletes it only after its pre-delete hook) stands
	// by instead of serving everything again.
	LeaseHold time.Duration
	// Identity names the release in the Lease (default: vpcgw-release-<host>-<random>).
	Identity string
}

// ReleaseResult says what vpcgw release did.
type ReleaseResult struct {
	// Released: everything vpcgw wrote was released and nothing is left. False with a nil error:
	// kube-ovn-controller serves Services itself (SPEC K10) and nothing was touched; Message says so.
	Released bool
	Message  string
}

// AgentRemover is a transport that copied agents into the gateway containers and can remove
// them again (transport.Exec with agent delivery).
type AgentRemover interface {
	RemoveDelivered(ctx context.Context) error
}

// Release runs the controller's machinery with every Service released (model.Gates.Release): the
// model plans an empty gateway everywhere, and the controller writes that as it writes any plan
// (agents program the release state, VIP routes go, ingress is cleared, records are deleted, the
// finalizer released). Once Remains finds nothing, it stops the machinery, removes the agent
// copies from the gateway containers and returns. With opts.LeaderElection it first takes the
// controller's Lease (see takeLease), so that a running controller stands by.
func Release(ctx context.Context, cfg *rest.Config, opts Options, ro ReleaseOptions, log logr.Logger) (ReleaseResult, error) {
	ro = ro.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, ro.Timeout)
	defer cancel()
	opts.Flags.Release = true
	// Nothing of the running controller's servers: the release serves no probe and no metric.
	opts.MetricsAddr, opts.HealthAddr, opts.PprofAddr, opts.StatusNamespace = "0", "0", "", ""
	scheme, err := Scheme()
	if err != nil {
		return ReleaseResult{}, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return ReleaseResult{}, fmt.Errorf("API client: %w", err)
	}
	if w, err := readSecondWriter(ctx, c, opts.Flags); err != nil {
		return ReleaseResult{}, err
	} else if w.Serves {
		// The migration to kube-ovn's own controller: what vpcgw wrote is kube-ovn's now.
		msg := "nothing was released: kube-ovn-controller serves Services through the gateways itself, so the Services, records, routes and gateway objects are kube-ovn's now (" + w.Message + ")"
		log.Info(msg, "reason", w.Reason)
		return ReleaseResult{Message: msg}, nil
	}

	var lock *resourcelock.LeaseLock
	if opts.LeaderElection {
		if lock, err = takeLease(ctx, cfg, opts.LeaderElectionNamespace, ro.Identity, log); err != nil {
			return ReleaseResult{}, err
		}
		defer holdLease(lock, ro.LeaseHold, log)
	}
	synced := newSyncedSet()
	opts.OnSynced = synced.add
	mgr, parts, closeNB, err := newManager(ctx, cfg, opts, log, func(mo *ctrl.Options) {
		if lock != nil {
			mo.LeaderElectionResourceLockInterface = lock
			mo.LeaderElectionReleaseOnCancel = false // holdLease keeps it
		}
	})
	if err != nil {
		return ReleaseResult{}, err
	}
	defer closeNB()
	mctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	log.Info("releasing everything vpcgw wrote")

	var left []string
	poll := wait.PollUntilContextCancel(ctx, time.Second, false, func(ctx context.Context) (bool, error) {
		select {
		case err := <-done:
			done <- err
			return false, fmt.Errorf("the controller machinery stopped: %w", err)
		default:
		}
		l, err := Remains(ctx, c, parts.nb, synced.has)
		if err != nil {
			log.Info("checking what remains", "error", err.Error())
			return false, nil
		}
		left = l
		return len(l) == 0, nil
	})
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		log.Info("the controller machinery ended", "error", err.Error())
	}
	if poll != nil {
		if len(left) == 0 {
			return ReleaseResult{}, fmt.Errorf("release: %w", poll)
		}
		return ReleaseResult{}, fmt.Errorf("release did not finish within %s (%w); left: %s", ro.Timeout, poll, strings.Join(left, "; "))
	}
	// The streams are closed (the manager stopped): no agent is copied in again.
	if rm, ok := opts.Dialer.(AgentRemover); ok {
		if err := rm.RemoveDelivered(ctx); err != nil {
			return ReleaseResult{}, fmt.Errorf("release: removing the agent copies from the gateway containers: %w", err)
		}
	}
	msg := "released: no nft object, lo VIP, VIP route, ingress, finalizer or record of vpcgw's is left"
	log.Info(msg)
	return ReleaseResult{Released: true, Message: msg}, nil
}

func (ro ReleaseOptions) withDefaults() ReleaseOptions {
	if ro.Timeout <= 0 {
		ro.Timeout = 5 * time.Minute
	}
	if ro.LeaseHold <= 0 {
		ro.LeaseHold = 10 * time.Minute
	}
	if ro.Identity == "" {
		h, _ := os.Hostname()
		ro.Identity = ReleaseIdentityPrefix + h + "-" + uuid.NewString()[:8]
	}
	return ro
}

// readSecondWriter reads kube-ovn-controller's Deployment and configuration as the controller
// does (SPEC K10). An error is returned, not taken for "serves": a release that cannot know
// must not report success.
func readSecondWriter(ctx context.Context, c client.Client, f Flags) (model.SecondWriter, error) {
	ns := f.kubeOVNNamespace()
	var d *appsv1.Deployment
	var got appsv1.Deployment
	switch err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: f.kubeOVNControllerDeployment()}, &got); {
	case err == nil:
		d = &got
	case !apierrors.IsNotFound(err):
		return model.SecondWriter{}, fmt.Errorf("reading kube-ovn-controller's Deployment %s/%s: %w", ns, f.kubeOVNControllerDeployment(), err)
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

// Remains lists what vpcgw wrote that is still there: the finalizer and the claim stamp on Services, ingress on
// Services that name a gateway (of vpcgw's class or none, SPEC K9), records of both forms, VIP
// policies (when nb is set) and gateways the release has not yet programmed (synced says which
// it has). Empty: nothing is left.
func Remains(ctx context.Context, c client.Client, nb *ovn.Writer, synced func(gateway string) bool) ([]string, error) {
	var left []string
	var svcs corev1.ServiceList
	if err := c.List(ctx, &svcs); err != nil {
		return nil, fmt.Errorf("listing Services: %w", err)
	}
	for i := range svcs.Items {
		s := &svcs.Items[i]
		key := s.Namespace + "/" + s.Name
		if slices.Contains(s.Finalizers, model.Finalizer) {
			left = append(left, "Service "+key+": finalizer "+model.Finalizer)
		}
		if model.HasClaimStamp(s) {
			left = append(left, "Service "+key+": condition "+model.ConditionEIPClaimed)
		}
		cls := s.Spec.LoadBalancerClass
		if s.Annotations[model.AnnotationGateway] != "" && len(s.Status.LoadBalancer.Ingress) > 0 && (cls == nil || *cls == model.LoadBalancerClass) {
			left = append(left, "Service "+key+": status.loadBalancer.ingress")
		}
	}
	var srs vpcgwv1alpha1.ServiceRecordList
	switch err := c.List(ctx, &srs); {
	case err == nil:
		for _, r := range srs.Items {
			left = append(left, "ServiceRecord "+r.Name)
		}
	case !meta.IsNoMatchError(err) && !apierrors.IsNotFound(err): // no CRD: no record
		return nil, fmt.Errorf("listing ServiceRecords: %w", err)
	}
	var drs kubeovnv1.IptablesDnatRuleList
	switch err := c.List(ctx, &drs, client.MatchingLabels{model.LabelRecord: "true"}); {
	case err == nil:
		for _, r := range drs.Items {
			left = append(left, "IptablesDnatRule "+r.Name)
		}
	case !meta.IsNoMatchError(err) && !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("listing IptablesDnatRule records: %w", err)
	}
	if nb != nil {
		pols, err := nb.Policies(ctx, "", "")
		if err != nil {
			return nil, fmt.Errorf("listing VIP policies: %w", err)
		}
		for _, p := range pols {
			left = append(left, fmt.Sprintf("VIP policy %s (priority %d) of gateway %s on router %s", p.VIP, p.Priority, p.Gateway, p.Router))
		}
	}
	if synced != nil {
		var gws kubeovnv1.VpcNatGatewayList
		if err := c.List(ctx, &gws); err != nil {
			return nil, fmt.Errorf("listing VpcNatGateways: %w", err)
		}
		for _, g := range gws.Items {
			if g.DeletionTimestamp == nil && !synced(g.Name) {
				left = append(left, "VpcNatGateway "+g.Name+": its instances have not yet acknowledged the release state")
			}
		}
	}
	return left, nil
}

// syncedSet is the gateways a release has programmed.
type syncedSet struct {
	mu  sync.Mutex
	gws map[string]bool
}

func newSyncedSet() *syncedSet { return &syncedSet{gws: map[string]bool{}} }

func (s *syncedSet) add(gw string) {
	s.mu.Lock()
	s.gws[gw] = true
	s.mu.Unlock()
}

func (s *syncedSet) has(gw string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gws[gw]
}

// takeLease makes the release the holder of the controller's leader election Lease, so that the
// running controller stands by rather than serving again what the release removes: the chart's
// pre-delete hook runs while the controller's Deployment still runs, and the controller's RBAC
// cannot scale it. A Lease held by another is taken over (update with its resourceVersion: of two
// writers, one wins); the previous leader finds another holder at its next renewal and stops
// (controller-runtime exits on a lost lease), at the latest a lease duration after the takeover,
// which is how long the release waits before it writes. While it runs, the release renews the
// Lease as a leader does.
func takeLease(ctx context.Context, cfg *rest.Config, namespace, identity string, log logr.Logger) (*resourcelock.LeaseLock, error) {
	if namespace == "" {
		data, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
		if err != nil {
			return nil, errors.New("--leader-elect without --leader-election-namespace outside a pod: name the controller's namespace")
		}
		namespace = strings.TrimSpace(string(data))
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for the leader election Lease: %w", err)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: namespace, Name: LeaderElectionID},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
	now := metav1.NewTime(time.Now())
	rec, _, err := lock.Get(ctx)
	switch {
	case apierrors.IsNotFound(err):
		// No controller ever led: nothing to wait for.
		if err := lock.Create(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: identity, LeaseDurationSeconds: 15, AcquireTime: now, RenewTime: now}); err != nil {
			return nil, fmt.Errorf("creating Lease %s/%s: %w", namespace, LeaderElectionID, err)
		}
		return lock, nil
	case err != nil:
		return nil, fmt.Errorf("reading Lease %s/%s: %w", namespace, LeaderElectionID, err)
	}
	prev, dur := rec.HolderIdentity, time.Duration(rec.LeaseDurationSeconds)*time.Second
	if dur <= 0 {
		dur = 15 * time.Second
	}
	taken := *rec
	taken.HolderIdentity, taken.AcquireTime, taken.RenewTime = identity, now, now
	taken.LeaseDurationSeconds = int(dur / time.Second)
	if prev != identity {
		taken.LeaderTransitions++
	}
	if err := lock.Update(ctx, taken); err != nil {
		return nil, fmt.Errorf("taking Lease %s/%s over from %q: %w", namespace, LeaderElectionID, prev, err)
	}
	if prev == "" || prev == identity {
		return lock, nil
	}
	log.Info("took the controller's leader election Lease; waiting one lease duration for the previous leader to stand by", "previous", prev, "wait", dur.String())
	select {
	case <-time.After(dur):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return lock, nil
}

// holdLease leaves the Lease held for hold after the release ends (see ReleaseOptions.LeaseHold).
func holdLease(lock *resourcelock.LeaseLock, hold time.Duration, log logr.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec, _, err := lock.Get(ctx)
	if err == nil {
		if rec.HolderIdentity != lock.Identity() {
			log.Info("the Lease has another holder: not holding it", "holder", rec.HolderIdentity)
			return
		}
		rec.RenewTime = metav1.NewTime(time.Now())
		rec.LeaseDurationSeconds = int(hold / time.Second)
		err = lock.Update(ctx, *rec)
	}
	if err != nil {
		log.Info("could not hold the leader election Lease; a controller still running may serve again until it is deleted", "error", err.Error())
		return
	}
	log.Info("holding the controller's leader election Lease so that a running controller stands by", "for", hold.String())
}
