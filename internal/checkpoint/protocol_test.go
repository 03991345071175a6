package checkpoint_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/pkg/natstest"
)

// TestProtocolRoundTrip: each message of the checkpoint protocol decodes
// as it was encoded, and what no weir process sends is refused.
func TestProtocolRoundTrip(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	tr := checkpoint.Trigger{Checkpoint: 7, At: at, Savepoint: "before-upgrade"}
	b, err := checkpoint.EncodeTrigger(tr)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := checkpoint.ParseTrigger(b); err != nil || got != tr {
		t.Errorf("trigger: %+v %v, want %+v", got, err, tr)
	}

	ack := checkpoint.Ack{Checkpoint: 7, Operator: "dedup", Instance: "0", FirstBarrier: at, Manifest: checkpoint.ManifestKey("dedup", "0", 7),
		StartDelay: time.Millisecond, Alignment: 2 * time.Millisecond, Snapshot: 3, Upload: 4, FullBytes: 5, NewBytes: 6, Assignment: 2}
	if b, err = checkpoint.EncodeAck(ack); err != nil {
		t.Fatal(err)
	}
	if got, err := checkpoint.ParseAck(b); err != nil || got != ack {
		t.Errorf("ack: %+v %v, want %+v", got, err, ack)
	}

	req := checkpoint.Request{Savepoint: "s1"}
	if b, err = checkpoint.EncodeRequest(req); err != nil {
		t.Fatal(err)
	}
	if got, err := checkpoint.ParseRequest(b); err != nil || got != req {
		t.Errorf("request: %+v %v, want %+v", got, err, req)
	}

	rec := checkpoint.Record{Checkpoint: 7, Status: checkpoint.Complete, Triggered: at, Completed: at.Add(time.Second),
		Expected: []string{"dedup/0"}, Acks: map[string]checkpoint.Ack{"dedup/0": ack}, Savepoint: "s1", Assignment: 2}
	if b, err = checkpoint.EncodeRecord(rec); err != nil {
		t.Fatal(err)
	}
	if got, err := checkpoint.DecodeRecord(b); err != nil || !reflect.DeepEqual(got, rec) {
		t.Errorf("record: %+v %v, want %+v", got, err, rec)
	}

	if b, err = checkpoint.EncodeCompleted(7); err != nil {
		t.Fatal(err)
	}
	if n, err := checkpoint.ParseCompleted(b); err != nil || n != 7 {
		t.Errorf("completed: %d %v, want 7", n, err)
	}

	for _, c := range []struct {
		what  string
		parse func([]byte) error
		bad   []string
	}{
		{"trigger", func(b []byte) error { _, err := checkpoint.ParseTrigger(b); return err },
			[]string{`{"checkpoint":1,"at":"2026-01-02T00:00:00Z","extra":1}`, `{"checkpoint":1} {}`, `{"checkpoint":0}`}},
		{"ack", func(b []byte) error { _, err := checkpoint.ParseAck(b); return err },
			[]string{`{"checkpoint":1,"operator":"a","instance":"0","manifets":"x"}`}},
		{"request", func(b []byte) error { _, err := checkpoint.ParseRequest(b); return err },
			[]string{``, `{"savepoint":"a.b"}`, `{"save_point":"a"}`, `[]`}},
		{"record", func(b []byte) error { _, err := checkpoint.DecodeRecord(b); return err },
			[]string{`{"checkpoint":1}`, `{"checkpoint":1,"status":"complete","colour":1}`, `not json`}},
		{"completed", func(b []byte) error { _, err := checkpoint.ParseCompleted(b); return err },
			[]string{`{}`, `{"checkpoint":"7"}`, `{"checkpoint":7,"at":1}`}},
	} {
		for _, bad := range c.bad {
			if err := c.parse([]byte(bad)); err == nil {
				t.Errorf("%s %q parsed, want an error", c.what, bad)
			}
		}
	}
}

// TestAsk: a request reaches whoever answers the request subject, and
// the answer reads back as the record sent; an answer that is no record
// is an error, not an empty record.
func TestAsk(t *testing.T) {
	nc := natstest.Run(t).Connect(t)
	want := checkpoint.Record{Checkpoint: 3, Status: checkpoint.Aborted, Reason: "no instance is registered", Savepoint: "s"}
	sub, err := nc.Subscribe(checkpoint.RequestSubject("p"), func(m *nats.Msg) {
		r, err := checkpoint.ParseRequest(m.Data)
		b := []byte(`{"checkpoint":3}`) // no status: no coordinator's answer
		if err == nil && r.Savepoint != "garbage" {
			rec := want
			rec.Savepoint = r.Savepoint
			b, err = checkpoint.EncodeRecord(rec)
		}
		if err == nil {
			err = m.Respond(b)
		}
		if err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := checkpoint.Ask(ctx, nc, "p", checkpoint.Request{Savepoint: "s"})
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Ask: %+v %v, want %+v", got, err, want)
	}
	if got, err := checkpoint.Ask(ctx, nc, "p", checkpoint.Request{Savepoint: "garbage"}); err == nil || !strings.Contains(err.Error(), "status") {
		t.Errorf("Ask of a malformed answer: %+v %v, want an error", got, err)
	}
	if _, err := checkpoint.Ask(ctx, nc, "nobody", checkpoint.Request{}); err == nil || !strings.Contains(err.Error(), "no coordinator answered") {
		t.Errorf("Ask with no coordinator: %v", err)
	}
}
