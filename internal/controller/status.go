package controller

import (
	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/status"
	"github.com/vpcgw/vpcgw/internal/transport"
	"github.com/vpcgw/vpcgw/internal/version"
)

// StatusRecorder learns what the reconciler and the agent sessions know of each gateway's
// programming (SPEC O2). Its methods run on the sync path: in memory, cheap, never an API call;
// the status publisher writes what it holds, rate-limited (SPEC P6). *status.Recorder is one.
type StatusRecorder interface {
	InstanceAcked(gateway string, inst status.InstanceRef, generation int64, agentVersion string)
	InstanceFailed(gateway string, inst status.InstanceRef, text string)
	GatewaySynced(gateway string, s status.Sync)
	RoutesSynced(gateway string, r status.RouteSync)
	GatewayRemoved(gateway string)
	// SetCondition records a condition of the controller as a whole (status.ConditionServing).
	SetCondition(c metav1.Condition)
}

// statusPublisher is the leader's writer of ConfigMap <StatusNamespace>/vpcgw-controller.
func statusPublisher(mgr ctrl.Manager, opts Options, rec *status.Recorder, routes bool, log logr.Logger) *status.Publisher {
	f := opts.Flags
	keepalive := opts.AgentKeepalive
	switch {
	case keepalive == 0:
		keepalive = DefaultAgentKeepalive
	case keepalive < 0:
		keepalive = 0
	}
	orDefault := func(v, def int) int {
		if v > 0 {
			return v
		}
		return def
	}
	return &status.Publisher{
		Client: mgr.GetClient(), Reader: mgr.GetAPIReader(),
		Namespace: opts.StatusNamespace, Holder: opts.StatusHolder, Version: version.Version,
		Gates: status.Gates{EnableGwNftableLbSvc: f.EnableGwNftableLbSvc, EnableGwNftableSvcClusterIP: f.EnableGwNftableSvcClusterIP,
			EnableLb: f.EnableLb, EnableLbSvc: f.EnableLbSvc, Ledger: string(f.Gates().Ledger)},
		Flags: status.Flags{
			KubeOVNNamespace: f.kubeOVNNamespace(), AllowEndpointsWithoutPods: f.EndpointsWithoutPods,
			MaxPortsPerService:      orDefault(f.MaxPortsPerService, model.DefaultMaxPortsPerService),
			MaxBackendsPerIdentity:  orDefault(f.MaxBackendsPerIdentity, model.DefaultMaxBackendsPerIdentity),
			MaxIdentitiesPerGateway: orDefault(f.MaxIdentitiesPerGateway, model.DefaultMaxIdentitiesPerGateway),
			AgentKeepalive:          keepalive.String(), MinSyncInterval: opts.MinSyncInterval.String(),
			VIPRoutes: routes, LeaderElection: opts.LeaderElection, BackendPick: opts.BackendPick,
		},
		Recorder: rec, MinInterval: opts.StatusMinInterval, Heartbeat: opts.StatusHeartbeat,
		Log: log.WithName("status"),
	}
}

func instanceRef(inst transport.Instance) status.InstanceRef {
	return status.InstanceRef{Pod: inst.Namespace + "/" + inst.Pod, UID: string(inst.UID)}
}

// noteSync tells the status recorder how a sync of gateway key ended: programmed as generation
// (every instance acknowledged it; 0: not programmed), failed with err, or neither (no running
// instance).
func (r *GatewayReconciler) noteSync(key string, gp *model.GatewayPlan, generation int64, err error) {
	if r.Status == nil {
		return
	}
	s := status.Sync{Programmed: generation > 0, Generation: generation, Identities: gp.Update().Identities}
	for _, inst := range transportInstances(gp) {
		s.Instances = append(s.Instances, instanceRef(inst))
	}
	if err != nil {
		s.Error = transport.StatusText(err) // fixed text: readers may be any tenant's (SPEC N8)
	}
	r.Status.GatewaySynced(key, s)
}

// noteRoutes tells the status recorder how a write of gateway key's VIP routes ended, and how
// many of the VIPs the Vpc's routes drop (SPEC V3). The error's details stay in the log, the
// dropped VIPs in their Services' events: they may be other tenants' addresses (SPEC N8).
func (r *GatewayReconciler) noteRoutes(key string, want model.VIPRoutes, err error, unrouted int) {
	if r.Status == nil {
		return
	}
	rs := status.RouteSync{NextHops: want.NextHops, VIPs: len(want.VIPs), Unrouted: unrouted}
	if err != nil {
		rs.Error = "writing the VIP routes failed (the controller's log has the details); retrying"
	}
	if unrouted > 0 {
		rs.UnroutedText = "the Vpc has no route covering them, or one that discards them (OVN looks up routes before policies); " +
			"add a static route to the Vpc covering them with the gateway's lanIp as nextHopIP (e.g. 0.0.0.0/0, or a policyDst route for the Service CIDR). " +
			"The Services' " + model.ReasonVIPNotRouted + " events name them"
	}
	r.Status.RoutesSynced(key, rs)
}

// noteGone tells the status recorder that gateway key no longer exists.
func (r *GatewayReconciler) noteGone(key string) {
	if r.Status != nil && key != unboundKey {
		r.Status.GatewayRemoved(key)
	}
}
