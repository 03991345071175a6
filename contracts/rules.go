package contracts

import (
	"fmt"
	"slices"
	"strings"

	"github.com/weirflow/weir/internal/capacity"
)

// contradictions runs the rules that relate decisions to each other. Each
// rule stays quiet when a field it reads was already reported, so a single
// mistake yields a single problem. contracts/README.md explains every rule.
func (l *linter) contradictions() {
	l.emissionRules()
	l.sinkRules()
	l.timeRules()
	l.progressRules()
	l.stateRules()
	l.windowRules()
	l.ownershipRules()
	l.retentionRules()
	l.overloadRules()
	l.admissionRules()
	l.graphRules()
	l.splitRules()
	l.capacityRules()
}

// MaxServerPayload is the largest max_payload a NATS server accepts in its
// configuration: no message, and so no frame, can be larger. A service
// also refuses to start when frames would exceed the max_payload of the
// server it connects to.
const MaxServerPayload = 64 << 20

// Implemented lists, for each contract field whose values the runtime
// implements only in part, the values it implements. Lint refuses the
// others — after every other rule, so a contract that contradicts itself
// hears about that first — and stream.New, which lints, refuses to start.
var Implemented = map[string][]string{
	"overload.policy": {PolicyBlock, PolicyAdmission, PolicyShed},
}

// unimplemented reports a declared value this weir does not implement: a
// contract must not promise what the runtime does not do.
func (l *linter) unimplemented() {
	const policy = "overload.policy"
	if l.ok(policy) && !slices.Contains(Implemented[policy], l.c.Overload.Policy) {
		l.add(policy, fmt.Sprintf("overload policy %s is not implemented by this weir: an operator that cannot keep up stops fetching, and the slowdown reaches the source as lag (block), or producers are refused beyond a lag (admission); nothing is shed", l.c.Overload.Policy),
			"declare `policy: block`, or `policy: admission` with max_lag")
	}
}

// admissionRules: admission and shed need their bound, and only they have
// one; shed needs its predicate, and only shed has one.
func (l *linter) admissionRules() {
	o := l.c.Overload
	if !l.ok("overload.policy", "overload.max_lag") {
		return
	}
	bounded := o.Policy == PolicyAdmission || o.Policy == PolicyShed
	switch {
	case bounded && o.MaxLag < 1:
		l.add("overload.max_lag", fmt.Sprintf("policy %s acts once an operator reading the ingress is behind by more than max_lag records, and max_lag %d sets no bound", o.Policy, o.MaxLag),
			"set max_lag, e.g. the records that arrive in a tenth of max_recovery_time at the peak rate (weir capacity computes the catch-up time of a backlog)")
	case !bounded && o.MaxLag != 0:
		l.add("overload.max_lag", fmt.Sprintf("max_lag %d bounds the lag beyond which policy admission refuses producers or shed drops optional records, and policy %s does neither, so the field would be ignored", o.MaxLag, o.Policy),
			"remove max_lag, or declare `policy: admission` or `policy: shed`")
	}
	switch {
	case o.Policy == PolicyShed && (o.Shed.Field == "" || len(o.Shed.Values) == 0):
		l.add("overload.shed", "policy shed drops the records the contract marks optional when the operator falls behind, and no shed predicate (field and values) marks any",
			"declare `shed: {field: kind, values: [person]}`: records whose JSON field has one of the values are optional")
	case o.Policy != PolicyShed && o.Shed.Declared():
		l.add("overload.shed", fmt.Sprintf("shed marks records optional for policy shed, and policy %s drops nothing, so the field would be ignored", o.Policy),
			"remove shed, or declare `policy: shed`")
	}
}

// panes describes why a window can emit more than one pane, or returns ""
// when it emits at most one.
func (l *linter) panes() string {
	e := l.c.Emission
	var why []string
	if e.Triggers.Early.Fires() {
		why = append(why, "early triggers")
	}
	if e.Triggers.Late.Fires() {
		why = append(why, "late triggers")
	}
	if e.AllowedLateness.Duration > 0 {
		why = append(why, "allowed_lateness "+e.AllowedLateness.String())
	}
	return strings.Join(why, " and ")
}

// canApply says which sink.accepts values can apply each emission.mode.
func canApply(mode, accepts string) bool {
	switch mode {
	case ModeAppend:
		return accepts == ModeAppend
	case ModeUpsert:
		return accepts == ModeUpsert || accepts == ModeRetract
	case ModeRetract:
		return accepts == ModeRetract
	}
	return false
}

func (l *linter) emissionRules() {
	e, s := l.c.Emission, l.c.Sink
	const acc, mode, accepts = "emission.accumulation", "emission.mode", "sink.accepts"
	panes := l.panes()
	if l.ok(acc, accepts, "emission.triggers", "emission.allowed_lateness") && panes != "" {
		switch {
		case e.Accumulation == AccumulationAccumulating && s.Accepts == ModeAppend:
			l.add(acc, fmt.Sprintf("accumulating panes into an append-only sink: %s let a window emit several panes, each repeating the elements of the ones before, and sink.accepts append keeps them all, so every element is counted once per pane", panes),
				"use accumulation: discarding, or emit upserts (emission.mode upsert into a sink that accepts upsert), or drop the early/late triggers and set allowed_lateness: 0s")
		case e.Accumulation == AccumulationDiscarding && e.Mode == ModeUpsert && l.ok(mode):
			l.add(acc, fmt.Sprintf("discarding panes as upserts: %s let a window emit several panes, each holding only the elements since the last, and each upsert overwrites the previous pane, so the sink keeps only the last fragment", panes),
				"use accumulation: accumulating with emission.mode upsert, or emission.mode append into an append sink")
		}
	}
	if l.ok(acc, accepts) && e.Accumulation == AccumulationRetracting && s.Accepts != ModeRetract {
		l.add(acc, fmt.Sprintf("retracting panes retract the previous pane before emitting the new one, but sink.accepts %s cannot apply a retraction", s.Accepts),
			"use a sink that accepts retract, or accumulation: accumulating into an upsert sink")
	}
	if l.ok(acc, mode) && e.Accumulation == AccumulationRetracting && e.Mode != ModeRetract {
		l.add(mode, fmt.Sprintf("emission.accumulation retracting emits retractions, which emission.mode %s cannot carry", e.Mode),
			"set emission.mode: retract, or change the accumulation")
	}
	retractsUnapplied := e.Accumulation == AccumulationRetracting && s.Accepts != ModeRetract
	if l.ok(mode, accepts) && !canApply(e.Mode, s.Accepts) && !retractsUnapplied {
		l.add(accepts, fmt.Sprintf("the sink accepts %s but the pipeline emits %s, which it cannot apply (append needs an append sink, upsert an upsert or retract sink, retract a retract sink)", s.Accepts, e.Mode),
			fmt.Sprintf("make emission.mode and sink.accepts agree, e.g. both %s", e.Mode))
	}

	tr := e.Triggers
	const late, lateness = "emission.triggers.late", "emission.allowed_lateness"
	processing := l.c.Time.Domain == DomainProcessing
	if l.ok(late, lateness, "time.domain") && !processing {
		switch {
		case tr.Late.Fires() && e.AllowedLateness.Duration == 0:
			l.add(late, "a late trigger can never fire: with allowed_lateness 0s every late event goes to the late side-output before it reaches window state",
				"set allowed_lateness to how long late events may still update a window, or remove triggers.late")
		case !tr.Late.Fires() && e.AllowedLateness.Duration > 0:
			l.add(lateness, fmt.Sprintf("allowed_lateness %s keeps window state to accept late events, but no late trigger emits them, so accepted late events change results nobody sees", e.AllowedLateness),
				"add a late trigger (`late: {each: true}` or `late: {every: 1m}`), or set allowed_lateness: 0s")
		}
	}
	if l.ok("emission.triggers", "state.families") && !tr.Early.Fires() && !tr.OnTime && !tr.Late.Fires() {
		for i, f := range l.c.State.Families {
			if f.Bound == BoundWindow {
				l.add("emission.triggers", fmt.Sprintf("no trigger fires (on_time false, no early or late trigger), yet state.families[%d] %q holds window state: no window would ever emit", i, f.Name),
					"set `on_time: true`, or declare early or late triggers")
				break
			}
		}
	}
}

func (l *linter) sinkRules() {
	e, s := l.c.Emission, l.c.Sink
	if l.ok("sink.effect", "emission.mode", "sink.accepts") && s.Effect == EffectVersionedUpsert && !(e.Mode == s.Accepts && (e.Mode == ModeUpsert || e.Mode == ModeRetract)) {
		l.add("sink.effect", fmt.Sprintf("a versioned-upsert sink applies keyed upserts (and retractions) guarded by the source version, but emission.mode is %s and sink.accepts is %s", e.Mode, s.Accepts),
			"set emission.mode and sink.accepts both to upsert (or both to retract), or choose another effect")
	}
	if l.ok("sink.effect") && s.Effect == EffectVersionedUpsert {
		// The source version is a window's: a view stores window panes.
		for i, op := range l.c.Operators {
			out, ok := l.c.Edge(op.Output)
			if !ok || !out.JSON() {
				continue
			}
			windowed := false
			for _, f := range l.c.State.Families {
				windowed = windowed || op.Uses(f.Name) && f.Bound == BoundWindow
			}
			if ei := slices.IndexFunc(l.c.Edges, func(e Edge) bool { return e.Name == out.Name }); l.ok("ingress.retention") && out.Retention.Duration < l.c.Ingress.Retention.Duration {
				l.add(fmt.Sprintf("edges[%d].retention", ei), fmt.Sprintf("a versioned view forgets a window %s after its last update (edge %q's retention), sooner than a replay can reach back (ingress.retention %s): a replayed older version of a forgotten window would be applied again", out.Retention, out.Name, l.c.Ingress.Retention),
					fmt.Sprintf("set the edge's retention to at least %s", l.c.Ingress.Retention))
			}
			if !windowed {
				l.add(fmt.Sprintf("operators[%d].output", i), fmt.Sprintf("a versioned-upsert sink keeps each key and window's newest pane by the window's version, and operator %s, which writes result edge %s, keeps no window state (a family with bound: window), so its results carry no version", op.ID, op.Output),
					"write the view from a window operator, or choose another effect")
			}
		}
	}
	if l.ok("sink.effect", "recovery.checkpoint_interval") && (s.Effect == EffectTransactional || s.Effect == EffectOutbox) && l.c.Recovery.CheckpointInterval.Duration == 0 {
		l.add("sink.effect", fmt.Sprintf("sink effect %s releases an epoch's output only when its checkpoint completes, and recovery.checkpoint_interval 0s takes no checkpoints, so nothing would ever be released", s.Effect),
			"set recovery.checkpoint_interval, e.g. 10s, or use an at-least-once sink")
	}
	if l.ok("sink.effect", "sink.max_pending_epochs") {
		holds := s.Effect == EffectTransactional || s.Effect == EffectOutbox
		switch n := s.MaxPendingEpochs; {
		case holds && n < 1:
			l.add("sink.max_pending_epochs", fmt.Sprintf("a sink with effect %s holds each checkpoint epoch's results until the checkpoint completes, and max_pending_epochs %d does not bound how many epochs it may hold before it stops reading input", s.Effect, n),
				"set max_pending_epochs, e.g. 4: with checkpoint_interval 10s an operator then holds at most about 40s of results while checkpoints do not complete")
		case !holds && n != 0:
			l.add("sink.max_pending_epochs", fmt.Sprintf("max_pending_epochs %d bounds the held epochs of a transactional or outbox sink, and sink effect %s holds none, so the field would be ignored", n, s.Effect),
				"remove max_pending_epochs, or declare effect: transactional")
		}
	}
	if l.ok("sink.effect", "sink.provider_keys") && s.ProviderKeys != "" && s.Effect != EffectOutbox {
		l.add("sink.provider_keys", fmt.Sprintf("provider_keys %s says whether an outbox's provider honours idempotency keys, and sink effect %s has no outbox and no provider, so the field would be ignored", s.ProviderKeys, s.Effect),
			"remove provider_keys, or declare effect: outbox")
	}
}

func (l *linter) timeRules() {
	t, p, e := l.c.Time, l.c.Progress, l.c.Emission
	if !l.ok("time.domain") {
		return
	}
	switch t.Domain {
	case DomainProcessing:
		if l.ok("progress.watermark") && p.Watermark != WatermarkNone {
			l.add("progress.watermark", fmt.Sprintf("time.domain processing has no event time to track, yet the watermark is %s", p.Watermark),
				"set watermark: none, or use time.domain event")
		}
		if l.ok("emission.allowed_lateness") && e.AllowedLateness.Duration > 0 {
			l.add("emission.allowed_lateness", fmt.Sprintf("in processing time nothing is late, so allowed_lateness %s can never apply", e.AllowedLateness),
				"set allowed_lateness: 0s, or use time.domain event")
		}
		if l.ok("emission.triggers.late") && e.Triggers.Late.Fires() {
			l.add("emission.triggers.late", "in processing time no event is late, so a late trigger can never fire",
				"remove triggers.late, or use time.domain event")
		}
	case DomainEvent:
		if l.ok("progress.watermark") && p.Watermark == WatermarkNone {
			l.add("progress.watermark", "time.domain event needs a watermark: without one no operator can tell when a window is complete or an event is late",
				"set watermark: bounded-out-of-orderness (with out_of_orderness) or source-provided")
		}
		if l.ok("time.trust") && t.Trust != TrustProducer {
			l.add("time.trust", "time.domain event takes each event's time from identity.event_time, which the producer stamps, yet trust says the broker's clock is the one trusted",
				"set trust: producer, or use time.domain ingestion to trust the broker's timestamp")
		}
	case DomainIngestion:
		if l.ok("time.trust") && t.Trust != TrustBroker {
			l.add("time.trust", "time.domain ingestion uses the time the broker stored each message, yet trust says producers stamp the time",
				"set trust: broker, or use time.domain event to use the producer's event_time")
		}
	}
}

// maxPartitions returns the largest partition count of the ingress and the
// edges, and where it is declared.
func (l *linter) maxPartitions() (n int, where string) {
	n, where = l.c.Ingress.Partitions, "ingress.partitions"
	for i, e := range l.c.Edges {
		if e.Partitions > n {
			n, where = e.Partitions, fmt.Sprintf("edges[%d].partitions", i)
		}
	}
	return n, where
}

func (l *linter) progressRules() {
	p := l.c.Progress
	if !l.ok("progress.watermark") || p.Watermark == WatermarkNone {
		return
	}
	if l.ok("progress.out_of_orderness") && p.Watermark == WatermarkBounded && p.OutOfOrderness.Duration <= 0 {
		l.add("progress.out_of_orderness", "a bounded-out-of-orderness watermark with a 0s bound declares every out-of-order event late",
			"set out_of_orderness to how far out of order events arrive, e.g. 2s")
	}
	// Only ingress partitions are idled for their silence: an edge
	// partition's writer says when it is idle.
	if n := l.c.Ingress.Partitions; l.ok("progress.idle_timeout", "ingress.partitions") && p.IdleTimeout.Duration <= 0 && n > 1 {
		l.add("progress.idle_timeout", fmt.Sprintf("an operator's watermark is the minimum over its input partitions (ingress.partitions is %d), and with idle_timeout 0s a silent ingress partition is never marked idle, so it holds every watermark back forever", n),
			"set idle_timeout, e.g. 10s")
	}
}

func (l *linter) stateRules() {
	s, in := l.c.State, l.c.Ingress
	n, where := l.maxPartitions()
	if l.ok("state.key_groups", "ingress.partitions", "edges") && s.KeyGroups < n {
		l.add("state.key_groups", fmt.Sprintf("%d key groups cannot be spread over %d partitions (%s): a partition owns whole key groups, so some partitions would own none", s.KeyGroups, n, where),
			fmt.Sprintf("set key_groups to at least %d (256 is usual), or use fewer partitions", n))
	}
	deadLetters := false
	for _, op := range l.c.Operators {
		deadLetters = deadLetters || op.DeadLetter
	}
	for i, f := range s.Families {
		p := fmt.Sprintf("state.families[%d]", i)
		if l.ok(p+".bound", p+".ttl") && f.Bound == BoundTTL && f.TTL.Duration <= 0 {
			l.add(p+".ttl", fmt.Sprintf("family %q is bounded by ttl but declares none, so its state has no bound and grows with the input (invariant 5)", f.Name),
				"set ttl to how long the business needs the state, e.g. `ttl: 26h`, or bound it by window")
		}
		if f.Role != RoleDedup {
			continue
		}
		if l.ok(p+".bound") && f.Bound != BoundTTL {
			l.add(p+".bound", fmt.Sprintf("deduplication family %q is bounded by %s, which forgets ids when windows close rather than after the replay horizon, so a replay re-admits duplicates", f.Name, f.Bound),
				"set `bound: ttl` with a ttl of at least ingress.retention")
		} else if l.ok(p+".ttl", "ingress.retention") && f.TTL.Duration > 0 && f.TTL.Duration < in.Retention.Duration {
			l.add(p+".ttl", fmt.Sprintf("dedup TTL %s is shorter than the replay horizon ingress.retention %s: a replay can re-deliver an event whose id was already forgotten, and it would be processed twice", f.TTL, in.Retention),
				fmt.Sprintf("set ttl to at least %s or shorten ingress.retention", in.Retention))
		}
	}
	for i, f := range s.Families {
		p := fmt.Sprintf("state.families[%d].on_limit", i)
		if l.ok(p, "operators") && f.OnLimit == OnLimitDeadLetter && !deadLetters && len(l.c.Operators) > 0 {
			l.add(p, fmt.Sprintf("family %q dead-letters the input that crosses max_keys, but no operator has dead_letter: true, so there is no dead-letter stream", f.Name),
				"set dead_letter: true on the operator that owns the family, or on_limit: fail")
		}
	}
}

// windowRules relate the window shape to the triggers and the state it
// bounds. A window other than global completes with its on-time pane; a
// global one never ends, so only early triggers emit it and nothing is
// late (W2). A window that ends needs state bound by it: the window
// operators are the ones keeping such state, and without one nothing reads
// the shape (W3; a global window's state is bound by ttl, so the families
// cannot tell who keeps it). State bound by window needs the window's shape, and a global
// window bounds nothing (K12). And state a window operator keeps under a
// TTL must outlive every window it holds (K10): the TTL counts from an
// entry's last write, and a window's state may be written last at its
// first element, then wait for the window's length, its allowed lateness
// and the watermark's delay before the window fires for the last time —
// the same need the runtime refuses to start on.
func (l *linter) windowRules() {
	w, e := l.c.Emission.Window, l.c.Emission
	if w.Declared() && l.ok("emission.window", "emission.triggers") {
		tr := e.Triggers
		if w.Kind == WindowGlobal {
			if !tr.Early.Fires() {
				l.add("emission.triggers.early", "a global window never ends: only early triggers emit its panes, and none is declared",
					"add an early trigger, e.g. `early: {every: 1m}`, or choose a window that ends")
			}
			if tr.OnTime {
				l.add("emission.triggers.on_time", "a global window never ends, so it has no on-time pane", "set `on_time: false`, or leave it out")
			}
			if tr.Late.Fires() || e.AllowedLateness.Duration > 0 {
				l.add("emission.allowed_lateness", "nothing is late in a global window, which never ends", "remove the late triggers and allowed_lateness")
			}
		} else if !tr.OnTime {
			l.add("emission.triggers.on_time", fmt.Sprintf("a %s window completes with its on-time pane, and on_time false would never complete it", w.Kind),
				"set `on_time: true`, or leave it out")
		}
	}
	fams := l.c.State.Families
	if w.Declared() && w.Kind != WindowGlobal && l.windowShapeOK() && l.familyBoundsOK() && !slices.ContainsFunc(fams, func(f Family) bool { return f.Bound == BoundWindow }) {
		l.add("emission.window", fmt.Sprintf("a %s window is declared, and no state family is bounded by it (bound: window): no operator keeps windows, so nothing would honour the shape", w.Kind),
			"remove emission.window, or declare the state the window operator keeps with `bound: window` and list it in that operator's state")
	}
	for i, f := range fams {
		p := fmt.Sprintf("state.families[%d].bound", i)
		if f.Bound != BoundWindow || !l.ok(p, "emission.window") {
			continue
		}
		switch {
		case !w.Declared():
			l.add(p, fmt.Sprintf("family %q is bounded by its window, and the contract declares no window (emission.window): neither the operators that keep windows nor Lint can tell how long a window holds state", f.Name),
				"declare the window next to its triggers, e.g. `window: {kind: tumbling, size: 10s}` under emission")
		case w.Kind == WindowGlobal:
			l.add(p, fmt.Sprintf("family %q is bounded by its window, and a global window never ends, so nothing bounds it (invariant 5)", f.Name),
				"bound it by ttl: `bound: ttl` with a ttl")
		}
	}
	length := w.Length()
	if length <= 0 || !l.ok("emission.window", "emission.allowed_lateness", "progress.out_of_orderness") {
		return
	}
	need := Duration{length + e.AllowedLateness.Duration + l.c.Progress.OutOfOrderness.Duration}
	for _, op := range l.c.Operators {
		if !l.windowed(&op) {
			continue
		}
		for _, name := range op.State {
			fi := slices.IndexFunc(fams, func(f Family) bool { return f.Name == name })
			if fi < 0 {
				continue // undeclared, reported by ownershipRules
			}
			f, p := fams[fi], fmt.Sprintf("state.families[%d].ttl", fi)
			if f.TTL.Duration <= 0 || f.TTL.Duration > need.Duration || !l.ok(p) {
				continue
			}
			l.add(p, fmt.Sprintf("family %q of window operator %q expires an entry %s after its last write, and a window's state must outlive %s — the window (%s) plus allowed_lateness %s plus the watermark's delay out_of_orderness %s: an open window's state would be dropped before the window fires, or before a late event it accepts arrives",
				f.Name, op.ID, f.TTL, need, w, e.AllowedLateness, l.c.Progress.OutOfOrderness),
				fmt.Sprintf("remove ttl (bound: window frees the state once the window and its lateness have passed), or set it over %s", need))
		}
	}
}

// ownershipRules relate the operators' keying and state lists to the
// declared families: every family is kept by exactly one operator, every
// name an operator lists is declared, and deduplication state is keyed by
// event id.
func (l *linter) ownershipRules() {
	fams := l.c.State.Families
	declared := map[string]int{} // family name -> index of its first declaration
	for i, f := range fams {
		if _, dup := declared[f.Name]; !dup {
			declared[f.Name] = i
		}
	}
	familiesOK := l.ok("state.families")
	listsOK := l.ok("operators") // every operators[].state was read and names declared families
	keeper := map[string]int{}   // family name -> index of the operator keeping it
	for i, op := range l.c.Operators {
		p := fmt.Sprintf("operators[%d]", i)
		if !l.ok(p + ".state") {
			listsOK = false
			continue
		}
		dedupKeyed := false
		for j, name := range op.State {
			q := fmt.Sprintf("%s.state[%d]", p, j)
			if !l.ok(q) {
				continue // listed twice, reported above
			}
			fi, known := declared[name]
			if !known {
				listsOK = false
				if familiesOK {
					l.add(q, fmt.Sprintf("operator %q keeps family %q, which is not declared under state.families, so it has no kind, bound or max_keys", op.ID, name),
						"correct the name, or declare the family under state.families")
				}
				continue
			}
			if k, shared := keeper[name]; shared {
				l.add(q, fmt.Sprintf("family %q is already kept by operators[%d] %q: state belongs to one operator, whose keying lays it out in key groups and whose instances move it when rescaling", name, k, l.c.Operators[k].ID),
					"declare a family of its own for each operator")
			} else {
				keeper[name] = i
			}
			f := fams[fi]
			fp := fmt.Sprintf("state.families[%d].role", fi)
			if !dedupKeyed && f.Role == RoleDedup && l.ok(p+".keying", fp) && op.Keying != KeyingID {
				dedupKeyed = true
				l.add(p+".keying", fmt.Sprintf("operator %q keeps deduplication family %q but is keyed by %s: it would deduplicate by identity.key, dropping distinct events that share a key", op.ID, name, op.Keying),
					"set `keying: id`: deduplication state is keyed by each event's id")
			}
		}
	}
	if !listsOK || !familiesOK {
		return
	}
	for i, f := range fams {
		q := fmt.Sprintf("state.families[%d].name", i)
		if _, kept := keeper[f.Name]; !kept && l.ok(q) {
			l.add(q, fmt.Sprintf("family %q is declared but no operator keeps it (no operators[].state names it): unused state is a mistake: either the family is not needed, or the operator that keeps it does not say so", f.Name),
				"add it to the state list of the operator that keeps it, or remove it")
		}
	}
}

func (l *linter) retentionRules() {
	r := l.c.Recovery
	if !l.ok("recovery.checkpoint_interval", "recovery.max_recovery_time") {
		return
	}
	env := r.Envelope()
	if l.ok("ingress.retention") && l.c.Ingress.Retention.Duration < env.Duration {
		l.add("ingress.retention", fmt.Sprintf("retention %s is shorter than the recovery envelope %s (checkpoint_interval %s + max_recovery_time %s): a recovery would need ingress messages the stream has already discarded (invariant 6)", l.c.Ingress.Retention, env, r.CheckpointInterval, r.MaxRecoveryTime),
			fmt.Sprintf("set ingress.retention to at least %s, or checkpoint more often", env))
	}
	for i, e := range l.c.Edges {
		p := fmt.Sprintf("edges[%d].retention", i)
		if l.ok(p) && e.Retention.Duration < env.Duration {
			l.add(p, fmt.Sprintf("edge %q keeps %s, shorter than the recovery envelope %s (checkpoint_interval %s + max_recovery_time %s): a downstream recovery would replay records the edge has already discarded (invariant 6)", e.Name, e.Retention, env, r.CheckpointInterval, r.MaxRecoveryTime),
				fmt.Sprintf("set retention to at least %s", env))
		}
	}
}

func (l *linter) overloadRules() {
	o, in := l.c.Overload, l.c.Ingress
	if l.ok("overload.fetch_batch", "overload.max_ack_pending") && o.FetchBatch > o.MaxAckPending {
		l.add("overload.fetch_batch", fmt.Sprintf("a fetch of %d messages can never be delivered whole while at most %d may be unacknowledged", o.FetchBatch, o.MaxAckPending),
			fmt.Sprintf("set fetch_batch to at most %d, or raise max_ack_pending", o.MaxAckPending))
	}
	if l.ok("overload.frame_max_bytes") && o.FrameMaxBytes > MaxServerPayload {
		l.add("overload.frame_max_bytes", fmt.Sprintf("a frame of up to %d bytes can never be published: no NATS server takes a message over %d bytes (max_payload's hard limit, 64 MiB; 1 MiB by default)", o.FrameMaxBytes, MaxServerPayload),
			"set frame_max_bytes to at most the max_payload of the servers you run, e.g. 1048576")
	}
	if l.ok("overload.frame_max_bytes", "ingress.max_message_bytes") && o.FrameMaxBytes < in.MaxMessageBytes {
		l.add("overload.frame_max_bytes", fmt.Sprintf("an ingress event of up to %d bytes (ingress.max_message_bytes) is accepted but cannot fit in a frame of at most %d bytes", in.MaxMessageBytes, o.FrameMaxBytes),
			fmt.Sprintf("set frame_max_bytes to at least %d, or lower ingress.max_message_bytes", in.MaxMessageBytes))
	}
}

// capacityRules does the capacity arithmetic (internal/capacity, the same
// `weir capacity` prints) on what the contract declares: the rates of its
// capacity section, its checkpoint interval, its max_recovery_time as the
// restore, its ingress retention and stream limits.
func (l *linter) capacityRules() {
	cp, in := l.c.Capacity, l.c.Ingress
	for _, f := range []struct {
		field string
		v     float64
	}{
		{"capacity.arrival_rate", float64(cp.ArrivalRate)}, {"capacity.process_rate", float64(cp.ProcessRate)},
		{"capacity.record_bytes", float64(cp.RecordBytes)}, {"ingress.max_bytes", float64(in.MaxBytes)},
		{"ingress.max_msgs", float64(in.MaxMsgs)},
	} {
		if f.v < 0 {
			l.add(f.field, fmt.Sprintf("%s is negative", f.field), "give a positive figure, or leave it out")
		}
	}
	for _, f := range []struct {
		field string
		d     Duration
	}{{"capacity.detection", cp.Detection}, {"capacity.repair", cp.Repair}, {"capacity.margin", cp.Margin}} {
		if f.d.Duration < 0 {
			l.add(f.field, fmt.Sprintf("%s is negative", f.field), "give a duration such as 10m, or leave it out")
		}
	}
	if cp.ProcessRate > 0 && cp.ArrivalRate <= 0 {
		l.add("capacity.process_rate", "a processing rate says nothing without the arrival rate it must exceed",
			"declare capacity.arrival_rate, the peak records/s")
	}
	if (in.MaxBytes > 0 || in.MaxMsgs > 0) && cp.ArrivalRate <= 0 {
		field := "ingress.max_msgs"
		if in.MaxBytes > 0 {
			field = "ingress.max_bytes"
		}
		l.add(field, "a stream limited by bytes or messages keeps records for as long as the arrival rate lets it, which the contract does not say",
			"declare capacity.arrival_rate (and capacity.record_bytes for max_bytes), or leave the limit out and let the age keep records")
	}
	if in.MaxBytes > 0 && cp.ArrivalRate > 0 && cp.RecordBytes <= 0 {
		l.add("ingress.max_bytes", "a byte limit keeps records for a time that depends on their size, which the contract does not say",
			"declare capacity.record_bytes, the stored bytes per record")
	}
	if cp.ArrivalRate <= 0 || !l.ok("capacity.arrival_rate", "capacity.process_rate", "capacity.record_bytes", "ingress.retention",
		"recovery.checkpoint_interval", "recovery.max_recovery_time", "capacity.detection", "capacity.repair", "capacity.margin") {
		return
	}
	f := capacity.Compute(l.c.CapacityInputs())
	switch {
	case f.Never:
		l.add("capacity.process_rate", fmt.Sprintf("processing %d records/s does not exceed the arrival rate %d/s: after any stop the backlog only grows, and the pipeline never catches up", cp.ProcessRate, cp.ArrivalRate),
			"add capacity (instances, or faster operators), lower the work, or control the input (overload.policy admission or shed)")
	case f.RequiredRetention > 0 && in.Retention.Duration < f.RequiredRetention && l.ok("ingress.max_bytes", "ingress.max_msgs"):
		l.add("ingress.retention", fmt.Sprintf("a recovery needs the input of the last %s (checkpoint interval %s, detection %s, repair %s, restore %s, catching up on %.0f records at %.0f records/s spare, margin %s), and the ingress keeps %s",
			capacity.Round(f.RequiredRetention), l.c.Recovery.CheckpointInterval, cp.Detection, cp.Repair, l.c.Recovery.MaxRecoveryTime,
			f.RecoveryBacklog, float64(cp.ProcessRate-cp.ArrivalRate), cp.Margin, in.Retention),
			fmt.Sprintf("set ingress.retention to at least %s, or declare a faster capacity.process_rate once measured", capacity.Round(f.RequiredRetention)))
	}
	if f.KeptFor > 0 && f.KeptFor < in.Retention.Duration {
		// The limit that keeps records the shortest.
		field := "ingress.max_bytes"
		if in.MaxMsgs > 0 && (in.MaxBytes == 0 || float64(in.MaxMsgs) < float64(in.MaxBytes)/float64(max(cp.RecordBytes, 1))) {
			field = "ingress.max_msgs"
		}
		rate := float64(cp.ArrivalRate)
		l.add(field, fmt.Sprintf("at %d records/s the stream's limits keep records only %s, less than ingress.retention %s: a replay would find them gone", cp.ArrivalRate, capacity.Round(f.KeptFor), in.Retention),
			fmt.Sprintf("raise the limit to hold %s of arrivals (%.0f records, %.0f bytes), or leave it out", in.Retention, rate*in.Retention.Seconds(), rate*float64(cp.RecordBytes)*in.Retention.Seconds()))
	}
}

// CapacityInputs are the capacity arithmetic's inputs the contract
// declares.
func (c *Contract) CapacityInputs() capacity.Inputs {
	cp, in := c.Capacity, c.Ingress
	return capacity.Inputs{
		ArrivalRate: float64(cp.ArrivalRate), ProcessRate: float64(cp.ProcessRate), RecordBytes: float64(cp.RecordBytes),
		Interval: c.Recovery.CheckpointInterval.D(), Detection: cp.Detection.D(), Repair: cp.Repair.D(),
		Restore: c.Recovery.MaxRecoveryTime.D(), Margin: cp.Margin.D(),
		Retention: in.Retention.D(), MaxBytes: int64(in.MaxBytes), MaxMsgs: int64(in.MaxMsgs),
	}
}

// splitRules: an edge that splits hot keys feeds a two-level
// aggregation. Its reader aggregates each part of a key by window and
// emits the parts' accumulators (window.Partial); the operator reading its
// output merges them per key (window.Merge), which emits the merged value
// when its watermark passes the window and again for each late part. So
// the reader is keyed by key and keeps window-bound state, its output is
// read by an operator keyed by key, and the emission is one the merge
// reproduces: an on-time pane, no early ones (a part's early pane is not
// the key's), and each part's pane holding its whole value (accumulating,
// or one pane per window), since it replaces the part's last one.
func (l *linter) splitRules() {
	for i, e := range l.c.Edges {
		if e.Split < 2 || !l.ok(fmt.Sprintf("edges[%d].split", i)) {
			continue
		}
		p := fmt.Sprintf("edges[%d].split", i)
		var reader *Operator
		for j := range l.c.Operators {
			if l.c.Operators[j].Input == e.Name {
				reader = &l.c.Operators[j]
			}
		}
		switch {
		case reader == nil:
			l.add(p, fmt.Sprintf("edge %q splits keys, but no operator reads it", e.Name), "leave split out, or read the edge")
			continue
		case reader.Keying != KeyingKey:
			l.add(p, fmt.Sprintf("edge %q splits keys, but its reader %q is keyed by %s, not key: only an aggregation by key can be split and merged", e.Name, reader.ID, reader.Keying),
				"leave split out: an operator keyed by id has no hot key")
			continue
		case !l.windowed(reader):
			l.add(p, fmt.Sprintf("edge %q splits keys, but its reader %q keeps no window-bound state (state.families[].bound: window): only a windowed aggregation has parts to merge", e.Name, reader.ID),
				"leave split out, or aggregate by window")
			continue
		}
		if reader.Output == "" {
			l.add(p, fmt.Sprintf("edge %q splits keys, but its reader %q writes no output for a merge to read", e.Name, reader.ID),
				"give the reader an output edge and a merging operator (window.Merge) reading it")
			continue
		}
		for j, out := range l.c.Edges {
			if out.Name == reader.Output && out.Split > 1 {
				l.add(fmt.Sprintf("edges[%d].split", j), fmt.Sprintf("edge %q carries the parts of split edge %q to their merge, which must see each key whole: it cannot be split too", out.Name, e.Name),
					"leave split out on "+out.Name)
			}
		}
		merges := 0
		for _, op := range l.c.Operators {
			if op.Input == reader.Output {
				merges++
				if op.Keying != KeyingKey {
					l.add(p, fmt.Sprintf("the parts of split edge %q are merged by %q, which is keyed by %s: the merge must be keyed by key", e.Name, op.ID, op.Keying),
						"key the merging operator by key")
				}
			}
		}
		if merges == 0 {
			l.add(p, fmt.Sprintf("edge %q splits keys, but no operator reads the parts %q emits to merge them", e.Name, reader.ID),
				"add the merging operator (window.Merge) reading "+reader.Output)
		}
		em := l.c.Emission
		if em.Triggers.Early.Fires() {
			l.add(p, "split keys are merged when the watermark passes a window and for each late part; an early pane of one part is not the key's, so the merge emits none, and emission.triggers.early would be ignored",
				"remove emission.triggers.early, or leave split out")
		}
		if !em.Triggers.OnTime {
			l.add(p, "split keys are merged when the watermark passes a window: the merge emits an on-time pane, which emission.triggers.on_time does not ask for",
				"set emission.triggers.on_time: true, or leave split out")
		}
		if em.Accumulation != AccumulationAccumulating && (em.AllowedLateness.Duration > 0 || em.Accumulation != AccumulationDiscarding) {
			l.add(p, fmt.Sprintf("split keys are merged from each part's latest pane, which holds the part's whole value only with emission.accumulation accumulating (or discarding with no allowed lateness: one pane per window), not %s", em.Accumulation),
				"set emission.accumulation: accumulating, or leave split out")
		}
	}
}

// windowShapeOK reports whether emission.window and every field of its
// shape passed the per-field checks (W1).
func (l *linter) windowShapeOK() bool {
	const at = "emission.window"
	return l.ok(at, at+".kind", at+".size", at+".slide", at+".gap")
}

// familyBoundsOK reports whether state.families and every family's bound
// passed the per-field checks.
func (l *linter) familyBoundsOK() bool {
	if !l.ok("state.families") {
		return false
	}
	for i := range l.c.State.Families {
		if !l.ok(fmt.Sprintf("state.families[%d].bound", i)) {
			return false
		}
	}
	return true
}

// windowed reports whether op keeps state bound by window.
func (l *linter) windowed(op *Operator) bool {
	for _, name := range op.State {
		for _, f := range l.c.State.Families {
			if f.Name == name && f.Bound == BoundWindow {
				return true
			}
		}
	}
	return false
}

func (l *linter) graphRules() {
	ops := l.c.Operators
	edges := map[string]bool{}
	jsonEdges := map[string]bool{}
	for _, e := range l.c.Edges {
		edges[e.Name] = true
		jsonEdges[e.Name] = e.JSON()
	}
	writer := map[string]int{} // edge name -> index of the operator writing it
	outputTrouble := false
	for i, op := range ops {
		p := fmt.Sprintf("operators[%d]", i)
		if l.ok(p+".input") && op.Input != InputIngress && !edges[op.Input] {
			l.add(p+".input", fmt.Sprintf("input %q is neither ingress nor a declared edge", op.Input),
				"correct the name, or declare the edge under edges")
		}
		if jsonEdges[op.Input] {
			l.add(p+".input", fmt.Sprintf("edge %q has format json: one JSON value per message, without identity, coordinates or watermarks, so no operator can read it", op.Input),
				"read a frames edge, or set the edge's format to frames")
		}
		if op.Output != "" {
			j, dup := writer[op.Output]
			switch {
			case op.Output == InputIngress:
				l.add(p+".output", "weir never writes the ingress stream: it belongs to the user",
					"write the output to an internal edge declared under edges")
			case !edges[op.Output]:
				l.add(p+".output", fmt.Sprintf("output %q is not a declared edge", op.Output),
					"correct the name, or declare the edge under edges")
			case dup:
				l.add(p+".output", fmt.Sprintf("edge %q is already written by operators[%d] %q: an edge has one writer, whose frame sequences and in-band watermarks its readers follow", op.Output, j, ops[j].ID),
					"give each operator its own output edge")
			default:
				writer[op.Output] = i
			}
			outputTrouble = outputTrouble || !l.ok(p+".output")
		}
		if op.Input == InputIngress && l.ok(p+".dead_letter") && !op.DeadLetter {
			l.add(p+".dead_letter", fmt.Sprintf("operator %q reads the ingress, where messages over ingress.max_message_bytes and events whose identity cannot be read are dead-lettered, but it has no dead-letter stream", op.ID),
				"set `dead_letter: true`")
		} else if l.ok(p+".dead_letter") && !op.DeadLetter && l.c.Time.Domain != DomainProcessing {
			for _, name := range op.State {
				if f, ok := l.c.Family(name); ok && f.Bound == BoundWindow {
					l.add(p+".dead_letter", fmt.Sprintf("operator %q keeps window state (%q), and an event later than the watermark plus allowed_lateness goes to the side output, but it has no dead-letter stream to hold it: it would stop at the first such event", op.ID, name),
						"set `dead_letter: true`")
					break
				}
			}
		}
	}
	if !outputTrouble && l.ok("operators") {
		for i, e := range l.c.Edges {
			p := fmt.Sprintf("edges[%d].name", i)
			if _, ok := writer[e.Name]; !ok && l.ok(p) {
				l.add(p, fmt.Sprintf("no operator writes edge %q, so it stays empty and any reader waits forever", e.Name),
					"make it some operator's output, or remove it")
			}
		}
	}
	for i, op := range ops {
		chain := []string{op.ID}
		seen := map[int]bool{i: true}
		for cur := op; cur.Input != InputIngress; {
			j, ok := writer[cur.Input]
			if !ok {
				break // an unknown or unwritten input, reported above
			}
			chain = append(chain, ops[j].ID)
			if seen[j] {
				l.add(fmt.Sprintf("operators[%d].input", i), fmt.Sprintf("the input of operator %q loops (%s) and never reaches the ingress, so no record ever arrives", op.ID, strings.Join(chain, " <- ")),
					"break the cycle: every chain of inputs must start at ingress")
				break
			}
			seen[j] = true
			cur = ops[j]
		}
	}
}
