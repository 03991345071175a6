package window

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestSessionsAreOneEntryPerKey: a key's sessions, however many, are one
// state entry, gone once they have all closed.
func TestSessionsAreOneEntryPerKey(t *testing.T) {
	spec := Spec{Kind: Session, Gap: time.Second, OnTime: true}
	d := newDriver(t, spec, Count())
	var script []Step
	for i := range 6 {
		r := testRecord(fmt.Sprintf("r%d", i), "a", time.Duration(i)*3*time.Second, 1) // six sessions
		script = append(script, Step{Record: &r})
	}
	if err := d.run(script); err != nil {
		t.Fatal(err)
	}
	entries := func() (n int, sessions int) {
		b := d.h.Store().NewBatch()
		defer b.Close()
		if err := b.Scope(0, []byte("a"), d.h.Now()).Map(testFamily).Range(func(k, v []byte) bool {
			n++
			if list, err := decodeSessions(v); err == nil && bytes.Equal(k, sessionSubKey) {
				sessions = len(list)
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
		return n, sessions
	}
	if n, s := entries(); n != 1 || s != 6 {
		t.Fatalf("%d state entries holding %d sessions, want 1 holding 6", n, s)
	}
	if err := d.run([]Step{{Watermark: epoch(time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	if n, _ := entries(); n != 0 || len(d.panes()) != 6 {
		t.Fatalf("%d state entries and %d panes after every session closed, want 0 and 6", n, len(d.panes()))
	}
}

// TestSessionsEncoding round-trips the entry and refuses what encode
// cannot have written.
func TestSessionsEncoding(t *testing.T) {
	list := []session{
		{sp: span{-3000, -1000}, ws: winState{index: 1, version: 2, acc: []byte{7}}},
		{sp: span{-1000, 500}, ws: winState{late: true, count: 3, first: 9, last: []byte(`{}`)}},
	}
	b := encodeSessions(list)
	got, err := decodeSessions(b)
	if err != nil || fmt.Sprint(got) != fmt.Sprint(list) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	overlapping := encodeSessions([]session{{sp: span{0, 2000}}, {sp: span{1000, 3000}}})
	for name, bad := range map[string][]byte{
		"empty":       nil,
		"format":      append([]byte{9}, b[1:]...),
		"truncated":   b[:len(b)-1],
		"trailing":    append(bytes.Clone(b), 0),
		"overlapping": overlapping,
	} {
		if _, err := decodeSessions(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
}
