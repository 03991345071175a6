package producer

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/pkg/natstest"
)

// splitStreams creates n streams S_0..S_n-1 over 8 partitions, partition p
// (subject S.<p>) in S_<p mod n>, and returns the route to them.
func splitStreams(tb testing.TB, js jetstream.JetStream, n, depth int) func(*nats.Msg) int {
	tb.Helper()
	for i := range n {
		var subjects []string
		for p := i; p < 8; p += n {
			subjects = append(subjects, fmt.Sprintf("S.%d", p))
		}
		_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{
			Name: fmt.Sprintf("S_%d", i), Subjects: subjects, Storage: jetstream.FileStorage, AllowAtomicPublish: true,
		})
		if err != nil {
			tb.Fatal(err)
		}
	}
	return func(m *nats.Msg) int {
		p, _ := strconv.Atoi(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:])
		return p % n
	}
}

func splitMsgs(from, n int) []*nats.Msg {
	out := make([]*nats.Msg, n)
	for i := range out {
		m := nats.NewMsg(fmt.Sprintf("S.%d", (from+i)%8))
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("m-%d", from+i))
		m.Data = fmt.Appendf(nil, "%d", from+i)
		out[i] = m
	}
	return out
}

// A Split stores each message once, in the stream of its partition, each
// stream's in the order they were added, in atomic batches that each lie
// in one stream; a retry of messages partly stored stores only the new
// ones.
func TestSplitStoresEachStreamsMessagesInOrder(t *testing.T) {
	js := natstest.Run(t).JetStream(t)
	ctx := context.Background()
	route := splitStreams(t, js, 4, 0)
	st, err := PublishSplit(ctx, js, splitMsgs(0, 6000), 4, route, 500, 0)
	if err != nil {
		t.Fatal(err)
	}
	// 1,500 a stream in batches of 500: three each.
	if st.Batches != 12 || st.Single != 0 {
		t.Errorf("stored %+v, want 12 atomic batches", st)
	}
	if _, err := PublishSplit(ctx, js, splitMsgs(4000, 4000), 4, route, 500, 0); err != nil {
		t.Fatal(err)
	}
	total := 0
	for i := range 4 {
		s, err := js.Stream(ctx, fmt.Sprintf("S_%d", i))
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		last := -1
		for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if err != nil {
				t.Fatal(err)
			}
			n, _ := strconv.Atoi(string(m.Data))
			if n%4 != i || n <= last {
				t.Fatalf("stream S_%d sequence %d holds message %d after %d", i, seq, n, last)
			}
			last = n
			total++
		}
	}
	if total != 8000 {
		t.Errorf("%d messages stored, want 8000", total)
	}
}

// BenchmarkIngestStreams compares, under SyncAlways, atomic batches into
// one stream and over four (partition p in stream p mod 4), and one stream
// with as many batches in flight as four have: whether a gain comes from
// the streams or from the depth. CPU counts the broker's: it runs in this
// process.
//
//	go test ./pkg/producer -run '^$' -bench IngestStreams -benchtime 200000x -count 3
func BenchmarkIngestStreams(b *testing.B) {
	for _, c := range []struct{ streams, depth int }{{1, 0}, {4, 0}, {1, 4 * DefaultDepth}} {
		b.Run(fmt.Sprintf("streams=%d/depth=%d", c.streams, max(c.depth, DefaultDepth)), func(b *testing.B) {
			js := natstest.Run(b).JetStream(b)
			route := splitStreams(b, js, c.streams, c.depth)
			all := splitMsgs(0, b.N)
			ctx := context.Background()
			cpu0 := cpuTime()
			b.ResetTimer()
			s := NewSplit(js, c.streams, route, 0, c.depth, 0)
			defer s.Close()
			for _, m := range all {
				if _, err := s.Add(ctx, m); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := s.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/msg")
		})
	}
}
