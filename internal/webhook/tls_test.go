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
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
}

func TestServingCertificateReload(t *testing.T) {
	dir := t.TempDir()
	writeCert(t, dir, "first")
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
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))

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
