package edge

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// Trimmed is an input whose stream no longer holds everything after the
// input's position: retention (age, bytes or message limits) removed
// messages the input had not read.
type Trimmed struct {
	Input     string `json:"input"`
	Partition int    `json:"partition"`
	Stream    string `json:"stream"`
	Subject   string `json:"subject"`
	// Committed is the input's position: the last sequence processed.
	Committed uint64 `json:"committed"`
	// Clear is the sequence through which the subject was known to hold
	// nothing more to read (0: unknown).
	Clear uint64 `json:"clear,omitempty"`
	// First is the first sequence the stream still holds.
	First uint64 `json:"first"`
	// Removed counts the stream sequences after max(Committed, Clear) and
	// before First. It bounds the input's records lost; when the stream
	// holds no other subject (Exact) it is that number.
	Removed uint64 `json:"removed"`
	Exact   bool   `json:"exact"`
	// Ahead marks a loss the consumer counted while reading rather than
	// located: Removed records of the input, somewhere after Known and
	// before First (the stream's end when it was counted), were removed
	// before they were delivered — by a delete or a purge of a subject as
	// well as by retention. The records after Known that are still held
	// are still the input's to read.
	Ahead bool `json:"ahead,omitempty"`
	// Skipped marks a loss inside a mirror of the ingress: Removed
	// sequences after Known and before First, which the mirror skipped
	// because its origin no longer held them when it came to copy them;
	// the mirror's first sequence did not move.
	Skipped bool `json:"skipped,omitempty"`
}

// Known is the sequence through which the input has nothing to read
// that the stream may since have removed: max(Committed, Clear).
func (t Trimmed) Known() uint64 { return max(t.Committed, t.Clear) }

func (t Trimmed) String() string {
	if t.Ahead {
		return fmt.Sprintf("input %s (stream %s, partition %d, subject %s): committed position %d; %d of its records after sequence %d, at or before %d, were removed before they were read",
			t.Input, t.Stream, t.Partition, t.Subject, t.Committed, t.Removed, t.Known(), t.First-1)
	}
	if t.Skipped {
		return fmt.Sprintf("input %s (stream %s, partition %d, subject %s): committed position %d; the stream, a mirror of the ingress, skipped %d sequences after %d, at or before %d, which the ingress's retention removed before the mirror copied them; any number of them may have been this input's",
			t.Input, t.Stream, t.Partition, t.Subject, t.Committed, t.Removed, t.Known(), t.First-1)
	}
	lost := fmt.Sprintf("up to %d of its records were lost (the stream interleaves other subjects: the exact number is not known)", t.Removed)
	if t.Exact {
		lost = fmt.Sprintf("%d of its records were lost", t.Removed)
	}
	return fmt.Sprintf("input %s (stream %s, partition %d, subject %s): committed position %d, but the stream's first sequence is %d: retention removed sequences %d-%d before they were read; %s",
		t.Input, t.Stream, t.Partition, t.Subject, t.Committed, t.First, t.Known()+1, t.First-1, lost)
}

// TrimmedError refuses to read inputs whose positions retention has
// passed: reading on would skip the removed records without a word.
type TrimmedError struct {
	Inputs []Trimmed
}

func (e *TrimmedError) Error() string {
	var b strings.Builder
	b.WriteString("edge: refusing to read past records removed before they were read: ")
	for i, t := range e.Inputs {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(t.String())
	}
	return b.String()
}

// ErrTrimmed matches a *TrimmedError with errors.Is.
var ErrTrimmed = errors.New("edge: input position removed by retention")

func (e *TrimmedError) Is(target error) bool { return target == ErrTrimmed }

// trimmedOf reports whether in, positioned, lost sequences to retention:
// first is the first sequence its stream holds past its position — where
// its consumer starts — and info describes the stream.
func trimmedOf(in Input, first uint64, info *jetstream.StreamInfo) (Trimmed, bool) {
	known := max(in.After, in.Clear)
	if !in.Positioned || first <= known+1 {
		return Trimmed{}, false
	}
	return Trimmed{
		Input: in.Name, Partition: in.Partition, Stream: in.Stream, Subject: in.Subject,
		Committed: in.After, Clear: in.Clear, First: first, Removed: first - 1 - known,
		Exact: len(info.Config.Subjects) == 1 && info.Config.Subjects[0] == in.Subject,
	}, true
}

// TrimmedWhileReading reports whether the stream described by info has
// removed what in had still to read, for a check while in is being read:
// sent is the last sequence its consumer had been sent, and clear a
// sequence through which its subject is known to hold nothing more.
func TrimmedWhileReading(in Input, info *jetstream.StreamInfo, sent uint64) (Trimmed, bool) {
	in.Clear = max(in.Clear, sent)
	in.Positioned = true
	return trimmedOf(in, info.State.FirstSeq, info)
}
