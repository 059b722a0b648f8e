package ovn

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/ovn-kubernetes/libovsdb/cache"
	"github.com/ovn-kubernetes/libovsdb/model"

	"github.com/vpcgw/vpcgw/internal/ovn/nbdb"
)

// routeNotifyDebounce lets the rest of one NB update (a router's new route row arrives with the
// router's changed column) into the cache before the routes are read again.
const routeNotifyDebounce = 20 * time.Millisecond

// routeWatch remembers which routers' routes changed in the NB cache since it last told the
// controller, so that it checks its VIPs against them again (SPEC V3): a user adds the missing
// route to the Vpc, kube-ovn writes it to the NB some time later, and only then is the warning
// gone.
type routeWatch struct {
	mu      sync.Mutex
	fn      func(router string)
	routers map[string]bool // names of routers whose static routes or ports changed
	rows    map[string]bool // static routes and ports added or changed in place: router looked up later
	kick    chan struct{}   // wakes routeNotifyLoop (buffered, never blocks the sender)
}

func (rw *routeWatch) init() {
	rw.routers, rw.rows = map[string]bool{}, map[string]bool{}
	rw.kick = make(chan struct{}, 1)
}

// OnRoutesChanged registers fn, called with the name of a router whose static routes or ports'
// networks changed in the NB (also when it appears, or is reloaded after a reconnect). fn runs on
// a goroutine of the writer, one call at a time, and must not block for long. Changes seen
// before fn is registered are not told.
func (w *Writer) OnRoutesChanged(fn func(router string)) {
	w.routes.mu.Lock()
	defer w.routes.mu.Unlock()
	w.routes.fn = fn
}

func (rw *routeWatch) note(router, row string) {
	rw.mu.Lock()
	if rw.fn == nil {
		rw.mu.Unlock()
		return
	}
	if router != "" {
		rw.routers[router] = true
	}
	if row != "" {
		rw.rows[row] = true
	}
	rw.mu.Unlock()
	select {
	case rw.kick <- struct{}{}:
	default:
	}
}

// take returns and clears what changed.
func (rw *routeWatch) take() (fn func(string), routers, rows map[string]bool) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	fn, routers, rows = rw.fn, rw.routers, rw.rows
	rw.routers, rw.rows = map[string]bool{}, map[string]bool{}
	return fn, routers, rows
}

// routeEvents notes route changes from the libovsdb cache. It runs on libovsdb's event
// goroutine, so it only records them. A route or port removed from a router shows as the
// router's change (its column), so row deletions need no handling.
func (w *Writer) routeEvents() cache.EventHandler {
	row := func(m model.Model) string {
		switch v := m.(type) {
		case *nbdb.LogicalRouterStaticRoute:
			return v.UUID
		case *nbdb.LogicalRouterPort:
			return v.UUID
		}
		return ""
	}
	return &cache.EventHandlerFuncs{
		AddFunc: func(_ string, m model.Model) {
			if lr, ok := m.(*nbdb.LogicalRouter); ok {
				w.routes.note(lr.Name, "")
			} else if u := row(m); u != "" {
				w.routes.note("", u)
			}
		},
		UpdateFunc: func(_ string, old, cur model.Model) {
			if o, ok := old.(*nbdb.LogicalRouter); ok {
				n, _ := cur.(*nbdb.LogicalRouter)
				if n != nil && (!slices.Equal(o.StaticRoutes, n.StaticRoutes) || !slices.Equal(o.Ports, n.Ports)) {
					w.routes.note(n.Name, "")
				}
			} else if u := row(cur); u != "" {
				w.routes.note("", u)
			}
		},
		DeleteFunc: func(_ string, m model.Model) {
			if lr, ok := m.(*nbdb.LogicalRouter); ok {
				w.routes.note(lr.Name, "")
			}
		},
	}
}

// routeNotifyLoop tells the registered func which routers' routes changed, until Close.
func (w *Writer) routeNotifyLoop() {
	defer w.wg.Done()
	for {
		select {
		case <-w.stop:
			return
		case <-w.routes.kick:
		}
		select {
		case <-w.stop:
			return
		case <-time.After(routeNotifyDebounce):
		}
		fn, routers, rows := w.routes.take()
		if fn == nil {
			continue
		}
		if len(rows) > 0 {
			// The routers that reference the changed rows.
			var lrs []nbdb.LogicalRouter
			if err := w.c.List(context.Background(), &lrs); err != nil {
				w.log.Error(err, "finding the routers of changed routes")
			}
			for _, lr := range lrs {
				if slices.ContainsFunc(lr.StaticRoutes, func(u string) bool { return rows[u] }) ||
					slices.ContainsFunc(lr.Ports, func(u string) bool { return rows[u] }) {
					routers[lr.Name] = true
				}
			}
		}
		for _, r := range slices.Sorted(maps.Keys(routers)) {
			fn(r)
		}
	}
}
