// Command weir-healthcheck is the health probe built into every weir
// image. The images are FROM scratch, with no shell, curl or nats CLI, so
// Docker and Kubernetes run this instead:
//
//	weir-healthcheck operators nexmark-q7
//	weir-healthcheck micro weir-nexmark-gen
//	weir-healthcheck http http://127.0.0.1:8222/healthz
//
// operators reads the pipeline contract (-contract, default WEIR_CONTRACT)
// and checks, as micro does, every operator it assigns to the service
// (operators[].service), or only WEIR_OPERATOR when that names one: the
// same operators the service itself runs, so the check follows the
// contract when operators are added.
//
// micro sends $SRV.PING.<name> for every name and succeeds when each is
// answered by a service registered with the nats.go micro framework (weir
// operators register as weir-<operator ID>, the generator as
// weir-nexmark-gen). When an instance name is given (-instance, default
// WEIR_INSTANCE) and a service reports an "instance" in its metadata, only
// that instance's answer counts, so a container is healthy only when its
// own operators are registered, not some other replica's. The server is
// -nats, default NATS_URL.
//
// http succeeds on a 2xx answer to GET URL (nats-server's /healthz, Jaeger's
// health-check extension).
//
// Exit status 0 means healthy, 1 unhealthy, 2 a usage error.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
