package window

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/weirflow/weir/internal/keygroup"
	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/state"
)

// Two-level aggregation spreads a hot key. On an edge that splits keys
// (edges[].split), each record is routed, and its state keyed, by its key
// and a salt from its ID (keygroup.Split): the reading operator, NewPartial,
// aggregates each part of a key as an ordinary window operator would and
// emits the part's accumulator, keyed by the key again; the operator after
// it, Merge, keeps each window's latest accumulator per part and emits
// their merge — when its watermark passes the window, and again for each
// late part within the allowed lateness. The partial operator forwards
// its watermark only behind its panes, so when the merge's watermark
// passes a window every part's on-time pane is in.
//
// With accumulating panes (or one pane per window), an on-time pane and
// no early ones — what the contract's linter and NewMerge require — the
// merged panes carry the values the unsplit aggregation's on-time and late
// panes would.

// Partial is the aggregator of the first phase: agg's own accumulator,
// rendered as itself (a JSON string, base64) for Merge to combine.
func Partial(agg Aggregator) Aggregator { return partialAgg{agg} }

type partialAgg struct{ Aggregator }

func (a partialAgg) Name() string { return "partial " + a.Aggregator.Name() }

func (a partialAgg) Result(acc []byte) (json.RawMessage, error) {
	return json.Marshal(base64.StdEncoding.EncodeToString(acc))
}

// NewPartial returns the first phase over a split edge: the window
// operator aggregating each part with Partial(agg), its panes keyed by
// the key the part was split from. Each pane's Key is the part's split
// key, which Merge tells the parts apart by.
func NewPartial(spec Spec, agg Aggregator, family string) (operator.Operator, error) {
	w, err := New(spec, Partial(agg), family)
	if err != nil {
		return nil, err
	}
	return operator.Chain(w, operator.Rekey(func(r record.Record) ([]byte, error) {
		return keygroup.Unsplit(r.Key), nil
	})), nil
}

// Merge is the second phase: it merges the parts' accumulators of each
// key and window.
type Merge struct {
	spec   Spec
	agg    Aggregator
	family string
}

var _ operator.Horizoned = (*Merge)(nil)

// NewMerge returns the merge of the parts NewPartial(spec, agg, …) emits,
// keeping each key's windows in the map family named family.
func NewMerge(spec Spec, agg Aggregator, family string) (*Merge, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	switch {
	case agg == nil:
		return nil, fmt.Errorf("%w: nil aggregator", ErrInvalidSpec)
	case family == "":
		return nil, fmt.Errorf("%w: empty state family name", ErrInvalidSpec)
	case spec.Kind == Session:
		return nil, fmt.Errorf("%w: a merge cannot combine sessions: each part's sessions have their own bounds", ErrInvalidSpec)
	case spec.EarlyEvery > 0 || spec.EarlyCount > 0:
		return nil, fmt.Errorf("%w: a merge emits no early panes: an early pane of one part is not the key's", ErrInvalidSpec)
	case !spec.OnTime:
		return nil, fmt.Errorf("%w: a merge emits its value when the watermark passes the window: on_time must be set", ErrInvalidSpec)
	case spec.Accumulation == Retracting, spec.Accumulation == Discarding && spec.AllowedLateness > 0:
		// A discarding part's pane after its on-time one — a late pane, or
		// the final one its GC fires for late records — holds only what
		// came since; the merge would replace the part's value with it.
		return nil, fmt.Errorf("%w: a merge replaces each part's last pane with its next, which needs accumulating panes (or discarding with no allowed lateness: one pane per window)", ErrInvalidSpec)
	}
	return &Merge{spec: spec, agg: agg, family: family}, nil
}

// SchemaVersion tells the merge's state from a window operator's
// (versions 1 and 2) in the same family: a snapshot of one does not
// restore into the other.
func (m *Merge) SchemaVersion() int { return 1001 }

// Families names the merge's state family: one entry per live window.
func (m *Merge) Families() []string { return []string{m.family} }

// StateHorizon is as the window operator's: the window plus the allowed
// lateness.
func (m *Merge) StateHorizon() time.Duration {
	span := m.spec.Size
	if m.spec.Kind == Session {
		span = m.spec.Gap
	}
	return span + m.spec.AllowedLateness
}

// merged is what the merge keeps of one window of a key.
type merged struct {
	// Parts holds each part's latest accumulator, by split key.
	Parts map[string][]byte `json:"parts"`
	// Fired: the on-time pane went out; a part arriving since is late.
	Fired   bool   `json:"fired,omitempty"`
	Index   uint64 `json:"index"`
	Version uint64 `json:"version"`
}

// The merge's timers are the window operator's on-time and GC timers:
// at equal times, the on-time one fires first.
const (
	mergeOnTime = purposeOnTime
	mergeGC     = purposeGC
)

// Process takes one part's pane.
func (m *Merge) Process(env operator.Env, r record.Record) error {
	p, err := DecodePane(r.Value)
	if err != nil {
		return operator.Poison("payload", fmt.Errorf("record %s: not a partial pane: %w", r.ID, err))
	}
	var acc string
	if err := json.Unmarshal(p.Value, &acc); err != nil {
		return operator.Poison("payload", fmt.Errorf("record %s: pane value is not a partial accumulator: %w", r.ID, err))
	}
	raw, err := base64.StdEncoding.DecodeString(acc)
	if err != nil {
		return operator.Poison("payload", fmt.Errorf("record %s: partial accumulator: %w", r.ID, err))
	}
	sp := span{p.Window.Start.UnixMilli(), p.Window.End.UnixMilli()}
	st := env.Map(m.family)
	w, ok, err := m.load(st, sp)
	if err != nil {
		return err
	}
	if !ok {
		wm := env.Watermark()
		if m.spec.expired(sp, wm) {
			return env.SideOutput(r, fmt.Sprintf("window: merge of %s after its allowed lateness %v (watermark %s)", sp.window(), m.spec.AllowedLateness, wm.UTC().Format(time.RFC3339Nano)))
		}
		w = merged{Parts: map[string][]byte{}}
		// A window first seen after the watermark passed it is late from
		// its first part on, as the unsplit window's would be.
		w.Fired = !wm.IsZero() && !wm.Before(sp.window().MaxTimestamp())
		if !w.Fired {
			if err := env.SetTimer(state.EventTime, sp.window().MaxTimestamp(), timerName(sp, mergeOnTime)); err != nil {
				return err
			}
		}
		if err := env.SetTimer(state.EventTime, m.spec.gcTime(sp), timerName(sp, mergeGC)); err != nil {
			return err
		}
	}
	w.Parts[p.Key] = raw
	if w.Fired {
		// A late part: the key's value changes now.
		if err := m.emit(env, sp, &w, Late, false); err != nil {
			return err
		}
	}
	return m.store(st, sp, w)
}

// OnTimer emits a window's on-time pane when the watermark passes it, and
// forgets the window after its allowed lateness.
func (m *Merge) OnTimer(env operator.Env, t state.Timer) error {
	sp, purpose, err := parseTimerName(t.Name)
	if err != nil {
		return err
	}
	st := env.Map(m.family)
	w, ok, err := m.load(st, sp)
	if err != nil || !ok {
		return err
	}
	if purpose == mergeGC {
		return st.Delete(subKey(sp))
	}
	if w.Fired {
		return nil
	}
	w.Fired = true
	if err := m.emit(env, sp, &w, OnTime, false); err != nil {
		return err
	}
	return m.store(st, sp, w)
}

// emit sends the merge of the window's parts.
func (m *Merge) emit(env operator.Env, sp span, w *merged, timing Timing, final bool) error {
	var acc []byte
	for _, part := range slices.Sorted(maps.Keys(w.Parts)) {
		var err error
		if acc, err = m.agg.Merge(acc, w.Parts[part]); err != nil {
			return fmt.Errorf("window: merge part %q of %s: %w", part, sp.window(), err)
		}
	}
	val, err := m.agg.Result(acc)
	if err != nil {
		return err
	}
	w.Version++
	p := Pane{Window: sp.window(), Key: string(env.Key()), Info: PaneInfo{Index: w.Index, Timing: timing, Final: final},
		Version: w.Version, Kind: Insert, Value: val}
	w.Index++
	r, err := p.Record()
	if err != nil {
		return err
	}
	return env.Emit(r)
}

func (m *Merge) load(st state.Map, sp span) (merged, bool, error) {
	raw, ok, err := st.Get(subKey(sp))
	if err != nil || !ok {
		return merged{}, false, err
	}
	var w merged
	if err := json.Unmarshal(raw, &w); err != nil {
		return merged{}, false, fmt.Errorf("%w: merge state of %s: %v", ErrCorrupt, sp.window(), err)
	}
	if w.Parts == nil {
		w.Parts = map[string][]byte{}
	}
	return w, true, nil
}

func (m *Merge) store(st state.Map, sp span, w merged) error {
	b, err := json.Marshal(w)
	if err != nil {
		return err
	}
	return st.Put(subKey(sp), b)
}
