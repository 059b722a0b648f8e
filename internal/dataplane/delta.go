package dataplane

import (
	"context"
	"errors"
	"fmt"

	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// ApplyMessage applies one message of the controller: a complete state, or a delta against the
// last state the agent accepted (gwstate.State.Base). A delta carries only the identities that
// changed, so a change at 10,000 identities is a line of a few hundred bytes instead of
// megabytes to decode (SPEC P1, P3). msg must be normalized and valid.
func (a *Agent) ApplyMessage(ctx context.Context, msg gwstate.State) error {
	if !msg.IsDelta() {
		return a.Apply(ctx, msg)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.last == nil {
		return errors.New("delta state before any complete state: send a complete state")
	}
	st, err := a.last.Merge(msg)
	if err != nil {
		return fmt.Errorf("%w: send a complete state", err)
	}
	if err := a.validate(st); err != nil {
		return fmt.Errorf("invalid state: %w", err)
	}
	a.last = &st
	return a.applyLocked(ctx, st)
}
