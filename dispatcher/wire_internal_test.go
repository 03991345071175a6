package dispatcher

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/outbox"
)

// TestOutcomeRoundTrip: an outcome decodes as it was encoded, and what no
// dispatcher writes is refused rather than read as an empty outcome.
func TestOutcomeRoundTrip(t *testing.T) {
	want := Outcome{Key: "6f1c0f3e-6a1e-5b2a-9c1e-2f0c5d7e8a90", Kind: "charge", Source: "NEXMARK/nexmark.events.0#7", Done: true,
		Status: 201, Answer: "ok", Attempts: 2, MaybeRepeated: true, At: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Erasable: []string{"a", "b"}}
	b, err := EncodeOutcome(want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeOutcome(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
	for _, bad := range []string{``, `{`, `[]`, `{"key":"k","done":"yes"}`, `{"key":"k","colour":"red"}`, `{"done":true}`, `{"key":"k"} {"key":"l"}`} {
		if o, err := DecodeOutcome([]byte(bad)); err == nil {
			t.Errorf("DecodeOutcome(%q) = %+v, want an error", bad, o)
		}
	}
}

// TestDeadLetterRoundTrip: a dead letter reads back as filed, and one
// without the status every filed letter carries is refused.
func TestDeadLetterRoundTrip(t *testing.T) {
	in := outbox.Intent{Key: "6f1c0f3e-6a1e-5b2a-9c1e-2f0c5d7e8a90", Kind: "charge", Source: "NEXMARK/nexmark.events.0#7"}
	data := []byte(`{"key":"6f1c0f3e-6a1e-5b2a-9c1e-2f0c5d7e8a90"}`)
	m := deadLetterMsg("weir.p.charges-dlq", in, data, []string{"n1", "n2"}, 422, "refused: no such card")
	got, err := DecodeDeadLetter(9, m.Header, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	want := DeadLetter{Seq: 9, Key: in.Key, Source: in.Source, Status: "422", Reason: "refused: no such card", Data: data, Erasable: []string{"n1", "n2"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
	if id := m.Header.Get("Nats-Msg-Id"); id != "dead."+in.Key {
		t.Errorf("message ID %q, want one per intent key", id)
	}
	// A message that was no intent is filed as is: its data is kept out
	// of the JSON view, and it has no key.
	m = deadLetterMsg("weir.p.charges-dlq", outbox.Intent{Source: "OUT/weir.p.charges.0#3"}, []byte("not json"), nil, 0, "outbox: decode intent")
	if got, err = DecodeDeadLetter(3, m.Header, m.Data); err != nil || got.Key != "" || got.Data != nil || got.Status != "0" || m.Header.Get("Nats-Msg-Id") != "" {
		t.Errorf("a filed non-intent reads %+v, %v", got, err)
	}
	m.Header.Del(HeaderStatus)
	if _, err := DecodeDeadLetter(3, m.Header, m.Data); err == nil || !strings.Contains(err.Error(), HeaderStatus) {
		t.Errorf("a letter without %s: %v, want an error naming it", HeaderStatus, err)
	}
	if len(m.Header.Values(edge.HeaderErasable)) != 0 {
		t.Errorf("erasure names on a letter filed without any")
	}
}
