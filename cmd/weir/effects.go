package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/dispatcher"
	"github.com/weirflow/weir/internal/audit"
	"github.com/weirflow/weir/internal/cli"
	"github.com/weirflow/weir/outbox"
)

const effectsUsage = `usage: weir effects list | retry KEY... | reconcile -provider-records URL|FILE [-json]
                    [-nats URL] [-pipeline NAME] [-contract FILE|NAME]

Inspects the effects of a pipeline whose contract declares sink.effect
outbox. list prints, as JSON lines, the outcome the dispatcher recorded for
every intent (done, or failed with the provider's status and answer) and
every dead letter. retry KEY hands a failed intent back to the dispatcher:
it removes the intent's outcome and puts the intent from its dead letter
back on the outbox, where the dispatcher performs it again with the same
idempotency key.

reconcile compares the provider's own record of what it performed with
the outbox: every intent committed on it up to now, by key. It is how the
user of a provider that cannot take idempotency keys — whose contract can
then promise at-least-once effects only, since a call retried after a
timeout or a crash is performed again — finds out what happened twice or
never. The records are a JSON array of objects with at least a "key"
field, the key sent with the call (as the provider simulator's GET
/effects lists them), read from a URL (http:// or https://) or a file. It
prints "N intents: A once, B twice, C never, D unknown", then a line per
intent performed more than once (with its count), per intent never
performed (with the dispatcher's outcome: done, failed, dead-letter or
pending) and per record whose key is no intent; -json prints that as one
JSON object instead. It exits with status 1 when any intent was performed
more than once or never — an intent still pending counts, so reconcile
once the dispatcher is idle; records of unknown keys (effects someone else
asked for) are reported but do not fail it. An intent weir erase removed
from the outbox is known by its outcome, which the erasure keeps stripped:
its records count as the intent's.
`

// effectsCmd is `weir effects list|retry|reconcile`.
func effectsCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || !slices.Contains([]string{"list", "retry", "reconcile"}, args[0]) {
		return cli.UsageOf(effectsUsage, args, stdout, stderr)
	}
	verb := args[0]
	fs, srv, pipeline := ctlFlags("weir effects "+verb, getenv)
	var records string
	var asJSON bool
	contract := newContractFlag(fs, pipeline, contractUsage)
	actor := new(string)
	if verb == "retry" {
		actor = actorFlag(fs)
	}
	if verb == "reconcile" {
		fs.String(&records, "provider-records", "WEIR_PROVIDER_RECORDS", "", "the provider's record of the effects it performed: a URL or a file of a JSON array of objects with a \"key\"")
		fs.Bool(&asJSON, "json", "WEIR_EFFECTS_JSON", false, "print the report as one JSON object")
	}
	if err := cli.Parse(fs, args[1:], stdout, stderr); err != nil {
		return err
	}
	keys := fs.Args()
	if (verb == "retry" && len(keys) == 0) || (verb == "reconcile" && (records == "" || len(keys) > 0)) {
		return cli.UsageOf(effectsUsage, nil, stdout, stderr)
	}
	c, err := contract.load()
	if err != nil {
		return err
	}
	cfg, err := dispatcher.ForContract(c, "")
	if err != nil {
		return err
	}
	nc, js, err := srv.connect(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	if verb == "reconcile" {
		return reconcileEffects(ctx, js, cfg, records, asJSON, stdout)
	}
	outcomes, err := dispatcher.OpenOutcomes(ctx, js, cfg)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("pipeline %s has no outcomes yet (no bucket %s): no dispatcher has run", c.Pipeline, cfg.Outcomes)
	}
	if err != nil {
		return err
	}
	letters, err := dispatcher.DeadLetters(ctx, js, cfg)
	if err != nil {
		return err
	}
	if verb == "list" {
		return listEffects(ctx, outcomes, letters, stdout)
	}
	for _, k := range keys {
		l, ok := letters[k]
		if !ok {
			return fmt.Errorf("intent %s is not a dead letter of %s: only failed intents are retried", k, cfg.DeadLetters)
		}
		if err := dispatcher.Retry(ctx, js, cfg, l); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "intent %s handed back to the dispatcher (dead letter %d)\n", k, l.Seq)
		if err := recordAct(ctx, js, c.Pipeline, audit.Record{Actor: *actor, Action: audit.ActionEffectRetry, Target: k,
			From: fmt.Sprintf("dead letter %d of %s", l.Seq, cfg.DeadLetters), To: cfg.RetrySubject}, stdout); err != nil {
			return err
		}
	}
	return nil
}

func listEffects(ctx context.Context, outcomes *dispatcher.Outcomes, letters map[string]dispatcher.DeadLetter, w io.Writer) error {
	enc := json.NewEncoder(w)
	keys, err := outcomes.Keys(ctx)
	if err != nil {
		return err
	}
	for _, k := range keys {
		o, err := outcomes.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if err := enc.Encode(struct {
			Outcome dispatcher.Outcome `json:"outcome"`
		}{o}); err != nil {
			return err
		}
	}
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range letters {
			if !yield(k) {
				return
			}
		}
	}) {
		if err := enc.Encode(struct {
			DeadLetter dispatcher.DeadLetter `json:"dead_letter"`
		}{letters[k]}); err != nil {
			return err
		}
	}
	return nil
}

// committedIntent is an intent read from the outbox, at the stream
// sequence of its first message (a retried intent is on it again).
type committedIntent struct {
	outbox.Intent
	seq uint64
}

// committedIntents reads every intent on the outbox stream up to its last
// message at the time of the call, with an ordered consumer on the
// intents' subjects (leaving the commit markers out), decoded as the
// dispatcher decodes them, in the order of their first message; malformed
// counts the messages that are no intent (the dispatcher dead-letters them).
func committedIntents(ctx context.Context, js jetstream.JetStream, cfg dispatcher.Config) (intents []committedIntent, malformed int, err error) {
	st, err := js.Stream(ctx, cfg.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, 0, fmt.Errorf("no outbox stream %s: the pipeline has committed no intent", cfg.Stream)
	}
	if err != nil {
		return nil, 0, err
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(cfg.Subjects))
	if err != nil {
		return nil, 0, err
	}
	var total uint64
	for _, n := range info.State.Subjects {
		total += n
	}
	if total == 0 {
		return nil, 0, nil
	}
	last := info.State.LastSeq
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{cfg.Subjects}})
	if err != nil {
		return nil, 0, err
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, 0, err
	}
	defer it.Stop()
	seen := map[string]bool{}
	for {
		m, err := it.Next(jetstream.NextMaxWait(30 * time.Second))
		if err != nil {
			return nil, 0, fmt.Errorf("read outbox %s: %w", cfg.Stream, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return nil, 0, err
		}
		if meta.Sequence.Stream > last {
			return intents, malformed, nil // committed after the call began
		}
		if in, err := outbox.Decode(m.Data()); err != nil {
			malformed++
		} else if !seen[in.Key] {
			seen[in.Key] = true
			intents = append(intents, committedIntent{Intent: in, seq: meta.Sequence.Stream})
		}
		if meta.Sequence.Stream == last || meta.NumPending == 0 {
			return intents, malformed, nil
		}
	}
}

// providerRecord is what reconcile needs of a provider's record of an
// effect: the key it was sent with.
type providerRecord struct {
	Key *string `json:"key"`
}

// providerKeys reads a provider's records from a URL or a file, and
// returns the key of each, in order.
func providerKeys(ctx context.Context, src string) ([]string, error) {
	var b []byte
	if strings.HasPrefix(src, "http://") || strings.HasPrefix(src, "https://") {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, src, nil)
		if err != nil {
			return nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, fmt.Errorf("provider records: %w", err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("provider records: GET %s: %s", src, resp.Status)
		}
		if b, err = io.ReadAll(resp.Body); err != nil {
			return nil, fmt.Errorf("provider records: GET %s: %w", src, err)
		}
	} else {
		var err error
		if b, err = os.ReadFile(src); err != nil {
			return nil, fmt.Errorf("provider records: %w", err)
		}
	}
	var records []providerRecord
	if err := json.Unmarshal(b, &records); err != nil {
		return nil, fmt.Errorf("provider records %s are not a JSON array of objects: %w", src, err)
	}
	keys := make([]string, len(records))
	for i, r := range records {
		if r.Key == nil {
			return nil, fmt.Errorf("provider records %s: record %d has no \"key\"", src, i)
		}
		keys[i] = *r.Key
	}
	return keys, nil
}

// reconciled is an intent the provider performed more than once, or never.
type reconciled struct {
	Key       string `json:"key"`
	Kind      string `json:"kind"`
	Source    string `json:"source"`
	Performed int    `json:"performed"`
	// Outcome is what the dispatcher recorded: done, failed, dead-letter
	// (filed, its outcome not recorded or removed by retry) or pending.
	Outcome string `json:"outcome"`
	Reason  string `json:"reason,omitempty"`
}

// unknownKey is a key of provider records that is no intent's.
type unknownKey struct {
	Key       string `json:"key"`
	Performed int    `json:"performed"`
}

// reconcileReport is what `weir effects reconcile -json` prints.
type reconcileReport struct {
	Intents   int          `json:"intents"`
	Records   int          `json:"provider_records"`
	Once      int          `json:"once"`
	Twice     []reconciled `json:"twice"`
	Never     []reconciled `json:"never"`
	Unknown   []unknownKey `json:"unknown"`
	Malformed int          `json:"malformed,omitempty"`
	// Erased counts, among the intents, those weir erase removed from the
	// outbox: the provider's records of them are told from someone else's
	// by their outcomes, which an erasure keeps.
	Erased int `json:"erased,omitempty"`
}

// reconcileEffects is `weir effects reconcile`.
func reconcileEffects(ctx context.Context, js jetstream.JetStream, cfg dispatcher.Config, src string, asJSON bool, w io.Writer) error {
	intents, malformed, err := committedIntents(ctx, js, cfg)
	if err != nil {
		return err
	}
	keys, err := providerKeys(ctx, src)
	if err != nil {
		return err
	}
	performed := map[string]int{}
	var order []string // provider keys in the order of their first record
	for _, k := range keys {
		if performed[k] == 0 {
			order = append(order, k)
		}
		performed[k]++
	}
	rep := reconcileReport{Intents: len(intents), Records: len(keys), Malformed: malformed,
		Twice: []reconciled{}, Never: []reconciled{}, Unknown: []unknownKey{}}
	known := map[string]bool{}
	for _, in := range intents {
		known[in.Key] = true
		n := performed[in.Key]
		switch {
		case n == 1:
			rep.Once++
		case n > 1:
			rep.Twice = append(rep.Twice, reconciled{Key: in.Key, Kind: in.Kind, Source: in.Source, Performed: n})
		default:
			rep.Never = append(rep.Never, reconciled{Key: in.Key, Kind: in.Kind, Source: in.Source})
		}
	}
	erased, err := erasedOutcomes(ctx, js, cfg, order, known)
	if err != nil {
		return err
	}
	for _, k := range order {
		o, gone := erased[k]
		switch {
		case known[k]:
		case gone && performed[k] == 1:
			rep.Intents, rep.Erased, rep.Once = rep.Intents+1, rep.Erased+1, rep.Once+1
		case gone:
			rep.Intents, rep.Erased = rep.Intents+1, rep.Erased+1
			rep.Twice = append(rep.Twice, reconciled{Key: k, Kind: o.Kind, Performed: performed[k]})
		default:
			rep.Unknown = append(rep.Unknown, unknownKey{Key: k, Performed: performed[k]})
		}
	}
	if len(rep.Twice)+len(rep.Never) > 0 {
		if err := explainOutcomes(ctx, js, cfg, rep.Twice, rep.Never); err != nil {
			return err
		}
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		printReconcile(w, rep)
	}
	if n := len(rep.Twice) + len(rep.Never); n > 0 {
		return fmt.Errorf("%d discrepancies: %d intents performed more than once, %d never performed", n, len(rep.Twice), len(rep.Never))
	}
	return nil
}

// erasedOutcomes are the outcomes, among those of the provider's keys no
// intent of the outbox has, that an erasure stripped (dispatcher.Erase):
// of intents erased from the outbox.
func erasedOutcomes(ctx context.Context, js jetstream.JetStream, cfg dispatcher.Config, keys []string, known map[string]bool) (map[string]dispatcher.Outcome, error) {
	out := map[string]dispatcher.Outcome{}
	outcomes, err := dispatcher.OpenOutcomes(ctx, js, cfg)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		if known[k] {
			continue
		}
		o, err := outcomes.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
			continue // someone else's: no intent ever had this key
		}
		if err != nil {
			return nil, err
		}
		if o.Erased {
			out[k] = o
		}
	}
	return out, nil
}

// explainOutcomes fills in the dispatcher's outcome of each intent listed.
func explainOutcomes(ctx context.Context, js jetstream.JetStream, cfg dispatcher.Config, lists ...[]reconciled) error {
	letters, err := dispatcher.DeadLetters(ctx, js, cfg)
	if err != nil {
		return err
	}
	outcomes, err := dispatcher.OpenOutcomes(ctx, js, cfg)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		outcomes = nil // no dispatcher has run: every intent is pending
	} else if err != nil {
		return err
	}
	for _, l := range lists {
		for i := range l {
			r := &l[i]
			r.Outcome = "pending"
			letter, filed := letters[r.Key]
			if filed {
				r.Outcome, r.Reason = "dead-letter", strings.TrimSpace(letter.Status+" "+letter.Reason)
			}
			if outcomes == nil {
				continue
			}
			o, err := outcomes.Get(ctx, r.Key)
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			switch {
			case o.Erased && o.Done:
				r.Outcome, r.Reason = "done", "erased from the outbox by weir erase"
			case o.Done:
				r.Outcome, r.Reason = "done", ""
			case !filed:
				r.Outcome, r.Reason = "failed", strings.TrimSpace(fmt.Sprintf("%d %s", o.Status, o.Answer))
			default:
				r.Outcome = "failed"
			}
		}
	}
	return nil
}

func printReconcile(w io.Writer, rep reconcileReport) {
	fmt.Fprintf(w, "%d intents: %d once, %d twice, %d never, %d unknown (%d provider records)\n",
		rep.Intents, rep.Once, len(rep.Twice), len(rep.Never), len(rep.Unknown), rep.Records)
	if rep.Malformed > 0 {
		fmt.Fprintf(w, "(%d messages on the outbox are no intent; the dispatcher files them as dead letters)\n", rep.Malformed)
	}
	if rep.Erased > 0 {
		fmt.Fprintf(w, "(%d of the intents were erased from the outbox by weir erase: found by their outcomes, which it keeps; one erased before it was performed is not counted)\n", rep.Erased)
	}
	outcome := func(r reconciled) string {
		if r.Reason == "" {
			return r.Outcome
		}
		return r.Outcome + ": " + r.Reason
	}
	for _, r := range rep.Twice {
		fmt.Fprintf(w, "twice    %s performed %d times  %s from %s  dispatcher: %s\n", r.Key, r.Performed, r.Kind, r.Source, outcome(r))
	}
	for _, r := range rep.Never {
		fmt.Fprintf(w, "never    %s never performed  %s from %s  dispatcher: %s\n", r.Key, r.Kind, r.Source, outcome(r))
	}
	for _, u := range rep.Unknown {
		times := "once"
		if u.Performed > 1 {
			times = fmt.Sprintf("%d times", u.Performed)
		}
		fmt.Fprintf(w, "unknown  %q performed %s: no intent of the outbox has this key\n", u.Key, times)
	}
}
