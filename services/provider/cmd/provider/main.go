// Command provider runs the payment-provider simulator (package provider)
// on -listen (WEIR_PROVIDER_LISTEN).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/weirflow/weir/pkg/envflag"
	"github.com/weirflow/weir/services/provider"
)

func main() {
	fs := envflag.New("provider", os.Getenv, os.Stderr)
	var listen string
	fs.String(&listen, "listen", "WEIR_PROVIDER_LISTEN", "127.0.0.1:8090", "address to serve on")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv := &http.Server{Addr: listen, Handler: provider.New(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	fmt.Fprintf(os.Stderr, "provider: serving on http://%s (POST /<kind>, POST /control, GET /effects)\n", listen)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "provider:", err)
		os.Exit(1)
	}
}
