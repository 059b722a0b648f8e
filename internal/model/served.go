package model

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// Serving is what one sync tells of a Service being served (SPEC T3): the Normal event
// ReasonServed is given when a Service becomes served, and again when it is served again after
// a problem it was warned of; not on every sync, and not after a controller restart for a
// Service the API already shows served.
type Serving int

const (
	// ServingQuiet is nothing to tell: the Service is not served, or programming did not confirm
	// it (no instance, the gateway gone), and no Warning says it was interrupted.
	ServingQuiet Serving = iota
	// ServingShown is served, as the API showed before this sync. Told only when a problem was
	// told since the last ReasonServed event.
	ServingShown
	// ServingNewly is served, and this sync's writes are what show it (the ingress published, or
	// the records confirmed): told once they succeeded.
	ServingNewly
	// ServingInterrupted is a Warning telling that the Service, or a part of it, is not served, or
	// that its change was not programmed (failed, quarantined): the next ReasonServed is owed.
	ServingInterrupted
)

// Serving says what a sync whose programming ended as o tells of the Service being served.
func (sp *ServicePlan) Serving(o Outcome) Serving {
	switch {
	case o == Held, o == Failed && sp.Served(), sp.partWarned():
		return ServingInterrupted
	case o != Programmed || !sp.Served():
		return ServingQuiet
	case sp.shownServed():
		return ServingShown
	}
	return ServingNewly
}

// partWarned says whether a part of the Service is not served for a reason a Warning of its plan
// tells. A part not asked for (gate off, not ours) has a reason but no Warning; a Warning about
// something else (a port skipped, a backend left out) names no part.
func (sp *ServicePlan) partWarned() bool {
	for _, ev := range sp.Events {
		if ev.Type != corev1.EventTypeWarning {
			continue
		}
		if !sp.EIPServed && sp.EIPReason == ev.Message || !sp.ClusterIPServed && sp.ClusterIPReason == ev.Message {
			return true
		}
	}
	return false
}

// shownServed says whether the API showed the Service served before this sync, as its user and
// a restarted controller see it: a LoadBalancer Service served for its EIP by its ingress being
// that EIP (SPEC T1); any other by its records saying the gateway serves it (SPEC R3).
func (sp *ServicePlan) shownServed() bool {
	if sp.EIPServed && len(sp.Ingress) > 0 {
		return !sp.IngressWrite
	}
	return sp.programmed
}

// maxListedPorts bounds the ports a ReasonServed message lists: a Service may have many.
const maxListedPorts = 8

// ServedEvent is the Normal event that tells the Service is served: its gateway, the addresses
// that carry its traffic (the EIP, which is its ingress for a LoadBalancer Service, and the
// ClusterIP when the gateway holds it) and its ports. Bounded (SPEC N6).
func (sp *ServicePlan) ServedEvent() Event {
	var at []string
	if sp.EIPServed {
		eip := "EIP " + sp.EIP.String()
		if len(sp.Ingress) > 0 {
			eip += " (its ingress)"
		}
		at = append(at, eip)
	}
	if sp.ClusterIPServed {
		at = append(at, "ClusterIP "+sp.ClusterIP.String())
	}
	msg := fmt.Sprintf("gateway %s serves this Service at %s, ports %s", sp.Gateway, strings.Join(at, " and "), servedPorts(sp.Identities))
	return Event{Type: corev1.EventTypeNormal, Reason: ReasonServed, Message: BoundMessage(msg)}
}

// servedPorts names the identities' ports, each once, in order ("80/TCP, 53/UDP"), at most
// maxListedPorts of them.
func servedPorts(ids []gwstate.Identity) string {
	type port struct {
		n     int32
		proto gwstate.Protocol
	}
	ports := make([]port, 0, len(ids))
	for _, id := range ids {
		ports = append(ports, port{id.Port, id.Protocol})
	}
	slices.SortFunc(ports, func(a, b port) int {
		return cmp.Or(cmp.Compare(a.n, b.n), strings.Compare(string(a.proto), string(b.proto)))
	})
	ports = slices.Compact(ports)
	names := make([]string, 0, min(len(ports), maxListedPorts)+1)
	for _, p := range ports[:min(len(ports), maxListedPorts)] {
		names = append(names, fmt.Sprintf("%d/%s", p.n, strings.ToUpper(string(p.proto))))
	}
	if more := len(ports) - maxListedPorts; more > 0 {
		names = append(names, fmt.Sprintf("and %d more", more))
	}
	return strings.Join(names, ", ")
}

// ServingProblems are the reasons of the Warnings a Service's serving ends (or a change of it
// waits) with: told again after a ReasonServed event, when they come back.
var ServingProblems = []string{
	ReasonConflict, ReasonBackendSkipped, ReasonEIPMissing, ReasonEIPNotReady, ReasonInvalidAnnotation,
	ReasonUnsupported, ReasonProgrammingFailed, ReasonNotAdmitted, ReasonLimit, ReasonQuarantined,
}
