package restore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/checkpoint"
)

// Kind is what a Plan does.
type Kind int

const (
	// Reopen: the local state is current; nothing is restored.
	Reopen Kind = iota
	// RestoreCheckpoint: the state comes from checkpoint Checkpoint.
	RestoreCheckpoint
	// RestoreSavepoint: the state comes from savepoint Savepoint.
	RestoreSavepoint
	// StartOver: no local state and nothing to restore. Ran says whether
	// the instance ran before: then it starts as a new generation, fenced
	// like a restore of Cut, which disowns what the lost one wrote.
	StartOver
	// Refuse: the instance must not start; Refusal says why.
	Refuse
	// FallBack: a restore found its checkpoint corrupt, and the whole
	// pipeline restarts from To (DecideFallBack, Restart).
	FallBack
)

func (k Kind) String() string {
	return [...]string{"reopen", "restore checkpoint", "restore savepoint", "start over", "refuse", "fall back"}[k]
}

// Plan is where an instance's state comes from.
type Plan struct {
	Kind Kind
	// Checkpoint is the checkpoint restored (RestoreCheckpoint, and
	// RestoreSavepoint: the one the savepoint was taken at; 0 for an
	// assignment naming none), or fallen back from (FallBack).
	Checkpoint uint64
	// Savepoint names the savepoint restored (RestoreSavepoint).
	Savepoint string
	// Wipe: local state goes first — built under another assignment, or
	// begun by a start-over killed before its fence.
	Wipe bool
	// DropMarker: the restore marker goes first — its state was never
	// put in place, or it marked a start-over that is decided again.
	DropMarker bool
	// InPlace: the state is in place already — a restore killed before
	// its fence, or a savepoint `weir savepoint restore` put there — and
	// is fenced with Cut.
	InPlace bool
	// Whole is the key of the snapshot restored whole: the instance's
	// own, of the same partitions.
	Whole string
	// Parts are the snapshots the instance's state is assembled from
	// when nothing is restored whole: for each, the partitions — and the
	// key groups they carry — it gives. None: an empty start at Cut.
	Parts []Part
	// Cut is the restore's cut, which the fence publishes: the snapshot
	// restored whole or put in place, the cut assembled from Parts, or
	// the start of a new generation (StartOver with Ran).
	Cut *checkpoint.Manifest
	// Ran: the instance starting over ran before (StartOver).
	Ran bool
	// Migrations are the declared semantic migrations the restore is,
	// for the audit stream once it is fenced (AuditMigration).
	Migrations []string
	// Refusal is why the instance must not start (Refuse), or the
	// corruption a FallBack answers.
	Refusal error
	// To, Replay: the snapshot fallen back to, and what that reads again
	// (FallBack).
	To     checkpoint.Snapshot
	Replay Replay
	// Why says, for the log, what decided the plan.
	Why string
}

// Part is one snapshot a state is assembled from: Lo..Hi-1 are the input
// partitions it gives, of First..Last-1 it held.
type Part struct {
	Key         string
	Manifest    checkpoint.Manifest
	Lo, Hi      int
	First, Last int
}

// Err is the plan's refusal, nil for any other plan.
func (p Plan) Err() error {
	if p.Kind != Refuse {
		return nil
	}
	return p.Refusal
}

// Instance is the operator instance a plan is made for, as its build
// sees it.
type Instance struct {
	Operator, Instance string
	// Contract is the pipeline's.
	Contract *contracts.Contract
	// Assignment is the pipeline's assignment, nil when it was never
	// scaled; Lo..Hi-1 are the input partitions the instance owns under
	// it, of Partitions.
	Assignment         *checkpoint.Assignment
	Partitions, Lo, Hi int
	// Output is the stream of the instance's output edge, "" when it has
	// none or writes a view: frames there tell that it ran before.
	Output string
	// SchemaVersion and Meaning are what this build's state is;
	// MeaningOf is what another operator's state means under Contract.
	SchemaVersion int
	Meaning       checkpoint.Meaning
	MeaningOf     func(operator string) (checkpoint.Meaning, error)
	// SemanticMigration: restoring state that means something else is
	// declared (stream.Config.SemanticMigration).
	SemanticMigration bool
	Log               *slog.Logger
}

func (in Instance) key() string { return in.Operator + "/" + in.Instance }

func (in Instance) version() uint64 {
	if in.Assignment == nil {
		return 0
	}
	return in.Assignment.Version
}

func (in Instance) log() *slog.Logger {
	if in.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return in.Log
}

func refuse(err error) (Plan, error) { return Plan{Kind: Refuse, Refusal: err, Why: err.Error()}, nil }

// Decide plans where the instance's state comes from, reading the
// checkpoint store st (and, through js, the instance's output stream)
// and changing nothing. A savepoint or restore marked in place comes
// first; then local state built under the current assignment; then, on
// a new host, the latest checkpoint taken under the current assignment;
// then the checkpoint the assignment names — restored whole when the
// instance owns what it owned then, assembled from its key groups'
// owners otherwise; then, with no assignment, a start over.
//
// An error is a read that failed: nothing is decided. The plan returned
// with it still names the checkpoint or savepoint being planned, for
// DecideFallBack when the error wraps checkpoint.ErrCorrupt.
func Decide(ctx context.Context, js jetstream.JetStream, st *checkpoint.Store, in Instance, local Local) (Plan, error) {
	var p Plan
	ran := false
	if mk := local.Marker; mk != nil {
		switch {
		case mk.Kind == StartedOver:
			// A start-over killed before its fence: whatever state it
			// began goes, and the start decides again — a checkpoint or
			// an assignment may have come meanwhile — knowing it ran.
			p.Wipe, p.DropMarker, ran = local.State, true, true
			local.State = false
			in.log().Warn("a start-over was interrupted before its fence: its state goes, and the start decides again")
		case !local.State:
			p.DropMarker = true // the crash came before the state was in place
		case mk.Kind == Restored:
			cut := mk.cut(in.Operator, in.Instance)
			return Plan{Kind: RestoreCheckpoint, Checkpoint: mk.Checkpoint, InPlace: true, Cut: &cut,
				Why: "a restore put in place was not fenced yet"}, nil
		default:
			return placedSavepoint(ctx, st, in, mk.Manifest)
		}
	}
	a := in.Assignment
	if local.State {
		if a == nil || local.Built == a.Version {
			p.Kind, p.Why = Reopen, "local state is current"
			return p, nil
		}
		in.log().Info("assignment changed: rebuilding state", "local", local.Built, "assignment", a.Version, "checkpoint", a.Checkpoint)
		p.Wipe = true
	}
	if ok, err := latest(ctx, st, in, &p); ok || err != nil {
		return p, err
	}
	if a == nil {
		return startOver(ctx, js, st, in, p, ran)
	}
	return assigned(ctx, st, in, p)
}

// placedSavepoint plans the fence of a savepoint `weir savepoint restore`
// put in place as the state.
func placedSavepoint(ctx context.Context, st *checkpoint.Store, in Instance, key string) (Plan, error) {
	p := Plan{Kind: RestoreSavepoint, Savepoint: savepointName(key), InPlace: true, Why: "a savepoint was put in place"}
	m, err := st.Manifest(ctx, key)
	if err != nil {
		return p, err
	}
	p.Checkpoint, p.Cut = m.Checkpoint, &m
	if m.SchemaVersion != in.SchemaVersion {
		return refuse(fmt.Errorf("stream: refusing to start: the savepoint restored here (%s) has state schema version %d, operator %s reads version %d", key, m.SchemaVersion, in.Operator, in.SchemaVersion))
	}
	if err := in.judgeMeaning(m, key, &p); err != nil {
		return refuse(err)
	}
	return p, nil
}

// savepointName is the name in a savepoint's manifest key
// (checkpoint.SavepointKey).
func savepointName(key string) string {
	rest, ok := strings.CutPrefix(key, "savepoint.")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, ".")
	return name
}

// latest plans, when there is one, the restore of the instance's own
// snapshot of the latest completed checkpoint: taken under the current
// assignment, and after the checkpoint that assignment names.
func latest(ctx context.Context, st *checkpoint.Store, in Instance, p *Plan) (bool, error) {
	l, _, err := st.Latest(ctx)
	if errors.Is(err, checkpoint.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if l.Assignment != in.version() || (in.Assignment != nil && l.Checkpoint <= in.Assignment.Checkpoint) {
		return false, nil
	}
	key := l.Manifests[in.key()]
	if key == "" {
		return false, nil // this instance is new to the pipeline
	}
	p.Kind, p.Checkpoint, p.Why = RestoreCheckpoint, l.Checkpoint, "the latest checkpoint, taken under the current assignment"
	return true, whole(ctx, st, in, key, p)
}

// whole plans the restore of snapshot key whole.
func whole(ctx context.Context, st *checkpoint.Store, in Instance, key string, p *Plan) error {
	m, err := st.Manifest(ctx, key)
	if err != nil {
		return err
	}
	if err := in.judge(m, key, p); err != nil {
		*p = Plan{Kind: Refuse, Refusal: err, Why: err.Error()}
		return nil
	}
	p.Whole, p.Cut = key, &m
	return nil
}

// assigned plans the restore of the checkpoint or savepoint the
// assignment names.
func assigned(ctx context.Context, st *checkpoint.Store, in Instance, p Plan) (Plan, error) {
	a := in.Assignment
	p.Kind, p.Checkpoint, p.Why = RestoreCheckpoint, a.Checkpoint, "the checkpoint the assignment names"
	name, err := fromSavepoint(ctx, st, a)
	if err != nil {
		return p, err
	}
	if name != "" {
		p.Kind, p.Savepoint, p.Why = RestoreSavepoint, name, "the savepoint the assignment names"
	}
	// An instance that owns what it owned in the checkpoint restores its
	// own snapshot whole; the others assemble theirs.
	if key := a.Manifests[in.key()]; key != "" {
		m, err := st.Manifest(ctx, key)
		if err != nil {
			return p, err
		}
		if lo, hi := m.PartitionRange(in.Partitions); lo == in.Lo && hi == in.Hi {
			return p, whole(ctx, st, in, key, &p)
		}
	}
	return p, parts(ctx, st, in, &p)
}

// fromSavepoint names the savepoint assignment a restarts from: one of
// its snapshots is a savepoint's, or its checkpoint was taken for one
// (operators that snapshot at a barrier file theirs as a checkpoint's).
// It is "" for a checkpoint.
func fromSavepoint(ctx context.Context, st *checkpoint.Store, a *checkpoint.Assignment) (string, error) {
	for _, key := range slices.Sorted(maps.Values(a.Manifests)) {
		if name := savepointName(key); name != "" {
			return name, nil
		}
	}
	if a.Checkpoint == 0 {
		return "", nil
	}
	r, err := st.GetRecord(ctx, a.Checkpoint)
	if errors.Is(err, checkpoint.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("restore: whether checkpoint %d was a savepoint's, which a corrupt snapshot must not fall back from: %w", a.Checkpoint, err)
	}
	return r.Savepoint, nil
}

// parts plans the assembly of the instance's state from the assignment's
// checkpoint: the key groups it owns, from the snapshots of every
// instance of its operator that owned any of them. Its cut carries the
// frame sequences of its own snapshot and the highest generation it ran.
func parts(ctx context.Context, st *checkpoint.Store, in Instance, p *Plan) error {
	a := in.Assignment
	cut := &checkpoint.Manifest{Operator: in.Operator, Instance: in.Instance, Checkpoint: a.Checkpoint}
	if f, ok, err := st.Fence(ctx, in.Operator, in.Instance); err != nil {
		return fmt.Errorf("stream: %w", err)
	} else if ok {
		cut.Generation = f.Generation
	}
	for _, owner := range slices.Sorted(maps.Keys(a.Manifests)) {
		if op, _, _ := strings.Cut(owner, "/"); op != in.Operator {
			continue
		}
		key := a.Manifests[owner]
		m, err := st.Manifest(ctx, key)
		if err != nil {
			return err
		}
		if err := in.schema(m, m.Key()); err != nil {
			*p = Plan{Kind: Refuse, Refusal: err, Why: err.Error()}
			return nil
		}
		if owner == in.key() {
			cut.Outputs, cut.Generation = m.Outputs, max(cut.Generation, m.Generation)
		}
		first, last := m.PartitionRange(in.Partitions)
		lo, hi := max(first, in.Lo), min(last, in.Hi)
		if lo >= hi {
			continue // owned nothing this instance owns now
		}
		if err := in.judgeMeaning(m, key, p); err != nil {
			*p = Plan{Kind: Refuse, Refusal: err, Why: err.Error()}
			return nil
		}
		p.Parts = append(p.Parts, Part{Key: key, Manifest: m, Lo: lo, Hi: hi, First: first, Last: last})
	}
	p.Cut = cut
	return nil
}

// startOver plans a start with no local state and no checkpoint to
// restore. An instance that ran before — it is registered, or fenced, or
// its output holds frames, or a start-over of it was interrupted (ran) —
// lost its state before the pipeline's first checkpoint: it starts from
// nothing, as a first start does, but as a new generation whose fence
// disowns every frame the lost one wrote. Those frames would otherwise
// share the new ones' message IDs — the same producer, generation and
// sequence — and JetStream would drop the new frames as their duplicates
// though they hold other records (weir chaos found it: 1,880 of 2,998
// results lost). Its readers, starting over too, wait for that fence
// before reading its frames, as readers restored from a checkpoint do.
func startOver(ctx context.Context, js jetstream.JetStream, st *checkpoint.Store, in Instance, p Plan, ran bool) (Plan, error) {
	p.Kind, p.Why = StartOver, "a first start"
	if !ran {
		registered, err := st.Instances(ctx)
		if err != nil {
			return p, fmt.Errorf("stream: %w", err)
		}
		_, ran = registered[in.key()]
	}
	if !ran {
		// A clean stop deregisters: the fence of an earlier restore, or
		// frames on the output edge — only this instance writes it before
		// the first checkpoint, since rescaling needs one — tell too.
		var err error
		if _, ran, err = st.Fence(ctx, in.Operator, in.Instance); err != nil {
			return p, fmt.Errorf("stream: %w", err)
		}
	}
	if !ran && in.Output != "" {
		// (A view's writer has no output stream: the registry and the
		// fence tell.)
		s, err := js.Stream(ctx, in.Output)
		if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return p, fmt.Errorf("stream: %w", err)
		}
		ran = err == nil && s.CachedInfo().State.Msgs > 0
	}
	if ran {
		p.Ran, p.Cut = true, &checkpoint.Manifest{Operator: in.Operator, Instance: in.Instance}
		p.Why = "no local state and no checkpoint to restore: starting over from the beginning of the input, as a new generation"
	}
	return p, nil
}
