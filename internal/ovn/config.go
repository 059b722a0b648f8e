package ovn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Config says how to reach the OVN northbound database.
type Config struct {
	// Address is the NB address as kube-ovn's --ovn-nb-addr takes it: "tcp:host:port",
	// "ssl:host:port" (needs TLS), "unix:/path", several comma-separated for a clustered DB
	// (the writer then talks to the leader only and follows leader changes).
	Address string
	// TLS holds the client certificate, key and CA for "ssl:" endpoints.
	TLS *TLSFiles
}

// TLSFiles are PEM files for "ssl:" endpoints. The server certificate is verified against CAFile;
// as in OVS itself (and kube-ovn), the host name is not checked: the CA is the trust anchor.
type TLSFiles struct {
	CertFile string
	KeyFile  string
	CAFile   string
}

// endpoints validates cfg.Address and returns the endpoints in libovsdb's form, and whether any of
// them is "ssl:".
func (cfg Config) endpoints() ([]string, bool, error) {
	if strings.TrimSpace(cfg.Address) == "" {
		return nil, false, errors.New("ovn: empty NB address")
	}
	var out []string
	ssl := false
	for _, raw := range strings.Split(cfg.Address, ",") {
		ep, scheme, err := endpoint(strings.TrimSpace(raw))
		if err != nil {
			return nil, false, err
		}
		ssl = ssl || scheme == "ssl"
		out = append(out, ep)
	}
	if ssl && cfg.TLS == nil {
		return nil, false, fmt.Errorf("ovn: NB address %q has an ssl: endpoint but no TLS files are configured", cfg.Address)
	}
	return out, ssl, nil
}

// endpoint validates one endpoint of an NB address and returns it in libovsdb's form, and its
// scheme.
func endpoint(ep string) (string, string, error) {
	scheme, rest, ok := strings.Cut(ep, ":")
	if !ok || rest == "" {
		return "", "", fmt.Errorf("ovn: NB endpoint %q: want tcp:host:port, ssl:host:port or unix:/path", ep)
	}
	switch scheme {
	case "tcp", "ssl":
		host, port, err := net.SplitHostPort(rest)
		if err != nil {
			return "", "", fmt.Errorf("ovn: NB endpoint %q: %w", ep, err)
		}
		if host == "" {
			return "", "", fmt.Errorf("ovn: NB endpoint %q: missing host", ep)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return "", "", fmt.Errorf("ovn: NB endpoint %q: bad port %q", ep, port)
		}
		return scheme + ":" + net.JoinHostPort(host, port), scheme, nil
	case "unix":
		// libovsdb reads "unix:relative" as its default socket, so make the path absolute.
		p, err := filepath.Abs(rest)
		if err != nil {
			return "", "", fmt.Errorf("ovn: NB endpoint %q: %w", ep, err)
		}
		return "unix:" + p, scheme, nil
	default:
		return "", "", fmt.Errorf("ovn: NB endpoint %q: unsupported scheme %q (want tcp, ssl or unix)", ep, scheme)
	}
}

// tlsConfig loads the client certificate and the CA.
func (f *TLSFiles) tlsConfig() (*tls.Config, error) {
	if f.CertFile == "" || f.KeyFile == "" || f.CAFile == "" {
		return nil, errors.New("ovn: TLS needs CertFile, KeyFile and CAFile")
	}
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("ovn: load client certificate %s / key %s: %w", f.CertFile, f.KeyFile, err)
	}
	caPEM, err := os.ReadFile(f.CAFile)
	if err != nil {
		return nil, fmt.Errorf("ovn: read CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("ovn: CA file %s holds no PEM certificate", f.CAFile)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		// The standard verification also checks the host name, which OVN certificates do not
		// carry; VerifyConnection below verifies the chain against the CA instead.
		InsecureSkipVerify: true, //nolint:gosec // chain verified in VerifyConnection
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("ovn: NB server sent no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
				Roots:         pool,
				Intermediates: inter,
				KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
			})
			if err != nil {
				return fmt.Errorf("ovn: NB server certificate: %w", err)
			}
			return nil
		},
	}, nil
}
