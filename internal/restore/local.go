package restore

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/strictjson"
	"github.com/weirflow/weir/pkg/state"
)

// MarkerFile is the file in an instance's data directory that names the
// restore its state came from and that is not yet fenced. Every restore
// writes it before the state is put in place; `weir savepoint restore`
// writes it beside the state it downloads. An instance starting with the
// marker fences its previous generations, as after any restore, and
// removes the marker only then: a crash in between cannot leave restored
// state running an old generation.
const MarkerFile = "restored-from"

// MarkerFormat is the version of the marker's format this build writes
// and reads.
const MarkerFormat = 1

// MarkerKind says what put the marked state in place.
type MarkerKind string

const (
	// Restored: the runtime restored or rebuilt the state from a snapshot.
	Restored MarkerKind = "restored"
	// StartedOver: the runtime started over as a new generation
	// (StartOver with Ran): a start killed before its fence throws away
	// what it began and decides again.
	StartedOver MarkerKind = "started-over"
	// SavepointPlaced: `weir savepoint restore` downloaded a savepoint's
	// snapshot (Manifest) as the state.
	SavepointPlaced MarkerKind = "savepoint"
)

// Marker is the restore marker's content, as JSON.
type Marker struct {
	Format int        `json:"format"`
	Kind   MarkerKind `json:"kind"`
	// Checkpoint, Generation and Outputs are the cut a runtime's restore
	// put in place (Restored, StartedOver).
	Checkpoint uint64   `json:"checkpoint,omitempty"`
	Generation uint64   `json:"generation,omitempty"`
	Outputs    []uint64 `json:"outputs,omitempty"`
	// Manifest is the key of the savepoint's snapshot (SavepointPlaced).
	Manifest string `json:"manifest,omitempty"`
}

// MarkerOf is the marker of cut m, put in place by a restore or, with
// startedOver, a start-over.
func MarkerOf(m checkpoint.Manifest, startedOver bool) Marker {
	k := Restored
	if startedOver {
		k = StartedOver
	}
	return Marker{Format: MarkerFormat, Kind: k, Checkpoint: m.Checkpoint, Generation: m.Generation, Outputs: m.Outputs}
}

// cut is the manifest a marked restore fences with.
func (mk Marker) cut(operator, instance string) checkpoint.Manifest {
	return checkpoint.Manifest{Operator: operator, Instance: instance, Checkpoint: mk.Checkpoint, Generation: mk.Generation, Outputs: mk.Outputs}
}

// MarkerPath is the marker's path in data directory dataDir.
func MarkerPath(dataDir string) string { return filepath.Join(dataDir, MarkerFile) }

// WriteMarker writes mk into dataDir, whole or not at all: a crash
// leaves the previous marker, or none, never half of one.
func WriteMarker(dataDir string, mk Marker) error {
	mk.Format = MarkerFormat
	if err := mk.check(); err != nil {
		return err
	}
	b, err := json.Marshal(mk)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return err
	}
	tmp := MarkerPath(dataDir) + ".new"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, MarkerPath(dataDir))
}

// RemoveMarker removes the marker from dataDir, if there is one.
func RemoveMarker(dataDir string) error {
	if err := os.Remove(MarkerPath(dataDir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// ErrCorruptRecord is a restore record that cannot be read: the start is
// refused, since the record decides whether state is kept, restored or
// thrown away.
var ErrCorruptRecord = errors.New("restore: record cannot be read")

// ReadMarker reads the marker in dataDir: nil when there is none, an
// error wrapping ErrCorruptRecord for one not in this build's format.
func ReadMarker(dataDir string) (*Marker, error) {
	p := MarkerPath(dataDir)
	data, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("restore: read the restore marker: %w", err)
	}
	mk, err := parseMarker(data)
	if err != nil {
		return nil, fmt.Errorf("%w: the restore marker %s: %v; refusing to start: the restore it names is not fenced. Remove %s and the marker to restore again, or put a savepoint in place with weir savepoint restore",
			ErrCorruptRecord, p, err, filepath.Join(dataDir, "state"))
	}
	return &mk, nil
}

func parseMarker(data []byte) (Marker, error) {
	var mk Marker
	if err := strictjson.Decode(data, &mk); err != nil {
		return Marker{}, err
	}
	if mk.Format != MarkerFormat {
		return Marker{}, fmt.Errorf("format %d, this build reads format %d", mk.Format, MarkerFormat)
	}
	return mk, mk.check()
}

func (mk Marker) check() error {
	switch mk.Kind {
	case Restored, StartedOver:
		if mk.Manifest != "" {
			return fmt.Errorf("a %s marker names a manifest", mk.Kind)
		}
	case SavepointPlaced:
		if mk.Manifest == "" {
			return errors.New("a savepoint marker names no manifest")
		}
	default:
		return fmt.Errorf("kind %q", mk.Kind)
	}
	return nil
}

// The operator-level records (state.Batch.PutMeta) kept here.
const (
	// metaBuilt holds the assignment version the state was built under
	// (8 bytes); absent for state built before the pipeline was scaled.
	metaBuilt = "assignment"
	// metaRestored holds the checkpoint the state was last restored from
	// (8 bytes), and a ninth byte, 1, when it started over instead.
	metaRestored = "restored"
	// metaMeaning holds what the state means (checkpoint.Meaning, JSON).
	metaMeaning = "meaning"
)

// Local is what an instance's data directory holds before it starts.
type Local struct {
	// State: the state directory exists.
	State bool
	// Built is the assignment version the state was built under, 0 when
	// none is recorded; read only for a pipeline with an assignment.
	Built uint64
	// Marker is the restore marker, nil when there is none.
	Marker *Marker
}

// ReadLocal reads the local state of the instance whose data directory
// is dataDir and whose state is in stateDir, opened with o. The version
// it was built under is read only when assigned (the pipeline has an
// assignment) and no marker makes it moot.
func ReadLocal(dataDir, stateDir string, o state.Options, assigned bool) (Local, error) {
	var l Local
	var err error
	if l.Marker, err = ReadMarker(dataDir); err != nil {
		return Local{}, err
	}
	switch _, err := os.Stat(stateDir); {
	case err == nil:
		l.State = true
	case !errors.Is(err, os.ErrNotExist):
		return Local{}, fmt.Errorf("restore: local state: %w", err)
	}
	if !l.State || !assigned || l.Marker != nil {
		return l, nil
	}
	st, err := state.Open(stateDir, o)
	if err != nil {
		return Local{}, fmt.Errorf("restore: open state: %w", err)
	}
	defer st.Close()
	v, ok, err := st.Meta(metaBuilt)
	switch {
	case err != nil:
		return Local{}, fmt.Errorf("restore: read the assignment the local state was built under: %w", err)
	case !ok:
	case len(v) != 8:
		return Local{}, fmt.Errorf("%w: the assignment the local state in %s was built under is recorded in %d bytes, not 8; refusing to start rather than rebuild it from a checkpoint and lose what it committed since: restore a snapshot with weir recover, or remove the state to rebuild it",
			ErrCorruptRecord, stateDir, len(v))
	default:
		l.Built = binary.BigEndian.Uint64(v)
	}
	return l, nil
}

// PutFenced records in b, as the fence of a restore commits, the
// assignment version the state now belongs to (0: none) and the
// checkpoint it was restored from, or that it started over.
func PutFenced(b *state.Batch, assignment, restored uint64, startedOver bool) error {
	if assignment != 0 {
		if err := b.PutMeta(metaBuilt, binary.BigEndian.AppendUint64(nil, assignment)); err != nil {
			return err
		}
	}
	v := binary.BigEndian.AppendUint64(nil, restored)
	if startedOver {
		v = append(v, 1)
	}
	return b.PutMeta(metaRestored, v)
}

// LastRestore reads the checkpoint st was last restored from, and
// whether it started over instead; ok is false for state never restored.
func LastRestore(st *state.Store) (n uint64, startedOver, ok bool, err error) {
	v, ok, err := st.Meta(metaRestored)
	switch {
	case err != nil:
		return 0, false, false, fmt.Errorf("restore: read the checkpoint the state was restored from: %w", err)
	case !ok:
		return 0, false, false, nil
	case len(v) == 8 || len(v) == 9 && v[8] == 1:
		return binary.BigEndian.Uint64(v), len(v) == 9, true, nil
	}
	return 0, false, false, fmt.Errorf("%w: the checkpoint the local state was restored from is recorded as %x, not 8 bytes and a start-over flag; refusing to start: its writers' fences could not be awaited", ErrCorruptRecord, v)
}

// LocalMeaning reads what st's state meant when last written; ok is
// false for state that never recorded it.
func LocalMeaning(st *state.Store) (m checkpoint.Meaning, raw []byte, ok bool, err error) {
	raw, ok, err = st.Meta(metaMeaning)
	if err != nil {
		return m, nil, false, fmt.Errorf("restore: read what the local state means: %w", err)
	}
	if !ok {
		return m, nil, false, nil
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return m, raw, false, fmt.Errorf("%w: the local state's meaning record, what the state means (%v); refusing to start on state this build cannot judge: restore a snapshot with weir recover", ErrCorruptRecord, err)
	}
	return m, raw, true, nil
}

// PutMeaning records in b what the state means.
func PutMeaning(b *state.Batch, m checkpoint.Meaning) ([]byte, error) {
	v, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return v, b.PutMeta(metaMeaning, v)
}
