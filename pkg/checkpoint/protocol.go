package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
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
//	request   CLI → coordinator: take a checkpoint or savepoint now
//	          (Request; the reply is the checkpoint's Record)

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
	if err := json.Unmarshal(data, &t); err != nil {
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

// Request asks the coordinator for a checkpoint now, optionally kept as a
// named savepoint.
type Request struct {
	Savepoint string `json:"savepoint,omitempty"`
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
	if err := json.Unmarshal(data, &a); err != nil {
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
