package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/weirflow/weir/internal/natsconn"
	"github.com/weirflow/weir/internal/strictjson"
)

// The control subjects of a pipeline's checkpoint protocol, all under
// weir.ctl.<pipeline>.checkpoint:
//
//	trigger   coordinator → instances: start checkpoint N (Trigger)
//	ack.<operator>.<instance>
//	          one instance → coordinator: snapshot of N taken (Ack); the
//	          subject names the instance, so that the server's permissions
//	          let a service acknowledge only for its own operators, and the
//	          coordinator counts an acknowledgement only from the subject of
//	          an instance it expects, saying what the body says
//	complete  coordinator → anyone: N is the latest completed checkpoint
//	          (Completed)
//	request   CLI → coordinator: take a checkpoint or savepoint now
//	          (Request; the reply is the checkpoint's Record: Ask)
//
// Each message has its Encode function and its strict Parse (or Decode)
// function here; no other package marshals or parses them.

// TriggerSubject is where the coordinator triggers checkpoints.
func TriggerSubject(pipeline string) string { return ctl(pipeline, "trigger") }

// AckSubject is where the instance of operator acknowledges checkpoints.
func AckSubject(pipeline, operator, instance string) string {
	return ctl(pipeline, "ack") + "." + operator + "." + instance
}

// OperatorAcksSubject is where every instance of operator acknowledges:
// what a coordinator subscribes to, once per operator, and what an
// operator's service may publish to.
func OperatorAcksSubject(pipeline, operator string) string {
	return ctl(pipeline, "ack") + "." + operator + ".*"
}

// AckFrom reads the operator and instance an acknowledgement's subject
// names; ok is false for a subject that is not one of pipeline's.
func AckFrom(pipeline, subject string) (operator, instance string, ok bool) {
	rest, found := strings.CutPrefix(subject, ctl(pipeline, "ack")+".")
	if !found {
		return "", "", false
	}
	operator, instance, ok = strings.Cut(rest, ".")
	return operator, instance, ok && ValidName(operator) && ValidName(instance)
}

// CompleteSubject is where the coordinator announces completed checkpoints.
func CompleteSubject(pipeline string) string { return ctl(pipeline, "complete") }

// RequestSubject takes checkpoint and savepoint requests.
func RequestSubject(pipeline string) string { return ctl(pipeline, "request") }

func ctl(pipeline, verb string) string { return "weir.ctl." + pipeline + ".checkpoint." + verb }

// Trigger asks source operators (every operator, in unaligned mode) to
// start checkpoint N.
type Trigger struct {
	Checkpoint uint64    `json:"checkpoint"`
	At         time.Time `json:"at"`
	// Savepoint names the snapshot a savepoint keeps; empty for a
	// checkpoint.
	Savepoint string `json:"savepoint,omitempty"`
}

// ParseTrigger decodes a checkpoint trigger from its control-subject
// message, refusing one without a checkpoint number or whose savepoint name
// could not name one.
func ParseTrigger(data []byte) (Trigger, error) {
	var t Trigger
	if err := decodeStrict(data, &t); err != nil {
		return Trigger{}, fmt.Errorf("checkpoint: trigger: %w", err)
	}
	if t.Checkpoint == 0 {
		return Trigger{}, errors.New("checkpoint: trigger: no checkpoint number")
	}
	if t.Savepoint != "" && !ValidName(t.Savepoint) {
		return Trigger{}, fmt.Errorf("checkpoint: trigger: savepoint %q is not a name", t.Savepoint)
	}
	return t, nil
}

// EncodeTrigger encodes a trigger as ParseTrigger reads it.
func EncodeTrigger(t Trigger) ([]byte, error) { return encode("trigger", t) }

// Request asks the coordinator for a checkpoint now, optionally kept as a
// named savepoint. The coordinator answers it with the checkpoint's Record
// (Ask).
type Request struct {
	Savepoint string `json:"savepoint,omitempty"`
}

// EncodeRequest encodes a request as ParseRequest reads it.
func EncodeRequest(r Request) ([]byte, error) { return encode("request", r) }

// ParseRequest decodes a checkpoint request, refusing a savepoint name
// that could not name one.
func ParseRequest(data []byte) (Request, error) {
	var r Request
	if err := decodeStrict(data, &r); err != nil {
		return Request{}, fmt.Errorf("checkpoint: request: %w", err)
	}
	if r.Savepoint != "" && !ValidName(r.Savepoint) {
		return Request{}, fmt.Errorf("checkpoint: request: savepoint name %q: use letters, digits, '-' and '_' (no '.', '*', '>', '/' or spaces)", r.Savepoint)
	}
	return r, nil
}

// EncodeRecord encodes a checkpoint's record as the coordinator answers a
// Request with it, and as DecodeRecord reads it.
func EncodeRecord(r Record) ([]byte, error) { return encode("record", r) }

// DecodeRecord decodes a checkpoint's record, refusing one without a
// checkpoint number or status.
func DecodeRecord(data []byte) (Record, error) {
	var r Record
	if err := decodeStrict(data, &r); err != nil {
		return Record{}, fmt.Errorf("checkpoint: record: %w", err)
	}
	if r.Status != Pending && r.Status != Complete && r.Status != Aborted {
		return Record{}, fmt.Errorf("checkpoint: record %d: status %q", r.Checkpoint, r.Status)
	}
	return r, nil
}

// Ask asks pipeline's coordinator for a checkpoint now — a savepoint when
// r names one — and returns its Record, once it completed or aborted (the
// Reason says why), or ctx's end.
func Ask(ctx context.Context, nc *nats.Conn, pipeline string, r Request) (Record, error) {
	b, err := EncodeRequest(r)
	if err != nil {
		return Record{}, err
	}
	m, err := natsconn.Ask(ctx, nc, RequestSubject(pipeline), b)
	if err != nil {
		return Record{}, fmt.Errorf("no coordinator answered for pipeline %s: %w", pipeline, err)
	}
	return DecodeRecord(m.Data)
}

// Completed is what the coordinator announces on CompleteSubject.
type Completed struct {
	Checkpoint uint64 `json:"checkpoint"`
}

// EncodeCompleted encodes the announcement that checkpoint n completed.
func EncodeCompleted(n uint64) ([]byte, error) { return encode("completed", Completed{Checkpoint: n}) }

// ParseCompleted decodes an announcement of a completed checkpoint and
// returns its number.
func ParseCompleted(data []byte) (uint64, error) {
	var c Completed
	if err := decodeStrict(data, &c); err != nil {
		return 0, fmt.Errorf("checkpoint: completed: %w", err)
	}
	if c.Checkpoint == 0 {
		return 0, errors.New("checkpoint: completed: no checkpoint number")
	}
	return c.Checkpoint, nil
}

// Ack is one instance's report on a checkpoint.
type Ack struct {
	Checkpoint uint64 `json:"checkpoint"`
	Operator   string `json:"operator"`
	Instance   string `json:"instance"`
	// FirstBarrier is when the instance saw the checkpoint's first barrier
	// (or, at a source, its trigger).
	FirstBarrier time.Time `json:"first_barrier"`
	// Manifest is the key of the snapshot's manifest.
	Manifest string `json:"manifest,omitempty"`
	// StartDelay runs from the trigger to the instance's first barrier;
	// Alignment from its first barrier to its last; Snapshot and Upload are
	// the times to take and upload the snapshot.
	StartDelay time.Duration `json:"start_delay"`
	Alignment  time.Duration `json:"alignment"`
	Snapshot   time.Duration `json:"snapshot"`
	Upload     time.Duration `json:"upload"`
	FullBytes  int64         `json:"full_bytes"`
	NewBytes   int64         `json:"new_bytes"`
	// Error, when set, fails the checkpoint.
	Error string `json:"error,omitempty"`
	// Assignment is the version of the assignment the instance runs under.
	Assignment uint64 `json:"assignment,omitempty"`
}

// ParseAck decodes an acknowledgement from its control-subject message,
// refusing one that no instance would send: no checkpoint, an operator or
// instance that cannot name one, negative durations or sizes. Anyone who
// can publish on the subject can send bytes; only a well-formed Ack counts.
func ParseAck(data []byte) (Ack, error) {
	var a Ack
	if err := decodeStrict(data, &a); err != nil {
		return Ack{}, fmt.Errorf("checkpoint: ack: %w", err)
	}
	switch {
	case a.Checkpoint == 0:
		return Ack{}, errors.New("checkpoint: ack: no checkpoint number")
	case !ValidName(a.Operator):
		return Ack{}, fmt.Errorf("checkpoint: ack: operator %q is not a name", a.Operator)
	case !ValidName(a.Instance):
		return Ack{}, fmt.Errorf("checkpoint: ack: instance %q is not a name", a.Instance)
	case a.StartDelay < 0 || a.Alignment < 0 || a.Snapshot < 0 || a.Upload < 0 || a.FullBytes < 0 || a.NewBytes < 0:
		return Ack{}, errors.New("checkpoint: ack: negative duration or size")
	}
	return a, nil
}

// EncodeAck encodes an acknowledgement as ParseAck reads it.
func EncodeAck(a Ack) ([]byte, error) { return encode("ack", a) }

func encode(what string, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: encode %s: %w", what, err)
	}
	return b, nil
}

// decodeStrict: the control subjects carry only what weir sends.
var decodeStrict = strictjson.Decode

// ValidName reports whether s can name an operator, an instance or a
// savepoint: it becomes part of KV keys, object names and subjects, so it
// is valid UTF-8 of at most 256 bytes without '.', '*', '>', '/' or
// whitespace.
func ValidName(s string) bool {
	return s != "" && len(s) <= 256 && utf8.ValidString(s) && !strings.ContainsAny(s, ".*>/ \t\r\n")
}

// Sent checks that a is what the instance of operator whose subject it
// came on could send for checkpoint n (a savepoint when savepoint is
// set): its own name, and a manifest under its own key, the one Upload
// stores that snapshot under. The server's permissions let a service
// publish only on its own operators' subjects; Sent keeps it from
// speaking for another operator in the body, or from naming a manifest a
// restore would then read as another instance's state.
func (a Ack) Sent(operator, instance string, n uint64, savepoint string) error {
	if a.Operator != operator || a.Instance != instance {
		return fmt.Errorf("checkpoint: ack: sent on %s/%s's subject in the name of %s/%s", operator, instance, a.Operator, a.Instance)
	}
	if a.Checkpoint != n {
		return fmt.Errorf("checkpoint: ack: of checkpoint %d, not %d", a.Checkpoint, n)
	}
	if a.Error != "" {
		// A failed snapshot names no manifest the checkpoint would use.
		return nil
	}
	want := ManifestKey(operator, instance, n)
	if a.Manifest == want {
		return nil
	}
	// An instance a savepoint's barrier reached stores its snapshot as
	// the savepoint's.
	if savepoint != "" && a.Manifest == SavepointKey(savepoint, operator, instance) {
		return nil
	}
	return fmt.Errorf("checkpoint: ack: names manifest %q, where %s/%s's snapshot of checkpoint %d is %q", a.Manifest, operator, instance, n, want)
}
