package state_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/weirflow/weir/pkg/state"
)

func Example() {
	s, err := state.Open("db", state.Options{
		FS:        vfs.NewMem(),
		KeyGroups: 256,
		Families: []state.Family{
			{Name: "count", Kind: state.KindValue, MaxKeys: 1_000_000, TTL: 24 * time.Hour},
			{Name: "seen", Kind: state.KindMap, MaxKeys: 1, OnLimit: state.LimitDeadLetter},
		},
	})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

	// One step: update state, register a timer, stage output and record the
	// input position, all in one atomic commit.
	b := s.NewBatch()
	sc := b.Scope(42, []byte("user-7"), now)
	_ = sc.Value("count").Set([]byte("1"))
	_ = sc.Map("seen").Put([]byte("event-1"), nil)
	_ = b.SetTimer(state.Timer{Domain: state.EventTime, Time: now.Add(time.Minute), KeyGroup: 42, Key: []byte("user-7"), Name: "window-end"})
	_ = b.StageOutput("00000001", []byte("frame"))
	_ = b.SetPosition("ingress/0", state.Position{Seq: 100})
	// A second key would exceed the "seen" family's bound.
	err = b.Scope(3, []byte("user-8"), now).Map("seen").Put([]byte("event-2"), nil)
	var le *state.LimitError
	if errors.As(err, &le) {
		fmt.Println("limit:", le.Family, le.Action)
	}
	if err := b.Commit(); err != nil {
		panic(err)
	}

	p, _, _ := s.Position("ingress/0")
	timers, _ := s.DueTimers(state.EventTime, now.Add(time.Hour), 10)
	fmt.Println("position:", p.Seq, "due timers:", len(timers), timers[0].Name)

	// A day later the count has expired; Expire deletes it.
	n, _ := s.Expire(now.Add(24*time.Hour), 100)
	fmt.Println("expired:", n, "live counts:", s.Stats().Keys["count"])
	// Output:
	// limit: seen dead-letter
	// position: 100 due timers: 1 window-end
	// expired: 1 live counts: 0
}
