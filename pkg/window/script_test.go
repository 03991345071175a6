package window

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirflow/weir/pkg/record"
)

// A script file in testdata/ describes one scenario:
//
//	# comment
//	spec kind=session gap=3s early-count=1 lateness=10s late-each accumulation=retracting
//	agg count | sum <field> | max <field>
//	rec <key> <event time> [n]   a record with value {"n":n} (default 1), IDs r1, r2, ...
//	wm <time>                    the watermark moves
//	adv <duration>               processing time advances
//	expect                       the rest: expected panes (formatRecord), then "side <id>" lines
//
// Times are Go durations after the Unix epoch. Non-global specs have
// on-time set.
type script struct {
	name   string
	spec   Spec
	agg    Aggregator
	steps  []Step
	expect []string // nil: no expectation, only Operator == Evaluate
}

func parseScript(name, text string) (*script, error) {
	sc := &script{name: name, agg: Count()}
	sc.spec.OnTime = true
	recs := 0
	inExpect := false
	s := bufio.NewScanner(strings.NewReader(text))
	for line := 1; s.Scan(); line++ {
		fail := func(format string, args ...any) error {
			return fmt.Errorf("%s:%d: %s", name, line, fmt.Sprintf(format, args...))
		}
		text := strings.TrimSpace(s.Text())
		if inExpect {
			if text != "" {
				sc.expect = append(sc.expect, text)
			}
			continue
		}
		if i := strings.Index(text, "#"); i >= 0 {
			text = strings.TrimSpace(text[:i])
		}
		f := strings.Fields(text)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "spec":
			if err := parseSpec(&sc.spec, f[1:]); err != nil {
				return nil, fail("%v", err)
			}
		case "agg":
			a, err := parseAgg(f[1:])
			if err != nil {
				return nil, fail("%v", err)
			}
			sc.agg = a
		case "rec":
			if len(f) < 3 || len(f) > 4 {
				return nil, fail("want: rec <key> <time> [n]")
			}
			t, err := time.ParseDuration(f[2])
			if err != nil {
				return nil, fail("%v", err)
			}
			n := int64(1)
			if len(f) == 4 {
				if n, err = strconv.ParseInt(f[3], 10, 64); err != nil {
					return nil, fail("%v", err)
				}
			}
			recs++
			r := testRecord(fmt.Sprintf("r%d", recs), f[1], t, n)
			sc.steps = append(sc.steps, Step{Record: &r})
		case "wm":
			t, err := time.ParseDuration(strings.Join(f[1:], ""))
			if err != nil {
				return nil, fail("%v", err)
			}
			sc.steps = append(sc.steps, Step{Watermark: epoch(t)})
		case "adv":
			d, err := time.ParseDuration(strings.Join(f[1:], ""))
			if err != nil {
				return nil, fail("%v", err)
			}
			sc.steps = append(sc.steps, Step{Advance: d})
		case "expect":
			inExpect = true
			sc.expect = []string{}
		default:
			return nil, fail("unknown directive %q", f[0])
		}
	}
	return sc, s.Err()
}

func epoch(d time.Duration) time.Time { return time.Unix(0, 0).Add(d).UTC() }

func testRecord(id, key string, t time.Duration, n int64) record.Record {
	return record.Record{
		Kind:  record.Data,
		ID:    id,
		Key:   []byte(key),
		Time:  epoch(t),
		Value: []byte(`{"n":` + strconv.FormatInt(n, 10) + `}`),
	}
}

func parseSpec(sp *Spec, args []string) error {
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		dur := func() (time.Duration, error) { return time.ParseDuration(v) }
		var err error
		switch k {
		case "kind":
			err = sp.Kind.UnmarshalText([]byte(v))
			if sp.Kind == Global {
				sp.OnTime = false
			}
		case "accumulation":
			err = sp.Accumulation.UnmarshalText([]byte(v))
		case "size":
			sp.Size, err = dur()
		case "slide":
			sp.Slide, err = dur()
		case "gap":
			sp.Gap, err = dur()
		case "lateness":
			sp.AllowedLateness, err = dur()
		case "early-every":
			sp.EarlyEvery, err = dur()
		case "late-every":
			sp.LateEvery, err = dur()
		case "early-count":
			sp.EarlyCount, err = strconv.Atoi(v)
		case "late-each":
			sp.LateEach = true
		default:
			return fmt.Errorf("unknown spec field %q", k)
		}
		if err != nil {
			return fmt.Errorf("spec %s: %w", k, err)
		}
	}
	return sp.Validate()
}

func parseAgg(f []string) (Aggregator, error) {
	switch {
	case len(f) == 1 && f[0] == "count":
		return Count(), nil
	case len(f) == 2 && f[0] == "sum":
		return Sum(f[1]), nil
	case len(f) == 2 && f[0] == "max":
		return MaxBy(f[1]), nil
	}
	return nil, fmt.Errorf("want: agg count | sum <field> | max <field>")
}

func loadScripts(t *testing.T) []*script {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "*.script"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts in testdata: %v", err)
	}
	var out []*script
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc, err := parseScript(filepath.Base(f), string(b))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, sc)
	}
	return out
}

// render is what a script's expect section lists: the panes, then the side
// outputs.
func render(panes, side []record.Record) []string {
	out := []string{}
	for _, r := range panes {
		out = append(out, formatRecord(r))
	}
	for _, r := range side {
		out = append(out, "side "+r.ID)
	}
	return out
}

// TestScripts runs each testdata script through the Operator and Evaluate,
// which must agree, and checks the hand-written expectation.
func TestScripts(t *testing.T) {
	for _, sc := range loadScripts(t) {
		t.Run(sc.name, func(t *testing.T) {
			panes, side := runBoth(t, sc.spec, sc.agg, sc.steps)
			if sc.expect == nil {
				return
			}
			got := render(panes, side)
			if strings.Join(got, "\n") != strings.Join(sc.expect, "\n") {
				t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(sc.expect, "\n"))
			}
		})
	}
}
