// covers: N6 (the agent reads state lines with a bound)
package dataplane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/knftables"

	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/transport/lineio"
)

// endlessState is a controller that sends a state line that never ends.
type endlessState struct{ n int64 }

func (e *endlessState) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	e.n += int64(len(p))
	return len(p), nil
}

// covers: N6
func TestServeEndsOnAnOversizedState(t *testing.T) {
	in := &endlessState{}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	agent := NewAgent(knftables.NewFake(knftables.IPv4Family, TableName), logr.Discard())
	err := Serve(ctx, agent, in, &out, ServeOptions{MaxStateLine: 1 << 20}, logr.Discard())
	if !errors.Is(err, lineio.ErrTooLong) {
		t.Fatalf("Serve with an endless state line: %v, want an error wrapping lineio.ErrTooLong", err)
	}
	if in.n > 2<<20 {
		t.Errorf("read %d bytes of one state line with a bound of 1 MiB", in.n)
	}
	var ack gwstate.Ack
	if jerr := json.Unmarshal(out.Bytes(), &ack); jerr != nil || !strings.Contains(ack.Error, "line too long") {
		t.Errorf("the agent's last word %q (%v), want an ack saying the line is too long", out.String(), jerr)
	}
}
