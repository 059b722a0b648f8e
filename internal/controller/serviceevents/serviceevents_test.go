package serviceevents

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"

	"github.com/vpcgw/vpcgw/internal/model"
)

// covers: T3, N4, N6
// A cause is told once: repeated, it is not told again; a new cause of the same reason is; a
// forgotten one is told again. Notes are bounded, and a deleted Service leaves nothing behind.
func TestEventsOncePerCause(t *testing.T) {
	rec := events.NewFakeRecorder(16)
	o := &Once{Recorder: rec}
	key := types.NamespacedName{Namespace: "t1", Name: "web"}
	told := func() int {
		n := 0
		for {
			select {
			case <-rec.Events:
				n++
			default:
				return n
			}
		}
	}
	ev := func(msg string) model.Event {
		return model.Event{Type: corev1.EventTypeWarning, Reason: model.ReasonVIPNotRouted, Message: msg}
	}
	o.Emit(key, "u1", ev("cause 1"))
	o.Emit(key, "u1", ev("cause 1"))
	if n := told(); n != 1 {
		t.Fatalf("one cause told %d times", n)
	}
	o.Emit(key, "u1", ev("cause 2"))
	if n := told(); n != 1 {
		t.Fatalf("a new cause told %d times, want once", n)
	}
	o.Forget("u1", model.ReasonVIPNotRouted)
	o.Emit(key, "u1", ev("cause 2"))
	o.ForgetReason(model.ReasonVIPNotRouted)
	o.Emit(key, "u1", ev("cause 2"))
	if n := told(); n != 2 {
		t.Fatalf("a forgotten cause told %d times, want again each time", n)
	}
	o.Emit(key, "u1", ev(strings.Repeat("x", 2*model.MaxEventMessage)))
	select {
	case e := <-rec.Events:
		if len(e) > model.MaxEventMessage+len(corev1.EventTypeWarning)+len(model.ReasonVIPNotRouted)+2 {
			t.Errorf("an event of %d bytes", len(e))
		}
	default:
		t.Fatal("a long note was not told")
	}
	o.ForgetService("u1")
	if len(o.last) != 0 {
		t.Errorf("a deleted Service's events are remembered: %v", o.last)
	}
	// The same note twice must give the same action (its hash is not seeded per call).
	first, again := Action("a"), Action("a")
	if Action("a") == Action("b") || first != again {
		t.Error("the event action does not name the cause")
	}
}
