package state

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestPositionEncoding(t *testing.T) {
	for _, p := range []Position{
		{},
		{Seq: 1},
		{Seq: math.MaxUint64},
		{Seq: 42, Frames: map[string]uint64{"op-a/3": 7, "": 0, "op-b/0": math.MaxUint64}},
		{Seq: 42, Clear: 9000, Frames: map[string]uint64{"p": 1}},
	} {
		got, err := decodePosition(encodePosition(p))
		if err != nil || !reflect.DeepEqual(got, p) {
			t.Errorf("round trip of %+v = %+v, %v", p, got, err)
		}
	}
	// A position written before Clear existed reads back with none.
	v1 := append([]byte{positionV1}, 0xac, 0x02, 1, 1, 'p', 9)
	if got, err := decodePosition(v1); err != nil || !reflect.DeepEqual(got, Position{Seq: 300, Frames: map[string]uint64{"p": 9}}) {
		t.Errorf("decodePosition(version 1 %x) = %+v, %v", v1, got, err)
	}
	good := encodePosition(Position{Seq: 300, Clear: 400, Frames: map[string]uint64{"p": 9}})
	for _, bad := range [][]byte{nil, {9}, {positionVersion}, good[:len(good)-1], append(slices.Clone(good), 0)} {
		if _, err := decodePosition(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("decodePosition(%x) = %v, want ErrCorrupt", bad, err)
		}
	}
}

// outputs lists the committed staged outputs as "id=data".
func outputs(t *testing.T, s *Store) []string {
	t.Helper()
	var out []string
	must(t, s.StagedOutputs(func(id string, data []byte) error {
		out = append(out, id+"="+string(data))
		return nil
	}))
	return out
}

func TestOperatorRecords(t *testing.T) {
	fs := vfs.NewMem()
	s := openTest(t, testOptions(fs))
	positions := map[string]Position{
		"ingress/3": {Seq: 17},
		"deduped/0": {Seq: 5, Frames: map[string]uint64{"dedup/0": 4, "dedup/1": 2}},
	}
	commit(t, s, func(b *Batch) {
		for in, p := range positions {
			must(t, b.SetPosition(in, p))
		}
		must(t, b.PutMeta("generation", []byte{3}))
		must(t, b.PutMeta("watermarks", []byte("w")))
		must(t, b.PutMeta("empty", nil))
		for i := range 12 {
			must(t, b.StageOutput(fmt.Sprintf("%08d", i), []byte(fmt.Sprint("frame", i))))
		}
	})
	commit(t, s, func(b *Batch) {
		// A later position replaces the earlier one.
		positions["ingress/3"] = Position{Seq: 18}
		must(t, b.SetPosition("ingress/3", positions["ingress/3"]))
		must(t, b.DeleteMeta("watermarks"))
		must(t, b.DeleteMeta("never-set"))
		for i := range 10 {
			must(t, b.DeleteOutput(fmt.Sprintf("%08d", i)))
		}
		must(t, b.StageOutput("00000012", []byte("frame12")))
	})

	check := func(t *testing.T, s *Store) {
		t.Helper()
		got, err := s.Positions()
		must(t, err)
		if !reflect.DeepEqual(got, positions) {
			t.Errorf("Positions = %+v, want %+v", got, positions)
		}
		for in, want := range positions {
			p, ok, err := s.Position(in)
			if err != nil || !ok || !reflect.DeepEqual(p, want) {
				t.Errorf("Position(%s) = %+v, %v, %v", in, p, ok, err)
			}
		}
		if _, ok, err := s.Position("unknown/0"); ok || err != nil {
			t.Errorf("Position(unknown) = %v, %v", ok, err)
		}
		for _, c := range []struct {
			name string
			want string
			ok   bool
		}{{"generation", "\x03", true}, {"empty", "", true}, {"watermarks", "", false}, {"never-set", "", false}} {
			v, ok, err := s.Meta(c.name)
			if err != nil || ok != c.ok || string(v) != c.want {
				t.Errorf("Meta(%s) = %q, %v, %v; want %q, %v", c.name, v, ok, err, c.want, c.ok)
			}
		}
		want := []string{"00000010=frame10", "00000011=frame11", "00000012=frame12"}
		if got := outputs(t, s); !slices.Equal(got, want) {
			t.Errorf("StagedOutputs = %q, want %q", got, want)
		}
	}
	t.Run("open", func(t *testing.T) { check(t, s) })
	must(t, s.Close())
	t.Run("reopened", func(t *testing.T) { check(t, openTest(t, testOptions(fs))) })
}

func TestStagedOutputsStopsOnError(t *testing.T) {
	s := openTest(t, testOptions(nil))
	commit(t, s, func(b *Batch) {
		for i := range 5 {
			must(t, b.StageOutput(fmt.Sprint(i), nil))
		}
	})
	stop := errors.New("publish failed")
	calls := 0
	err := s.StagedOutputs(func(string, []byte) error {
		calls++
		if calls == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || calls != 2 {
		t.Fatalf("StagedOutputs = %v after %d calls", err, calls)
	}
}

func TestCheckpoint(t *testing.T) {
	fs := vfs.NewMem()
	s := openTest(t, testOptions(fs))
	commit(t, s, func(b *Batch) {
		for i := range 50 {
			sc := b.Scope(i%16, []byte(fmt.Sprint("k", i)), t0)
			must(t, sc.Value("v").Set([]byte(fmt.Sprint(i))))
			must(t, sc.Map("mt").Put([]byte("a"), []byte(fmt.Sprint(i))))
			must(t, b.SetTimer(Timer{Time: t0, KeyGroup: i % 16, Key: []byte(fmt.Sprint("k", i))}))
		}
		must(t, b.SetPosition("in/0", Position{Seq: 50}))
		must(t, b.PutMeta("generation", []byte{1}))
		must(t, b.StageOutput("1", []byte("f")))
	})
	must(t, s.Checkpoint("cp1"))
	if err := s.Checkpoint("cp1"); err == nil {
		t.Fatal("Checkpoint into an existing directory succeeded")
	}
	// Writes after the checkpoint are not in it.
	commit(t, s, func(b *Batch) {
		must(t, b.Scope(0, []byte("k0"), t0).Value("v").Set([]byte("after")))
		must(t, b.SetPosition("in/0", Position{Seq: 51}))
	})
	wantStats := s.Stats()

	cp, err := Open("cp1", testOptions(fs))
	must(t, err)
	defer cp.Close()
	p, _, err := cp.Position("in/0")
	must(t, err)
	if p.Seq != 50 {
		t.Fatalf("checkpoint position %d, want 50", p.Seq)
	}
	if v, ok, _ := cp.Meta("generation"); !ok || v[0] != 1 {
		t.Fatalf("checkpoint generation = %v, %v", v, ok)
	}
	if got := outputs(t, cp); !slices.Equal(got, []string{"1=f"}) {
		t.Fatalf("checkpoint outputs = %q", got)
	}
	b := cp.NewBatch()
	for i := range 50 {
		sc := b.Scope(i%16, []byte(fmt.Sprint("k", i)), t0)
		must(t, wantV("v", fmt.Sprint(i), true).fn(sc))
		must(t, wantM("mt", "a="+fmt.Sprint(i)).fn(sc))
	}
	b.Close()
	timers, err := cp.DueTimers(EventTime, t0, 100)
	must(t, err)
	st := cp.Stats()
	if len(timers) != 50 || st.Timers != 50 || !maps.Equal(st.Keys, wantStats.Keys) {
		t.Fatalf("checkpoint: %d timers, stats %+v; want 50 and keys %v", len(timers), st, wantStats.Keys)
	}
	if st.DiskBytes <= 0 {
		t.Fatalf("DiskBytes = %d", st.DiskBytes)
	}
	// The checkpoint is a store of its own: writing to it leaves the source alone.
	commit(t, cp, func(b *Batch) { must(t, b.PutMeta("generation", []byte{2})) })
	if v, _, _ := s.Meta("generation"); v[0] != 1 {
		t.Fatal("writing the checkpoint changed the source store")
	}
}
