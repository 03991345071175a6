package outbox_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/weirflow/weir/outbox"
	"github.com/weirflow/weir/pkg/record"
)

// TestKeyIsDeterministic checks that an intent's key depends on its
// pipeline, operator, source coordinate and index, and on nothing else: a
// replay of the same record mints the same key.
func TestKeyIsDeterministic(t *testing.T) {
	at := record.Coordinate{Stream: "NEXMARK", Subject: "nexmark.events.1", Seq: 42}
	k := outbox.Key("auctions", "close", at, 0)
	if k != outbox.Key("auctions", "close", at, 0) {
		t.Fatal("the same intent got two keys")
	}
	other := at
	other.Seq++
	for _, o := range []string{outbox.Key("auctions2", "close", at, 0), outbox.Key("auctions", "close2", at, 0),
		outbox.Key("auctions", "close", other, 0), outbox.Key("auctions", "close", at, 1)} {
		if o == k {
			t.Fatalf("two intents share key %s", k)
		}
	}
	in := outbox.Intent{Key: k, Kind: "charges", Payload: json.RawMessage(`{"amount":5}`), Source: at.String()}
	r, err := in.Record(time.Unix(1, 0))
	if err != nil || r.ID != k {
		t.Fatalf("record: %+v, %v", r, err)
	}
	back, err := outbox.Decode(r.Value)
	if err != nil || back.Key != k || string(back.Payload) != `{"amount":5}` {
		t.Fatalf("decode: %+v, %v", back, err)
	}
	for _, bad := range []string{`{"key":"x","kind":"charges","payload":{}}`, `{"key":"` + k + `","kind":"a/b","payload":{}}`, `{"key":"` + k + `","kind":"c","payload":{},"extra":1}`} {
		if _, err := outbox.Decode([]byte(bad)); err == nil {
			t.Errorf("decoded %s", bad)
		}
	}
}
