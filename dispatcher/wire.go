package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/deadletter"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/jsapi"
	"github.com/weirflow/weir/internal/strictjson"
	"github.com/weirflow/weir/outbox"
)

// The dispatcher's wire: its outcomes (EncodeOutcome, DecodeOutcome) in
// the bucket Config.Outcomes by intent key, its dead letters on
// Config.DeadLetterSubject with these headers beside the intent's erasure
// names (edge.HeaderErasable) and the intent's message as data
// (DecodeDeadLetter), and an intent handed back by Retry. Everyone who
// reads them — weir effects, weir erase — reads them through this file.
const (
	// HeaderIntentKey is the idempotency key of a dead letter's intent;
	// empty for a message that was no intent.
	HeaderIntentKey = "Weir-Intent-Key"
	// HeaderSource is its intent's source coordinate.
	HeaderSource = "Weir-Source"
	// HeaderStatus is the provider's last HTTP status (0: no answer).
	HeaderStatus = "Weir-Status"
	// HeaderReason is the provider's answer, or why the intent was filed.
	HeaderReason = deadletter.HeaderReason
	// HeaderRetry marks an intent that weir effects retry handed back to
	// the outbox (Retry): the sequence of the dead letter it came from.
	HeaderRetry = "Weir-Retry"
)

// EncodeOutcome encodes an outcome as the bucket stores it.
func EncodeOutcome(o Outcome) ([]byte, error) {
	b, err := json.Marshal(o)
	if err != nil {
		return nil, fmt.Errorf("dispatcher: encode outcome %s: %w", o.Key, err)
	}
	return b, nil
}

// DecodeOutcome decodes an outcome as EncodeOutcome encodes it, strictly:
// unknown fields, trailing data and an outcome without a key are refused.
func DecodeOutcome(b []byte) (Outcome, error) {
	var o Outcome
	if err := strictjson.Decode(b, &o); err != nil {
		return Outcome{}, fmt.Errorf("dispatcher: decode outcome: %w", err)
	}
	if o.Key == "" {
		return Outcome{}, errors.New("dispatcher: decode outcome: no key")
	}
	return o, nil
}

// Outcomes is a dispatcher's bucket of outcomes, opened to read them.
type Outcomes struct {
	js jetstream.JetStream
	kv jetstream.KeyValue
}

// OpenOutcomes opens the outcome bucket of cfg's dispatcher; the error
// wraps jetstream.ErrBucketNotFound when no dispatcher has created it.
func OpenOutcomes(ctx context.Context, js jetstream.JetStream, cfg Config) (*Outcomes, error) {
	kv, err := js.KeyValue(ctx, cfg.Outcomes)
	if err != nil {
		return nil, fmt.Errorf("dispatcher: outcomes %s: %w", cfg.Outcomes, err)
	}
	return &Outcomes{js: js, kv: kv}, nil
}

// Get returns the outcome recorded for key; the error wraps
// jetstream.ErrKeyNotFound when none is (and jetstream.ErrInvalidKey for
// a key no intent could have).
func (o *Outcomes) Get(ctx context.Context, key string) (Outcome, error) {
	e, err := o.kv.Get(ctx, key)
	if err != nil {
		return Outcome{}, fmt.Errorf("dispatcher: outcome %s: %w", key, err)
	}
	out, err := DecodeOutcome(e.Value())
	if err != nil {
		return Outcome{}, fmt.Errorf("%w (key %s)", err, key)
	}
	return out, nil
}

// Keys lists the keys of the outcomes recorded, sorted.
func (o *Outcomes) Keys(ctx context.Context) ([]string, error) {
	keys, err := jsapi.ListKeys(ctx, o.js, o.kv.Bucket(), ">")
	if err != nil {
		return nil, fmt.Errorf("dispatcher: outcomes: %w", err)
	}
	slices.Sort(keys)
	return keys, nil
}

// DeadLetter is an intent the dispatcher filed: the provider refused it,
// or it ran out of attempts, or it was no intent.
type DeadLetter struct {
	// Seq is its sequence in the dead-letter stream.
	Seq    uint64 `json:"seq"`
	Key    string `json:"key"`
	Source string `json:"source"`
	// Status is the provider's last HTTP status, as the header holds it.
	Status string `json:"status"`
	Reason string `json:"reason"`
	// Data is the intent's message when it is JSON; nil otherwise.
	Data json.RawMessage `json:"intent"`
	// Erasable are the erasure names it carries (edge.HeaderErasable).
	Erasable []string `json:"-"`
}

// deadLetterMsg is the message filing the intent in with data, its
// erasure names, and the provider's status and answer (reason); its
// message ID is the key, so filing it twice files it once.
func deadLetterMsg(subject string, in outbox.Intent, data []byte, erasable []string, status int, reason string) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = data
	if len(erasable) > 0 {
		m.Header[edge.HeaderErasable] = erasable
	}
	m.Header.Set(HeaderIntentKey, in.Key)
	m.Header.Set(HeaderSource, in.Source)
	m.Header.Set(HeaderStatus, strconv.Itoa(status))
	m.Header.Set(HeaderReason, reason)
	if in.Key != "" {
		m.Header.Set(jetstream.MsgIDHeader, "dead."+in.Key)
	}
	return m
}

// DecodeDeadLetter reads a dead letter the dispatcher filed as message
// seq, refusing one without the status every dead letter carries.
func DecodeDeadLetter(seq uint64, h nats.Header, data []byte) (DeadLetter, error) {
	d := DeadLetter{Seq: seq, Key: h.Get(HeaderIntentKey), Source: h.Get(HeaderSource),
		Status: h.Get(HeaderStatus), Reason: h.Get(HeaderReason), Erasable: h.Values(edge.HeaderErasable)}
	if _, err := strconv.Atoi(d.Status); err != nil {
		return DeadLetter{}, fmt.Errorf("dispatcher: dead letter %d: %s %q: %w", seq, HeaderStatus, d.Status, err)
	}
	if json.Valid(data) {
		d.Data = data
	}
	return d, nil
}

// DeadLetters reads the dead letters of cfg's dispatcher, by intent key;
// none when it has filed none.
func DeadLetters(ctx context.Context, js jetstream.JetStream, cfg Config) (map[string]DeadLetter, error) {
	out := map[string]DeadLetter{}
	st, err := js.Stream(ctx, cfg.DeadLetters)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("dispatcher: dead letters %s: %w", cfg.DeadLetters, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("dispatcher: dead letters %s: %w", cfg.DeadLetters, err)
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("dispatcher: dead letters %s: %w", cfg.DeadLetters, err)
		}
		d, err := DecodeDeadLetter(seq, m.Header, m.Data)
		if err != nil {
			return nil, err
		}
		out[d.Key] = d
	}
	return out, nil
}

// Retry hands a failed intent back to cfg's dispatcher: it removes the
// intent's outcome and puts the intent from its dead letter l back on the
// outbox (Config.RetrySubject, marked HeaderRetry, with its erasure
// names), where the dispatcher performs it again with the same key.
func Retry(ctx context.Context, js jetstream.JetStream, cfg Config, l DeadLetter) error {
	kv, err := js.KeyValue(ctx, cfg.Outcomes)
	if err != nil {
		return fmt.Errorf("dispatcher: retry %s: outcomes %s: %w", l.Key, cfg.Outcomes, err)
	}
	if err := kv.Delete(ctx, l.Key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("dispatcher: retry %s: %w", l.Key, err)
	}
	m := nats.NewMsg(cfg.RetrySubject)
	m.Data = l.Data
	m.Header.Set(HeaderRetry, strconv.FormatUint(l.Seq, 10))
	if len(l.Erasable) > 0 {
		// An erasure of the key that caused it must find it again.
		m.Header[edge.HeaderErasable] = l.Erasable
	}
	if _, err := js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("retry %s: %w", l.Key, err)
	}
	return nil
}
