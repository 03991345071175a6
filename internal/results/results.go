// Package results reads a pipeline's results as revisions and compares two
// runs of them: each result — a window's key and bounds, or a record's ID —
// with its revisions in the order they were stored. `weir compare` prints
// such a comparison of two result generations; `weir chaos` judges a run
// under faults by it against a failure-free one.
package results

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/pkg/window"
)

// Edges are the contract's json edges no operator reads — its
// results — or the one named.
func Edges(c *contracts.Contract, only string) []string {
	read := map[string]bool{}
	for _, op := range c.Operators {
		read[op.Input] = true
	}
	var out []string
	for _, e := range c.Edges {
		if (only == "" && e.Format == contracts.FormatJSON && !read[e.Name]) || e.Name == only {
			out = append(out, e.Name)
		}
	}
	return out
}

// Revision is one emission of a result.
type Revision struct {
	Seq   uint64          `json:"seq"`
	Value json.RawMessage `json:"value"`
	// Timing and Index say which firing of a window a pane was.
	Timing string `json:"timing,omitempty"`
	Index  uint64 `json:"index,omitempty"`
}

// Read reads a generation's result edge: per result — a window's key and
// bounds, or a record's ID — its revisions in the order stored, and the
// IDs of the messages stored more than once (each once more for every
// repeat). Windows ending after limit (when set) are left out.
func Read(ctx context.Context, js jetstream.JetStream, pipeline, edgeName string, limit time.Time) (_ map[string][]Revision, repeated []string, _ error) {
	out := map[string][]Revision{}
	st, err := js.Stream(ctx, edge.StreamName(pipeline, edgeName))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil, fmt.Errorf("weir compare: pipeline %s has no results on edge %s (no stream %s)", pipeline, edgeName, edge.StreamName(pipeline, edgeName))
	}
	if err != nil {
		return nil, nil, err
	}
	prefix := pipeline + "." + edgeName + "."
	seen := map[string]bool{}
	err = Each(ctx, st, func(m jetstream.Msg, seq uint64) error {
		h := m.Headers()
		if edge.IsCommitMarker(h) {
			return nil
		}
		id, rev, end := resultOf(m.Data(), h, prefix)
		if !limit.IsZero() && end.After(limit) {
			return nil
		}
		// An at-least-once edge may store a message again once the
		// stream's duplicate window has passed: one revision still.
		mid := messageID(h)
		if id != "" && (mid == "" || !seen[mid]) {
			seen[mid] = true
			rev.Seq = seq
			out[id] = append(out[id], rev)
		} else if id != "" {
			repeated = append(repeated, mid)
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("weir compare: %w", err)
	}
	return out, repeated, nil
}

// Each calls fn with every message st held when it was looked up,
// in order, and its stream sequence. It reads with one ordered consumer as
// an iterator: Next on an ordered consumer makes a consumer for each
// message, and on a cluster soon asks one the cluster does not know yet
// ("no responders"). It fails when nothing comes for 30 s (a cluster
// under load may take that long to place the consumer).
func Each(ctx context.Context, st jetstream.Stream, fn func(m jetstream.Msg, seq uint64) error) error {
	info := st.CachedInfo()
	if info.State.Msgs == 0 {
		return nil
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return err
	}
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	defer it.Stop()
	for {
		nctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		m, err := it.Next(jetstream.NextContext(nctx))
		cancel()
		if err != nil {
			return fmt.Errorf("read %s: %w", info.Config.Name, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return err
		}
		if err := fn(m, meta.Sequence.Stream); err != nil {
			return err
		}
		if meta.Sequence.Stream >= info.State.LastSeq {
			return nil
		}
	}
}

// resultOf names a result message's result and its revision: a window
// pane is a revision of its window's result, key and bounds; any other
// record is its own result, named by its ID without the pipeline's prefix.
// end is a pane's window end, zero for any other record.
func resultOf(data []byte, h map[string][]string, prefix string) (id string, rev Revision, end time.Time) {
	var compact bytes.Buffer
	if json.Compact(&compact, data) != nil {
		compact.Reset()
		compact.Write(data)
	}
	rev = Revision{Value: compact.Bytes()}
	if p, err := window.DecodePane(data); err == nil && !p.Window.End.IsZero() {
		// A pane's final flag says how far the watermark had gone when it
		// fired — past the allowed lateness or not — which depends on how
		// the input was cut into steps; what the pane says does not. It is
		// left out of the comparison.
		p.Info.Final = false
		if b, err := p.Encode(); err == nil {
			rev.Value = b
		}
		rev.Timing, rev.Index = p.Info.Timing.String(), p.Info.Index
		return p.Key + " " + p.Window.String(), rev, p.Window.End
	}
	if id := messageID(h); id != "" {
		return strings.TrimPrefix(id, prefix), rev, time.Time{}
	}
	return string(rev.Value), rev, time.Time{}
}

// messageID is a result message's ID: what Nats-Msg-Id would have been
// on a transactional edge (Weir-Result-Id), else Nats-Msg-Id. Both start
// with the generation's pipeline and edge.
func messageID(h map[string][]string) string {
	for _, name := range []string{edge.HeaderResultID, jetstream.MsgIDHeader} {
		if vs := h[name]; len(vs) > 0 && vs[0] != "" {
			return vs[0]
		}
	}
	return ""
}

// Difference is one result whose revisions differ.
type Difference struct {
	Result string `json:"result"`
	// Kind is "value" (revision Revision differs), "extra" (B has
	// revisions A lacks, from Revision on) or "missing" (A has revisions
	// B lacks).
	Kind     string    `json:"kind"`
	Revision int       `json:"revision"`
	A        *Revision `json:"a,omitempty"`
	B        *Revision `json:"b,omitempty"`
}

// EdgeComparison is the comparison of one result edge.
type EdgeComparison struct {
	Edge       string       `json:"edge"`
	Results    int          `json:"results"`
	Equal      int          `json:"equal"`
	RevisionsA int          `json:"revisions_a"`
	RevisionsB int          `json:"revisions_b"`
	Differ     []Difference `json:"differ,omitempty"`
	OnlyA      []string     `json:"only_a,omitempty"`
	OnlyB      []string     `json:"only_b,omitempty"`
}

// CompareEdge compares the revisions of every result of one edge.
func CompareEdge(name string, a, b map[string][]Revision) EdgeComparison {
	e := EdgeComparison{Edge: name}
	ids := map[string]bool{}
	for id := range a {
		ids[id] = true
	}
	for id := range b {
		ids[id] = true
	}
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		ra, inA := a[id]
		rb, inB := b[id]
		e.RevisionsA += len(ra)
		e.RevisionsB += len(rb)
		switch {
		case !inB:
			e.OnlyA = append(e.OnlyA, id)
			continue
		case !inA:
			e.OnlyB = append(e.OnlyB, id)
			continue
		}
		e.Results++
		if d, ok := firstDifference(id, ra, rb); ok {
			e.Differ = append(e.Differ, d)
		} else {
			e.Equal++
		}
	}
	e.Results += len(e.OnlyA) + len(e.OnlyB)
	return e
}

func firstDifference(id string, a, b []Revision) (Difference, bool) {
	for i := range min(len(a), len(b)) {
		if !bytes.Equal(a[i].Value, b[i].Value) {
			return Difference{Result: id, Kind: "value", Revision: i + 1, A: &a[i], B: &b[i]}, true
		}
	}
	switch {
	case len(b) > len(a):
		return Difference{Result: id, Kind: "extra", Revision: len(a) + 1, B: &b[len(a)]}, true
	case len(a) > len(b):
		return Difference{Result: id, Kind: "missing", Revision: len(b) + 1, A: &a[len(b)]}, true
	}
	return Difference{}, false
}
