// covers: W7, N6
//
// The server serves TLS from the certificate directory and picks up a rotated certificate
// without a restart (a Secret update rewrites the mounted files).
package webhook

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/webhook"

	vpcgwscheme "github.com/vpcgw/vpcgw/internal/scheme"
)

func writeCert(t *testing.T, dir, cn string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func servedCN(addr string) (string, error) {
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // reads the served certificate
	if err != nil {
		return "", err
	}
	defer func() { _ = conn.Close() }() // only the handshake is read
	return conn.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
}

// startServer serves the handlers with opts on a free loopback port until the test ends, and
// returns the address.
func startServer(t *testing.T, opts Options) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	opts.Host, opts.Port = "127.0.0.1", port
	srv := webhook.NewServer(ServerOptions(opts))
	scheme, err := vpcgwscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	NewHandlers(nil, scheme, ctrlUser).Register(srv)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

func TestServingCertificateReload(t *testing.T) {
	dir := t.TempDir()
	writeCert(t, dir, "first")
	addr := startServer(t, Options{CertDir: dir})

	waitCN := func(want string, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		var got string
		var err error
		for time.Now().Before(deadline) {
			if got, err = servedCN(addr); err == nil && got == want {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("served certificate %q (%v), want %q", got, err, want)
	}
	waitCN("first", 10*time.Second)
	writeCert(t, dir, "rotated")
	// fsnotify reports the rewrite at once; certwatcher's 10 s poll is the fallback.
	waitCN("rotated", 15*time.Second)
}

// covers: N8, N6
// With --client-ca-name the webhook serves only callers with a certificate that CA signed (the
// API server, given a client certificate for the webhook): an anonymous client that reaches the
// Service cannot ask it about another namespace's Services.
func TestClientCertificateRequired(t *testing.T) {
	dir := t.TempDir()
	writeCert(t, dir, "server")
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "apiserver-client-ca"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "client-ca.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	clientKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	clientDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, ca, &clientKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	clientCert := tls.Certificate{Certificate: [][]byte{clientDER}, PrivateKey: clientKey}

	addr := startServer(t, Options{CertDir: dir, ClientCAName: "client-ca.crt"})
	// handshake completes a TLS handshake as a client with certs, and reads one byte (a server
	// that refuses the client certificate fails the handshake or closes the connection).
	handshake := func(certs []tls.Certificate) error {
		conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, Certificates: certs}) //nolint:gosec // the server's certificate is not under test
		if err != nil {
			return err
		}
		defer func() { _ = conn.Close() }() // the answer, read below, is what counts
		if _, err := conn.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			return err
		}
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for handshake([]tls.Certificate{clientCert}) != nil { // the server starts asynchronously
		if time.Now().After(deadline) {
			t.Fatalf("a client with a certificate of the client CA: %v", handshake([]tls.Certificate{clientCert}))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := handshake(nil); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	selfKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	selfDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "stranger"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
		&x509.Certificate{SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "stranger"}}, &selfKey.PublicKey, selfKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake([]tls.Certificate{{Certificate: [][]byte{selfDER}, PrivateKey: selfKey}}); err == nil {
		t.Fatal("a client with a certificate the client CA did not sign was served")
	}
}
