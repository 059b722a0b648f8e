// Package release is vpcgw release, the uninstall (SPEC O4): it runs the controller with every
// Service released, waits until nothing vpcgw wrote is left, and keeps the controller's leader
// election Lease meanwhile, so that a running controller stands by.
package release

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
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubeovnv1 "github.com/vpcgw/vpcgw/api/kubeovn/v1"
	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/controller"
	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/ovn"
)

// Options configure vpcgw release (SPEC O4).
type Options struct {
	// Timeout bounds the whole release, the wait for the leader's lease included (0: 5 minutes).
	Timeout time.Duration
	// LeaseHold is how long the leader election Lease stays held after the release (0: 10
	// minutes): a controller still running (helm deletes it only after its pre-delete hook) stands
	// by instead of serving everything again.
	LeaseHold time.Duration
	// Identity names the release in the Lease (default: IdentityPrefix<host>-<random>).
	Identity string
}

// Result says what vpcgw release did.
type Result struct {
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

// Run runs the controller with every Service released (model.Gates.Release): the model plans an
// empty gateway everywhere, and the controller writes that as it writes any plan (agents program
// the release state, VIP routes go, ingress is cleared, records are deleted, the finalizer
// released). Once Remains finds nothing, it stops the controller, removes the agent copies from
// the gateway containers and returns. With opts.LeaderElection it first takes the controller's
// Lease (see takeLease), so that a running controller stands by.
func Run(ctx context.Context, cfg *rest.Config, opts controller.Options, ro Options, log logr.Logger) (Result, error) {
	ro = ro.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, ro.Timeout)
	defer cancel()
	opts.Flags.Release = true
	// Nothing of the running controller's servers: the release serves no probe and no metric.
	opts.MetricsAddr, opts.HealthAddr, opts.PprofAddr, opts.StatusNamespace = "0", "0", "", ""
	scheme, err := controller.Scheme()
	if err != nil {
		return Result{}, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return Result{}, fmt.Errorf("API client: %w", err)
	}
	if w, err := controller.ReadSecondWriter(ctx, c, opts.Flags); err != nil {
		return Result{}, err
	} else if w.Serves {
		// The migration to kube-ovn's own controller: what vpcgw wrote is kube-ovn's now.
		msg := "nothing was released: kube-ovn-controller serves Services through the gateways itself, so the Services, records, routes and gateway objects are kube-ovn's now (" + w.Message + ")"
		log.Info(msg, "reason", w.Reason)
		return Result{Message: msg}, nil
	}
	if opts.LeaderElection {
		lock, err := takeLease(ctx, cfg, opts.LeaderElectionNamespace, ro.Identity, log)
		if err != nil {
			return Result{}, err
		}
		defer holdLease(lock, ro.LeaseHold, log)
		opts.LeaderElectionLock = lock
	}
	synced := newSyncedSet()
	opts.OnSynced = synced.add
	ctl, err := controller.New(ctx, cfg, opts, log)
	if err != nil {
		return Result{}, err
	}
	defer ctl.Close()
	left, err := runUntilReleased(ctx, ctl, c, synced, log)
	if err != nil {
		if len(left) == 0 {
			return Result{}, fmt.Errorf("release: %w", err)
		}
		return Result{}, fmt.Errorf("release did not finish within %s (%w); left: %s", ro.Timeout, err, strings.Join(left, "; "))
	}
	// The streams are closed (the manager stopped): no agent is copied in again.
	if rm, ok := opts.Dialer.(AgentRemover); ok {
		if err := rm.RemoveDelivered(ctx); err != nil {
			return Result{}, fmt.Errorf("release: removing the agent copies from the gateway containers: %w", err)
		}
	}
	msg := "released: no nft object, lo VIP, VIP route, ingress, finalizer or record of vpcgw's is left"
	log.Info(msg)
	return Result{Released: true, Message: msg}, nil
}

// runUntilReleased runs the controller until Remains finds nothing (or ctx ends, or the
// controller stops), then stops it; it returns what was left at the last look.
func runUntilReleased(ctx context.Context, ctl *controller.Controller, c client.Client, synced *syncedSet, log logr.Logger) ([]string, error) {
	mctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ctl.Manager.Start(mctx) }()
	log.Info("releasing everything vpcgw wrote")
	var left []string
	poll := wait.PollUntilContextCancel(ctx, time.Second, false, func(ctx context.Context) (bool, error) {
		select {
		case err := <-done:
			done <- err
			return false, fmt.Errorf("the controller machinery stopped: %w", err)
		default:
		}
		l, err := Remains(ctx, c, ctl.NB, synced.has)
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
	return left, poll
}

func (ro Options) withDefaults() Options {
	if ro.Timeout <= 0 {
		ro.Timeout = 5 * time.Minute
	}
	if ro.LeaseHold <= 0 {
		ro.LeaseHold = 10 * time.Minute
	}
	if ro.Identity == "" {
		h, _ := os.Hostname()
		ro.Identity = IdentityPrefix + h + "-" + uuid.NewString()[:8]
	}
	return ro
}

// Remains lists what vpcgw wrote that is still there: the finalizer and the claim stamp on Services, ingress on
// Services that name a gateway (of vpcgw's class or none, SPEC K9), records of both forms, VIP
// policies (when nb is set) and gateways the release has not yet programmed (synced says which
// it has). Empty: nothing is left.
func Remains(ctx context.Context, c client.Reader, nb *ovn.Writer, synced func(gateway string) bool) ([]string, error) {
	recs, err := listRecords(ctx, c)
	if err != nil {
		return nil, err
	}
	left, err := serviceRemains(ctx, c, recs.published)
	if err != nil {
		return nil, err
	}
	left = append(left, recs.left...)
	if nb != nil {
		policies, err := policyRemains(ctx, nb)
		if err != nil {
			return nil, err
		}
		left = append(left, policies...)
	}
	if synced != nil {
		gateways, err := gatewayRemains(ctx, c, synced)
		if err != nil {
			return nil, err
		}
		left = append(left, gateways...)
	}
	return left, nil
}

// serviceRemains lists the finalizers, claim stamps and ingress vpcgw wrote on Services. Ingress
// counts only where a record of vpcgw's says it published that address (published, by Service
// UID): ingress another implementation wrote is never waited for, whoever removed vpcgw's
// finalizer.
func serviceRemains(ctx context.Context, c client.Reader, published map[types.UID]map[string]bool) ([]string, error) {
	var svcs corev1.ServiceList
	if err := c.List(ctx, &svcs); err != nil {
		return nil, fmt.Errorf("listing Services: %w", err)
	}
	var left []string
	for i := range svcs.Items {
		s := &svcs.Items[i]
		key := s.Namespace + "/" + s.Name
		if slices.Contains(s.Finalizers, model.Finalizer) {
			left = append(left, "Service "+key+": finalizer "+model.Finalizer)
		}
		if model.HasClaimStamp(s) {
			left = append(left, "Service "+key+": condition "+model.ConditionEIPClaimed)
		}
		if slices.ContainsFunc(s.Status.LoadBalancer.Ingress, func(in corev1.LoadBalancerIngress) bool { return published[s.UID][in.IP] }) {
			left = append(left, "Service "+key+": status.loadBalancer.ingress")
		}
	}
	return left, nil
}

// records are the records of both forms left: one line each, and the EIP addresses they say
// vpcgw published, by Service UID.
type records struct {
	left      []string
	published map[types.UID]map[string]bool
}

func (r *records) add(kind, name string, labels map[string]string, address string) {
	r.left = append(r.left, kind+" "+name)
	uid := types.UID(labels[model.LabelRecordUID])
	if uid == "" || address == "" {
		return
	}
	if r.published[uid] == nil {
		r.published[uid] = map[string]bool{}
	}
	r.published[uid][address] = true
}

// listRecords lists the records of both forms; a form whose CRD is not installed has none.
func listRecords(ctx context.Context, c client.Reader) (records, error) {
	out := records{published: map[types.UID]map[string]bool{}}
	var srs vpcgwv1alpha1.ServiceRecordList
	switch err := c.List(ctx, &srs); {
	case err == nil:
		for _, r := range srs.Items {
			out.add("ServiceRecord", r.Name, r.Labels, r.Spec.EIPAddress)
		}
	case !meta.IsNoMatchError(err) && !apierrors.IsNotFound(err): // no CRD: no record
		return out, fmt.Errorf("listing ServiceRecords: %w", err)
	}
	var drs kubeovnv1.IptablesDnatRuleList
	switch err := c.List(ctx, &drs, client.MatchingLabels{model.LabelRecord: "true"}); {
	case err == nil:
		for _, r := range drs.Items {
			out.add("IptablesDnatRule", r.Name, r.Labels, r.Labels[model.LabelEIPAddress])
		}
	case !meta.IsNoMatchError(err) && !apierrors.IsNotFound(err):
		return out, fmt.Errorf("listing IptablesDnatRule records: %w", err)
	}
	return out, nil
}

// policyRemains lists the VIP policies in OVN's northbound database.
func policyRemains(ctx context.Context, nb *ovn.Writer) ([]string, error) {
	pols, err := nb.Policies(ctx, "", "")
	if err != nil {
		return nil, fmt.Errorf("listing VIP policies: %w", err)
	}
	var left []string
	for _, p := range pols {
		left = append(left, fmt.Sprintf("VIP policy %s (priority %d) of gateway %s on router %s", p.VIP, p.Priority, p.Gateway, p.Router))
	}
	return left, nil
}

// gatewayRemains lists the gateways, not being deleted, whose instances have not acknowledged
// the release state (synced says which have).
func gatewayRemains(ctx context.Context, c client.Reader, synced func(gateway string) bool) ([]string, error) {
	var gws kubeovnv1.VpcNatGatewayList
	if err := c.List(ctx, &gws); err != nil {
		return nil, fmt.Errorf("listing VpcNatGateways: %w", err)
	}
	var left []string
	for _, g := range gws.Items {
		if g.DeletionTimestamp == nil && !synced(g.Name) {
			left = append(left, "VpcNatGateway "+g.Name+": its instances have not yet acknowledged the release state")
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
