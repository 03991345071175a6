package erasure

import (
	"testing"

	"github.com/weirflow/weir/pkg/record"
)

// A record of an erased key was written before the erasure when its
// source coordinate is at or below the mark of its stream; a record
// without a coordinate the request marks — a pane, a record of a stream
// not marked — is judged by where it was read.
func TestBefore(t *testing.T) {
	req := Request{Marks: map[string]uint64{"NEXMARK": 100, "WEIR_P_BIDS": 40}}
	for _, c := range []struct {
		name   string
		at     record.Coordinate
		stream string
		seq    uint64
		want   bool
	}{
		{"ingress record before", record.Coordinate{Stream: "NEXMARK", Seq: 100}, "WEIR_P_BIDS", 90, true},
		{"ingress record after, read from an edge below its mark", record.Coordinate{Stream: "NEXMARK", Seq: 101}, "WEIR_P_BIDS", 10, false},
		{"no coordinate, read below the mark", record.Coordinate{}, "WEIR_P_BIDS", 40, true},
		{"no coordinate, read past the mark", record.Coordinate{}, "WEIR_P_BIDS", 41, false},
		{"a stream the request does not mark", record.Coordinate{Stream: "OTHER", Seq: 1}, "WEIR_P_OTHER", 1, false},
	} {
		if got := req.Before(c.at, c.stream, c.seq); got != c.want {
			t.Errorf("%s: Before = %v, want %v", c.name, got, c.want)
		}
	}
}

// The digest names a key without revealing it, and tells keys apart.
func TestDigest(t *testing.T) {
	a, b := Digest([]byte("alice")), Digest([]byte("bob"))
	if len(a) != 64 || a == b || a == Digest([]byte("alice ")) {
		t.Errorf("digests %s, %s", a, b)
	}
}
