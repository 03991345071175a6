package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/erasure"
	"github.com/weirflow/weir/internal/jsapi"
	"github.com/weirflow/weir/outbox"
	"github.com/weirflow/weir/pkg/record"
)

// Erasure is what Erase did to an outbox for one erasure: the key's
// settled intents erased, and those it had to leave.
//
// What makes an intent happen once is its outcome: a redelivered intent,
// or one a restore recomputes and stores again, finds it and is
// acknowledged without a call. So an erasure never removes an outcome: it
// rewrites it stripped (Outcome.Erased), and only then deletes what holds
// the intent's payload — its message on the outbox, its dead letter. An
// intent with no outcome yet is pending: erasing it would cancel an
// effect decided before the erasure, so it is left, and listed.
type Erasure struct {
	// Intents are the key's settled intents deleted from the outbox, and
	// DeadLetters its dead letters deleted, each message overwritten.
	Intents     []ErasedIntent `json:"intents,omitempty"`
	DeadLetters []ErasedIntent `json:"dead_letters,omitempty"`
	// Outcomes counts the outcomes stripped, those of intents the outbox
	// no longer holds included.
	Outcomes int `json:"outcomes"`
	// Pending are the key's intents on the outbox, or dead letters, not
	// settled: left as they are.
	Pending []PendingIntent `json:"pending,omitempty"`
	// Unnamed counts what carries no erasure names — stored before weir
	// named them (edge.HeaderErasable) — and so cannot be told to be the
	// key's: messages of the outbox and dead letters, and outcomes.
	Unnamed struct {
		Intents     int `json:"intents,omitempty"`
		DeadLetters int `json:"dead_letters,omitempty"`
		Outcomes    int `json:"outcomes,omitempty"`
	} `json:"unnamed"`
}

// ErasedIntent is an intent erased: its idempotency key (empty for a
// message that was no intent, which the dispatcher never performs), where
// it was, and whether it had been performed.
type ErasedIntent struct {
	Key  string `json:"key,omitempty"`
	Seq  uint64 `json:"seq"`
	Done bool   `json:"done"`
}

// PendingIntent is an intent of an erased key that the dispatcher has not
// settled: its message stays until the stream's max age removes it
// (Until; zero when the stream has none), and its outcome, once recorded,
// holds the key's erasure names until an erasure strips it.
type PendingIntent struct {
	Key    string    `json:"key"`
	Stream string    `json:"stream"`
	Seq    uint64    `json:"seq"`
	Stored time.Time `json:"stored"`
	Until  time.Time `json:"until,omitzero"`
	// DeadLetter: it is a dead letter whose intent is being handed back
	// or filed again (no outcome records it).
	DeadLetter bool `json:"dead_letter,omitempty"`
}

// Erase erases from the outbox of cfg what req reaches of the intents
// caused before it: first each outcome is stripped of the source, the
// provider's answer and the erasure names, then the settled intents'
// messages and dead letters are deleted (overwritten on disk). The intents
// not yet settled are listed as Pending. An intent carries the erasure
// names of the key that caused it (edge.HeaderErasable); it was caused
// before the erasure when its source coordinate is at or below the
// request's mark of that stream — one whose coordinate says nothing is
// taken as caused before.
//
// Outcomes are found by a scan of the whole bucket, which keeps them
// without a max age: an erasure reads every outcome once.
func Erase(ctx context.Context, js jetstream.JetStream, cfg Config, req erasure.Request) (*Erasure, error) {
	e := &Erasure{}
	outcomes, err := js.KeyValue(ctx, cfg.Outcomes)
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound):
		outcomes = nil // no dispatcher has run: every intent is pending
	case err != nil:
		return nil, fmt.Errorf("dispatcher: erase: outcomes %s: %w", cfg.Outcomes, err)
	default:
		if err := e.stripOutcomes(ctx, js, outcomes, req); err != nil {
			return nil, err
		}
	}
	for _, s := range []struct {
		stream, subject string
		dead            bool
	}{{cfg.Stream, cfg.Subjects, false}, {cfg.DeadLetters, cfg.DeadLetterSubject, true}} {
		if err := e.eraseMessages(ctx, js, outcomes, req, s.stream, s.subject, s.dead); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// Again erases, of the intents Erase left pending, those the dispatcher
// has settled since, and keeps the others pending.
func (e *Erasure) Again(ctx context.Context, js jetstream.JetStream, cfg Config) error {
	outcomes, err := js.KeyValue(ctx, cfg.Outcomes)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("dispatcher: erase: outcomes %s: %w", cfg.Outcomes, err)
	}
	pending := e.Pending
	e.Pending = nil
	for _, p := range pending {
		if err := e.settled(ctx, js, outcomes, p); err != nil {
			return err
		}
	}
	return nil
}

// causedBefore reports whether an intent from source was caused before
// req: its coordinate at or below the request's mark of its stream. A
// source that is no coordinate, or of a stream the request does not mark,
// says nothing, and the intent is taken as caused before.
func causedBefore(req erasure.Request, source string) bool {
	at, err := record.ParseCoordinate(source)
	if err != nil {
		return true
	}
	mark, ok := req.Marks[at.Stream]
	return !ok || at.Seq == 0 || at.Seq <= mark
}

// stripOutcomes strips every outcome req reaches.
func (e *Erasure) stripOutcomes(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, req erasure.Request) error {
	w, err := jsapi.WatchKV(ctx, js, kv.Bucket(), ">", jsapi.WatchOptions{IgnoreDeletes: true})
	if err != nil {
		return fmt.Errorf("dispatcher: erase: outcomes: %w", err)
	}
	var keys []string
	for entry := range w.Updates() {
		if entry == nil {
			break // every outcome held at the start
		}
		o, err := DecodeOutcome(entry.Value())
		if err != nil {
			// Already failing: the watcher's own stop error adds nothing.
			_ = w.Stop()
			return fmt.Errorf("dispatcher: erase: outcome %s: %w", entry.Key(), err)
		}
		switch {
		case o.Erased:
		case len(o.Erasable) == 0:
			e.Unnamed.Outcomes++
		case req.Reaches(o.Erasable) && causedBefore(req, o.Source):
			keys = append(keys, entry.Key())
		}
	}
	if err := w.Stop(); err != nil {
		return fmt.Errorf("dispatcher: erase: outcomes: %w", err)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	for _, k := range keys {
		if _, _, err := e.strip(ctx, kv, k); err != nil {
			return err
		}
	}
	return nil
}

// strip rewrites the outcome of key as an erased one, keeping whether and
// how it was settled, and reports it; found is false when there is none
// (an intent pending, or handed back by weir effects retry).
func (e *Erasure) strip(ctx context.Context, kv jetstream.KeyValue, key string) (o Outcome, found bool, err error) {
	for range 10 {
		entry, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return Outcome{}, false, nil
		}
		if err != nil {
			return Outcome{}, false, fmt.Errorf("dispatcher: erase: outcome %s: %w", key, err)
		}
		if o, err = DecodeOutcome(entry.Value()); err != nil {
			return Outcome{}, false, fmt.Errorf("dispatcher: erase: outcome %s: %w", key, err)
		}
		if o.Erased {
			return o, true, nil
		}
		stripped := Outcome{Key: o.Key, Kind: o.Kind, Done: o.Done, Status: o.Status, Attempts: o.Attempts,
			MaybeRepeated: o.MaybeRepeated, At: o.At, Erased: true}
		v, err := EncodeOutcome(stripped)
		if err != nil {
			return Outcome{}, false, err
		}
		// Only over the revision read: weir effects retry may remove it
		// meanwhile, and the intent is pending again.
		_, err = kv.Update(ctx, key, v, entry.Revision())
		if err == nil {
			e.Outcomes++
			return stripped, true, nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return Outcome{}, false, fmt.Errorf("dispatcher: erase: strip outcome %s: %w", key, err)
		}
	}
	return Outcome{}, false, fmt.Errorf("dispatcher: erase: outcome %s changed under ten attempts to strip it", key)
}

// eraseMessages erases, of the messages of stream on subject (the outbox's
// intents, or the dead letters), those req reaches: a settled intent's is
// deleted, a pending one's listed.
func (e *Erasure) eraseMessages(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, req erasure.Request, stream, subject string, dead bool) error {
	st, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("dispatcher: erase: %s: %w", stream, err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return fmt.Errorf("dispatcher: erase: %s: %w", stream, err)
	}
	var total uint64
	for _, n := range info.State.Subjects {
		total += n
	}
	if total == 0 {
		return nil
	}
	// Headers tell whose a message is; only the key's are read whole.
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}, HeadersOnly: true})
	if err != nil {
		return fmt.Errorf("dispatcher: erase: %s: %w", stream, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("dispatcher: erase: %s: %w", stream, err)
	}
	defer it.Stop()
	var matched []uint64
	for {
		// The messages up to the last one looked at are there, but for
		// those the stream's limits remove meanwhile: a scan that waits
		// long for one fails rather than miss any.
		nctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		m, err := it.Next(jetstream.NextContext(nctx))
		cancel()
		if err != nil {
			return fmt.Errorf("dispatcher: erase: read %s: %w", stream, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("dispatcher: erase: read %s: %w", stream, err)
		}
		if meta.Sequence.Stream > info.State.LastSeq {
			break // stored after the scan began
		}
		switch names := m.Headers().Values(edge.HeaderErasable); {
		case len(names) == 0 && dead:
			e.Unnamed.DeadLetters++
		case len(names) == 0:
			e.Unnamed.Intents++
		case req.Reaches(names):
			matched = append(matched, meta.Sequence.Stream)
		}
		if meta.Sequence.Stream >= info.State.LastSeq || meta.NumPending == 0 {
			break
		}
	}
	for _, seq := range matched {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // aged out, or deleted, since the scan
		}
		if err != nil {
			return fmt.Errorf("dispatcher: erase: %s sequence %d: %w", stream, seq, err)
		}
		key, source := m.Header.Get(HeaderIntentKey), m.Header.Get(HeaderSource)
		if !dead {
			in, err := outbox.Decode(m.Data)
			key, source = in.Key, in.Source
			if err != nil {
				key = "" // no intent: the dispatcher files it as is, and never performs it
			}
		}
		if !causedBefore(req, source) {
			continue // the key's since the erasure
		}
		p := PendingIntent{Key: key, Stream: stream, Seq: seq, Stored: m.Time.UTC(), DeadLetter: dead}
		if info.Config.MaxAge > 0 {
			p.Until = p.Stored.Add(info.Config.MaxAge)
		}
		if err := e.settledFrom(ctx, st, kv, p); err != nil {
			return err
		}
	}
	return nil
}

// settled erases p if the dispatcher has settled it, and keeps it pending
// if not.
func (e *Erasure) settled(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, p PendingIntent) error {
	st, err := js.Stream(ctx, p.Stream)
	if err != nil {
		return fmt.Errorf("dispatcher: erase: %s: %w", p.Stream, err)
	}
	return e.settledFrom(ctx, st, kv, p)
}

func (e *Erasure) settledFrom(ctx context.Context, st jetstream.Stream, kv jetstream.KeyValue, p PendingIntent) error {
	done := false
	if p.Key != "" {
		if kv == nil {
			e.Pending = append(e.Pending, p)
			return nil
		}
		o, found, err := e.strip(ctx, kv, p.Key)
		if err != nil {
			return err
		}
		if !found {
			e.Pending = append(e.Pending, p)
			return nil
		}
		done = o.Done
	}
	// The outcome is recorded, and stripped: the message can go.
	if err := st.SecureDeleteMsg(ctx, p.Seq); err != nil {
		// A message the stream's limits removed meanwhile is gone too.
		if _, gerr := st.GetMsg(ctx, p.Seq); !errors.Is(gerr, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("dispatcher: erase: delete %s sequence %d: %w", p.Stream, p.Seq, err)
		}
	}
	erased := ErasedIntent{Key: p.Key, Seq: p.Seq, Done: done}
	if p.DeadLetter {
		e.DeadLetters = append(e.DeadLetters, erased)
	} else {
		e.Intents = append(e.Intents, erased)
	}
	return nil
}
