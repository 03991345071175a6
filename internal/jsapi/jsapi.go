// Package jsapi calls the JetStream API the way a NATS cluster needs, and
// holds weir's streams and buckets to their declarations.
//
// Each stream or bucket weir uses is declared once, by the package that
// uses it (edge.Declared, deadletter.Declared, checkpoint.Declared, …), as
// a Declared. weir provision, run with a pipeline administrator's
// credentials, creates it or brings it to the declaration (Provision); a
// runtime process only checks it (Check) and refuses to start, naming the
// field, on one that differs — its credentials allow no stream to be
// created or changed, since a stream's configuration (a republish, a
// source) acts with no user's permissions.
//
// The calls that create or check weir's streams and buckets (Check,
// Provision) are idempotent, and on
// a cluster they sometimes go unanswered: when several clients create the
// same replicated stream at once — every service of a pipeline starting
// together — nats-server 2.15 often answers none of them though it
// creates the stream, and an update racing the creation goes unanswered
// too; the stream exists by the next attempt. Electing a meta leader after
// a node died makes the API unavailable for a moment in the same way.
// Retry runs such a call until it succeeds. A lookup right after Check
// goes through Settled: a stream or bucket created a moment ago can be
// unknown, for a moment, to the server asked next.
//
// A bucket is watched, and its keys listed, through WatchKV and ListKeys,
// never nats.go's KeyValue.Watch or ListKeys: those read through a
// consumer, which another process of the account may find and change, or
// deliver its own messages to.
package jsapi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Attempts bounds the attempts of Retry.
const Attempts = 8

// timeout bounds attempt n: 2 s doubling to 16 s. A creation that was not
// answered will not be, so the first wait is short; the later ones leave a
// slow server time.
func timeout(n int) time.Duration { return 2 * time.Second << min(n-1, 3) }

// Backoff is the pause after failed attempt n (from 1) before the next:
// 100 ms doubling to 5 s. Every retry against the broker waits so.
func Backoff(n int) time.Duration { return min(100*time.Millisecond<<min(n-1, 6), 5*time.Second) }

// Retry runs f — an idempotent JetStream API call — until it succeeds,
// fails for a reason another attempt would not change, or has failed
// Attempts times; attempts get 2 s, doubling to 16 s. The error of the last
// attempt says how many were made.
func Retry(ctx context.Context, what string, f func(context.Context) error) error {
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, timeout(attempt))
		err := f(actx)
		cancel()
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil || !Transient(err):
			return err
		case attempt == Attempts:
			return fmt.Errorf("%s: %d attempts: %w", what, attempt, err)
		}
		if !pause(ctx, attempt) {
			return err
		}
	}
}

// Transient reports whether a JetStream API call may succeed when tried
// again: it went unanswered, or the JetStream cluster was unavailable.
func Transient(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) {
		return true
	}
	var api *jetstream.APIError
	if errors.As(err, &api) && api.Code == 503 {
		return true
	}
	// The key-value watchers and ordered consumers of nats.go still make
	// their consumers through its older API, whose errors are its own type.
	var old *nats.APIError
	return errors.As(err, &old) && old.Code == 503
}

// Unreachable reports whether err says the broker could not be reached,
// went away, or did not answer in time — down, restarting, busy recovering
// its streams — rather than that anything asked of it was wrong: a process
// that starts again a little later may succeed. A service's runtime and a
// coordinator start again on it instead of ending their process.
func Unreachable(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoServers) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrDisconnected) || errors.Is(err, nats.ErrConnectionReconnecting)
}

// Settled runs f — a lookup of a stream or bucket Check has just found or
// created — until it succeeds, retrying what Retry retries and also a
// "not found": on a cluster an asset created a moment ago can be unknown,
// for a moment, to the server asked next, and a start must not end on
// that. After Attempts not-found answers the last is returned: the asset
// is gone.
func Settled(ctx context.Context, what string, f func(context.Context) error) error {
	for attempt := 1; ; attempt++ {
		err := Retry(ctx, what, f)
		if err == nil || !notFound(err) || attempt == Attempts || ctx.Err() != nil {
			return err
		}
		if !pause(ctx, attempt) {
			return err
		}
	}
}

// pause waits Backoff(attempt) before the next attempt, or until ctx
// ends: whether to try again.
func pause(ctx context.Context, attempt int) bool {
	t := time.NewTimer(Backoff(attempt))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func notFound(err error) bool {
	return errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound)
}
