package checkpoint

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Meaning is what an operator's state means, recorded with every snapshot
// (Manifest.Meaning) so that a build restoring it can tell whether it
// reads the state as it was written: the state's schema, how keys were
// chosen and spread over key groups, its families' kinds, lifetimes and
// bounds, and the time and emission policy its timers and windows follow.
type Meaning struct {
	SchemaVersion int `json:"schema_version"`
	KeyGroups     int `json:"key_groups"`
	// Partitions is how many input partitions the operator reads.
	Partitions int `json:"partitions"`
	// Key is how state is keyed: the record ID, or the key identity.key
	// takes from each ingress record, and the split of a hot key.
	Key      string          `json:"key"`
	Families []FamilyMeaning `json:"families"`
	// Time is the time domain and watermark policy; Emission the window
	// triggers, accumulation and allowed lateness.
	Time     string `json:"time"`
	Emission string `json:"emission"`
	// Window is the window shape (emission.window): which windows a
	// record belongs to. A snapshot of a build that did not record it
	// holds "" and is not compared.
	Window string `json:"window,omitempty"`
	// Schemas are the ingress schema versions the contract declares
	// (identity.schema), each "<version>: <its identity fields>", a
	// dropped one with " (dropped)": an operator reading the ingress may
	// have to read any of them again in a replay.
	Schemas []string `json:"schemas,omitempty"`
	// Input is what the operator reads — "ingress" or an edge's name —
	// and, after " through ", the stateless operators chained into its
	// step (operators[].before): where its positions are, and what its
	// state was built from. A snapshot of a build that did not record it
	// holds "" and is not compared.
	Input string `json:"input,omitempty"`
}

// FamilyMeaning is one state family as a snapshot records it.
type FamilyMeaning struct {
	Name    string        `json:"name"`
	Kind    string        `json:"kind"`
	TTL     time.Duration `json:"ttl,omitempty"`
	Bound   string        `json:"bound,omitempty"`
	MaxKeys int64         `json:"max_keys"`
}

// Change is one difference between the meaning a snapshot was taken with
// and the one a build would restore it with.
type Change struct {
	Field string `json:"field"`
	Was   string `json:"was"`
	Is    string `json:"is"`
	// Semantic says the change alters what results mean — which keys
	// state is kept by, what it holds, which records are late, which
	// revisions are emitted — so restoring the old state into the new
	// build is a semantic migration, refused unless declared.
	Semantic bool `json:"semantic"`
	// Incompatible says the new build cannot read the state at all —
	// other key groups, partitions or a family's shape: no declaration
	// lets it restore; the change runs as a shadow generation.
	Incompatible bool   `json:"incompatible,omitempty"`
	Why          string `json:"why"`
}

func (c Change) String() string {
	kind := "compatible"
	switch {
	case c.Incompatible:
		kind = "incompatible"
	case c.Semantic:
		kind = "semantic"
	}
	return fmt.Sprintf("%s: %s -> %s (%s: %s)", c.Field, c.Was, c.Is, kind, c.Why)
}

// Changes lists how to differs from m, the meaning of a snapshot; a
// schema version of 0 on either side (unknown) is not compared.
func (m Meaning) Changes(to Meaning) []Change {
	var out []Change
	add := func(field, was, is string, semantic bool, why string) {
		if was != is {
			out = append(out, Change{Field: field, Was: was, Is: is, Semantic: semantic, Why: why})
		}
	}
	unreadable := func(field, was, is, why string) {
		if was != is {
			out = append(out, Change{Field: field, Was: was, Is: is, Semantic: true, Incompatible: true, Why: why})
		}
	}
	itoa := strconv.Itoa
	if m.SchemaVersion != 0 && to.SchemaVersion != 0 {
		unreadable("state schema version", itoa(m.SchemaVersion), itoa(to.SchemaVersion), "the build reads its state in another layout")
	}
	if m.Input != "" {
		unreadable("input", m.Input, to.Input, "the snapshot's positions are in the old input, and its state was built from what the old chain handed on: start a new generation (weir shadow)")
	}
	// Only kept state is keyed, spread over key groups and partitions,
	// and held by a watermark and emission policy: a snapshot without it
	// has nothing to reinterpret.
	if len(m.Families) > 0 && len(to.Families) > 0 {
		unreadable("state.key_groups", itoa(m.KeyGroups), itoa(to.KeyGroups), "every key moves to another key group, where the old state cannot be found: rebuild it in a shadow generation")
		unreadable("input partitions", itoa(m.Partitions), itoa(to.Partitions), "key groups move to other partitions, whose state and positions the old snapshots do not hold: rebuild it in a shadow generation")
		if m.Key != "" {
			add("key selection", m.Key, to.Key, true, "changing key selection (identity, operators[].keying, edges[].split) redistributes state: the state must be rebuilt")
		}
		if m.Time != "" {
			add("time and progress", m.Time, to.Time, true, "another event time or watermark policy changes which records are late and when windows close")
		}
		if m.Emission != "" {
			add("emission", m.Emission, to.Emission, true, "another trigger, accumulation or lateness policy changes which revisions are emitted, even when final values match")
		}
		if m.Window != "" {
			add("emission.window", m.Window, to.Window, true, "another window shape puts records in other windows: the state holds windows of the old shape, which would fire as they are beside the new build's")
		}
	}
	// A schema version the contract no longer lists at all was never
	// checked against the replay horizon (the linter checks only what is
	// listed, dropped or not); one listed on both sides must read its
	// records by the same fields.
	schemas := map[string]string{}
	for _, v := range to.Schemas {
		name, fields := splitSchema(v)
		schemas[name] = fields
	}
	for _, v := range m.Schemas {
		name, fields := splitSchema(v)
		now, ok := schemas[name]
		switch {
		case !ok:
			add("identity.schema version "+name, "declared", "absent", true,
				"a replay may still read records of it, and each would be a dead letter: keep it listed, with `dropped: true` once its written_until and the ingress retention have passed, which the linter checks")
		case fields != "" && now != "":
			add("identity.schema version "+name+" fields", fields, now, true,
				"its records already read were keyed and timed by the old fields; a replay would read them otherwise")
		}
	}
	was := map[string]FamilyMeaning{}
	for _, f := range m.Families {
		was[f.Name] = f
	}
	for _, f := range to.Families {
		o, ok := was[f.Name]
		delete(was, f.Name)
		p := "state family " + f.Name
		if !ok {
			add(p, "absent", f.Kind, false, "a new family starts empty")
			continue
		}
		unreadable(p+" kind", o.Kind, f.Kind, "its entries would be read as another shape")
		add(p+" bound", o.Bound, f.Bound, true, "its entries would be kept by another rule")
		if o.TTL != f.TTL {
			// Each entry keeps the expiry it was written with.
			shorter := f.TTL != 0 && (o.TTL == 0 || f.TTL < o.TTL)
			why := "new entries are kept longer; restored ones still expire when the old TTL said"
			if shorter {
				why = "new entries are forgotten sooner — a duplicate or counterpart the old TTL caught now passes — while restored ones expire when the old TTL said"
			}
			add(p+" ttl", o.TTL.String(), f.TTL.String(), shorter, why)
		}
		if o.MaxKeys != f.MaxKeys {
			why := "a larger bound"
			if f.MaxKeys < o.MaxKeys {
				why = "a smaller bound: a state already fuller fails or dead-letters at its next write"
			}
			add(p+" max_keys", strconv.FormatInt(o.MaxKeys, 10), strconv.FormatInt(f.MaxKeys, 10), false, why)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(was)) {
		add("state family "+name, was[name].Kind, "absent", true, "its state would be dropped")
	}
	return out
}

// splitSchema parses an entry of Meaning.Schemas, "<version>: <fields>"
// with an optional " (dropped)", into the version and its fields (empty in
// entries written before the fields were recorded).
func splitSchema(v string) (name, fields string) {
	v = strings.TrimSuffix(v, " (dropped)")
	name, fields, _ = strings.Cut(v, ": ")
	return name, fields
}

// Incompatible reports whether any change makes the state unreadable.
func Incompatible(changes []Change) bool {
	for _, c := range changes {
		if c.Incompatible {
			return true
		}
	}
	return false
}

// Semantic reports whether any change is semantic.
func Semantic(changes []Change) bool {
	for _, c := range changes {
		if c.Semantic {
			return true
		}
	}
	return false
}
