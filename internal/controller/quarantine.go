package controller

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpcgwv1alpha1 "github.com/vpcgw/vpcgw/api/vpcgw/v1alpha1"
	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/model"
	"github.com/vpcgw/vpcgw/internal/transport"
)

// A gateway's state is one kernel transaction, so one Service whose part the kernel rejects would
// fail it for every Service of the gateway on every retry. When an agent rejects a state, the
// controller finds the Services whose change it rejects by bisection and quarantines them (SPEC
// N4): the gateway keeps serving what it served for them before (the last state every instance
// acknowledged), and everyone else's changes are programmed. Each trial state is the acknowledged
// state plus a subset of the changes, so no Service loses what it had while the search runs.
//
// A quarantined Service is tried again when its contribution changes, or after quarantineRetry
// (the rejection may have been the kernel's momentary state, not the Service's).

// quarantineRetry is how long a quarantined change waits before it is tried again by itself.
const quarantineRetry = 10 * time.Minute

// maxTrials bounds the states one search sends: with one bad Service among n it needs about
// 2·log2(n) (17 at 10,000 per half); what is left undecided is searched again on the next pass.
const maxTrials = 48

type quarantine struct {
	mu  sync.Mutex
	gws map[string]map[types.NamespacedName]held
}

// held is one quarantined change: the contribution the agent rejected (by fingerprint), why, and
// until when it stays quarantined.
type held struct {
	fingerprint string
	reason      string
	until       time.Time
}

func newQuarantine() *quarantine {
	return &quarantine{gws: map[string]map[types.NamespacedName]held{}}
}

// fingerprint names a contribution's content.
func fingerprint(c model.Contribution) string {
	b, _ := json.Marshal(c) // plain data: cannot fail
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12])
}

// any reports whether gw has quarantined Services.
func (q *quarantine) any(gw string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.gws[gw]) > 0
}

// active returns the quarantined Services of gw whose contribution is still the rejected one, and
// forgets the others. Empty when nothing is quarantined (the common case costs a map lookup).
func (q *quarantine) active(gw string, contribs map[types.NamespacedName]model.Contribution, now time.Time) map[types.NamespacedName]held {
	q.mu.Lock()
	defer q.mu.Unlock()
	hs := q.gws[gw]
	if len(hs) == 0 {
		return nil
	}
	out := map[types.NamespacedName]held{}
	for k, h := range hs {
		c, ok := contribs[k]
		if !ok || now.After(h.until) || fingerprint(c) != h.fingerprint {
			delete(hs, k)
			continue
		}
		out[k] = h
	}
	return out
}

// expire drops the quarantines of gw that are due for another try and reports whether it did.
func (q *quarantine) expire(gw string, now time.Time) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := len(q.gws[gw])
	maps.DeleteFunc(q.gws[gw], func(_ types.NamespacedName, h held) bool { return now.After(h.until) })
	return len(q.gws[gw]) < n
}

// nextRetry is when the first quarantine of gw expires (zero: none).
func (q *quarantine) nextRetry(gw string) time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	var first time.Time
	for _, h := range q.gws[gw] {
		if first.IsZero() || h.until.Before(first) {
			first = h.until
		}
	}
	return first
}

func (q *quarantine) hold(gw string, k types.NamespacedName, h held) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.gws[gw] == nil {
		q.gws[gw] = map[types.NamespacedName]held{}
	}
	q.gws[gw][k] = h
}

// forget drops the quarantines of a gateway that is gone.
func (q *quarantine) forget(gw string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.gws, gw)
}

// rejected reports whether err is only agents refusing a state (every joined error an
// AgentError), and the first refusal's text. A stream or timeout failure is not a rejection: a
// search would learn nothing from it.
func rejected(err error) (string, bool) {
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	msg := ""
	for _, e := range errs {
		var ae *transport.AgentError
		if !errors.As(e, &ae) {
			return "", false
		}
		if msg == "" {
			msg = ae.Message
		}
	}
	return msg, msg != ""
}

// goodPart is what the acknowledged state serves for a Service whose contribution is c: its
// identities as they were acknowledged, and its ClusterIP if it was held.
func goodPart(c model.Contribution, ids map[string]gwstate.Identity, cips map[string]bool) model.Contribution {
	g := model.Contribution{Service: c.Service}
	for _, id := range c.Identities {
		if old, ok := ids[id.Key()]; ok {
			g.Identities = append(g.Identities, old)
			if id.VIP == c.EIP {
				g.EIP = c.EIP
			}
		}
	}
	if c.ClusterIP != "" && cips[c.ClusterIP] {
		g.ClusterIP = c.ClusterIP
	}
	if len(g.Identities) == 0 && g.ClusterIP == "" {
		g.EIP = ""
	}
	return g
}

// changedFrom reports whether c programs anything the acknowledged state does not have as is.
func changedFrom(c model.Contribution, ids map[string]gwstate.Identity, cips map[string]bool) bool {
	for _, id := range c.Identities {
		if old, ok := ids[id.Key()]; !ok || !old.Equal(id) {
			return true
		}
	}
	return c.ClusterIP != "" && !cips[c.ClusterIP]
}

// recordedState is what gw's ServiceRecords say it serves.
func (r *GatewayReconciler) recordedState(ctx context.Context, gw string) (gwstate.State, error) {
	var recs vpcgwv1alpha1.ServiceRecordList
	if err := r.Client.List(ctx, &recs, client.MatchingFields{indexRecordGateway: gw}); err != nil {
		return gwstate.State{}, fmt.Errorf("listing the ServiceRecords of gateway %s: %w", gw, err)
	}
	return model.RecordedState(recs.Items, gw), nil
}

// stateWith is the gateway plan with each Service's contribution chosen by pick.
func stateWith(base model.GatewayPlan, keys []types.NamespacedName, pick func(types.NamespacedName) model.Contribution) model.GatewayPlan {
	gp := base.Base()
	for _, k := range keys {
		gp.Add(pick(k))
	}
	gp.Finish()
	return gp
}

// substitute returns the gateway plan with the quarantined Services' parts as acknowledged.
func substitute(gp *model.GatewayPlan, contribs map[types.NamespacedName]model.Contribution, hs map[types.NamespacedName]held, acked gwstate.State) *model.GatewayPlan {
	ids, cips := ackedIndex(acked)
	keys := slices.SortedFunc(maps.Keys(contribs), compareNames)
	out := stateWith(*gp, keys, func(k types.NamespacedName) model.Contribution {
		if _, ok := hs[k]; ok {
			return goodPart(contribs[k], ids, cips)
		}
		return contribs[k]
	})
	return &out
}

func ackedIndex(st gwstate.State) (map[string]gwstate.Identity, map[string]bool) {
	ids := make(map[string]gwstate.Identity, len(st.Identities))
	for _, id := range st.Identities {
		ids[id.Key()] = id
	}
	cips := make(map[string]bool, len(st.ClusterIPs))
	for _, ip := range st.ClusterIPs {
		cips[ip] = true
	}
	return ids, cips
}

func compareNames(a, b types.NamespacedName) int {
	return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
}

// isolate searches, after the agents rejected gp, for the Services whose change they reject, and
// leaves the gateway programmed with everything else. It returns the plan the gateway now has
// and the Services it quarantined; an error when the search could not finish (a stream failed,
// or maxTrials were not enough), after which the next pass searches again from what this one
// programmed.
func (r *GatewayReconciler) isolate(ctx context.Context, gw string, gp *model.GatewayPlan, contribs map[types.NamespacedName]model.Contribution, rejection error) (*model.GatewayPlan, []types.NamespacedName, error) {
	reason, _ := rejected(rejection)
	acked, ok := r.sessions.lastAcked(gw)
	if !ok {
		// Nothing acknowledged since this controller started: the ledger says what the gateway
		// serves. The seed's ledger form is not read back here; without a known-good state a
		// search would take Services off the gateway while it runs, so it is not made.
		if r.Flags.Gates().Ledger != model.LedgerServiceRecord {
			return nil, nil, rejection
		}
		var err error
		if acked, err = r.recordedState(ctx, gw); err != nil {
			return nil, nil, err
		}
	}
	ids, cips := ackedIndex(acked)
	keys := slices.SortedFunc(maps.Keys(contribs), compareNames)
	accepted := map[types.NamespacedName]bool{}
	trust := true // the acknowledged parts of Services not tried are accepted by the agents
	pick := func(trial map[types.NamespacedName]bool) func(types.NamespacedName) model.Contribution {
		return func(k types.NamespacedName) model.Contribution {
			if accepted[k] || trial[k] {
				return contribs[k]
			}
			if trust {
				return goodPart(contribs[k], ids, cips)
			}
			return model.Contribution{Service: k}
		}
	}
	trials := 0
	var lastPlan *model.GatewayPlan
	lastOK := false
	try := func(set []types.NamespacedName) (bool, error) {
		trials++
		trial := map[types.NamespacedName]bool{}
		for _, k := range set {
			trial[k] = true
		}
		p := stateWith(*gp, keys, pick(trial))
		err := r.sessions.apply(ctx, gw, transportInstances(&p), p.State)
		if err == nil {
			maps.Copy(accepted, trial)
			lastPlan, lastOK = &p, true
			return true, nil
		}
		lastOK = false
		if _, ok := rejected(err); !ok {
			return false, err
		}
		return false, nil
	}

	var candidates []types.NamespacedName
	for _, k := range keys {
		if changedFrom(contribs[k], ids, cips) {
			candidates = append(candidates, k)
		}
	}
	// The acknowledged state itself may be what is refused now (a new instance, a changed
	// kernel): then nothing is known good, and every Service is a candidate.
	if ok, err := try(nil); err != nil {
		return nil, nil, err
	} else if !ok {
		trust = false
		candidates = keys
		// And if a state without any Service is refused too, no Service is the cause.
		if ok, err := try(nil); err != nil {
			return nil, nil, err
		} else if !ok {
			return nil, nil, rejection // no Service is the cause
		}
	}

	var quarantined []types.NamespacedName
	var search func(set []types.NamespacedName) error
	search = func(set []types.NamespacedName) error {
		if len(set) == 0 {
			return nil
		}
		if trials >= maxTrials {
			return fmt.Errorf("gateway %s: %d trial states did not isolate the rejected change; continuing on the next pass", gw, trials)
		}
		ok, err := try(set)
		if err != nil || ok {
			return err
		}
		if len(set) == 1 {
			quarantined = append(quarantined, set[0])
			return nil
		}
		mid := len(set) / 2
		if err := search(set[:mid]); err != nil {
			return err
		}
		return search(set[mid:])
	}
	err := search(candidates)
	now := time.Now()
	for _, k := range quarantined {
		r.quarantine.hold(gw, k, held{fingerprint: fingerprint(contribs[k]), reason: reason, until: now.Add(quarantineRetry)})
	}
	if err != nil {
		return nil, quarantined, err
	}
	if !lastOK {
		// The last trial was refused: program what was accepted.
		final := stateWith(*gp, keys, pick(nil))
		if err := r.sessions.apply(ctx, gw, transportInstances(&final), final.State); err != nil {
			return nil, quarantined, fmt.Errorf("programming gateway %s without the quarantined Services: %w", gw, err)
		}
		lastPlan = &final
	}
	return lastPlan, quarantined, nil
}
