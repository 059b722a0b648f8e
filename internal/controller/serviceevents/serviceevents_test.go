package serviceevents

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"

	"github.com/vpcgw/vpcgw/internal/gwstate"
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
	if len(o.svcs) != 0 {
		t.Errorf("a deleted Service's events are remembered: %v", o.svcs)
	}
	// The same note twice must give the same action (its hash is not seeded per call).
	first, again := Action("a"), Action("a")
	if Action("a") == Action("b") || first != again {
		t.Error("the event action does not name the cause")
	}
}

// recorded is one event as the recorder got it.
type recorded struct{ typ, reason, action, note string }

// recorder keeps what it is given, with the action (events.FakeRecorder drops it).
type recorder struct{ got []recorded }

func (r *recorder) Eventf(_ runtime.Object, _ runtime.Object, eventtype, reason, action, note string, args ...any) {
	r.got = append(r.got, recorded{eventtype, reason, action, fmt.Sprintf(note, args...)})
}

// take returns what was recorded since the last take.
func (r *recorder) take() []recorded {
	got := r.got
	r.got = nil
	return got
}

// covers: T1, T3, N4
// A Service is told it is served once when it becomes served (its ingress published), not again
// while it stays served, and again, as a new event, after a problem (the EIP not Ready,
// programming failed); the problem, once over, is told again when it comes back. A Service whose
// writes failed is told once they succeed. A deleted Service owes nothing.
func TestServedOncePerEpisode(t *testing.T) {
	rec := &recorder{}
	o := &Once{Recorder: rec}
	eip := netip.MustParseAddr("172.18.0.10")
	notReady := model.Event{Type: corev1.EventTypeWarning, Reason: model.ReasonEIPNotReady, Message: "IptablesEIP eip1 is not Ready"}
	// newly: served, its ingress to publish; shown: the ingress already is the EIP; waiting:
	// the EIP not Ready, so not served, and the ingress to withdraw.
	newly := &model.ServicePlan{Key: types.NamespacedName{Namespace: "t1", Name: "web"}, UID: "u1", Gateway: "gw1",
		EIPServed: true, EIP: eip, Ingress: []corev1.LoadBalancerIngress{{IP: eip.String()}}, IngressWrite: true,
		Identities: []gwstate.Identity{{VIP: eip, Port: 80, Protocol: gwstate.TCP}}}
	shown := *newly
	shown.IngressWrite = false
	waiting := &model.ServicePlan{Key: newly.Key, UID: newly.UID, Gateway: "gw1", EIPReason: notReady.Message, IngressWrite: true,
		Events: []model.Event{notReady}}
	sync := func(sp *model.ServicePlan, outcome model.Outcome, written bool) {
		o.Plan(sp)
		o.Serving(sp, outcome, written)
	}

	sync(waiting, model.Programmed, true)
	sync(newly, model.Programmed, true)
	got := rec.take()
	if len(got) != 2 || got[1].typ != corev1.EventTypeNormal || got[1].reason != model.ReasonServed || !strings.Contains(got[1].note, "EIP 172.18.0.10") {
		t.Fatalf("a Service that becomes served: %+v", got)
	}
	first := got[1]
	sync(&shown, model.Programmed, true)
	sync(newly, model.Programmed, true) // the same ingress written again (someone cleared it)
	sync(&shown, model.NoInstance, true)
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("a Service that stays served is told again: %+v", got)
	}

	// The EIP is not Ready again: the same cause as before the Service was served is told, as a
	// new event; served again, the Service is told so, as a new event too.
	sync(waiting, model.Programmed, true)
	sync(newly, model.Programmed, true)
	got = rec.take()
	if len(got) != 2 || got[0].reason != model.ReasonEIPNotReady || got[1].reason != model.ReasonServed {
		t.Fatalf("a problem and its end: %+v", got)
	}
	if got[1].note != first.note || got[1].action == first.action {
		t.Errorf("served again: %+v, want the same note as %+v in a new series", got[1], first)
	}

	// Programming fails (the controller tells it) and recovers: the ingress never changed.
	sync(&shown, model.Failed, false)
	sync(&shown, model.Programmed, true)
	if got := rec.take(); len(got) != 1 || got[0].reason != model.ReasonServed {
		t.Fatalf("served after a failure: %+v", got)
	}

	// A problem the plan still carries stays told once (a port skipped while the rest is served).
	skipped := model.Event{Type: corev1.EventTypeWarning, Reason: model.ReasonUnsupported, Message: "port 9/SCTP is not served"}
	shown.Events = []model.Event{skipped}
	sync(waiting, model.Programmed, true)
	sync(&shown, model.Programmed, true)
	sync(&shown, model.Programmed, true)
	if got := rec.take(); len(got) != 3 || got[1].reason != model.ReasonUnsupported || got[2].reason != model.ReasonServed {
		t.Fatalf("a problem the plan still carries: %+v", got)
	}

	// Newly served, but a write failed: told on the next sync, which finds it shown.
	sync(waiting, model.Programmed, true)
	sync(newly, model.Programmed, false)
	if got := rec.take(); len(got) != 1 || got[0].reason != model.ReasonEIPNotReady {
		t.Fatalf("served with a write failed: %+v", got)
	}
	sync(&shown, model.Programmed, true)
	if got := rec.take(); len(got) != 1 || got[0].reason != model.ReasonServed {
		t.Fatalf("its writes done: %+v", got)
	}

	sync(&shown, model.Held, true)
	o.ForgetService(newly.UID)
	sync(&shown, model.Programmed, true)
	if got := rec.take(); len(got) != 1 || got[0].reason != model.ReasonUnsupported {
		t.Fatalf("a deleted Service's owed event was given: %+v", got)
	}
}
