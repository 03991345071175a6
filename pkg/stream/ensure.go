package stream

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ensureAttempts bounds the attempts of RetryAPI.
const ensureAttempts = 8

// ensureTimeout bounds attempt n of RetryAPI: 2 s doubling to 16 s. A
// creation that was not answered will not be, so the first wait is short;
// the later ones leave a slow server time.
func ensureTimeout(n int) time.Duration { return 2 * time.Second << min(n-1, 3) }

// RetryAPI runs f — a JetStream API call creating or updating a stream or
// bucket, such as edge.Ensure or checkpoint.Open, which are idempotent —
// until it succeeds, fails for a reason another attempt would not change,
// or has failed 8 times; attempts get 2 s, doubling to 16 s. log, if not
// nil, hears of every retry.
//
// A cluster needs it: when several clients create the same replicated
// stream at once — every service of a pipeline starting together —
// nats-server 2.15 often answers none of them though it creates the
// stream, and an update racing the creation goes unanswered too; the
// stream exists by the next attempt. Electing a meta leader after a node
// died makes the API unavailable for a moment in the same way.
func RetryAPI(ctx context.Context, log *slog.Logger, what string, f func(context.Context) error) error {
	var err error
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, ensureTimeout(attempt))
		err = f(actx)
		cancel()
		if err == nil || ctx.Err() != nil || !transient(err) || attempt == ensureAttempts {
			return err
		}
		if log != nil {
			log.Warn("retrying", "what", what, "attempt", attempt, "err", err)
		}
		if serr := sleep(ctx, backoff(attempt)); serr != nil {
			return err
		}
	}
}

// transient reports whether a JetStream API call may succeed when tried
// again: it went unanswered, or the JetStream cluster was unavailable.
func transient(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) {
		return true
	}
	var api *jetstream.APIError
	return errors.As(err, &api) && api.Code == 503
}
