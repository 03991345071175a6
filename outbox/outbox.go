// Package outbox is weir's transactional outbox: the intents of external
// effects — a payment, an email — that operators record, handed to the
// dispatcher exactly once.
//
// An operator emits an Intent's record like any result, into a json edge
// of the pipeline (its outbox). The intent's key is its idempotency key: a
// name-based UUID (RFC 9562 version 5) of the pipeline, the operator, the
// source coordinate of the record that caused it and its index among that
// record's intents, so a replay of the same input yields the same key.
// Written through a transactional edge (pkg/stream, txn.go), the intent is
// held in the state batch of the step that caused it and stored in the
// outbox stream only once its checkpoint completes — an intent of an epoch
// that never completes is never handed on. The dispatcher reads the outbox
// and performs each intent with its key, so the provider applies it once.
//
// The runtime stores each intent with the erasure names of the key whose
// state caused it (edge.HeaderErasable: digests, never the key), where
// the operator keys its state by key: an erasure of that key finds the
// intent, the dispatcher's dead letter and outcome of it by them
// (dispatcher.Erase), though the intent's own key names the coordinate.
//
// # What sink.effect outbox guarantees
//
// outbox (outbox/, dispatcher/). The json edge is an outbox: the
// operator writing it emits intents (outbox.Intent: key, kind, JSON
// payload, source coordinate), and the runtime writes the edge exactly as a
// transactional one — held in the state batch of the step that caused them,
// handed on once their checkpoint completes, never when it does not, each
// once. An intent's key is its idempotency key: a name-based UUID (version 5,
// weir's own namespace) of the pipeline, the operator, the source coordinate
// of the record that caused it and its index, so a replay mints the same key.
// The dispatcher (dispatcher.ForContract, dispatcher/cmd/dispatcher)
// reads the outbox stream with a durable consumer, at most Concurrency
// intents in flight; skips an intent whose outcome KV
// (<STREAM>_OUTCOMES) records; POSTs the payload to <provider>/<kind>
// with Idempotency-Key; records the outcome before acknowledging; retries
// 5xx, 408, 409, 429, timeouts and lost connections with exponential back-off
// and full jitter up to MaxAttempts; and files a refused (other 4xx) or
// exhausted intent on <STREAM>_DLQ with its coordinate and the provider's
// answer. A crash after the call and before the outcome is recorded calls
// again with the same key. Scope: the end-to-end business effect happens once
// when the provider honours idempotency keys (as services/provider, the
// simulator, does); a provider that cannot take them gets at-least-once calls,
// which the contract declares (sink.provider_keys: ignored, lint S6 keeps it
// to outboxes): the dispatcher then marks each intent it called more than once
// maybe_repeated in its outcome, and the user reconciles. weir effects list prints the recorded
// outcomes and the dead letters; weir effects retry KEY removes a failed
// intent's outcome and puts it back on the outbox; weir effects reconcile
// -provider-records URL|FILE compares the provider's own record (a JSON
// array of objects with the key each call carried) with every intent of the
// outbox and reports what happened twice, never (with the dispatcher's
// outcome) or without an intent, exiting non-zero on the first two.
package outbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/weirflow/weir/internal/strictjson"
	"github.com/weirflow/weir/pkg/record"
)

// namespace is weir's UUID namespace for intent keys; it never changes, or
// a replay after an upgrade would mint new keys for old intents.
var namespace = uuid.MustParse("7c4f9a25-191c-4494-8beb-794970bc2cb1")

// Key is the idempotency key of the n-th intent (from 0) that operator of
// pipeline records for the record at source coordinate at.
func Key(pipeline, operator string, at record.Coordinate, n int) string {
	name := pipeline + "\x00" + operator + "\x00" + at.String() + "\x00" + strconv.Itoa(n)
	return uuid.NewSHA1(namespace, []byte(name)).String()
}

// Intent is one external effect to perform.
type Intent struct {
	// Key is the idempotency key (Key): the provider's Idempotency-Key.
	Key string `json:"key"`
	// Kind names the effect, and the provider's endpoint: the dispatcher
	// POSTs the payload to <provider>/<kind>.
	Kind string `json:"kind"`
	// Payload is the effect's JSON body.
	Payload json.RawMessage `json:"payload"`
	// Source is the source coordinate of the record that caused it.
	Source string `json:"source"`
}

// Validate reports what makes the intent unusable.
func (i Intent) Validate() error {
	var errs []error
	if _, err := uuid.Parse(i.Key); err != nil {
		errs = append(errs, fmt.Errorf("outbox: intent key %q is not a UUID: %w", i.Key, err))
	}
	if i.Kind == "" || !validKind(i.Kind) {
		errs = append(errs, fmt.Errorf("outbox: intent kind %q must be letters, digits, '-' or '_'", i.Kind))
	}
	if !json.Valid(i.Payload) {
		errs = append(errs, fmt.Errorf("outbox: intent %s payload is not JSON", i.Key))
	}
	return errors.Join(errs...)
}

func validKind(s string) bool {
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Record is the data record an operator emits for the intent: its key as
// ID and key, the event time t, the encoded intent as value.
func (i Intent) Record(t time.Time) (record.Record, error) {
	if err := i.Validate(); err != nil {
		return record.Record{}, err
	}
	v, err := json.Marshal(i)
	if err != nil {
		return record.Record{}, fmt.Errorf("outbox: encode intent %s: %w", i.Key, err)
	}
	return record.Record{Kind: record.Data, ID: i.Key, Key: []byte(i.Key), Time: t, Value: v}, nil
}

// Decode parses an intent as Record encodes it, strictly.
func Decode(b []byte) (Intent, error) {
	var i Intent
	if err := strictjson.Decode(b, &i); err != nil {
		return Intent{}, fmt.Errorf("outbox: decode intent: %w", err)
	}
	return i, i.Validate()
}
