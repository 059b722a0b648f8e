// Package ovn writes the VIP routes of VPC NAT gateways into the OVN northbound database
// (SPEC V1, V2): one Logical_Router_Policy per VIP on the VPC's router, priority 29210, match
// "ip4.dst == <vip>", action reroute to the gateway's instances, marked with the external_ids
// vendor=kube-ovn, vpc-nat-gateway=<gw>, vipRoute=true. Only policies with these external_ids
// are ever changed.
//
// They survive kube-ovn-controller (SPEC K3): its VPC reconcile deletes the policies of a custom
// VPC's router that the Vpc does not list, so every policy also carries
// vpc-egress-gateway=vpcgw:<gw>, one of the keys that reconcile exempts (ExternalIDExempt). As a
// second line, the writer watches its policies in the NB cache and, when someone else deletes or
// changes one, re-applies the gateway's last routes within milliseconds (debounced, with
// exponential backoff when it keeps happening; vpcgw_vip_route_repairs_total counts them).
// Next-hop changes rewrite the row in place, so a route never goes missing in between.
package ovn

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/go-logr/logr"
	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/vpcgw/vpcgw/internal/ovn/nbdb"
)

const (
	// defaultTimeout bounds NewWriter and Sync when their context has no deadline.
	defaultTimeout = 30 * time.Second
	// reconnectTimeout bounds one reconnect attempt; probeInterval is the period of the echo probe
	// that detects a dead connection the kernel did not report.
	reconnectTimeout = 5 * time.Second
	probeInterval    = 15 * time.Second
	// closeWatch is how long a writer closed during an outage watches for a late reconnect.
	closeWatch = 10 * time.Minute
	// syncAttempts is how often Sync re-reads and retries when the router changed under it.
	syncAttempts = 10
)

// writerOptions are knobs for tests only.
type writerOptions struct {
	// noExemption writes policies without ExternalIDExempt (as versions before it did), so that
	// kube-ovn's reconcile deletes them and the repair path can be seen at work.
	noExemption bool
}

// Writer converges the VIP policies of gateways. It is safe for concurrent use; Syncs are
// serialised.
type Writer struct {
	c      client.Client
	log    logr.Logger
	exempt bool
	mu     sync.Mutex // serialises syncs (Sync and repairs)
	stop   chan struct{}
	life   context.Context // cancelled by Close: ends a repair in progress
	end    context.CancelFunc
	wg     sync.WaitGroup // the probe and repair goroutines
	once   sync.Once
	rep    repairer
	routes routeWatch
}

// NewWriter connects to the NB database and monitors the Logical_Router (name, policies, static
// routes, ports), Logical_Router_Policy, Logical_Router_Static_Route and Logical_Router_Port
// (name, networks) tables. After a lost connection (server restart, leader change) the writer
// reconnects by itself, for ever, with backoff; a Sync issued meanwhile waits for it (bounded by
// its context).
func NewWriter(ctx context.Context, cfg Config, log logr.Logger) (*Writer, error) {
	return newWriter(ctx, cfg, log, writerOptions{})
}

// newClient makes the NB client of cfg, not yet connected: reconnecting for ever with backoff,
// to the leader of a clustered database.
func newClient(cfg Config, log logr.Logger) (client.Client, error) {
	eps, ssl, err := cfg.endpoints()
	if err != nil {
		return nil, err
	}
	dbModel, err := nbdb.FullDatabaseModel()
	if err != nil {
		return nil, fmt.Errorf("ovn: NB model: %w", err)
	}
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 200 * time.Millisecond
	bo.MaxInterval = 5 * time.Second
	bo.MaxElapsedTime = 0 // never give up: libovsdb panics when the backoff stops
	clientLog := log.WithName("libovsdb")
	// Not client.WithInactivityCheck: in libovsdb v0.8.1 it races (a channel closed on disconnect
	// while Transact sends to it); Writer.probe does the same job.
	opts := []client.Option{
		client.WithReconnect(reconnectTimeout, bo),
		client.WithLogger(&clientLog),
	}
	if len(eps) > 1 {
		// A clustered DB: talk to the leader, follow leader changes.
		opts = append(opts, client.WithLeaderOnly(true))
	}
	for _, ep := range eps {
		opts = append(opts, client.WithEndpoint(ep))
	}
	if ssl {
		tc, err := cfg.TLS.tlsConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, client.WithTLSConfig(tc))
	}
	c, err := client.NewOVSDBClient(dbModel, opts...)
	if err != nil {
		return nil, fmt.Errorf("ovn: NB client: %w", err)
	}
	return c, nil
}

func newWriter(ctx context.Context, cfg Config, log logr.Logger, wo writerOptions) (*Writer, error) {
	c, err := newClient(cfg, log)
	if err != nil {
		return nil, err
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	if err := c.Connect(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("ovn: connect to NB %s: %w", cfg.Address, err)
	}
	w := &Writer{c: c, log: log, exempt: !wo.noExemption, stop: make(chan struct{})}
	w.life, w.end = context.WithCancel(context.Background())
	w.rep.init()
	w.routes.init()
	// Registered before the monitor starts, so that no change to a policy or route is missed.
	c.Cache().AddEventHandler(w.eventHandler())
	c.Cache().AddEventHandler(w.routeEvents())
	// The routes and router ports too: the VIP check reads them from the cache (SPEC V3).
	lr := &nbdb.LogicalRouter{}
	sr := &nbdb.LogicalRouterStaticRoute{}
	lrp := &nbdb.LogicalRouterPort{}
	mon := c.NewMonitor(
		client.WithTable(lr, &lr.Name, &lr.Policies, &lr.StaticRoutes, &lr.Ports),
		client.WithTable(&nbdb.LogicalRouterPolicy{}),
		client.WithTable(sr, &sr.IPPrefix, &sr.Nexthop, &sr.Policy, &sr.RouteTable),
		client.WithTable(lrp, &lrp.Name, &lrp.Networks),
	)
	if _, err := c.Monitor(ctx, mon); err != nil {
		w.end()
		c.Close()
		return nil, fmt.Errorf("ovn: monitor NB %s: %w", cfg.Address, err)
	}
	var routers []nbdb.LogicalRouter
	if err := c.List(ctx, &routers); err != nil {
		w.end()
		c.Close()
		return nil, fmt.Errorf("ovn: list routers: %w", err)
	}
	uuids := make([]string, 0, len(routers))
	for _, r := range routers {
		uuids = append(uuids, r.UUID)
	}
	w.rep.loaded(uuids)
	log.V(1).Info("connected to OVN NB", "endpoint", c.CurrentEndpoint())
	w.wg.Add(3)
	go w.probe()
	go w.repairLoop()
	go w.routeNotifyLoop()
	return w, nil
}

// Close disconnects; the writer cannot be used afterwards.
func (w *Writer) Close() {
	w.once.Do(func() {
		close(w.stop)
		w.end()
		w.wg.Wait()
		down := w.c.CurrentEndpoint() == ""
		w.c.Close()
		if down {
			// libovsdb's Close does not stop a reconnect loop that is running (the DB is down):
			// it would connect again later. Close that connection when it appears.
			go func() {
				for deadline := time.Now().Add(closeWatch); time.Now().Before(deadline); time.Sleep(time.Second) {
					if w.c.CurrentEndpoint() != "" {
						w.c.Close()
						return
					}
				}
			}()
		}
	})
}

// probe sends an echo every probeInterval and drops a connection that does not answer, so that
// the client reconnects (possibly to another endpoint) instead of waiting on a dead peer.
func (w *Writer) probe() {
	defer w.wg.Done()
	t := time.NewTicker(probeInterval)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), reconnectTimeout)
		err := w.c.Echo(ctx)
		cancel()
		if err != nil && !errors.Is(err, client.ErrNotConnected) {
			w.log.Info("NB connection does not answer, reconnecting", "error", err.Error())
			w.c.Disconnect()
		}
	}
}

func withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, defaultTimeout)
}

// Sync converges the VIP policies of want.Gateway in one transaction: one policy per VIP on
// router want.Router, missing ones added, stale ones (also any on another router, and duplicates
// of one VIP) removed, wrong ones rewritten in place (a next-hop change updates the row, it never
// deletes and re-adds it). No VIPs or no next hops removes all the gateway's VIP policies.
// Policies of other gateways and without the VIP external_ids are never touched. The router must
// exist when there is something to write (else the error wraps ErrRouterNotFound). want is
// remembered: when someone else later deletes or changes one of these policies, the writer
// re-applies it by itself.
func (w *Writer) Sync(ctx context.Context, want VIPRoutes) error {
	d, err := validate(want)
	if err != nil {
		return err
	}
	d.exempt = w.exempt
	// Before the transaction: the cache events of our own commit may arrive before it returns,
	// and must be judged against this state, not the previous one.
	w.rep.setLast(d)
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	w.mu.Lock()
	defer w.mu.Unlock()
	_, err = w.converge(ctx, d)
	return err
}

// converge commits d, re-reading and retrying while the router changes under it. It returns what
// changed ("" for nothing). The caller holds w.mu.
func (w *Writer) converge(ctx context.Context, d desired) (string, error) {
	for attempt := 1; ; attempt++ {
		done, changes, err := w.syncOnce(ctx, d)
		if done || err != nil {
			return changes, err
		}
		// The router changed between read and commit (another writer, or a cache not yet caught
		// up after our own commit or a reconnect): read again.
		if attempt == syncAttempts {
			return "", fmt.Errorf("ovn: gateway %s: router %q kept changing during %d attempts", d.gateway, d.router, attempt)
		}
		w.log.V(1).Info("NB changed during sync, retrying", "gateway", d.gateway, "attempt", attempt)
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("ovn: gateway %s: %w", d.gateway, ctx.Err())
		case <-time.After(time.Duration(min(attempt, 5)) * 50 * time.Millisecond):
		}
	}
}

// syncOnce reads, plans and commits. done is false when the guard failed and Sync should retry;
// changes says what was committed ("" for nothing).
func (w *Writer) syncOnce(ctx context.Context, d desired) (done bool, changes string, err error) {
	if err := w.waitConnected(ctx); err != nil {
		return false, "", err
	}
	// Routers first, then policies: a policy a router references is then in the policy list
	// unless it was removed meanwhile, which the guard detects.
	var routers []nbdb.LogicalRouter
	if err := w.c.List(ctx, &routers); err != nil {
		return false, "", fmt.Errorf("ovn: list routers: %w", err)
	}
	var pols []nbdb.LogicalRouterPolicy
	if err := w.c.List(ctx, &pols); err != nil {
		return false, "", fmt.Errorf("ovn: list router policies: %w", err)
	}
	byUUID := make(map[string]*nbdb.LogicalRouterPolicy, len(pols))
	for i := range pols {
		byUUID[pols[i].UUID] = &pols[i]
	}
	p, err := makePlan(d, routers, byUUID)
	if err != nil {
		return false, "", err
	}
	if p.empty() {
		return true, "", nil
	}
	ops, err := w.ops(d, p)
	if err != nil {
		return false, "", err
	}
	res, err := w.c.Transact(ctx, ops...)
	if err != nil {
		return false, "", fmt.Errorf("ovn: gateway %s: transact: %w", d.gateway, err)
	}
	opErrs, err := ovsdb.CheckOperationResults(res, ops)
	if err != nil {
		for _, oe := range opErrs {
			var to *ovsdb.TimedOut
			if errors.As(oe, &to) {
				return false, "", nil // a guard failed: retry
			}
		}
		return false, "", fmt.Errorf("ovn: gateway %s: transaction (%s): %w: %v", d.gateway, p, err, opErrs)
	}
	w.log.Info("VIP routes converged", "router", d.router, "gateway", d.gateway, "changes", p.String())
	return true, p.String(), nil
}

// waitConnected waits until the client has a connection (after a reconnect the monitors are
// restored before the connection is published, so the cache is then current).
func (w *Writer) waitConnected(ctx context.Context) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for w.c.CurrentEndpoint() == "" {
		select {
		case <-ctx.Done():
			return fmt.Errorf("ovn: not connected to NB: %w", ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// ops builds the transaction of p: guards first, then deletes, updates and creates.
func (w *Writer) ops(d desired, p *plan) ([]ovsdb.Operation, error) {
	var ops []ovsdb.Operation
	timeout := 0
	for _, r := range slices.Sorted(maps.Keys(p.guard)) {
		set := make([]any, 0, len(p.guard[r]))
		for _, u := range p.guard[r] {
			set = append(set, ovsdb.UUID{GoUUID: u})
		}
		ops = append(ops, ovsdb.Operation{
			Op:      ovsdb.OperationWait,
			Table:   nbdb.LogicalRouterTable,
			Where:   []ovsdb.Condition{ovsdb.NewCondition("_uuid", ovsdb.ConditionEqual, ovsdb.UUID{GoUUID: r})},
			Columns: []string{"policies"},
			Until:   string(ovsdb.WaitConditionEqual),
			Rows:    []ovsdb.Row{{"policies": ovsdb.OvsSet{GoSet: set}}},
			Timeout: &timeout,
		})
	}
	for _, r := range slices.Sorted(maps.Keys(p.deletes)) {
		lr := &nbdb.LogicalRouter{UUID: r}
		o, err := w.c.Where(lr).Mutate(lr, model.Mutation{
			Field: &lr.Policies, Mutator: ovsdb.MutateOperationDelete, Value: p.deletes[r],
		})
		if err != nil {
			return nil, fmt.Errorf("ovn: delete policies: %w", err)
		}
		ops = append(ops, o...)
	}
	for _, u := range slices.Sorted(maps.Keys(p.updates)) {
		pol := &nbdb.LogicalRouterPolicy{
			UUID:        u,
			Priority:    VIPPolicyPriority,
			Action:      nbdb.LogicalRouterPolicyActionReroute,
			Match:       vipMatch(p.updates[u].vip),
			Nexthops:    d.nextHops,
			ExternalIDs: p.updates[u].ext,
		}
		o, err := w.c.Where(pol).Update(pol, &pol.Priority, &pol.Action, &pol.Match, &pol.Nexthops, &pol.Nexthop, &pol.ExternalIDs)
		if err != nil {
			return nil, fmt.Errorf("ovn: update policy: %w", err)
		}
		ops = append(ops, o...)
	}
	if len(p.creates) > 0 {
		var named []string
		for i, vip := range p.creates {
			pol := &nbdb.LogicalRouterPolicy{
				UUID:        fmt.Sprintf("new_vip_policy_%d", i),
				Priority:    VIPPolicyPriority,
				Action:      nbdb.LogicalRouterPolicyActionReroute,
				Match:       vipMatch(vip),
				Nexthops:    d.nextHops,
				ExternalIDs: d.externalIDs(nil),
			}
			o, err := w.c.Create(pol)
			if err != nil {
				return nil, fmt.Errorf("ovn: create policy: %w", err)
			}
			ops = append(ops, o...)
			named = append(named, pol.UUID)
		}
		lr := &nbdb.LogicalRouter{UUID: p.target}
		o, err := w.c.Where(lr).Mutate(lr, model.Mutation{
			Field: &lr.Policies, Mutator: ovsdb.MutateOperationInsert, Value: named,
		})
		if err != nil {
			return nil, fmt.Errorf("ovn: add policies to router: %w", err)
		}
		ops = append(ops, o...)
	}
	return ops, nil
}

// Policy is a VIP policy as stored in the NB database.
type Policy struct {
	UUID        string
	Router      string // router name
	Gateway     string
	VIP         string // "" when the match is not "ip4.dst == <IPv4>"
	Priority    int
	Match       string
	Action      string
	NextHops    []string // sorted
	ExternalIDs map[string]string
}

// Policies lists the VIP policies (those with the vipRoute external_ids) from the writer's view of
// the NB database, sorted by router, gateway, VIP and UUID. An empty router or gateway matches
// all.
func (w *Writer) Policies(ctx context.Context, router, gateway string) ([]Policy, error) {
	var routers []nbdb.LogicalRouter
	if err := w.c.List(ctx, &routers); err != nil {
		return nil, fmt.Errorf("ovn: list routers: %w", err)
	}
	var pols []nbdb.LogicalRouterPolicy
	if err := w.c.List(ctx, &pols); err != nil {
		return nil, fmt.Errorf("ovn: list router policies: %w", err)
	}
	owner := map[string]string{}
	for _, r := range routers {
		for _, u := range r.Policies {
			owner[u] = r.Name
		}
	}
	var out []Policy
	for i := range pols {
		p := &pols[i]
		rn, ok := owner[p.UUID]
		if !ok || !isVIPPolicy(p) || (router != "" && rn != router) ||
			(gateway != "" && p.ExternalIDs[ExternalIDGateway] != gateway) {
			continue
		}
		nh := slices.Clone(p.Nexthops)
		slices.Sort(nh)
		out = append(out, Policy{
			UUID: p.UUID, Router: rn, Gateway: p.ExternalIDs[ExternalIDGateway], VIP: matchVIP(p.Match),
			Priority: p.Priority, Match: p.Match, Action: p.Action, NextHops: nh, ExternalIDs: p.ExternalIDs,
		})
	}
	slices.SortFunc(out, func(a, b Policy) int {
		for _, c := range [][2]string{{a.Router, b.Router}, {a.Gateway, b.Gateway}, {a.VIP, b.VIP}, {a.UUID, b.UUID}} {
			if c[0] != c[1] {
				if c[0] < c[1] {
					return -1
				}
				return 1
			}
		}
		return 0
	})
	return out, nil
}
