package refusedpods

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"

	"github.com/vpcgw/vpcgw/internal/model"
)

// covers: N4, N5, T3
// A look-alike gateway Pod is told why once per cause; a new cause is told again; what a pass no
// longer refuses, and a gateway that is gone, leave nothing behind.
func TestRefusedPodsToldOncePerCause(t *testing.T) {
	rec := events.NewFakeRecorder(16)
	var r Memory
	refused := func(uid, msg string) model.RefusedInstance {
		return model.RefusedInstance{Pod: types.NamespacedName{Namespace: "kube-system", Name: "vpc-nat-gw-gw1-" + uid}, UID: types.UID(uid),
			Event: model.Event{Type: corev1.EventTypeWarning, Reason: model.ReasonNotAGatewayInstance, Message: msg}}
	}
	steps := []struct {
		refused []model.RefusedInstance
		told    int
	}{
		{[]model.RefusedInstance{refused("7", "ordinal 7"), refused("8", "ordinal 8")}, 2},
		{[]model.RefusedInstance{refused("7", "ordinal 7"), refused("8", "ordinal 8")}, 0},
		{[]model.RefusedInstance{refused("7", "another UID")}, 1},
		{nil, 0},
		{[]model.RefusedInstance{refused("7", "another UID")}, 1}, // forgotten when it was no longer refused
	}
	for i, s := range steps {
		if n := r.Tell(rec, "gw1", s.refused); n != s.told || len(rec.Events) != s.told {
			t.Fatalf("step %d: told %d (%d events), want %d", i, n, len(rec.Events), s.told)
		}
		for range s.told {
			<-rec.Events
		}
	}
	r.Forget("gw1")
	if len(r.last) != 0 {
		t.Fatalf("a gone gateway's refusals are remembered: %v", r.last)
	}
}
