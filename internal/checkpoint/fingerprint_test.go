package checkpoint

import (
	"strings"
	"testing"
	"time"
)

// TestMeaningChanges: what changes the meaning of kept state is semantic;
// what only widens a bound, or adds an empty family, is not.
func TestMeaningChanges(t *testing.T) {
	base := Meaning{SchemaVersion: 1, KeyGroups: 256, Partitions: 4, Key: "key json key",
		Families: []FamilyMeaning{{Name: "w", Kind: "map", Bound: "window", MaxKeys: 1000}, {Name: "seen", Kind: "value", TTL: time.Hour, MaxKeys: 10}},
		Time:     "event, watermark bounded-out-of-orderness, out_of_orderness 2s", Emission: "mode upsert, triggers [on-time]", Window: "tumbling 10s",
		Schemas: []string{"2: id json id", "1: id json event_id", "0: id json old (dropped)"}}
	for _, tc := range []struct {
		name     string
		change   func(*Meaning)
		field    string
		semantic bool
	}{
		{"key selection", func(m *Meaning) { m.Key = "key json bidder" }, "key selection", true},
		{"key groups", func(m *Meaning) { m.KeyGroups = 512 }, "state.key_groups", true},
		{"partitions", func(m *Meaning) { m.Partitions = 8 }, "input partitions", true},
		{"triggers", func(m *Meaning) { m.Emission = "mode upsert, triggers [early, on-time]" }, "emission", true},
		{"window shape", func(m *Meaning) { m.Window = "tumbling 1m" }, "emission.window", true},
		{"watermark", func(m *Meaning) { m.Time = "event, watermark bounded-out-of-orderness, out_of_orderness 5s" }, "time and progress", true},
		{"shorter ttl", func(m *Meaning) { m.Families[1].TTL = time.Minute }, "state family seen ttl", true},
		{"longer ttl", func(m *Meaning) { m.Families[1].TTL = 2 * time.Hour }, "state family seen ttl", false},
		{"kind", func(m *Meaning) { m.Families[1].Kind = "list" }, "state family seen kind", true},
		{"family dropped", func(m *Meaning) { m.Families = m.Families[:1] }, "state family seen", true},
		{"family added", func(m *Meaning) {
			m.Families = append(m.Families, FamilyMeaning{Name: "new", Kind: "value", MaxKeys: 1})
		}, "state family new", false},
		{"larger bound", func(m *Meaning) { m.Families[0].MaxKeys = 2000 }, "state family w max_keys", false},
		{"schema", func(m *Meaning) { m.SchemaVersion = 2 }, "state schema version", true},
		{"ingress schema removed", func(m *Meaning) { m.Schemas = []string{"2: id json id", "0: id json old (dropped)"} }, "identity.schema version 1", true},
		{"ingress schema read otherwise", func(m *Meaning) { m.Schemas = []string{"2: id json id", "1: id json uid", "0: id json old (dropped)"} }, "identity.schema version 1 fields", true},
	} {
		to := base
		to.Families = append([]FamilyMeaning{}, base.Families...)
		tc.change(&to)
		changes := base.Changes(to)
		if len(changes) != 1 || changes[0].Field != tc.field || changes[0].Semantic != tc.semantic || Semantic(changes) != tc.semantic {
			t.Errorf("%s: changes %v, want one on %q, semantic %t", tc.name, changes, tc.field, tc.semantic)
		}
	}
	for _, field := range []string{"state.key_groups", "input partitions", "state family seen kind", "state schema version"} {
		to := base
		to.Families = append([]FamilyMeaning{}, base.Families...)
		switch field {
		case "state.key_groups":
			to.KeyGroups = 128
		case "input partitions":
			to.Partitions = 2
		case "state family seen kind":
			to.Families[1].Kind = "map"
		case "state schema version":
			to.SchemaVersion = 3
		}
		if c := base.Changes(to); len(c) != 1 || !Incompatible(c) {
			t.Errorf("%s: changes %v, want one incompatible: the state cannot be read", field, c)
		}
	}
	// The input and chain an operator reads through (operators[].before):
	// its positions and what built its state; for a stateless operator
	// too, since its positions are in it. A snapshot from before it was
	// recorded is not compared.
	withInput := base
	withInput.Input = "bids"
	for _, m := range []Meaning{withInput, {SchemaVersion: 1, KeyGroups: 256, Partitions: 4, Input: "bids"}} {
		to := m
		to.Input = "ingress through q7-key"
		if c := m.Changes(to); len(c) != 1 || c[0].Field != "input" || !Incompatible(c) {
			t.Errorf("input bids -> ingress through q7-key: changes %v, want one incompatible on input", c)
		}
	}
	if c := base.Changes(withInput); len(c) != 0 {
		t.Errorf("a snapshot without its input recorded: changes %v, want none", c)
	}
	// A stateless operator has nothing keyed, spread or held.
	stateless := Meaning{SchemaVersion: 1, KeyGroups: 256, Partitions: 4}
	if c := stateless.Changes(Meaning{SchemaVersion: 1, KeyGroups: 512, Partitions: 8}); len(c) != 0 {
		t.Errorf("a stateless operator's key groups and partitions changed its meaning: %v", c)
	}
	if c := base.Changes(base); len(c) != 0 {
		t.Errorf("the same meaning changed: %v", c)
	}
	// A schema dropped (the linter held it to its replay horizon) or added
	// changes nothing a restore must refuse.
	later := base
	later.Schemas = []string{"3: id json key", "2: id json id", "1: id json event_id (dropped)", "0: id json old (dropped)"}
	if c := base.Changes(later); len(c) != 0 {
		t.Errorf("a schema dropped and one added: %v", c)
	}
	unknown := base
	unknown.SchemaVersion = 0
	if c := base.Changes(unknown); len(c) != 0 || !strings.Contains(Change{Field: "f", Was: "a", Is: "b", Semantic: true, Why: "w"}.String(), "semantic") {
		t.Errorf("an unknown schema version was compared: %v", c)
	}
}
