// Package dispatcher is weir's idempotent dispatcher: it reads intents
// from an outbox stream (package outbox), performs each over HTTP with its
// idempotency key, and records the outcome in a KV bucket before it
// acknowledges the intent.
//
// Each intent is performed until the provider answers it or refuses it:
//
//   - an outcome already recorded for the key means the intent is done —
//     a redelivery after a crash between recording and acknowledging — and
//     it is acknowledged without a call;
//   - otherwise the payload is POSTed to <provider>/<kind> with the header
//     Idempotency-Key: <key>. A crash after the call and before the outcome
//     is recorded makes the next delivery call again with the same key,
//     which a provider honouring idempotency keys applies once;
//   - a 2xx answer is recorded as done; a refusal (4xx other than 408, 409
//     and 429) makes the intent poison: it is filed on the dead-letter
//     stream with its source coordinate and the provider's answer, and
//     recorded as failed;
//   - anything else — 5xx, 408, 409, 429, a timeout, no connection — is
//     retried after an exponential back-off with full jitter, up to
//     MaxAttempts deliveries, after which the intent is filed and recorded
//     as failed too.
//
// An outcome, once recorded, is never removed but by `weir effects retry`
// of a failed intent: it is what makes a redelivered or recomputed intent
// settle without a call. The outcome and a dead letter carry the erasure
// names of the key that caused the intent (edge.HeaderErasable). An
// erasure of that key (Erase, run by weir erase) rewrites the outcome
// stripped of all but whether and how the intent was settled, then deletes
// the intent from the outbox and its dead letter; an intent not yet
// settled is left to be performed, and listed.
//
// At most Concurrency intents are in flight at once. A provider that does
// not honour idempotency keys (Config.KeysIgnored) is called the same way,
// and the outcome of every intent called more than once is marked
// MaybeRepeated: the effects are at least once, and `weir effects
// reconcile` compares the provider's record with the outbox.
package dispatcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/jsapi"
	"github.com/weirflow/weir/outbox"
)

// Config configures a dispatcher.
type Config struct {
	// Stream is the outbox stream and Subjects the filter of its intents
	// (a transactional edge's partitions: weir.<pipeline>.<edge>.*);
	// RetrySubject is one of them, where `weir effects retry` hands a
	// failed intent back.
	Stream, Subjects, RetrySubject string
	// Consumer is the durable consumer's name.
	Consumer string
	// Outcomes is the KV bucket of outcomes, by intent key; DeadLetters
	// the stream, and DeadLetterSubject the subject, of poison intents.
	Outcomes, DeadLetters, DeadLetterSubject string
	// Provider is the base URL the intents are POSTed under.
	Provider string
	// Timeout bounds one call (default 10s).
	Timeout time.Duration
	// Concurrency bounds the intents in flight (default 8).
	Concurrency int
	// MaxAttempts bounds the deliveries of an intent (default 10).
	MaxAttempts int
	// Backoff is the first retry's ceiling, doubling up to MaxBackoff
	// (defaults 200ms and 30s); each wait is drawn at random below it.
	Backoff, MaxBackoff time.Duration
	// KeysIgnored says that the provider does not honour idempotency keys
	// (the contract's sink.provider_keys: ignored): a call repeated after a
	// failure or a crash may be performed again. The dispatcher calls the
	// same way, and marks every intent it called more than once
	// MaybeRepeated, for `weir effects reconcile` to settle.
	KeysIgnored bool
	// Replicas of the buckets and streams it creates (default 1); 0 takes
	// existing ones' as deployed.
	Replicas int
	Logger   *slog.Logger
	// AfterCall, when set, runs after the provider answered and before the
	// outcome is recorded. Failure tests use it to die there.
	AfterCall func(key string)
}

func (c *Config) defaults() {
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Second
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 8
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 10
	}
	if c.Backoff <= 0 {
		c.Backoff = 200 * time.Millisecond
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 30 * time.Second
	}
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Outcome is what happened to an intent, recorded under its key.
type Outcome struct {
	Key      string `json:"key"`
	Kind     string `json:"kind"`
	Source   string `json:"source"`
	Done     bool   `json:"done"`
	Status   int    `json:"status,omitempty"`
	Answer   string `json:"answer,omitempty"`
	Attempts int    `json:"attempts"`
	// MaybeRepeated is set when the provider ignores idempotency keys and
	// the intent was called more than once: it may have happened twice.
	MaybeRepeated bool      `json:"maybe_repeated,omitempty"`
	At            time.Time `json:"at"`
	// Erasable are the erasure names of the key that caused the intent
	// (edge.HeaderErasable), by which an erasure finds the outcome once
	// the intent has aged out of the outbox.
	Erasable []string `json:"erasable,omitempty"`
	// Erased says that an erasure stripped the outcome of its source, the
	// provider's answer and its erasure names (Erase): what is left says
	// only that the intent was settled, and how.
	Erased bool `json:"erased,omitempty"`
}

// Dispatcher performs the intents of one outbox.
type Dispatcher struct {
	cfg      Config
	js       jetstream.JetStream
	outcomes jetstream.KeyValue
	client   *http.Client
}

// Declared is the outcome bucket and the dead-letter stream of cfg's
// dispatcher as weir declares them: what weir provision creates and New
// checks. Replicas 0 leaves existing ones' replicas as deployed.
func Declared(cfg Config) []jsapi.Declared {
	anyReplicas := cfg.Replicas == 0
	cfg.defaults()
	return []jsapi.Declared{
		{Kind: jsapi.KindKeyValue, AnyReplicas: anyReplicas, KV: jetstream.KeyValueConfig{Bucket: cfg.Outcomes,
			Description: "weir dispatcher: the outcome of each intent, by idempotency key", Storage: jetstream.FileStorage, Replicas: cfg.Replicas}},
		{AnyReplicas: anyReplicas, Stream: jetstream.StreamConfig{Name: cfg.DeadLetters, Subjects: []string{cfg.DeadLetterSubject},
			Description: "weir dispatcher: intents the provider refused or that ran out of attempts", Storage: jetstream.FileStorage, Replicas: cfg.Replicas}},
	}
}

// ConsumerConfig is the dispatcher's durable consumer of the outbox as weir
// declares it: what weir provision creates and Run checks.
func ConsumerConfig(cfg Config) jetstream.ConsumerConfig {
	cfg.defaults()
	return jetstream.ConsumerConfig{
		Durable: cfg.Consumer, FilterSubject: cfg.Subjects, AckPolicy: jetstream.AckExplicitPolicy,
		// A delivery outlives its call and the outcome's write; a
		// crashed dispatcher's deliveries come back after it.
		AckWait: 2*cfg.Timeout + 5*time.Second, MaxAckPending: cfg.Concurrency, MaxDeliver: -1,
	}
}

// ConsumerDifferences lists the fields, among those weir declares, in
// which have differs from the dispatcher's consumer as declared. Its ack
// wait must outlast a call (at least the declared one); its bound on
// pending deliveries is left as provisioned, the dispatcher's own
// concurrency bounding its calls.
func ConsumerDifferences(have, want jetstream.ConsumerConfig) []jsapi.Difference {
	var out []jsapi.Difference
	diff := func(field string, h, w any) {
		if hs, ws := fmt.Sprint(h), fmt.Sprint(w); hs != ws {
			out = append(out, jsapi.Difference{Field: field, Have: hs, Want: ws})
		}
	}
	diff("filter_subject", have.FilterSubject, want.FilterSubject)
	diff("filter_subjects", have.FilterSubjects, want.FilterSubjects)
	diff("ack_policy", have.AckPolicy, want.AckPolicy)
	if have.AckWait < want.AckWait {
		out = append(out, jsapi.Difference{Field: "ack_wait", Have: have.AckWait.String(), Want: "at least " + want.AckWait.String()})
	}
	diff("max_deliver", have.MaxDeliver, want.MaxDeliver)
	return out
}

// New opens the outcome bucket and the dead-letter stream after checking
// that they are as declared (jsapi.Check): one that differs is refused,
// never updated; missing ones are created when the server allows.
func New(ctx context.Context, js jetstream.JetStream, cfg Config) (*Dispatcher, error) {
	declared := Declared(cfg)
	cfg.defaults()
	if cfg.Stream == "" || cfg.Consumer == "" || cfg.Outcomes == "" || cfg.DeadLetters == "" || cfg.DeadLetterSubject == "" || cfg.Provider == "" {
		return nil, errors.New("dispatcher: stream, consumer, outcomes, dead letters and provider are required")
	}
	d := &Dispatcher{cfg: cfg, js: js, client: &http.Client{Timeout: cfg.Timeout}}
	for _, decl := range declared {
		if err := jsapi.Check(ctx, js, decl); err != nil {
			return nil, fmt.Errorf("dispatcher: %w", err)
		}
	}
	err := jsapi.Settled(ctx, "open "+cfg.Outcomes, func(ctx context.Context) (err error) {
		d.outcomes, err = js.KeyValue(ctx, cfg.Outcomes)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dispatcher: outcomes %s: %w", cfg.Outcomes, err)
	}
	return d, nil
}

// Outcome returns the outcome recorded for key; jetstream.ErrKeyNotFound
// when none is.
func (d *Dispatcher) Outcome(ctx context.Context, key string) (Outcome, error) {
	return (&Outcomes{kv: d.outcomes}).Get(ctx, key)
}

// Run performs intents until ctx ends.
func (d *Dispatcher) Run(ctx context.Context) error {
	var cons jetstream.Consumer
	for waited := false; ; waited = true {
		var err error
		cons, err = d.consumer(ctx)
		if err == nil {
			break
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return err
		}
		// weir provision, or where none runs the pipeline's result
		// operator, creates the outbox.
		if !waited {
			d.cfg.Logger.Info("waiting for the outbox stream", "stream", d.cfg.Stream)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(d.cfg.Concurrency))
	if err != nil {
		return fmt.Errorf("dispatcher: %w", err)
	}
	go func() {
		<-ctx.Done()
		it.Stop()
	}()
	sem := make(chan struct{}, d.cfg.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		msg, err := it.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			return fmt.Errorf("dispatcher: %w", err)
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := d.handle(ctx, msg); err != nil && ctx.Err() == nil {
				d.cfg.Logger.Warn("intent not settled; it will be delivered again", "subject", msg.Subject(), "err", err)
			}
		}()
	}
}

// consumer looks the dispatcher's durable consumer up and refuses one that
// differs from its declaration (ConsumerConfig) — never updating it: weir
// provision does that — and creates a missing one when the server allows.
func (d *Dispatcher) consumer(ctx context.Context) (jetstream.Consumer, error) {
	want := ConsumerConfig(d.cfg)
	cons, err := d.js.Consumer(ctx, d.cfg.Stream, d.cfg.Consumer)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		cons, err = d.js.CreateConsumer(ctx, d.cfg.Stream, want)
		if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
				err = fmt.Errorf("%w (%w)", err, cause)
			}
			return nil, fmt.Errorf("dispatcher: %w: consumer %s on %s does not exist and this process could not create it: %w; weir provision, run with the pipeline administrator's credentials, creates it from the contract",
				jsapi.ErrMissing, d.cfg.Consumer, d.cfg.Stream, err)
		}
	}
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, err
		}
		return nil, fmt.Errorf("dispatcher: consumer %s on %s: %w", d.cfg.Consumer, d.cfg.Stream, err)
	}
	if diffs := ConsumerDifferences(cons.CachedInfo().Config, want); len(diffs) > 0 {
		return nil, fmt.Errorf("dispatcher: %w", &jsapi.DiffersError{What: "consumer " + d.cfg.Consumer + " of stream " + d.cfg.Stream, Differences: diffs})
	}
	return cons, nil
}

// handle settles one delivery of an intent.
func (d *Dispatcher) handle(ctx context.Context, msg jetstream.Msg) error {
	meta, err := msg.Metadata()
	if err != nil {
		return err
	}
	coordinate := fmt.Sprintf("%s/%s#%d", meta.Stream, msg.Subject(), meta.Sequence.Stream)
	in, err := outbox.Decode(msg.Data())
	if err != nil {
		if err := d.deadLetter(ctx, outbox.Intent{Source: coordinate}, msg.Data(), msg.Headers().Values(edge.HeaderErasable), 0, err.Error()); err != nil {
			return err
		}
		return msg.Term()
	}
	if _, err := d.outcomes.Get(ctx, in.Key); err == nil {
		return msg.Ack() // recorded before: only the acknowledgement was lost
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return err
	}
	attempt := int(meta.NumDelivered)
	status, answer, callErr := d.call(ctx, in)
	if h := d.cfg.AfterCall; h != nil {
		h(in.Key)
	}
	names := msg.Headers().Values(edge.HeaderErasable)
	o := Outcome{Key: in.Key, Kind: in.Kind, Source: in.Source, Status: status, Answer: answer, Attempts: attempt, At: time.Now().UTC(), Erasable: names}
	if d.cfg.KeysIgnored && attempt > 1 {
		// An earlier delivery may have reached the provider — failed,
		// timed out, or died with the dispatcher mid-call — and a provider
		// that ignores keys performs each call.
		o.MaybeRepeated = true
		d.cfg.Logger.Warn("intent called again; the provider ignores idempotency keys, so it may have happened more than once", "key", in.Key, "source", in.Source, "attempt", attempt)
	}
	switch {
	case callErr == nil && status >= 200 && status < 300:
		o.Done = true
		return d.settle(ctx, msg, o)
	case callErr == nil && status >= 400 && status < 500 && status != 408 && status != 409 && status != 429:
		if err := d.deadLetter(ctx, in, msg.Data(), names, status, answer); err != nil {
			return err
		}
		return d.settle(ctx, msg, o)
	case attempt >= d.cfg.MaxAttempts:
		why := answer
		if callErr != nil {
			why = callErr.Error()
		}
		if err := d.deadLetter(ctx, in, msg.Data(), names, status, fmt.Sprintf("no success in %d attempts; last: %s", attempt, why)); err != nil {
			return err
		}
		return d.settle(ctx, msg, o)
	}
	wait := d.backoff(attempt)
	d.cfg.Logger.Info("retrying intent", "key", in.Key, "attempt", attempt, "status", status, "err", callErr, "after", wait)
	return msg.NakWithDelay(wait)
}

// call POSTs the intent's payload with its idempotency key.
func (d *Dispatcher) call(ctx context.Context, in outbox.Intent) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(d.cfg.Provider, "/")+"/"+in.Kind, bytes.NewReader(in.Payload))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Idempotency-Key", in.Key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	return resp.StatusCode, strings.TrimSpace(string(body)), err
}

// settle records the outcome, then acknowledges the intent.
func (d *Dispatcher) settle(ctx context.Context, msg jetstream.Msg, o Outcome) error {
	v, err := EncodeOutcome(o)
	if err != nil {
		return err
	}
	if _, err := d.outcomes.Create(ctx, o.Key, v); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("dispatcher: record outcome of %s: %w", o.Key, err)
	}
	return msg.Ack()
}

// deadLetter files a poison intent with its coordinate, its erasure names
// and the provider's answer; its message ID is the key, so filing it twice
// files it once.
func (d *Dispatcher) deadLetter(ctx context.Context, in outbox.Intent, data []byte, erasable []string, status int, reason string) error {
	if _, err := d.js.PublishMsg(ctx, deadLetterMsg(d.cfg.DeadLetterSubject, in, data, erasable, status, reason)); err != nil {
		return fmt.Errorf("dispatcher: file %s: %w", in.Key, err)
	}
	d.cfg.Logger.Warn("intent filed as dead letter", "key", in.Key, "source", in.Source, "status", status, "reason", reason)
	return nil
}

// backoff is the wait before delivery attempt+1: at random below
// Backoff·2^(attempt-1), at most MaxBackoff (full jitter).
func (d *Dispatcher) backoff(attempt int) time.Duration {
	ceiling := min(d.cfg.Backoff<<min(attempt-1, 20), d.cfg.MaxBackoff)
	return time.Duration(rand.Int64N(int64(ceiling))) + time.Millisecond
}

// ForContract configures the dispatcher of a pipeline whose contract
// declares sink.effect outbox: its outbox is the json edge, read on its
// partition subjects (its commit markers left out); outcomes go to
// <STREAM>_OUTCOMES, dead letters to the stream <STREAM>_DLQ on
// weir.<pipeline>.<edge>-dlq.
func ForContract(c *contracts.Contract, provider string) (Config, error) {
	if c.Sink.Effect != contracts.EffectOutbox {
		return Config{}, fmt.Errorf("dispatcher: contract %s declares sink.effect %s, not outbox: it has no intents to dispatch", c.File, c.Sink.Effect)
	}
	var outs []contracts.Edge
	for _, e := range c.Edges {
		if e.JSON() {
			outs = append(outs, e)
		}
	}
	if len(outs) != 1 {
		return Config{}, fmt.Errorf("dispatcher: contract %s has %d json edges; an outbox pipeline writes its intents to exactly one", c.File, len(outs))
	}
	spec := edge.Spec{Pipeline: c.Pipeline, Edge: outs[0].Name, Partitions: outs[0].Partitions}
	name := spec.StreamName()
	return Config{Stream: name, Subjects: spec.Subjects(), RetrySubject: spec.Subject(0), Consumer: c.Pipeline + "_dispatcher",
		Outcomes: name + "_OUTCOMES", DeadLetters: name + "_DLQ", DeadLetterSubject: "weir." + c.Pipeline + "." + spec.Edge + "-dlq",
		Provider: provider, KeysIgnored: c.Sink.ProviderKeys == contracts.ProviderKeysIgnored}, nil
}
