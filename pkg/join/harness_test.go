package join_test

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirflow/weir/internal/keygroup"
	"github.com/weirflow/weir/pkg/join"
	weiroperator "github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/operator/operatortest"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/state"
)

// operator is what both joins offer the runtime.
type operator interface {
	Process(env weiroperator.Env, r record.Record) error
	OnTimer(env weiroperator.Env, t state.Timer) error
	Families() []string
}

const testGroups = 16

// harness drives a join with operatortest, the way the runtime does: one
// batch per step, committed at its end; event-time timers fired, in the
// step that advances the watermark, up to it.
type harness struct {
	*operatortest.Harness
	t    fataler
	lazy bool // advance does not fire timers
}

// fataler is the part of testing.TB the harness uses; examples panic.
type fataler = operatortest.TB

func newHarness(t testing.TB, op operator) *harness {
	t.Helper()
	h := openHarness(t, op)
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// openHarness opens the join's state on a Pebble store in memory.
func openHarness(t fataler, op operator) *harness {
	t.Helper()
	return &harness{t: t, Harness: operatortest.New(t, op, operatortest.Options{
		KeyGroups: testGroups, Now: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)})}
}

func (h *harness) mustProcess(r record.Record) {
	h.t.Helper()
	h.MustProcess(r)
}

// advance moves the watermark to wm and fires the due event-time timers,
// including those set while firing, in one step; while lazy is set it only
// moves the watermark, as if the timers ran late.
func (h *harness) advance(wm time.Time) {
	h.t.Helper()
	if h.lazy {
		h.SetWatermark(wm)
		return
	}
	if err := h.Advance(wm); err != nil {
		h.t.Fatalf("advance to %s: %v", wm, err)
	}
	if due, err := h.Store().DueTimers(state.EventTime, h.Watermark(), 1); err != nil || len(due) > 0 {
		h.t.Fatalf("after advance to %s: due timers %v, %v", wm, due, err)
	}
}

// keys is the family's live key count.
func (h *harness) keys(family string) int64 { return h.Store().Stats().Keys[family] }

// entries counts the map entries of a key.
func (h *harness) entries(family string, key []byte) int {
	b := h.Store().NewBatch()
	defer b.Close()
	n := 0
	err := b.Scope(keygroup.Of(key, testGroups), key, h.Now()).Map(family).Range(func(_, _ []byte) bool { n++; return true })
	if err != nil {
		h.t.Fatalf("%v", err)
	}
	return n
}

// Records of the tests: the side is the first letter of the producer ("L"
// or "R"); the value names the record.

var epoch = time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)

func at(ms int64) time.Time { return epoch.Add(time.Duration(ms) * time.Millisecond) }

func rec(s join.Side, id, key string, ms int64) record.Record {
	p := "L"
	if s == join.Right {
		p = "R"
	}
	return record.Record{
		Kind: record.Data, ID: id, Key: []byte(key), Producer: p, Time: at(ms),
		At:    record.Coordinate{Stream: "IN", Subject: "in." + p, Seq: uint64(len(id)) + uint64(ms)},
		Value: []byte(`"` + id + `"`),
	}
}

func sideOf(r record.Record) (join.Side, bool) {
	switch r.Producer {
	case "L":
		return join.Left, true
	case "R":
		return join.Right, true
	}
	return 0, false
}

// pairValue is what combine makes of a pair.
type pairValue struct {
	L, R   string
	LT, RT int64
}

func combine(l, r record.Record) (record.Record, error) {
	v, err := json.Marshal(pairValue{L: l.ID, R: r.ID, LT: l.Time.UnixMilli(), RT: r.Time.UnixMilli()})
	return record.Record{Value: v}, err
}

// want is an expected output.
type want struct {
	id   string
	key  string
	time time.Time
}

func (w want) String() string {
	return fmt.Sprintf("%s key=%s t=%s", w.id, w.key, w.time.UTC().Format("15:04:05.000"))
}

// checkOut compares the emitted records, in order, with want, and checks
// each value is combine's.
func checkOut(t *testing.T, got []record.Record, want []want) {
	t.Helper()
	n := max(len(got), len(want))
	bad := 0
	for i := range n {
		var g, w string
		if i < len(got) {
			g = fmt.Sprintf("%s key=%s t=%s", got[i].ID, got[i].Key, got[i].Time.UTC().Format("15:04:05.000"))
			var pv pairValue
			if err := json.Unmarshal(got[i].Value, &pv); err != nil || pv.L+"+"+pv.R != got[i].ID || got[i].Kind != record.Data {
				t.Errorf("output %d: value %s does not match ID %s", i, got[i].Value, got[i].ID)
			}
		}
		if i < len(want) {
			w = want[i].String()
		}
		if g != w {
			if bad++; bad <= 10 {
				t.Errorf("output %d:\n got  %s\n want %s", i, g, w)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d outputs differ (got %d, want %d)", bad, n, len(got), len(want))
	}
}

// sideIDs returns the IDs of side-output records, sorted.
func sideIDs(s []operatortest.SideOutput) []string {
	var ids []string
	for _, o := range s {
		ids = append(ids, o.Record.ID)
	}
	slices.Sort(ids)
	return ids
}

// event is one input of a randomized history: a record, or (rec.ID empty)
// a watermark advance to wm.
type event struct {
	rec record.Record
	wm  time.Time
}

// history makes a seeded random input: n records over keys, times spread
// over span ms mostly increasing with jitter (out of order), and watermark
// advances that trail the largest time seen by a random lag, so some
// records arrive late. Times are multiples of grain ms. It ends with no
// final watermark.
func history(rng *rand.Rand, n, keys int, span, grain int64) []event {
	var evs []event
	var maxSeen int64
	var wm int64 = -1 << 40
	for i := range n {
		base := span * int64(i) / int64(n)
		ts := base + rng.Int64N(400) - 200
		if rng.IntN(20) == 0 {
			ts -= rng.Int64N(3000) // a straggler
		}
		ts -= ((ts % grain) + grain) % grain
		s := join.Left
		if rng.IntN(2) == 0 {
			s = join.Right
		}
		id := fmt.Sprintf("%s%04d", s.String()[:1], i)
		evs = append(evs, event{rec: rec(s, id, fmt.Sprintf("k%d", rng.IntN(keys)), ts)})
		maxSeen = max(maxSeen, ts)
		if rng.IntN(6) == 0 {
			if w := maxSeen - rng.Int64N(600); w > wm {
				wm = w
				evs = append(evs, event{wm: at(wm)})
			}
		}
	}
	return evs
}

// run feeds a history to the harness.
func (h *harness) run(evs []event) {
	h.t.Helper()
	for _, e := range evs {
		if e.rec.ID == "" {
			h.advance(e.wm)
			continue
		}
		h.mustProcess(e.rec)
	}
}

// arrivals pairs each record of a history with the watermark at its arrival.
type arrival struct {
	rec record.Record
	wm  time.Time
	seq int
}

func arrivals(evs []event) []arrival {
	var out []arrival
	var wm time.Time
	for _, e := range evs {
		if e.rec.ID == "" {
			wm = e.wm
			continue
		}
		out = append(out, arrival{rec: e.rec, wm: wm, seq: len(out)})
	}
	return out
}

func compareWant(a, b want) int {
	if c := a.time.Compare(b.time); c != 0 {
		return c
	}
	if c := cmp.Compare(keygroup.Of([]byte(a.key), testGroups), keygroup.Of([]byte(b.key), testGroups)); c != 0 {
		return c
	}
	return bytes.Compare([]byte(a.key), []byte(b.key))
}

func mustContain(t *testing.T, s, sub string) {
	t.Helper()
	if !strings.Contains(s, sub) {
		t.Errorf("%q does not contain %q", s, sub)
	}
}
