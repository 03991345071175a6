package harness

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/keygroup"
	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/pkg/ingress"
	nexmarkgen "github.com/weirflow/weir/services/nexmark-gen"
)

// chaosGen is the corpus: events an hour old, out of order within a
// second (the contracts' bound is two), duplicate IDs, a hot key, and
// now and then a timestamp two days ahead, filed as a dead letter or on
// the side output. No late
// events and no idle partition: whether an event is late, or a partition
// idle, depends on when things happen, and a run's results must not.
func (r *pipelineRun) chaosGen(o chaosOptions) nexmarkgen.Config {
	in := r.c.Ingress
	return nexmarkgen.Config{
		Stream: in.Stream, SubjectPrefix: in.SubjectPrefix, Retention: in.Retention.D(), DuplicateWindow: ingress.Duplicates(in),
		Producer: "chaos", Rate: o.rate, Replicas: r.replicas,
		Gen: nexmark.Config{Seed: 5, FirstEventTime: o.first, EventsPerSecond: 50,
			Partitions: in.Partitions, KeyGroups: r.c.State.KeyGroups, OutOfOrder: time.Second, Events: uint64(o.events),
			Hard: nexmark.HardCases{DuplicateEvery: 13, HotKeyRatio: 0.3, FutureEvery: 499, FutureBy: 48 * time.Hour, IdlePartition: -1}},
	}
}

// chaosMessages is how many messages the corpus of gen and its flush
// events are.
func chaosMessages(gen nexmarkgen.Config) int {
	g, err := nexmark.NewGenerator(gen.Gen)
	if err != nil {
		return 0
	}
	n := 0
	for _, ok := g.Next(); ok; _, ok = g.Next() {
		n++
	}
	return n + gen.Gen.Partitions
}

// publishThroughKills publishes the corpus of gen, resuming after every
// failure — a broker killed mid-batch — from what was acknowledged (the
// message IDs drop what is stored twice), then a person event a minute
// after the corpus on every partition, whose event time closes every
// window of it.
func (r *pipelineRun) publishThroughKills(ctx context.Context, gen nexmarkgen.Config) error {
	last := gen.Gen.FirstEventTime
	g, err := nexmark.NewGenerator(gen.Gen)
	if err != nil {
		return err
	}
	for m, ok := g.Next(); ok; m, ok = g.Next() {
		if t := m.Event.Time(); t.After(last) && !g.Future(m.Index) {
			last = t
		}
	}
	retry := func(what string, f func() error) error {
		for deadline := time.Now().Add(2 * time.Minute); ; {
			err := f()
			if err == nil || ctx.Err() != nil {
				return err
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: %w", what, err)
			}
			select {
			case <-time.After(200 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	err = retry("publish the corpus", func() error {
		n, err := nexmarkgen.Publish(ctx, r.js, gen, time.Now, nil)
		gen.Start += n
		return err
	})
	if err != nil {
		return err
	}
	flush := last.Add(time.Minute)
	layout := keygroup.Layout{Groups: gen.Gen.KeyGroups, Partitions: gen.Gen.Partitions}
	for p := range gen.Gen.Partitions {
		// Its ID's key group is the partition's, as the generator's events'
		// are: an instance of two that owns the partition owns the ID.
		id := fmt.Sprintf("flush-%d", p)
		for k := 0; layout.Partition([]byte(id)) != p; k++ {
			id = fmt.Sprintf("flush-%d-%d", p, k)
		}
		ev := nexmark.Event{ID: id, Kind: nexmark.KindPerson, Key: "99999", TS: flush.UnixMilli(),
			Person: &nexmark.Person{ID: 99999, Name: "flush", DateTime: flush.UnixMilli()}}
		data, err := ev.Encode()
		if err != nil {
			return err
		}
		msg := &nats.Msg{Subject: gen.Subject(p), Header: nats.Header{}, Data: data}
		msg.Header.Set(jetstream.MsgIDHeader, "chaos-flush-"+fmt.Sprint(p))
		if err := retry("publish a flush event", func() error {
			_, err := r.js.PublishMsg(ctx, msg)
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}
