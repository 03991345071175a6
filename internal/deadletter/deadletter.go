// Package deadletter keeps the records weir could not handle.
//
// A dead letter is the original payload (or as much of it as fits) with
// headers naming where it came from — ingress stream, subject and stream
// sequence — which field failed, why, which operator gave up on it, and the
// record's tenant where the contract declares tenants. Dead
// letters live in a weir-owned stream per pipeline, WEIR_<PIPELINE>_DLQ, on
// subject weir.<pipeline>.dlq.<operator>; events whose time lies too far in
// the future go to weir.<pipeline>.side.<operator> when the contract asks
// for a side output. Each letter's Nats-Msg-Id is derived from its source
// coordinate, so an operator that crashes after dead-lettering a record and
// handles it again after restart does not file it twice.
//
// The original record always stays in its ingress stream at the coordinate
// the letter names: a dead letter is an index of what needs attention, and
// nothing is lost when a payload is too large to copy whole.
package deadletter

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/jsapi"
	"github.com/weirflow/weir/pkg/producer"
	"github.com/weirflow/weir/pkg/record"
)

// Headers of a dead letter.
const (
	HeaderStream    = "Weir-Source-Stream"
	HeaderSubject   = "Weir-Source-Subject"
	HeaderSeq       = "Weir-Source-Seq"
	HeaderField     = "Weir-Field"
	HeaderReason    = "Weir-Reason"
	HeaderOperator  = "Weir-Operator"
	HeaderTruncated = "Weir-Truncated"
	// HeaderContract is the fingerprint of the contract — identity fields,
	// schema, policies — the record was judged by.
	HeaderContract = "Weir-Contract"
	// HeaderSchema is the version of the schema an ingress message was
	// read as, where the contract declares versioned decoders
	// (identity.schema).
	HeaderSchema = "Weir-Read-As-Schema"
	// HeaderTenant is the record's tenant (identity.tenant), where it
	// decoded one: a letter stays within its tenant's boundary like the
	// record it stands for.
	HeaderTenant = "Weir-Tenant"
)

// MaxPayload bounds the bytes of the original payload copied into a letter.
const MaxPayload = 64 << 10

// MaxReason bounds the bytes of a letter's reason: a reason may quote the
// record (a key it could not place), and a letter must always fit in a NATS
// message, or filing it would fail for ever and stall its operator.
const MaxReason = 4 << 10

// Letter is one record weir could not handle.
type Letter struct {
	At record.Coordinate
	// ID is the record's ID; empty for input that never decoded into one.
	ID string
	// Tenant is the record's tenant; empty where the contract declares
	// none or the record never decoded one.
	Tenant   string
	Operator string
	// Contract is the fingerprint of the contract the operator ran by.
	Contract string
	// Schema is the version of the schema the record was read as, if the
	// contract declares versions and the record's was found.
	Schema  string
	Field   string
	Reason  string
	Payload []byte
	// SideOutput files the letter on the side-output subject.
	SideOutput bool
	// Shed files it on the shed subject: a record dropped by overload
	// policy shed, recorded by its coordinate (its payload stays in the
	// source).
	Shed bool
}

// StreamName is the dead-letter stream of a pipeline.
func StreamName(pipeline string) string {
	return "WEIR_" + strings.ToUpper(strings.ReplaceAll(pipeline, "-", "_")) + "_DLQ"
}

// Subject is where an operator's dead letters go.
func Subject(pipeline, operator string) string { return "weir." + pipeline + ".dlq." + operator }

// SideSubject is where an operator's side-output letters go.
func SideSubject(pipeline, operator string) string { return "weir." + pipeline + ".side." + operator }

// ShedSubject is where an operator records what overload policy shed
// dropped.
func ShedSubject(pipeline, operator string) string { return "weir." + pipeline + ".shed." + operator }

// Declared is the pipeline's dead-letter stream as weir declares it, with
// the given replicas (0 means 1): what weir provision creates and an
// operator checks before it starts.
func Declared(pipeline string, retention time.Duration, replicas int) jsapi.Declared {
	return jsapi.Declared{Stream: jetstream.StreamConfig{
		Name:        StreamName(pipeline),
		Description: "weir dead letters and side outputs of pipeline " + pipeline,
		Subjects:    []string{"weir." + pipeline + ".dlq.>", "weir." + pipeline + ".side.>", "weir." + pipeline + ".shed.>"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		MaxAge:      retention,
		Duplicates:  min(10*time.Minute, retention),
		Replicas:    max(replicas, 1),
		// A step's letters are filed in one atomic batch (Publish).
		AllowAtomicPublish: true,
	}}
}

// Ensure returns the pipeline's dead-letter stream after checking that it
// is as declared (jsapi.Check): one that differs is refused, never
// updated; a missing one is created when the server allows.
func Ensure(ctx context.Context, js jetstream.JetStream, pipeline string, retention time.Duration, replicas int) (jetstream.Stream, error) {
	if err := jsapi.Check(ctx, js, Declared(pipeline, retention, replicas)); err != nil {
		return nil, fmt.Errorf("deadletter: %w", err)
	}
	var st jetstream.Stream
	err := jsapi.Settled(ctx, "look up "+StreamName(pipeline), func(ctx context.Context) (err error) {
		st, err = js.Stream(ctx, StreamName(pipeline))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("deadletter: stream %s: %w", StreamName(pipeline), err)
	}
	return st, nil
}

// Msg builds the JetStream message of a letter.
func (l Letter) Msg(pipeline string) *nats.Msg {
	subj := Subject(pipeline, l.Operator)
	switch {
	case l.SideOutput:
		subj = SideSubject(pipeline, l.Operator)
	case l.Shed:
		subj = ShedSubject(pipeline, l.Operator)
	}
	m := nats.NewMsg(subj)
	payload := l.Payload
	if len(payload) > MaxPayload {
		payload = payload[:MaxPayload]
		m.Header.Set(HeaderTruncated, strconv.Itoa(len(l.Payload)))
	}
	m.Data = payload
	// The coordinate names the letter; the record ID tells apart records
	// that share one (what an operator emits from a timer, or from one
	// input record, inherits its coordinate), which JetStream would
	// otherwise drop as duplicates of the first.
	id := fmt.Sprintf("%s.%s.%s.%d", subj, l.At.Stream, l.At.Subject, l.At.Seq)
	if l.ID != "" {
		id += "." + edge.IDPart(l.ID)
	}
	if l.Tenant != "" {
		// Two tenants' records may share an ID (a timer's output
		// inherits the coordinate of what woke it).
		id += ".t." + edge.IDPart(l.Tenant)
		m.Header.Set(HeaderTenant, l.Tenant)
	}
	m.Header.Set(jetstream.MsgIDHeader, id)
	m.Header.Set(HeaderStream, l.At.Stream)
	m.Header.Set(HeaderSubject, l.At.Subject)
	m.Header.Set(HeaderSeq, strconv.FormatUint(l.At.Seq, 10))
	m.Header.Set(HeaderField, l.Field)
	m.Header.Set(HeaderReason, truncate(l.Reason, MaxReason))
	m.Header.Set(HeaderOperator, l.Operator)
	if l.Contract != "" {
		m.Header.Set(HeaderContract, l.Contract)
	}
	if l.Schema != "" {
		m.Header.Set(HeaderSchema, l.Schema)
	}
	return m
}

// Publish files letters and waits until JetStream has stored them all.
func Publish(ctx context.Context, js jetstream.JetStream, pipeline string, letters []Letter) error {
	if len(letters) == 0 {
		return nil
	}
	msgs := make([]*nats.Msg, len(letters))
	for i, l := range letters {
		msgs[i] = l.Msg(pipeline)
	}
	if _, err := producer.Publish(ctx, js, msgs, 0, 0); err != nil {
		return fmt.Errorf("deadletter: file %d letters from %s on: %w", len(letters), letters[0].At, err)
	}
	return nil
}

// Parse reads a letter back from a dead-letter message.
func Parse(m jetstream.Msg) (Letter, error) {
	h := m.Headers()
	seq, err := strconv.ParseUint(h.Get(HeaderSeq), 10, 64)
	if err != nil {
		return Letter{}, fmt.Errorf("deadletter: %s header: %w", HeaderSeq, err)
	}
	return Letter{
		At:         record.Coordinate{Stream: h.Get(HeaderStream), Subject: h.Get(HeaderSubject), Seq: seq},
		Operator:   h.Get(HeaderOperator),
		Contract:   h.Get(HeaderContract),
		Schema:     h.Get(HeaderSchema),
		Tenant:     h.Get(HeaderTenant),
		Field:      h.Get(HeaderField),
		Reason:     h.Get(HeaderReason),
		Payload:    m.Data(),
		SideOutput: strings.Contains(m.Subject(), ".side."),
		Shed:       strings.Contains(m.Subject(), ".shed."),
	}, nil
}

// truncate cuts s to at most n bytes, on a UTF-8 boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
