package contracts

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestShippedContractsLintClean loads every contract the repository ships.
func TestShippedContractsLintClean(t *testing.T) {
	paths, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) < 2 {
		t.Fatalf("found %d contracts, want at least 2", len(paths))
	}
	for _, path := range paths {
		c, err := Load(path)
		if err != nil {
			t.Errorf("%s:\n%v", path, err)
			continue
		}
		if ps := c.Lint(); len(ps) > 0 {
			t.Errorf("%s: %v", path, ps)
		}
	}
}

func TestNexmarkContract(t *testing.T) {
	c, err := Load("nexmark-dedup.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Pipeline != "nexmark" || c.File != "nexmark-dedup.yaml" {
		t.Errorf("pipeline %q from %q", c.Pipeline, c.File)
	}
	if got := c.Ingress.Subject(3); got != "nexmark.events.3" {
		t.Errorf("ingress subject %q", got)
	}
	if got := c.EdgeSubject("deduped", 0); got != "weir.nexmark.deduped.0" {
		t.Errorf("edge subject %q", got)
	}
	want := Field{From: FromHeader, Header: "Weir-Producer", Optional: true}
	if c.Identity.Producer != want {
		t.Errorf("producer %+v, want %+v", c.Identity.Producer, want)
	}
	if f, ok := c.Family("seen"); !ok || f.Role != RoleDedup || f.TTL.D() != 26*time.Hour || f.MaxKeys != 5000000 {
		t.Errorf("family seen = %+v, %v", f, ok)
	}
	if op, ok := c.Operator("dedup"); !ok || op.Input != InputIngress || op.Output != "deduped" || !op.DeadLetter {
		t.Errorf("operator dedup = %+v, %v", op, ok)
	}
	if e, ok := c.Edge("deduped"); !ok || e.Partitions != 4 || e.Retention.D() != 24*time.Hour {
		t.Errorf("edge deduped = %+v, %v", e, ok)
	}
	if _, ok := c.Operator("nope"); ok {
		t.Error("found operator nope")
	}
	if _, ok := c.Edge("nope"); ok {
		t.Error("found edge nope")
	}
	if _, ok := c.Family("nope"); ok {
		t.Error("found family nope")
	}
	if got := c.Recovery.Envelope().String(); got != "5m10s" {
		t.Errorf("envelope %s", got)
	}
}

// wantFields reads the "# want: field" lines of a bad example.
func wantFields(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var want []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		if field, ok := strings.CutPrefix(s.Text(), "# want: "); ok {
			want = append(want, strings.TrimSpace(field))
		}
	}
	if len(want) == 0 {
		t.Fatalf("%s has no `# want: field` line", path)
	}
	return want
}

// TestBadExamples loads every testdata/bad-*.yaml: each is refused with
// exactly the problems its "# want:" lines name.
func TestBadExamples(t *testing.T) {
	paths, err := filepath.Glob("testdata/bad-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) < 10 {
		t.Fatalf("found %d bad examples", len(paths))
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			c, err := Load(path)
			var inv *Invalid
			if !errors.As(err, &inv) || c != nil {
				t.Fatalf("Load = %v, %v; want *Invalid", c, err)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Error("errors.Is(err, ErrInvalid) is false")
			}
			var got []string
			for _, p := range inv.Problems {
				got = append(got, p.Field)
				if p.File != path || p.Line <= 0 || p.Why == "" || p.Fix == "" {
					t.Errorf("incomplete problem %+v", p)
				}
			}
			if want := wantFields(t, path); !slices.Equal(got, want) {
				t.Errorf("problems %v, want %v:\n%v", got, want, err)
			}
		})
	}
}

func TestLintFiles(t *testing.T) {
	var out bytes.Buffer
	n, err := LintFiles(&out, "nexmark-dedup.yaml", "testdata/bad-dedup-ttl.yaml", "testdata/bad-typo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if n != 2 || len(lines) != 2 {
		t.Fatalf("%d problems:\n%s", n, out.String())
	}
	if !strings.HasPrefix(lines[0], "testdata/bad-dedup-ttl.yaml:") || !strings.Contains(lines[0], ": state.families[0].ttl: dedup TTL 1h is shorter") {
		t.Errorf("line %q", lines[0])
	}
	if !strings.HasPrefix(lines[1], "testdata/bad-typo.yaml:11: ingress.retenion: ") || !strings.Contains(lines[1], `did you mean "retention"`) {
		t.Errorf("line %q", lines[1])
	}
	out.Reset()
	n, err = LintFiles(&out, "testdata/does-not-exist.yaml", "nexmark-dedup.yaml")
	if n != 0 || !errors.Is(err, os.ErrNotExist) || out.Len() != 0 {
		t.Fatalf("LintFiles on a missing file = %d, %v, %q", n, err, out.String())
	}
}

func TestParseRefuses(t *testing.T) {
	base := string(readBase(t))
	replace := func(old, new string) string {
		t.Helper()
		if !strings.Contains(base, old) {
			t.Fatalf("base has no %q", old)
		}
		return strings.Replace(base, old, new, 1)
	}
	for _, tc := range []struct {
		name  string
		data  string
		at    string // text on the problem's line; "" for line 1
		field string
		why   string
		fix   string
	}{
		{"empty", "", "", "", "empty", "README"},
		{"comment only", "# nothing\n", "", "", "empty", "README"},
		{"syntax", "pipeline: nexmark\n  version: 1\n", "  version", "", "YAML syntax error", "correct the YAML"},
		{"two documents", base + "---\npipeline: other\n", "---", "", "more than one YAML document", "one contract per file"},
		{"not a mapping", "- pipeline\n", "", "", "want a mapping", "`name: value`"},
		{"unknown top-level field", replace("version: 1", "version: 1\nowner: me"), "owner", "owner", `unknown field "owner"`, "the contract has fields pipeline, version"},
		{"typo", replace("  retention: 24h ", "  retenion: 24h "), "retenion", "ingress.retenion", `unknown field "retenion"`, `did you mean "retention"?`},
		{"unknown nested field", replace("      max_keys: 5000000", "      max_keys: 5000000\n      max_bytes: 10"), " max_bytes: 10\n", "state.families[0].max_bytes", "unknown field", "remove it"},
		{"pipeline-wide keying", replace("  key_groups: 256", "  keying: id\n  key_groups: 256"), "keying: id\n  key_groups", "state.keying", `unknown field "keying": keying is no longer pipeline-wide`, "keying moved to operators[].keying"},
		{"operator state as scalar", replace("state: [seen]", "state: seen"), "state: seen", "operators[0].state", `want a list, got "seen"`, "`- `"},
		{"repeated field", replace("version: 1", "version: 1\nversion: 2"), "version: 2", "version", "repeats the one at line 6", "delete the other"},
		{"integer", replace("partitions: 4", "partitions: four"), "four", "ingress.partitions", `want an integer, got "four"`, "write an integer"},
		{"boolean", replace("dead_letter: true", "dead_letter: sure"), "sure", "operators[0].dead_letter", "want true or false", "true or false"},
		{"duration without unit", replace("future_skew: 5s", "future_skew: 5"), "future_skew", "time.future_skew", `"5" is not a duration ("5" has no unit)`, "like 500ms"},
		{"negative duration", replace("future_skew: 5s", "future_skew: -5s"), "future_skew", "time.future_skew", "is negative", "non-negative"},
		{"duration as mapping", replace("future_skew: 5s", "future_skew: {s: 5}"), "future_skew", "time.future_skew", "want a duration", "with a unit"},
		{"mapping as scalar", replace("ingress:\n", "ingress: NEXMARK\nx:\n"), "ingress: NEXMARK", "ingress", `want a mapping with fields stream, subject_prefix`, "indented"},
		{"list as mapping", replace("edges:\n", "edges: {name: deduped}\nx:\n"), "edges:", "edges", "want a list, got a mapping", "`- `"},
		{"scalar as list", replace("stream: NEXMARK", "stream: [NEXMARK]"), "[NEXMARK]", "ingress.stream", "want a string, got a list", "single value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("x.yaml", []byte(tc.data))
			var inv *Invalid
			if !errors.As(err, &inv) || c != nil {
				t.Fatalf("Parse = %v, %v; want *Invalid", c, err)
			}
			p := inv.Problems[0]
			line := lineOf(t, tc.data, tc.at)
			if p.File != "x.yaml" || p.Line != line || p.Field != tc.field {
				t.Errorf("problem at %s:%d %q, want x.yaml:%d %q", p.File, p.Line, p.Field, line, tc.field)
			}
			if !strings.Contains(p.Why, tc.why) || !strings.Contains(p.Fix, tc.fix) {
				t.Errorf("problem %q does not say %q and %q", p.String(), tc.why, tc.fix)
			}
		})
	}
}

// lineOf returns the line of the last occurrence of at in data, or 1.
func lineOf(t *testing.T, data, at string) int {
	t.Helper()
	if at == "" {
		return 1
	}
	i := strings.LastIndex(data, at)
	if i < 0 {
		t.Fatalf("no %q in the data", at)
	}
	return strings.Count(data[:i], "\n") + 1
}

func TestParseReportsEveryDecodingProblem(t *testing.T) {
	data := strings.NewReplacer("partitions: 4\n  retention", "partitions: four\n  retention",
		"idle_timeout: 10s", "idle_timout: 10s", "max_keys: 5000000", "max_keys: lots").Replace(string(readBase(t)))
	_, err := Parse("x.yaml", []byte(data))
	var inv *Invalid
	if !errors.As(err, &inv) {
		t.Fatalf("Parse = %v", err)
	}
	var fields []string
	for _, p := range inv.Problems {
		fields = append(fields, p.Field)
	}
	want := []string{"ingress.partitions", "progress.idle_timout", "state.families[0].max_keys"}
	if !slices.Equal(fields, want) {
		t.Errorf("fields %v, want %v", fields, want)
	}
	if got := strings.Count(err.Error(), "\n") + 1; got != 3 {
		t.Errorf("Error() has %d lines, want one per problem:\n%v", got, err)
	}
}

func TestParseNullIsMissing(t *testing.T) {
	data := strings.Replace(string(readBase(t)), "max_keys: 5000000", "max_keys:", 1)
	c, err := Parse("x.yaml", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	ps := c.Lint()
	line := lineOf(t, data, "max_keys:")
	if len(ps) != 1 || ps[0].Field != "state.families[0].max_keys" || !strings.Contains(ps[0].Why, "missing") || ps[0].Line != line {
		t.Fatalf("got %v", ps)
	}
}

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"5s", 5 * time.Second, true},
		{"90s", 90 * time.Second, true},
		{"26h", 26 * time.Hour, true},
		{"5ms", 5 * time.Millisecond, true},
		{"0", 0, true},
		{"0s", 0, true},
		{"7d", 7 * 24 * time.Hour, true},
		{"1d12h", 36 * time.Hour, true},
		{"0d", 0, true},
		{" 2m ", 2 * time.Minute, true},
		{"", 0, false},
		{"10", 0, false},
		{"-1s", 0, false},
		{"-1d", 0, false},
		{"1.5d", 0, false},
		{"d", 0, false},
		{"1d-1h", 0, false},
		{"1dd", 0, false},
		{"99999999d", 0, false},
		{"soon", 0, false},
	} {
		got, err := ParseDuration(tc.in)
		if tc.ok && (err != nil || got != tc.want) {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if !tc.ok && (err == nil || !errors.Is(err, ErrDuration)) {
			t.Errorf("ParseDuration(%q) = %v, %v; want an ErrDuration", tc.in, got, err)
		}
	}
}

func TestDurationString(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                              "0s",
		5 * time.Millisecond:           "5ms",
		90 * time.Second:               "1m30s",
		2 * time.Minute:                "2m",
		26 * time.Hour:                 "26h",
		time.Hour + 30*time.Minute:     "1h30m",
		time.Hour + 5*time.Second:      "1h0m5s",
		5*time.Minute + 10*time.Second: "5m10s",
	} {
		if got := (Duration{d}).String(); got != want {
			t.Errorf("Duration(%v).String() = %q, want %q", d, got, want)
		}
		if back, err := ParseDuration(want); err != nil || back != d {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", want, back, err, d)
		}
	}
}

func TestFingerprint(t *testing.T) {
	c, err := Load("testdata/lint-base.yaml")
	if err != nil {
		t.Fatal(err)
	}
	fp := c.Fingerprint()
	if len(fp) != 64 {
		t.Fatalf("fingerprint %q", fp)
	}
	same := func(name string, data []byte) {
		t.Helper()
		d, err := Parse("other.yaml", data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := d.Fingerprint(); got != fp {
			t.Errorf("%s changed the fingerprint", name)
		}
	}
	base := readBase(t)
	same("re-marshalling without comments", edit(t, base))
	same("the canonical form", c.Canonical())
	same("reject for dead-letter", edit(t, base, "time.on_future", "reject"))
	same("1d2h for 26h", edit(t, base, "state.families[0].ttl", "1d2h"))
	same("one ingress stream said", edit(t, base, "ingress.streams", "1"))
	same("reordered sections", edit(t, base, "ingress", "DELETE", "ingress",
		"{stream: NEXMARK, subject_prefix: nexmark.events, partitions: 4, retention: 24h, offsets: stream-sequence, max_message_bytes: 65536}"))

	same("a block list for a flow list", []byte(strings.Replace(string(base), "    state: [seen]\n", "    state:\n      - seen\n", 1)))

	for _, change := range [][2]string{
		{"state.families[0].ttl", "27h"},
		{"operators[0].keying", "key"},
		{"operators[0].state", "[]"},
		{"ingress.streams", "2"},
	} {
		d, err := Parse("x.yaml", edit(t, base, change[0], change[1]))
		if err != nil {
			t.Fatal(err)
		}
		if d.Fingerprint() == fp {
			t.Errorf("%s: %s has the same fingerprint", change[0], change[1])
		}
	}
	stateless, err := Parse("x.yaml", edit(t, base, "operators[0].state", "[]"))
	if err != nil {
		t.Fatal(err)
	}
	built := *c
	built.Operators = slices.Clone(c.Operators)
	built.Operators[0].State = nil
	if built.Fingerprint() != stateless.Fingerprint() {
		t.Error("state: [] and a nil State have different fingerprints")
	}
	if canon := string(c.Canonical()); !strings.Contains(canon, "keying: id") || strings.Contains(canon, "\n    keying:") {
		t.Errorf("the canonical form does not keep keying on the operator only:\n%s", canon)
	}
	round, err := Parse("canonical.yaml", c.Canonical())
	if err != nil {
		t.Fatal(err)
	}
	if ps := round.Lint(); len(ps) > 0 {
		t.Errorf("the canonical form does not lint clean: %v", ps)
	}
}

// An ingress over several streams has partition p in <stream>_<p mod n>;
// over one, every partition in the stream it names.
func TestIngressStreams(t *testing.T) {
	in := Ingress{Stream: "NEXMARK", Partitions: 6}
	for _, n := range []int{0, 1} {
		in.Streams = n
		if got := in.StreamNames(); !slices.Equal(got, []string{"NEXMARK"}) || in.StreamOf(5) != "NEXMARK" || !slices.Equal(in.PartitionsIn(0), []int{0, 1, 2, 3, 4, 5}) {
			t.Errorf("streams %d: %v, partition 5 in %s, stream 0 holds %v", n, got, in.StreamOf(5), in.PartitionsIn(0))
		}
	}
	in.Streams = 4
	if got := in.StreamNames(); !slices.Equal(got, []string{"NEXMARK_0", "NEXMARK_1", "NEXMARK_2", "NEXMARK_3"}) {
		t.Errorf("streams: %v", got)
	}
	if in.StreamOf(5) != "NEXMARK_1" || !slices.Equal(in.PartitionsIn(1), []int{1, 5}) || !slices.Equal(in.PartitionsIn(3), []int{3}) {
		t.Errorf("partition 5 in %s; stream 1 holds %v, stream 3 %v", in.StreamOf(5), in.PartitionsIn(1), in.PartitionsIn(3))
	}
}

func TestOperatorUses(t *testing.T) {
	c, err := Load("nexmark-q5.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		op, family string
		want       bool
	}{
		{"q5-count", "q5-counts", true},
		{"q5-count", "q5-max", false},
		{"q5-max", "q5-max", true},
		{"q5-max", "q5-counts", false},
		{"q5-key", "q5-counts", false},
		{"q5-key", "", false},
	} {
		op, ok := c.Operator(tc.op)
		if !ok {
			t.Fatalf("no operator %q", tc.op)
		}
		if got := op.Uses(tc.family); got != tc.want {
			t.Errorf("%s.Uses(%q) = %v, want %v", tc.op, tc.family, got, tc.want)
		}
	}
	for id, want := range map[string]string{"q5-key": KeyingID, "q5-count": KeyingKey, "q5-max": KeyingKey} {
		if op, _ := c.Operator(id); op.Keying != want {
			t.Errorf("%s keyed by %q, want %q", id, op.Keying, want)
		}
	}
	// q7-key runs in q7-max's step, not as an operator of its own.
	q7, err := Load("nexmark-q7.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := q7.Operator("q7-key"); ok {
		t.Error("q7-key is an operator of its own")
	}
	if op, _ := q7.Operator("q7-max"); !slices.Equal(op.Before, []string{"q7-key"}) || op.Input != "ingress" {
		t.Errorf("q7-max reads %q through %v, want the ingress through [q7-key]", op.Input, op.Before)
	}
}

func TestProblemString(t *testing.T) {
	for _, tc := range []struct {
		p    Problem
		want string
	}{
		{Problem{File: "contracts/x.yaml", Line: 42, Field: "state.families[0].ttl", Why: "too short", Fix: "longer"},
			"contracts/x.yaml:42: state.families[0].ttl: too short; fix: longer"},
		{Problem{File: "x.yaml", Line: 3, Why: "YAML syntax error: bad"}, "x.yaml:3: YAML syntax error: bad"},
		{Problem{Field: "pipeline", Why: "missing", Fix: "add it"}, "contract: pipeline: missing; fix: add it"},
	} {
		if got := tc.p.String(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}
