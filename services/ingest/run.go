package ingest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/access"
	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/envflag"
	"github.com/weirflow/weir/internal/natsconn"
	"github.com/weirflow/weir/pkg/ingress"
)

// Run is the ingest command: it reads its configuration from args and the
// environment, and serves the gateway until ctx ends. ready, if not nil,
// is called with the address it listens on.
func Run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer, ready func(addr string)) error {
	fs := envflag.New("ingest", getenv, stderr)
	var natsURL, contractPath, addr, tokens string
	var replicas int
	var create bool
	var cfg Config
	var hs httpServer
	var auth natsconn.Auth
	fs.String(&natsURL, "nats", "NATS_URL", "nats://127.0.0.1:4222", "NATS server URL; several, comma-separated, on a cluster")
	auth.Flags(fs)
	fs.String(&contractPath, "contract", "WEIR_CONTRACT", "", "the pipeline's contract file: its ingress, identity and time sections")
	fs.String(&addr, "listen", "WEIR_INGEST_ADDR", "127.0.0.1:8088", "HTTP address to serve POST /v1/events on (a container's: :8088)")
	fs.String(&tokens, "tokens", "WEIR_GATEWAY_TOKENS", "", "the producers' tokens file, <pipeline>-gateway.tokens, that weir auth -producers writes: a request needs one of their bearer tokens")
	fs.String(&cfg.LagAPI, "lag-api", "WEIR_LAG_API", "", "the JetStream API prefix to read the pipeline's consumers under for admission (overload.policy admission): $JS.<pipeline>.API where the pipeline has its own account (weir auth writes it in the producer's .env); empty: the gateway's account")
	fs.Bool(&cfg.Open, "open", "WEIR_GATEWAY_OPEN", false, "serve without authentication: anyone who reaches the gateway writes every tenant (a demo on loopback)")
	hs.flags(fs)
	fs.Int64(&cfg.MaxBody, "max-body", "WEIR_INGEST_MAX_BODY", DefaultMaxBody, "largest request body in bytes")
	fs.Duration(&cfg.Timeout, "timeout", "WEIR_INGEST_TIMEOUT", 10*time.Second, "wait at most this long for one batch to be stored")
	fs.Bool(&create, "create-ingress", "WEIR_CREATE_INGRESS", false, "create the ingress stream from the contract when it does not exist")
	fs.Int(&replicas, "replicas", "WEIR_REPLICAS", 1, "replicas of the ingress stream when -create-ingress creates it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("ingest: unexpected arguments %q", fs.Args())
	}
	if contractPath == "" {
		return errors.New("ingest: contract is required (flag -contract or WEIR_CONTRACT)")
	}
	c, err := contracts.Load(contractPath)
	if err != nil {
		return fmt.Errorf("ingest: refusing to start: %w", err)
	}
	cfg.Contract = c
	cfg.Logger = slog.New(slog.NewJSONHandler(stderr, nil))
	cfg.Now = time.Now
	if tokens != "" {
		if cfg.Tokens, err = access.ReadTokens(tokens, c.Pipeline); err != nil {
			return fmt.Errorf("ingest: refusing to start: %w", err)
		}
	}
	cfg.Certificates = hs.clientCA != ""
	srv, err := hs.server()
	if err != nil {
		return fmt.Errorf("ingest: refusing to start: %w", err)
	}
	// Refuse a gateway nobody can authenticate to before connecting.
	if _, err := newAuthenticator(c, cfg); err != nil {
		return err
	}

	// A denied request is never answered: stop saying so instead.
	return auth.GuardAnswering(ctx, func(ctx context.Context, denied func(error)) error {
		return serve(ctx, natsURL, auth, c, cfg, srv, addr, create, replicas, ready, denied)
	})
}

// serve connects as auth, reporting the connection's errors to denied, and
// serves the gateway of c on addr until ctx ends.
func serve(ctx context.Context, natsURL string, auth natsconn.Auth, c *contracts.Contract, cfg Config, srv *http.Server, addr string, create bool, replicas int,
	ready func(addr string), denied func(error)) error {
	nc, err := auth.Connect(natsURL, nats.Name("weir ingest "+c.Pipeline), nats.MaxReconnects(-1),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { denied(err) }))
	if err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	for _, name := range c.Ingress.StreamNames() {
		if _, err := js.Stream(ctx, name); errors.Is(err, jetstream.ErrStreamNotFound) {
			if !create {
				return fmt.Errorf("ingest: refusing to start: the ingress stream %s does not exist (contract %s, section ingress): create it, or start the gateway with -create-ingress (WEIR_CREATE_INGRESS=true) and it creates it from the contract",
					name, c.File)
			}
			if _, err := ingress.Create(ctx, js, c.Ingress, replicas); err != nil {
				return fmt.Errorf("ingest: %w", err)
			}
		} else if err != nil {
			return fmt.Errorf("ingest: ingress stream %s: %w", name, err)
		}
	}
	g, err := New(js, cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	actx, stopAdmission := context.WithCancel(ctx)
	admitting := make(chan error, 1)
	go func() { admitting <- g.RunAdmission(actx) }()
	defer func() {
		stopAdmission()
		if err := <-admitting; err != nil {
			cfg.Logger.Warn("admission", "err", err)
		}
	}()
	srv.Handler = g
	srv.ErrorLog = slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn) // refused TLS handshakes, say
	cfg.Logger.Info("serving", "addr", ln.Addr().String(), "streams", c.Ingress.StreamNames(), "pipeline", c.Pipeline,
		"tls", srv.TLSConfig != nil, "client_certificates", cfg.Certificates, "tokens", cfg.Tokens != nil, "open", cfg.Open)
	if ready != nil {
		ready(ln.Addr().String())
	}
	done := make(chan error, 1)
	go func() {
		if srv.TLSConfig != nil {
			done <- srv.ServeTLS(ln, "", "") // the certificate is in TLSConfig
			return
		}
		done <- srv.Serve(ln)
	}()
	select {
	case err := <-done:
		return fmt.Errorf("ingest: %w", err)
	case <-ctx.Done():
	}
	// Requests in progress finish: their events are stored and answered.
	sctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout+5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

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
