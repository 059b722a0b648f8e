package dataplane

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"sigs.k8s.io/knftables"

	"github.com/vpcgw/vpcgw/internal/gwstate"
)

// RunAgent reads one JSON gwstate.State per line from in, normalizes, validates and applies it,
// and writes one JSON gwstate.Ack line per input line to out. Blank lines are ignored. A line
// that cannot be decoded is answered with Generation 0 and an error; an invalid state or a
// failed apply is answered with the state's generation and the error. None of these stop the
// loop. RunAgent returns nil at EOF, ctx.Err() when ctx ends, or an error when in cannot be read
// or out cannot be written.
func RunAgent(ctx context.Context, in io.Reader, out io.Writer, nft knftables.Interface, log logr.Logger) error {
	agent := NewAgent(nft, log)
	enc := json.NewEncoder(out)

	type line struct {
		data []byte
		err  error
	}
	lines := make(chan line)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		r := bufio.NewReaderSize(in, 1<<20)
		for {
			data, err := r.ReadBytes('\n')
			if len(data) > 0 || err != nil {
				select {
				case lines <- line{data, err}:
				case <-stop:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()

	for {
		var l line
		select {
		case <-ctx.Done():
			return ctx.Err()
		case l = <-lines:
		}
		if data := bytes.TrimSpace(l.data); len(data) > 0 {
			ack := handleLine(ctx, agent, data, log)
			if err := enc.Encode(ack); err != nil {
				return fmt.Errorf("writing ack: %w", err)
			}
		}
		if l.err != nil {
			if errors.Is(l.err, io.EOF) {
				return nil
			}
			return fmt.Errorf("reading states: %w", l.err)
		}
	}
}

func handleLine(ctx context.Context, agent *Agent, data []byte, log logr.Logger) gwstate.Ack {
	var st gwstate.State
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&st); err != nil {
		log.Error(err, "cannot decode state line")
		return gwstate.Ack{Error: fmt.Sprintf("cannot decode state: %v", err)}
	}
	if dec.More() {
		log.Error(nil, "trailing data after state")
		return gwstate.Ack{Error: "cannot decode state: trailing data after the JSON object"}
	}
	st.Normalize()
	if err := st.Validate(); err != nil {
		log.Error(err, "invalid state", "generation", st.Generation)
		return gwstate.Ack{Generation: st.Generation, Error: fmt.Sprintf("invalid state: %v", err)}
	}
	if err := agent.Apply(ctx, st); err != nil {
		log.Error(err, "apply failed", "generation", st.Generation)
		return gwstate.Ack{Generation: st.Generation, Error: err.Error()}
	}
	return gwstate.Ack{Generation: st.Generation}
}

// NewLogger returns a logr.Logger writing one line per entry to w (stderr for the agent: stdout
// carries acks). verbosity enables V(n) logs up to n.
func NewLogger(w io.Writer, verbosity int) logr.Logger {
	return funcr.New(func(prefix, args string) {
		if prefix != "" {
			fmt.Fprintf(w, "%s: %s\n", prefix, args)
		} else {
			fmt.Fprintln(w, args)
		}
	}, funcr.Options{Verbosity: verbosity}).WithName("agent")
}

// Main is the agent's entry point (`vpcgw agent`): it reads states on in, writes acks on out and
// logs to stderr. It fails at once when nft is missing or unusable (not root, no kernel support).
func Main(ctx context.Context, in io.Reader, out io.Writer) error {
	log := NewLogger(os.Stderr, 0)
	nft, err := knftables.New(knftables.IPv4Family, TableName)
	if err != nil {
		return fmt.Errorf("nftables is not usable: %w", err)
	}
	log.Info("agent started", "table", "ip "+TableName)
	return RunAgent(ctx, in, out, nft, log)
}
