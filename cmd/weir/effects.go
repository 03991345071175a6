package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/dispatcher"
)

const effectsUsage = `usage: weir effects list | retry KEY...  [-nats URL] [-pipeline NAME] [-contract FILE|NAME]

Inspects the effects of a pipeline whose contract declares sink.effect
outbox. list prints, as JSON lines, the outcome the dispatcher recorded for
every intent (done, or failed with the provider's status and answer) and
every dead letter. retry KEY hands a failed intent back to the dispatcher:
it removes the intent's outcome and puts the intent from its dead letter
back on the outbox, where the dispatcher performs it again with the same
idempotency key.
`

// effectsCmd is `weir effects list|retry`.
func effectsCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "list" && args[0] != "retry") {
		return usageOf(effectsUsage, args, stdout, stderr)
	}
	verb := args[0]
	fs, url, pipeline := ctlFlags("weir effects "+verb, getenv)
	var contract string
	fs.String(&contract, "contract", "WEIR_CONTRACT", "", "the pipeline's contract: a file or a shipped contract's name (default: the shipped contract of -pipeline)")
	if err := parse(fs, args[1:], stdout, stderr); err != nil {
		return err
	}
	keys := fs.Args()
	if verb == "retry" && len(keys) == 0 {
		return usageOf(effectsUsage, nil, stdout, stderr)
	}
	c, err := statusContract(contract, *pipeline, fs.Given("pipeline"))
	if err != nil {
		return err
	}
	cfg, err := dispatcher.ForContract(c, "")
	if err != nil {
		return err
	}
	nc, js, err := connect(*url)
	if err != nil {
		return err
	}
	defer nc.Close()
	outcomes, err := js.KeyValue(ctx, cfg.Outcomes)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("pipeline %s has no outcomes yet (no bucket %s): no dispatcher has run", c.Pipeline, cfg.Outcomes)
	}
	if err != nil {
		return err
	}
	letters, err := deadIntents(ctx, js, cfg.DeadLetters)
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
		if err := outcomes.Delete(ctx, k); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return err
		}
		m := nats.NewMsg(cfg.RetrySubject)
		m.Data = l.Data
		m.Header.Set("Weir-Retry", strconv.FormatUint(l.Seq, 10))
		if _, err := js.PublishMsg(ctx, m); err != nil {
			return fmt.Errorf("retry %s: %w", k, err)
		}
		fmt.Fprintf(stdout, "intent %s handed back to the dispatcher (dead letter %d)\n", k, l.Seq)
	}
	return nil
}

// deadIntent is a dead letter of the dispatcher.
type deadIntent struct {
	Seq    uint64          `json:"seq"`
	Key    string          `json:"key"`
	Source string          `json:"source"`
	Status string          `json:"status"`
	Reason string          `json:"reason"`
	Data   json.RawMessage `json:"intent"`
}

// deadIntents reads the dispatcher's dead letters, by intent key.
func deadIntents(ctx context.Context, js jetstream.JetStream, stream string) (map[string]deadIntent, error) {
	out := map[string]deadIntent{}
	st, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		d := deadIntent{Seq: seq, Key: m.Header.Get("Weir-Intent-Key"), Source: m.Header.Get("Weir-Source"),
			Status: m.Header.Get("Weir-Status"), Reason: m.Header.Get("Weir-Reason")}
		if json.Valid(m.Data) {
			d.Data = m.Data
		}
		out[d.Key] = d
	}
	return out, nil
}

func listEffects(ctx context.Context, outcomes jetstream.KeyValue, letters map[string]deadIntent, w io.Writer) error {
	enc := json.NewEncoder(w)
	lister, err := outcomes.ListKeys(ctx)
	if err != nil {
		return err
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		e, err := outcomes.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		var o dispatcher.Outcome
		if err := json.Unmarshal(e.Value(), &o); err != nil {
			return fmt.Errorf("outcome %s: %w", k, err)
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
			DeadLetter deadIntent `json:"dead_letter"`
		}{letters[k]}); err != nil {
			return err
		}
	}
	return nil
}
