package contracts

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// edit applies edits to a contract file and returns the result. Edits are
// pairs of a dotted path (as in Problem.Field) and a YAML value; the value
// "DELETE" removes the field. Missing mapping keys and the list item one
// past the end are created.
func edit(t *testing.T, data []byte, edits ...string) []byte {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(edits); i += 2 {
		setPath(t, doc.Content[0], strings.Split(edits[i], "."), edits[i+1])
	}
	out, err := yaml.Marshal(&doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func setPath(t *testing.T, n *yaml.Node, path []string, value string) {
	t.Helper()
	name, idx := path[0], -1
	if open := strings.IndexByte(name, '['); open >= 0 {
		var err error
		if idx, err = strconv.Atoi(strings.TrimSuffix(name[open+1:], "]")); err != nil {
			t.Fatalf("bad path element %q", name)
		}
		name = name[:open]
	}
	var child *yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value != name {
			continue
		}
		if len(path) == 1 && idx < 0 && value == "DELETE" {
			n.Content = slices.Delete(n.Content, i, i+2)
			return
		}
		child = n.Content[i+1]
	}
	if child == nil {
		child = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		if idx >= 0 {
			child = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		}
		n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: name}, child)
	}
	if idx >= 0 {
		if idx == len(child.Content) {
			child.Content = append(child.Content, &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"})
		}
		if len(path) == 1 && value == "DELETE" {
			child.Content = slices.Delete(child.Content, idx, idx+1)
			return
		}
		child = child.Content[idx]
	}
	if len(path) > 1 {
		setPath(t, child, path[1:], value)
		return
	}
	var v yaml.Node
	if err := yaml.Unmarshal([]byte(value), &v); err != nil {
		t.Fatalf("bad value %q: %v", value, err)
	}
	*child = *v.Content[0]
}

func readBase(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile("testdata/lint-base.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestLintRules changes the shipped nexmark contract one decision at a time
// and checks that Lint names the field, explains why and says how to fix
// it, and reports nothing else.
func TestLintRules(t *testing.T) {
	const windowFamily = "{name: win, kind: map, bound: window, max_keys: 10, on_limit: fail}"
	for _, tc := range []struct {
		name  string
		edits []string
		field string // the problem's field
		why   string // a phrase of Why
		fix   string // a phrase of Fix
		also  []string
	}{
		// 1. Emission against the sink.
		{"accumulating early panes into append sink",
			[]string{"emission.accumulation", "accumulating", "emission.triggers.early", "{every: 1s}"},
			"emission.accumulation", "append-only sink: early triggers", "accumulation: discarding", nil},
		{"accumulating late panes into append sink",
			[]string{"emission.accumulation", "accumulating", "emission.triggers.late", "{each: true}", "emission.allowed_lateness", "1m"},
			"emission.accumulation", "late triggers and allowed_lateness 1m", "emit upserts", nil},
		{"retracting into append sink",
			[]string{"emission.accumulation", "retracting", "emission.mode", "retract"},
			"emission.accumulation", "cannot apply a retraction", "accepts retract", nil},
		{"retracting without retract mode",
			[]string{"emission.accumulation", "retracting", "emission.mode", "upsert", "sink.accepts", "retract"},
			"emission.mode", "cannot carry", "emission.mode: retract", nil},
		{"upsert output into append sink",
			[]string{"emission.mode", "upsert"},
			"sink.accepts", "cannot apply", "both upsert", nil},
		{"append output into upsert sink",
			[]string{"sink.accepts", "upsert"},
			"sink.accepts", "emits append", "both append", nil},
		{"discarding panes as upserts",
			[]string{"emission.mode", "upsert", "sink.accepts", "upsert", "emission.triggers.early", "{count: 100}"},
			"emission.accumulation", "only the last fragment", "accumulating", nil},
		{"late trigger without allowed lateness",
			[]string{"emission.triggers.late", "{every: 1m}"},
			"emission.triggers.late", "can never fire", "set allowed_lateness", nil},
		{"allowed lateness without late trigger",
			[]string{"emission.allowed_lateness", "10m"},
			"emission.allowed_lateness", "no late trigger emits them", "add a late trigger", nil},
		{"no trigger for window state",
			[]string{"emission.window", "{kind: tumbling, size: 10s}", "emission.triggers.on_time", "false", "state.families[1]", windowFamily, "operators[0].state", "[seen, win]"},
			"emission.triggers", "no window would ever emit", "on_time: true", nil},
		{"versioned upsert of appends",
			[]string{"sink.effect", "versioned-upsert"},
			"sink.effect", "emission.mode is append", "both to upsert", nil},
		{"versioned view written by an operator without window state",
			[]string{"sink.effect", "versioned-upsert", "emission.mode", "upsert", "sink.accepts", "upsert",
				"edges[1]", "{name: results, partitions: 4, retention: 24h, format: json}",
				"operators[1]", "{id: publish, service: dedup, input: deduped, output: results, keying: key, state: [], dead_letter: true}"},
			"operators[1].output", "keeps no window state", "from a window operator", nil},
		{"versioned view forgetting windows before a replay could reach them",
			[]string{"sink.effect", "versioned-upsert", "emission.mode", "upsert", "sink.accepts", "upsert", "emission.window", "{kind: tumbling, size: 10s}",
				"state.families[1]", "{name: win, kind: map, bound: window, max_keys: 10, on_limit: fail}",
				"edges[1]", "{name: results, partitions: 4, retention: 1h, format: json}",
				"operators[1]", "{id: publish, service: dedup, input: deduped, output: results, keying: key, state: [win], dead_letter: true}"},
			"edges[1].retention", "a replayed older version", "at least 24h", nil},
		{"transactional without checkpoints",
			[]string{"sink.effect", "transactional", "recovery.checkpoint_interval", "0s"},
			"sink.effect", "takes no checkpoints", "checkpoint_interval", nil},
		{"outbox without checkpoints",
			[]string{"sink.effect", "outbox", "recovery.checkpoint_interval", "0s"},
			"sink.effect", "nothing would ever be released", "at-least-once", nil},

		// 2. Deduplication against the replay horizon.
		{"dedup ttl shorter than retention",
			[]string{"state.families[0].ttl", "1h"},
			"state.families[0].ttl", "dedup TTL 1h is shorter than the replay horizon ingress.retention 24h", "at least 24h", nil},
		{"dedup bounded by window",
			[]string{"state.families[0].bound", "window"},
			"state.families[0].bound", "re-admits duplicates", "bound: ttl", nil},

		// 3. State bounds.
		{"ttl bound without ttl",
			[]string{"state.families[0].ttl", "DELETE"},
			"state.families[0].ttl", "no bound", "ttl: 26h", nil},
		{"max_keys zero",
			[]string{"state.families[0].max_keys", "0"},
			"state.families[0].max_keys", "no bound", "max_keys: 1000000", nil},
		{"max_keys missing",
			[]string{"state.families[0].max_keys", "DELETE"},
			"state.families[0].max_keys", "missing", "max_keys: 1000000", nil},
		{"on_limit dead-letter without dead-letter stream",
			[]string{"operators[0].dead_letter", "false"},
			"state.families[0].on_limit", "no dead-letter stream", "on_limit: fail", []string{"operators[0].dead_letter"}},
		{"duplicate family",
			[]string{"state.families[1]", "{name: seen, kind: map, bound: ttl, ttl: 1h, max_keys: 1, on_limit: fail}"},
			"state.families[1].name", "declared twice", "own name", nil},
		{"unknown role",
			[]string{"state.families[0].role", "cache"},
			"state.families[0].role", "not a role", "role: dedup", nil},
		{"unknown kind",
			[]string{"state.families[0].kind", "set"},
			"state.families[0].kind", `"set" is not one of`, "value, map, list", nil},
		{"a kind the runtime does not keep",
			[]string{"state.families[0].kind", "aggregating"},
			"state.families[0].kind", `"aggregating" is not one of`, "value, map, list", nil},
		// 3b. Which operator keeps which state, keyed by what.
		{"operator keeps an undeclared family",
			[]string{"operators[0].state", "[seen, recent]"},
			"operators[0].state[1]", `keeps family "recent", which is not declared under state.families`, "declare the family", nil},
		{"family no operator keeps",
			[]string{"state.families[1]", "{name: recent, kind: map, ttl: 1h, bound: ttl, max_keys: 10, on_limit: fail}"},
			"state.families[1].name", `family "recent" is declared but no operator keeps it`, "add it to the state list", nil},
		{"family of a stateless pipeline",
			[]string{"operators[0].state", "[]"},
			"state.families[0].name", `family "seen" is declared but no operator keeps it`, "or remove it", nil},
		{"family kept by two operators",
			[]string{"operators[1]", "{id: audit, service: audit, input: deduped, keying: id, state: [seen], dead_letter: false}"},
			"operators[1].state[0]", `family "seen" is already kept by operators[0] "dedup"`, "a family of its own", nil},
		{"dedup keyed by key",
			[]string{"operators[0].keying", "key"},
			"operators[0].keying", `deduplication family "seen" but is keyed by key`, "keying: id", nil},
		{"unknown keying",
			[]string{"operators[0].keying", "auction"},
			"operators[0].keying", `"auction" is not one of id, key`, "set keying to one of id, key", nil},
		{"keying missing",
			[]string{"operators[0].keying", "DELETE"},
			"operators[0].keying", "missing", "keying: id", nil},
		{"state left out: none",
			[]string{"operators[0].state", "DELETE"},
			"state.families[0].name", `family "seen" is declared but no operator keeps it`, "or remove it", nil},
		{"state empty value: none",
			[]string{"operators[0].state", "null"},
			"state.families[0].name", `family "seen" is declared but no operator keeps it`, "or remove it", nil},
		{"family listed twice",
			[]string{"operators[0].state", "[seen, seen]"},
			"operators[0].state[1]", `family "seen" is listed twice (also operators[0].state[0])`, "once", nil},
		{"too few key groups",
			[]string{"state.key_groups", "2"},
			"state.key_groups", "cannot be spread over 4 partitions", "at least 4", nil},
		{"too many key groups",
			[]string{"state.key_groups", "40000"},
			"state.key_groups", "two bytes", "at most 32768", nil},

		// 4. Retention against recovery.
		{"ingress retention shorter than recovery envelope",
			[]string{"ingress.retention", "2m"},
			"ingress.retention", "shorter than the recovery envelope 5m10s", "at least 5m10s", nil},
		{"edge retention shorter than recovery envelope",
			[]string{"edges[0].retention", "1m"},
			"edges[0].retention", `edge "deduped" keeps 1m`, "at least 5m10s", nil},

		// 5. Time and progress.
		{"processing time with a watermark",
			[]string{"time.domain", "processing"},
			"progress.watermark", "no event time to track", "watermark: none", nil},
		{"processing time with allowed lateness",
			[]string{"time.domain", "processing", "progress.watermark", "none", "emission.allowed_lateness", "1m"},
			"emission.allowed_lateness", "nothing is late", "allowed_lateness: 0s", nil},
		{"processing time with late trigger",
			[]string{"time.domain", "processing", "progress.watermark", "none", "emission.triggers.late", "{each: true}"},
			"emission.triggers.late", "no event is late", "remove triggers.late", nil},
		{"event time without event_time",
			[]string{"identity.event_time", "DELETE"},
			"identity.event_time", "no event has a time", "event_time: {from: json", nil},
		{"event time without watermark",
			[]string{"progress.watermark", "none"},
			"progress.watermark", "needs a watermark", "bounded-out-of-orderness", nil},
		{"event time trusting the broker",
			[]string{"time.trust", "broker"},
			"time.trust", "which the producer stamps", "trust: producer", nil},
		{"ingestion time trusting producers",
			[]string{"time.domain", "ingestion"},
			"time.trust", "broker stored", "trust: broker", nil},
		{"bounded watermark without bound",
			[]string{"progress.out_of_orderness", "0s"},
			"progress.out_of_orderness", "0s bound", "out_of_orderness", nil},
		{"no idle timeout over partitions",
			[]string{"progress.idle_timeout", "0s"},
			"progress.idle_timeout", "holds every watermark back forever", "idle_timeout", nil},

		// Hot keys split over a two-level aggregation.
		{"split out of range",
			[]string{"edges[0].split", "1"},
			"edges[0].split", "not between 2 and 256", "split: 8", nil},
		{"split without a reader",
			[]string{"edges[0].split", "8"},
			"edges[0].split", "no operator reads it", "leave split out", nil},
		{"split read by id",
			[]string{"edges[0].split", "8", "edges[1]", "{name: counts, partitions: 4, retention: 24h}",
				"operators[1]", "{id: count, service: c, input: deduped, output: counts, keying: id, state: [], dead_letter: true}"},
			"edges[0].split", "keyed by id, not key", "no hot key", nil},
		{"split into an aggregation without a merge",
			[]string{"emission.window", "{kind: tumbling, size: 10s}", "edges[0].split", "8", "edges[1]", "{name: counts, partitions: 4, retention: 24h}",
				"state.families[1]", windowFamily,
				"operators[1]", "{id: count, service: c, input: deduped, output: counts, keying: key, state: [win], dead_letter: true}"},
			"edges[0].split", "no operator reads the parts", "window.Merge", nil},
		{"split parts edge",
			[]string{"emission.window", "{kind: tumbling, size: 10s}", "edges[0].split", "8", "edges[1]", "{name: parts, partitions: 4, retention: 24h, split: 8}",
				"edges[2]", "{name: counts, partitions: 4, retention: 24h}",
				"state.families[1]", windowFamily, "state.families[2]", "{name: merged, kind: map, bound: window, max_keys: 10, on_limit: fail}",
				"operators[1]", "{id: part, service: c, input: deduped, output: parts, keying: key, state: [win], dead_letter: true}",
				"operators[2]", "{id: count, service: c, input: parts, output: counts, keying: key, state: [merged], dead_letter: true}"},
			"edges[1].split", "cannot be split too", "leave split out on parts", nil},
		{"split with early panes",
			[]string{"emission.window", "{kind: tumbling, size: 10s}", "edges[0].split", "8", "edges[1]", "{name: parts, partitions: 4, retention: 24h}",
				"edges[2]", "{name: counts, partitions: 4, retention: 24h}",
				"state.families[1]", windowFamily, "state.families[2]", "{name: merged, kind: map, bound: window, max_keys: 10, on_limit: fail}",
				"operators[1]", "{id: part, service: c, input: deduped, output: parts, keying: key, state: [win], dead_letter: true}",
				"operators[2]", "{id: count, service: c, input: parts, output: counts, keying: key, state: [merged], dead_letter: true}",
				"emission.triggers.early", "{every: 1s}"},
			"edges[0].split", "merge emits none", "remove emission.triggers.early", nil},

		// Stateless operators chained into another's step.
		{"chained operator not a name",
			[]string{"operators[0].before", "[Key]"},
			"operators[0].before[0]", "not a valid name", "before: [q7-key]", nil},
		{"chained operator chained twice",
			[]string{"operators[0].before", "[key, key]"},
			"operators[0].before[1]", "chained twice", "one operator's step", nil},
		{"chained operator that is an operator",
			[]string{"operators[0].before", "[dedup]"},
			"operators[0].before[0]", "an operator of its own", "remove it from operators", nil},
		{"chained before a split edge's reader",
			[]string{"emission.window", "{kind: tumbling, size: 10s}", "edges[0].split", "8", "edges[1]", "{name: parts, partitions: 4, retention: 24h}",
				"edges[2]", "{name: counts, partitions: 4, retention: 24h}",
				"state.families[1]", windowFamily, "state.families[2]", "{name: merged, kind: map, bound: window, max_keys: 10, on_limit: fail}",
				"operators[1]", "{id: part, service: c, input: deduped, output: parts, keying: key, state: [win], dead_letter: true, before: [salt]}",
				"operators[2]", "{id: count, service: c, input: parts, output: counts, keying: key, state: [merged], dead_letter: true}"},
			"operators[1].before", "splits hot keys", "do not split it", nil},

		// Security (X1, X2).
		{"sensitive identity",
			[]string{"security", "{sensitive: [{field: id, redact: hash}], keys: hash}"},
			"security.sensitive[0].field", "is the event ID", "surrogate ID", nil},
		{"sensitive key left clear",
			[]string{"security", "{sensitive: [{field: key, redact: hash}], keys: clear}"},
			"security.sensitive[0].field", "leaves keys in the clear", "security.keys to hash or omit", nil},
		{"sensitive identity in another case",
			[]string{"security", "{sensitive: [{field: ID, redact: hash}], keys: hash}"},
			"security.sensitive[0].field", "is the event ID", "surrogate ID", nil},
		{"sensitive key in another case left clear",
			[]string{"security", "{sensitive: [{field: Key, redact: hash}], keys: clear}"},
			"security.sensitive[0].field", "leaves keys in the clear", "security.keys to hash or omit", nil},
		{"sensitive field declared twice in two cases",
			[]string{"security", "{sensitive: [{field: card, redact: omit}, {field: Card, redact: hash}], keys: hash}"},
			"security.sensitive[1].field", "declared twice", "declare each field once", nil},
		{"sensitive field without a redaction weir applies",
			[]string{"security", "{sensitive: [{field: card, redact: mask}]}"},
			"security.sensitive[0].redact", "is not one of hash, omit", "redact", nil},
		{"keys redaction unknown",
			[]string{"security", "{keys: scramble}"},
			"security.keys", "is not one of clear, hash, omit", "keys", nil},

		// Tenants (T1).
		{"tenant-scoped keys without a tenant",
			[]string{"state.tenant_scoped", "true"},
			"state.tenant_scoped", "identity.tenant does not say", "tenant: {from: json, field: tenant}", nil},
		{"an optional tenant",
			[]string{"identity.tenant", "{from: json, field: tenant, optional: true}"},
			"identity.tenant.optional", "cannot be optional", "remove `optional: true`", nil},
		{"a tenant read from nowhere",
			[]string{"identity.tenant", "{from: json}"},
			"identity.tenant.field", "needs field", "field: id", nil},

		// Deletion (D1–D3).
		{"deletion without a winner",
			[]string{"deletion", "{within: 720h}"},
			"deletion.replay", "missing", "replay: erasure-wins", nil},
		{"deletion with an unknown winner",
			[]string{"deletion", "{within: 720h, replay: sometimes}"},
			"deletion.replay", "is not one of erasure-wins, replay-wins", "replay", nil},
		{"deletion without a deadline",
			[]string{"deletion", "{replay: erasure-wins}"},
			"deletion.within", "missing", "within: 720h", nil},
		{"deletion deadline shorter than the log keeps",
			[]string{"deletion", "{within: 1h, replay: replay-wins}"},
			"deletion.within", "the ingress stream and the dead-letter stream keeps a key's records for 24h", "at least 24h", nil},
		{"deletion deadline shorter than an edge keeps",
			[]string{"deletion", "{within: 30h, replay: erasure-wins}", "edges[0].retention", "48h"},
			"deletion.within", `edge "deduped" keeps a key's records for 48h`, "at least 48h", nil},
		{"deletion with a transactional sink",
			[]string{"deletion", "{within: 48h, replay: erasure-wins}", "sink.effect", "transactional", "sink.max_pending_epochs", "2"},
			"deletion", "erasure does not reach yet", "remove the deletion section", nil},
		{"deletion with an outbox written by event ID",
			[]string{"deletion", "{within: 48h, replay: erasure-wins}", "sink.effect", "outbox", "sink.max_pending_epochs", "2", "edges[0].format", "json"},
			"operators[0].keying", `operator "dedup" writes the outbox keyed by id: its intents name no key`, "keying: key", nil},
		{"deletion deadline shorter than checkpoints keep",
			[]string{"deletion", "{within: 24h, replay: erasure-wins}", "recovery.checkpoint_interval", "8h", "recovery.max_recovery_time", "1h"},
			"deletion.within", "until 3 newer ones complete, about 32h", "keep fewer checkpoints", nil},
		// Capacity arithmetic (internal/capacity).
		{"processing that cannot catch up",
			[]string{"capacity", "{arrival_rate: 1000, process_rate: 900}"},
			"capacity.process_rate", "does not exceed the arrival rate 1000/s", "overload.policy admission", nil},
		{"retention shorter than a recovery needs",
			[]string{"capacity", "{arrival_rate: 1000, process_rate: 1100, detection: 10m, repair: 3h, margin: 1h}"},
			"ingress.retention", "a recovery needs the input of the last", "set ingress.retention to at least", nil},
		{"message limit keeping less than the retention",
			[]string{"capacity", "{arrival_rate: 1000}", "ingress.max_msgs", "1000000"},
			"ingress.max_msgs", "keep records only 16m40s, less than ingress.retention 24h", "86400000 records", nil},
		{"byte limit without a record size",
			[]string{"capacity", "{arrival_rate: 1000}", "ingress.max_bytes", "1000000000"},
			"ingress.max_bytes", "depends on their size", "capacity.record_bytes", nil},
		{"stream limit without an arrival rate",
			[]string{"ingress.max_msgs", "1000000"},
			"ingress.max_msgs", "does not say", "capacity.arrival_rate", nil},

		// 5. Overload.
		{"fetch larger than ack window",
			[]string{"overload.fetch_batch", "2048"},
			"overload.fetch_batch", "at most 1024 may be unacknowledged", "at most 1024", nil},
		{"frame larger than any server takes",
			[]string{"overload.frame_max_bytes", "100000000"},
			"overload.frame_max_bytes", "can never be published", "at most the max_payload", nil},
		{"outbox without a bound on held epochs",
			[]string{"sink.effect", "outbox"},
			"sink.max_pending_epochs", "effect outbox holds", "set max_pending_epochs", nil},
		{"transactional sink without a bound on held epochs",
			[]string{"sink.effect", "transactional"},
			"sink.max_pending_epochs", "does not bound how many epochs", "set max_pending_epochs", nil},
		{"a bound on held epochs of a sink that holds none",
			[]string{"sink.max_pending_epochs", "4"},
			"sink.max_pending_epochs", "would be ignored", "declare effect: transactional", nil},
		{"provider keys without an outbox",
			[]string{"sink.provider_keys", "ignored"},
			"sink.provider_keys", "would be ignored", "declare effect: outbox", nil},
		{"provider keys neither honoured nor ignored",
			[]string{"sink.effect", "outbox", "sink.max_pending_epochs", "2", "sink.provider_keys", "sometimes"},
			"sink.provider_keys", "is not one of honoured, ignored", "set provider_keys", nil},
		{"admission without its bound",
			[]string{"overload.policy", "admission"},
			"overload.max_lag", "sets no bound", "set max_lag", nil},
		{"a lag bound no policy reads",
			[]string{"overload.max_lag", "1000"},
			"overload.max_lag", "would be ignored", "declare `policy: admission` or `policy: shed`", nil},
		{"shed without a predicate",
			[]string{"overload.policy", "shed", "overload.max_lag", "1000"},
			"overload.shed", "no shed predicate", "declare `shed:", nil},
		{"a shed predicate no policy reads",
			[]string{"overload.shed", "{field: kind, values: [person]}"},
			"overload.shed", "would be ignored", "declare `policy: shed`", nil},
		{"window state expiring before its lateness",
			[]string{"state.families[1]", "{name: win, kind: map, bound: window, ttl: 1m, max_keys: 10, on_limit: fail}", "operators[0].state", "[seen, win]",
				"emission.allowed_lateness", "5m", "emission.triggers.late", "{each: true}", "emission.window", "{kind: tumbling, size: 10s}"},
			"state.families[1].ttl", "would be dropped before the window fires", "set it over 5m12s", nil},
		// 4b. The window shape (emission.window).
		{"unknown window kind",
			[]string{"emission.window", "{kind: hopping, size: 10s}"},
			"emission.window.kind", `"hopping" is not one of`, "tumbling, sliding, session, global", nil},
		{"slide that does not divide the size",
			[]string{"emission.window", "{kind: sliding, size: 10s, slide: 3s}"},
			"emission.window.slide", "not a multiple of slide 3s", "divides the size", nil},
		{"tumbling window with a gap",
			[]string{"emission.window", "{kind: tumbling, size: 10s, gap: 5s}"},
			"emission.window.gap", "a tumbling window has no gap", "remove gap", nil},
		{"session without a gap",
			[]string{"emission.window", "{kind: session}"},
			"emission.window.gap", "missing, and it has no default", "gap: 10s", nil},
		{"window of a fraction of a millisecond",
			[]string{"emission.window", "{kind: tumbling, size: 1500us}"},
			"emission.window.size", "not a whole number of milliseconds", "round it", nil},
		{"window state without a window",
			[]string{"state.families[1]", windowFamily, "operators[0].state", "[seen, win]"},
			"state.families[1].bound", `family "win" is bounded by its window, and the contract declares no window`, "window: {kind: tumbling, size: 10s}", nil},
		{"tumbling window nothing keeps",
			[]string{"emission.window", "{kind: tumbling, size: 10s}"},
			"emission.window", "no state family is bounded by it (bound: window): no operator keeps windows", "remove emission.window", nil},
		{"session window kept under a ttl",
			[]string{"emission.window", "{kind: session, gap: 10s}", "state.families[1]", "{name: win, kind: map, bound: ttl, ttl: 1h, max_keys: 10, on_limit: fail}",
				"operators[0].state", "[seen, win]"},
			"emission.window", "a session window is declared, and no state family is bounded by it", "`bound: window`", nil},
		{"window state in a global window",
			[]string{"emission.window", "{kind: global}", "emission.triggers", "{early: {every: 1s}}",
				"state.families[1]", windowFamily, "operators[0].state", "[seen, win]"},
			"state.families[1].bound", "a global window never ends, so nothing bounds it", "bound: ttl", nil},
		{"global window without an early trigger",
			[]string{"emission.window", "{kind: global}", "emission.triggers", "{}"},
			"emission.triggers.early", "only early triggers emit its panes", "early: {every: 1m}", nil},
		{"tumbling window without its on-time pane",
			[]string{"emission.window", "{kind: tumbling, size: 10s}", "emission.triggers", "{early: {count: 10}, on_time: false}",
				"state.families[1]", windowFamily, "operators[0].state", "[seen, win]"},
			"emission.triggers.on_time", "completes with its on-time pane", "on_time: true", nil},
		{"window state without a dead-letter stream",
			[]string{"emission.window", "{kind: tumbling, size: 10s}", "state.families[1]", windowFamily,
				"operators[1]", "{id: count, service: count, input: deduped, keying: key, state: [win], dead_letter: false}"},
			"operators[1].dead_letter", "keeps window state", "dead_letter: true", nil},
		{"frame smaller than a message",
			[]string{"overload.frame_max_bytes", "1000"},
			"overload.frame_max_bytes", "cannot fit in a frame", "at least 65536", nil},

		// 5. Graph.
		{"unknown input",
			[]string{"operators[1]", "{id: sink, service: sink, input: dedupd, keying: key, state: [], dead_letter: false}"},
			"operators[1].input", `"dedupd" is neither ingress nor a declared edge`, "correct the name", nil},
		{"unknown output",
			[]string{"operators[0].output", "dedupd"},
			"operators[0].output", "not a declared edge", "declare the edge", nil},
		{"output to ingress",
			[]string{"operators[0].output", "ingress"},
			"operators[0].output", "never writes the ingress", "internal edge", nil},
		{"duplicate operator id",
			[]string{"operators[1]", "{id: dedup, service: sink, input: deduped, keying: key, state: [], dead_letter: false}"},
			"operators[1].id", "used twice", "own stable id", nil},
		{"duplicate edge",
			[]string{"edges[1]", "{name: deduped, partitions: 4, retention: 24h}"},
			"edges[1].name", "declared twice", "own name", nil},
		{"edge named ingress",
			[]string{"edges[1]", "{name: ingress, partitions: 4, retention: 24h}"},
			"edges[1].name", "reserved", "another edge name", nil},
		{"two writers",
			[]string{"operators[1]", "{id: again, service: dedup, input: ingress, output: deduped, keying: key, state: [], dead_letter: true}"},
			"operators[1].output", "already written by operators[0]", "own output edge", nil},
		{"edge nobody writes",
			[]string{"edges[1]", "{name: orphan, partitions: 4, retention: 24h}"},
			"edges[1].name", "no operator writes", "remove it", nil},
		{"cycle",
			[]string{"edges[1]", "{name: ping, partitions: 4, retention: 24h}", "edges[2]", "{name: pong, partitions: 4, retention: 24h}",
				"operators[1]", "{id: a, service: a, input: ping, output: pong, keying: key, state: [], dead_letter: false}",
				"operators[2]", "{id: b, service: b, input: pong, output: ping, keying: key, state: [], dead_letter: false}"},
			"operators[1].input", "loops (a <- b <- a)", "break the cycle", []string{"operators[2].input"}},
		{"ingress reader without dead letters",
			[]string{"operators[0].dead_letter", "false", "state.families[0].on_limit", "fail"},
			"operators[0].dead_letter", "no dead-letter stream", "dead_letter: true", nil},
		{"no edges",
			[]string{"edges", "[]", "operators[0].output", "DELETE"},
			"edges", "no internal edges", "declare the edges", nil},
		{"no operators",
			[]string{"operators", "[]"},
			"operators", "does nothing", "declare at least", nil},

		// 5. Identity.
		{"json without field",
			[]string{"identity.id", "{from: json}"},
			"identity.id.field", "needs field", "field: id", nil},
		{"header without header",
			[]string{"identity.producer", "{from: header, optional: true}"},
			"identity.producer.header", "needs header", "header: Weir-Producer", nil},
		{"json with stray header",
			[]string{"identity.key.header", "X-Key"},
			"identity.key.header", "from is json", "remove header", nil},
		{"bad json path",
			[]string{"identity.key.field", "a..b"},
			"identity.key.field", "not a dotted JSON path", "bid.auction", nil},
		{"format on id",
			[]string{"identity.id.format", "unix-ms"},
			"identity.id.format", "only to identity.event_time", "remove format", nil},
		{"optional id",
			[]string{"identity.id.optional", "true"},
			"identity.id.optional", "cannot be optional", "remove `optional: true`", nil},
		{"unknown time format",
			[]string{"identity.event_time.format", "unix-s"},
			"identity.event_time.format", `"unix-s" is not one of unix-ms, rfc3339`, "set format", nil},
		{"unknown source",
			[]string{"identity.key.from", "payload"},
			"identity.key.from", "not one of json, header", "set from", nil},
		// Versioned decoders (I3).
		{"schema decoder dropped before its replay horizon",
			[]string{"identity.schema", `{version: {from: header, header: Weir-Schema}, current: "2", older: [{version: "1", id: {from: json, field: event_id}, key: {from: json, field: user}, event_time: {from: json, field: time, format: rfc3339}, written_until: "2999-01-01T00:00:00Z", dropped: true}]}`},
			"identity.schema.older[0].dropped", "a replay may read its records until 2999-01-02T00:00:00Z", "keep its decoder", nil},
		{"schema decoder dropped without written_until",
			[]string{"identity.schema", `{version: {from: header, header: Weir-Schema}, current: "2", older: [{version: "1", id: {from: json, field: event_id}, key: {from: json, field: user}, event_time: {from: json, field: time, format: rfc3339}, dropped: true}]}`},
			"identity.schema.older[0].dropped", "does not say when producers stopped", "written_until", nil},
		{"schema written_until not a time",
			[]string{"identity.schema", `{version: {from: header, header: Weir-Schema}, current: "2", older: [{version: "1", id: {from: json, field: event_id}, key: {from: json, field: user}, event_time: {from: json, field: time, format: rfc3339}, written_until: "last week"}]}`},
			"identity.schema.older[0].written_until", "not an RFC 3339 time", "written_until: 2026", nil},
		{"schema version declared twice",
			[]string{"identity.schema", `{version: {from: header, header: Weir-Schema}, current: "1", older: [{version: "1", id: {from: json, field: event_id}, key: {from: json, field: user}, event_time: {from: json, field: time, format: rfc3339}}]}`},
			"identity.schema.older[0].version", "already declared at identity.schema.current", "its own version", nil},
		{"older schema without event time",
			[]string{"identity.schema", `{version: {from: json, field: schema}, current: "2", older: [{version: "1", id: {from: json, field: event_id}, key: {from: json, field: user}}]}`},
			"identity.schema.older[0].event_time", `schema "1" does not say where its events' time is`, "event_time:", nil},
		{"older schema field checked like the current ones",
			[]string{"identity.schema", `{version: {from: header, header: Weir-Schema}, current: "2", older: [{version: "1", id: {from: json}, key: {from: json, field: user}, event_time: {from: json, field: time, format: rfc3339}}]}`},
			"identity.schema.older[0].id.field", "needs field", "field: id", nil},
		{"unnamed names no declared schema",
			[]string{"identity.schema", `{version: {from: header, header: Weir-Schema}, current: "2", unnamed: "0", older: [{version: "1", id: {from: json, field: event_id}, key: {from: json, field: user}, event_time: {from: json, field: time, format: rfc3339}}]}`},
			"identity.schema.unnamed", `"0" is neither current nor an older version`, "name a declared version", nil},
		{"optional schema version",
			[]string{"identity.schema", `{version: {from: header, header: Weir-Schema, optional: true}, current: "2"}`},
			"identity.schema.version.optional", "identity.schema.unnamed", "set identity.schema.unnamed", nil},
		{"older schema without the required producer",
			[]string{"identity.producer", "{from: header, header: Weir-Producer}", "identity.schema", `{version: {from: header, header: Weir-Schema}, current: "2", older: [{version: "1", id: {from: json, field: event_id}, key: {from: json, field: user}, event_time: {from: json, field: time, format: rfc3339}}]}`},
			"identity.schema.older[0].producer", "its records would carry none", "add `producer:`", nil},
		{"schema without current",
			[]string{"identity.schema", `{version: {from: header, header: Weir-Schema}}`},
			"identity.schema.current", "missing", `current: "2"`, nil},

		// Ingress and header fields.
		{"subject under weir",
			[]string{"ingress.subject_prefix", "weir.events"},
			"ingress.subject_prefix", "weir-owned edges", "subject prefix of your own", nil},
		{"wildcard subject",
			[]string{"ingress.subject_prefix", "nexmark.*"},
			"ingress.subject_prefix", "not a literal subject", "literal prefix", nil},
		{"bad stream name",
			[]string{"ingress.stream", "nex.mark"},
			"ingress.stream", "not a JetStream stream name", "without spaces", nil},
		{"unknown offsets",
			[]string{"ingress.offsets", "timestamp"},
			"ingress.offsets", "not one of stream-sequence", "stream-sequence", nil},
		{"no partitions",
			[]string{"ingress.partitions", "0"},
			"ingress.partitions", "less than 1", "partitions: 4", nil},
		{"zero retention",
			[]string{"ingress.retention", "0s"},
			"ingress.retention", "longer than 0s", "retention: 24h", nil},
		{"duplicate window past the retention",
			[]string{"ingress.retention", "1h", "ingress.duplicate_window", "2h"},
			"ingress.duplicate_window", "longer than the stream keeps messages", "at most 1h", nil},
		{"duplicate window JetStream refuses",
			[]string{"ingress.duplicate_window", "50ms"},
			"ingress.duplicate_window", "shorter than JetStream accepts", "at least the time a producer takes", nil},
		{"zero duplicate window",
			[]string{"ingress.duplicate_window", "0s"},
			"ingress.duplicate_window", "longer than 0s", "duplicate_window: 20s", nil},
		{"no ingress streams",
			[]string{"ingress.streams", "0"},
			"ingress.streams", "less than 1", "streams: 4", nil},
		{"more ingress streams than partitions",
			[]string{"ingress.streams", "5"},
			"ingress.streams", "5 streams for 4 partitions", "at most 4", nil},
		{"bad pipeline name",
			[]string{"pipeline", "Nexmark"},
			"pipeline", "not a valid name", "lowercase", nil},
		{"future version",
			[]string{"version", "2"},
			"version", "version 2 is not supported", "version: 1", nil},
		{"missing section",
			[]string{"sink", "DELETE"},
			"sink", "missing, and it has no default", "sink:", nil},
		{"missing field",
			[]string{"ingress.stream", "DELETE"},
			"ingress.stream", "missing, and it has no default", "stream: NEXMARK", nil},
		{"unknown on_future",
			[]string{"time.on_future", "later"},
			"time.on_future", `"later" is not one of`, "clamp", nil},
		{"zero max recovery time",
			[]string{"recovery.max_recovery_time", "0s"},
			"recovery.max_recovery_time", "longer than 0s", "5m", nil},
		{"negative retained checkpoints",
			[]string{"recovery.retained_checkpoints", "-1"},
			"recovery.retained_checkpoints", "at least its latest checkpoint", "1 or more", nil},
		{"retained checkpoints without checkpoints",
			[]string{"recovery.checkpoint_interval", "0s", "recovery.retained_checkpoints", "5"},
			"recovery.retained_checkpoints", "would be ignored", "remove retained_checkpoints", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("x.yaml", edit(t, readBase(t), tc.edits...))
			if err != nil {
				t.Fatal(err)
			}
			problems := c.Lint()
			var got []string
			var hit *Problem
			for i, p := range problems {
				got = append(got, p.Field)
				if p.Field == tc.field && hit == nil {
					hit = &problems[i]
				}
			}
			want := append([]string{tc.field}, tc.also...)
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("problem fields %v, want %v:\n%s", got, want, (&Invalid{problems}).Error())
			}
			if !strings.Contains(hit.Why, tc.why) {
				t.Errorf("why %q does not say %q", hit.Why, tc.why)
			}
			if !strings.Contains(hit.Fix, tc.fix) {
				t.Errorf("fix %q does not say %q", hit.Fix, tc.fix)
			}
			if hit.Line <= 0 || hit.File != "x.yaml" {
				t.Errorf("problem at %s:%d, want x.yaml and a line", hit.File, hit.Line)
			}
		})
	}
}

// TestLintDeletionReachesAnOutbox: a deletion policy is accepted with an
// outbox whose writer keys its state by key — weir erase finds the key's
// intents and outcomes by the erasure names each intent carries — as on
// the shipped auction flow.
// TestLintWindowStateTTL: state a window operator keeps under a TTL must
// outlive its windows — the window's length (a session's gap), the
// allowed lateness and the watermark's delay. Before the window shape was
// in the contract Lint held the TTL only to out_of_orderness plus
// allowed_lateness (7s for q7), so a q7 with `ttl: 10s` passed it and
// was refused only when the operator started.
func TestLintWindowStateTTL(t *testing.T) {
	for _, tc := range []struct {
		file, ttl string
		refused   bool
		need      string
	}{
		{"nexmark-q7.yaml", "10s", true, "17s"}, // tumbling 10s + lateness 5s + out_of_orderness 2s
		{"nexmark-q7.yaml", "17s", true, "17s"}, // at the bound: expires as the window's last moment passes
		{"nexmark-q7.yaml", "18s", false, ""},
		{"nexmark-q11.yaml", "15s", true, "17s"}, // session gap 10s + 5s + 2s
		{"nexmark-q5.yaml", "11s", true, "12s"},  // sliding 10s, no lateness, + 2s
		{"nexmark-q5.yaml", "1m", false, ""},
	} {
		data, err := os.ReadFile(tc.file)
		if err != nil {
			t.Fatal(err)
		}
		family := "q7-windows"
		switch tc.file {
		case "nexmark-q11.yaml":
			family = "q11-sessions"
		case "nexmark-q5.yaml":
			family = "q5-counts"
		}
		c, err := Parse(tc.file, edit(t, data, "state.families[0].ttl", tc.ttl))
		if err != nil {
			t.Fatal(err)
		}
		ps := c.Lint()
		if !tc.refused {
			if len(ps) > 0 {
				t.Errorf("%s with ttl %s: %v", tc.file, tc.ttl, ps)
			}
			continue
		}
		if len(ps) != 1 || ps[0].Field != "state.families[0].ttl" {
			t.Fatalf("%s with ttl %s: got %v, want one problem at state.families[0].ttl", tc.file, tc.ttl, ps)
		}
		for _, want := range []string{`family "` + family + `"`, "expires an entry " + tc.ttl, "must outlive " + tc.need} {
			if !strings.Contains(ps[0].Why, want) {
				t.Errorf("%s: why %q does not say %q", tc.file, ps[0].Why, want)
			}
		}
		if !strings.Contains(ps[0].Fix, "set it over "+tc.need) {
			t.Errorf("%s: fix %q does not name the bound %s", tc.file, ps[0].Fix, tc.need)
		}
	}
}

func TestLintDeletionReachesAnOutbox(t *testing.T) {
	data, err := os.ReadFile("nexmark-winning-bids.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse("nexmark-winning-bids.yaml", append(data, "\ndeletion:\n  within: 48h\n  replay: erasure-wins\n"...))
	if err != nil {
		t.Fatal(err)
	}
	if c.Sink.Effect != EffectOutbox {
		t.Fatalf("sink.effect %s, want the auction flow's outbox", c.Sink.Effect)
	}
	if ps := c.Lint(); len(ps) > 0 {
		t.Fatalf("an outbox written by key with a deletion policy: %v", (&Invalid{ps}).Error())
	}
}

// TestLintSchemaHorizon checks a dropped decoder against the clock: refused
// until its written_until plus the ingress retention (24h), allowed after.
func TestLintSchemaHorizon(t *testing.T) {
	c, err := Parse("x.yaml", edit(t, readBase(t), "identity.schema",
		`{version: {from: json, field: schema}, current: "2", unnamed: "1", older: [{version: "1", id: {from: json, field: event_id}, key: {from: json, field: user}, event_time: {from: json, field: time, format: rfc3339}, written_until: "2026-11-20T00:00:00Z", dropped: true}]}`))
	if err != nil {
		t.Fatal(err)
	}
	horizon := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	if ps := c.LintAt(horizon.Add(-time.Second)); len(ps) != 1 || ps[0].Field != "identity.schema.older[0].dropped" {
		t.Errorf("a second before the horizon: %v, want the dropped decoder refused", ps)
	}
	if ps := c.LintAt(horizon); len(ps) > 0 {
		t.Errorf("at the horizon: %s", (&Invalid{ps}).Error())
	}
	if !c.Identity.Schema.Declared() || c.Identity.Schema.Older[0].Version != "1" || c.Identity.Schema.Unnamed != "1" {
		t.Errorf("parsed %+v", c.Identity.Schema)
	}
}

func TestLintBaseIsClean(t *testing.T) {
	c, err := Parse("x.yaml", edit(t, readBase(t)))
	if err != nil {
		t.Fatal(err)
	}
	if ps := c.Lint(); len(ps) > 0 {
		t.Fatal((&Invalid{ps}).Error())
	}
}

func TestLintReportsAllInFileOrder(t *testing.T) {
	c, err := Parse("x.yaml", edit(t, readBase(t),
		"overload.fetch_batch", "4096",
		"state.families[0].ttl", "1m",
		"ingress.retention", "2m",
	))
	if err != nil {
		t.Fatal(err)
	}
	ps := c.Lint()
	var fields []string
	for i, p := range ps {
		fields = append(fields, p.Field)
		if i > 0 && ps[i-1].Line > p.Line {
			t.Errorf("problems out of file order: line %d before %d", ps[i-1].Line, p.Line)
		}
	}
	want := []string{"ingress.retention", "state.families[0].ttl", "overload.fetch_batch"}
	if !slices.Equal(fields, want) {
		t.Fatalf("fields %v, want %v", fields, want)
	}
}

func TestLintLineOfMissingFieldIsItsParent(t *testing.T) {
	data := edit(t, readBase(t), "state.families[0].max_keys", "DELETE")
	c, err := Parse("x.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	ps := c.Lint()
	if len(ps) != 1 {
		t.Fatalf("got %v", ps)
	}
	line := strings.Split(string(data), "\n")[ps[0].Line-1]
	if !strings.Contains(line, "- name: seen") {
		t.Errorf("missing max_keys reported at line %d %q, want the family's line", ps[0].Line, line)
	}
}

func TestLintContractBuiltInGo(t *testing.T) {
	c, err := Load("nexmark-dedup.yaml")
	if err != nil {
		t.Fatal(err)
	}
	built := *c
	built.index, built.File = nil, ""
	if ps := built.Lint(); len(ps) > 0 {
		t.Fatalf("a contract built in Go with the same values has problems:\n%v", ps)
	}
	built.Operators = slices.Clone(built.Operators)
	built.Operators[0].Input = "nowhere"
	ps := built.Lint()
	if len(ps) != 1 || ps[0].Line != 0 || ps[0].String() != `contract: operators[0].input: input "nowhere" is neither ingress nor a declared edge; fix: correct the name, or declare the edge under edges` {
		t.Fatalf("got %q", fmt.Sprint(ps))
	}
	if err := built.Validate(); err == nil {
		t.Fatal("Validate accepted an invalid contract")
	}
	var zero Contract
	if ps := zero.Lint(); len(ps) < 20 {
		t.Fatalf("the zero contract has only %d problems", len(ps))
	}
}

func TestEdgeFormat(t *testing.T) {
	data, err := os.ReadFile("testdata/lint-base.yaml")
	if err != nil {
		t.Fatal(err)
	}
	lint := func(text string) []string {
		c, err := Parse("x.yaml", []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		var fields []string
		for _, p := range c.Lint() {
			fields = append(fields, p.Field)
		}
		return fields
	}
	text := strings.Replace(string(data), "retention: 24h\n\noperators:", "retention: 24h\n    format: xml\n\noperators:", 1)
	if text == string(data) {
		t.Fatal("test contract did not change; has nexmark-dedup.yaml's edges section moved?")
	}
	if got := lint(text); len(got) != 1 || got[0] != "edges[0].format" {
		t.Fatalf("unknown format: problems at %v", got)
	}
	text = strings.Replace(text, "format: xml", "format: json", 1) +
		"  - {id: reader, service: x, input: deduped, keying: key, state: [], dead_letter: true}\n"
	if got := lint(text); len(got) != 1 || got[0] != "operators[1].input" {
		t.Fatalf("operator reading a json edge: problems at %v, want operators[1].input", got)
	}
}
