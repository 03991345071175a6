package dispatcher

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/envflag"
	"github.com/weirflow/weir/internal/natsconn"
)

// Version is reported to $SRV.INFO.
const Version = "0.1.0"

// Main runs the dispatcher of the pipeline a contract describes, configured
// by flags and their environment variables (see -h), until ctx ends.
func Main(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	fs := envflag.New("dispatcher", getenv, stderr)
	var url, contract, provider string
	cfg := Config{}
	var auth natsconn.Auth
	fs.String(&url, "nats", "NATS_URL", nats.DefaultURL, "NATS server URL")
	auth.Flags(fs)
	fs.String(&contract, "contract", "WEIR_CONTRACT", "", "the pipeline's contract (sink.effect: outbox)")
	fs.String(&provider, "provider", "WEIR_PROVIDER", "", "base URL the intents are POSTed under, as <provider>/<kind>")
	fs.Int(&cfg.Concurrency, "concurrency", "WEIR_DISPATCH_CONCURRENCY", 8, "intents in flight at most")
	fs.Int(&cfg.MaxAttempts, "max-attempts", "WEIR_DISPATCH_MAX_ATTEMPTS", 10, "deliveries of an intent before it is filed as a dead letter")
	fs.Duration(&cfg.Timeout, "timeout", "WEIR_DISPATCH_TIMEOUT", 10*time.Second, "how long one call may take")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if contract == "" || provider == "" {
		return fmt.Errorf("dispatcher: -contract (WEIR_CONTRACT) and -provider (WEIR_PROVIDER) are required")
	}
	c, err := contracts.Load(contract)
	if err != nil {
		return err
	}
	base, err := ForContract(c, provider)
	if err != nil {
		return err
	}
	base.Concurrency, base.MaxAttempts, base.Timeout = cfg.Concurrency, cfg.MaxAttempts, cfg.Timeout
	base.Logger = slog.New(slog.NewTextHandler(stderr, nil)).With("service", "dispatcher", "pipeline", c.Pipeline)
	// A denied request is never answered: stop saying so instead.
	return auth.GuardAnswering(ctx, func(ctx context.Context, denied func(error)) error {
		return dispatch(ctx, url, auth, c, base, provider, denied)
	})
}

// dispatch connects as auth, reporting the connection's errors to denied,
// and runs the dispatcher base of c's outbox until ctx ends.
func dispatch(ctx context.Context, url string, auth natsconn.Auth, c *contracts.Contract, base Config, provider string, denied func(error)) error {
	nc, err := auth.Connect(url, nats.Name("weir-dispatcher-"+c.Pipeline), nats.MaxReconnects(-1),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { denied(err) }))
	if err != nil {
		return fmt.Errorf("dispatcher: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	d, err := New(ctx, js, base)
	if err != nil {
		return err
	}
	// Health: it answers $SRV.PING.weir-dispatcher while it runs
	// (weir-healthcheck micro weir-dispatcher).
	svc, err := micro.AddService(nc, micro.Config{Name: "weir-dispatcher", Version: Version,
		Description: "performs the intents of " + c.Pipeline + "'s outbox", Metadata: map[string]string{"pipeline": c.Pipeline, "outbox": base.Stream}})
	if err != nil {
		return fmt.Errorf("dispatcher: %w", err)
	}
	defer func() { _ = svc.Stop() }() // stopping only unsubscribes; the connection closes next
	base.Logger.Info("dispatching", "outbox", base.Stream, "provider", provider, "concurrency", base.Concurrency)
	return d.Run(ctx)
}
