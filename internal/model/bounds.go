package model

import (
	"fmt"
	"net/netip"
	"sort"

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

// takeLoad counts a served Service's identities and backends against its gateway's bounds and,
// when the gateway is full, against its namespace's share (SPEC N4). A Service that does not fit
// is not served at all: half a Service is worse than none, and the event says what to do. The
// message does not say how full the gateway is with other tenants' Services (SPEC N8).
func (ix *Index) takeLoad(namespace string, sp *ServicePlan) {
	if !sp.Served() || len(sp.Identities) == 0 {
		return
	}
	bounds := ix.gates.gatewayBounds()
	share, shared := ix.shares[sp.Gateway][namespace]
	for {
		sp.Demand = LoadOf(sp.Identities)
		gw := ix.load[sp.Gateway].plus(sp.Demand)
		ns := ix.nsLoad[sp.Gateway][namespace].plus(sp.Demand)
		if gw.fits(bounds) && (!shared || ns.fits(share)) {
			ix.load[sp.Gateway] = gw
			if ix.nsLoad[sp.Gateway] == nil {
				ix.nsLoad[sp.Gateway] = map[string]Load{}
			}
			ix.nsLoad[sp.Gateway][namespace] = ns
			return
		}
		// Kept flows of draining Pods are what gives way first: never a served Service.
		if !withoutDraining(sp.Identities) {
			break
		}
	}
	why := fmt.Sprintf("a gateway serves at most %d identities and %d backends (the controller's --max-identities-per-gateway and --max-backends-per-gateway)",
		bounds.Identities, bounds.Backends)
	if shared {
		why += ", and when it is full each namespace gets a fair share"
	}
	ev := warning(ReasonLimit, "gateway %s has no room for this Service's %d identities with %d backends: %s; the Service is served once others release theirs",
		sp.Gateway, sp.Demand.Identities, sp.Demand.Backends, why)
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

// shareFullGateways finds the gateways where some Service of plans (in budget order, order[j]
// being plans[j]'s Service) was limited, gives each namespace on them its share, and resets
// their load so that their Services can be planned again. It returns those gateways.
//
// The share is max-min fair (water-filling), with what is programmed kept: a namespace gets
// what its programmed Services ask, and of the rest up to a level that is the same for every
// namespace, the highest level at which the gateway's bound holds. So one namespace cannot take
// a full gateway from the others, a namespace that asks little gets all it asks, the room others
// leave is used, and nothing programmed is pushed out by a newcomer (SPEC N3, N4). Each resource
// (identities, backends) has its own level.
func (ix *Index) shareFullGateways(svcs []corev1.Service, order []int, plans []ServicePlan) map[string]bool {
	full := map[string]bool{}
	for j := range plans {
		if plans[j].Limited {
			full[plans[j].Gateway] = true
		}
	}
	if len(full) == 0 {
		return nil
	}
	byGw := map[string]map[string]*nsDemand{}
	for j, i := range order {
		sp := &plans[j]
		if !full[sp.Gateway] || sp.Demand.Identities == 0 {
			continue
		}
		ns := svcs[i].Namespace
		if byGw[sp.Gateway] == nil {
			byGw[sp.Gateway] = map[string]*nsDemand{}
		}
		d := byGw[sp.Gateway][ns]
		if d == nil {
			d = &nsDemand{}
			byGw[sp.Gateway][ns] = d
		}
		d.asked = d.asked.plus(sp.Demand)
		if len(ix.recordedIdentities(svcs[i].UID)) > 0 {
			d.programmed = d.programmed.plus(sp.Demand)
		}
	}
	if ix.shares == nil {
		ix.shares = map[string]map[string]Load{}
	}
	bounds := ix.gates.gatewayBounds()
	for gw, dem := range byGw {
		ix.shares[gw] = fairShares(dem, bounds)
		delete(ix.load, gw)
		delete(ix.nsLoad, gw)
	}
	return full
}

// nsDemand is what one namespace's Services ask of a full gateway, and what of that is
// programmed. The shares are made of these alone: the planner shares a gateway again from the
// demands it keeps, without planning every Service (planner.go, SPEC N4).
type nsDemand struct{ programmed, asked Load }

// fairShares is each namespace's share of a full gateway with bounds (the rule of
// shareFullGateways).
func fairShares(dem map[string]*nsDemand, bounds Load) map[string]Load {
	level := func(bound int, get func(Load) int) int {
		total := func(s int) int {
			n := 0
			for _, d := range dem {
				n += max(get(d.programmed), min(get(d.asked), s))
			}
			return n
		}
		return sort.Search(bound+1, func(s int) bool { return total(s) > bound }) - 1
	}
	li := level(bounds.Identities, func(l Load) int { return l.Identities })
	lb := level(bounds.Backends, func(l Load) int { return l.Backends })
	shares := make(map[string]Load, len(dem))
	for ns, d := range dem {
		shares[ns] = Load{
			Identities: max(d.programmed.Identities, min(d.asked.Identities, li)),
			Backends:   max(d.programmed.Backends, min(d.asked.Backends, lb)),
		}
	}
	return shares
}
