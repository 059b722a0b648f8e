// covers: D4, D9
package dataplane

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vpcgw/vpcgw/internal/gwstate"
	"github.com/vpcgw/vpcgw/internal/netlab"
)

// What fully-random protected against, and what keeping the port costs (SPEC D4): many hairpin
// clients of one backend that all use the same source port. Their SNAT to the gateway's one
// address clashes on that port; the kernel gives the first its port and finds another for each
// of the others. Every connection must succeed, and a lone client must keep its port.
func TestRealHairpinSNATPortClashes(t *testing.T) {
	const clients, port = 40, 43210
	g := newGWLab(t, 1)
	for i := range clients {
		if err := g.l.AddAddr(g.vcli, "eth0", fmt.Sprintf("10.77.1.%d/24", 100+i)); err != nil {
			t.Fatal(err)
		}
	}
	// A server in the backend that answers each connection with the address it sees.
	ln, err := netlab.ListenInNetns(g.backends[0], "tcp", g.backendIPs[0]+":9100")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = fmt.Fprintln(c, c.RemoteAddr())
			_ = c.Close()
		}
	}()
	a := startAgent(t, g.l, g.gw)
	mustSend(t, a, withClusterIPs(state(1, ident(clusterIP, 91, gwstate.TCP, be(g.backendIPs[0], 9100))), clusterIP))

	// dial connects from the VPC client's address from, port `port`, to the identity, and
	// returns the connection and the address the backend saw.
	dial := func(from string) (net.Conn, netip.AddrPort, error) {
		var conn net.Conn
		err := netlab.InNetns(g.vcli, func() error {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from), Port: port}, Timeout: 3 * time.Second}
			var err error
			conn, err = d.DialContext(context.Background(), "tcp", clusterIP+":91")
			return err
		})
		if err != nil {
			return nil, netip.AddrPort{}, fmt.Errorf("client %s:%d: %w", from, port, err)
		}
		_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil {
			return conn, netip.AddrPort{}, fmt.Errorf("client %s:%d: %w", from, port, err)
		}
		ap, err := netip.ParseAddrPort(strings.TrimSpace(line))
		return conn, ap, err
	}

	// A lone client keeps its port.
	conn, got, err := dial(vpcCliIP)
	if conn != nil {
		_ = conn.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	if got != netip.AddrPortFrom(netip.MustParseAddr(gwLanIP), port) {
		t.Fatalf("a lone hairpin client is seen as %s, want %s:%d", got, gwLanIP, port)
	}
	// Many at once, each holding its connection open so that they clash.
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	kept, moved := 0, map[uint16]bool{}
	for i := range clients {
		conn, ap, err := dial(fmt.Sprintf("10.77.1.%d", 100+i))
		if conn != nil {
			conns = append(conns, conn)
		}
		if err != nil {
			t.Fatal(err)
		}
		if ap.Port() == port {
			kept++
		} else {
			moved[ap.Port()] = true
		}
	}
	// Every connection has a 4-tuple of its own at the backend: at most one kept the port (the
	// lone client's entry may still hold it), the others each got another.
	if kept > 1 || kept+len(moved) != clients {
		t.Errorf("%d clients on one source port: %d kept it, %d distinct other ports; want %d distinct", clients, kept, len(moved), clients)
	}
	t.Logf("%d hairpin clients on source port %d toward one backend: all connected, %d kept the port, %d got another", clients, port, kept, len(moved))
}
