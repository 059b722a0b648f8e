package controller

import (
	"slices"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vpcgw/vpcgw/internal/model"
)

// planCache keeps, per gateway, what each Service bound to it contributed at its last plan, and
// which Services changed since: a sync replans only the Services a change touches and assembles
// the gateway's state from the kept contributions (kube-proxy's partial sync). Without it every
// EndpointSlice change replanned the whole gateway, which at 1,000 Services made the controller
// CPU-bound (docs/benchmarks.md).
//
// A full plan is made when the cache is not valid: at start, after any failed sync, and when an
// object every Service depends on changed (gateways, EIPs, Subnets, the gateway's pods: see
// gatewayFingerprint). Marks are set by the event handlers before they enqueue the gateway, so a
// sync that consumes them reads a cache that already holds the change.
type planCache struct {
	mu  sync.Mutex
	gws map[string]*gatewayCache
}

type gatewayCache struct {
	// dirty are the Services to replan; owners are record owner UIDs whose records to recheck
	// (a record edited or deleted by someone else, SPEC R4).
	dirty  map[types.NamespacedName]bool
	owners map[types.UID]bool

	valid       bool
	fingerprint string
	services    map[types.NamespacedName]*kept
	// limited counts the kept Services refused for the gateway's identity bound (SPEC N4). While
	// any is, every sync is full: a Service that lets go of identities makes room for one that
	// did not change, and only a full plan sees both.
	limited int
}

// kept is what the cache remembers of one Service's last plan.
type kept struct {
	uid     types.UID
	part    model.Contribution
	limited bool
	// claims are the EIP and ports the Service claimed when planned: a Service that gives up an
	// identity lets an other one take it over (SPEC I2), so both are replanned together.
	eip   string
	ports []corev1.ServicePort
}

func newPlanCache() *planCache { return &planCache{gws: map[string]*gatewayCache{}} }

func (c *planCache) gateway(gw string) *gatewayCache {
	g := c.gws[gw]
	if g == nil {
		g = &gatewayCache{dirty: map[types.NamespacedName]bool{}, owners: map[types.UID]bool{}, services: map[types.NamespacedName]*kept{}}
		c.gws[gw] = g
	}
	return g
}

// markService records that Service key changed, for each of the gateways it wakes.
func (c *planCache) markService(gws []string, key types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, gw := range gws {
		c.gateway(gw).dirty[key] = true
	}
}

// markOwner records that a record of owner uid (Service key) changed on gateway gw.
func (c *planCache) markOwner(gw string, key types.NamespacedName, uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.gateway(gw)
	if key.Name != "" {
		g.dirty[key] = true
	}
	if uid != "" {
		g.owners[uid] = true
	}
}

// pending reports whether changes were marked for gw since its last take.
func (c *planCache) pending(gw string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.gateway(gw)
	return len(g.dirty) > 0 || len(g.owners) > 0
}

// invalidate makes the next sync of gw a full plan.
func (c *planCache) invalidate(gw string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gateway(gw).valid = false
}

// work is what one sync of a gateway has to replan.
type work struct {
	full   bool
	dirty  map[types.NamespacedName]bool
	owners map[types.UID]bool
	// previous is the kept plan of every dirty Service, and of every Service sharing a claim.
	previous map[types.NamespacedName]*kept
}

// take consumes the marks of gw. The sync is full when the cache is not valid or fingerprint
// (of the gateway-wide objects now) differs from the one the cache was built with.
func (c *planCache) take(gw, fingerprint string) work {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.gateway(gw)
	w := work{full: !g.valid || g.fingerprint != fingerprint || g.limited > 0, dirty: g.dirty, owners: g.owners, previous: map[types.NamespacedName]*kept{}}
	g.dirty, g.owners = map[types.NamespacedName]bool{}, map[types.UID]bool{}
	if !w.full {
		for k := range w.dirty {
			if p := g.services[k]; p != nil {
				w.previous[k] = p
			}
		}
	}
	return w
}

// replace stores the result of a full plan of gw.
func (c *planCache) replace(gw, fingerprint string, plans []model.ServicePlan, svcs map[types.NamespacedName]*corev1.Service) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.gateway(gw)
	g.valid, g.fingerprint = true, fingerprint
	g.services = map[types.NamespacedName]*kept{}
	g.limited = 0
	for i := range plans {
		if sp := &plans[i]; sp.Gateway == gw {
			g.put(sp, svcs[sp.Key])
		}
	}
}

func (g *gatewayCache) put(sp *model.ServicePlan, svc *corev1.Service) {
	g.remove(sp.Key)
	k := keep(sp, svc)
	g.services[sp.Key] = k
	if k.limited {
		g.limited++
	}
}

func (g *gatewayCache) remove(key types.NamespacedName) {
	if k := g.services[key]; k != nil {
		if k.limited {
			g.limited--
		}
		delete(g.services, key)
	}
}

// update stores the replanned Services of a partial plan: every key in replanned that has no plan
// for gw any more leaves the cache.
func (c *planCache) update(gw string, replanned map[types.NamespacedName]bool, plans []model.ServicePlan, svcs map[types.NamespacedName]*corev1.Service) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.gateway(gw)
	for k := range replanned {
		g.remove(k)
	}
	for i := range plans {
		if sp := &plans[i]; sp.Gateway == gw {
			g.put(sp, svcs[sp.Key])
		}
	}
}

// contributions returns what every kept Service of gw contributes, with its UID.
func (c *planCache) contributions(gw string) (map[types.NamespacedName]model.Contribution, map[types.NamespacedName]types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.gateway(gw)
	out := make(map[types.NamespacedName]model.Contribution, len(g.services))
	uids := make(map[types.NamespacedName]types.UID, len(g.services))
	for k, p := range g.services {
		out[k], uids[k] = p.part, p.uid
	}
	return out, uids
}

// load is what the kept Services of gw outside replanned have there: what a partial plan's
// Services count against the gateway's bounds (SPEC N4).
func (c *planCache) load(gw string, replanned map[types.NamespacedName]bool) model.Load {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n model.Load
	for k, p := range c.gateway(gw).services {
		if !replanned[k] {
			l := model.LoadOf(p.part.Identities)
			n.Identities, n.Backends = n.Identities+l.Identities, n.Backends+l.Backends
		}
	}
	return n
}

// assemble is the gateway's plan: base (instances, next hops) plus every kept contribution.
func (c *planCache) assemble(gw string, base model.GatewayPlan) model.GatewayPlan {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.gateway(gw).services {
		base.Add(p.part)
	}
	base.Finish()
	return base
}

func keep(sp *model.ServicePlan, svc *corev1.Service) *kept {
	k := &kept{uid: sp.UID, part: sp.Contribution(), limited: sp.Limited}
	if svc != nil {
		k.eip = svc.Annotations[model.AnnotationEIP]
		k.ports = slices.Clone(svc.Spec.Ports)
	}
	return k
}

// gatewayFingerprint names the versions of what every Service of gateway gw depends on: the
// gateway, its EIPs, the Subnets' specs (NIC resolution, SPEC B2) and the gateway's pods. Other
// gateways and their EIPs are left out: a change there concerns only the Services that name them,
// which the EIP handler marks. Subnets count by generation: kube-ovn writes their status on every
// IP allocation.
func gatewayFingerprint(s *model.Snapshot, gw string) string {
	parts := []string{"placement/" + s.Placement.KubeOVNNamespace + "/" + s.Placement.NamePrefix}
	for i := range s.Gateways {
		if g := &s.Gateways[i]; g.Name == gw {
			parts = append(parts, "g/"+g.ResourceVersion+deleting(g.DeletionTimestamp))
			// The Vpc's namespaces admit the gateway's Services (SPEC N1): by generation, as
			// kube-ovn writes its status often.
			for j := range s.Vpcs {
				if v := &s.Vpcs[j]; v.Name == g.Spec.Vpc {
					parts = append(parts, "v/"+v.Name+"@"+strconv.FormatInt(v.Generation, 10)+deleting(v.DeletionTimestamp))
				}
			}
		}
	}
	for i := range s.EIPs {
		if e := &s.EIPs[i]; e.Spec.NatGwDp == gw {
			parts = append(parts, "e/"+e.Name+"@"+e.ResourceVersion)
		}
	}
	for i := range s.Subnets {
		sub := &s.Subnets[i]
		parts = append(parts, "s/"+sub.Name+"@"+strconv.FormatInt(sub.Generation, 10)+deleting(sub.DeletionTimestamp))
	}
	for i := range s.GatewayPods {
		p := &s.GatewayPods[i]
		parts = append(parts, "p/"+p.Namespace+"/"+p.Name+"@"+p.ResourceVersion)
	}
	slices.Sort(parts) // cache lists come in map order
	return strings.Join(parts, ";")
}

func deleting(t *metav1.Time) string {
	if t != nil {
		return "-deleting"
	}
	return ""
}
