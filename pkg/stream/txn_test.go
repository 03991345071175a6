package stream

import (
	"reflect"
	"testing"
	"time"

	"github.com/weirflow/weir/internal/edge"
)

// TestTxnStateRoundTrips checks that a transactional sink's persisted
// state and its held results read back as written, and that a truncated
// record is refused rather than read as an empty state.
func TestTxnStateRoundTrips(t *testing.T) {
	s := txnState{wseq: 7, hseq: 1 << 40, cutThrough: 99, cuts: []txnCut{{3, 50}, {5, 99}}}
	var got txnState
	if err := got.unmarshal(s.marshal()); err != nil || !reflect.DeepEqual(got, s) {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, s)
	}
	b := s.marshal()
	if err := got.unmarshal(b[:len(b)-1]); err == nil {
		t.Fatalf("a truncated state read as %+v", got)
	}
	s.rewound = 8 // a replay in progress
	if err := got.unmarshal(s.marshal()); err != nil || !reflect.DeepEqual(got, s) {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, s)
	}

	m := edge.Message{Subject: "weir.p.results.1", ID: "p.results.x", Producer: "op/0", Data: []byte(`{"a":1}`),
		JSON: true, Key: []byte("k"), Time: time.Unix(1700000000, 5).UTC()}
	data, _ := m.MarshalBinary()
	w, ws, back, err := parseHeld(heldValue("op/0", 42, data))
	if err != nil || w != "op/0" || ws != 42 || back.ID != m.ID || string(back.Data) != string(m.Data) || !back.Time.Equal(m.Time) {
		t.Fatalf("held result: writer %q seq %d message %+v, %v", w, ws, back, err)
	}
	if _, _, _, err := parseHeld([]byte{200}); err == nil {
		t.Fatal("a corrupt held result parsed")
	}
}
