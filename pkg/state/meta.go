package state

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
)

// Position is how far an input has been processed. It is committed in the
// same batch as the state the input produced, so state and positions always
// describe one consistent cut.
type Position struct {
	// Seq is the last stream sequence of the input fully processed.
	Seq uint64
	// Frames holds, per producer, the last frame sequence seen; optional.
	// An empty map reads back as nil.
	Frames map[string]uint64
	// Clear is a stream sequence at or past Seq through which the input's
	// subject held no further message when last looked at (or through
	// which a data loss was declared): retention removing messages up to
	// Clear has removed nothing this input had still to read.
	Clear uint64
}

// Position encodings: version 1 has no Clear.
const (
	positionV1      = 1
	positionVersion = 2
)

// encodePosition writes version, Seq, then the frames sorted by producer.
func encodePosition(p Position) []byte {
	b := binary.AppendUvarint([]byte{positionVersion}, p.Seq)
	b = binary.AppendUvarint(b, p.Clear)
	b = binary.AppendUvarint(b, uint64(len(p.Frames)))
	producers := make([]string, 0, len(p.Frames))
	for k := range p.Frames {
		producers = append(producers, k)
	}
	slices.Sort(producers)
	for _, k := range producers {
		b = binary.AppendUvarint(appendString(b, k), p.Frames[k])
	}
	return b
}

func decodePosition(v []byte) (Position, error) {
	bad := fmt.Errorf("%w: position %x", ErrCorrupt, v)
	if len(v) == 0 || (v[0] != positionVersion && v[0] != positionV1) {
		return Position{}, bad
	}
	version := v[0]
	v = v[1:]
	var p Position
	var w int
	if p.Seq, w = binary.Uvarint(v); w <= 0 {
		return Position{}, bad
	}
	v = v[w:]
	if version >= 2 {
		if p.Clear, w = binary.Uvarint(v); w <= 0 {
			return Position{}, bad
		}
		v = v[w:]
	}
	n, w := binary.Uvarint(v)
	if w <= 0 || n > uint64(len(v)) {
		return Position{}, bad
	}
	v = v[w:]
	if n > 0 {
		p.Frames = make(map[string]uint64, n)
	}
	for range n {
		k, rest, ok := readBytes(v)
		if !ok {
			return Position{}, bad
		}
		seq, w := binary.Uvarint(rest)
		if w <= 0 {
			return Position{}, bad
		}
		p.Frames[string(k)] = seq
		v = rest[w:]
	}
	if len(v) != 0 {
		return Position{}, bad
	}
	return p, nil
}

// Position returns the committed position of input, and false if none was set.
func (s *Store) Position(input string) (Position, bool, error) {
	v, ok, err := s.get(metaKey(metaPosition, input))
	if err != nil || !ok {
		return Position{}, false, err
	}
	p, err := decodePosition(v)
	return p, err == nil, err
}

// Positions returns every committed input position, by input.
func (s *Store) Positions() (map[string]Position, error) {
	lo := metaKey(metaPosition, "")
	out := map[string]Position{}
	err := s.scan(lo, prefixEnd(lo), func(k, v []byte) error {
		p, err := decodePosition(v)
		if err != nil {
			return err
		}
		out[string(k[len(lo):])] = p
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Meta returns the committed operator-level record name, and false if none.
func (s *Store) Meta(name string) ([]byte, bool, error) {
	return s.get(metaKey(metaUser, name))
}

// StagedOutputs calls fn for each committed staged frame in id order,
// stopping at the first error, which it returns. data is a copy.
func (s *Store) StagedOutputs(fn func(id string, data []byte) error) error {
	lo := metaKey(metaOutput, "")
	return s.scan(lo, prefixEnd(lo), func(k, v []byte) error {
		return fn(string(k[len(lo):]), bytes.Clone(v))
	})
}

// HeldOutputs calls fn for each committed held output in sequence order,
// from sequence from on, stopping at the first error, which it returns.
// data is a copy.
func (s *Store) HeldOutputs(from uint64, fn func(seq uint64, data []byte) error) error {
	lo, hi := heldKey(from), metaKey(metaHeld+1, "")
	return s.scan(lo, hi, func(k, v []byte) error {
		return fn(binary.BigEndian.Uint64(k[2:]), bytes.Clone(v))
	})
}
