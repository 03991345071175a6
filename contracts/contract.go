package contracts

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// FormatVersion is the only contract format version this package reads.
const FormatVersion = 1

// MaxKeyGroups bounds state.key_groups; state keys store the group in two
// bytes (see internal/keygroup).
const MaxKeyGroups = 1 << 15

// InputIngress is the operator input that names the ingress stream rather
// than an internal edge.
const InputIngress = "ingress"

// Identity sources and event-time formats.
const (
	FromJSON      = "json"
	FromHeader    = "header"
	FormatUnixMs  = "unix-ms"
	FormatRFC3339 = "rfc3339"
)

// Ingress offset semantics.
const (
	// OffsetsStreamSequence resumes each partition after its last committed
	// JetStream stream sequence.
	OffsetsStreamSequence = "stream-sequence"
)

// Time domains, trusted clocks and future-event policies.
const (
	DomainEvent      = "event"
	DomainIngestion  = "ingestion"
	DomainProcessing = "processing"

	TrustProducer = "producer"
	TrustBroker   = "broker"

	OnFutureDeadLetter = "dead-letter"
	// OnFutureReject is accepted as a synonym of OnFutureDeadLetter; Parse
	// rewrites it to OnFutureDeadLetter.
	OnFutureReject     = "reject"
	OnFutureClamp      = "clamp"
	OnFutureSideOutput = "side-output"
)

// Watermark strategies.
const (
	WatermarkBounded = "bounded-out-of-orderness"
	WatermarkSource  = "source-provided"
	WatermarkNone    = "none"
)

// Output modes (emission.mode) and what a sink can apply (sink.accepts).
const (
	ModeAppend  = "append"
	ModeUpsert  = "upsert"
	ModeRetract = "retract"
)

// Accumulation of successive panes of one window.
const (
	AccumulationDiscarding   = "discarding"
	AccumulationAccumulating = "accumulating"
	AccumulationRetracting   = "retracting"
)

// Operator keying (operators[].keying), family kinds, roles, bounds and
// limit actions.
const (
	// KeyingID keys an operator's state by identity.id: one entry per event.
	KeyingID = "id"
	// KeyingKey keys an operator's state by identity.key: one entry per
	// business key.
	KeyingKey = "key"

	KindValue = "value"
	KindMap   = "map"
	KindList  = "list"

	RoleDedup = "dedup"

	BoundTTL    = "ttl"
	BoundWindow = "window"

	OnLimitFail       = "fail"
	OnLimitDeadLetter = "dead-letter"
)

// Checkpoint modes.
const (
	CheckpointAligned   = "aligned"
	CheckpointUnaligned = "unaligned"
)

// Sink effects.
const (
	EffectTransactional   = "transactional"
	EffectVersionedUpsert = "versioned-upsert"
	EffectOutbox          = "outbox"
	EffectAtLeastOnce     = "at-least-once"
)

// Whether an outbox's provider honours idempotency keys (sink.provider_keys).
const (
	ProviderKeysHonoured = "honoured"
	ProviderKeysIgnored  = "ignored"
)

// Overload policies.
const (
	PolicyBlock     = "block"
	PolicyShed      = "shed"
	PolicyAdmission = "admission"
)

// Contract is one pipeline's streaming contract, as declared in
// contracts/<pipeline>.yaml. Load and Parse build it from a file; Lint says
// whether it is complete and free of contradictions.
type Contract struct {
	Pipeline  string     `yaml:"pipeline"`
	Version   int        `yaml:"version"`
	Ingress   Ingress    `yaml:"ingress"`
	Identity  Identity   `yaml:"identity"`
	Time      Time       `yaml:"time"`
	Progress  Progress   `yaml:"progress"`
	Emission  Emission   `yaml:"emission"`
	State     State      `yaml:"state"`
	Recovery  Recovery   `yaml:"recovery"`
	Sink      Sink       `yaml:"sink"`
	Overload  Overload   `yaml:"overload"`
	Edges     []Edge     `yaml:"edges"`
	Operators []Operator `yaml:"operators"`
	// Capacity is optional: the rates the pipeline is sized for.
	Capacity Capacity `yaml:"capacity,omitempty"`
	// Security is optional: what of the records must never leave in the
	// clear.
	Security Security `yaml:"security,omitempty"`
	// Deletion is optional: how a legal erasure of a key is answered.
	Deletion Deletion `yaml:"deletion,omitempty"`

	// File is the path the contract was loaded from; problems name it.
	File string `yaml:"-"`

	// index maps dotted field paths to where they appear in File. It is nil
	// for a contract built in Go, which then has no line numbers and no
	// notion of a field being absent.
	index map[string]position
}

// position is where a field appears in a contract file.
type position struct {
	line int
	null bool // the key is there but its value is empty
	// defaulted: the file leaves the field out, and it has its default
	// (line 0).
	defaulted bool
}

// Ingress is the user-owned stream the pipeline replays from: SOURCE REPLAY.
type Ingress struct {
	Stream          string   `yaml:"stream"`
	SubjectPrefix   string   `yaml:"subject_prefix"`
	Partitions      int      `yaml:"partitions"`
	Retention       Duration `yaml:"retention"`
	Offsets         string   `yaml:"offsets"`
	MaxMessageBytes int      `yaml:"max_message_bytes"`
	// MaxBytes and MaxMsgs are the stream's own limits, when it has them:
	// weir creates the stream with them (-create-ingress), and the linter
	// checks, at capacity.arrival_rate, that they keep records as long as
	// Retention. 0 (absent): no limit but the age.
	MaxBytes int `yaml:"max_bytes,omitempty"`
	MaxMsgs  int `yaml:"max_msgs,omitempty"`
	// DuplicateWindow is how long the stream remembers its producers'
	// Nats-Msg-Id values, when weir creates it: a producer's retry within
	// it is stored once. The broker keeps every ID of the window in
	// memory, about 100 bytes each, on the stream's one writing
	// goroutine: at 50,000 events/s two minutes hold 6 million. 0
	// (absent): two minutes, or the retention when shorter
	// (ingress.Duplicates).
	DuplicateWindow Duration `yaml:"duplicate_window,omitempty"`
	// Streams is how many streams the ingress is placed over: partition p
	// in StreamOf(p). A stream is written by one goroutine of its server,
	// which bounds one stream's ingest; several streams are written side
	// by side, and on a cluster their leaders spread over the nodes. 0
	// (absent) and 1 are the one stream named Stream.
	Streams int `yaml:"streams,omitempty"`
}

// Subject returns the ingress subject of partition p: <subject_prefix>.<p>.
func (in Ingress) Subject(p int) string { return fmt.Sprintf("%s.%d", in.SubjectPrefix, p) }

// StreamCount is the number of streams the ingress is placed over: Streams,
// or 1 when absent.
func (in Ingress) StreamCount() int { return max(in.Streams, 1) }

// StreamOf returns the stream that holds partition p: Stream when the
// ingress is one stream, <stream>_<p mod streams> when it is several.
func (in Ingress) StreamOf(p int) string {
	n := in.StreamCount()
	if n == 1 {
		return in.Stream
	}
	return in.Stream + "_" + strconv.Itoa(p%n)
}

// StreamNames returns the ingress's streams, the one of partition i at i.
func (in Ingress) StreamNames() []string {
	out := make([]string, in.StreamCount())
	for i := range out {
		out[i] = in.StreamOf(i)
	}
	return out
}

// PartitionsIn returns the partitions the i-th stream (StreamNames()[i])
// holds, in order.
func (in Ingress) PartitionsIn(i int) []int {
	var out []int
	for p := i; p < in.Partitions; p += in.StreamCount() {
		out = append(out, p)
	}
	return out
}

// Identity says where each event's identity comes from: EVENT IDENTITY.
type Identity struct {
	ID        Field `yaml:"id"`
	Key       Field `yaml:"key"`
	Producer  Field `yaml:"producer,omitempty"`
	EventTime Field `yaml:"event_time,omitempty"`
	// Tenant, when declared, is where a record's tenant is: it travels
	// with the record through every edge, and state.tenant_scoped makes
	// every key the pair (tenant, key). Older schemas read it here too.
	Tenant Field `yaml:"tenant,omitempty"`
	// Schema, when declared, lets the ingress hold records of several
	// schemas side by side: the fields above read the current one, and
	// Schema.Older keeps the decoders of the schemas before it for as long
	// as a replay may read their records.
	Schema Schema `yaml:"schema,omitempty"`
}

// Schema declares versioned decoders: where a record names its schema, the
// version the identity fields read, and the older versions' own fields.
type Schema struct {
	Version Field  `yaml:"version"`
	Current string `yaml:"current"`
	// Unnamed is the version of a record that names none — records written
	// before the producers named their schema. Empty: such a record is bad
	// input.
	Unnamed string        `yaml:"unnamed,omitempty"`
	Older   []OlderSchema `yaml:"older,omitempty"`
}

// Declared reports whether the contract declares versioned decoders.
func (s Schema) Declared() bool { return s.Version.Declared() || s.Current != "" || len(s.Older) > 0 }

// OlderSchema is the decoder of a schema before the current one.
type OlderSchema struct {
	Version   string `yaml:"version"`
	ID        Field  `yaml:"id"`
	Key       Field  `yaml:"key"`
	Producer  Field  `yaml:"producer,omitempty"`
	EventTime Field  `yaml:"event_time,omitempty"`
	// WrittenUntil is when producers stopped writing the schema, in RFC
	// 3339; empty while they still write it. Its records stay in the
	// ingress, and a replay may read them, until WrittenUntil plus the
	// ingress retention: the replay horizon.
	WrittenUntil string `yaml:"written_until,omitempty"`
	// Dropped retires the decoder: a record of this schema is bad input.
	// The linter allows it only past the replay horizon.
	Dropped bool `yaml:"dropped,omitempty"`
}

// Horizon is when the last record of the schema leaves an ingress that
// keeps records for retention: WrittenUntil plus retention. ok is false
// while the schema is still written.
func (o OlderSchema) Horizon(retention time.Duration) (t time.Time, ok bool, err error) {
	if o.WrittenUntil == "" {
		return time.Time{}, false, nil
	}
	until, err := time.Parse(time.RFC3339, o.WrittenUntil)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("%q is not an RFC 3339 time", o.WrittenUntil)
	}
	return until.Add(retention), true, nil
}

// Field locates one identity value in an ingress message: a dotted JSON path
// in the payload, or a header.
type Field struct {
	From     string `yaml:"from"`
	Field    string `yaml:"field,omitempty"`
	Header   string `yaml:"header,omitempty"`
	Format   string `yaml:"format,omitempty"`
	Optional bool   `yaml:"optional,omitempty"`
}

// Declared reports whether the field was declared at all (producer and, for
// some time domains, event_time may be left out).
func (f Field) Declared() bool { return f.From != "" }

// Time is the TIME DOMAIN decision.
type Time struct {
	Domain     string   `yaml:"domain"`
	Trust      string   `yaml:"trust"`
	FutureSkew Duration `yaml:"future_skew"`
	OnFuture   string   `yaml:"on_future"`
}

// Progress is the PROGRESS decision: how watermarks are generated.
type Progress struct {
	Watermark      string   `yaml:"watermark"`
	OutOfOrderness Duration `yaml:"out_of_orderness"`
	IdleTimeout    Duration `yaml:"idle_timeout"`
	AlignmentDrift Duration `yaml:"alignment_drift"`
}

// Emission is the EMISSION decision: what is emitted, the shape of the
// windows, when their panes fire and how panes of one window relate.
type Emission struct {
	Mode         string `yaml:"mode"`
	Accumulation string `yaml:"accumulation"`
	// Window is the shape of the pipeline's windows, which its window
	// operators read (package window, pkg/join); absent in a pipeline
	// that keeps no window state.
	Window          Window   `yaml:"window,omitempty"`
	Triggers        Triggers `yaml:"triggers"`
	AllowedLateness Duration `yaml:"allowed_lateness"`
}

// Window is a window shape (emission.window): how records are grouped in
// event time before the triggers emit panes of each group.
type Window struct {
	// Kind is WindowTumbling, WindowSliding, WindowSession or
	// WindowGlobal.
	Kind string `yaml:"kind"`
	// Size is the length of tumbling and sliding windows.
	Size Duration `yaml:"size,omitempty"`
	// Slide is how often a sliding window starts; Size is a multiple of
	// it.
	Slide Duration `yaml:"slide,omitempty"`
	// Gap is the event-time silence that closes a session.
	Gap Duration `yaml:"gap,omitempty"`
}

// Window kinds (emission.window.kind).
const (
	WindowTumbling = "tumbling"
	WindowSliding  = "sliding"
	WindowSession  = "session"
	WindowGlobal   = "global"
)

// MaxWindowsPerElement bounds size/slide of sliding windows: the windows,
// and so the state updates, one element costs.
const MaxWindowsPerElement = 1000

// Declared reports whether the contract declares a window.
func (w Window) Declared() bool { return w != Window{} }

// Length is how long, in event time, a window's state is written to
// before the window can close: the size of a tumbling or sliding window,
// the gap after a session's last element. A global window never closes:
// 0.
func (w Window) Length() time.Duration {
	switch w.Kind {
	case WindowTumbling, WindowSliding:
		return w.Size.Duration
	case WindowSession:
		return w.Gap.Duration
	}
	return 0
}

// String describes the shape: "tumbling 10s", "sliding 10s every 2s",
// "session gap 10s", "global".
func (w Window) String() string {
	switch w.Kind {
	case WindowTumbling:
		return w.Kind + " " + w.Size.String()
	case WindowSliding:
		return fmt.Sprintf("%s %s every %s", w.Kind, w.Size, w.Slide)
	case WindowSession:
		return w.Kind + " gap " + w.Gap.String()
	}
	return w.Kind
}

// Triggers say when a window emits a pane.
type Triggers struct {
	Early  Early `yaml:"early,omitempty"`
	OnTime bool  `yaml:"on_time"`
	Late   Late  `yaml:"late,omitempty"`
}

// Early panes fire every processing-time interval and/or every Count
// elements before the watermark passes the window end. Zero means none.
type Early struct {
	Every Duration `yaml:"every,omitempty"`
	Count int      `yaml:"count,omitempty"`
}

// Fires reports whether any early pane can fire.
func (e Early) Fires() bool { return e.Every.Duration > 0 || e.Count > 0 }

// Late panes fire for each late element and/or every processing-time
// interval while late elements arrive within the allowed lateness.
type Late struct {
	Each  bool     `yaml:"each,omitempty"`
	Every Duration `yaml:"every,omitempty"`
}

// Fires reports whether any late pane can fire.
func (l Late) Fires() bool { return l.Each || l.Every.Duration > 0 }

// State is the STATE decision. Which identity field keys the state, and
// which operator keeps each family, are stated per operator
// (Operator.Keying, Operator.State).
type State struct {
	KeyGroups int      `yaml:"key_groups"`
	Families  []Family `yaml:"families"`
	// TenantScoped makes every key the pair (identity.tenant, key): two
	// tenants' equal keys never share state, a window, a pane or a view
	// entry, however records are re-keyed and repartitioned.
	TenantScoped bool `yaml:"tenant_scoped,omitempty"`
}

// Family is one named state family and the rule that bounds it.
type Family struct {
	Name    string   `yaml:"name"`
	Kind    string   `yaml:"kind"`
	Role    string   `yaml:"role,omitempty"`
	TTL     Duration `yaml:"ttl,omitempty"`
	Bound   string   `yaml:"bound"`
	MaxKeys int      `yaml:"max_keys"`
	OnLimit string   `yaml:"on_limit"`
}

// Security says what of the pipeline's records is sensitive: payload
// fields, and the keys. Dead letters, side outputs, logs, trace attributes
// and metric labels never carry them in the clear; a dead letter still
// names its source coordinate, where someone allowed to read the source
// finds the original.
type Security struct {
	// Sensitive are JSON fields of the payload (dotted for nested ones:
	// card.number), each hashed or omitted where records leave.
	Sensitive []Sensitive `yaml:"sensitive,omitempty"`
	// Keys is how a record's key appears there: clear (the default),
	// hash or omit.
	Keys string `yaml:"keys,omitempty"`
}

// Sensitive is one sensitive payload field.
type Sensitive struct {
	Field string `yaml:"field"`
	// Redact is hash (a SHA-256 digest, which still tells equal values
	// apart: low-entropy values can be guessed from it) or omit.
	Redact string `yaml:"redact"`
}

// Deletion is the legal-deletion policy (SPEC §12): how long an erased
// key may stay anywhere weir keeps it, and what a restore or replay of
// records taken before the erasure does. `weir erase` removes the key from
// live state and views at once; the retained log, checkpoints and dead
// letters hold it until they age out, which Within bounds (lint D2, D3).
// Savepoints are kept until deleted: the erasure report names them.
type Deletion struct {
	// Within is the erasure deadline: every place weir keeps a key's
	// records must age them out within it.
	Within Duration `yaml:"within"`
	// Replay says which wins when records of an erased key written before
	// the erasure are read after it — a backlog, a restore's replay, weir
	// replay: erasure-wins (they are dropped, counted) or replay-wins
	// (they are processed, and bring the key back until they age out).
	// Either way a start applies again an erasure its state, restored
	// from an earlier checkpoint, does not record.
	Replay string `yaml:"replay"`
}

// Declared reports whether the contract has a deletion policy.
func (d Deletion) Declared() bool { return d != Deletion{} }

// Deletion policies: which wins between an erasure and a replay.
const (
	ErasureWins = "erasure-wins"
	ReplayWins  = "replay-wins"
)

// Redactions.
const (
	RedactClear = "clear"
	RedactHash  = "hash"
	RedactOmit  = "omit"
)

// Capacity is the CAPACITY declaration: the rates and recovery times a
// pipeline is sized for. When it is given, the linter does the arithmetic
// of internal/capacity (`weir capacity` prints it from measurements): a
// processing rate that cannot catch up, an ingress retention shorter than
// a recovery needs, stream limits that keep records less than the
// retention are refused. Every field is optional; a figure that needs an
// absent one is not checked.
type Capacity struct {
	// ArrivalRate is the peak sustained arrival rate, records/s.
	ArrivalRate int `yaml:"arrival_rate,omitempty"`
	// ProcessRate is the sustainable processing rate with checkpoints and
	// sinks on, records/s — measured (`weir capacity` on a pipeline kept
	// behind, or `weir bench`), not hoped for.
	ProcessRate int `yaml:"process_rate,omitempty"`
	// RecordBytes is the stored size of a record, broker overhead
	// included.
	RecordBytes int `yaml:"record_bytes,omitempty"`
	// Detection, Repair and Margin are how long a failure takes to notice,
	// to repair or provision for, and the retention kept beyond a recovery
	// for validation. A restore takes recovery.max_recovery_time.
	Detection Duration `yaml:"detection,omitempty"`
	Repair    Duration `yaml:"repair,omitempty"`
	Margin    Duration `yaml:"margin,omitempty"`
}

// Recovery is the RECOVERY decision.
type Recovery struct {
	CheckpointInterval Duration `yaml:"checkpoint_interval"`
	Mode               string   `yaml:"mode"`
	MaxRecoveryTime    Duration `yaml:"max_recovery_time"`
	// RetainedCheckpoints is how many completed checkpoints keep their
	// snapshots; older ones are collected (savepoints, and a checkpoint a
	// restore still needs, never are). 0 means DefaultRetainedCheckpoints.
	RetainedCheckpoints int `yaml:"retained_checkpoints,omitempty"`
}

// Envelope is the recovery envelope: checkpoint interval plus worst-case
// recovery time. Every retention must cover it.
func (r Recovery) Envelope() Duration {
	return Duration{r.CheckpointInterval.Duration + r.MaxRecoveryTime.Duration}
}

// Sink is the SINK EFFECT decision.
type Sink struct {
	Effect  string `yaml:"effect"`
	Accepts string `yaml:"accepts"`
	// MaxPendingEpochs bounds, for a transactional sink, the checkpoint
	// epochs whose results are held until their checkpoint completes; an
	// operator holding that many stops reading input until one is
	// released. Only a transactional sink has it.
	MaxPendingEpochs int `yaml:"max_pending_epochs,omitempty"`
	// ProviderKeys says, for an outbox, whether the provider the
	// dispatcher calls honours idempotency keys (ProviderKeysHonoured, the
	// default: each effect happens once) or ignores them
	// (ProviderKeysIgnored: a repeated call may be performed again, so the
	// effects are at least once, and the dispatcher flags every intent it
	// called more than once for reconciliation). Only an outbox has it.
	ProviderKeys string `yaml:"provider_keys,omitempty"`
}

// Overload is the OVERLOAD decision: every bound on in-flight work.
type Overload struct {
	Policy string `yaml:"policy"`
	// MaxLag is, for policies admission and shed, the records an
	// operator reading the ingress may have left to process before
	// producers are refused (admission) or optional records are dropped
	// (shed); only those policies have it.
	MaxLag int `yaml:"max_lag,omitempty"`
	// Shed says, for policy shed, which ingress records are optional.
	Shed              Shed     `yaml:"shed,omitempty"`
	FetchBatch        int      `yaml:"fetch_batch"`
	MaxAckPending     int      `yaml:"max_ack_pending"`
	FrameMaxRecords   int      `yaml:"frame_max_records"`
	FrameMaxBytes     int      `yaml:"frame_max_bytes"`
	FrameLinger       Duration `yaml:"frame_linger"`
	MaxBufferedFrames int      `yaml:"max_buffered_frames"`
}

// Shed is the predicate of optional records: those whose JSON payload
// has, at the dotted path Field, one of Values (a string, or a number or
// boolean as JSON writes it).
type Shed struct {
	Field  string   `yaml:"field,omitempty"`
	Values []string `yaml:"values,omitempty"`
}

// Declared reports whether the predicate is declared at all.
func (s Shed) Declared() bool { return s.Field != "" || len(s.Values) > 0 }

// Edge is an internal, weir-owned stream between operators.
type Edge struct {
	Name       string   `yaml:"name"`
	Partitions int      `yaml:"partitions"`
	Retention  Duration `yaml:"retention"`
	// Format is how records travel: frames (the default when absent: many
	// records per message, with in-band watermarks, for operators to read)
	// or json (one record's JSON value per message, for people and
	// external consumers to read: a result stream; no operator reads it).
	Format string `yaml:"format,omitempty"`
	// Split spreads hot keys: records are routed, and the reading
	// operator keys its state, by the key and one of Split salts taken
	// from the record's ID, so that one key's records spread over Split
	// key groups. The reader aggregates each part (window.Partial) and the
	// operator after it merges the parts (window.Merge): a two-level
	// aggregation. 0 (absent) does not split; 2 to 256.
	Split int `yaml:"split,omitempty"`
}

// Edge formats.
const (
	FormatFrames = "frames"
	FormatJSON   = "json"
)

// JSON reports whether the edge carries one JSON record per message.
func (e Edge) JSON() bool { return e.Format == FormatJSON }

// Operator is one logical step of the pipeline, run by a service.
type Operator struct {
	ID      string `yaml:"id"`
	Service string `yaml:"service"`
	Input   string `yaml:"input"`
	Output  string `yaml:"output,omitempty"`
	// Keying is the identity field that keys the operator's state and
	// routes its input to key groups: KeyingID or KeyingKey.
	Keying string `yaml:"keying"`
	// State names the state families (state.families[].name) the operator
	// keeps; empty for a stateless operator. A family belongs to exactly
	// one operator.
	State      []string `yaml:"state"`
	DeadLetter bool     `yaml:"dead_letter"`
	// Before names stateless operators chained into this operator's
	// step, in order: each input record goes through them first, and
	// what the last of them emits is what this operator handles. No edge
	// lies between them, so no frame is written, stored or read for it.
	// A chained operator may key a record into any key group (q7-key
	// keys every bid, read from an ingress partitioned by event ID, by
	// the query's one key), so an operator with a chain that keeps state
	// runs as one instance, owning every key group: a rescale to more is
	// refused, and so is a start under an assignment that splits it. The
	// service provides each by its name, as it provides operators.
	Before []string `yaml:"before,omitempty"`
}

// Uses reports whether the operator keeps the named state family.
func (o Operator) Uses(family string) bool { return slices.Contains(o.State, family) }

// Operator returns the operator with the given id.
func (c *Contract) Operator(id string) (Operator, bool) {
	for _, op := range c.Operators {
		if op.ID == id {
			return op, true
		}
	}
	return Operator{}, false
}

// OperatorIDs lists the IDs of the operators, in the contract's order.
func (c *Contract) OperatorIDs() []string {
	ids := make([]string, len(c.Operators))
	for i, op := range c.Operators {
		ids[i] = op.ID
	}
	return ids
}

// Edge returns the internal edge with the given name.
func (c *Contract) Edge(name string) (Edge, bool) {
	for _, e := range c.Edges {
		if e.Name == name {
			return e, true
		}
	}
	return Edge{}, false
}

// Family returns the state family with the given name.
func (c *Contract) Family(name string) (Family, bool) {
	for _, f := range c.State.Families {
		if f.Name == name {
			return f, true
		}
	}
	return Family{}, false
}

// EdgeSubject returns the subject of partition p of an internal edge:
// weir.<pipeline>.<edge>.<p>.
func (c *Contract) EdgeSubject(edge string, p int) string {
	return fmt.Sprintf("weir.%s.%s.%d", c.Pipeline, edge, p)
}

// Validate returns an *Invalid listing every problem Lint finds, or nil.
func (c *Contract) Validate() error {
	if ps := c.Lint(); len(ps) > 0 {
		return &Invalid{Problems: ps}
	}
	return nil
}

// Canonical returns the contract re-marshalled in a canonical form: fields
// in declaration order, defaults applied, durations in their shortest
// form, synonyms resolved, comments and layout dropped. Two files that
// state the same contract have the same canonical form — one writing a
// field out, the other relying on its default, too.
func (c *Contract) Canonical() []byte {
	b, err := yaml.Marshal(c.canonical())
	if err != nil {
		// Only plain strings, integers, booleans and Durations are
		// marshalled: failure here is a bug in this package.
		panic(fmt.Sprintf("contracts: marshal canonical contract: %v", err))
	}
	return b
}

func (c *Contract) canonical() *Contract {
	cc := *c
	if cc.Time.OnFuture == OnFutureReject {
		cc.Time.OnFuture = OnFutureDeadLetter
	}
	// One stream is the ingress as it was before it could be several: a
	// contract saying so is the one that does not.
	if cc.Ingress.Streams == 1 {
		cc.Ingress.Streams = 0
	}
	return &cc
}

// Fingerprint returns the SHA-256 of the canonical form, in hex. Each
// instance names it in its registration (weir status shows it) and every
// dead letter carries it, so that a reader can tell which contract a
// process ran; nothing refuses a service whose fingerprint differs from
// another's.
func (c *Contract) Fingerprint() string {
	sum := sha256.Sum256(c.Canonical())
	return hex.EncodeToString(sum[:])
}

// ErrDuration is wrapped by every error ParseDuration returns.
var ErrDuration = errors.New("contracts: bad duration")

// Duration is a time.Duration that reads and writes as a duration string in
// a contract file ("5s", "26h", "7d").
type Duration struct{ time.Duration }

// D returns the duration as a time.Duration.
func (d Duration) D() time.Duration { return d.Duration }

// String returns the shortest spelling of d: "26h" rather than "26h0m0s".
func (d Duration) String() string {
	s := d.Duration.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// MarshalYAML writes d as its shortest duration string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// UnmarshalYAML reads a duration string; see ParseDuration.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("%w: want a duration string like 5s", ErrDuration)
	}
	v, err := ParseDuration(n.Value)
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// ParseDuration parses a contract duration: a Go duration string ("90s",
// "1h30m", "5ms", "0") optionally led by a whole number of days ("7d",
// "1d12h"). A day is 24 hours. Negative durations are refused: no contract
// field is negative.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("%w: empty", ErrDuration)
	}
	if strings.HasPrefix(s, "-") {
		return 0, fmt.Errorf("%w: %q is negative", ErrDuration, s)
	}
	var days time.Duration
	if i := strings.IndexByte(s, 'd'); i >= 0 {
		n, err := strconv.ParseInt(strings.TrimPrefix(s[:i], "+"), 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%w: %q: days must be a whole number, like 7d or 1d12h", ErrDuration, s)
		}
		if n > int64(math.MaxInt64/(24*time.Hour)) {
			return 0, fmt.Errorf("%w: %q is too long", ErrDuration, s)
		}
		days = time.Duration(n) * 24 * time.Hour
		s = s[i+1:]
		if s == "" {
			return days, nil
		}
		if strings.HasPrefix(s, "-") || strings.HasPrefix(s, "+") {
			return 0, fmt.Errorf("%w: sign after the days", ErrDuration)
		}
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		if _, nerr := strconv.ParseFloat(s, 64); nerr == nil && s != "0" {
			return 0, fmt.Errorf("%w: %q has no unit", ErrDuration, s)
		}
		return 0, fmt.Errorf("%w: %q", ErrDuration, s)
	}
	if v > math.MaxInt64-days {
		return 0, fmt.Errorf("%w: too long", ErrDuration)
	}
	return days + v, nil
}
