// Package streamtest is what the tests of weir's packages share, in the
// spirit of net/http/httptest: polling a condition with a deadline, reading
// a whole stream or a pipeline's dead letters, and running a contract's
// operators in-process against a real broker (pkg/natstest) with real
// Pebble state.
package streamtest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/deadletter"
	"github.com/weirflow/weir/pkg/stream"
)

// CheckFor polls cond until it returns nil, or fails the test when total
// has passed, with cond's last error and what explain says.
func CheckFor(t testing.TB, total time.Duration, cond func() error, explain ...func() string) {
	t.Helper()
	deadline := time.Now().Add(total)
	var err error
	for time.Now().Before(deadline) {
		if err = cond(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond) // poll interval, not a wait for an outcome
	}
	for _, e := range explain {
		t.Log(e())
	}
	t.Fatalf("condition not met within %s: %v", total, err)
}

// Messages reads every message a stream holds, in order; none when the
// stream does not exist yet.
func Messages(t testing.TB, js jetstream.JetStream, name string) []jetstream.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs == 0 {
		return nil
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var out []jetstream.Msg
	for seq := uint64(0); seq < info.State.LastSeq; {
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("read %s after seq %d of %d: %v", name, seq, info.State.LastSeq, err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		seq = meta.Sequence.Stream
		out = append(out, msg)
	}
	return out
}

// Letters reads every letter of a pipeline's dead-letter stream, side
// outputs included, failing the test on one that does not name its
// coordinate and reason.
func Letters(t testing.TB, js jetstream.JetStream, pipeline string) []deadletter.Letter {
	t.Helper()
	var out []deadletter.Letter
	for _, msg := range Messages(t, js, deadletter.StreamName(pipeline)) {
		l, err := deadletter.Parse(msg)
		if err != nil {
			t.Fatal(err)
		}
		if l.At.Stream == "" || l.At.Seq == 0 || l.Reason == "" {
			t.Errorf("dead letter without coordinate or reason: %+v", l)
		}
		out = append(out, l)
	}
	return out
}

// Pipeline is a contract's operators running in-process.
type Pipeline struct {
	// Runtimes are the operators' runtimes, in the contract's order.
	Runtimes []*stream.Runtime
	// ByID are the same, by operator ID.
	ByID map[string]*stream.Runtime

	t    testing.TB
	once sync.Once
	stop context.CancelFunc
	done chan error
}

// Run runs the contract's operators that factories builds, each as
// instance "0" with its state under dir/<operator>, a 20 ms tick and
// whatever configure changes, until Stop or the test's end.
func Run(t testing.TB, url string, c *contracts.Contract, dir string, factories map[string]stream.Factory, configure ...func(*stream.Config)) *Pipeline {
	t.Helper()
	p := &Pipeline{t: t, ByID: map[string]*stream.Runtime{}, done: make(chan error, 1)}
	var ids []string
	for _, op := range c.Operators {
		if _, ok := factories[op.ID]; ok {
			ids = append(ids, op.ID)
		}
	}
	if len(ids) == 0 {
		t.Fatalf("streamtest: no operator of contract %s is in the factories", c.File)
	}
	rts, err := stream.Runtimes(stream.Config{NATSURL: url, Contract: c, DataDir: dir, Instance: "0", TickInterval: 20 * time.Millisecond},
		"", factories, ids, configure...)
	if err != nil {
		t.Fatal(err)
	}
	p.Runtimes = rts
	for i, id := range ids {
		p.ByID[id] = rts[i]
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.stop = cancel
	go func() { p.done <- stream.RunGroup(ctx, p.Runtimes...) }()
	t.Cleanup(p.Stop)
	return p
}

// Stop stops the operators and waits for them; an operator that failed
// fails the test. Stopping twice is stopping once.
func (p *Pipeline) Stop() {
	p.once.Do(func() {
		p.stop()
		if err := <-p.done; err != nil {
			p.t.Errorf("pipeline: %v", err)
		}
	})
}
