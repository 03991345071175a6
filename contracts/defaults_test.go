package contracts

import (
	"bytes"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestDefaultsMeanTheSame: a contract written out in full and the same
// contract relying on its defaults are one contract — one canonical form,
// one fingerprint — and so is every shipped contract and its effective
// form, which states every field.
func TestDefaultsMeanTheSame(t *testing.T) {
	full, err := Load("testdata/nexmark-q7-full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	short, err := Load("nexmark-q7.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(full.Canonical(), short.Canonical()) {
		t.Errorf("q7 in full and q7 relying on defaults differ:\n%s\n---\n%s", full.Canonical(), short.Canonical())
	}
	for _, name := range ShippedNames() {
		c, err := Shipped(name)
		if err != nil {
			t.Fatal(err)
		}
		written, err := Parse(name+"-effective.yaml", c.Effective())
		if err != nil {
			t.Fatalf("%s: the effective contract does not parse: %v", name, err)
		}
		if ps := written.Lint(); len(ps) > 0 {
			t.Errorf("%s: the effective contract does not lint: %v", name, ps)
		}
		if written.Fingerprint() != c.Fingerprint() {
			t.Errorf("%s: the effective contract has another fingerprint", name)
		}
		for field, pos := range written.index {
			if pos.defaulted {
				t.Errorf("%s: the effective contract leaves %s to its default", name, field)
			}
		}
	}
}

// TestStatingDefaultsChangesNothing strips from a contract written out in
// full (testdata/lint-base.yaml) every field whose value is its default's,
// one at a time and all together: the contract stays the same.
func TestStatingDefaultsChangesNothing(t *testing.T) {
	base := readBase(t)
	c, err := Parse("base.yaml", base)
	if err != nil {
		t.Fatal(err)
	}
	root := reflect.ValueOf(c).Elem()
	var stripped []string
	for _, d := range defaults {
		for _, path := range expand(root, d.Field) {
			if pos := c.index[path]; pos.defaulted || pos.line == 0 {
				continue // not in the file
			}
			text, ok := d.text(c)
			if !ok {
				continue
			}
			want := reflect.New(lookup(root, path).Type()).Elem()
			(&decoder{index: map[string]position{}}).set(want, path, text)
			if !reflect.DeepEqual(want.Interface(), lookup(root, path).Interface()) {
				continue // the file says something else
			}
			stripped = append(stripped, path)
			one, err := Parse("one.yaml", edit(t, base, path, "DELETE"))
			if err != nil {
				t.Fatal(err)
			}
			if !one.Defaulted(path) || one.Fingerprint() != c.Fingerprint() {
				t.Errorf("leaving out %s (= %s) changed the contract", path, text)
			}
		}
	}
	if len(stripped) < 20 {
		t.Fatalf("stripped only %v: the base states fewer defaults than it should", stripped)
	}
	var edits []string
	for i := len(stripped) - 1; i >= 0; i-- { // list items from the last
		edits = append(edits, stripped[i], "DELETE")
	}
	all, err := Parse("all.yaml", edit(t, base, edits...))
	if err != nil {
		t.Fatal(err)
	}
	if all.Fingerprint() != c.Fingerprint() {
		t.Errorf("leaving out %v changed the contract:\n%s", stripped, all.Canonical())
	}
	if ps := all.Lint(); len(ps) > 0 {
		t.Error(ps)
	}
}

// TestDefaultsApply: a field left out, or written empty, has its default;
// derived defaults follow the fields they derive from; a problem with a
// defaulted value says the file does not state it.
func TestDefaultsApply(t *testing.T) {
	c, err := Parse("x.yaml", edit(t, readBase(t),
		"overload.fetch_batch", "null", "recovery", "DELETE", "operators[0].dead_letter", "DELETE",
		"edges[0].partitions", "DELETE", "edges[0].retention", "DELETE", "ingress.partitions", "8", "ingress.retention", "30h",
		"time.domain", "ingestion", "time.trust", "DELETE", "state.families[0].on_limit", "DELETE"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		field string
		got   any
		want  any
	}{
		{"overload.fetch_batch", c.Overload.FetchBatch, 256},
		{"recovery.checkpoint_interval", c.Recovery.CheckpointInterval.String(), "10s"},
		{"recovery.mode", c.Recovery.Mode, CheckpointAligned},
		{"recovery.retained_checkpoints", c.Recovery.RetainedCheckpoints, DefaultRetainedCheckpoints},
		{"operators[0].dead_letter", c.Operators[0].DeadLetter, true},
		{"edges[0].partitions", c.Edges[0].Partitions, 8},
		{"edges[0].retention", c.Edges[0].Retention.String(), "30h"},
		{"edges[0].format", c.Edges[0].Format, FormatFrames},
		{"time.trust", c.Time.Trust, TrustBroker},
		{"state.families[0].on_limit", c.State.Families[0].OnLimit, OnLimitFail},
		{"ingress.duplicate_window", c.Ingress.DuplicateWindow.String(), "2m"},
	} {
		if fmt.Sprint(tc.got) != fmt.Sprint(tc.want) {
			t.Errorf("%s = %v, want %v", tc.field, tc.got, tc.want)
		}
	}
	for _, field := range []string{"overload.fetch_batch", "recovery", "recovery.mode", "operators[0].dead_letter", "edges[0].retention", "edges[0].format", "time.trust"} {
		if !c.Defaulted(field) {
			t.Errorf("%s is not marked defaulted", field)
		}
	}
	for _, field := range []string{"overload.frame_max_bytes", "edges[0].name", "ingress.partitions"} {
		if c.Defaulted(field) {
			t.Errorf("%s, stated in the file, is marked defaulted", field)
		}
	}

	// A contradiction with a value the file does not state.
	q7, err := os.ReadFile("nexmark-q7.yaml")
	if err != nil {
		t.Fatal(err)
	}
	big, err := Parse("q7.yaml", []byte(strings.Replace(string(q7), "  retention: 24h\n", "  retention: 24h\n  max_message_bytes: 2000000\n", 1)))
	if err != nil {
		t.Fatal(err)
	}
	ps := big.Lint()
	if len(ps) != 1 || ps[0].Field != "overload.frame_max_bytes" || !strings.Contains(ps[0].Why, "this is its default") {
		t.Fatalf("got %v, want overload.frame_max_bytes, saying it is the default", ps)
	}
}

// TestEffectiveMarksDefaults: the effective contract states every field,
// and marks those the file leaves to their defaults.
func TestEffectiveMarksDefaults(t *testing.T) {
	c, err := Shipped("nexmark-q7")
	if err != nil {
		t.Fatal(err)
	}
	out := string(c.Effective())
	for _, want := range []string{"overload: # default\n", "  fetch_batch: 256\n", "version: 1 # default\n",
		"    on_time: true # default\n", "    dead_letter: true # default\n", "    size: 10s\n", "  mode: upsert\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("the effective contract has no %q:\n%s", want, out)
		}
	}
}

// TestReadmeListsTheDefaults: contracts/README.md names every default.
func TestReadmeListsTheDefaults(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(readme), "## Defaults")
	if !ok {
		t.Fatal("README.md has no Defaults section")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	for _, d := range Defaults() {
		if !strings.Contains(table, "`"+d.Field+"`") {
			t.Errorf("README.md's Defaults section does not name %s", d.Field)
		}
	}
}
