package model

import (
	"maps"
	"net/netip"

	corev1 "k8s.io/api/core/v1"

	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// Load is what Services ask of a gateway, or hold there (SPEC N4): identities, and backends
// (source ranges count as backends: both are entries of the gateway's state).
type Load struct {
	Identities, Backends int
}

func (l Load) plus(o Load) Load { return Load{l.Identities + o.Identities, l.Backends + o.Backends} }

func (l Load) minus(o Load) Load { return Load{l.Identities - o.Identities, l.Backends - o.Backends} }

func (l Load) fits(limit Load) bool {
	return l.Identities <= limit.Identities && l.Backends <= limit.Backends
}

// LoadOf is what identities ask of a gateway. Draining backends count: they are entries of the
// state the agent is sent, which the bounds keep under its line.
func LoadOf(ids []gwstate.Identity) Load {
	l := Load{Identities: len(ids)}
	for _, id := range ids {
		l.Backends += len(id.Backends) + len(id.Draining) + len(id.SourceRanges)
	}
	return l
}

// withoutDraining drops the draining backends of ids, reporting whether there were any.
func withoutDraining(ids []gwstate.Identity) bool {
	had := false
	for i := range ids {
		had = had || len(ids[i].Draining) > 0
		ids[i].Draining = nil
	}
	return had
}

// Bounds are the gateway bounds the gates set (SPEC N4).
func (g Gates) Bounds() Load { return g.gatewayBounds() }

func (g Gates) gatewayBounds() Load {
	return Load{Identities: g.maxIdentities(), Backends: g.maxGatewayBackends()}
}

// Share is what each namespace may hold of a gateway whose bounds are split between sharers
// namespaces (SPEC N4): each bound divided evenly, rounded down, at least 1.
func (g Gates) Share(sharers int) Load {
	b, n := g.gatewayBounds(), max(1, sharers)
	return Load{Identities: max(1, b.Identities/n), Backends: max(1, b.Backends/n)}
}

// HeldLoad is what the Services of one gateway outside a partial plan's snapshot hold there, in
// all and per namespace, and the namespaces whose Services ask it for room (served or waiting):
// the shares depend on the whole gateway (SPEC N4).
type HeldLoad struct {
	Load       Load
	Namespaces map[string]Load
	Asking     map[string]bool
}

// sharers is how many namespaces gateway name's bounds are split between (SPEC N4): those it
// admits by name (its Vpc's spec.namespaces, its allow-list), whether they ask for room yet or
// not, since each could; and every other namespace that asks (only a gateway open to all, "*",
// has any), plus one for the next newcomer, since who else may come is not known.
func (ix *Index) sharers(name string, asking map[string]bool) int {
	gw := ix.gateways[name]
	if gw == nil {
		return 0
	}
	named, open := AdmittedNames(gw, ix.vpcs[gw.Spec.Vpc])
	for ns := range asking {
		named[ns] = true
	}
	if open {
		return len(named) + 1
	}
	return max(1, len(named))
}

// takeLoad counts a served Service's identities and backends against its gateway's bounds and
// its namespace's share of them (SPEC N4). A Service that does not fit is not served at all:
// half a Service is worse than none, and the event says what to do. A programmed Service is held
// only to the bounds: the share only ever holds back new load, so a share that shrinks (a
// newcomer) takes nothing served away (SPEC N3).
func (ix *Index) takeLoad(svc *corev1.Service, sp *ServicePlan) {
	if !sp.Served() || len(sp.Identities) == 0 {
		return
	}
	bounds := ix.gates.gatewayBounds()
	share, shared := ix.shares[sp.Gateway]
	shared = shared && len(ix.recordedIdentities(svc.UID)) == 0
	overShare := false
	for {
		sp.Demand = LoadOf(sp.Identities)
		gw := ix.load[sp.Gateway].plus(sp.Demand)
		ns := ix.nsLoad[sp.Gateway][svc.Namespace].plus(sp.Demand)
		overShare = shared && !ns.fits(share)
		if gw.fits(bounds) && !overShare {
			ix.load[sp.Gateway] = gw
			if ix.nsLoad[sp.Gateway] == nil {
				ix.nsLoad[sp.Gateway] = map[string]Load{}
			}
			ix.nsLoad[sp.Gateway][svc.Namespace] = ns
			return
		}
		// Kept flows of draining Pods are what gives way first: never a served Service.
		if !withoutDraining(sp.Identities) {
			break
		}
	}
	ix.refuse(sp, limitMessage(svc.Namespace, sp, bounds, share, overShare))
}

// limitMessage says why sp waits: its namespace's share, or the gateway's bounds. It names only
// the namespace's own share and the bounds, never how much other namespaces hold (SPEC N8).
func limitMessage(namespace string, sp *ServicePlan, bounds, share Load, overShare bool) *Event {
	if overShare {
		return warning(ReasonLimit, "namespace %s's share of gateway %s is %d identities and %d backends, and this Service's %d identities with %d backends would take the namespace past it: "+
			"the gateway's bounds (the controller's --max-identities-per-gateway and --max-backends-per-gateway) are split evenly between the namespaces that may use it; "+
			"the Service is served once the namespace's other Services there hold less",
			namespace, sp.Gateway, share.Identities, share.Backends, sp.Demand.Identities, sp.Demand.Backends)
	}
	return warning(ReasonLimit, "gateway %s has no room for this Service's %d identities with %d backends: a gateway serves at most %d identities and %d backends "+
		"(the controller's --max-identities-per-gateway and --max-backends-per-gateway); the Service is served once others release theirs",
		sp.Gateway, sp.Demand.Identities, sp.Demand.Backends, bounds.Identities, bounds.Backends)
}

// refuse leaves sp unserved for the bounds, with event ev.
func (ix *Index) refuse(sp *ServicePlan, ev *Event) {
	if sp.EIPServed {
		sp.EIPReason = ev.Message
	}
	if sp.ClusterIPServed {
		sp.ClusterIPReason = ev.Message
	}
	sp.EIPServed, sp.ClusterIPServed, sp.EIP, sp.ClusterIP = false, false, netip.Addr{}, netip.Addr{}
	sp.Identities, sp.Record, sp.Records = nil, nil, nil
	sp.Limited = true
	sp.Events = append(sp.Events, *ev)
}

// shareGateways gives each gateway its namespaces' share, from the namespaces that ask it for
// room: those of plans (planned without shares, in budget order: order[j] is plans[j]'s Service)
// and those outside the snapshot. It returns the gateways whose Services must be planned again
// with the shares: those where a Service waits, or a namespace holds more than its share. On the
// others the shares change nothing (every prefix of the budget order fits them), and one pass
// is kept. Their load is reset to what is held outside the snapshot.
func (ix *Index) shareGateways(svcs []corev1.Service, order []int, plans []ServicePlan) map[string]bool {
	asking := map[string]map[string]bool{}
	again := map[string]bool{}
	for gw, held := range ix.held {
		asking[gw] = maps.Clone(held.Asking)
	}
	for j, i := range order {
		sp := &plans[j]
		if sp.Demand.Identities == 0 {
			continue
		}
		if asking[sp.Gateway] == nil {
			asking[sp.Gateway] = map[string]bool{}
		}
		asking[sp.Gateway][svcs[i].Namespace] = true
		again[sp.Gateway] = again[sp.Gateway] || sp.Limited
	}
	ix.shares, ix.sharersOf = map[string]Load{}, map[string]int{}
	for gw := range ix.gateways {
		ix.sharersOf[gw] = ix.sharers(gw, asking[gw])
		share := ix.gates.Share(ix.sharersOf[gw])
		ix.shares[gw] = share
		for _, l := range ix.nsLoad[gw] {
			again[gw] = again[gw] || !l.fits(share)
		}
	}
	for gw := range again {
		ix.load[gw] = ix.held[gw].Load
		ix.nsLoad[gw] = maps.Clone(ix.held[gw].Namespaces)
	}
	return again
}
