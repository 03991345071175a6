package dispatcher_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/dispatcher"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/erasure"
	"github.com/weirflow/weir/outbox"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/services/provider"
)

// stored is an intent put on the outbox: its key and stream sequence.
type stored struct {
	key string
	seq uint64
	in  outbox.Intent
}

// putIntent stores the intent the record at source sequence at causes,
// with the erasure names given, on the outbox, as a writer does.
func putIntent(t *testing.T, js jetstream.JetStream, at uint64, names []string) stored {
	t.Helper()
	c := record.Coordinate{Stream: "AUCTIONS", Subject: "auctions.0", Seq: at}
	in := outbox.Intent{Key: outbox.Key("t", "close", c, 0), Kind: "charges",
		Payload: json.RawMessage(fmt.Sprintf(`{"auction":%d,"bidder":"someone"}`, at)), Source: c.String()}
	return putAgain(t, js, in, names)
}

// putAgain stores an intent on the outbox again, as a writer restored
// from an older snapshot does when it recomputes it.
func putAgain(t *testing.T, js jetstream.JetStream, in outbox.Intent, names []string) stored {
	t.Helper()
	r, err := in.Record(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg("weir.t.intents.0")
	m.Data = r.Value
	if len(names) > 0 {
		m.Header[edge.HeaderErasable] = names
	}
	ack, err := js.PublishMsg(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	return stored{key: in.Key, seq: ack.Sequence, in: in}
}

// settle runs the dispatcher until want's intents have outcomes and it has
// acknowledged everything, then stops it.
func settle(t *testing.T, js jetstream.JetStream, cfg dispatcher.Config, want ...stored) {
	t.Helper()
	d, err := dispatcher.New(context.Background(), js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	streamtest.CheckFor(t, 30*time.Second, func() error {
		for _, s := range want {
			if _, err := d.Outcome(ctx, s.key); err != nil {
				return fmt.Errorf("intent %s: %v", s.key, err)
			}
		}
		cons, err := js.Consumer(ctx, outboxStream, cfg.Consumer)
		if err != nil {
			return err
		}
		info, err := cons.Info(ctx)
		if err != nil || info.NumPending > 0 || info.NumAckPending > 0 {
			return fmt.Errorf("the dispatcher has %d intents to deliver and %d unacknowledged (%v)", info.NumPending, info.NumAckPending, err)
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestEraseStripsOutcomesAndKeepsEffectsOnce: the dispatcher has performed
// alice's and bob's intents, refused one of alice's (a dead letter) and
// one intent carries no erasure names; one of alice's is still pending,
// and one was caused after the erasure's mark. Erasing alice deletes her
// settled intents and her dead letter from their streams and strips their
// outcomes — kept, so each is still settled — lists the pending one with
// when it ages out, and leaves bob's, the later one and the unnamed one,
// which it counts. Then one of her erased intents is stored again, as a
// restore recomputing it would: run against a provider that performs
// every call anew, the dispatcher performs the pending intent once and
// the recomputed one not again. Erased again, the now settled intent
// goes too.
func TestEraseStripsOutcomesAndKeepsEffectsOnce(t *testing.T) {
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: outboxStream, Subjects: []string{subjects}, MaxAge: 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	p := provider.New()
	hs := httptest.NewServer(p)
	defer hs.Close()
	cfg := config(hs.URL)
	cfg.Logger = slog.New(slog.DiscardHandler)
	alice, bob := erasure.Names([]byte("alice"), ""), erasure.Names([]byte("bob"), "")
	req := erasure.Request{Key: []byte("alice"), Marks: map[string]uint64{"AUCTIONS": 10}}

	// Refused first, alone, so that the provider refuses this one.
	control(t, hs.URL, provider.Control{IgnoreKeys: true, Refuse: 1})
	refused := putIntent(t, js, 1, alice)
	settle(t, js, cfg, refused)
	control(t, hs.URL, provider.Control{IgnoreKeys: true})
	a1, a2, b1 := putIntent(t, js, 2, alice), putIntent(t, js, 3, alice), putIntent(t, js, 4, bob)
	later, unnamed := putIntent(t, js, 11, alice), putIntent(t, js, 5, nil)
	settle(t, js, cfg, a1, a2, b1, later, unnamed)
	pending := putIntent(t, js, 6, alice)

	e, err := dispatcher.Erase(ctx, js, cfg, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("erasure: %+v", e)
	var erasedKeys []string
	for _, i := range e.Intents {
		erasedKeys = append(erasedKeys, i.Key)
		if i.Done != (i.Key != refused.key) {
			t.Errorf("intent %s erased as done %v", i.Key, i.Done)
		}
	}
	if want := []string{refused.key, a1.key, a2.key}; !slices.Equal(erasedKeys, want) {
		t.Errorf("erased intents %v, want alice's settled ones %v", erasedKeys, want)
	}
	if len(e.DeadLetters) != 1 || e.DeadLetters[0].Key != refused.key || e.Outcomes != 3 {
		t.Errorf("dead letters erased %+v, %d outcomes stripped; want the refused intent's, and 3", e.DeadLetters, e.Outcomes)
	}
	if len(e.Pending) != 1 || e.Pending[0].Key != pending.key || e.Pending[0].Seq != pending.seq ||
		!e.Pending[0].Until.Equal(e.Pending[0].Stored.Add(24*time.Hour)) {
		t.Errorf("pending %+v, want intent %s at %d, until it ages out a day after it was stored", e.Pending, pending.key, pending.seq)
	}
	if e.Unnamed.Intents != 1 || e.Unnamed.Outcomes != 1 {
		t.Errorf("unnamed %+v, want one intent and its outcome", e.Unnamed)
	}

	st, err := js.Stream(ctx, outboxStream)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []stored{refused, a1, a2} {
		if _, err := st.GetMsg(ctx, s.seq); !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Errorf("intent %s is still on the outbox at %d: %v", s.key, s.seq, err)
		}
	}
	for _, s := range []stored{b1, later, unnamed, pending} {
		if _, err := st.GetMsg(ctx, s.seq); err != nil {
			t.Errorf("intent %s at %d: %v, want it kept", s.key, s.seq, err)
		}
	}
	if letters := streamtest.Messages(t, js, cfg.DeadLetters); len(letters) != 0 {
		t.Errorf("%d dead letters left, want the erased one gone", len(letters))
	}
	outcomes, err := dispatcher.OpenOutcomes(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	outcome := func(key string) dispatcher.Outcome {
		t.Helper()
		o, err := outcomes.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	for _, s := range []stored{refused, a1, a2} {
		if o := outcome(s.key); !o.Erased || o.Source != "" || o.Answer != "" || o.Erasable != nil || o.Done != (s.key != refused.key) {
			t.Errorf("outcome of %s: %+v, want it stripped, and still saying whether it was done", s.key, o)
		}
	}
	for _, s := range []stored{b1, later} {
		if o := outcome(s.key); o.Erased || o.Source == "" || len(o.Erasable) == 0 {
			t.Errorf("outcome of %s: %+v, want it whole", s.key, o)
		}
	}

	// a1 stored again, as recomputed by a restore: it finds its outcome.
	again := putAgain(t, js, a1.in, alice)
	settle(t, js, cfg, pending, again)
	if err := performedOnce(p, []string{a1.key, a2.key, b1.key, later.key, unnamed.key, pending.key}); err != nil {
		t.Fatal(err)
	}
	if err := e.Again(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	if len(e.Pending) != 0 || len(e.Intents) != 4 || e.Intents[3].Key != pending.key || !e.Intents[3].Done {
		t.Errorf("after erasing again: pending %+v, erased %+v; want the pending intent erased, done", e.Pending, e.Intents)
	}
	if o := outcome(pending.key); !o.Erased || !o.Done {
		t.Errorf("outcome of the formerly pending intent: %+v, want it stripped", o)
	}
}

// TestEraseATenantReachesItsKeysIntents: an intent caused by a tenant's
// key carries the names of both, and erasing the tenant reaches it as an
// erasure of the key does; another tenant's is left.
func TestEraseATenantReachesItsKeysIntents(t *testing.T) {
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: outboxStream, Subjects: []string{subjects}}); err != nil {
		t.Fatal(err)
	}
	p := provider.New()
	hs := httptest.NewServer(p)
	defer hs.Close()
	cfg := config(hs.URL)
	cfg.Logger = slog.New(slog.DiscardHandler)
	acme, globex := putIntent(t, js, 1, erasure.Names([]byte("acme\x1ealice"), "acme")), putIntent(t, js, 2, erasure.Names([]byte("globex\x1ealice"), "globex"))
	settle(t, js, cfg, acme, globex)
	e, err := dispatcher.Erase(ctx, js, cfg, erasure.Request{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Intents) != 1 || e.Intents[0].Key != acme.key || e.Outcomes != 1 || len(e.Pending) != 0 {
		t.Errorf("erasing tenant acme: %+v, want acme's intent alone", e)
	}
}
