// Package serviceevents gives Services their events once per cause (SPEC T3): a cause repeated
// is not repeated, a new cause of the same reason is a new event. It remembers, for live Services
// only (SPEC N4), the last note per Service and reason, and whether a Service is owed its
// ReasonServed event.
package serviceevents

import (
	"fmt"
	"hash/fnv"
	"slices"
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
	svcs map[types.UID]*service
}

// service is what is remembered of one Service's events.
type service struct {
	last map[string]string // reason -> note
	// owed: a problem was told since the last ReasonServed event (Serving).
	owed bool
	// served counts the ReasonServed events given: each starts a new episode, whose events are
	// new series (Action), so that a cause that comes back after it is shown at once.
	served int
}

// of is what is remembered of Service uid. o.mu is held.
func (o *Once) of(uid types.UID) *service {
	if o.svcs == nil {
		o.svcs = map[types.UID]*service{}
	}
	s := o.svcs[uid]
	if s == nil {
		s = &service{last: map[string]string{}}
		o.svcs[uid] = s
	}
	return s
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
	s := o.of(uid)
	dup := s.last[ev.Reason] == ev.Message
	s.last[ev.Reason] = ev.Message
	episode := s.served
	o.mu.Unlock()
	if !dup {
		o.record(key, uid, ev, episode)
	}
}

func (o *Once) record(key types.NamespacedName, uid types.UID, ev model.Event, episode int) {
	ref := &corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: key.Namespace, Name: key.Name, UID: uid}
	o.Recorder.Eventf(ref, nil, ev.Type, ev.Reason, episodeAction(ev.Message, episode), "%s", ev.Message)
}

// Serving tells Service sp, planned by a sync whose programming ended as outcome, that it is
// served (ReasonServed) when that sync is what serves it (model.ServicePlan.Serving) and its
// writes (the ingress, the records) succeeded; it notes the problems after which it is told
// again. Only the Services a sync planned are looked at: a partial sync costs no more than it did.
func (o *Once) Serving(sp *model.ServicePlan, outcome model.Outcome, written bool) {
	switch s := sp.Serving(outcome); {
	// Newly served with a write failed: told once the writes succeed, even if those before the
	// failure already show it served.
	case s == model.ServingInterrupted, s == model.ServingNewly && !written:
		o.owe(sp.UID)
	case s == model.ServingQuiet, !written:
	default:
		o.served(sp, s == model.ServingNewly)
	}
}

// owe notes that Service uid's next ReasonServed event is given, whatever the last one said.
func (o *Once) owe(uid types.UID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.of(uid).owed = true
}

// served gives Service sp its ReasonServed event (model.ServicePlan.ServedEvent) when that is
// news: owed, or newly served (the API did not show it served before this sync) with another
// note than the last. Once given, nothing is owed, and the problems (model.ServingProblems) sp's
// plan no longer carries are forgotten, so that one that comes back is told again rather than
// hidden behind the Normal event.
func (o *Once) served(sp *model.ServicePlan, newly bool) {
	ev := sp.ServedEvent()
	o.mu.Lock()
	s := o.of(sp.UID)
	if !s.owed && (!newly || s.last[model.ReasonServed] == ev.Message) {
		o.mu.Unlock()
		return
	}
	s.owed = false
	s.served++
	s.last[model.ReasonServed] = ev.Message
	for _, reason := range model.ServingProblems {
		if !slices.ContainsFunc(sp.Events, func(e model.Event) bool { return e.Reason == reason }) {
			delete(s.last, reason)
		}
	}
	episode := s.served
	o.mu.Unlock()
	o.record(sp.Key, sp.UID, ev, episode)
}

// ForgetService drops what was remembered of a deleted Service's events.
func (o *Once) ForgetService(uid types.UID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.svcs, uid)
}

// Forget forgets the last event of reason given to Service uid, so that the next is given.
func (o *Once) Forget(uid types.UID, reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if s := o.svcs[uid]; s != nil {
		delete(s.last, reason)
	}
}

// ForgetReason forgets the events of one reason given so far, so that the next is given again.
func (o *Once) ForgetReason(reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, s := range o.svcs {
		delete(s.last, reason)
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

// episodeAction is Action within a Service's episode (service.served): a cause told again after
// the Service was served in between is a new event, not the series of the first. The series
// would keep the first one's time, and client-go writes a series' later counts only every
// 30 minutes.
func episodeAction(note string, episode int) string {
	if episode == 0 {
		return Action(note)
	}
	return Action(fmt.Sprintf("%d\x00%s", episode, note))
}
