// Command provider runs the payment-provider simulator (package provider)
// on -listen (WEIR_PROVIDER_LISTEN). With -journal FILE
// (WEIR_PROVIDER_JOURNAL) its record of effects survives its own kill -9:
// each effect is synced to the file before it is answered, and loaded
// again when it starts.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/weirflow/weir/internal/envflag"
	"github.com/weirflow/weir/services/provider"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "provider:", err)
		os.Exit(1)
	}
}

// errUsage ends a run whose flags were wrong; envflag printed why.
var errUsage = errors.New("usage")

// run serves the simulator until ctx ends.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	fs := envflag.New("provider", getenv, stderr)
	var listen, journal string
	fs.String(&listen, "listen", "WEIR_PROVIDER_LISTEN", "127.0.0.1:8090", "address to serve on")
	fs.String(&journal, "journal", "WEIR_PROVIDER_JOURNAL", "", "file that keeps the record of effects across restarts (default: in memory only)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	p := provider.New()
	if journal != "" {
		var err error
		if p, err = provider.Open(journal); err != nil {
			return err
		}
		defer p.Close()
		fmt.Fprintf(stderr, "provider: journal %s holds %d effects\n", journal, len(p.Effects()))
	}
	srv := &http.Server{Addr: listen, Handler: p, ReadHeaderTimeout: 10 * time.Second}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			fmt.Fprintf(stderr, "provider: requests cut short at the stop: %v\n", err)
		}
	}()
	fmt.Fprintf(stderr, "provider: serving on http://%s (POST /<kind>, POST /control, GET /effects)\n", listen)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	<-stopped // the requests in flight are answered before the journal closes
	return nil
}
