package nexmarkgen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/producer"
)

func newJS(t *testing.T) jetstream.JetStream { return natstest.Run(t).JetStream(t) }

func testConfig(stream string) Config {
	return Config{
		Stream:        stream,
		SubjectPrefix: "nx." + strings.ToLower(stream),
		Retention:     time.Hour,
		Producer:      "test-gen",
		MaxInFlight:   16,
		Batch:         64,
		Gen: nexmark.Config{
			Seed:       21,
			Partitions: 3,
			KeyGroups:  32,
			OutOfOrder: 30 * time.Millisecond,
			Hard: nexmark.HardCases{
				DuplicateEvery: 17,
				LateEvery:      41, LateBy: 3 * time.Second,
				IdlePartition: 1, IdleFrom: 100, IdleTo: 250,
				HotKeyRatio: 0.2,
			},
		},
	}
}

func ensure(t *testing.T, js jetstream.JetStream, cfg Config) jetstream.Stream {
	t.Helper()
	s, err := EnsureStream(t.Context(), js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s[0]
}

func publish(t *testing.T, js jetstream.JetStream, cfg Config) uint64 {
	t.Helper()
	n, err := Publish(t.Context(), js, cfg, time.Now, nil)
	if err != nil {
		t.Fatalf("Publish(start %d, count %d): %v", cfg.Start, cfg.Count, err)
	}
	return n
}

func msgCount(t *testing.T, s jetstream.Stream) uint64 {
	t.Helper()
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// checkStream compares the stream, message by message, with the first n
// messages of the generator's publish order.
func checkStream(t *testing.T, s jetstream.Stream, cfg Config, n uint64) (dups int) {
	t.Helper()
	if got := msgCount(t, s); got != n {
		t.Fatalf("stream has %d messages, want %d", got, n)
	}
	g, err := nexmark.NewGenerator(cfg.Gen)
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.WithDefaults()
	for seq := uint64(1); seq <= n; seq++ {
		want, _ := g.Next()
		got, err := s.GetMsg(t.Context(), seq)
		if err != nil {
			t.Fatal(err)
		}
		if got.Subject != cfg.Subject(want.Partition) {
			t.Fatalf("seq %d: subject %s, want %s", seq, got.Subject, cfg.Subject(want.Partition))
		}
		wantID := MsgID(cfg.Producer, want)
		if cfg.Sequenced {
			wantID = ""
		}
		if id := got.Header.Get(jetstream.MsgIDHeader); id != wantID {
			t.Fatalf("seq %d: Nats-Msg-Id %q, want %q", seq, id, wantID)
		}
		if p := got.Header.Get(producer.Header); p != cfg.Producer {
			t.Fatalf("seq %d: %s %q, want %q", seq, producer.Header, p, cfg.Producer)
		}
		if !bytes.Equal(got.Data, want.Payload) {
			t.Fatalf("seq %d: payload\n%s\nwant\n%s", seq, got.Data, want.Payload)
		}
		if _, err := nexmark.Decode(got.Data); err != nil {
			t.Fatalf("seq %d: %v", seq, err)
		}
		if want.Duplicate {
			dups++
			if !cfg.Sequenced && !strings.HasSuffix(got.Header.Get(jetstream.MsgIDHeader), DupSuffix) {
				t.Fatalf("seq %d: duplicate without %s", seq, DupSuffix)
			}
		}
	}
	return dups
}

func TestPublishWritesEvents(t *testing.T) {
	js := newJS(t)
	cfg := testConfig("EVENTS")
	s := ensure(t, js, cfg)
	var last uint64
	cfg.Count = 400
	n, err := Publish(t.Context(), js, cfg, time.Now, func(p uint64) {
		// Reports rise by whole batches, never past what was asked for.
		if p <= last || p > cfg.Count || (p-last)%uint64(cfg.Batch) != 0 && p != cfg.Count {
			t.Errorf("progress %d after %d", p, last)
		}
		last = p
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != 400 || last != 400 {
		t.Fatalf("published %d, last progress %d, want 400", n, last)
	}
	if dups := checkStream(t, s, cfg, 400); dups < 20 {
		t.Errorf("only %d duplicates stored; injected duplicates must not be deduplicated by the broker", dups)
	}
	// Every partition's subject got messages.
	for p := range cfg.Gen.Partitions {
		m, err := s.GetLastMsgForSubject(t.Context(), cfg.Subject(p))
		if err != nil || m == nil {
			t.Errorf("partition %d: no message: %v", p, err)
		}
	}
}

func TestRepublishIsIdempotentAndResumes(t *testing.T) {
	js := newJS(t)
	cfg := testConfig("RESUME")
	s := ensure(t, js, cfg)

	first := cfg
	first.Count = 180 // stops inside the idle range
	if n := publish(t, js, first); n != 180 {
		t.Fatalf("published %d", n)
	}
	// The same range again: every message is a broker-side duplicate.
	if n := publish(t, js, first); n != 180 {
		t.Fatalf("republished %d", n)
	}
	if got := msgCount(t, s); got != 180 {
		t.Fatalf("republishing changed the stream: %d messages, want 180", got)
	}
	// An overlapping resume is also harmless, and the result equals one run.
	rest := cfg
	rest.Start, rest.Count = 150, 350
	if n := publish(t, js, rest); n != 350 {
		t.Fatalf("resumed %d", n)
	}
	checkStream(t, s, cfg, 500)

	// A fresh stream written in one go holds byte-identical messages.
	whole := testConfig("WHOLE")
	whole.Count = 500
	w := ensure(t, js, whole)
	publish(t, js, whole)
	for seq := uint64(1); seq <= 500; seq++ {
		a, err := s.GetMsg(t.Context(), seq)
		if err != nil {
			t.Fatal(err)
		}
		b, err := w.GetMsg(t.Context(), seq)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a.Data, b.Data) || a.Header.Get(jetstream.MsgIDHeader) != b.Header.Get(jetstream.MsgIDHeader) {
			t.Fatalf("seq %d differs between resumed and one-shot runs", seq)
		}
	}
}

// Published by sequence, messages carry no IDs, each batch's last message
// says where the generator stands, and a run resumes where the stream says
// it stopped — past other writers' messages; a start anywhere else would
// repeat or skip events, and is refused.
func TestSequencedResumesWhereTheStreamSaysItStopped(t *testing.T) {
	js := newJS(t)
	cfg := testConfig("SEQ")
	cfg.Sequenced = true
	s := ensure(t, js, cfg)

	at := func() uint64 {
		t.Helper()
		n, err := Resume(t.Context(), js, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := at(); n != 0 {
		t.Fatalf("Resume of an empty stream: %d", n)
	}
	first := cfg
	first.Count = 180
	if n := publish(t, js, first); n != 180 {
		t.Fatalf("published %d", n)
	}
	if n := at(); n != 180 {
		t.Fatalf("Resume after 180: %d", n)
	}
	checkStream(t, s, cfg, 180)
	last, err := s.GetMsg(t.Context(), 180)
	if err != nil {
		t.Fatal(err)
	}
	if got := last.Header.Get(HeaderNextStart); got != "180" {
		t.Fatalf("last message's %s %q, want 180", HeaderNextStart, got)
	}

	// Another writer's messages after the generator's own.
	for i := range 3 {
		if _, err := js.Publish(t.Context(), cfg.Subject(i), []byte(`{"other":true}`)); err != nil {
			t.Fatal(err)
		}
	}
	if n := at(); n != 180 {
		t.Fatalf("Resume past another writer's messages: %d, want 180", n)
	}
	for _, start := range []uint64{150, 183} {
		again := cfg
		again.Start, again.Count = start, 10
		_, err := Publish(t.Context(), js, again, time.Now, nil)
		if err == nil || !strings.Contains(err.Error(), "says it stopped at 180") {
			t.Fatalf("starting at %d: %v, want a refusal naming 180", start, err)
		}
	}
	rest := cfg
	rest.Start, rest.Count = 180, 320
	if n := publish(t, js, rest); n != 320 {
		t.Fatalf("resumed %d", n)
	}
	if n := at(); n != 500 {
		t.Fatalf("Resume after 500: %d", n)
	}
	// The stream holds the generator's 500 in order, the other three
	// after its first 180.
	g, err := nexmark.NewGenerator(cfg.Gen)
	if err != nil {
		t.Fatal(err)
	}
	dups := 0
	for seq := uint64(1); seq <= 503; seq++ {
		got, err := s.GetMsg(t.Context(), seq)
		if err != nil {
			t.Fatal(err)
		}
		if seq > 180 && seq <= 183 {
			if string(got.Data) != `{"other":true}` {
				t.Fatalf("seq %d: %s, want the other writer's message", seq, got.Data)
			}
			continue
		}
		want, _ := g.Next()
		if !bytes.Equal(got.Data, want.Payload) || got.Header.Get(jetstream.MsgIDHeader) != "" {
			t.Fatalf("seq %d: %s (Nats-Msg-Id %q), want\n%s without an ID", seq, got.Data, got.Header.Get(jetstream.MsgIDHeader), want.Payload)
		}
		if want.Duplicate {
			dups++
		}
	}
	if dups < 20 {
		t.Errorf("only %d duplicates stored, want the injected ones", dups)
	}

	// A producer whose last message carries a message ID instead.
	ids := cfg
	ids.Sequenced, ids.Start, ids.Count = false, 500, 5
	publish(t, js, ids)
	if _, err := Resume(t.Context(), js, cfg); err == nil || !strings.Contains(err.Error(), "with message IDs") {
		t.Fatalf("Resume after a run with message IDs: %v, want a refusal", err)
	}

	// A stream whose messages were removed may have held the producer's:
	// starting over at 0 would publish its events again.
	if err := s.Purge(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := Resume(t.Context(), js, cfg); err == nil || !strings.Contains(err.Error(), "were removed") {
		t.Fatalf("Resume of a purged stream: %v, want a refusal", err)
	}
	// One that only ever held other writers' messages: from the start.
	other := testConfig("OTHERS")
	other.Sequenced = true
	ensure(t, js, other)
	if _, err := js.Publish(t.Context(), other.Subject(0), []byte(`{"other":true}`)); err != nil {
		t.Fatal(err)
	}
	if n, err := Resume(t.Context(), js, other); err != nil || n != 0 {
		t.Fatalf("Resume on a stream of others' messages: %d, %v; want 0", n, err)
	}
}

func TestPublishStopsOnCancel(t *testing.T) {
	js := newJS(t)
	cfg := testConfig("CANCEL")
	s := ensure(t, js, cfg)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	n, err := Publish(ctx, js, cfg, time.Now, func(p uint64) {
		if p >= 300 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if n < 300 {
		t.Fatalf("published %d, want at least 300", n)
	}
	// Everything in flight was awaited: the count is exactly what is stored.
	if got := msgCount(t, s); got != n {
		t.Fatalf("stream has %d messages, Publish reported %d", got, n)
	}
	rest := cfg
	rest.Start, rest.Count = n, 600-n
	publish(t, js, rest)
	checkStream(t, s, cfg, 600)
}

func TestPublishPaces(t *testing.T) {
	js := newJS(t)
	cfg := testConfig("PACED")
	ensure(t, js, cfg)
	cfg.Rate, cfg.Count = 400, 40
	begin := time.Now()
	publish(t, js, cfg)
	// 40 messages at 400/s: the last is due 39/400 s after the first.
	if took := time.Since(begin); took < 95*time.Millisecond {
		t.Errorf("40 messages at 400/s took %v, want at least 97.5ms", took)
	}
	// A clock already far ahead of every target never waits.
	cfg.Start = 40
	ahead := func() time.Time { return time.Now().Add(time.Hour) }
	calls := 0
	clock := func() time.Time {
		calls++
		if calls == 1 {
			return time.Now()
		}
		return ahead()
	}
	cfg.Rate = 1 // targets reach 39s, the clock is an hour ahead
	begin = time.Now()
	if _, err := Publish(t.Context(), js, cfg, clock, nil); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took > 10*time.Second {
		t.Errorf("publishing behind schedule waited: %v", took)
	}
}

func TestPublishReportsBrokerErrors(t *testing.T) {
	js := newJS(t)
	cfg := testConfig("OWNER")
	ensure(t, js, cfg)
	// Another stream name for the same subjects: the server rejects the
	// messages through the Nats-Expected-Stream header.
	wrong := cfg
	wrong.Stream, wrong.Count = "ELSEWHERE", 10
	n, err := Publish(t.Context(), js, wrong, time.Now, nil)
	if err == nil || n != 0 {
		t.Fatalf("published %d to the wrong stream, err %v", n, err)
	}
	if !strings.Contains(err.Error(), "test-gen-0") {
		t.Errorf("error %q does not name the message", err)
	}
}

func TestEnsureStream(t *testing.T) {
	js := newJS(t)
	cfg := testConfig("ENSURE")
	s := ensure(t, js, cfg)
	c := s.CachedInfo().Config
	if c.Storage != jetstream.FileStorage || c.Retention != jetstream.LimitsPolicy ||
		c.MaxAge != time.Hour || c.Duplicates != DuplicateWindow ||
		len(c.Subjects) != 1 || c.Subjects[0] != "nx.ensure.*" {
		t.Fatalf("stream config %+v", c)
	}
	// Idempotent.
	ensure(t, js, cfg)
	// An existing stream that captures the subjects is accepted as it is.
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "WIDE", Subjects: []string{"wide.>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	wide := testConfig("WIDE")
	wide.SubjectPrefix = "wide.events"
	if s := ensure(t, js, wide); s.CachedInfo().Config.Storage != jetstream.MemoryStorage {
		t.Error("EnsureStream changed an existing stream")
	}
	// One that does not is an error.
	other := testConfig("WIDE")
	other.SubjectPrefix = "narrow"
	if _, err := EnsureStream(t.Context(), js, other); !errors.Is(err, ErrStreamMismatch) {
		t.Fatalf("err = %v, want ErrStreamMismatch", err)
	}
	// A short retention shortens the duplicate window to fit.
	short := testConfig("SHORT")
	short.Retention = time.Minute
	if d := ensure(t, js, short).CachedInfo().Config.Duplicates; d != time.Minute {
		t.Errorf("duplicate window %v with one-minute retention", d)
	}
}

func TestCovers(t *testing.T) {
	for _, c := range []struct {
		f, g string
		want bool
	}{
		{"a.*", "a.*", true},
		{"a.>", "a.*", true},
		{">", "a.*", true},
		{"a.b", "a.*", false},
		{"a.*", "a.>", false},
		{"a.*.c", "a.*", false},
		{"b.*", "a.*", false},
		{"a", "a.*", false},
	} {
		if got := covers(c.f, c.g); got != c.want {
			t.Errorf("covers(%q, %q) = %v, want %v", c.f, c.g, got, c.want)
		}
	}
}

// BenchmarkPublish generates and stores b.N events, unpaced, into a
// SyncAlways stream in atomic batches, and reports events/s and the
// generator's share of the time:
//
//	go test ./services/nexmark-gen -run '^$' -bench Publish -benchtime 200000x -cpuprofile /tmp/gen.pprof
func BenchmarkPublish(b *testing.B) {
	for _, batch := range []int{producer.MaxBatch, natstest.MaxBatch} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			js := natstest.Run(b).JetStream(b)
			cfg := testConfig("BENCH")
			cfg.Batch, cfg.Count = batch, uint64(b.N)
			cfg.Gen.Hard = nexmark.HardCases{IdlePartition: -1}
			if _, err := EnsureStream(b.Context(), js, cfg); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			n, err := Publish(b.Context(), js, cfg, time.Now, nil)
			if err != nil || n != uint64(b.N) {
				b.Fatalf("stored %d of %d: %v", n, b.N, err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// Over several streams (Config.Streams, as ingress.streams places them)
// each partition's events are in the stream of partition p mod streams,
// in order, each once, and a republish stores nothing twice; publishing
// by sequence over several streams, and more streams than partitions,
// are refused.
func TestPublishOverStreams(t *testing.T) {
	js := newJS(t)
	cfg := testConfig("SPLIT")
	cfg.Streams, cfg.Count = 2, 500
	sts, err := EnsureStream(t.Context(), js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(sts) != 2 || sts[0].CachedInfo().Config.Name != "SPLIT_0" || sts[1].CachedInfo().Config.Name != "SPLIT_1" {
		t.Fatalf("streams %v", sts)
	}
	for range 2 { // the second run finds every event stored
		if n := publish(t, js, cfg); n != 500 {
			t.Fatalf("published %d, want 500", n)
		}
	}
	g, err := nexmark.NewGenerator(cfg.WithDefaults().Gen)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{} // per stream, the message IDs in order
	for range 500 {
		m, _ := g.Next()
		s := fmt.Sprintf("SPLIT_%d", m.Partition%2)
		want[s] = append(want[s], MsgID(cfg.WithDefaults().Producer, m))
	}
	for _, st := range sts {
		name := st.CachedInfo().Config.Name
		var got []string
		for seq := uint64(1); ; seq++ {
			m, err := st.GetMsg(t.Context(), seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.Header.Get(jetstream.ExpectedStreamHeader) != name {
				t.Fatalf("%s sequence %d expects stream %q", name, seq, m.Header.Get(jetstream.ExpectedStreamHeader))
			}
			got = append(got, m.Header.Get(jetstream.MsgIDHeader))
		}
		if strings.Join(got, " ") != strings.Join(want[name], " ") {
			t.Errorf("%s holds %d messages, want %d in generation order", name, len(got), len(want[name]))
		}
	}
	bad := cfg
	bad.Sequenced = true
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "by sequence over 2 streams") {
		t.Errorf("sequenced over two streams: %v", err)
	}
	bad = cfg
	bad.Streams = 4
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "streams 4") {
		t.Errorf("four streams for three partitions: %v", err)
	}
}

// Over several streams the count Publish returns is what is stored in a
// row from Start: when one stream takes nothing, the count stops before
// its first event, whatever the other stream stored after it.
func TestPublishOverStreamsCountsInARow(t *testing.T) {
	js := newJS(t)
	cfg := testConfig("ROW")
	cfg.Streams, cfg.Count, cfg.AckTimeout = 2, 500, 2*time.Second
	if _, err := EnsureStream(t.Context(), js, cfg); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(t.Context(), "ROW_1"); err != nil {
		t.Fatal(err)
	}
	g, err := nexmark.NewGenerator(cfg.WithDefaults().Gen)
	if err != nil {
		t.Fatal(err)
	}
	first := uint64(0) // the position of the first event of ROW_1
	for m, _ := g.Next(); m.Partition%2 == 0; m, _ = g.Next() {
		first++
	}
	n, err := Publish(t.Context(), js, cfg, time.Now, nil)
	if err == nil {
		t.Fatal("published into a stream that is gone")
	}
	if n > first {
		t.Fatalf("counted %d stored in a row, and position %d, in the stream that is gone, was not", n, first)
	}
	t.Logf("counted %d; ROW_1's first event is at %d: %v", n, first, err)
}
