// Package audit records the manual acts of operating a pipeline — a
// savepoint restored, a rescale, a checkpoint or savepoint restored in a
// recovery, a declared data loss, a replay, a cutover, an effect handed
// back — in one stream per pipeline, so that who did what, when, and from
// which state to which can always be read back (weir audit).
//
// The stream is also where a declared data loss is decided: a runtime that
// finds its position removed by retention starts only when a declaration
// covering the gap is on record (Declared).
package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/jsapi"
	"github.com/weirflow/weir/internal/natsconn"
)

// Actions recorded.
const (
	ActionSavepointRestore = "savepoint-restore"
	ActionScale            = "scale"
	ActionRestore          = "restore"      // a recovery from a chosen checkpoint or savepoint
	ActionDeclareLoss      = "declare-loss" // records removed by retention, accepted as lost
	ActionFallback         = "fallback"     // a restore that fell back past a corrupt checkpoint
	ActionCheckpoint       = "checkpoint"   // a checkpoint triggered by hand
	ActionEffectRetry      = "effect-retry"
	ActionReplay           = "replay"
	ActionMigrate          = "migrate" // a snapshot restored as a declared semantic migration
	ActionCutover          = "cutover" // readers switched to another result generation
	ActionShadow           = "shadow"  // a continuous shadow generation started
	ActionErase            = "erase"   // a key erased (target: its digest, never the key)
)

// Actions lists every action, for help texts.
var Actions = []string{ActionSavepointRestore, ActionScale, ActionRestore, ActionDeclareLoss, ActionFallback, ActionCheckpoint, ActionEffectRetry, ActionReplay, ActionMigrate, ActionCutover, ActionShadow, ActionErase}

// Record is one manual act.
type Record struct {
	// Seq is the record's sequence in the audit stream, set when read.
	Seq  uint64    `json:"seq,omitempty"`
	Time time.Time `json:"time"`
	// Actor is who did it: a person ("user@host", or WEIR_ACTOR), or a
	// weir component acting on its own ("weir/coordinator").
	Actor string `json:"actor"`
	// Identity is who the NATS server authenticated the act's connection
	// as — an nkey's public key, a user, a JWT's subject, a client
	// certificate's name (natsconn.Identity) — beside the actor the act
	// was told; empty for a server that authenticates no one.
	Identity string `json:"identity,omitempty"`
	Action   string `json:"action"`
	// Target is what was acted on: a stream, an operator, a savepoint.
	Target string `json:"target,omitempty"`
	// From and To are the state before and after, as the action names
	// them: a checkpoint, an assignment version, a sequence.
	From   string `json:"from,omitempty"`
	To     string `json:"to,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Detail holds the action's own figures.
	Detail map[string]any `json:"detail,omitempty"`
}

// StreamName is the audit stream of a pipeline.
func StreamName(pipeline string) string {
	return "WEIR_" + strings.ToUpper(strings.ReplaceAll(pipeline, "-", "_")) + "_AUDIT"
}

// Subject is where records of action on target go. A target's dots and
// other separators become underscores so that it stays one token.
func Subject(pipeline, action, target string) string {
	s := "weir." + pipeline + ".audit." + action
	if target != "" {
		s += "." + token(target)
	}
	return s
}

func token(s string) string {
	return strings.NewReplacer(".", "_", "*", "_", ">", "_", " ", "_", "/", "_").Replace(s)
}

// Actor names who runs this process: WEIR_ACTOR when set, else the
// operating-system user at the host.
func Actor() string {
	if a := os.Getenv("WEIR_ACTOR"); a != "" {
		return a
	}
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, _ := os.Hostname()
	if host == "" {
		return name
	}
	return name + "@" + host
}

// Trail is the pipeline's audit stream as weir declares it. It keeps
// every record — an audit trail has no retention — and denies deletes and
// purges; weir provision creates it and never updates it: an update could
// lower its limits and discard history. replicas 0 means 1 for a new
// stream and leaves an existing one's as deployed.
func Trail(pipeline string, replicas int) jsapi.Declared {
	return jsapi.Declared{CreateOnly: true, AnyReplicas: replicas == 0, Stream: jetstream.StreamConfig{
		Name:        StreamName(pipeline),
		Description: "weir audit trail of pipeline " + pipeline + ": manual acts, who and when",
		Subjects:    []string{"weir." + pipeline + ".audit.>"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
		DenyDelete:  true,
		DenyPurge:   true,
	}}
}

// Ensure checks that the pipeline's audit stream is as declared
// (jsapi.Check): one that differs is refused, never changed; a missing one
// is created when the server allows. It looks the stream up no further: on
// a cluster a stream just created can be unknown for a moment to the
// server asked next, and a start must not end on that.
func Ensure(ctx context.Context, js jetstream.JetStream, pipeline string, replicas int) error {
	if err := jsapi.Check(ctx, js, Trail(pipeline, replicas)); err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	return nil
}

// Append records r, filling its time and actor when unset, and returns its
// sequence. The act it records has happened or is about to: a caller that
// cannot record it must say so rather than go on silently.
func Append(ctx context.Context, js jetstream.JetStream, pipeline string, r Record) (uint64, error) {
	if err := Ensure(ctx, js, pipeline, 0); err != nil {
		return 0, err
	}
	if r.Time.IsZero() {
		r.Time = time.Now().UTC()
	}
	if r.Actor == "" {
		r.Actor = Actor()
	}
	if r.Identity == "" {
		r.Identity = natsconn.Identity(js.Conn())
	}
	b, err := json.Marshal(r)
	if err != nil {
		return 0, err
	}
	ack, err := js.Publish(ctx, Subject(pipeline, r.Action, r.Target), b)
	if err != nil {
		return 0, fmt.Errorf("audit: record %s of %s: %w", r.Action, r.Target, err)
	}
	return ack.Sequence, nil
}

// List returns the pipeline's records, oldest first; action filters them
// when not empty. A pipeline without an audit stream has none.
func List(ctx context.Context, js jetstream.JetStream, pipeline, action string) ([]Record, error) {
	st, err := js.Stream(ctx, StreamName(pipeline))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	last := st.CachedInfo().State.LastSeq
	if st.CachedInfo().State.Msgs == 0 {
		return nil, nil
	}
	filters := []string{"weir." + pipeline + ".audit.>"}
	if action != "" {
		filters = []string{Subject(pipeline, action, ""), Subject(pipeline, action, "") + ".>"}
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: filters})
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	var out []Record
	for {
		if len(out) > 0 && out[len(out)-1].Seq >= last {
			return out, nil
		}
		m, err := cons.Next(jetstream.FetchMaxWait(time.Second))
		if errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
			return out, nil // nothing more matches the filter
		}
		if err != nil {
			return out, fmt.Errorf("audit: %w", err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return out, err
		}
		var r Record
		if err := json.Unmarshal(m.Data(), &r); err != nil {
			return out, fmt.Errorf("audit: record %d: %w", meta.Sequence.Stream, err)
		}
		r.Seq = meta.Sequence.Stream
		out = append(out, r)
		if meta.NumPending == 0 {
			return out, nil
		}
	}
}

// Last returns the newest record of action on target; ok is false when
// there is none.
func Last(ctx context.Context, js jetstream.JetStream, pipeline, action, target string) (r Record, ok bool, err error) {
	st, err := js.Stream(ctx, StreamName(pipeline))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, fmt.Errorf("audit: %w", err)
	}
	m, err := st.GetLastMsgForSubject(ctx, Subject(pipeline, action, target))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, fmt.Errorf("audit: %w", err)
	}
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return Record{}, false, fmt.Errorf("audit: record %d: %w", m.Sequence, err)
	}
	r.Seq = m.Sequence
	return r, true, nil
}

// Declaration is a declared data loss: the records of Stream from
// sequence From through Through that retention removed before the
// pipeline read them are accepted as lost.
type Declaration struct {
	Stream        string
	From, Through uint64
	Record        Record
}

// Covers reports whether the declaration accepts the loss of the
// sequences from through through.
func (d Declaration) Covers(from, through uint64) bool {
	return d.From <= from && through <= d.Through
}

// DeclareLoss records a Declaration, by whom (r.Actor) and why (r.Reason);
// r's other fields add detail.
func DeclareLoss(ctx context.Context, js jetstream.JetStream, pipeline string, d Declaration) (Record, error) {
	r := d.Record
	r.Action, r.Target = ActionDeclareLoss, d.Stream
	r.From, r.To = strconv.FormatUint(d.From, 10), strconv.FormatUint(d.Through, 10)
	seq, err := Append(ctx, js, pipeline, r)
	r.Seq = seq
	return r, err
}

// Declared returns the stream's newest declared data loss; ok is false
// when none was declared.
func Declared(ctx context.Context, js jetstream.JetStream, pipeline, stream string) (d Declaration, ok bool, err error) {
	r, ok, err := Last(ctx, js, pipeline, ActionDeclareLoss, stream)
	if err != nil || !ok {
		return Declaration{}, false, err
	}
	d = Declaration{Stream: stream, Record: r}
	from, ferr := strconv.ParseUint(r.From, 10, 64)
	through, terr := strconv.ParseUint(r.To, 10, 64)
	if ferr != nil || terr != nil {
		return Declaration{}, false, fmt.Errorf("audit: declared loss %d of %s: sequences %q to %q are not numbers", r.Seq, stream, r.From, r.To)
	}
	d.From, d.Through = from, through
	return d, true, nil
}
