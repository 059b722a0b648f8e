package dataplane

import (
	"bytes"
	"fmt"
	"os"
)

// tcpLoosePath is the gateway's nf_conntrack_tcp_loose: with 1, conntrack picks up a TCP
// connection from a segment in its middle, which is what lets a connection continue after the
// gateway lost its conntrack (SPEC D9); with 0 every such flow dies. It is per network
// namespace: /proc/sys/net shows the namespace of the process that opens it.
const tcpLoosePath = "/proc/sys/net/netfilter/nf_conntrack_tcp_loose"

// tcpLooseKeeper keeps nf_conntrack_tcp_loose at 1 in the agent's namespace.
type tcpLooseKeeper struct {
	path string
}

// keep sets the value to 1 if it is not, and returns a warning for the controller when the
// value is not 1 afterwards ("" when it is).
func (k tcpLooseKeeper) keep() string {
	v, err := os.ReadFile(k.path)
	if err == nil && bytes.Equal(bytes.TrimSpace(v), []byte("1")) {
		return ""
	}
	if err != nil {
		return fmt.Sprintf("cannot read %s: %v: established connections may not survive the loss of the gateway's conntrack (SPEC D9)", k.path, err)
	}
	if werr := os.WriteFile(k.path, []byte("1\n"), 0o644); werr != nil {
		return fmt.Sprintf("%s is %s and cannot be set to 1: %v: established connections do not survive the loss of the gateway's conntrack (SPEC D9)",
			k.path, bytes.TrimSpace(v), werr)
	}
	return ""
}
