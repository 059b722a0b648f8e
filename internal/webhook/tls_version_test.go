// covers: N6 (the webhook's TLS: 1.2 or later, HTTP/1.1)
package webhook

import (
	"crypto/tls"
	"net"
	"testing"
	"time"
)

// covers: N6
func TestWebhookRefusesTLSBelow1_2(t *testing.T) {
	dir := t.TempDir()
	writeCert(t, dir, "webhook")
	addr := startServer(t, Options{CertDir: dir})

	dial := func(cfg *tls.Config) (tls.ConnectionState, error) {
		cfg.InsecureSkipVerify = true //nolint:gosec // only the protocol version is under test
		d := &net.Dialer{Timeout: 5 * time.Second}
		c, err := tls.DialWithDialer(d, "tcp", addr, cfg)
		if err != nil {
			return tls.ConnectionState{}, err
		}
		defer func() { _ = c.Close() }() // only the handshake is read
		return c.ConnectionState(), nil
	}
	// Wait until it serves at all (a TLS 1.2 client, with HTTP/2 offered first as the API server does).
	deadline := time.Now().Add(10 * time.Second)
	var st tls.ConnectionState
	var err error
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
