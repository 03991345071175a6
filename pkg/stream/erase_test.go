package stream

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/erasure"
	"github.com/weirflow/weir/pkg/record"
)

// framed is a delivered message as far as erasures.drops reads it: its
// headers.
type framed struct {
	jetstream.Msg
	h nats.Header
}

func (m framed) Headers() nats.Header { return m.h }

// TestErasureWinsOverWhatAWriterHadNotErased: under erasure-wins, a record
// of an erased key is dropped when it was written before the request's
// marks — or, past them, in a frame whose writer had not yet applied the
// erasure (a window's timer emitting from the key's old state); a frame
// whose writer had applied it passes, as do other keys' records and
// ingress messages past the marks, which carry no such header.
func TestErasureWinsOverWhatAWriterHadNotErased(t *testing.T) {
	req := erasure.Request{Key: []byte("k"), Rev: 9, Marks: map[string]uint64{"IN": 100, "EDGE": 50}}
	e := &erasures{dropping: map[string]erasure.Request{"k": req}, droppingTenants: map[string]erasure.Request{}}
	edgeIn := &edge.Input{Name: "e/0", Stream: "EDGE", Frames: true}
	ingress := &edge.Input{Name: "ingress/0", Stream: "IN"}
	stamped := func(rev string) jetstream.Msg {
		h := nats.Header{}
		if rev != "" {
			h.Set(edge.HeaderErased, rev)
		}
		return framed{h: h}
	}
	k := record.Record{Kind: record.Data, Key: []byte("k")}
	for _, c := range []struct {
		name string
		r    record.Record
		d    edge.Delivery
		drop bool
	}{
		{"an edge frame before the mark", k, edge.Delivery{Input: edgeIn, Seq: 50, Msg: stamped("")}, true},
		{"past the mark, its writer not erased", k, edge.Delivery{Input: edgeIn, Seq: 60, Msg: stamped("")}, true},
		{"past the mark, its writer at an earlier erasure", k, edge.Delivery{Input: edgeIn, Seq: 60, Msg: stamped("8")}, true},
		{"past the mark, its writer erased", k, edge.Delivery{Input: edgeIn, Seq: 60, Msg: stamped("9")}, false},
		{"another key, its writer not erased", record.Record{Kind: record.Data, Key: []byte("j")}, edge.Delivery{Input: edgeIn, Seq: 60, Msg: stamped("")}, false},
		{"an ingress message before the mark", k, edge.Delivery{Input: ingress, Seq: 100, Msg: stamped("")}, true},
		{"an ingress message past the mark", k, edge.Delivery{Input: ingress, Seq: 101, Msg: stamped("")}, false},
	} {
		if got := e.drops(c.r, c.d); got != c.drop {
			t.Errorf("%s: dropped %v, want %v", c.name, got, c.drop)
		}
	}
}
