package access_test

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weirflow/weir/access"
	"github.com/weirflow/weir/internal/natsconn"
)

// TestClientCertificatesChainToTheCA: each user's certificate names the
// user, chains to the directory's CA for client authentication, and its
// key is its owner's alone; without a CA, ErrNoCA.
func TestClientCertificatesChainToTheCA(t *testing.T) {
	dir := t.TempDir()
	if err := access.WriteClientCertificates(dir, []string{"p-svc"}, time.Hour); !errors.Is(err, access.ErrNoCA) {
		t.Fatalf("without a CA: %v, want ErrNoCA", err)
	}
	certs, err := natsconn.WriteCertificates(dir, []string{"localhost"}, "weir", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := access.WriteClientCertificates(dir, []string{"p-svc", "p-admin"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	caPEM, _ := os.ReadFile(certs.CA)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	for _, name := range []string{"p-svc", "p-admin"} {
		b, err := os.ReadFile(filepath.Join(dir, name+".pem"))
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(b)
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if cert.Subject.CommonName != name {
			t.Errorf("%s's certificate names %q", name, cert.Subject.CommonName)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s's certificate: %v", name, err)
		}
		info, err := os.Stat(filepath.Join(dir, name+"-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != 0o600 {
			t.Errorf("%s's key is %v, want 0600", name, info.Mode().Perm())
		}
	}
}

// TestTheStoreKeyIsKept: a second write keeps the key (a new one would
// leave the store unreadable) and puts the file back to 0600.
func TestTheStoreKeyIsKept(t *testing.T) {
	file := filepath.Join(t.TempDir(), "nats-store.env")
	first, err := access.WriteStoreKey(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(file, 0o644); err != nil {
		t.Fatal(err)
	}
	again, err := access.WriteStoreKey(file)
	if err != nil {
		t.Fatal(err)
	}
	if again != first || len(first) != 64 {
		t.Errorf("keys %q then %q: want the same 32-byte key", first, again)
	}
	if info, _ := os.Stat(file); info.Mode().Perm() != 0o600 {
		t.Errorf("%s is %v, want 0600", file, info.Mode().Perm())
	}
}
