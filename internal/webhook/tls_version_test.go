// covers: N6 (the webhook's TLS: 1.2 or later, HTTP/1.1)
package webhook

import (
	"context"
	"crypto/tls"
	"net"
	"strconv"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/webhook"

	vpcgwscheme "github.com/vpcgw/vpcgw/internal/scheme"
)

// covers: N6
func TestWebhookRefusesTLSBelow1_2(t *testing.T) {
	dir := t.TempDir()
	writeCert(t, dir, "webhook")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	srv := webhook.NewServer(ServerOptions(Options{Host: "127.0.0.1", Port: port, CertDir: dir}))
	scheme, err := vpcgwscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	NewHandlers(nil, scheme, "system:serviceaccount:kube-system:vpcgw-controller").Register(srv)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))

	dial := func(cfg *tls.Config) (tls.ConnectionState, error) {
		cfg.InsecureSkipVerify = true //nolint:gosec // only the protocol version is under test
		d := &net.Dialer{Timeout: 5 * time.Second}
		c, err := tls.DialWithDialer(d, "tcp", addr, cfg)
		if err != nil {
			return tls.ConnectionState{}, err
		}
		defer c.Close()
		return c.ConnectionState(), nil
	}
	// Wait until it serves at all (a TLS 1.2 client, with HTTP/2 offered first as the API server does).
	deadline := time.Now().Add(10 * time.Second)
	var st tls.ConnectionState
	for {
		if st, err = dial(&tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the webhook does not serve TLS 1.2: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st.NegotiatedProtocol == "h2" {
		t.Errorf("the webhook negotiated HTTP/2; want HTTP/1.1 only")
	}
	for _, v := range []uint16{tls.VersionTLS10, tls.VersionTLS11} {
		if _, err := dial(&tls.Config{MinVersion: v, MaxVersion: v}); err == nil {
			t.Errorf("a %s client handshake succeeded; want it refused", tls.VersionName(v))
		} else {
			t.Logf("%s refused: %v", tls.VersionName(v), err)
		}
	}
}
