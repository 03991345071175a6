package producer_test

import (
	"context"
	"fmt"
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
// with atomic batches: go test ./pkg/producer -bench Ingest -benchtime 20000x
func BenchmarkIngest(b *testing.B) {
	for _, mode := range []string{"one-by-one", "atomic-batches"} {
		b.Run(mode, func(b *testing.B) {
			js := natstest.Run(b).JetStream(b)
			stream(b, js, "IN", true)
			all := msgs("IN", 0, b.N)
			b.ResetTimer()
			var err error
			if mode == "one-by-one" {
				err = producer.Each(context.Background(), js, all, 256)
			} else {
				_, err = producer.Publish(context.Background(), js, all, 0, 0)
			}
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
