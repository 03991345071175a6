package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/access"
	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/pkg/envflag"
	"github.com/weirflow/weir/pkg/ingress"
	"github.com/weirflow/weir/pkg/natsconn"
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
	return auth.Guard(ctx, func(ctx context.Context, denied func(error)) error {
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
	if _, err := js.Stream(ctx, c.Ingress.Stream); errors.Is(err, jetstream.ErrStreamNotFound) {
		if !create {
			return fmt.Errorf("ingest: refusing to start: the ingress stream %s does not exist (contract %s, section ingress): create it, or start the gateway with -create-ingress (WEIR_CREATE_INGRESS=true) and it creates it from the contract",
				c.Ingress.Stream, c.File)
		}
		if _, err := ingress.Create(ctx, js, c.Ingress, replicas); err != nil {
			return fmt.Errorf("ingest: %w", err)
		}
	} else if err != nil {
		return fmt.Errorf("ingest: ingress stream %s: %w", c.Ingress.Stream, err)
	}
	g, err := New(js, cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	go func() { _ = g.RunAdmission(ctx) }()
	srv.Handler = g
	srv.ErrorLog = slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn) // refused TLS handshakes, say
	cfg.Logger.Info("serving", "addr", ln.Addr().String(), "stream", c.Ingress.Stream, "pipeline", c.Pipeline,
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
