package natsconn

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
	"os"
	"path/filepath"
	"time"
)

// Certificates are the files WriteCertificates writes: a CA, a server
// certificate it signed, and a client certificate it signed.
type Certificates struct {
	CA, CAKey         string
	Server, ServerKey string
	Client, ClientKey string
}

// WriteCertificates makes a private CA in dir and signs with it a server
// certificate for hosts (names and IP addresses) and a client certificate
// named client, each valid for validity: what a stack on one machine needs
// to run NATS with TLS, mutual or not. Keys are ECDSA P-256, written
// readable by their owner only.
func WriteCertificates(dir string, hosts []string, client string, validity time.Duration) (Certificates, error) {
	c := Certificates{
		CA: filepath.Join(dir, "ca.pem"), CAKey: filepath.Join(dir, "ca-key.pem"),
		Server: filepath.Join(dir, "server.pem"), ServerKey: filepath.Join(dir, "server-key.pem"),
		Client: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"),
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return c, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "weir local CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caKey, caDER, err := sign(caTmpl, nil, nil)
	if err != nil {
		return c, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return c, err
	}
	srvTmpl := &x509.Certificate{
		Subject:   pkix.Name{CommonName: hosts[0]},
		NotBefore: now.Add(-time.Hour),
		NotAfter:  now.Add(validity),
		KeyUsage:  x509.KeyUsageDigitalSignature,
		// Client authentication too: servers route to each other over
		// mutual TLS, each the other's client, with this certificate.
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			srvTmpl.IPAddresses = append(srvTmpl.IPAddresses, ip)
		} else {
			srvTmpl.DNSNames = append(srvTmpl.DNSNames, h)
		}
	}
	srvKey, srvDER, err := sign(srvTmpl, ca, caKey)
	if err != nil {
		return c, err
	}
	cliTmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: client},
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    now.Add(validity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	cliKey, cliDER, err := sign(cliTmpl, ca, caKey)
	if err != nil {
		return c, err
	}
	for _, f := range []struct {
		path string
		der  []byte
		key  *ecdsa.PrivateKey
		file string
	}{
		{c.CA, caDER, caKey, c.CAKey}, {c.Server, srvDER, srvKey, c.ServerKey}, {c.Client, cliDER, cliKey, c.ClientKey},
	} {
		if err := writePEM(f.path, "CERTIFICATE", f.der, 0o644); err != nil {
			return c, err
		}
		kb, err := x509.MarshalECPrivateKey(f.key)
		if err != nil {
			return c, err
		}
		if err := writePEM(f.file, "EC PRIVATE KEY", kb, 0o600); err != nil {
			return c, err
		}
	}
	return c, nil
}

// sign makes a key and a certificate for it from tmpl, signed by parent's
// key — self-signed when parent is nil.
func sign(tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, fmt.Errorf("natsconn: certificate %s: %w", tmpl.Subject.CommonName, err)
	}
	return key, der, nil
}

func writePEM(path, kind string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), mode)
}
