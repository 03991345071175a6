package ingest

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/weirflow/weir/pkg/envflag"
)

// Default timeouts of the command's HTTP server. A request's body is read
// whole within DefaultReadTimeout (a 64 MiB body at ~1 MiB/s), and the
// answer, which comes once every event is stored, within
// DefaultWriteTimeout of its headers.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = time.Minute
	DefaultWriteTimeout      = 2 * time.Minute
	DefaultIdleTimeout       = 2 * time.Minute
)

// ErrServerConfig reports timeouts or TLS files the command cannot serve
// with.
var ErrServerConfig = errors.New("ingest: server")

// httpServer is the command's HTTP side: the timeouts that keep a slow
// or idle client from holding a connection, and TLS.
type httpServer struct {
	readHeader, read, write, idle time.Duration
	cert, key, clientCA           string
}

func (h *httpServer) flags(fs *envflag.Set) {
	fs.Duration(&h.readHeader, "read-header-timeout", "WEIR_INGEST_READ_HEADER_TIMEOUT", DefaultReadHeaderTimeout, "read a request's headers within this")
	fs.Duration(&h.read, "read-timeout", "WEIR_INGEST_READ_TIMEOUT", DefaultReadTimeout, "read a whole request, body included, within this: a body that comes slower is cut off")
	fs.Duration(&h.write, "write-timeout", "WEIR_INGEST_WRITE_TIMEOUT", DefaultWriteTimeout, "answer within this of a request's headers (its events are stored by then); longer than -read-timeout")
	fs.Duration(&h.idle, "idle-timeout", "WEIR_INGEST_IDLE_TIMEOUT", DefaultIdleTimeout, "close a kept-alive connection idle this long")
	fs.String(&h.cert, "https-cert", "WEIR_INGEST_TLS_CERT", "", "serve HTTPS with this certificate (PEM; with -https-key)")
	fs.String(&h.key, "https-key", "WEIR_INGEST_TLS_KEY", "", "the private key of -https-cert (PEM)")
	fs.String(&h.clientCA, "https-client-ca", "WEIR_INGEST_TLS_CLIENT_CA", "", "require a client certificate this CA (PEM) signed: it authenticates a producer, by its common name, writing every tenant; with -tokens a request needs a token as well")
}

// server is the HTTP server h describes, without its handler; it
// refuses a timeout that lets a client hold a connection for ever, and TLS
// files it cannot use.
func (h *httpServer) server() (*http.Server, error) {
	for name, d := range map[string]time.Duration{"-read-header-timeout": h.readHeader, "-read-timeout": h.read, "-write-timeout": h.write, "-idle-timeout": h.idle} {
		if d <= 0 {
			return nil, fmt.Errorf("%w: %s is %s: a client could hold a connection for ever", ErrServerConfig, name, d)
		}
	}
	if h.write <= h.read {
		return nil, fmt.Errorf("%w: -write-timeout %s is not longer than -read-timeout %s: the answer is written after the body is read and stored", ErrServerConfig, h.write, h.read)
	}
	srv := &http.Server{ReadHeaderTimeout: h.readHeader, ReadTimeout: h.read, WriteTimeout: h.write, IdleTimeout: h.idle}
	switch {
	case h.cert == "" && h.key == "" && h.clientCA == "":
		return srv, nil
	case h.cert == "" || h.key == "":
		return nil, fmt.Errorf("%w: TLS needs both -https-cert and -https-key (and -https-client-ca needs them)", ErrServerConfig)
	}
	pair, err := tls.LoadX509KeyPair(h.cert, h.key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrServerConfig, err)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}
	if h.clientCA != "" {
		pem, err := os.ReadFile(h.clientCA)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrServerConfig, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: -https-client-ca %s holds no PEM certificate", ErrServerConfig, h.clientCA)
		}
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	srv.TLSConfig = c
	return srv, nil
}
