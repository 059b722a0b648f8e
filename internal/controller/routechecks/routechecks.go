// Package routechecks remembers each gateway's last check of its VIPs against its Vpc's routes
// (SPEC V3): which VIPs OVN would drop, and which Services were warned, so that a Service is told
// when that starts, when its cause changes and when it ends, once each.
package routechecks

import (
	"maps"
	"net/netip"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// check is the last check of one gateway's VIPs.
type check struct {
	// dropped are the gateway's VIPs OVN would drop, with why.
	dropped map[netip.Addr]string
	// warned are the Services given the Warning (and not yet told that it is over).
	warned map[types.UID]types.NamespacedName
}

// Checks holds each gateway's last check. The zero value is ready to use.
type Checks struct {
	mu   sync.Mutex
	byGw map[string]*check
}

// Unrouted is the count of VIPs gateway key's last check found dropped (0: none yet).
func (rc *Checks) Unrouted(key string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if c := rc.byGw[key]; c != nil {
		return len(c.dropped)
	}
	return 0
}

// Record keeps the dropped VIPs of gateway key's check, and returns whether they changed and
// the Services warned at the last check.
func (rc *Checks) Record(key string, dropped map[netip.Addr]string) (changed bool, warned map[types.UID]types.NamespacedName) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.byGw == nil {
		rc.byGw = map[string]*check{}
	}
	c := rc.byGw[key]
	if c == nil {
		c = &check{}
		rc.byGw[key] = c
	}
	changed = !maps.Equal(c.dropped, dropped)
	c.dropped = dropped
	return changed, maps.Clone(c.warned)
}

// Warn keeps the Services warned at gateway key's check.
func (rc *Checks) Warn(key string, warned map[types.UID]types.NamespacedName) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if c := rc.byGw[key]; c != nil {
		c.warned = warned
	}
}

// Forget drops gateway gw's check (the gateway is gone, SPEC N4).
func (rc *Checks) Forget(gw string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	delete(rc.byGw, gw)
}
