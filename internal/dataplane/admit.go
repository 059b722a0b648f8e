package dataplane

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// A state is programmed identity by identity where it can be (SPEC D8, N4): an identity that the
// agent's validation or the kernel refuses is left out of the transaction, and the gateway keeps
// for it what this agent committed before (its previous version, or nothing). Every other
// identity of the same state is programmed in the same round trip, and the acknowledgement names
// the refused ones (gwstate.Ack.Refused), so that the controller holds back exactly their
// Services. The desired state stays the one the controller sent, so deltas keep their base; a
// refused identity is tried again with every message, until it changes, leaves the state, or
// goes through.

// refusal is one identity of the desired state that the agent does not program.
type refusal struct {
	id     gwstate.Identity // as the desired state has it
	reason string
}

// defaultKernelRounds bounds the transactions one message may take when the kernel refuses
// identities: each round leaves out the identities the kernel named in the round before.
const defaultKernelRounds = 3

// screen validates ids (each gwstate.Identity.Validate, then the gateway's own addresses) and
// returns the refused ones with why. An error (the gateway's addresses could not be read)
// refuses the whole message.
func (a *Agent) screen(ids []gwstate.Identity) (map[gwstate.IdentityKey]string, error) {
	refused := map[gwstate.IdentityKey]string{}
	valid := make([]gwstate.Identity, 0, len(ids))
	for _, id := range ids {
		if err := id.Validate(); err != nil {
			refused[id.Key()] = err.Error()
			continue
		}
		valid = append(valid, id)
	}
	own, err := a.ownAddrRefusals(valid)
	if err != nil {
		return nil, err
	}
	maps.Copy(refused, own)
	return refused, nil
}

// holdGroups adds to refused the identities of ids that share a group (a Service) with a
// refused one: the gateway serves either the group's new version or what it had, never half of
// each. More refusals than an acknowledgement can name refuse the whole message.
func holdGroups(ids []gwstate.Identity, refused map[gwstate.IdentityKey]string) error {
	if len(refused) > 0 {
		groups := map[string]gwstate.IdentityKey{}
		for _, id := range ids {
			if _, no := refused[id.Key()]; no && id.Group != "" {
				if _, seen := groups[id.Group]; !seen {
					groups[id.Group] = id.Key()
				}
			}
		}
		for _, id := range ids {
			if first, ok := groups[id.Group]; ok && id.Group != "" {
				if _, no := refused[id.Key()]; !no {
					refused[id.Key()] = fmt.Sprintf("held back with identity %s of the same group: %s", first, refused[first])
				}
			}
		}
	}
	if len(refused) > gwstate.MaxRefusals {
		return fmt.Errorf("%d identities are refused, more than the %d an acknowledgement names; the first: %s",
			len(refused), gwstate.MaxRefusals, firstReason(refused))
	}
	return nil
}

func firstReason(m map[gwstate.IdentityKey]string) string {
	keys := slices.SortedFunc(maps.Keys(m), gwstate.IdentityKey.Compare)
	return m[keys[0]]
}

// admission is the one admission of both message kinds (SPEC D8, N2, N4): it decides which of
// ids, desired identities, the agent programs. Identities equal to their committed version were
// validated when they were committed and are left out (nothing to program); the others are
// screened, except the keys in force (refused by the kernel in an earlier round of this
// message), which are refused again; a refusal holds back its group. It returns the changed
// identities it admits, in ids' order, and the refused ones with why (nil: none). An error (the gateway's
// addresses could not be read, too many refusals) refuses the whole message.
func (a *Agent) admission(ids []gwstate.Identity, force map[gwstate.IdentityKey]string) ([]gwstate.Identity, map[gwstate.IdentityKey]refusal, error) {
	var changed, check, forced []gwstate.Identity
	for _, id := range ids {
		if _, ok := force[id.Key()]; ok {
			forced = append(forced, id)
		} else if old, ok := a.present[id.Key()]; ok && sameIdentity(old, id) {
			continue
		} else {
			check = append(check, id)
		}
		changed = append(changed, id)
	}
	reasons, err := a.screen(check)
	if err != nil {
		return nil, nil, err
	}
	maps.Copy(reasons, force)
	if err := holdGroups(append(slices.Clip(check), forced...), reasons); err != nil {
		return nil, nil, err
	}
	if len(reasons) == 0 {
		return changed, nil, nil // the common case: nothing refused, nothing more to allocate
	}
	admitted := make([]gwstate.Identity, 0, len(changed))
	refused := make(map[gwstate.IdentityKey]refusal, len(reasons))
	for _, id := range changed {
		if reason, no := reasons[id.Key()]; no {
			refused[id.Key()] = refusal{id: id, reason: reason}
			continue
		}
		admitted = append(admitted, id)
	}
	return admitted, refused, nil
}

// admit splits the complete desired state st into what the agent programs and what it refuses
// (admission). The result is st with every refused identity replaced by its committed version,
// or left out when none is committed.
func (a *Agent) admit(st gwstate.State, force map[gwstate.IdentityKey]string) (gwstate.State, map[gwstate.IdentityKey]refusal, error) {
	if err := st.ValidateShape(); err != nil {
		return gwstate.State{}, nil, err
	}
	_, refused, err := a.admission(st.Identities, force)
	if err != nil {
		return gwstate.State{}, nil, err
	}
	eff := gwstate.State{Generation: st.Generation, ClusterIPs: st.ClusterIPs, Identities: make([]gwstate.Identity, 0, len(st.Identities))}
	for _, id := range st.Identities {
		if _, no := refused[id.Key()]; !no {
			eff.Identities = append(eff.Identities, id)
		} else if old, ok := a.present[id.Key()]; ok {
			eff.Identities = append(eff.Identities, old) // sorted as st: same key
		}
	}
	return eff, refused, nil
}

// converge programs the complete desired state st: it admits st, applies what it admits, and
// when the kernel refuses identities by name (a *kernelRefusal), applies again without them, at
// most a.kernelRounds times; force are identities the kernel already refused for this message.
// With record, st becomes the desired state once it is admitted (a
// state refused whole leaves the desired state as it was); without, a.last already is st.
func (a *Agent) converge(ctx context.Context, st gwstate.State, record bool, force map[gwstate.IdentityKey]string) error {
	for round := 1; ; round++ {
		eff, refused, err := a.admit(st, force)
		if err != nil {
			return fmt.Errorf("invalid state: %w", err)
		}
		if record && round == 1 {
			a.setLast(&st)
		}
		a.refused = refused
		err = a.applyLocked(ctx, eff)
		var kr *kernelRefusal
		if err == nil || !errors.As(err, &kr) || round >= a.kernelRounds {
			return err
		}
		if force == nil {
			force = map[gwstate.IdentityKey]string{}
		}
		for k, reason := range kr.reasons {
			force[k] = reason
		}
		a.log.Info("the kernel refused identities; programming the state without them", "refused", len(kr.reasons), "generation", st.Generation, "error", kr.err.Error())
	}
}

// Refusals are the identities of the desired state the agent does not program, sorted by key
// (gwstate.Ack.Refused).
func (a *Agent) Refusals() []gwstate.Refusal {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.refused) == 0 {
		return nil
	}
	out := make([]gwstate.Refusal, 0, len(a.refused))
	for k, r := range a.refused {
		reason := r.reason
		if len(reason) > gwstate.MaxRefusalReason {
			reason = reason[:gwstate.MaxRefusalReason]
		}
		out = append(out, gwstate.Refusal{IdentityKey: k, Reason: reason})
	}
	slices.SortFunc(out, func(x, y gwstate.Refusal) int { return x.Compare(y.IdentityKey) })
	return out
}

// kernelRefusal is a failed commit whose failed messages all belong to identities: the kernel
// refused those identities, not the transaction's shared objects.
type kernelRefusal struct {
	reasons map[gwstate.IdentityKey]string
	err     error
}

func (e *kernelRefusal) Error() string { return e.err.Error() }
func (e *kernelRefusal) Unwrap() error { return e.err }
