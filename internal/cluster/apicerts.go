package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"
)

// File names in the API server's certificate directory: the serving pair and the service-account
// signing pair as envtest names them (it keeps files it finds there), and the cluster CA that
// kube-controller-manager publishes as kube-root-ca.crt (--root-ca-file).
const (
	apiServerCertFile = "apiserver.crt"
	apiServerKeyFile  = "apiserver.key"
	saCertFile        = "sa-signer.crt"
	saKeyFile         = "sa-signer.key"
	clusterCAFile     = "cluster-ca.crt"
)

// writeAPIServerCerts writes, into the API server's certificate directory, a cluster CA and a
// serving certificate signed by it for every name a client uses: loopback for the lab's own
// clients, and the `kubernetes` Service (its ClusterIP, kubernetes.default.svc...), which Pods
// dial with client-go's in-cluster configuration, as kubeadm's certificate does. envtest's own
// certificate names loopback only, so a Pod's client would refuse it. Also the service-account
// signing pair. It returns the CA in PEM, which the lab's clients trust.
func writeAPIServerCerts(dir string, serviceIP netip.Addr) ([]byte, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "vpcgw-lab-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("creating the lab's cluster CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	servingKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	servingTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IP(serviceIP.AsSlice())},
	}
	servingDER, err := x509.CreateCertificate(rand.Reader, servingTmpl, ca, &servingKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("creating the API server's serving certificate: %w", err)
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caPEM := pemBlock("CERTIFICATE", caDER)
	files := map[string][]byte{
		clusterCAFile:     caPEM,
		apiServerCertFile: append(pemBlock("CERTIFICATE", servingDER), caPEM...),
	}
	for name, key := range map[string]*ecdsa.PrivateKey{apiServerKeyFile: servingKey, saKeyFile: saKey} {
		der, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return nil, err
		}
		files[name] = pemBlock("EC PRIVATE KEY", der)
	}
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	files[saCertFile] = pemBlock("PUBLIC KEY", saPub)
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	return caPEM, nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
