package test

import (
	"fmt"
	"testing"
	"time"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/deadletter"
	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/services/dedup"
)

// TestShedDropsOnlyOptionalRecordsWhileBehind runs the dedup pipeline
// under overload.policy shed (max_lag 200, persons optional) over a
// backlog of 3,000 events, then over a trickle it keeps up with. While it
// is behind it drops persons only, each one filed by its coordinate on the
// shed subject and counted; no other event is lost or repeated, no person
// both comes out and is shed; once it keeps up, nothing is shed.
func TestShedDropsOnlyOptionalRecordsWhileBehind(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a pipeline")
	}
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	c := loadContract(t)
	c.Overload.Policy, c.Overload.MaxLag = contracts.PolicyShed, 200
	c.Overload.Shed = contracts.Shed{Field: "kind", Values: []string{"person"}}
	if ps := c.Lint(); len(ps) > 0 {
		t.Fatal(ps)
	}
	cfg := genConfig(c, 3100)
	cfg.Gen.Hard.FutureEvery = 0
	want, _ := expected(t, cfg)
	persons := map[string]bool{}
	g, _ := nexmark.NewGenerator(cfg.Gen)
	for {
		m, ok := g.Next()
		if !ok {
			break
		}
		if m.Event.Kind == nexmark.KindPerson {
			persons[m.Event.ID] = true
		}
	}
	backlog, trickle := cfg, cfg
	backlog.Count = 3000
	trickle.Start, trickle.Count = 3000, 100

	publish(t, js, backlog)
	p := streamtest.Run(t, srv.ClientURL(), c, t.TempDir(), dedup.Factories())
	shedLetters := func() map[string]deadletter.Letter {
		out := map[string]deadletter.Letter{}
		for _, m := range streamtest.Messages(t, js, deadletter.StreamName(c.Pipeline)) {
			if m.Subject() != deadletter.ShedSubject(c.Pipeline, "dedup") {
				continue
			}
			l, err := deadletter.Parse(m)
			if err != nil {
				t.Fatal(err)
			}
			out[fmt.Sprint(l.At)] = l
		}
		return out
	}
	// The backlog's events: each comes out or is shed.
	all := want
	want = map[string]bool{}
	bg, _ := nexmark.NewGenerator(backlog.Gen)
	for n := uint64(0); n < backlog.Count; n++ {
		m, _ := bg.Next()
		if all[m.Event.ID] {
			want[m.Event.ID] = true
		}
	}
	settled := func() error {
		got, _ := sinkEvents(t, js, c)
		if shed := p.ByID["dedup"].Stats().Shed; len(got)+int(shed) < len(want) {
			return fmt.Errorf("%d out, %d shed, of %d", len(got), shed, len(want))
		}
		return nil
	}
	streamtest.CheckFor(t, time.Minute, settled)
	shed := p.ByID["dedup"].Stats().Shed
	if shed == 0 {
		t.Fatal("nothing was shed though the pipeline started 3,000 events behind, over max_lag 200")
	}
	letters := shedLetters()
	if int64(len(letters)) != shed {
		t.Fatalf("%d records shed, %d recorded on %s", shed, len(letters), deadletter.ShedSubject(c.Pipeline, "dedup"))
	}
	got, total := sinkEvents(t, js, c)
	if total != len(got) {
		t.Fatalf("an event came out twice: %d messages for %d ids", total, len(got))
	}
	shedIDs := map[string]bool{}
	for _, m := range streamtest.Messages(t, js, c.Ingress.Stream) {
		meta, _ := m.Metadata()
		if l, ok := letters[fmt.Sprint(record.Coordinate{Stream: c.Ingress.Stream, Subject: m.Subject(), Seq: meta.Sequence.Stream})]; ok {
			ev, err := nexmark.Decode(m.Data())
			if err != nil || ev.Kind != nexmark.KindPerson {
				t.Errorf("shed %s (%v), which is no person: %s", l.At, err, m.Data())
			}
			shedIDs[ev.ID] = true
		}
	}
	for id := range want {
		switch {
		case got[id] > 0 && shedIDs[id]:
			t.Errorf("%s came out and was shed", id)
		case got[id] == 0 && !shedIDs[id] && !persons[id]:
			t.Errorf("%s, no person, neither came out nor was shed", id)
		case got[id] == 0 && !shedIDs[id]:
			t.Errorf("person %s neither came out nor was shed", id)
		}
	}

	// Kept up with, a trickle sheds nothing.
	publish(t, js, trickle)
	tg, _ := nexmark.NewGenerator(trickle.Gen)
	tg.Seek(trickle.Start)
	for n := uint64(0); n < trickle.Count; n++ {
		m, _ := tg.Next()
		if all[m.Event.ID] {
			want[m.Event.ID] = true
		}
	}
	streamtest.CheckFor(t, time.Minute, func() error {
		got, _ := sinkEvents(t, js, c)
		for id := range want {
			if got[id] == 0 && !shedIDs[id] {
				return fmt.Errorf("%s not out yet", id)
			}
		}
		return nil
	})
	if s := p.ByID["dedup"].Stats().Shed; s != shed {
		t.Fatalf("%d more shed while the pipeline kept up", s-shed)
	}
	t.Logf("%d persons of %d shed while behind, each recorded by its coordinate; every other event out once; none shed once caught up", shed, len(persons))
}
