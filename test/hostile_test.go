package test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/pkg/telemetry"
	"github.com/weirflow/weir/pkg/window"
	"github.com/weirflow/weir/services/dedup"
	nexmarkgen "github.com/weirflow/weir/services/nexmark-gen"
	q7 "github.com/weirflow/weir/services/nexmark-q7"
)

// hostile is one adversarial ingress message. A bad one names the field
// each pipeline must dead-letter it for; a good one carries IDs that must
// come out once each, however close they are to another event's.
type hostile struct {
	name string
	// build makes the message from a valid bid of the corpus published
	// just before it (its partition, time and auction).
	build func(bid nexmark.Event) ([]byte, nats.Header)
	// field is the envelope field both pipelines name in the dead letter;
	// empty for a valid event.
	field string
	// q7Side: q7's contract routes future times to the side output.
	q7Side bool
	// ids of a valid event (more than one: twins published together).
	ids []string
}

// bidWith re-encodes bid under another ID, or with a field replaced by raw
// JSON text.
func bidWith(t *testing.T, bid nexmark.Event, id string, replace ...string) []byte {
	t.Helper()
	bid.ID = id
	b, err := bid.Encode()
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for i := 0; i+1 < len(replace); i += 2 {
		if !strings.Contains(s, replace[i]) {
			t.Fatalf("%s holds no %s", s, replace[i])
		}
		s = strings.Replace(s, replace[i], replace[i+1], 1)
	}
	return []byte(s)
}

func hostileCases(t *testing.T) []hostile {
	ts := func(bid nexmark.Event) string { return fmt.Sprintf(`"ts":%d`, bid.TS) }
	withTS := func(name, raw string) hostile {
		return hostile{name: name, field: "event_time", build: func(b nexmark.Event) ([]byte, nats.Header) {
			return bidWith(t, b, "bad-"+name, ts(b), `"ts":`+raw), nil
		}}
	}
	raw := func(name, field string, data string) hostile {
		return hostile{name: name, field: field, build: func(nexmark.Event) ([]byte, nats.Header) { return []byte(data), nil }}
	}
	long := strings.Repeat("x", 3000)
	cases := []hostile{
		// Times that used to wrap into another century.
		withTS("584-years-ago", fmt.Sprint(time.Date(1442, 3, 1, 0, 0, 0, 0, time.UTC).UnixMilli())),
		withTS("past-int64", "9223372036854775808"),
		withTS("float-past-int64", "1e19"),
		withTS("not-a-time", `"yesterday"`),
		{name: "year-3000", field: "event_time", q7Side: true, build: func(b nexmark.Event) ([]byte, nats.Header) {
			return bidWith(t, b, "bad-year-3000", ts(b), fmt.Sprintf(`"ts":%d`, time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())), nil
		}},
		// Identities a decoder would normalise into another's.
		{name: "invalid-utf8-id", field: "id", build: func(b nexmark.Event) ([]byte, nats.Header) {
			return bidWith(t, b, "bad-utf8", `"bad-utf8"`, "\"bad-\xff\""), nil
		}},
		{name: "invalid-utf8-id-twin", field: "id", build: func(b nexmark.Event) ([]byte, nats.Header) {
			return bidWith(t, b, "bad-utf8", `"bad-utf8"`, "\"bad-\xfe\""), nil
		}},
		{name: "unpaired-surrogate-id", field: "id", build: func(b nexmark.Event) ([]byte, nats.Header) {
			return bidWith(t, b, "bad-surrogate", `"bad-surrogate"`, `"bad-\ud800"`), nil
		}},
		{name: "id-twice", field: "id", build: func(b nexmark.Event) ([]byte, nats.Header) {
			return bidWith(t, b, "bad-twice", `"id":"bad-twice"`, `"id":"bad-twice","id":"bad-thrice"`), nil
		}},
		{name: "invalid-utf8-elsewhere", field: "payload", build: func(b nexmark.Event) ([]byte, nats.Header) {
			return bidWith(t, b, "bad-channel", `"channel":"`, "\"channel\":\"\xff"), nil
		}},
		// Malformed messages.
		raw("malformed", "payload", `{"id":"bad-malformed","key":`),
		raw("not-an-object", "payload", `["bad-array"]`),
		raw("empty", "payload", ``),
		raw("oversized", "payload", `{"id":"bad-big","pad":"`+strings.Repeat("x", 70000)+`"}`),
		raw("missing-id", "id", `{"key":"1","ts":1}`),

		// Valid events an earlier weir lost or merged: each must come
		// out once.
		{name: "trailing-whitespace-twins", ids: []string{"tw-ws", "tw-ws ", " tw-ws"}},
		{name: "newline-twins", ids: []string{"tw-nl\n", "tw-nl\r\n", "tw-nl\r"}},
		{name: "percent-twins", ids: []string{"tw-%20", "tw- "}},
		{name: "long-twins", ids: []string{"tw-" + long + "a", "tw-" + long + "b"}},
		{name: "forged-weir-headers", ids: []string{"tw-forged"}, build: func(b nexmark.Event) ([]byte, nats.Header) {
			return bidWith(t, b, "tw-forged"), nats.Header{
				edge.HeaderRecords: {"1000000000"}, edge.HeaderProducer: {"dedup/0"}, edge.HeaderGeneration: {"99"},
				edge.HeaderFrameSeq: {"1"}, edge.HeaderEpoch: {"7"}, "Weir-Watermark": {"9999999999999"},
			}
		}},
		{name: "forged-traceparent", ids: []string{"tw-trace"}, build: func(b nexmark.Event) ([]byte, nats.Header) {
			return bidWith(t, b, "tw-trace"), nats.Header{"traceparent": {"00-FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF-ffffffffffffffff-01" + strings.Repeat("x", 5000)}}
		}},
	}
	for i := range cases {
		if cases[i].build == nil && len(cases[i].ids) > 0 {
			id := cases[i].ids[0]
			cases[i].build = func(b nexmark.Event) ([]byte, nats.Header) { return bidWith(t, b, id), nil }
		}
	}
	return cases
}

// TestHostileInput publishes a corpus of valid events with malformed and
// adversarial messages between them into the ingress that two pipelines
// read — dedup (to a framed edge and a json result stream) and q7 (a
// windowed query). Every valid event comes out exactly once, on both of
// dedup's outputs; q7's panes equal the reference over the valid bids
// only; every bad message is one dead letter (or, for q7's future times,
// one side output) per pipeline, naming its field and its coordinate; and
// nothing else is filed.
func TestHostileInput(t *testing.T) {
	t.Parallel()
	srv := natstest.Run(t)
	nc := srv.Connect(t)
	js, _ := jetstream.New(nc)
	cd := loadContract(t)
	c7, err := contracts.Shipped("nexmark-q7")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	gen := corpusConfig(cd)
	if _, err := nexmarkgen.EnsureStream(ctx, js, gen); err != nil {
		t.Fatal(err)
	}
	g, err := nexmark.NewGenerator(gen.Gen)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := expected(t, gen)
	q7input := queries["q7"].input
	var script []window.Step
	last := gen.Gen.FirstEventTime

	// The corpus goes out in chunks; after each, the next adversarial
	// cases, built from the chunk's last bid, on its partition.
	cases := hostileCases(t)
	type filed struct {
		field string
		side  bool
		name  string
	}
	bad := map[uint64]filed{} // ingress sequence → the letter it must get
	const chunk = 100
	next := 0
	for start := uint64(0); ; start += chunk {
		var lastBid *nexmark.Message
		n := uint64(0)
		for ; n < chunk; n++ {
			m, ok := g.Next()
			if !ok {
				break
			}
			if r, ok := q7input(m.Event); ok {
				script = append(script, window.Step{Record: &r})
			}
			if m.Event.Time().After(last) {
				last = m.Event.Time()
			}
			if m.Event.Bid != nil {
				lastBid = &m
			}
		}
		if n == 0 {
			break
		}
		cfg := gen
		cfg.Start, cfg.Count = start, n
		if _, err := nexmarkgen.Publish(ctx, js, cfg, time.Now, nil); err != nil {
			t.Fatal(err)
		}
		for k := 0; k < 2 && next < len(cases) && lastBid != nil; k++ {
			hc := cases[next]
			next++
			publish := func(data []byte, hdr nats.Header) uint64 {
				msg := &nats.Msg{Subject: gen.Subject(lastBid.Partition), Data: data, Header: nats.Header{}}
				for k, v := range hdr {
					msg.Header[k] = v
				}
				ack, err := js.PublishMsg(ctx, msg)
				if err != nil {
					t.Fatalf("%s: %v", hc.name, err)
				}
				return ack.Sequence
			}
			if hc.field != "" {
				seq := publish(hc.build(lastBid.Event))
				bad[seq] = filed{field: hc.field, side: hc.q7Side, name: hc.name}
				continue
			}
			for i, id := range hc.ids {
				if i == 0 {
					publish(hc.build(lastBid.Event))
				} else {
					publish(bidWith(t, lastBid.Event, id), nil)
				}
				want[id] = true
				ev := lastBid.Event
				ev.ID = id
				if r, ok := q7input(ev); ok {
					script = append(script, window.Step{Record: &r})
				}
			}
		}
	}
	if next < len(cases) {
		t.Fatalf("the corpus placed %d of %d cases", next, len(cases))
	}
	// A person event per partition a minute later closes every window.
	flush := last.Add(time.Minute)
	for p := 0; p < cd.Ingress.Partitions; p++ {
		ev := nexmark.Event{ID: fmt.Sprintf("flush-%d", p), Kind: nexmark.KindPerson, Key: "99999", TS: flush.UnixMilli(),
			Person: &nexmark.Person{ID: 99999, Name: "flush", DateTime: flush.UnixMilli()}}
		data, _ := ev.Encode()
		if _, err := js.Publish(ctx, cd.Ingress.Subject(p), data); err != nil {
			t.Fatal(err)
		}
		want[ev.ID] = true
	}
	script = append(script, window.Step{Watermark: flush.Add(-c7.Progress.OutOfOrderness.D() - time.Millisecond)})

	runService(t, srv.ClientURL(), cd, "dedup", dedup.Factories())
	runService(t, srv.ClientURL(), c7, q7.Service, q7.Factories())

	// dedup: each valid event once on the framed edge and once on the
	// json result stream, under its own message ID.
	streamtest.CheckFor(t, 90*time.Second, func() error {
		got, _ := output(t, js, cd)
		if err := checkExactlyOnce(want, got); err != nil {
			return fmt.Errorf("deduped edge: %w", err)
		}
		got = map[string]int{}
		for _, m := range streamtest.Messages(t, js, edge.StreamName(cd.Pipeline, "events")) {
			var ev struct{ ID string }
			if err := json.Unmarshal(m.Data(), &ev); err != nil {
				return fmt.Errorf("result %q: %v", m.Data(), err)
			}
			if id := m.Headers().Get(jetstream.MsgIDHeader); id != edge.JSONMsgID(cd.Pipeline, "events", ev.ID) {
				return fmt.Errorf("result of %q has message ID %q", ev.ID, id)
			}
			if tp := m.Headers().Get("traceparent"); tp != "" && telemetry.ValidTraceparent(tp) != tp {
				return fmt.Errorf("result of %q carries traceparent %.80q", ev.ID, tp)
			}
			got[ev.ID]++
		}
		if err := checkExactlyOnce(want, got); err != nil {
			return fmt.Errorf("json results: %w", err)
		}
		return nil
	})

	// q7: the panes of the valid bids only.
	spec, err := window.SpecOf(c7)
	if err != nil {
		t.Fatal(err)
	}
	ref, side, err := window.Evaluate(spec, window.MaxBy("price"), func(r record.Record) []byte { return r.Key }, script)
	if err != nil || len(side) != 0 {
		t.Fatalf("reference: %v, %d side outputs", err, len(side))
	}
	awaitPanes(t, js, c7, ref)

	// Letters: one per bad message per pipeline, from its ingress
	// operator, naming the field and the coordinate; nothing else.
	for _, c := range []*contracts.Contract{cd, c7} {
		ingressOp := c.Operators[0].ID
		streamtest.CheckFor(t, 30*time.Second, func() error {
			ls := streamtest.Letters(t, js, c.Pipeline)
			if len(ls) < len(bad) {
				return fmt.Errorf("%s: %d letters of %d", c.Pipeline, len(ls), len(bad))
			}
			return nil
		})
		seen := map[uint64]bool{}
		for _, l := range streamtest.Letters(t, js, c.Pipeline) {
			w, ok := bad[l.At.Seq]
			side := w.side && c == c7
			switch {
			case !ok || l.At.Stream != cd.Ingress.Stream:
				t.Errorf("%s: letter for %s, which is no bad message: %s: %s", c.Pipeline, l.At, l.Field, l.Reason)
			case seen[l.At.Seq]:
				t.Errorf("%s: second letter for %s (%s)", c.Pipeline, l.At, w.name)
			case l.Field != w.field || l.SideOutput != side || l.Operator != ingressOp:
				t.Errorf("%s: %s filed by %s as field %q side %v, want %s field %q side %v: %s",
					c.Pipeline, w.name, l.Operator, l.Field, l.SideOutput, ingressOp, w.field, side, l.Reason)
			}
			seen[l.At.Seq] = true
		}
		for seq, w := range bad {
			if !seen[seq] {
				t.Errorf("%s: no letter for %s (ingress seq %d)", c.Pipeline, w.name, seq)
			}
		}
	}
}
