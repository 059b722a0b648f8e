// Package serviceevents gives Services their events once per cause (SPEC T3): a cause repeated
// is not repeated, a new cause of the same reason is a new event. It remembers the last note per
// Service and reason, for live Services only (SPEC N4).
package serviceevents

import (
	"fmt"
	"hash/fnv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"

	"github.com/vpcgw/vpcgw/internal/model"
)

// Once records events through Recorder, each cause once.
type Once struct {
	Recorder events.EventRecorder

	mu   sync.Mutex
	last map[types.UID]map[string]string // Service UID -> reason -> note
}

// Plan gives the plan's events of one Service.
func (o *Once) Plan(sp *model.ServicePlan) {
	for _, ev := range sp.Events {
		o.Emit(sp.Key, sp.UID, ev)
	}
}

// Emit gives Service key (uid) event ev, unless the last event of its reason had the same note.
func (o *Once) Emit(key types.NamespacedName, uid types.UID, ev model.Event) {
	ev.Message = model.BoundMessage(ev.Message) // the API refuses longer notes (SPEC N6)
	o.mu.Lock()
	if o.last == nil {
		o.last = map[types.UID]map[string]string{}
	}
	m := o.last[uid]
	if m == nil {
		m = map[string]string{}
		o.last[uid] = m
	}
	dup := m[ev.Reason] == ev.Message
	m[ev.Reason] = ev.Message
	o.mu.Unlock()
	if dup {
		return
	}
	ref := &corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: key.Namespace, Name: key.Name, UID: uid}
	o.Recorder.Eventf(ref, nil, ev.Type, ev.Reason, Action(ev.Message), "%s", ev.Message)
}

// ForgetService drops what was remembered of a deleted Service's events.
func (o *Once) ForgetService(uid types.UID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.last, uid)
}

// Forget forgets the last event of reason given to Service uid, so that the next is given.
func (o *Once) Forget(uid types.UID, reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.last[uid], reason)
}

// ForgetReason forgets the events of one reason given so far, so that the next is given again.
func (o *Once) ForgetReason(reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, m := range o.last {
		delete(m, reason)
	}
}

// Action names the cause of an event: events.k8s.io folds events of one object, reason and
// action into a series that keeps its first note (client-go tools/events getKey), so a later,
// different cause of the same reason would never be shown. The action carries a digest of the
// note: one cause repeated is one series, a new cause a new event (SPEC T3).
func Action(note string) string {
	h := fnv.New32a()
	h.Write([]byte(note))
	return fmt.Sprintf("Reconcile-%08x", h.Sum32())
}
