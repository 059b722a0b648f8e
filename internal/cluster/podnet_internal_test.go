// covers: O1 (the default network's plumbing: a Pod reaches a Service whose endpoint is on the host, and the API server's egress reaches Pods and the host)

package cluster

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/vpcgw/vpcgw/internal/netlab"
	"github.com/vpcgw/vpcgw/internal/testutil"
)

// echoOnce answers each connection's first line with "<name> <line>".
func echoOnce(t *testing.T, l net.Listener, name string) {
	t.Helper()
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				line, err := bufio.NewReader(c).ReadString('\n')
				if err == nil {
					_, _ = fmt.Fprintf(c, "%s %s", name, line)
				}
			}()
		}
	}()
}

func ask(t *testing.T, c net.Conn, r io.Reader) string {
	t.Helper()
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "hello\n"); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return line
}

func TestDefaultNetworkReachesHostAndIsReached(t *testing.T) {
	if err := netlab.Available(); err != nil {
		testutil.Skip(t, err.Error())
	}
	n, err := netlab.New("vq")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Cleanup(); err != nil {
			t.Error(err)
		}
	})
	nw, err := newNetwork(n)
	if err != nil {
		t.Fatal(err)
	}
	r, err := nw.newClusterRouter(logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.stop)
	// A Pod of ovn-default, as the lab node plugs one.
	pod, err := n.AddNetns("pod")
	if err != nil {
		t.Fatal(err)
	}
	sw, err := nw.switchNetns(DefaultSubnet)
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []func() error{
		func() error { return n.VethToBridge(pod, "eth0", sw, "pp", "br0") },
		func() error { return n.AddAddr(pod, "eth0", "10.16.0.5/16") },
		func() error { return n.AddRoute(pod, "default", "via", DefaultGatewayIP) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}

	// The API server's Service: its endpoint listens on the host's loopback.
	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	echoOnce(t, host, "host")
	vip := firstServiceIP(ServiceCIDR)
	if vip != netip.MustParseAddr("10.96.0.1") {
		t.Fatalf("first Service IP of %s = %s", ServiceCIDR, vip)
	}
	if err := r.serveHostService(vip, 443, host.Addr().String()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := netlab.DialInNetns(ctx, pod, "tcp", net.JoinHostPort(vip.String(), "443"))
	if err != nil {
		t.Fatalf("the Pod dials the kubernetes Service: %v", err)
	}
	if got := ask(t, c, c); got != "host hello\n" {
		t.Fatalf("through the Service the Pod got %q", got)
	}

	// The API server's egress: CONNECT to a Pod address and to the host's loopback.
	podListener, err := netlab.ListenInNetns(pod, "tcp", "10.16.0.5:9443")
	if err != nil {
		t.Fatal(err)
	}
	echoOnce(t, podListener, "pod")
	socket := filepath.Join(t.TempDir(), "egress.sock")
	if err := r.egressProxy(socket); err != nil {
		t.Fatal(err)
	}
	for target, want := range map[string]string{"10.16.0.5:9443": "pod hello\n", host.Addr().String(): "host hello\n"} {
		conn, err := net.Dial("unix", socket)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT %s: %s", target, resp.Status)
		}
		if got := ask(t, conn, br); got != want {
			t.Errorf("CONNECT %s: got %q, want %q", target, got, want)
		}
	}
	// Nothing listens there: the API server gets an error, not a hang.
	conn, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if _, err := fmt.Fprintf(conn, "CONNECT 10.16.0.5:1 HTTP/1.1\r\nHost: 10.16.0.5:1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("CONNECT to a closed port: %s, want 502", resp.Status)
	}
}
