package controller

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/model"
)

// The agents program a state identity by identity (SPEC D8): an identity that an agent's
// validation or its kernel refuses is left as that agent had it, everything else is programmed in
// the same round trip, and the acknowledgement names the refused identities. The controller holds
// back the Services those identities belong to (SPEC N4): nothing of their new plan is confirmed
// (records, ingress and releases stay as they were: what the gateway serves for them), they get
// an event, and they are replanned on the next pass. Agents try a refused identity again with
// every state, so a Service leaves quarantine when it changes, or at the latest quarantineRetry
// later, when the controller sends its gateway's state again.

// quarantineRetry is how long a gateway with quarantined Services waits before its state is sent
// again by itself (the refusal may have been the kernel's momentary state, or the gateway's own
// addresses that since changed).
const quarantineRetry = time.Minute

// heldServices are the Services of contribs that have a refused identity, each with the reason
// of the first of them.
func heldServices(contribs map[types.NamespacedName]model.Contribution, refused map[gwstate.IdentityKey]string) map[types.NamespacedName]string {
	if len(refused) == 0 {
		return nil
	}
	out := map[types.NamespacedName]string{}
	for k, c := range contribs {
		for _, id := range c.Identities {
			if reason, ok := refused[id.ID()]; ok {
				out[k] = reason
				break
			}
		}
	}
	return out
}
