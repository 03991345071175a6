package nexmark

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/weirflow/weir/internal/keygroup"
)

// Defaults applied to zero fields of a Config.
const (
	// DefaultFirstEventTimeMillis is 2024-01-01T00:00:00Z. The default is a
	// fixed instant, never the wall clock, so that a default generator is
	// reproducible.
	DefaultFirstEventTimeMillis int64 = 1704067200000
	// DefaultEventsPerSecond spaces events one millisecond apart in event time.
	DefaultEventsPerSecond = 1000.0
	// DefaultPartitions is the partition count when none is given.
	DefaultPartitions = 1
)

// Config describes a generated event stream. Zero fields take the defaults
// above (key groups default to keygroup.DefaultGroups), and the zero
// HardCases injects nothing.
type Config struct {
	// Seed selects the stream; equal seeds produce equal bytes.
	Seed int64 `json:"seed"`
	// FirstEventTime is the nominal event time of event 0.
	FirstEventTime time.Time `json:"first_event_time"`
	// EventsPerSecond spaces events in event time: event i has nominal time
	// FirstEventTime + i/EventsPerSecond, truncated to the millisecond.
	EventsPerSecond float64 `json:"events_per_second"`
	// Partitions is the number of ingress partitions; KeyGroups the number
	// of key groups they divide (see package keygroup).
	Partitions int `json:"partitions"`
	KeyGroups  int `json:"key_groups"`
	// OutOfOrder is the largest ordinary jitter: an ordinary event's time is
	// its nominal time minus a seeded amount in [0, OutOfOrder]. A bounded
	// out-of-orderness watermark of OutOfOrder never finds an ordinary event
	// late.
	OutOfOrder time.Duration `json:"out_of_order"`
	// Events bounds the stream to event indices [0, Events); 0 is unbounded.
	Events uint64 `json:"events"`
	// Hard injects hard cases.
	Hard HardCases `json:"hard"`
}

// HardCases are the adversarial patterns the generator injects. A zero
// field disables its case. The "every Nth" cases pick event indices i with
// (i+1) % N == 0, independent of the seed.
type HardCases struct {
	// LateEvery makes every Nth event late: its time is its nominal time
	// minus LateBy (no jitter).
	LateEvery int           `json:"late_every"`
	LateBy    time.Duration `json:"late_by"`
	// DuplicateEvery follows every Nth event by a duplicate message with the
	// same ID and the same payload bytes.
	DuplicateEvery int `json:"duplicate_every"`
	// FutureEvery puts every Nth event FutureBy ahead of its nominal time.
	// An event picked by both LateEvery and FutureEvery is late.
	FutureEvery int           `json:"future_every"`
	FutureBy    time.Duration `json:"future_by"`
	// IdlePartition falls silent while the generator is at event indices
	// [IdleFrom, IdleTo): events of that range that belong to it are held
	// back and published, in index order, right after the range (before
	// event IdleTo), so nothing is lost but the partition is idle and then
	// delivers old data. The case is off when IdleTo is 0 or IdlePartition
	// is negative (-1 is the conventional "none").
	IdlePartition int    `json:"idle_partition"`
	IdleFrom      uint64 `json:"idle_from"`
	IdleTo        uint64 `json:"idle_to"`
	// HotKeyRatio is the fraction of bids, in [0, 1], that go to the hot
	// auction HotAuctionID regardless of which auctions are open.
	HotKeyRatio float64 `json:"hot_key_ratio"`
}

// idle reports whether the idle-partition case is on.
func (h HardCases) idle() bool { return h.IdlePartition >= 0 && h.IdleTo > h.IdleFrom }

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.FirstEventTime.IsZero() {
		c.FirstEventTime = time.UnixMilli(DefaultFirstEventTimeMillis).UTC()
	}
	if c.EventsPerSecond == 0 {
		c.EventsPerSecond = DefaultEventsPerSecond
	}
	if c.Partitions == 0 {
		c.Partitions = DefaultPartitions
	}
	if c.KeyGroups == 0 {
		c.KeyGroups = keygroup.DefaultGroups
	}
	return c
}

// Validate reports whether c, with defaults applied, describes a stream.
func (c Config) Validate() error {
	c = c.WithDefaults()
	var errs []error
	if math.IsNaN(c.EventsPerSecond) || math.IsInf(c.EventsPerSecond, 0) || c.EventsPerSecond <= 0 {
		errs = append(errs, fmt.Errorf("nexmark: events_per_second %v must be positive and finite", c.EventsPerSecond))
	}
	if err := (keygroup.Layout{Groups: c.KeyGroups, Partitions: c.Partitions}).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("nexmark: partitions/key_groups: %w", err))
	}
	if c.OutOfOrder < 0 {
		errs = append(errs, fmt.Errorf("nexmark: out_of_order %v is negative", c.OutOfOrder))
	}
	errs = append(errs, c.Hard.validate(c.Partitions)...)
	return errors.Join(errs...)
}

func (h HardCases) validate(partitions int) []error {
	var errs []error
	every := func(name string, n int, by time.Duration, byName string) {
		switch {
		case n < 0:
			errs = append(errs, fmt.Errorf("nexmark: hard.%s %d is negative", name, n))
		case by < 0:
			errs = append(errs, fmt.Errorf("nexmark: hard.%s %v is negative", byName, by))
		case n > 0 && byName != "" && by < time.Millisecond:
			errs = append(errs, fmt.Errorf("nexmark: hard.%s is set but hard.%s %v is below 1ms", name, byName, by))
		}
	}
	every("late_every", h.LateEvery, h.LateBy, "late_by")
	every("future_every", h.FutureEvery, h.FutureBy, "future_by")
	every("duplicate_every", h.DuplicateEvery, 0, "")
	if h.IdlePartition >= partitions && h.idle() {
		errs = append(errs, fmt.Errorf("nexmark: hard.idle_partition %d out of range [0, %d)", h.IdlePartition, partitions))
	}
	if h.IdleTo != 0 && h.IdleTo < h.IdleFrom {
		errs = append(errs, fmt.Errorf("nexmark: hard.idle_to %d is before hard.idle_from %d", h.IdleTo, h.IdleFrom))
	}
	if math.IsNaN(h.HotKeyRatio) || h.HotKeyRatio < 0 || h.HotKeyRatio > 1 {
		errs = append(errs, fmt.Errorf("nexmark: hard.hot_key_ratio %v out of range [0, 1]", h.HotKeyRatio))
	}
	return errs
}

// Message is one message of the publish order: an event, the partition it
// goes to and its wire payload. A duplicate repeats the Index, Event and
// Payload of the message before it.
type Message struct {
	// Seq is the position of the message in the publish order, from 0.
	// Duplicates and held-back events take positions like any message.
	Seq uint64
	// Index is the event index: Event equals Generator.Event(Index).
	Index     uint64
	Partition int
	Event     Event
	Payload   []byte
	Duplicate bool
}

// Generator produces a Config's event stream. Event is safe for concurrent
// use; Next and Seek move a cursor and are not.
type Generator struct {
	cfg        Config
	layout     keygroup.Layout
	idPrefix   string
	baseMillis int64
	msPerEvent float64
	// openMillis is how long, in event time, an auction stays among the
	// InFlightAuctions newest.
	openMillis float64
	words      vocabulary
	cur        cursor
}

// cursor is the position of the sequential API in the publish order.
type cursor struct {
	pos     uint64 // messages yielded so far
	next    uint64 // next event index of the main scan
	last    uint64 // index of the last event yielded
	dup     bool   // a duplicate of last is due
	flush   bool   // yielding the held-back events of the idle range
	scan    uint64 // next index to examine while flushing
	flushed bool   // the idle range has been flushed
}

// NewGenerator validates c, applies its defaults and returns a generator
// positioned at the first message.
func NewGenerator(c Config) (*Generator, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c = c.WithDefaults()
	if c.Events > 0 && c.Hard.IdleTo > c.Events {
		// The held-back events are released when the stream ends.
		c.Hard.IdleTo = max(c.Events, c.Hard.IdleFrom)
	}
	msPerEvent := 1000 / c.EventsPerSecond
	return &Generator{
		cfg:        c,
		layout:     keygroup.Layout{Groups: c.KeyGroups, Partitions: c.Partitions},
		idPrefix:   strconv.FormatUint(uint64(c.Seed), 10) + "-",
		baseMillis: c.FirstEventTime.UnixMilli(),
		msPerEvent: msPerEvent,
		openMillis: msPerEvent * InFlightAuctions * TotalProportion / AuctionProportion,
		words:      newVocabulary(),
	}, nil
}

// Config returns the generator's config with defaults applied.
func (g *Generator) Config() Config { return g.cfg }

// Nominal returns the nominal event time of event i in Unix milliseconds:
// FirstEventTime + i/EventsPerSecond, truncated to the millisecond.
func (g *Generator) Nominal(i uint64) int64 {
	return g.baseMillis + int64(float64(i)*g.msPerEvent)
}

// eventID is "<seed as unsigned decimal>-<index>".
func (g *Generator) eventID(i uint64) string {
	return g.idPrefix + strconv.FormatUint(i, 10)
}

// Partition returns the ingress partition of event i: the partition that
// owns the key group of its event ID.
func (g *Generator) Partition(i uint64) int {
	return g.layout.Partition([]byte(g.eventID(i)))
}

// Late reports whether event i is late by Hard.LateBy.
func (g *Generator) Late(i uint64) bool { return every(i, g.cfg.Hard.LateEvery) }

// Future reports whether event i is ahead of its nominal time.
func (g *Generator) Future(i uint64) bool {
	return every(i, g.cfg.Hard.FutureEvery) && !g.Late(i)
}

// Duplicated reports whether event i is followed by a duplicate.
func (g *Generator) Duplicated(i uint64) bool { return every(i, g.cfg.Hard.DuplicateEvery) }

// HeldBack reports whether event i belongs to the idle partition during the
// idle range, and so is published after the range.
func (g *Generator) HeldBack(i uint64) bool {
	h := g.cfg.Hard
	return h.idle() && i >= h.IdleFrom && i < h.IdleTo && g.Partition(i) == h.IdlePartition
}

func every(i uint64, n int) bool { return n > 0 && (i+1)%uint64(n) == 0 }

// Event returns event i. It depends only on the config and i.
func (g *Generator) Event(i uint64) Event {
	r := newRNG(g.cfg.Seed, i)
	nominal := g.Nominal(i)
	var jitter int64
	if ooo := g.cfg.OutOfOrder.Milliseconds(); ooo > 0 {
		jitter = r.intn(ooo + 1)
	}
	ts := nominal - jitter
	switch {
	case g.Late(i):
		ts = nominal - g.cfg.Hard.LateBy.Milliseconds()
	case g.Future(i):
		ts = nominal + g.cfg.Hard.FutureBy.Milliseconds()
	}
	return g.synthesize(&r, i, ts)
}

// message returns event i as the message at publish position seq.
func (g *Generator) message(seq, i uint64, dup bool) Message {
	ev := g.Event(i)
	payload, err := ev.Encode()
	if err != nil {
		// Event holds only strings, integers and pointers to such structs.
		panic(fmt.Sprintf("nexmark: unreachable: %v", err))
	}
	return Message{Seq: seq, Index: i, Partition: g.Partition(i), Event: ev, Payload: payload, Duplicate: dup}
}

// Next returns the next message of the publish order. It reports false
// when a bounded stream (Config.Events) is exhausted.
func (g *Generator) Next() (Message, bool) {
	seq := g.cur.pos
	i, dup, ok := g.advance()
	if !ok {
		return Message{}, false
	}
	return g.message(seq, i, dup), true
}

// Pos returns the publish position of the message Next returns next, which
// is also the number of messages before it.
func (g *Generator) Pos() uint64 { return g.cur.pos }

// advance moves the cursor one message on and returns its event index and
// whether it is a duplicate. It builds no events.
func (g *Generator) advance() (uint64, bool, bool) {
	c := &g.cur
	h := g.cfg.Hard
	if c.dup {
		c.dup = false
		c.pos++
		return c.last, true, true
	}
	for {
		if c.flush {
			for c.scan < h.IdleTo && !g.HeldBack(c.scan) {
				c.scan++
			}
			if c.scan < h.IdleTo {
				i := c.scan
				c.scan++
				return g.yield(i), false, true
			}
			c.flush, c.flushed = false, true
		}
		i := c.next
		if h.idle() && i == h.IdleTo && !c.flushed {
			c.flush, c.scan = true, h.IdleFrom
			continue
		}
		if g.cfg.Events > 0 && i >= g.cfg.Events {
			return 0, false, false
		}
		c.next++
		if g.HeldBack(i) {
			continue
		}
		return g.yield(i), false, true
	}
}

func (g *Generator) yield(i uint64) uint64 {
	g.cur.last, g.cur.dup = i, g.Duplicated(i)
	g.cur.pos++
	return i
}

// plainPos is the publish position of event i if nothing were held back:
// i plus the duplicates of the events before it.
func (g *Generator) plainPos(i uint64) uint64 {
	if n := g.cfg.Hard.DuplicateEvery; n > 0 {
		return i + i/uint64(n)
	}
	return i
}

// Seek positions the generator so that Next returns the message at publish
// position pos, exactly as if pos messages had been read with Next. A
// publisher that acknowledged pos messages resumes with Seek(pos). Seek
// costs O(log pos), plus a scan of the idle range when pos falls inside it.
func (g *Generator) Seek(pos uint64) {
	h := g.cfg.Hard
	if g.cfg.Events > 0 && pos >= g.plainPos(g.cfg.Events) {
		g.cur = cursor{pos: g.plainPos(g.cfg.Events), next: g.cfg.Events, flushed: true}
		return
	}
	if h.idle() && pos >= g.plainPos(h.IdleFrom) && pos < g.plainPos(h.IdleTo) {
		// Held-back events reorder the idle range, but it takes the same
		// positions in total: replay it from its start.
		g.cur = cursor{pos: g.plainPos(h.IdleFrom), next: h.IdleFrom}
		for g.cur.pos < pos {
			g.advance()
		}
		return
	}
	// Outside the idle range the order is plain: find the last event whose
	// position is at or before pos.
	lo, hi := uint64(0), pos
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if g.plainPos(mid) <= pos {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	i := lo
	c := cursor{pos: pos, next: i, flushed: h.idle() && i >= h.IdleTo}
	if g.plainPos(i) < pos {
		// pos is the duplicate of event i.
		c.next, c.last, c.dup = i+1, i, true
	}
	g.cur = c
}
