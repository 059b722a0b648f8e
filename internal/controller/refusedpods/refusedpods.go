// Package refusedpods tells the Pods that look like a gateway's instances but are not (SPEC N5)
// why, once per cause.
package refusedpods

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"

	"github.com/vpcgw/vpcgw/internal/controller/serviceevents"
	"github.com/vpcgw/vpcgw/internal/model"
)

// Memory tells the Pods that look like a gateway's instances but are not (SPEC N5) why,
// with a Warning on the Pod itself: whoever made it reads it in its own namespace, and it names
// nothing of another (SPEC N8). Each cause is told once; what a gateway's last pass no longer
// refused is forgotten, so the memory holds only Pods that exist (SPEC N4).
type Memory struct {
	mu   sync.Mutex
	last map[string]map[types.UID]string // gateway -> Pod UID -> note told
}

// Tell gives gateway gw's refused Pods whose cause is new their Warning through rec, and
// returns how many it told.
func (t *Memory) Tell(rec events.EventRecorder, gw string, refused []model.RefusedInstance) int {
	fresh := t.remember(gw, refused)
	for _, ri := range fresh {
		ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ri.Pod.Namespace, Name: ri.Pod.Name, UID: ri.UID}
		note := model.BoundMessage(ri.Event.Message) // the API refuses longer notes (SPEC N6)
		rec.Eventf(ref, nil, ri.Event.Type, ri.Event.Reason, serviceevents.Action(note), "%s", note)
	}
	return len(fresh)
}

// remember makes refused gateway gw's last refusals and returns those not told before.
func (t *Memory) remember(gw string, refused []model.RefusedInstance) []model.RefusedInstance {
	t.mu.Lock()
	defer t.mu.Unlock()
	before := t.last[gw]
	now := make(map[types.UID]string, len(refused))
	var fresh []model.RefusedInstance
	for _, ri := range refused {
		now[ri.UID] = ri.Event.Message
		if before[ri.UID] != ri.Event.Message {
			fresh = append(fresh, ri)
		}
	}
	switch {
	case len(now) > 0 && t.last == nil:
		t.last = map[string]map[types.UID]string{gw: now}
	case len(now) > 0:
		t.last[gw] = now
	default:
		delete(t.last, gw)
	}
	return fresh
}

// Forget drops what was told of a gateway that is gone.
func (t *Memory) Forget(gw string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.last, gw)
}
