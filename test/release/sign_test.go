// covers: O6 (the release's SHA256SUMS signed as cosign sign-blob signs it, with the key the
// release documents)

package release

import (
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vpcgw/vpcgw/internal/testutil"
)

const (
	signatureFile = "SHA256SUMS.sig"
	publicKeyFile = "vpcgw-release.pub"
)

func (r *rel) signed() bool { return exists(r.path(signatureFile)) }

// TestReleaseSignature: SHA256SUMS.sig is the base64 of an ECDSA signature over SHA256SUMS by the
// release's key vpcgw-release.pub (what cosign verify-blob checks), openssl verifies it too, a
// changed SHA256SUMS does not verify, and the notes give the key's fingerprint. make test signs
// its release with a throwaway key; an unsigned release is checked where nothing requires one.
func TestReleaseSignature(t *testing.T) {
	r := load(t)
	if !r.signed() {
		if os.Getenv("VPCGW_REQUIRE_ALL") != "" {
			t.Fatalf("%s: the release is not signed; make test signs it (SIGNING_KEY=bin/test-signing.key)", r.dir)
		}
		notes := string(readFile(t, r.path("RELEASE-NOTES.md")))
		if !strings.Contains(notes, "Not signed") {
			t.Errorf("an unsigned release's notes do not say it is not signed:\n%s", notes)
		}
		testutil.Skip(t, "the release in "+r.dir+" is not signed (make release SIGNING_KEY=...; make test signs its own)")
	}
	block, _ := pem.Decode(readFile(t, r.path(publicKeyFile)))
	if block == nil || block.Type != "PUBLIC KEY" {
		t.Fatalf("%s is not a PEM public key", publicKeyFile)
	}
	key, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pub, ok := key.(*ecdsa.PublicKey)
	if !ok {
		t.Fatalf("%s holds a %T, want an ECDSA key", publicKeyFile, key)
	}
	sig, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(readFile(t, r.path(signatureFile)))))
	if err != nil {
		t.Fatalf("%s is not base64: %v", signatureFile, err)
	}
	sums := readFile(t, r.path("SHA256SUMS"))
	digest := sha256.Sum256(sums)
	if !ecdsa.VerifyASN1(pub, digest[:], sig) {
		t.Fatalf("%s does not verify SHA256SUMS with %s", signatureFile, publicKeyFile)
	}
	changed := sha256.Sum256(append(sums, '\n'))
	if ecdsa.VerifyASN1(pub, changed[:], sig) {
		t.Error("the signature verifies a changed SHA256SUMS too")
	}
	// The operator's tool: openssl (cosign verify-blob checks the same bytes).
	if openssl, err := exec.LookPath("openssl"); err == nil {
		der := filepath.Join(t.TempDir(), "sig.der")
		if err := os.WriteFile(der, sig, 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(openssl, "dgst", "-sha256", "-verify", r.path(publicKeyFile), "-signature", der, r.path("SHA256SUMS")).CombinedOutput(); err != nil {
			t.Errorf("openssl dgst -verify: %v\n%s", err, out)
		}
	} else if os.Getenv("VPCGW_REQUIRE_ALL") != "" {
		t.Error("openssl is not installed (hack/install-deps.sh installs it)")
	}
	fp := sha256.Sum256(block.Bytes)
	if notes := string(readFile(t, r.path("RELEASE-NOTES.md"))); !strings.Contains(notes, hex.EncodeToString(fp[:])) {
		t.Errorf("RELEASE-NOTES.md does not give the key's fingerprint %x", fp)
	}
}
