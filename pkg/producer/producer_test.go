package producer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/producer"
	"github.com/weirflow/weir/pkg/stream/streamtest"
)

func stream(t testing.TB, js jetstream.JetStream, name string, atomic bool) {
	t.Helper()
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: name, Subjects: []string{name + ".*"}, Storage: jetstream.FileStorage, AllowAtomicPublish: atomic,
	})
	if err != nil {
		t.Fatal(err)
	}
}

func msgs(stream string, from, n int) []*nats.Msg {
	out := make([]*nats.Msg, n)
	for i := range out {
		m := nats.NewMsg(fmt.Sprintf("%s.%d", stream, (from+i)%4))
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("m-%d", from+i))
		m.Data = fmt.Appendf(nil, `{"n":%d}`, from+i)
		out[i] = m
	}
	return out
}

// stored reads the stream's payloads in order.
func stored(t *testing.T, js jetstream.JetStream, name string) []string {
	var out []string
	for _, m := range streamtest.Messages(t, js, name) {
		out = append(out, string(m.Data()))
	}
	return out
}

func TestPublishStoresEveryMessageOnceInOrder(t *testing.T) {
	js := natstest.Run(t).JetStream(t)
	ctx := context.Background()
	for _, atomic := range []bool{true, false} {
		name := fmt.Sprintf("S%t", atomic)
		stream(t, js, name, atomic)
		st, err := producer.Publish(ctx, js, msgs(name, 0, 2500), 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if atomic && (st.Batches != 3 || st.Single != 0) {
			t.Errorf("%s: %+v, want 3 atomic batches", name, st)
		}
		if !atomic && st.Single != 2500 {
			t.Errorf("%s: %+v, want every message one by one", name, st)
		}
		// A retry of messages partly stored: the batch holding stored IDs
		// is refused whole, and one by one only the new ones are stored.
		st, err = producer.Publish(ctx, js, msgs(name, 2000, 1000), 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if atomic && st.Single != 1000 {
			t.Errorf("%s: retry %+v, want it stored one by one", name, st)
		}
		got := stored(t, js, name)
		if len(got) != 3000 {
			t.Fatalf("%s: %d messages stored, want 3000", name, len(got))
		}
		for i, p := range got {
			if want := fmt.Sprintf(`{"n":%d}`, i); p != want {
				t.Fatalf("%s: message %d is %s, want %s", name, i, p, want)
			}
		}
	}
}

// BenchmarkIngest compares, under SyncAlways, one message per async publish
// with atomic batches, with and without message IDs: go test
// ./pkg/producer -bench Ingest -benchtime 20000x
func BenchmarkIngest(b *testing.B) {
	for _, mode := range []string{"one-by-one", "atomic-batches", "sequenced"} {
		b.Run(mode, func(b *testing.B) {
			js := natstest.Run(b).JetStream(b)
			stream(b, js, "IN", true)
			all := msgs("IN", 0, b.N)
			b.ResetTimer()
			var err error
			switch mode {
			case "one-by-one":
				err = producer.Each(context.Background(), js, all, 256)
			case "atomic-batches":
				_, err = producer.Publish(context.Background(), js, all, 0, 0)
			default:
				all = bare("IN", 0, b.N)
				p := producer.NewSequenced(js, "")
				for i := 0; i < len(all) && err == nil; i += producer.MaxBatch {
					_, err = p.Send(context.Background(), all[i:min(len(all), i+producer.MaxBatch)])
				}
				if err == nil {
					_, err = p.Flush(context.Background())
				}
			}
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// A Pipeline keeps batches in flight and the stream's order, also when a
// resumed run's first batch overlaps what an earlier run stored.
func TestPipelineKeepsOrderAcrossAResume(t *testing.T) {
	js := natstest.Run(t).JetStream(t)
	ctx := context.Background()
	stream(t, js, "P", true)
	run := func(from, to, size int) (stored int) {
		p := producer.NewPipeline(js, 3, 0)
		defer p.Close()
		for i := from; i < to; i += size {
			n, err := p.Send(ctx, msgs("P", i, min(size, to-i)))
			if err != nil {
				t.Fatal(err)
			}
			stored += n
			if p.InFlight() > 3 {
				t.Fatalf("%d batches in flight, want at most 3", p.InFlight())
			}
			n, err = p.Poll(ctx)
			if err != nil {
				t.Fatal(err)
			}
			stored += n
		}
		n, err := p.Flush(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if p.InFlight() != 0 {
			t.Fatalf("%d batches in flight after Flush", p.InFlight())
		}
		return stored + n
	}
	if n := run(0, 1500, 300); n != 1500 {
		t.Fatalf("first run stored %d, want 1500", n)
	}
	// Resumed at 1200: the first batch holds 300 stored IDs and 200 new.
	if n := run(1200, 2700, 500); n != 1500 {
		t.Fatalf("resumed run reported %d, want 1500", n)
	}
	got := stored(t, js, "P")
	if len(got) != 2700 {
		t.Fatalf("%d messages stored, want 2700", len(got))
	}
	for i, p := range got {
		if want := fmt.Sprintf(`{"n":%d}`, i); p != want {
			t.Fatalf("message %d is %s, want %s", i, p, want)
		}
	}
}

// A batch for a subject no stream captures fails; it does not hang.
func TestPipelineReportsNoStream(t *testing.T) {
	js := natstest.Run(t).JetStream(t)
	p := producer.NewPipeline(js, 0, 0)
	defer p.Close()
	if _, err := p.Send(context.Background(), msgs("NONE", 0, 10)); err != nil {
		t.Fatal(err)
	}
	_, err := p.Flush(context.Background())
	if !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("Flush: %v, want %v", err, jetstream.ErrNoStreamResponse)
	}
}

// A batch over the server's limit is refused with an error that says how
// to fix it, and nothing of it is stored.
func TestBatchOverTheServersLimit(t *testing.T) {
	js := natstest.Run(t).JetStream(t)
	stream(t, js, "BIG", true)
	n := natstest.MaxBatch + 1
	_, err := producer.Publish(context.Background(), js, msgs("BIG", 0, n), n, 0)
	if err == nil || !strings.Contains(err.Error(), "batch limit") || !strings.Contains(err.Error(), "max_msgs") {
		t.Fatalf("Publish of %d in one batch: %v, want a refusal naming the server's batch limit", n, err)
	}
	if got := len(stored(t, js, "BIG")); got != 0 {
		t.Fatalf("%d messages stored, want none", got)
	}
	if _, err := producer.Publish(context.Background(), js, msgs("BIG", 0, n), natstest.MaxBatch, 0); err != nil {
		t.Fatal(err)
	}
	if got := len(stored(t, js, "BIG")); got != n {
		t.Fatalf("%d messages stored, want %d", got, n)
	}
}

// Batches of one interleaved with full ones keep their place in the stream
// while several batches are in flight — and on a stream that takes no
// atomic batches, where each batch is stored one by one after it is
// refused, a batch of one sent behind it must not overtake it.
func TestPipelineOrdersBatchesOfOne(t *testing.T) {
	js := natstest.Run(t).JetStream(t)
	ctx := context.Background()
	for _, atomic := range []bool{true, false} {
		name := fmt.Sprintf("ONE%t", atomic)
		stream(t, js, name, atomic)
		p := producer.NewPipeline(js, 4, 0)
		defer p.Close()
		next, reported := 0, 0
		for _, size := range []int{200, 1, 300, 1, 1, 250, 1, 400, 1} {
			n, err := p.Send(ctx, msgs(name, next, size))
			if err != nil {
				t.Fatal(err)
			}
			reported += n
			next += size
		}
		n, err := p.Flush(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if reported+n != next {
			t.Fatalf("%s: reported %d stored, want %d", name, reported+n, next)
		}
		if st := p.Stats(); atomic && (st.Batches != 4 || st.Single != 5) {
			t.Errorf("%s: stats %+v, want 4 batches and 5 single messages", name, st)
		}
		got := stored(t, js, name)
		if len(got) != next {
			t.Fatalf("%s: %d messages stored, want %d", name, len(got), next)
		}
		for i, p := range got {
			if want := fmt.Sprintf(`{"n":%d}`, i); p != want {
				t.Fatalf("%s: message %d is %s, want %s", name, i, p, want)
			}
		}
	}
}

// bare returns msgs without message IDs, from producer p1: what a
// sequenced writer sends.
func bare(stream string, from, n int) []*nats.Msg {
	out := msgs(stream, from, n)
	for _, m := range out {
		m.Header.Del(jetstream.MsgIDHeader)
		m.Header.Set("Producer", "p1")
	}
	return out
}

// lastSeq is the stream's last sequence.
func lastSeq(t *testing.T, js jetstream.JetStream, name string) uint64 {
	t.Helper()
	s, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

// A sequenced Pipeline stores messages without IDs in order, batches of
// one among the others, and picks up where the stream ends when it
// starts: a second Pipeline carries on after the first.
func TestSequencedPipelineStoresInOrderWithoutIDs(t *testing.T) {
	js := natstest.Run(t).JetStream(t)
	ctx := context.Background()
	stream(t, js, "Q", true)
	next := 0
	run := func(sizes ...int) {
		p := producer.NewSequenced(js, "Producer")
		defer p.Close()
		reported := 0
		for _, size := range sizes {
			n, err := p.Send(ctx, bare("Q", next, size))
			if err != nil {
				t.Fatalf("send %d at %d: %v", size, next, err)
			}
			reported += n
			next += size
			if p.InFlight() > 1 {
				t.Fatalf("%d batches in flight, want one at a time", p.InFlight())
			}
		}
		n, err := p.Flush(ctx)
		if err != nil {
			t.Fatalf("flush at %d: %v", next, err)
		}
		if reported+n != sum(sizes) {
			t.Fatalf("reported %d stored, want %d", reported+n, sum(sizes))
		}
		if st := p.Stats(); st.Resent != 0 {
			t.Errorf("stats %+v, want nothing re-sent", st)
		}
	}
	run(500, 1, 700, 300, 1, 400)
	run(1, 250, 600)
	got := stored(t, js, "Q")
	if len(got) != next {
		t.Fatalf("%d messages stored, want %d", len(got), next)
	}
	for i, p := range got {
		if want := fmt.Sprintf(`{"n":%d}`, i); p != want {
			t.Fatalf("message %d is %s, want %s", i, p, want)
		}
	}
	for _, m := range streamtest.Messages(t, js, "Q") {
		if id := m.Headers().Get(jetstream.MsgIDHeader); id != "" {
			t.Fatalf("a message carries Nats-Msg-Id %q", id)
		}
	}

	// A stream without atomic batches is refused, saying how to allow them.
	stream(t, js, "NOATOMIC", false)
	p := producer.NewSequenced(js, "Producer")
	defer p.Close()
	if _, err := p.Send(ctx, bare("NOATOMIC", 0, 10)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Flush(ctx); err == nil || !strings.Contains(err.Error(), "--allow-batch") {
		t.Fatalf("sequenced batch into a stream without atomic batches: %v, want a refusal saying how to allow them", err)
	}
	if got := stored(t, js, "NOATOMIC"); len(got) != 0 {
		t.Fatalf("%d messages stored, want none", len(got))
	}
}

func sum(xs []int) (n int) {
	for _, x := range xs {
		n += x
	}
	return n
}

// A sequenced Pipeline's batch that other writers' messages overtook is
// sent again after them — stored once, in order — and one that fails for
// another reason fails the Pipeline with nothing behind it stored.
func TestSequencedPipelineYieldsToOtherWriters(t *testing.T) {
	js := natstest.Run(t).JetStream(t)
	ctx := context.Background()
	stream(t, js, "W", true)

	p := producer.NewSequenced(js, "Producer")
	defer p.Close()
	send := func(from, n int) {
		t.Helper()
		if _, err := p.Send(ctx, bare("W", from, n)); err != nil {
			t.Fatal(err)
		}
	}
	send(0, 100)
	if _, err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, other := range []string{`{"other":1}`, `{"other":2}`} {
		if _, err := js.Publish(ctx, "W.0", []byte(other)); err != nil {
			t.Fatal(err)
		}
	}
	send(100, 100)
	send(200, 1)
	if _, err := p.Flush(ctx); err != nil {
		t.Fatalf("Flush after other writers' messages: %v", err)
	}
	if st := p.Stats(); st.Resent != 1 || st.Batches != 2 || st.Single != 1 {
		t.Errorf("stats %+v, want 2 batches, 1 single message and 1 batch re-sent", st)
	}
	var want []string
	for i := range 100 {
		want = append(want, fmt.Sprintf(`{"n":%d}`, i))
	}
	want = append(want, `{"other":1}`, `{"other":2}`)
	for i := 100; i < 201; i++ {
		want = append(want, fmt.Sprintf(`{"n":%d}`, i))
	}
	if got := stored(t, js, "W"); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("stream holds\n%v\nwant\n%v", got, want)
	}

	// A batch refused for another reason — it holds a header atomic
	// batches do not take — fails the Pipeline, and nothing after it is
	// stored.
	poisoned := bare("W", 201, 50)
	poisoned[10].Header.Set(jetstream.ExpectedLastMsgIDHeader, "x")
	if _, err := p.Send(ctx, poisoned); err != nil {
		t.Fatal(err)
	}
	_, err := p.Send(ctx, bare("W", 251, 50))
	if err == nil {
		_, err = p.Flush(ctx)
	}
	if err == nil {
		t.Fatal("a refused batch did not fail the Pipeline")
	}
	if got := len(stored(t, js, "W")); got != 203 {
		t.Fatalf("%d messages stored, want 203: nothing after the refused batch", got)
	}
}

// A sequenced Pipeline overtaken by messages of its own producer — another
// instance, or an earlier run's batch landing late — does not send its
// batch again after them, which would store events twice.
func TestSequencedPipelineRefusesToFollowItsOwnProducer(t *testing.T) {
	js := natstest.Run(t).JetStream(t)
	ctx := context.Background()
	stream(t, js, "OWN", true)
	p := producer.NewSequenced(js, "Producer")
	defer p.Close()
	if _, err := p.Send(ctx, bare("OWN", 0, 100)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// The same producer's next events, stored by another instance.
	other := producer.NewSequenced(js, "Producer")
	defer other.Close()
	if _, err := other.Send(ctx, bare("OWN", 100, 50)); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(ctx, bare("OWN", 100, 50)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Flush(ctx); !errors.Is(err, producer.ErrOvertaken) {
		t.Fatalf("Flush behind its own producer's messages: %v, want %v", err, producer.ErrOvertaken)
	}
	if got := len(stored(t, js, "OWN")); got != 150 {
		t.Fatalf("%d messages stored, want 150: the overtaken batch must not be stored again", got)
	}
}

// A small batch whose messages are on different subjects goes as plain
// messages (PlainBelow): each stored once, a re-send dropped as
// duplicates. One with two messages on a subject stays atomic, so that
// neither can land without the other.
func TestASmallBatchOnDistinctSubjectsGoesPlain(t *testing.T) {
	js := natstest.Run(t).JetStream(t)
	ctx := context.Background()
	stream(t, js, "SB", true)
	distinct := msgs("SB", 0, 4) // subjects SB.0 … SB.3
	for range 2 {
		st, err := producer.Publish(ctx, js, distinct, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if st.Batches != 0 || st.Single != 4 {
			t.Errorf("distinct subjects: %+v, want 4 plain messages", st)
		}
	}
	shared := msgs("SB", 4, 5) // SB.0 twice
	st, err := producer.Publish(ctx, js, shared, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if st.Batches != 1 || st.Single != 0 {
		t.Errorf("a subject twice: %+v, want one atomic batch", st)
	}
	got := stored(t, js, "SB")
	if len(got) != 9 {
		t.Fatalf("%d messages stored, want 9: %v", len(got), got)
	}
	for i, p := range got {
		if want := fmt.Sprintf(`{"n":%d}`, i); p != want {
			t.Fatalf("message %d is %s, want %s", i, p, want)
		}
	}
	if producer.PlainBelow <= 5 {
		t.Fatalf("PlainBelow %d: the test's batches must be under it", producer.PlainBelow)
	}
}

// TestNoMessageIsStoredBehindALaterOneOfItsSubject: a message or batch
// the stream refuses (here by an expected last sequence it does not
// have) fails Publish, and nothing of its subject sent after it is
// stored ahead of it — where the caller's retry would store it behind a
// later message of its subject, and a weir edge's reader would take it for
// a copy. Once as one-by-one publishes, after a batch refused for a
// message ID the stream holds; once as atomic batches kept in flight.
func TestNoMessageIsStoredBehindALaterOneOfItsSubject(t *testing.T) {
	js := natstest.Run(t).JetStream(t)
	ctx := context.Background()
	refused := func(m *nats.Msg) *nats.Msg {
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "999")
		return m
	}
	one := func(name string, from, n int) []*nats.Msg {
		ms := msgs(name, from, n)
		for _, m := range ms {
			m.Subject = name + ".0"
		}
		return ms
	}

	stream(t, js, "ONE", true)
	if _, err := producer.Publish(ctx, js, one("ONE", 0, 1), 0, 0); err != nil {
		t.Fatal(err)
	}
	// m-0 is stored: the batch m-0…m-3 is refused, and sent one by one.
	batch := one("ONE", 0, 4)
	refused(batch[1])
	if _, err := producer.Publish(ctx, js, batch, 0, 0); err == nil {
		t.Fatal("a refused message did not fail the publish")
	}
	if got := stored(t, js, "ONE"); !slices.Equal(got, []string{`{"n":0}`}) {
		t.Errorf("one by one, after m-1 was refused the stream holds %v: a message of its subject sent after it was stored ahead of it", got)
	}

	stream(t, js, "PIPE", true)
	// Batches of two: m-0 m-1 stored, m-2 m-3 refused, m-4 m-5 behind.
	ms := one("PIPE", 0, 6)
	refused(ms[2])
	if _, err := producer.Publish(ctx, js, ms, 2, 0); err == nil {
		t.Fatal("a refused batch did not fail the publish")
	}
	if got := stored(t, js, "PIPE"); !slices.Equal(got, []string{`{"n":0}`, `{"n":1}`}) {
		t.Errorf("in batches, after m-2 m-3 were refused the stream holds %v: a batch of their subject sent after them was stored ahead of them", got)
	}
}
