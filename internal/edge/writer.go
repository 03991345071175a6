package edge

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/keygroup"
	"github.com/weirflow/weir/pkg/producer"
	"github.com/weirflow/weir/pkg/record"
)

// Frame headers. Nats-Msg-Id is JetStream's own.
const (
	HeaderMsgID      = "Nats-Msg-Id"
	HeaderProducer   = producer.Header
	HeaderGeneration = "Weir-Generation"
	HeaderEpoch      = "Weir-Epoch"
	HeaderFrameSeq   = "Weir-Frame-Seq"
	HeaderRecords    = "Weir-Records"
	// HeaderErased is the registry revision of the last erasure
	// (internal/erasure) the writer had applied when it wrote the message:
	// what a key erased by a later one carries in it may come from the
	// key's state before its erasure. Absent when the writer's pipeline
	// has no erasure applied.
	HeaderErased = "Weir-Erased"
	// Headers of a json edge's messages. The key is escaped
	// (EscapeHeader): header values cannot carry every byte.
	HeaderKey       = "Weir-Key"
	HeaderEventTime = "Weir-Event-Time"
	// HeaderErasable holds, one value each, the erasure names
	// (erasure.Names: digests, never the key) of the key whose state
	// caused a json message — an outbox's intent — so that an erasure of
	// the key, or of its tenant, finds it and what the dispatcher kept of
	// it, though its own key is the intent's.
	HeaderErasable = "Weir-Erasable"
	// HeaderTraceparent is W3C trace context, kept lower case.
	HeaderTraceparent = "traceparent"
)

// Limits bound the frames a Writer cuts.
type Limits struct {
	MaxRecords int // records per frame
	MaxBytes   int // encoded bytes per frame
}

// Validate reports whether the limits are usable.
func (l Limits) Validate() error {
	if l.MaxRecords <= 0 || l.MaxBytes <= 0 {
		return fmt.Errorf("edge: frame limits %+v must be positive", l)
	}
	return nil
}

// Message is one encoded frame ready to publish. Its fields fully determine
// the JetStream message, so a staged Message re-published after a crash is
// byte-identical to the first attempt.
type Message struct {
	Subject    string
	ID         string
	Producer   string
	Generation uint64
	Epoch      uint64
	Seq        uint64
	Records    int
	// DataRecords counts the data records among Records (a frame also
	// carries watermarks, idle markers and barriers). Staging does not
	// keep it: UnmarshalBinary counts it again.
	DataRecords int
	Data        []byte
	// JSON marks a json edge's message: one record's value, with its key
	// and event time in headers instead of frame headers.
	JSON bool
	Key  []byte
	Time time.Time
	// Trace is the traceparent the message carries in its header: the
	// record's for a json message, the first traced record's for a frame.
	Trace string
	// Erased is the last erasure the writer had applied (HeaderErased);
	// 0 for none.
	Erased uint64
	// Erasable are a json message's erasure names (HeaderErasable).
	Erasable []string
}

// NATS builds the JetStream message.
func (m Message) NATS() *nats.Msg {
	msg := nats.NewMsg(m.Subject)
	msg.Data = m.Data
	msg.Header.Set(HeaderMsgID, m.ID)
	msg.Header.Set(HeaderProducer, m.Producer)
	if m.Trace != "" {
		msg.Header[HeaderTraceparent] = []string{m.Trace} // lower case: NATS header lookup is case-sensitive
	}
	if m.Erased != 0 {
		msg.Header.Set(HeaderErased, strconv.FormatUint(m.Erased, 10))
	}
	if m.JSON {
		msg.Header.Set(HeaderKey, EscapeHeader(string(m.Key)))
		if !m.Time.IsZero() {
			msg.Header.Set(HeaderEventTime, m.Time.UTC().Format(time.RFC3339Nano))
		}
		if len(m.Erasable) > 0 {
			msg.Header[HeaderErasable] = m.Erasable
		}
		return msg
	}
	msg.Header.Set(HeaderGeneration, strconv.FormatUint(m.Generation, 10))
	msg.Header.Set(HeaderEpoch, strconv.FormatUint(m.Epoch, 10))
	msg.Header.Set(HeaderFrameSeq, strconv.FormatUint(m.Seq, 10))
	msg.Header.Set(HeaderRecords, strconv.Itoa(m.Records))
	return msg
}

// Markers of a staged json message: its key and time follow, the time as
// frames write it (stagedJSON) or, as staged before frame version 3, in Unix
// nanoseconds.
const (
	stagedJSONNanos = 1
	stagedJSON      = 2
	// stagedErased marks the message's Erased, which follows (a uvarint);
	// it comes after a json message's key and time.
	stagedErased = 3
	// stagedErasable marks the message's erasure names, which follow (a
	// count, then each); it comes last.
	stagedErasable = 4
)

// MarshalBinary encodes the message for staging in the state store.
func (m Message) MarshalBinary() ([]byte, error) {
	buf := make([]byte, 0, len(m.Data)+len(m.Subject)+len(m.ID)+len(m.Producer)+48)
	buf = appendString(buf, m.Subject)
	buf = appendString(buf, m.ID)
	buf = appendString(buf, m.Producer)
	buf = binary.AppendUvarint(buf, m.Generation)
	buf = binary.AppendUvarint(buf, m.Epoch)
	buf = binary.AppendUvarint(buf, m.Seq)
	buf = binary.AppendUvarint(buf, uint64(m.Records))
	buf = appendBytes(buf, m.Data)
	buf = appendString(buf, m.Trace)
	if m.JSON {
		buf = append(buf, stagedJSON)
		buf = appendBytes(buf, m.Key)
		buf = appendTime(buf, m.Time)
	}
	if m.Erased != 0 {
		buf = append(buf, stagedErased)
		buf = binary.AppendUvarint(buf, m.Erased)
	}
	if len(m.Erasable) > 0 {
		buf = append(buf, stagedErasable)
		buf = binary.AppendUvarint(buf, uint64(len(m.Erasable)))
		for _, n := range m.Erasable {
			buf = appendString(buf, n)
		}
	}
	return buf, nil
}

// UnmarshalBinary decodes a staged message.
func (m *Message) UnmarshalBinary(data []byte) error {
	d := decoder{buf: data}
	m.Subject = string(d.bytes())
	m.ID = string(d.bytes())
	m.Producer = string(d.bytes())
	m.Generation = d.uvarint()
	m.Epoch = d.uvarint()
	m.Seq = d.uvarint()
	m.Records = int(d.uvarint())
	m.Data = d.bytes()
	m.Trace = string(d.bytes())
	if d.err == nil && len(d.buf) > 0 && (d.buf[0] == stagedJSON || d.buf[0] == stagedJSONNanos) {
		d.nanos = d.buf[0] == stagedJSONNanos
		d.buf = d.buf[1:]
		m.JSON = true
		m.Key = d.bytes()
		m.Time = d.time()
	}
	if d.err == nil && len(d.buf) > 0 && d.buf[0] == stagedErased {
		d.buf = d.buf[1:]
		m.Erased = d.uvarint()
	}
	if d.err == nil && len(d.buf) > 0 && d.buf[0] == stagedErasable {
		d.buf = d.buf[1:]
		n := d.uvarint()
		if n == 0 || n > uint64(len(d.buf)) {
			d.fail("erasure names")
		}
		for i := uint64(0); i < n && d.err == nil; i++ {
			m.Erasable = append(m.Erasable, string(d.bytes()))
		}
	}
	if d.err != nil || len(d.buf) != 0 {
		return fmt.Errorf("%w: staged message", ErrCorruptFrame)
	}
	m.DataRecords = 1
	if !m.JSON {
		recs, err := DecodeFrame(m.Data)
		if err != nil {
			return fmt.Errorf("%w: staged message", err)
		}
		m.DataRecords = 0
		for _, r := range recs {
			if r.Kind == record.Data {
				m.DataRecords++
			}
		}
	}
	return nil
}

// Writer batches records into frames for the partitions of one edge. It is
// not safe for concurrent use: a Writer belongs to one operator step loop.
type Writer struct {
	spec       Spec
	layout     keygroup.Layout
	producer   string
	generation uint64
	epoch      uint64
	erased     uint64
	limits     Limits

	json  bool
	open  [][]record.Record
	bytes []int
	seqs  []uint64 // last frame sequence cut, per partition
	ready []Message
}

// WriterConfig configures a Writer.
type WriterConfig struct {
	Spec Spec
	// KeyGroups is the pipeline's key-group count, for routing by key.
	KeyGroups int
	// Producer identifies the writing instance, e.g. "dedup/0". It is part
	// of every frame ID.
	Producer   string
	Generation uint64
	Limits     Limits
	// Seqs are the last frame sequences cut per partition, restored from
	// state; nil starts every partition at zero.
	Seqs []uint64
	// JSON writes one message per data record, its value as the payload,
	// and drops control records: a result stream for people to read.
	JSON bool
}

// NewWriter returns a Writer.
func NewWriter(c WriterConfig) (*Writer, error) {
	if err := c.Spec.Validate(); err != nil {
		return nil, err
	}
	if err := c.Limits.Validate(); err != nil {
		return nil, err
	}
	l := keygroup.Layout{Groups: c.KeyGroups, Partitions: c.Spec.Partitions}
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if c.Producer == "" {
		return nil, errors.New("edge: writer needs a producer name")
	}
	seqs := make([]uint64, c.Spec.Partitions)
	copy(seqs, c.Seqs)
	return &Writer{
		spec: c.Spec, layout: l, producer: c.Producer, generation: c.Generation, limits: c.Limits, json: c.JSON,
		open:  make([][]record.Record, c.Spec.Partitions),
		bytes: make([]int, c.Spec.Partitions),
		seqs:  seqs,
	}, nil
}

// SetEpoch sets the epoch stamped on frames cut from now on.
func (w *Writer) SetEpoch(e uint64) { w.epoch = e }

// SetErased sets the erasure stamped on messages cut from now on
// (HeaderErased): the last the writer's operator has applied. Records
// written before it is set are cut before it, in frames of their own: the
// runtime flushes the writer at the end of every step, and applies an
// erasure in a step of its own.
func (w *Writer) SetErased(rev uint64) { w.erased = rev }

// Spec returns the edge the writer writes.
func (w *Writer) Spec() Spec { return w.spec }

// Partition returns the partition a key routes to.
func (w *Writer) Partition(key []byte) int { return w.layout.Partition(key) }

// Write adds a data record, routed by its key (split, on an edge that
// splits keys).
func (w *Writer) Write(r record.Record) { w.WriteErasable(r, nil) }

// WriteErasable is Write for a record that erasures of the key whose
// state caused it must find: on a json edge its message carries names
// (HeaderErasable); a frame carries none, its records keeping their keys.
func (w *Writer) WriteErasable(r record.Record, names []string) {
	w.writeTo(w.layout.Partition(keygroup.Split(r.Key, r.ID, w.spec.Split)), r, names)
}

// Broadcast adds a control record to every partition.
func (w *Writer) Broadcast(r record.Record) {
	for p := range w.open {
		w.WriteTo(p, r)
	}
}

// WriteTo adds a record to partition p, cutting a frame when the limits are
// reached.
func (w *Writer) WriteTo(p int, r record.Record) { w.writeTo(p, r, nil) }

func (w *Writer) writeTo(p int, r record.Record, erasable []string) {
	if w.json {
		if r.Kind == record.Data {
			w.seqs[p]++
			id := TenantID(r.Tenant, r.ID)
			w.ready = append(w.ready, Message{
				Subject: w.spec.Subject(p), ID: JSONMsgID(w.spec.Pipeline, w.spec.Edge, id),
				Producer: w.producer, Generation: w.generation, Epoch: w.epoch, Seq: w.seqs[p], Records: 1, DataRecords: 1,
				Data: r.Value, JSON: true, Key: r.Key, Time: r.Time, Trace: r.Trace, Erased: w.erased, Erasable: erasable,
			})
		}
		return
	}
	size := EncodedSize(r)
	if len(w.open[p]) > 0 && w.bytes[p]+size > w.limits.MaxBytes {
		w.cut(p)
	}
	w.open[p] = append(w.open[p], r)
	w.bytes[p] += size
	if len(w.open[p]) >= w.limits.MaxRecords {
		w.cut(p)
	}
}

func (w *Writer) cut(p int) {
	recs := w.open[p]
	if len(recs) == 0 {
		return
	}
	w.seqs[p]++
	seq := w.seqs[p]
	var trace string
	data := 0
	for _, r := range recs {
		if r.Trace != "" && trace == "" {
			trace = r.Trace
		}
		if r.Kind == record.Data {
			data++
		}
	}
	w.ready = append(w.ready, Message{
		Trace:       trace,
		Subject:     w.spec.Subject(p),
		ID:          FrameID(w.spec.Pipeline, w.producer, w.generation, w.spec.Edge, p, seq),
		Producer:    w.producer,
		Generation:  w.generation,
		Epoch:       w.epoch,
		Seq:         seq,
		Records:     len(recs),
		DataRecords: data,
		Data:        EncodeFrame(recs),
		Erased:      w.erased,
	})
	w.open[p] = recs[:0] // encoded above; reuse the backing array
	w.bytes[p] = 0
}

// Flush cuts every open frame and returns all frames cut since the last
// Flush, in the order they were cut.
func (w *Writer) Flush() []Message {
	for p := range w.open {
		w.cut(p)
	}
	out := w.ready
	w.ready = nil
	return out
}

// Seqs returns the last frame sequence cut per partition; the runtime stores
// them with the step that cut the frames.
func (w *Writer) Seqs() []uint64 { return append([]uint64(nil), w.seqs...) }

// JSONMsgID is the deterministic Nats-Msg-Id of a json edge's message of
// the record with ID id — for a record with a tenant, the tenant, the
// byte 0x1e and its ID, unless the ID begins so: distinct IDs give distinct message IDs, whatever
// bytes they hold (IDPart).
func JSONMsgID(pipeline, edge, id string) string {
	return pipeline + "." + edge + "." + IDPart(id)
}

// TenantID is the ID of a record of tenant as message IDs hold it: two
// tenants' records may share an ID, so for a tenant it is the tenant, the
// byte 0x1e and the ID — unless the ID begins so already (a pane's ID
// begins with its key, which a tenant-scoped key has prefixed). A tenant
// without the byte 0x1e (keygroup.ValidTenant) makes it unambiguous across
// tenants. The ingest gateway's Nats-Msg-Id is TenantID escaped
// (EscapeHeader); a producer publishing to a tenanted ingress itself
// uses the same, so that its retries and the gateway's dedupe.
func TenantID(tenant, id string) string {
	if tenant == "" || strings.HasPrefix(id, tenant+"\x1e") {
		return id
	}
	return tenant + "\x1e" + id
}

// FrameID is the deterministic Nats-Msg-Id of a frame.
func FrameID(pipeline, producer string, generation uint64, edge string, partition int, seq uint64) string {
	return fmt.Sprintf("%s.%s.g%d.%s.%d.%d", pipeline, producer, generation, edge, partition, seq)
}

// Publish publishes messages — the frames of a step, or a json edge's
// messages, all of one edge — and waits until JetStream has stored every
// one. They go in atomic batches (pkg/producer): one write and one fsync
// per batch instead of per message. A message JetStream already holds (a
// re-publish after a crash, by its Nats-Msg-Id) counts as published;
// published one by one, at most maxInFlight are outstanding.
func Publish(ctx context.Context, js jetstream.JetStream, msgs []Message, maxInFlight int) error {
	if len(msgs) == 0 {
		return nil
	}
	nms := make([]*nats.Msg, len(msgs))
	for i, m := range msgs {
		nms[i] = m.NATS()
	}
	if _, err := producer.Publish(ctx, js, nms, 0, maxInFlight); err != nil {
		return fmt.Errorf("edge: %w", err)
	}
	return nil
}

// Reset discards every frame cut or open since the last Flush and sets the
// partitions' last frame sequences, undoing a step that failed.
func (w *Writer) Reset(seqs []uint64) {
	for p := range w.open {
		w.open[p] = nil
		w.bytes[p] = 0
		w.seqs[p] = 0
	}
	copy(w.seqs, seqs)
	w.ready = nil
}
