package controller_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vpcgw/vpcgw/internal/model"
)

// covers: N6, T3
// Hostile tenant, against the real API server without the webhook: a 200 KiB EIP annotation
// (not an object name) still gets its event, bounded to the API's 1 KiB note, so the user learns
// why nothing is served. Unbounded, the API server refused the event and the user got no reason.
func TestHostileTenantHugeAnnotationGetsABoundedEvent(t *testing.T) {
	f := newFixture(t, "gw-hostile-ann", 1)
	huge := strings.Repeat("e", 200<<10)
	svc := f.service("huge", "", 80, "10.0.1.11")
	must(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(svc), svc))
	svc.Annotations[model.AnnotationEIP] = huge
	must(t, k8s.Update(context.Background(), svc))
	var msg string
	f.eventually("the invalid-annotation event", func() bool {
		var evs corev1.EventList
		must(t, k8s.List(context.Background(), &evs, client.InNamespace(f.ns)))
		for _, ev := range evs.Items {
			if ev.InvolvedObject.Name == "huge" && ev.Reason == model.ReasonInvalidAnnotation {
				msg = ev.Message
				return true
			}
		}
		return false
	})
	if len(msg) > model.MaxEventMessage || !strings.HasPrefix(msg, `annotation `+model.AnnotationEIP+`="eee`) || !strings.HasSuffix(msg, "…") {
		t.Fatalf("event message of %d bytes (%.40q…), want at most %d, cut with an ellipsis", len(msg), msg, model.MaxEventMessage)
	}
}
