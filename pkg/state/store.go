package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Store is the keyed state of one operator instance: one Pebble database.
//
// Reads of committed records (Position, Meta, StagedOutputs, DueTimers,
// Stats) may run from any goroutine. Writes go through a Batch, and a Store
// has one writer at a time: NewBatch and Expire wait until the open batch is
// committed or closed.
type Store struct {
	db       *pebble.DB
	dir      string
	fs       vfs.FS
	log      *slog.Logger
	write    *pebble.WriteOptions
	groups   int
	families map[string]*family
	fams     []*family // in declaration order; index is family.idx
	timers   atomic.Int64
	// floor holds, per timer domain, a time no committed timer of the
	// domain is before (timer.go): math.MinInt64 when not known.
	floor [2]atomic.Int64

	// writer is held by the open Batch, from NewBatch to Commit or Close.
	writer sync.Mutex
	// cache holds committed values of keys batches read and write; the
	// writer lock guards it (cache.go).
	cache *readCache
	// writesHint is how many cacheable keys the last committed batch
	// wrote: the next batch's notes start at that size (Batch.note).
	writesHint int

	mu struct {
		sync.RWMutex // held for reading by every use of db, for writing by Close
		closed       bool
	}
	// broken is set by the first commit the disk refused (ErrDisk); the
	// store takes no write after it.
	broken atomic.Pointer[error]
}

// family is a declared family with its live counters.
type family struct {
	Family
	idx       int
	keys      atomic.Int64 // committed live keys
	limitHits atomic.Int64 // writes refused by MaxKeys since Open
}

// Stats describes a store's size.
type Stats struct {
	// Keys is the number of live keys per family: values, non-empty maps and
	// lists. Expired entries count until Expire deletes them.
	Keys map[string]int64
	// LimitHits counts, per family, writes refused by MaxKeys since Open.
	LimitHits map[string]int64
	// Timers is the number of registered timers.
	Timers int64
	// DiskBytes is the space Pebble uses on disk (WAL and tables).
	DiskBytes int64
}

// Open opens or creates the store in dir.
func Open(dir string, o Options) (*Store, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	fs := o.FS
	if fs == nil {
		fs = vfs.Default
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{
		dir:      dir,
		fs:       fs,
		log:      log,
		write:    pebble.Sync,
		groups:   o.KeyGroups,
		families: make(map[string]*family, len(o.Families)),
		cache:    newReadCache(o.readCacheSize()),
	}
	if o.NoSync {
		s.write = pebble.NoSync
	}
	for i, f := range o.Families {
		fam := &family{Family: f, idx: i}
		s.families[f.Name] = fam
		s.fams = append(s.fams, fam)
	}
	cacheSize := o.CacheSize
	if cacheSize == 0 {
		cacheSize = DefaultCacheSize
	}
	po := &pebble.Options{
		FS:                 fs,
		CacheSize:          cacheSize,
		MemTableSize:       uint64(o.memTableSize()),
		Logger:             pebbleLogger{log},
		FormatMajorVersion: pebble.FormatNewest,
	}
	// Every write reads the key first (to count keys and keep the expiry
	// index), so point reads must be cheap: bloom filters let a read skip
	// tables without the key. Deeper levels inherit L0's policy.
	po.Levels[0].FilterPolicy = bloom.FilterPolicy(10)
	db, err := pebble.Open(dir, po)
	if err != nil {
		return nil, fmt.Errorf("state: open %s: %w", dir, err)
	}
	s.db = db
	if err := s.checkFormat(); err != nil {
		return nil, errors.Join(err, db.Close())
	}
	if err := s.loadCounters(); err != nil {
		return nil, errors.Join(err, db.Close())
	}
	s.forgetFloors()
	return s, nil
}

// checkFormat records the layout version in a new store and checks it in an
// existing one.
func (s *Store) checkFormat() error {
	k := metaKey(metaFormat, "")
	v, ok, err := s.get(k)
	if err != nil {
		return err
	}
	if !ok {
		pb := s.db.NewBatch()
		defer pb.Close()
		if err := pb.Set(k, binary.AppendUvarint(nil, formatVersion), nil); err != nil {
			return fmt.Errorf("state: write format: %w", err)
		}
		if err := s.apply(pb); err != nil {
			return fmt.Errorf("state: write format: %w", err)
		}
		return nil
	}
	if ver, n := binary.Uvarint(v); n <= 0 || ver != formatVersion {
		return fmt.Errorf("%w: layout version %x, want %d", ErrIncompatible, v, formatVersion)
	}
	return nil
}

// loadCounters sums the per-key-group counters into the in-memory totals.
func (s *Store) loadCounters() error {
	unknown := map[string]bool{}
	err := s.scan([]byte{kindCount}, []byte{kindCount + 1}, func(k, v []byte) error {
		n, w := binary.Varint(v)
		if len(k) < 4 || w <= 0 {
			return fmt.Errorf("%w: counter %x", ErrCorrupt, k)
		}
		switch k[3] {
		case countTimers:
			s.timers.Add(n)
		case countFamily:
			name := string(k[4:])
			if f := s.families[name]; f != nil {
				f.keys.Add(n)
			} else if !unknown[name] {
				unknown[name] = true
				s.log.Warn("state: store holds keys of an undeclared family", "family", name)
			}
		default:
			return fmt.Errorf("%w: counter %x", ErrCorrupt, k)
		}
		return nil
	})
	return err
}

// Close closes the store. A batch still open fails with ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return ErrClosed
	}
	s.mu.closed = true
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("state: close: %w", err)
	}
	return nil
}

// Stats returns the store's live counts and disk use.
func (s *Store) Stats() Stats {
	st := Stats{
		Keys:      make(map[string]int64, len(s.fams)),
		LimitHits: make(map[string]int64, len(s.fams)),
		Timers:    s.timers.Load(),
	}
	for _, f := range s.fams {
		st.Keys[f.Name] = f.keys.Load()
		st.LimitHits[f.Name] = f.limitHits.Load()
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if !s.mu.closed {
		st.DiskBytes = int64(s.db.Metrics().DiskSpaceUsage())
	}
	return st
}

// Flush writes the memtable to table files, so that a following Checkpoint
// consists of immutable files that an incremental upload can share.
func (s *Store) Flush() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.writableLocked(); err != nil {
		return err
	}
	if err := s.db.Flush(); err != nil {
		return fmt.Errorf("state: flush: %w", err)
	}
	return nil
}

// Snapshot writes a copy of the committed state to dir made only of files
// that never change: it waits for any open batch, flushes the memtable to
// table files, checkpoints, and leaves out the write-ahead log, which then
// holds nothing the tables do not. Consecutive snapshots share most of their
// files, which is what makes uploads of them incremental. dir must not
// exist.
func (s *Store) Snapshot(dir string) error {
	s.writer.Lock()
	defer s.writer.Unlock()
	if err := s.Flush(); err != nil {
		return err
	}
	if err := s.Checkpoint(dir); err != nil {
		return err
	}
	fs := s.fs
	names, err := fs.List(dir)
	if err != nil {
		return fmt.Errorf("state: snapshot %s: %w", dir, err)
	}
	for _, n := range names {
		if strings.HasSuffix(n, ".log") {
			if err := fs.Remove(fs.PathJoin(dir, n)); err != nil {
				return fmt.Errorf("state: snapshot %s: %w", dir, err)
			}
		}
	}
	return nil
}

// Checkpoint writes a consistent copy of the committed state to dir, on the
// store's file system, hard-linking table files where it can. dir must not
// exist. The copy opens with Open like any store.
func (s *Store) Checkpoint(dir string) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.writableLocked(); err != nil {
		return err
	}
	if err := s.db.Checkpoint(dir, pebble.WithFlushedWAL()); err != nil {
		return fmt.Errorf("state: checkpoint %s: %w", dir, err)
	}
	return nil
}

// writableLocked is why the store can write no files now: it is closed,
// or a commit the disk refused broke it (apply). s.mu is held.
func (s *Store) writableLocked() error {
	if s.mu.closed {
		return ErrClosed
	}
	if broken := s.broken.Load(); broken != nil {
		return *broken
	}
	return nil
}

// get reads a committed record; the result is a copy.
func (s *Store) get(k []byte) ([]byte, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return nil, false, ErrClosed
	}
	return getFrom(s.db, k)
}

// scan calls fn for each committed record in [lo, hi); k and v are valid
// only during the call.
func (s *Store) scan(lo, hi []byte, fn func(k, v []byte) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return ErrClosed
	}
	return scanIn(s.db, lo, hi, fn)
}

// reader is what a pebble.DB and an indexed pebble.Batch share.
type reader interface {
	Get(key []byte) ([]byte, io.Closer, error)
	NewIter(o *pebble.IterOptions) (*pebble.Iterator, error)
}

func getFrom(r reader, k []byte) ([]byte, bool, error) {
	v, c, err := r.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("state: read: %w", err)
	}
	out := bytes.Clone(v)
	if out == nil {
		out = []byte{}
	}
	return out, true, c.Close()
}

func scanIn(r reader, lo, hi []byte, fn func(k, v []byte) error) error {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return fmt.Errorf("state: iterate: %w", err)
	}
	for valid := it.First(); valid; valid = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return errors.Join(fmt.Errorf("state: iterate: %w", err), it.Close())
		}
		if err := fn(it.Key(), v); err != nil {
			return errors.Join(err, it.Close())
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("state: iterate: %w", err)
	}
	return nil
}

// pebbleLogger routes Pebble's messages to the store's logger. Pebble calls
// Fatalf on corruption it cannot survive; the store panics rather than exit,
// so the process owner decides.
type pebbleLogger struct{ log *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.log.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.log.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.log.Error(msg, "component", "pebble", "fatal", true)
	panic(fatal(msg))
}

// fatal is what pebbleLogger.Fatalf panics with. A commit recovers it
// (Store.apply); anywhere else it ends the process.
type fatal string

func (f fatal) String() string { return "state: pebble: " + string(f) }

// apply commits pb to the database. Pebble treats a failed write or sync of
// its log as fatal — "the commit pipeline will be horked" — and calls
// Fatalf, which panics; apply turns that panic into ErrDisk, returned by
// this commit and every later one, so the runtime stops with an error
// that says what happened instead of a stack trace. Other panics go on.
//
// Not every fatal disk error can be turned into one: a log Pebble fails to
// close while rotating it (a memtable flush, a large commit) panics with
// Pebble's mutex already released, which no recover can survive, and ends
// the process; restarted, it reopens at its last commit, as after a kill.
func (s *Store) apply(pb *pebble.Batch) (err error) {
	if broken := s.broken.Load(); broken != nil {
		return *broken
	}
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		f, ok := r.(fatal)
		if !ok {
			panic(r)
		}
		err = fmt.Errorf("%w in %s (%s): whether this batch is on disk is not known, and the store takes no more writes; fix the disk and restart: the store reopens at its last commit", ErrDisk, s.dir, string(f))
		s.broken.CompareAndSwap(nil, &err)
	}()
	return pb.Commit(s.write)
}
