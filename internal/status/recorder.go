package status

import (
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// InstanceRef names a gateway instance.
type InstanceRef struct {
	Pod string // namespace/name
	UID string
}

// Sync is the outcome of one sync of a gateway.
type Sync struct {
	// Instances are the gateway's running instances: the others are forgotten.
	Instances []InstanceRef
	// Programmed: every instance acknowledged state Generation, with Identities identities.
	Programmed bool
	Generation int64
	Identities int
	// Error is the text of a failed sync ("" when it did not fail).
	Error string
}

// RouteSync is the outcome of one write of a gateway's VIP routes.
type RouteSync struct {
	NextHops []string
	VIPs     int
	Error    string // "" when it succeeded
	// Unrouted counts the VIPs the Vpc's routes drop (SPEC V3); UnroutedText is fixed text that
	// says so and what to do (never a VIP, SPEC N8).
	Unrouted     int
	UnroutedText string
}

// Recorder keeps in memory what the reconciler and the agent sessions learn about each gateway.
// Its methods are cheap and make no API call: they run on the sync path. The Publisher writes
// what it holds.
type Recorder struct {
	mu      sync.Mutex
	gws     map[string]*Gateway
	seq     uint64
	changed chan struct{}
	now     func() time.Time
	conds   []metav1.Condition
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder {
	return &Recorder{gws: map[string]*Gateway{}, changed: make(chan struct{}, 1), now: time.Now}
}

// Changed is signalled (coalesced) after every change.
func (r *Recorder) Changed() <-chan struct{} { return r.changed }

// Seq counts the changes so far.
func (r *Recorder) Seq() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seq
}

// Gateways returns a copy of what the Recorder holds, and the change count it reflects.
func (r *Recorder) Gateways() (map[string]Gateway, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]Gateway, len(r.gws))
	for name, g := range r.gws {
		out[name] = copyGateway(*g)
	}
	return out, r.seq
}

// SetCondition records a condition of the controller as a whole; its transition time moves only
// when its status does (meta.SetStatusCondition).
func (r *Recorder) SetCondition(c metav1.Condition) {
	r.mu.Lock()
	c.LastTransitionTime = metav1.NewTime(r.now().UTC().Truncate(time.Second))
	changed := meta.SetStatusCondition(&r.conds, c)
	r.unlockCounting(changed)
}

// Conditions returns a copy of the conditions recorded.
func (r *Recorder) Conditions() []metav1.Condition {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.conds)
}

// unlockCounting releases r.mu, which the caller holds, counting a change and signalling it
// (coalesced) when changed.
func (r *Recorder) unlockCounting(changed bool) {
	if changed {
		r.seq++
	}
	r.mu.Unlock()
	if changed {
		select {
		case r.changed <- struct{}{}:
		default:
		}
	}
}

func copyGateway(g Gateway) Gateway {
	g.Instances = slices.Clone(g.Instances)
	if g.Routes != nil {
		rt := *g.Routes
		rt.NextHops = slices.Clone(rt.NextHops)
		g.Routes = &rt
	}
	return g
}

// update applies fn to gateway gw's entry and counts a change when anything but a time moved.
func (r *Recorder) update(gw string, fn func(g *Gateway, now time.Time)) {
	r.mu.Lock()
	g := r.gws[gw]
	if g == nil {
		g = &Gateway{}
		r.gws[gw] = g
	}
	before := timeless(*g)
	fn(g, r.now())
	changed := !reflect.DeepEqual(before, timeless(*g))
	r.unlockCounting(changed)
}

// timeless is g without its times, for change detection: a time alone is no news.
func timeless(g Gateway) Gateway {
	g = copyGateway(g)
	g.LastSyncTime, g.LastErrorTime = time.Time{}, time.Time{}
	for i := range g.Instances {
		g.Instances[i].LastAckTime, g.Instances[i].LastErrorTime = time.Time{}, time.Time{}
	}
	if g.Routes != nil {
		g.Routes.LastSyncTime = time.Time{}
	}
	return g
}

func (g *Gateway) instance(ref InstanceRef) *Instance {
	for i := range g.Instances {
		if g.Instances[i].Pod == ref.Pod {
			if g.Instances[i].UID != ref.UID {
				// A replaced pod of the same name: a new instance, nothing acknowledged yet.
				g.Instances[i] = Instance{Pod: ref.Pod, UID: ref.UID}
			}
			return &g.Instances[i]
		}
	}
	g.Instances = append(g.Instances, Instance{Pod: ref.Pod, UID: ref.UID})
	slices.SortFunc(g.Instances, func(a, b Instance) int { return strings.Compare(a.Pod, b.Pod) })
	return g.instance(ref)
}

// InstanceAcked records that an instance's agent acknowledged a state.
func (r *Recorder) InstanceAcked(gw string, inst InstanceRef, generation int64, agentVersion string) {
	r.update(gw, func(g *Gateway, now time.Time) {
		in := g.instance(inst)
		in.AckedGeneration, in.LastAckTime, in.LastError, in.LastErrorTime = generation, now, "", time.Time{}
		if agentVersion != "" {
			in.AgentVersion = agentVersion
		}
	})
}

// InstanceFailed records that an instance did not take a state; text is already bounded and
// fixed (transport.StatusText).
func (r *Recorder) InstanceFailed(gw string, inst InstanceRef, text string) {
	r.update(gw, func(g *Gateway, now time.Time) {
		in := g.instance(inst)
		in.LastError, in.LastErrorTime = text, now
	})
}

// GatewaySynced records the outcome of a sync of gateway gw.
func (r *Recorder) GatewaySynced(gw string, s Sync) {
	r.update(gw, func(g *Gateway, now time.Time) {
		keep := map[string]InstanceRef{}
		for _, ref := range s.Instances {
			keep[ref.Pod] = ref
		}
		g.Instances = slices.DeleteFunc(g.Instances, func(in Instance) bool {
			ref, ok := keep[in.Pod]
			return !ok || ref.UID != in.UID
		})
		for _, ref := range slices.Sorted(maps.Keys(keep)) {
			g.instance(keep[ref])
		}
		switch {
		case s.Error != "":
			g.LastError, g.LastErrorTime = s.Error, now
		case s.Programmed:
			g.Generation, g.Identities, g.LastSyncTime = s.Generation, s.Identities, now
			g.LastError, g.LastErrorTime = "", time.Time{}
		}
	})
}

// RoutesSynced records the outcome of a write of gateway gw's VIP routes.
func (r *Recorder) RoutesSynced(gw string, rs RouteSync) {
	r.update(gw, func(g *Gateway, now time.Time) {
		rt := &Routes{NextHops: slices.Clone(rs.NextHops), VIPs: rs.VIPs, Synced: rs.Error == "", LastError: rs.Error,
			UnroutedVIPs: rs.Unrouted, Unrouted: rs.UnroutedText}
		if rt.NextHops == nil {
			rt.NextHops = []string{}
		}
		if rt.Synced {
			rt.LastSyncTime = now
		} else if g.Routes != nil {
			rt.LastSyncTime = g.Routes.LastSyncTime
		}
		g.Routes = rt
	})
}

// GatewayRemoved forgets a gateway that no longer exists.
func (r *Recorder) GatewayRemoved(gw string) {
	r.mu.Lock()
	_, ok := r.gws[gw]
	if ok {
		delete(r.gws, gw)
		r.seq++
	}
	r.mu.Unlock()
	if ok {
		select {
		case r.changed <- struct{}{}:
		default:
		}
	}
}
