package netlab

import (
	"net"
	"strings"
)

// ListenPacketInNetns opens a packet socket (e.g. "udp", "10.0.1.11:53") inside network
// namespace netns, as ListenInNetns does for stream listeners: the socket stays in that
// namespace for its whole life.
func ListenPacketInNetns(netns, network, addr string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := InNetns(netns, func() error {
		var err error
		pc, err = net.ListenPacket(network, addr)
		return err
	})
	return pc, err
}

// SysctlValue reads key (e.g. "net.netfilter.nf_conntrack_tcp_loose") inside ns.
func (l *Lab) SysctlValue(ns, key string) (string, error) {
	out, err := l.Exec(ns, "sysctl", "-n", key)
	return strings.TrimSpace(string(out)), err
}
