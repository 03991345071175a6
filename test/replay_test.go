package test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/dispatcher"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/status"
	"github.com/weirflow/weir/pkg/ingress"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/pkg/view"
	"github.com/weirflow/weir/pkg/window"
	"github.com/weirflow/weir/services/dedup"
	"github.com/weirflow/weir/services/provider"
)

// replayRun is one pipeline of TestReplayFromASavepointAddsNothing.
type replayRun struct {
	c         *contracts.Contract
	factories map[string]stream.Factory
	feed      func()
	// done says whether a run's output is complete: the first run's, and
	// then the replay's, which recomputes it all.
	done func(p *streamtest.Pipeline, replay bool) error
}

// replayTwice runs r's pipeline with a coordinator, takes savepoint
// "start" before any input, feeds the input and waits for the output;
// then stops the pipeline, lets every duplicate window of its streams
// pass, restores the savepoint on new hosts and runs the pipeline again:
// it replays the whole input.
func replayTwice(t *testing.T, srv *natstest.Server, r replayRun) (first, second *streamtest.Pipeline) {
	t.Helper()
	ctx := context.Background()
	js := srv.JetStream(t)
	nc := srv.Connect(t)
	// The ingress exists before any input, as a producer's stream would:
	// the operators register once they read it.
	if _, err := ingress.Create(ctx, js, r.c.Ingress, 1); err != nil {
		t.Fatal(err)
	}
	p1 := streamtest.Run(t, srv.ClientURL(), r.c, t.TempDir(), r.factories)
	_, stopCo := runCoordinator(t, srv.ClientURL(), r.c, "co-1")
	streamtest.CheckFor(t, time.Minute, func() error {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		rec, err := checkpoint.Ask(ctx, nc, r.c.Pipeline, checkpoint.Request{Savepoint: "start"})
		cancel()
		if err != nil || rec.Status != checkpoint.Complete {
			return fmt.Errorf("savepoint start: %s %s %v", rec.Status, rec.Reason, err)
		}
		return nil
	})
	r.feed()
	streamtest.CheckFor(t, 90*time.Second, func() error { return r.done(p1, false) })
	p1.Stop()
	stopCo()

	// The duplicate window of every stream of the pipeline passes: a
	// replay cannot lean on it.
	prefix := "WEIR_" + strings.ToUpper(strings.ReplaceAll(r.c.Pipeline, "-", "_")) + "_"
	var shortened []jetstream.StreamConfig
	for name := range js.StreamNames(ctx).Name() {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		cfg := st.CachedInfo().Config
		if cfg.Duplicates == 0 {
			continue
		}
		shortened = append(shortened, cfg)
		cfg.Duplicates = 100 * time.Millisecond
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			t.Fatalf("shorten the duplicate window of %s: %v", name, err)
		}
	}
	time.Sleep(2 * time.Second) // the shortened window itself, passing
	// And back as declared, the IDs it held forgotten: the replay's
	// processes refuse a stream that is not as its contract declares.
	for _, cfg := range shortened {
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			t.Fatalf("restore the duplicate window of %s: %v", cfg.Name, err)
		}
	}

	store, err := checkpoint.Open(ctx, js, r.c.Pipeline, 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := stream.RestoreSavepoint(ctx, store, "start", dir); err != nil {
		t.Fatal(err)
	}
	p2 := streamtest.Run(t, srv.ClientURL(), r.c, dir, r.factories)
	runCoordinator(t, srv.ClientURL(), r.c, "co-2")
	streamtest.CheckFor(t, 90*time.Second, func() error { return r.done(p2, true) })
	return p1, p2
}

// replayed says whether a replay's result operator has read all the first
// run's input again and dealt with the results it recomputed: released
// them, or recognized them as stored.
func replayed(s status.Stats, firstIn int64, results int) error {
	if s.In < firstIn || s.Released+s.AlreadyStored < int64(results) || s.HeldEpochs > 0 {
		return fmt.Errorf("the replay has read %d of %d records, released %d and recognized %d of %d results, and holds %d epochs",
			s.In, firstIn, s.Released, s.AlreadyStored, results, s.HeldEpochs)
	}
	return nil
}

// TestReplayFromASavepointAddsNothing replays a pipeline's whole input
// from a savepoint taken before it, long after the first run — every
// duplicate window passed — for each kind of sink that promises each
// result once: the transactional result stream holds each result once
// (the replay recognizes what its writer stored by the results' IDs), the
// outbox holds each intent once and the provider performed each effect
// once, and the view is what it was (every replayed version rejected as
// not newer).
func TestReplayFromASavepointAddsNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("runs pipelines twice")
	}
	t.Run("transactional", func(t *testing.T) {
		t.Parallel()
		srv := natstest.Run(t)
		js := srv.JetStream(t)
		c := transactional(t)
		feed, want := inSlices(t, js, c, 1000, 1)
		var firstIn int64
		_, p2 := replayTwice(t, srv, replayRun{c: c, factories: dedup.Factories(), feed: func() { feed(0) },
			done: func(p *streamtest.Pipeline, replay bool) error {
				s := p.ByID["publish"].Stats()
				if replay {
					return replayed(s, firstIn, len(want))
				}
				firstIn = s.In
				ids, _, _ := committed(t, js, c)
				return checkExactlyOnce(want, ids)
			}})
		ids, _, markers := committed(t, js, c)
		if err := checkExactlyOnce(want, ids); err != nil {
			t.Fatalf("after the replay: %v", err)
		}
		if s := p2.ByID["publish"].Stats(); s.AlreadyStored < int64(len(want)) {
			t.Errorf("the replay recognized %d of %d stored results", s.AlreadyStored, len(want))
		}
		t.Logf("replayed %d events from a savepoint before them: %d results once each, under %d markers", len(want), len(ids), markers)
	})
	t.Run("outbox", func(t *testing.T) {
		t.Parallel()
		srv := natstest.Run(t)
		js := srv.JetStream(t)
		c := loadContract(t)
		c.Sink.Effect, c.Sink.MaxPendingEpochs = contracts.EffectOutbox, 2
		feed, want := inSlices(t, js, c, 1000, 1)
		p := provider.New()
		hs := httptest.NewServer(p)
		defer hs.Close()
		cfg, err := dispatcher.ForContract(c, hs.URL)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Logger = testLogger(t)
		d, err := dispatcher.New(context.Background(), js, cfg)
		if err != nil {
			t.Fatal(err)
		}
		runUntilCleanup(t, "dispatcher", d.Run)
		factories := map[string]stream.Factory{"dedup": dedup.Factories()["dedup"], "publish": intentsOperator(c.Pipeline)}
		outbox := func() int { return len(streamtest.Messages(t, js, cfg.Stream)) }
		var stored, requests int
		var firstIn int64
		_, p2 := replayTwice(t, srv, replayRun{c: c, factories: factories, feed: func() { feed(0) },
			done: func(pl *streamtest.Pipeline, replay bool) error {
				s := pl.ByID["publish"].Stats()
				if replay {
					return replayed(s, firstIn, len(want))
				}
				if len(p.Effects()) < len(want) {
					return fmt.Errorf("%d of %d effects performed", len(p.Effects()), len(want))
				}
				firstIn, stored, requests = s.In, outbox(), p.Requests()
				return nil
			}})
		if n := outbox(); n != stored {
			t.Fatalf("the outbox held %d messages before the replay and %d after", stored, n)
		}
		if len(p.Effects()) != len(want) || p.Requests() != requests {
			t.Fatalf("%d effects for %d intents, %d requests (%d before the replay)", len(p.Effects()), len(want), p.Requests(), requests)
		}
		if s := p2.ByID["publish"].Stats(); s.AlreadyStored < int64(len(want)) {
			t.Errorf("the replay recognized %d of %d stored intents", s.AlreadyStored, len(want))
		}
		t.Logf("replayed %d events: the outbox kept its %d messages, the provider its %d effects", len(want), stored, len(p.Effects()))
	})
	t.Run("view", func(t *testing.T) {
		t.Parallel()
		q := queries["q7"]
		srv := natstest.Run(t)
		js := srv.JetStream(t)
		c, err := contracts.Shipped(q.contract)
		if err != nil {
			t.Fatal(err)
		}
		c.Sink.Effect = contracts.EffectVersionedUpsert
		ctx := context.Background()
		result := c.Operators[len(c.Operators)-1]
		var want map[string]window.Pane
		var firstOut int64
		var revision uint64
		lastRevision := func() uint64 {
			st, err := js.Stream(ctx, "KV_"+view.Bucket(c.Pipeline, result.Output))
			if err != nil {
				t.Fatal(err)
			}
			info, err := st.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return info.State.LastSeq
		}
		sameAsReference := func() error {
			v, err := view.Open(ctx, js, c.Pipeline, result.Output)
			if err != nil {
				return err
			}
			return sameView(ctx, v, want)
		}
		replayTwice(t, srv, replayRun{c: c, factories: q.factories,
			feed: func() {
				script := corpus(t, js, c, q.input)
				spec, err := window.FromContract(q.shape, c.Emission)
				if err != nil {
					t.Fatal(err)
				}
				panes, _, err := window.Evaluate(spec, q.agg, func(r record.Record) []byte { return r.Key }, script)
				if err != nil {
					t.Fatal(err)
				}
				want = newestPanes(t, panes)
			},
			done: func(p *streamtest.Pipeline, replay bool) error {
				s := p.ByID[result.ID].Stats()
				if !replay {
					// The revision is read once the view holds every newest
					// pane: read before, it can miss the last pane's write.
					if err := sameAsReference(); err != nil {
						return err
					}
					firstOut, revision = s.Out, lastRevision()
					return nil
				}
				if s.Out < firstOut || s.StaleVersions < s.Out {
					return fmt.Errorf("the replay emitted %d of the first run's %d panes, %d rejected as not newer", s.Out, firstOut, s.StaleVersions)
				}
				return nil
			}})
		if err := sameAsReference(); err != nil {
			t.Fatalf("after the replay: %v", err)
		}
		if r := lastRevision(); r != revision {
			t.Fatalf("the view's bucket was at revision %d before the replay and %d after", revision, r)
		}
		t.Logf("replayed the corpus: %d panes again, each rejected; the view kept its %d windows at revision %d", firstOut, len(want), revision)
	})
}
