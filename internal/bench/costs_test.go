package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// TestCostsAttributeEachSampleToItsStage: a sample counts toward the
// innermost function a stage claims — an allocation inside Pebble is
// state, not the Go runtime — while a batch's staging store counts as
// staging wherever on the stack it stands, and a sample only the runtime
// claims is the runtime's.
func TestCostsAttributeEachSampleToItsStage(t *testing.T) {
	fn := map[string]*profile.Function{}
	loc := func(names ...string) []*profile.Location {
		var ls []*profile.Location
		for _, n := range names {
			if fn[n] == nil {
				fn[n] = &profile.Function{ID: uint64(len(fn) + 1), Name: n}
			}
			ls = append(ls, &profile.Location{ID: uint64(len(fn)*100 + len(ls)), Line: []profile.Line{{Function: fn[n]}}})
		}
		return ls
	}
	sample := func(ms int64, names ...string) *profile.Sample {
		return &profile.Sample{Location: loc(names...), Value: []int64{1, ms * int64(time.Millisecond)}}
	}
	write := func(name string, samples ...*profile.Sample) string {
		p := &profile.Profile{
			SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
			Sample:     samples,
		}
		ids := map[uint64]bool{}
		for _, s := range samples {
			for _, l := range s.Location {
				l.ID = uint64(len(p.Location) + 1)
				p.Location = append(p.Location, l)
				for _, ln := range l.Line {
					if !ids[ln.Function.ID] {
						ids[ln.Function.ID] = true
						p.Function = append(p.Function, ln.Function)
					}
				}
			}
		}
		var b bytes.Buffer
		if err := p.Write(&b); err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(t.TempDir(), name+".cpu.pprof")
		if err := os.WriteFile(f, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	svc := write("svc",
		sample(30, "runtime.mallocgc", "github.com/cockroachdb/pebble/v2.(*Batch).Set", weir+"pkg/state.(*Batch).Put", weir+"pkg/stream.(*step).commit"),
		sample(20, "encoding/json.Unmarshal", weir+"pkg/ingress.(*Decoder).Decode", weir+"pkg/stream.(*step).deliver"),
		sample(10, "runtime.gcBgMarkWorker"),
		sample(5, "main.main"),
	)
	broker := write("broker",
		sample(40, server+"(*fileStore).writeFileWithOptionalSync", server+"newBatchStore", server+"(*stream).processJetStreamAtomicBatchMsg"),
		sample(25, server+"(*fileStore).writeMsgRecord", server+"(*stream).processJetStreamMsg"),
	)
	c, err := ReadCosts(map[string]string{"svc": svc, "broker": broker}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]time.Duration{
		"svc":    {"state (Pebble)": 30 * time.Millisecond, "ingress decode": 20 * time.Millisecond, goRuntime: 10 * time.Millisecond, "other": 5 * time.Millisecond},
		"broker": {"broker: atomic batch staging": 40 * time.Millisecond, "broker: store write": 25 * time.Millisecond},
	}
	for proc, stages := range want {
		if len(c.CPU[proc]) != len(stages) {
			t.Errorf("%s: %v, want %v", proc, c.CPU[proc], stages)
		}
		for st, d := range stages {
			if c.CPU[proc][st] != d {
				t.Errorf("%s %s: %s, want %s", proc, st, c.CPU[proc][st], d)
			}
		}
	}
	var out strings.Builder
	if err := c.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	// 30 ms over 1,000 events is 30 µs each; 130 ms in all.
	for _, row := range []string{"(Pebble)  -  30.00  30.00", "all  65.00  65.00  130.00"} {
		if !strings.Contains(strings.Join(strings.Fields(out.String()), "  "), row) {
			t.Errorf("table lacks %q:\n%s", row, out.String())
		}
	}
	if _, err := ReadCosts(map[string]string{"x": filepath.Join(t.TempDir(), "missing")}, 1); err == nil {
		t.Error("no error for a missing profile")
	}
}
