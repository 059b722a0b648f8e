package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// The release's signature (SPEC O6): SHA256SUMS signed as `cosign sign-blob --key` signs a blob
// with an ECDSA P-256 key (the base64 of an ASN.1 ECDSA signature over the file's SHA-256), and
// the key's public half beside it. `cosign verify-blob --key vpcgw-release.pub --signature
// SHA256SUMS.sig SHA256SUMS` and `openssl dgst -sha256 -verify` both check it; the notes name the
// key's fingerprint, which the operator compares with the one the project publishes.
const (
	signatureFile = "SHA256SUMS.sig"
	publicKeyFile = "vpcgw-release.pub"
)

// signer is the release's signing key; nil: the release is unsigned.
type signer struct {
	key *ecdsa.PrivateKey
	pub []byte // PKIX DER
}

// loadSigner reads an ECDSA P-256 private key in PEM (PKCS#8 "PRIVATE KEY" or SEC1 "EC PRIVATE
// KEY", as openssl writes them). cosign's own encrypted key files are not read: sign with cosign
// itself then (`cosign sign-blob --key cosign.key SHA256SUMS > SHA256SUMS.sig` gives the same file).
func loadSigner(path string) (*signer, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("signing key %s: no PEM block", path)
	}
	var key any
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("signing key %s: a PEM %q block, want an unencrypted \"PRIVATE KEY\" or \"EC PRIVATE KEY\"", path, block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", path, err)
	}
	ec, ok := key.(*ecdsa.PrivateKey)
	if !ok || ec.Curve != elliptic.P256() {
		return nil, fmt.Errorf("signing key %s: want an ECDSA P-256 key (cosign's kind)", path)
	}
	pub, err := x509.MarshalPKIXPublicKey(&ec.PublicKey)
	if err != nil {
		return nil, err
	}
	return &signer{key: ec, pub: pub}, nil
}

// fingerprint is the SHA-256 of the public key's DER, in hex.
func (s *signer) fingerprint() string {
	sum := sha256.Sum256(s.pub)
	return hex.EncodeToString(sum[:])
}

// writePublicKey puts the public key in the release (before SHA256SUMS, which lists it).
func (s *signer) writePublicKey(dir string) error {
	return os.WriteFile(filepath.Join(dir, publicKeyFile), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: s.pub}), 0o644)
}

// sign writes SHA256SUMS.sig.
func (s *signer) sign(dir string) error {
	sums, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		return err
	}
	digest := sha256.Sum256(sums)
	sig, err := ecdsa.SignASN1(rand.Reader, s.key, digest[:])
	if err != nil {
		return err
	}
	if !ecdsa.VerifyASN1(&s.key.PublicKey, digest[:], sig) {
		return errors.New("the signature does not verify with its own key")
	}
	return os.WriteFile(filepath.Join(dir, signatureFile), []byte(base64.StdEncoding.EncodeToString(sig)), 0o644)
}
