package controller

import (
	"fmt"
	"hash/fnv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vpcgw/vpcgw/internal/model"
)

// emit records the plan's events for one Service, each cause once.
func (r *GatewayReconciler) emit(sp *model.ServicePlan) {
	for _, ev := range sp.Events {
		r.emitOnce(sp.Key, sp.UID, ev)
	}
}

// eventAction names the cause of an event: events.k8s.io folds events of one object, reason and
// action into a series that keeps its first note (client-go tools/events getKey), so a later,
// different cause of the same reason would never be shown. The action carries a digest of the
// note: one cause repeated is one series, a new cause a new event (SPEC T3).
func eventAction(note string) string {
	h := fnv.New32a()
	h.Write([]byte(note))
	return fmt.Sprintf("Reconcile-%08x", h.Sum32())
}

// emitOnce gives Service key (uid) event ev, unless the last event of its reason had the same note.
func (r *GatewayReconciler) emitOnce(key types.NamespacedName, uid types.UID, ev model.Event) {
	ev.Message = model.BoundMessage(ev.Message) // the API refuses longer notes (SPEC N6)
	r.eventsMu.Lock()
	m := r.lastEvent[uid]
	if m == nil {
		m = map[string]string{}
		r.lastEvent[uid] = m
	}
	dup := m[ev.Reason] == ev.Message
	m[ev.Reason] = ev.Message
	r.eventsMu.Unlock()
	if dup {
		return
	}
	ref := &corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: key.Namespace, Name: key.Name, UID: uid}
	r.Recorder.Eventf(ref, nil, ev.Type, ev.Reason, eventAction(ev.Message), "%s", ev.Message)
}
