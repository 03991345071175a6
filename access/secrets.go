package access

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The secrets of a deployment beside the users' seeds: a client
// certificate per process, for a server that verifies its clients (mutual
// TLS: nkeys say who a process is, the certificate lets it speak at all),
// and the key that encrypts JetStream's store on the server's disk.

// ErrNoCA is returned by WriteClientCertificates when the directory holds
// no CA to sign with.
var ErrNoCA = errors.New("access: no CA to sign client certificates with")

// StoreKeyVar is the server's environment variable holding the key
// JetStream encrypts its store with (deploy/nats.conf's jetstream.key).
const StoreKeyVar = "WEIR_NATS_STORE_KEY"

// WriteClientCertificates signs, with the CA in dir (ca.pem and
// ca-key.pem, as natsconn.WriteCertificates writes them), a client
// certificate for each name — its CommonName the process's user — as
// <name>.pem with its key <name>-key.pem, the key readable by its owner
// only. Certificates are signed afresh each time, so that they chain to the
// CA the directory holds now.
func WriteClientCertificates(dir string, names []string, validity time.Duration) error {
	ca, caKey, err := readCA(dir)
	if err != nil {
		return err
	}
	now := time.Now()
	for _, name := range names {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial,
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(validity),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return fmt.Errorf("access: client certificate %s: %w", name, err)
		}
		kb, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return err
		}
		if err := writeFile(filepath.Join(dir, name+"-key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
			return err
		}
		if err := writeFile(filepath.Join(dir, name+".pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// readCA reads the CA's certificate and key in dir.
func readCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("%w: %s has no ca.pem (weir auth -tls-hosts writes one)", ErrNoCA, dir)
	}
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, "ca-key.pem"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("%w: %s has no ca-key.pem", ErrNoCA, dir)
	}
	if err != nil {
		return nil, nil, err
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, fmt.Errorf("%w: %s: ca.pem or ca-key.pem is not PEM", ErrNoCA, dir)
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("access: %s: %w", filepath.Join(dir, "ca.pem"), err)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("access: %s: %w", filepath.Join(dir, "ca-key.pem"), err)
	}
	return ca, key, nil
}

// WriteStoreKey writes file, the NATS server's environment holding a
// random key for JetStream's encryption at rest (StoreKeyVar=<hex>),
// readable by its owner only, and returns the key. A file already there
// is kept: a new key would leave the store unreadable.
func WriteStoreKey(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err == nil {
		key, ok := strings.CutPrefix(strings.TrimSpace(string(b)), StoreKeyVar+"=")
		if !ok || key == "" {
			return "", fmt.Errorf("access: %s does not hold %s=<key>", file, StoreKeyVar)
		}
		return key, os.Chmod(file, 0o600)
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	key := hex.EncodeToString(raw)
	return key, writeFile(file, []byte(StoreKeyVar+"="+key+"\n"), 0o600)
}

// writeFile writes data to file with mode, whether or not it exists.
func writeFile(file string, data []byte, mode os.FileMode) error {
	if err := os.WriteFile(file, data, mode); err != nil {
		return err
	}
	return os.Chmod(file, mode)
}

// SecretFile is one key of a Kubernetes Secret: its name in the Secret and
// the file holding its value, or the value itself.
type SecretFile struct {
	Key, File string
	Data      []byte
}

// K8sSecret renders a Kubernetes Secret named name holding files, for
// kubectl apply: one Secret per process, so that a pod can be given its
// own and nothing else.
func K8sSecret(name string, labels map[string]string, files []SecretFile) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: %s\n  labels:\n    app.kubernetes.io/part-of: weir\n", name)
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		fmt.Fprintf(&b, "    %s: %q\n", k, labels[k])
	}
	b.WriteString("type: Opaque\ndata:\n")
	for _, f := range files {
		data := f.Data
		if data == nil {
			var err error
			if data, err = os.ReadFile(f.File); err != nil {
				return nil, fmt.Errorf("access: secret %s: %w", name, err)
			}
		}
		fmt.Fprintf(&b, "  %s: %s\n", f.Key, base64.StdEncoding.EncodeToString(data))
	}
	return b.Bytes(), nil
}
