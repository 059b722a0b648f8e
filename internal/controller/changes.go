package controller

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/vpcgw/vpcgw/internal/model"
)

// changeTracker collects, per gateway, what the event handlers saw change since the gateway's
// last plan (kube-proxy's change tracker): the Services to replan and the record owners whose
// records someone else changed. The planner (model.Planner) decides what to do with them. Marks
// are set by the handlers before they enqueue the gateway, so a sync that takes them reads a
// cache that already holds the change.
type changeTracker struct {
	mu  sync.Mutex
	gws map[string]*model.Changes
}

func newChangeTracker() *changeTracker { return &changeTracker{gws: map[string]*model.Changes{}} }

func (c *changeTracker) gateway(gw string) *model.Changes {
	ch := c.gws[gw]
	if ch == nil {
		ch = &model.Changes{Services: map[types.NamespacedName]bool{}, Owners: map[types.UID]bool{}}
		c.gws[gw] = ch
	}
	return ch
}

// MarkService records that Service key changed, for each of the gateways it wakes.
func (c *changeTracker) MarkService(gws []string, key types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, gw := range gws {
		c.gateway(gw).Services[key] = true
	}
}

// MarkOwner records that a record of owner uid (Service key) changed on gateway gw, or that the
// Service must be replanned (a write for it failed, it is quarantined).
func (c *changeTracker) MarkOwner(gw string, key types.NamespacedName, uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := c.gateway(gw)
	if key.Name != "" {
		ch.Services[key] = true
	}
	if uid != "" {
		ch.Owners[uid] = true
	}
}

// take returns and forgets the changes of gw.
func (c *changeTracker) take(gw string) model.Changes {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := c.gateway(gw)
	delete(c.gws, gw)
	return *ch
}

// planners keeps one model.Planner per gateway. The work queue never hands one gateway to two
// workers, so a Planner is used by one goroutine at a time; only the map is locked.
type planners struct {
	mu  sync.Mutex
	gws map[string]*model.Planner
}

func newPlanners() *planners { return &planners{gws: map[string]*model.Planner{}} }

func (p *planners) of(gw string) *model.Planner {
	p.mu.Lock()
	defer p.mu.Unlock()
	pl := p.gws[gw]
	if pl == nil {
		pl = &model.Planner{}
		p.gws[gw] = pl
	}
	return pl
}

// forget drops the planner of a gateway that is gone: nothing keyed by a tenant-chosen name
// outlives its object (SPEC N4).
func (p *planners) forget(gw string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.gws, gw)
}
