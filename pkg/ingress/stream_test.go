package ingress

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/weirflow/weir/contracts"
)

// TestStreamConfigDuplicateWindow: the stream weir creates remembers
// message IDs for ingress.duplicate_window, two minutes when the contract
// declares none, and never longer than the retention.
func TestStreamConfigDuplicateWindow(t *testing.T) {
	for _, c := range []struct {
		window, retention, want time.Duration
	}{
		{20 * time.Second, 24 * time.Hour, 20 * time.Second},
		{0, 24 * time.Hour, DuplicateWindow},
		{0, time.Minute, time.Minute},
		{10 * time.Minute, 0, 10 * time.Minute},
	} {
		in := contracts.Ingress{Stream: "S", SubjectPrefix: "s", DuplicateWindow: contracts.Duration{Duration: c.window}, Retention: contracts.Duration{Duration: c.retention}}
		if got := StreamConfig(in, 0, 1).Duplicates; got != c.want {
			t.Errorf("duplicate_window %v, retention %v: stream's window %v, want %v", c.window, c.retention, got, c.want)
		}
	}
}

// TestStreamConfigOverStreams: one stream captures every partition's
// subject, as before ingress.streams; over several, stream i is
// <stream>_<i> and captures the subjects of its partitions alone, and each
// mirror of an account per pipeline delivers on a subject of its own.
func TestStreamConfigOverStreams(t *testing.T) {
	in := contracts.Ingress{Stream: "S", SubjectPrefix: "s.in", Partitions: 5, Retention: contracts.Duration{Duration: time.Hour}}
	if got := Declared(in, 1); len(got) != 1 || got[0].Stream.Name != "S" || !slices.Equal(got[0].Stream.Subjects, []string{"s.in.*"}) {
		t.Errorf("one stream: %+v", got)
	}
	if m := Mirror(in, "p", 1); len(m) != 1 || m[0].Stream.Mirror.Consumer.DeliverSubject != MirrorSubject("p") {
		t.Errorf("one stream's mirror: %+v", m)
	}
	in.Streams = 2
	got := Declared(in, 3)
	if len(got) != 2 {
		t.Fatalf("two streams: %d declared", len(got))
	}
	for i, want := range [][]string{{"s.in.0", "s.in.2", "s.in.4"}, {"s.in.1", "s.in.3"}} {
		cfg := got[i].Stream
		if cfg.Name != "S_"+strconv.Itoa(i) || !slices.Equal(cfg.Subjects, want) || cfg.Replicas != 3 || !cfg.AllowAtomicPublish {
			t.Errorf("stream %d: %s %v replicas %d", i, cfg.Name, cfg.Subjects, cfg.Replicas)
		}
	}
	m := Mirror(in, "p", 1)
	if len(m) != 2 || m[0].Stream.Mirror.Name != "S_0" || m[1].Stream.Mirror.Consumer.DeliverSubject == m[0].Stream.Mirror.Consumer.DeliverSubject {
		t.Errorf("mirrors of two streams: %+v, %+v", m[0].Stream.Mirror, m[1].Stream.Mirror)
	}
	if d := MirrorConsumerConfigOf(in, "p", 1).DeliverSubject; d != m[1].Stream.Mirror.Consumer.DeliverSubject {
		t.Errorf("the consumer of mirror 1 delivers on %s, the mirror reads %s", d, m[1].Stream.Mirror.Consumer.DeliverSubject)
	}
}
