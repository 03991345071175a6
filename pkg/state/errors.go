package state

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error the package returns wraps one of these, so the
// runtime classifies failures with errors.Is and never by message.
var (
	// ErrClosed is returned by a Store that has been closed.
	ErrClosed = errors.New("state: closed")
	// ErrBatchDone is returned by a Batch used after Commit or Close.
	ErrBatchDone = errors.New("state: batch already committed or closed")
	// ErrInvalidOptions is returned by Open and Validate for unusable options.
	ErrInvalidOptions = errors.New("state: invalid options")
	// ErrUnknownFamily is returned for a family that was not declared.
	ErrUnknownFamily = errors.New("state: unknown family")
	// ErrWrongKind is returned when a family is used as another kind than declared.
	ErrWrongKind = errors.New("state: family used as the wrong kind")
	// ErrKeyGroup is returned for a key group outside [0, Options.KeyGroups).
	ErrKeyGroup = errors.New("state: key group out of range")
	// ErrTimeRange is returned for a time that cannot be stored: stored times
	// are nanoseconds since the Unix epoch in an int64 (years 1678 to 2262).
	ErrTimeRange = errors.New("state: time out of range")
	// ErrLimit is wrapped by *LimitError, returned when a write would create a
	// key beyond its family's MaxKeys.
	ErrLimit = errors.New("state: family key limit reached")
	// ErrCorrupt is returned when a stored record cannot be decoded. The store
	// should be treated as lost and restored from a checkpoint.
	ErrCorrupt = errors.New("state: corrupt record")
	// ErrIncompatible is returned by Open for a store written in another layout.
	ErrIncompatible = errors.New("state: incompatible store format")
	// ErrDisk is returned by Commit when the disk refused to write or sync
	// the store's log (a failing device, a full disk), and by every Commit
	// after it: Pebble cannot go on once its log is broken. Whether the
	// failed batch is on disk is not known, so nothing it covers may have
	// been acknowledged; reopening the store once the disk is fixed finds
	// every batch committed before it, and the failed one at most whole.
	// Until then reads of the open store may see the failed batch (Pebble
	// applies it to its memtable before the log's error comes back): the
	// runtime stops at the error and reads nothing more. Flush,
	// Checkpoint, Snapshot and Import return it too.
	ErrDisk = errors.New("state: the disk refused a write of the store's log")
)

// LimitError reports a write refused because it would create a key beyond
// its family's declared cardinality. The write was not applied; the batch is
// still usable. Action is the family's declared response, for the runtime to
// carry out (fail the step, or dead-letter the input record).
//
// errors.Is(err, ErrLimit) reports true for a *LimitError.
type LimitError struct {
	Family  string
	MaxKeys int64
	Action  LimitAction
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("state: family %q reached its limit of %d keys (action %s)", e.Family, e.MaxKeys, e.Action)
}

// Unwrap returns ErrLimit.
func (e *LimitError) Unwrap() error { return ErrLimit }
