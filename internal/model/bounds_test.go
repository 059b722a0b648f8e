package model

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// covers: N4
// The backends of all a gateway's Services are bounded too: a Service whose backends (source
// ranges count) would pass --max-backends-per-gateway is not served, with an event.
func TestGatewayBackendBound(t *testing.T) {
	gates := srGates
	gates.MaxBackendsPerGateway = 3 // web: two backends on each of its two identities
	p := Compute(soleTenant(baseSnapshot(service("web", t0))), gates)
	sp := servicePlan(p, "web")
	if sp.Served() || !sp.Limited || sp.Demand != (Load{Identities: 2, Backends: 4}) || !slices.ContainsFunc(sp.Events, func(e Event) bool {
		return e.Reason == ReasonLimit && strings.Contains(e.Message, "--max-backends-per-gateway")
	}) {
		t.Fatalf("web past the backend bound: served %v, limited %v, demand %+v, events %v", sp.Served(), sp.Limited, sp.Demand, sp.Events)
	}
	gates.MaxBackendsPerGateway = 4
	if sp := servicePlan(Compute(soleTenant(baseSnapshot(service("web", t0))), gates), "web"); !sp.Served() {
		t.Fatalf("web at the backend bound is not served: %v", sp.Events)
	}
}

func servicePlanIn(p Plan, ns, name string) ServicePlan {
	for _, sp := range p.Services {
		if sp.Key.Namespace == ns && sp.Key.Name == name {
			return sp
		}
	}
	panic(fmt.Sprintf("no plan for Service %s/%s", ns, name))
}
