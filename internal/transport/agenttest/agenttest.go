// Package agenttest gives tests an in-memory agent at the other end of a transport.Conn, for
// tests about the controller rather than the data plane (those run the real agent).
package agenttest

import (
	"bufio"
	"encoding/json"
	"io"

	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/transport"
)

// Pipe connects a Conn to an agent that answers every state with answer(state); a nil answer
// acknowledges every state. stop ends the agent's side, as an agent that exits.
func Pipe(answer func(gwstate.State) gwstate.Ack) (conn *transport.Conn, stop func()) {
	toAgentR, toAgentW := io.Pipe()
	fromAgentR, fromAgentW := io.Pipe()
	go func() {
		sc := bufio.NewScanner(toAgentR)
		sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
		enc := json.NewEncoder(fromAgentW)
		for sc.Scan() {
			var st gwstate.State
			var ack gwstate.Ack
			if err := json.Unmarshal(sc.Bytes(), &st); err != nil {
				ack = gwstate.Ack{Error: err.Error()}
			} else if answer != nil {
				ack = answer(st)
			}
			ack.Generation = st.Generation
			if err := enc.Encode(ack); err != nil {
				return
			}
		}
		_ = fromAgentW.Close()
	}()
	conn = transport.NewConn(toAgentW, fromAgentR, closers{toAgentW, fromAgentR})
	return conn, func() { _ = fromAgentW.Close() }
}

type closers []io.Closer

func (c closers) Close() error {
	for _, x := range c {
		_ = x.Close()
	}
	return nil
}
