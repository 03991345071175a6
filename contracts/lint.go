package contracts

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Lint returns every problem of the contract, in file order: missing
// fields, values out of range, and contradictions between decisions. A
// contract is usable only if Lint returns nothing.
func (c *Contract) Lint() []Problem { return c.LintAt(time.Now()) }

// LintAt is Lint with now as the clock, which only the replay horizon of a
// dropped schema decoder reads (identity.schema.older[i].dropped).
func (c *Contract) LintAt(now time.Time) []Problem {
	l := &linter{c: c, bad: map[string]bool{}, now: now}
	l.header()
	l.ingress()
	l.identity()
	l.time()
	l.progress()
	l.emission()
	l.state()
	l.recovery()
	l.sink()
	l.overload()
	l.edges()
	l.operators()
	l.security()
	l.deletion()
	l.contradictions()
	l.unimplemented()
	sortProblems(l.problems)
	return l.problems
}

// linter collects problems. Fields reported once are marked bad so that
// rules relating several fields stay quiet about a field already reported
// missing or malformed.
type linter struct {
	c        *Contract
	problems []Problem
	bad      map[string]bool
	now      time.Time
}

func (l *linter) add(field, why, fix string) {
	l.bad[field] = true
	if l.c.Defaulted(field) {
		why += " (the file leaves " + field + " out: this is its default)"
	}
	l.problems = append(l.problems, Problem{File: l.c.File, Line: l.line(field), Field: field, Why: why, Fix: fix})
}

// line returns the line of field, or of its nearest enclosing field present
// in the file when field itself is missing or defaulted.
func (l *linter) line(field string) int {
	if l.c.index == nil {
		return 0
	}
	for p := field; ; p = parent(p) {
		if pos, ok := l.c.index[p]; ok && !pos.defaulted {
			return pos.line
		}
		if p == "" {
			return 1
		}
	}
}

// parent returns the enclosing path: state.families[0].ttl ->
// state.families[0] -> state.families -> state -> "".
func parent(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i < 0 {
		return ""
	}
	return p[:i]
}

func last(p string) string {
	if i := strings.LastIndexByte(p, '.'); i >= 0 {
		return p[i+1:]
	}
	return p
}

// has reports whether field is present with a value, stated or defaulted.
// A contract built in Go has every field.
func (l *linter) has(field string) bool { return l.c.has(field) }

// ok reports whether none of the fields, nor any field enclosing them, has
// been reported.
func (l *linter) ok(fields ...string) bool {
	for _, f := range fields {
		for p := f; p != ""; p = parent(p) {
			if l.bad[p] {
				return false
			}
		}
	}
	return true
}

// need reports a missing field; example is a line that would declare it.
func (l *linter) need(field, example string) bool {
	if l.has(field) {
		return true
	}
	fix := fmt.Sprintf("add `%s`", example)
	if strings.HasSuffix(example, ":") {
		fix = fmt.Sprintf("add the `%s` section; contracts/README.md lists its fields", example)
	}
	l.add(field, "missing, and it has no default: the contract must state this decision", fix)
	return false
}

func (l *linter) enum(field, v string, allowed ...string) bool {
	if !l.need(field, last(field)+": "+allowed[0]) {
		return false
	}
	if slices.Contains(allowed, v) {
		return true
	}
	l.add(field, fmt.Sprintf("%q is not one of %s", v, strings.Join(allowed, ", ")),
		fmt.Sprintf("set %s to one of %s", last(field), strings.Join(allowed, ", ")))
	return false
}

func (l *linter) atLeast(field string, v, min int, example string) bool {
	if !l.need(field, example) {
		return false
	}
	if v >= min {
		return true
	}
	l.add(field, fmt.Sprintf("%d is less than %d", v, min), fmt.Sprintf("set it to %d or more, e.g. `%s`", min, example))
	return false
}

// duration checks a duration field; positive also refuses 0s.
func (l *linter) duration(field string, d Duration, positive bool, example string) bool {
	if !l.need(field, example) {
		return false
	}
	switch {
	case d.Duration < 0:
		l.add(field, fmt.Sprintf("%s is negative", d), fmt.Sprintf("use a non-negative duration, e.g. `%s`", example))
		return false
	case positive && d.Duration == 0:
		l.add(field, "must be longer than 0s", fmt.Sprintf("set a positive duration, e.g. `%s`", example))
		return false
	}
	return true
}

// name checks an identifier: lowercase letters, digits and '-'. Names end
// up in subjects, stream names, state keys and consumer names.
func (l *linter) name(field, v, example string) bool {
	if !l.need(field, example) {
		return false
	}
	if validName(v) {
		return true
	}
	l.add(field, fmt.Sprintf("%q is not a valid name: names appear in subjects, stream and consumer names and state keys", v),
		"use only lowercase letters, digits and '-', e.g. `"+example+"`")
	return false
}

// ValidName reports whether s may name a pipeline, an edge or an operator:
// lowercase letters, digits and '-'.
func ValidName(s string) bool { return validName(s) }

func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

func (l *linter) header() {
	l.name("pipeline", l.c.Pipeline, "pipeline: nexmark")
	if l.need("version", fmt.Sprintf("version: %d", FormatVersion)) && l.c.Version != FormatVersion {
		l.add("version", fmt.Sprintf("contract format version %d is not supported; this weir reads version %d", l.c.Version, FormatVersion),
			fmt.Sprintf("set `version: %d` and check the file against contracts/README.md", FormatVersion))
	}
}

func (l *linter) ingress() {
	if !l.need("ingress", "ingress:") {
		return
	}
	in := l.c.Ingress
	if l.need("ingress.stream", "stream: NEXMARK") && (in.Stream == "" || strings.ContainsAny(in.Stream, " \t\r\n.*>/\\")) {
		l.add("ingress.stream", fmt.Sprintf("%q is not a JetStream stream name", in.Stream),
			"use the stream's name, without spaces, '.', '*', '>', '/' or '\\'")
	}
	if l.need("ingress.subject_prefix", "subject_prefix: nexmark.events") {
		l.subjectPrefix(in.SubjectPrefix)
	}
	l.atLeast("ingress.partitions", in.Partitions, 1, "partitions: 4")
	l.duration("ingress.retention", in.Retention, true, "retention: 24h")
	l.enum("ingress.offsets", in.Offsets, OffsetsStreamSequence)
	l.atLeast("ingress.max_message_bytes", in.MaxMessageBytes, 1, "max_message_bytes: 65536")
	// Optional: checked when the file has it, or a contract built in Go
	// sets it.
	if in.DuplicateWindow.Duration != 0 || l.c.index != nil && l.has("ingress.duplicate_window") {
		l.duplicateWindow()
	}
	if in.Streams != 0 || l.c.index != nil && l.has("ingress.streams") {
		l.streams()
	}
}

// streams checks ingress.streams: at least one stream, and no stream
// without a partition.
func (l *linter) streams() {
	in := l.c.Ingress
	const field = "ingress.streams"
	if in.Streams < 1 {
		l.add(field, fmt.Sprintf("%d is less than 1", in.Streams), "set it to 1 or more, e.g. `streams: 4`, or leave it out for one stream")
		return
	}
	if !l.ok("ingress.partitions") {
		return
	}
	if in.Streams > in.Partitions {
		l.add(field, fmt.Sprintf("%d streams for %d partitions would leave streams without a partition (partition p is in stream p mod %d)", in.Streams, in.Partitions, in.Streams),
			fmt.Sprintf("set streams to at most %d (ingress.partitions), or raise the partitions", in.Partitions))
	}
}

// duplicateWindow checks ingress.duplicate_window against what JetStream
// accepts: at least 100 ms, at most the stream's age limit.
func (l *linter) duplicateWindow() {
	in := l.c.Ingress
	const field = "ingress.duplicate_window"
	if !l.duration(field, in.DuplicateWindow, true, "duplicate_window: 20s") {
		return
	}
	switch {
	case in.DuplicateWindow.Duration < 100*time.Millisecond:
		l.add(field, fmt.Sprintf("a duplicate window of %s is shorter than JetStream accepts (100ms)", in.DuplicateWindow),
			"set duplicate_window to at least the time a producer takes to retry, e.g. `duplicate_window: 20s`")
	case l.ok("ingress.retention") && in.DuplicateWindow.Duration > in.Retention.Duration:
		l.add(field, fmt.Sprintf("a duplicate window of %s is longer than the stream keeps messages (ingress.retention %s): JetStream refuses such a stream", in.DuplicateWindow, in.Retention),
			fmt.Sprintf("set duplicate_window to at most %s", in.Retention))
	}
}

func (l *linter) subjectPrefix(s string) {
	const field = "ingress.subject_prefix"
	tokens := strings.Split(s, ".")
	for _, t := range tokens {
		if t == "" || strings.ContainsAny(t, " \t\r\n*>") {
			l.add(field, fmt.Sprintf("%q is not a literal subject: tokens must be non-empty, without spaces or wildcards", s),
				"write the literal prefix; partition p is read from <subject_prefix>.<p>")
			return
		}
	}
	switch {
	case tokens[0] == "weir":
		l.add(field, fmt.Sprintf("%q lies under weir.>, the subjects of weir-owned edges; the ingress stream would overlap them", s),
			"publish the events under a subject prefix of your own, e.g. `nexmark.events`")
	case strings.HasPrefix(tokens[0], "$"):
		l.add(field, fmt.Sprintf("%q is a NATS system subject", s), "publish the events under an ordinary subject prefix")
	}
}

func (l *linter) identity() {
	if !l.need("identity", "identity:") {
		return
	}
	id := l.c.Identity
	l.field("identity.id", id.ID, "id: {from: json, field: id}")
	l.field("identity.key", id.Key, "key: {from: json, field: key}")
	if l.given("identity.producer", id.Producer) {
		l.field("identity.producer", id.Producer, "producer: {from: header, header: Weir-Producer}")
	}
	if l.given("identity.tenant", id.Tenant) {
		l.field("identity.tenant", id.Tenant, "tenant: {from: json, field: tenant}")
	}
	// T1: keys scoped by a tenant no record carries. (Like the ID and
	// the key, a declared tenant is never optional.)
	if l.c.State.TenantScoped && !id.Tenant.Declared() {
		l.add("state.tenant_scoped", "keys are tenant-scoped but identity.tenant does not say where a record's tenant is",
			"add `tenant: {from: json, field: tenant}` to identity, or remove tenant_scoped")
	}
	switch {
	case l.given("identity.event_time", id.EventTime):
		l.field("identity.event_time", id.EventTime, "event_time: {from: json, field: ts, format: unix-ms}")
	case l.c.Time.Domain == DomainEvent:
		l.add("identity.event_time",
			"time.domain is event but identity.event_time does not say where an event's time is, so no event has a time",
			"add `event_time: {from: json, field: ts, format: unix-ms}`, or choose time.domain ingestion or processing")
	}
	// Declared in Go or in the file; a parsed contract given a schema in Go
	// afterwards is refused as missing it: the decoder would read what
	// nobody linted.
	if id.Schema.Declared() || l.c.index != nil && l.has("identity.schema") {
		l.schema()
	}
}

// schema checks versioned decoders (rule I3): each older schema reads its
// own identity fields, versions are distinct, and a decoder is dropped
// only once no record of its schema can be replayed — past the time its
// producers stopped writing it plus the ingress retention.
func (l *linter) schema() {
	s := l.c.Identity.Schema
	l.field("identity.schema.version", s.Version, "version: {from: header, header: Weir-Schema}")
	if l.need("identity.schema.current", `current: "2"`) && s.Current == "" {
		l.add("identity.schema.current", "empty: the identity fields read a schema with a name", `name the schema the identity fields read, e.g. current: "2"`)
	}
	versions := map[string]string{s.Current: "identity.schema.current"}
	for i, o := range s.Older {
		at := fmt.Sprintf("identity.schema.older[%d]", i)
		if !l.need(at+".version", `version: "1"`) {
			continue
		}
		if prev, ok := versions[o.Version]; ok || o.Version == "" {
			l.add(at+".version", fmt.Sprintf("version %q is empty or already declared at %s", o.Version, prev),
				"give each schema its own version")
		}
		versions[o.Version] = at
		l.field(at+".id", o.ID, "id: {from: json, field: id}")
		l.field(at+".key", o.Key, "key: {from: json, field: key}")
		switch cur := l.c.Identity.Producer; {
		case l.given(at+".producer", o.Producer):
			l.field(at+".producer", o.Producer, "producer: {from: header, header: Weir-Producer}")
		case cur.Declared() && !cur.Optional:
			l.add(at+".producer", fmt.Sprintf("identity.producer is required, but schema %q does not say where its producer is: its records would carry none", o.Version),
				"add `producer:` to the older schema, or make identity.producer optional")
		}
		switch {
		case l.given(at+".event_time", o.EventTime):
			l.field(at+".event_time", o.EventTime, "event_time: {from: json, field: ts, format: unix-ms}")
		case l.c.Time.Domain == DomainEvent:
			l.add(at+".event_time", fmt.Sprintf("time.domain is event but schema %q does not say where its events' time is", o.Version),
				"add `event_time: {from: json, field: ts, format: unix-ms}`")
		}
		horizon, written, err := o.Horizon(l.c.Ingress.Retention.D())
		switch {
		case err != nil:
			l.add(at+".written_until", err.Error(), "write when producers stopped writing the schema, e.g. `written_until: 2026-11-20T00:00:00Z`")
		case o.Dropped && !written:
			l.add(at+".dropped", fmt.Sprintf("schema %q is dropped but written_until does not say when producers stopped writing it, so nobody can tell whether its records are still retained", o.Version),
				"add `written_until:` with the time its last record was written")
		case o.Dropped && l.ok("ingress.retention") && horizon.After(l.now):
			l.add(at+".dropped", fmt.Sprintf("schema %q was written until %s and the ingress keeps records for %s: a replay may read its records until %s, and each would be a dead letter",
				o.Version, o.WrittenUntil, l.c.Ingress.Retention, horizon.UTC().Format(time.RFC3339)),
				fmt.Sprintf("keep its decoder (remove `dropped: true`) until %s", horizon.UTC().Format(time.RFC3339)))
		}
	}
	if s.Unnamed != "" {
		if _, ok := versions[s.Unnamed]; !ok {
			l.add("identity.schema.unnamed", fmt.Sprintf("%q is neither current nor an older version", s.Unnamed),
				"name a declared version, or remove unnamed so that a record naming no schema is a dead letter")
		}
	}
}

// given reports whether an optional identity field is declared.
func (l *linter) given(field string, f Field) bool {
	if l.c.index == nil {
		return f.Declared()
	}
	return l.has(field)
}

func (l *linter) field(path string, f Field, example string) {
	if !l.need(path, example) {
		return
	}
	isTime := last(path) == "event_time"
	if l.enum(path+".from", f.From, FromJSON, FromHeader) {
		want, wantEx, other := path+".field", "field: id", path+".header"
		v, stray := f.Field, f.Header
		if f.From == FromHeader {
			want, wantEx, other = path+".header", "header: Weir-Producer", path+".field"
			v, stray = f.Header, f.Field
		}
		switch {
		case v == "":
			l.add(want, fmt.Sprintf("from %s needs %s to say where the value is", f.From, last(want)),
				fmt.Sprintf("add `%s`", wantEx))
		case f.From == FromJSON && slices.Contains(strings.Split(v, "."), ""):
			l.add(want, fmt.Sprintf("%q is not a dotted JSON path", v), "write the path as names joined by '.', e.g. `bid.auction`")
		case f.From == FromHeader && strings.ContainsAny(v, " \t\r\n:"):
			l.add(want, fmt.Sprintf("%q is not a NATS header name", v), "use a header name without spaces or ':'")
		}
		if stray != "" {
			l.add(other, fmt.Sprintf("%s is set but from is %s, which reads only %s", last(other), f.From, last(want)),
				fmt.Sprintf("remove %s, or change from", last(other)))
		}
	}
	switch {
	case isTime:
		l.enum(path+".format", f.Format, FormatUnixMs, FormatRFC3339)
	case f.Format != "":
		l.add(path+".format", "format applies only to identity.event_time", "remove format")
	}
	if f.Optional && last(path) == "version" {
		l.add(path+".optional", "a record that names no schema is read as identity.schema.unnamed says, or is a dead letter",
			"remove `optional: true`; set identity.schema.unnamed to the version of records that name none")
	} else if f.Optional && last(path) != "producer" {
		l.add(path+".optional",
			fmt.Sprintf("%s cannot be optional: every event needs a deterministic %s (invariant 1)", path, last(path)),
			"remove `optional: true`; events that lack it are dead-lettered with their source coordinate")
	}
}

func (l *linter) time() {
	if !l.need("time", "time:") {
		return
	}
	t := l.c.Time
	l.enum("time.domain", t.Domain, DomainEvent, DomainIngestion, DomainProcessing)
	l.enum("time.trust", t.Trust, TrustProducer, TrustBroker)
	l.duration("time.future_skew", t.FutureSkew, false, "future_skew: 5s")
	l.enum("time.on_future", t.OnFuture, OnFutureDeadLetter, OnFutureReject, OnFutureClamp, OnFutureSideOutput)
}

func (l *linter) progress() {
	if !l.need("progress", "progress:") {
		return
	}
	p := l.c.Progress
	l.enum("progress.watermark", p.Watermark, WatermarkBounded, WatermarkSource, WatermarkNone)
	l.duration("progress.out_of_orderness", p.OutOfOrderness, false, "out_of_orderness: 2s")
	l.duration("progress.idle_timeout", p.IdleTimeout, false, "idle_timeout: 10s")
	l.duration("progress.alignment_drift", p.AlignmentDrift, false, "alignment_drift: 30s")
}

func (l *linter) emission() {
	if !l.need("emission", "emission:") {
		return
	}
	e := l.c.Emission
	l.enum("emission.mode", e.Mode, ModeAppend, ModeUpsert, ModeRetract)
	l.enum("emission.accumulation", e.Accumulation, AccumulationDiscarding, AccumulationAccumulating, AccumulationRetracting)
	if e.Window.Declared() || l.c.index != nil && l.has("emission.window") {
		l.window()
	}
	if l.need("emission.triggers", "triggers: {on_time: true}") {
		tr := e.Triggers
		if l.has("emission.triggers.early.every") {
			l.duration("emission.triggers.early.every", tr.Early.Every, false, "every: 1s")
		}
		if tr.Early.Count < 0 {
			l.add("emission.triggers.early.count", fmt.Sprintf("%d is negative", tr.Early.Count),
				"set a count of elements per early pane, or 0 for none")
		}
		l.need("emission.triggers.on_time", "on_time: true")
		if l.has("emission.triggers.late.every") {
			l.duration("emission.triggers.late.every", tr.Late.Every, false, "every: 1m")
		}
	}
	l.duration("emission.allowed_lateness", e.AllowedLateness, false, "allowed_lateness: 0s")
}

// window checks the window shape (rule W1): a kind, and the durations
// that kind has — positive, in whole milliseconds — and no others.
func (l *linter) window() {
	const at = "emission.window"
	w := l.c.Emission.Window
	if !l.enum(at+".kind", w.Kind, WindowTumbling, WindowSliding, WindowSession, WindowGlobal) {
		return
	}
	length := func(field string, d Duration, example string) bool {
		if !l.duration(field, d, true, example) {
			return false
		}
		if d.Duration%time.Millisecond != 0 {
			l.add(field, fmt.Sprintf("%s is not a whole number of milliseconds: windows see event time in milliseconds", d),
				"round it to milliseconds")
			return false
		}
		return true
	}
	unused := func(field string, d Duration) {
		if d.Duration != 0 {
			l.add(field, fmt.Sprintf("a %s window has no %s", w.Kind, last(field)), "remove "+last(field))
		}
	}
	switch w.Kind {
	case WindowTumbling:
		length(at+".size", w.Size, "size: 10s")
		unused(at+".slide", w.Slide)
		unused(at+".gap", w.Gap)
	case WindowSliding:
		size, slide := length(at+".size", w.Size, "size: 10s"), length(at+".slide", w.Slide, "slide: 2s")
		switch {
		case !size || !slide:
		case w.Size.Duration%w.Slide.Duration != 0:
			l.add(at+".slide", fmt.Sprintf("size %s is not a multiple of slide %s: windows starting every slide would not tile event time evenly", w.Size, w.Slide),
				"choose a slide that divides the size, e.g. `slide: 2s` for `size: 10s`")
		case w.Size.Duration/w.Slide.Duration > MaxWindowsPerElement:
			l.add(at+".slide", fmt.Sprintf("size %s over slide %s puts every element in %d windows, more than %d", w.Size, w.Slide, w.Size.Duration/w.Slide.Duration, MaxWindowsPerElement),
				"slide further, or use a shorter size")
		}
		unused(at+".gap", w.Gap)
	case WindowSession:
		length(at+".gap", w.Gap, "gap: 10s")
		unused(at+".size", w.Size)
		unused(at+".slide", w.Slide)
	case WindowGlobal:
		unused(at+".size", w.Size)
		unused(at+".slide", w.Slide)
		unused(at+".gap", w.Gap)
	}
}

func (l *linter) state() {
	if !l.need("state", "state:") {
		return
	}
	s := l.c.State
	if l.atLeast("state.key_groups", s.KeyGroups, 1, "key_groups: 256") && s.KeyGroups > MaxKeyGroups {
		l.add("state.key_groups", fmt.Sprintf("%d is more than %d: state keys store the key group in two bytes", s.KeyGroups, MaxKeyGroups),
			fmt.Sprintf("use at most %d key groups", MaxKeyGroups))
	}
	if !l.need("state.families", "families: []") {
		return
	}
	names := map[string]int{}
	for i, f := range s.Families {
		p := fmt.Sprintf("state.families[%d]", i)
		if l.name(p+".name", f.Name, "name: seen") {
			if j, dup := names[f.Name]; dup {
				l.add(p+".name", fmt.Sprintf("family %q is declared twice (also state.families[%d])", f.Name, j),
					"give each state family its own name")
			}
			names[f.Name] = i
		}
		l.enum(p+".kind", f.Kind, KindValue, KindMap, KindList)
		if f.Role != "" && f.Role != RoleDedup {
			l.add(p+".role", fmt.Sprintf("%q is not a role; the only role is dedup", f.Role), "remove role, or set `role: dedup`")
		}
		if l.has(p + ".ttl") {
			l.duration(p+".ttl", f.TTL, false, "ttl: 26h")
		}
		l.enum(p+".bound", f.Bound, BoundTTL, BoundWindow)
		if l.need(p+".max_keys", "max_keys: 1000000") && f.MaxKeys <= 0 {
			l.add(p+".max_keys", fmt.Sprintf("max_keys %d declares no bound on the family's cardinality (invariant 5)", f.MaxKeys),
				"declare the largest number of keys the business allows, e.g. `max_keys: 1000000`")
		}
		l.enum(p+".on_limit", f.OnLimit, OnLimitFail, OnLimitDeadLetter)
	}
}

func (l *linter) recovery() {
	if !l.need("recovery", "recovery:") {
		return
	}
	r := l.c.Recovery
	l.duration("recovery.checkpoint_interval", r.CheckpointInterval, false, "checkpoint_interval: 10s")
	l.enum("recovery.mode", r.Mode, CheckpointAligned, CheckpointUnaligned)
	l.duration("recovery.max_recovery_time", r.MaxRecoveryTime, true, "max_recovery_time: 5m")
	switch {
	case r.RetainedCheckpoints < 0:
		l.add("recovery.retained_checkpoints", fmt.Sprintf("retained_checkpoints %d: a pipeline keeps at least its latest checkpoint", r.RetainedCheckpoints),
			fmt.Sprintf("set retained_checkpoints to 1 or more, or leave it out for %d", DefaultRetainedCheckpoints))
	case r.RetainedCheckpoints > 0 && r.CheckpointInterval.Duration == 0 && l.ok("recovery.checkpoint_interval"):
		l.add("recovery.retained_checkpoints", fmt.Sprintf("retained_checkpoints %d keeps checkpoints, and checkpoint_interval 0s takes none, so the field would be ignored", r.RetainedCheckpoints),
			"remove retained_checkpoints, or set checkpoint_interval")
	}
}

func (l *linter) sink() {
	if !l.need("sink", "sink:") {
		return
	}
	l.enum("sink.effect", l.c.Sink.Effect, EffectTransactional, EffectVersionedUpsert, EffectOutbox, EffectAtLeastOnce)
	l.enum("sink.accepts", l.c.Sink.Accepts, ModeAppend, ModeUpsert, ModeRetract)
	if l.c.Sink.ProviderKeys != "" {
		l.enum("sink.provider_keys", l.c.Sink.ProviderKeys, ProviderKeysHonoured, ProviderKeysIgnored)
	}
}

func (l *linter) overload() {
	if !l.need("overload", "overload:") {
		return
	}
	o := l.c.Overload
	l.enum("overload.policy", o.Policy, PolicyBlock, PolicyShed, PolicyAdmission)
	l.atLeast("overload.fetch_batch", o.FetchBatch, 1, "fetch_batch: 256")
	l.atLeast("overload.max_ack_pending", o.MaxAckPending, 1, "max_ack_pending: 1024")
	l.atLeast("overload.frame_max_records", o.FrameMaxRecords, 1, "frame_max_records: 500")
	l.atLeast("overload.frame_max_bytes", o.FrameMaxBytes, 1, "frame_max_bytes: 1048576")
	l.duration("overload.frame_linger", o.FrameLinger, false, "frame_linger: 5ms")
	l.atLeast("overload.max_buffered_frames", o.MaxBufferedFrames, 1, "max_buffered_frames: 64")
}

func (l *linter) edges() {
	if !l.need("edges", "edges:") {
		return
	}
	if len(l.c.Edges) == 0 {
		l.add("edges", "no internal edges: every operator writes its output to an edge, a weir-owned stream",
			"declare the edges the operators write, e.g. `- {name: deduped, partitions: 4, retention: 24h}`")
	}
	names := map[string]int{}
	for i, e := range l.c.Edges {
		p := fmt.Sprintf("edges[%d]", i)
		if l.name(p+".name", e.Name, "name: deduped") {
			j, dup := names[e.Name]
			switch {
			case e.Name == InputIngress:
				l.add(p+".name", "ingress is reserved: an operator input named ingress reads the ingress stream",
					"choose another edge name")
			case dup:
				l.add(p+".name", fmt.Sprintf("edge %q is declared twice (also edges[%d])", e.Name, j), "give each edge its own name")
			}
			names[e.Name] = i
		}
		l.atLeast(p+".partitions", e.Partitions, 1, "partitions: 4")
		l.duration(p+".retention", e.Retention, true, "retention: 24h")
		if e.Format != "" && e.Format != FormatFrames && e.Format != FormatJSON {
			l.add(p+".format", fmt.Sprintf("format %q is neither frames nor json", e.Format),
				"use frames for an edge operators read, json for a result stream people read")
		}
		switch {
		case e.Split == 0:
		case e.Split < 2 || e.Split > MaxSplit:
			l.add(p+".split", fmt.Sprintf("split %d is not between 2 and %d ways", e.Split, MaxSplit),
				"split a hot key a few ways more than the instances that share it, e.g. split: 8, or leave split out")
		case e.JSON():
			l.add(p+".split", "a json edge is a result stream no operator reads: there is nothing to split for",
				"split the frames edge into the aggregation instead")
		}
	}
}

// MaxSplit bounds edges[].split: the salts keygroup.Split spreads a key
// over.
const MaxSplit = 256

func (l *linter) operators() {
	if !l.need("operators", "operators:") {
		return
	}
	if len(l.c.Operators) == 0 {
		l.add("operators", "no operators: the pipeline does nothing",
			"declare at least the operator that reads the ingress, e.g. `- {id: dedup, service: dedup, input: ingress, output: deduped, keying: id, state: [seen], dead_letter: true}`")
	}
	ids := map[string]int{}
	for i, op := range l.c.Operators {
		p := fmt.Sprintf("operators[%d]", i)
		if l.name(p+".id", op.ID, "id: dedup") {
			if j, dup := ids[op.ID]; dup {
				l.add(p+".id", fmt.Sprintf("operator id %q is used twice (also operators[%d]); ids key state, checkpoints and savepoints", op.ID, j),
					"give each operator its own stable id")
			}
			ids[op.ID] = i
		}
		l.name(p+".service", op.Service, "service: dedup")
		if l.need(p+".input", "input: ingress") && op.Input == "" {
			l.add(p+".input", "empty input", "set input to ingress or to the name of an edge")
		}
		l.enum(p+".keying", op.Keying, KeyingID, KeyingKey)
		if l.need(p+".state", "state: []") {
			listed := map[string]int{}
			for j, name := range op.State {
				q := fmt.Sprintf("%s.state[%d]", p, j)
				if k, dup := listed[name]; dup {
					l.add(q, fmt.Sprintf("family %q is listed twice (also %s.state[%d])", name, p, k),
						"list each family the operator keeps once")
					continue
				}
				listed[name] = j
			}
		}
		l.need(p+".dead_letter", "dead_letter: true")
	}
	l.chains(ids)
}

// chains checks operators[].before: each chained operator named once in
// the pipeline, by a name no operator has, and never before an operator
// whose input splits hot keys: the two-level aggregation (rule H1) is
// argued for records as the split edge's writer routed them, and a chain
// would re-key them after it.
func (l *linter) chains(ids map[string]int) {
	chained := map[string]string{}
	for i, op := range l.c.Operators {
		for j, name := range op.Before {
			f := fmt.Sprintf("operators[%d].before[%d]", i, j)
			switch where, dup := chained[name]; {
			case !validName(name):
				l.add(f, fmt.Sprintf("%q is not a valid name: a chained operator is named like an operator, in logs, metrics and dead letters", name),
					"use only lowercase letters, digits and '-', e.g. `before: [q7-key]`")
			case dup:
				l.add(f, fmt.Sprintf("operator %q is chained twice (also %s)", name, where),
					"chain each stateless operator into one operator's step")
			default:
				if _, isOp := ids[name]; isOp {
					l.add(f, fmt.Sprintf("%q is an operator of its own (operators[%d]): an operator either runs in its own step, reading an edge, or is chained into another's", name, ids[name]),
						"remove it from operators, with the edge between them, or from before")
				}
			}
			chained[name] = f
		}
		if e, ok := l.c.Edge(op.Input); ok && e.Split > 0 && len(op.Before) > 0 {
			l.add(fmt.Sprintf("operators[%d].before", i), fmt.Sprintf("operator %q reads edge %q, which splits hot keys (split %d): the parts are merged as the edge's writer salted and routed them, and a chain would re-key them after it", op.ID, e.Name, e.Split),
				"chain the operators before the splitting edge's writer, or do not split it")
		}
	}
}

// security checks the optional security section: each sensitive field
// named once, with a redaction weir applies; the keys' redaction; and no
// promise weir cannot keep (X1, X2).
func (l *linter) security() {
	sec := l.c.Security
	if sec.Keys != "" {
		l.enum("security.keys", sec.Keys, RedactClear, RedactHash, RedactOmit)
	}
	// A sensitive field matches names as encoding/json does, whatever
	// their case (internal/redact): Card is card.
	var seen []string
	id, key := l.c.Identity.ID, l.c.Identity.Key
	for i, f := range sec.Sensitive {
		p := fmt.Sprintf("security.sensitive[%d]", i)
		switch {
		case f.Field == "" || strings.HasPrefix(f.Field, ".") || strings.HasSuffix(f.Field, ".") || strings.Contains(f.Field, ".."):
			l.add(p+".field", fmt.Sprintf("%q is not a JSON field of the payload", f.Field), "field: card, or card.number for a nested one")
		case slices.ContainsFunc(seen, func(s string) bool { return strings.EqualFold(s, f.Field) }):
			l.add(p+".field", fmt.Sprintf("%s is declared twice (field names match whatever their case)", f.Field), "declare each field once")
		case id.From == FromJSON && strings.EqualFold(id.Field, f.Field):
			// X1: IDs travel in message and frame IDs, dead-letter
			// headers and trace attributes, which weir does not redact.
			l.add(p+".field", fmt.Sprintf("%s is the event ID (identity.id), which travels in message IDs, frame IDs, dead letters and traces as it is", f.Field),
				"give events a surrogate ID that reveals nothing, and declare the sensitive field apart from it")
		case key.From == FromJSON && strings.EqualFold(key.Field, f.Field) && sec.Keys != RedactHash && sec.Keys != RedactOmit:
			// X2: the key field is the key; its redaction is security.keys'.
			l.add(p+".field", fmt.Sprintf("%s is the key (identity.key) and security.keys leaves keys in the clear", f.Field),
				"set security.keys to hash or omit")
		}
		seen = append(seen, f.Field)
		l.enum(p+".redact", f.Redact, RedactHash, RedactOmit)
	}
}

// deletion checks the optional deletion policy: a deadline, which wins
// between an erasure and a replay (D1), and every place weir keeps
// records aging them out by the deadline (D2, D3).
func (l *linter) deletion() {
	d := l.c.Deletion
	if !d.Declared() && (l.c.index == nil || !l.has("deletion")) {
		return
	}
	// D1: erasure and replay conflict; the contract must say which wins.
	okReplay := l.enum("deletion.replay", d.Replay, ErasureWins, ReplayWins)
	if !l.duration("deletion.within", d.Within, true, "within: 720h") || !okReplay {
		return
	}
	// D2: the retained log keeps an erased key's records — the ingress
	// and its dead letters, every edge and view — until they age out. The
	// longest keeper is named.
	field, what, kept := "ingress.retention", "the ingress stream and the dead-letter stream", l.c.Ingress.Retention
	for i, e := range l.c.Edges {
		if f := fmt.Sprintf("edges[%d].retention", i); l.ok(f) && e.Retention.Duration > kept.Duration {
			field, what, kept = f, fmt.Sprintf("edge %q", e.Name), e.Retention
		}
	}
	if l.ok(field) && kept.Duration > d.Within.Duration {
		l.add("deletion.within", fmt.Sprintf("%s keeps a key's records for %s (%s), past the erasure deadline of %s", what, kept, field, d.Within),
			fmt.Sprintf("set deletion.within to at least %s, or shorten %s", kept, field))
		return
	}
	// D4: what erasure does not reach must not be promised. A
	// transactional sink's results held for their checkpoint are not
	// erased with the key's state, and are published after the erasure.
	// An outbox's intents are keyed by their idempotency keys; weir erase
	// finds them — on the outbox, among the dispatcher's dead letters and
	// outcomes — by the erasure names each carries, those of the key whose
	// state caused it (internal/erasure Names): its writer must key its state
	// by key, or the intents name an event's ID and no key.
	if l.ok("sink.effect") && l.c.Sink.Effect == EffectTransactional {
		l.add("deletion", "sink.effect transactional keeps records erasure does not reach yet: the results held for their checkpoint are not erased with the key's state, and are published after the erasure",
			"remove the deletion section, or use sink.effect outbox, versioned-upsert or at-least-once")
		return
	}
	if l.ok("sink.effect") && l.c.Sink.Effect == EffectOutbox {
		for i, op := range l.c.Operators {
			e, ok := l.c.Edge(op.Output)
			if f := fmt.Sprintf("operators[%d].keying", i); ok && e.JSON() && l.ok(f) && op.Keying != KeyingKey {
				l.add(f, fmt.Sprintf("operator %q writes the outbox keyed by %s: its intents name no key, and an erasure (deletion) could not find them, nor the dispatcher's outcomes of them", op.ID, op.Keying),
					"key the outbox's writer by key (keying: key), or remove the deletion section")
				return
			}
		}
	}
	// D3: a completed checkpoint holds state until retained_checkpoints
	// newer ones have completed: about that many intervals, plus the one
	// under way.
	r := l.c.Recovery
	if l.ok("recovery.checkpoint_interval") {
		keep := r.RetainedCheckpoints
		if keep == 0 {
			keep = DefaultRetainedCheckpoints
		}
		held := time.Duration(keep+1) * r.CheckpointInterval.Duration
		if held > d.Within.Duration {
			l.add("deletion.within", fmt.Sprintf("checkpoints hold a key's state until %d newer ones complete, about %s at checkpoint_interval %s, past the erasure deadline of %s", keep, Duration{held}, r.CheckpointInterval, d.Within),
				fmt.Sprintf("set deletion.within to at least %s, or keep fewer checkpoints", Duration{held}))
		}
	}
}
