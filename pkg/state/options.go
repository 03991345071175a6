package state

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/weirflow/weir/internal/keygroup"
)

// Kind is the shape of a state family.
type Kind uint8

const (
	// KindValue holds one value per key.
	KindValue Kind = iota + 1
	// KindMap holds a map of sub-keys to values per key, ordered by sub-key.
	KindMap
	// KindList holds an append-only list of values per key.
	KindList
)

func (k Kind) String() string {
	switch k {
	case KindValue:
		return "value"
	case KindMap:
		return "map"
	case KindList:
		return "list"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// LimitAction is what the runtime does when a family reaches MaxKeys.
type LimitAction uint8

const (
	// LimitFail fails the step: the input is not acknowledged and the
	// operator stops, so an operator must raise the bound or fix the input.
	LimitFail LimitAction = iota
	// LimitDeadLetter sends the record that would have created the key to the
	// dead-letter stream and goes on.
	LimitDeadLetter
)

func (a LimitAction) String() string {
	switch a {
	case LimitFail:
		return "fail"
	case LimitDeadLetter:
		return "dead-letter"
	}
	return fmt.Sprintf("LimitAction(%d)", uint8(a))
}

// Family declares one named piece of keyed state.
type Family struct {
	// Name identifies the family in keys; it must be unique and stable.
	Name string
	// Kind is the family's shape.
	Kind Kind
	// TTL, when positive, expires an entry TTL after its last write, in
	// processing time. Value entries, map entries and whole lists expire.
	// Zero means entries live until cleared. An entry keeps the expiry it
	// was written with: a changed TTL applies to later writes.
	TTL time.Duration
	// MaxKeys bounds the family's live keys (keys with a value, a non-empty
	// map or a list). It must be positive: state is bounded by a declared
	// business rule, not by disk.
	MaxKeys int64
	// OnLimit is the declared response to a write beyond MaxKeys.
	OnLimit LimitAction
}

// Validate reports whether the family can be used.
func (f Family) Validate() error {
	switch {
	case f.Name == "":
		return fmt.Errorf("%w: family name is empty", ErrInvalidOptions)
	case f.Kind < KindValue || f.Kind > KindList:
		return fmt.Errorf("%w: family %q: invalid kind %d", ErrInvalidOptions, f.Name, f.Kind)
	case f.TTL < 0:
		return fmt.Errorf("%w: family %q: negative TTL %v", ErrInvalidOptions, f.Name, f.TTL)
	case f.MaxKeys <= 0:
		return fmt.Errorf("%w: family %q: MaxKeys must be positive, got %d", ErrInvalidOptions, f.Name, f.MaxKeys)
	case f.OnLimit > LimitDeadLetter:
		return fmt.Errorf("%w: family %q: invalid OnLimit %d", ErrInvalidOptions, f.Name, f.OnLimit)
	}
	return nil
}

// Options configures a Store.
type Options struct {
	// FS is the file system; nil means vfs.Default. Tests use vfs.NewMem().
	FS vfs.FS
	// Families declares every state family the operator uses.
	Families []Family
	// KeyGroups is the pipeline's key-group count, in [1, keygroup.MaxGroups].
	KeyGroups int
	// Logger receives limit warnings and Pebble's own messages; nil discards.
	Logger *slog.Logger
	// CacheSize is the block cache size in bytes; 0 means DefaultCacheSize.
	// Pebble charges its memtables to the same cache (at most
	// memTablesHeld of memTableSize: 16 MiB; 4 MiB for a small state, 8
	// without state), so it must be well above that for any table block
	// to stay cached.
	CacheSize int64
	// NoSync skips the fsync of each commit. The zero value is durable: a
	// committed batch survives a crash. NoSync commits survive a process
	// crash but may be lost, whole, with the machine.
	NoSync bool
}

// DefaultCacheSize is the block cache size when Options.CacheSize is 0.
const DefaultCacheSize = 64 << 20

// MemoryBound is the memory a store opened with these options holds at
// most: its block cache (which Pebble charges its memtables to as well,
// at most memTablesHeld of memTableSize), plus a memtable being flushed
// beyond its reservation, the open tables' indexes and filters that live
// outside the cache, and the read cache of recently used keys (cache.go).
func (o Options) MemoryBound() int64 {
	cache := o.CacheSize
	if cache == 0 {
		cache = DefaultCacheSize
	}
	// A cache smaller than the memtables holds no blocks, and the
	// memtables are allocated all the same.
	mem := o.memTableSize()
	cache = max(cache, memTablesHeld*mem)
	return cache + mem + tableOverhead + o.readCacheSize()
}

// memTableSize is the size of the store's memtables. Pebble starts a
// store's first memtable at 256 KiB and doubles the size at each flush up
// to this one, and keeps a flushed memtable to reuse; a memtable's pages
// are resident once written. So what its memtables hold grows with the
// bytes written until it reaches its bound, memTablesHeld of them.
//
// Smaller memtables reach their bound sooner — within the first few MiB
// a store writes, the first second of a busy operator, rather than after
// tens of MiB — so that a process's memory is flat after its start,
// whatever the number of events (docs/BENCHMARKS.md, q7 at 50k to 1.6M
// events); they cost CPU in more flushes, log rotations, tables and
// compactions, and a batch of half the size or more is committed as a
// flushable of its own, a flush per step. So:
//
//   - a store whose families declare at most smallStateKeys keys (q7's
//     window maxima) gets 1 MiB: it writes its state, overwritten step
//     after step, and what the runtime writes each step, so a flush is
//     small;
//   - a store without families (a stateless operator's) gets 2 MiB: it
//     writes only its positions and its staged output, deleted the step
//     after, but a whole step of output, which at 1 MiB often passed half
//     the memtable (q0: about a fifth fewer events per CPU-second);
//   - a store with more keys keeps Pebble's default, 4 MiB: smaller
//     memtables cost an operator with state per event more flushes and
//     compactions (dedup: about a third fewer events per CPU-second at
//     1 MiB).
func (o Options) memTableSize() int64 {
	var keys int64
	for _, f := range o.Families {
		keys += f.MaxKeys
	}
	switch {
	case len(o.Families) == 0:
		return 2 << 20
	case keys <= smallStateKeys:
		return 1 << 20
	}
	return 4 << 20
}

// readCacheSize is the read cache's bound (cache.go): a sixteenth of the
// block cache's, at most 4 MiB — enough for the keys a window or session
// operator touches step after step, small enough for its map to stay
// cheap to probe on every write.
func (o Options) readCacheSize() int64 {
	cache := o.CacheSize
	if cache == 0 {
		cache = DefaultCacheSize
	}
	return min(cache/16, 4<<20)
}

const (
	// smallStateKeys is the most keys a store's families declare for it
	// to get the smallest memtables (memTableSize): as many entries of 64
	// bytes as one memtable of 1 MiB holds.
	smallStateKeys = 1 << 14
	// memTablesHeld is how many memtables a store holds at most: the one
	// written to and the one being flushed (Pebble stops writes when its
	// queue holds MemTableStopWritesThreshold, 2, of the memtable size),
	// one kept to reuse and one an open iterator or snapshot may still
	// hold. All are charged to the block cache.
	memTablesHeld = 4
	// tableOverhead covers the open tables' metadata outside the cache.
	tableOverhead = 8 << 20
)

// Validate reports whether the options can be used.
func (o Options) Validate() error {
	if o.CacheSize < 0 {
		return fmt.Errorf("%w: negative CacheSize %d", ErrInvalidOptions, o.CacheSize)
	}
	if o.KeyGroups < 1 || o.KeyGroups > keygroup.MaxGroups {
		return fmt.Errorf("%w: KeyGroups %d out of range [1, %d]", ErrInvalidOptions, o.KeyGroups, keygroup.MaxGroups)
	}
	seen := make(map[string]bool, len(o.Families))
	for _, f := range o.Families {
		if err := f.Validate(); err != nil {
			return err
		}
		if seen[f.Name] {
			return fmt.Errorf("%w: family %q declared twice", ErrInvalidOptions, f.Name)
		}
		seen[f.Name] = true
	}
	return nil
}
