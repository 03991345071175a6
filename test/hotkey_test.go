package test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/catalog"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/keygroup"
	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/internal/status"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/pkg/window"
	q5 "github.com/weirflow/weir/services/nexmark-q5"
)

// TestStatusNamesAHotKey runs q5, whose counting operator keeps its state
// by auction, over bids where one auction draws half the traffic: the
// status names that auction's key group as hot on that operator, with
// about half its records. Over bids spread evenly it names none there.
func TestStatusNamesAHotKey(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a pipeline")
	}
	for _, ratio := range []float64{0.5, 0} {
		t.Run(fmt.Sprintf("hot-%.1f", ratio), func(t *testing.T) {
			srv := natstest.Run(t)
			js := srv.JetStream(t)
			c, err := contracts.Shipped("nexmark-q5")
			if err != nil {
				t.Fatal(err)
			}
			cfg := genConfig(c, 6000)
			cfg.Gen.Hard = nexmark.HardCases{HotKeyRatio: ratio, IdlePartition: -1}
			publish(t, js, cfg)
			p := streamtest.Run(t, srv.ClientURL(), c, t.TempDir(), q5.Factories())
			hot := keygroup.Of([]byte(strconv.FormatInt(nexmark.HotAuctionID, 10)), c.State.KeyGroups)
			nc := srv.Connect(t)
			var s status.Status
			streamtest.CheckFor(t, time.Minute, func() error {
				if st := p.ByID["q5-count"].Stats(); st.In < 5000 {
					return fmt.Errorf("q5-count has read %d bids", st.In)
				}
				var err error
				s, err = status.Gather(context.Background(), nc, js, c)
				return err
			})
			var found *status.HotKey
			for i, h := range s.HotKeys {
				if h.Operator == "q5-count" {
					found = &s.HotKeys[i]
				}
			}
			switch {
			case ratio > 0 && (found == nil || found.Group != hot || found.Share < 0.4):
				t.Fatalf("hot keys %v: want q5-count's key group %d, the hot auction's, with about half its records", s.HotKeys, hot)
			case ratio == 0 && found != nil:
				t.Fatalf("bids spread evenly, and q5-count is said to have a hot key: %s", found)
			}
			t.Logf("hot keys: %v", s.HotKeys)
		})
	}
}

// splitQ5 is the q5 contract with its bids edge split eight ways: q5-part
// counts each part of an auction, q5-count merges the parts.
func splitQ5(t *testing.T) *contracts.Contract {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(filepath.Dir(contractPath(t)), "nexmark-q5.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	for _, r := range [][2]string{
		{"  - name: bids\n",
			"  - name: bids\n    split: 8\n  - name: parts\n"},
		{"    - name: q5-max\n",
			"    - name: q5-parts\n      kind: map\n      bound: window\n      max_keys: 1000000\n    - name: q5-max\n"},
		{"  - id: q5-count\n    service: nexmark-q5\n    input: bids\n",
			"  - id: q5-part\n    service: nexmark-q5\n    input: bids\n    output: parts\n    keying: key\n    state: [q5-parts]\n" +
				"  - id: q5-count\n    service: nexmark-q5\n    input: parts\n"},
	} {
		if !strings.Contains(text, r[0]) {
			t.Fatalf("nexmark-q5.yaml has no %q", r[0])
		}
		text = strings.Replace(text, r[0], r[1], 1)
	}
	c, err := contracts.Parse("nexmark-q5-split.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if ps := c.Lint(); len(ps) > 0 {
		t.Fatal(ps)
	}
	return c
}

// TestHotKeySplitEqualsUnsplit runs q5 over bids where one auction draws
// half the traffic, once as shipped and once with its count split eight
// ways and merged (two-level aggregation) — the split run stopped after a
// checkpoint and restored on a new host halfway. Both runs' final counts
// per auction and window, and their results, equal the reference
// evaluator's; in the split run the hot auction's bids spread over the
// bids edge's partitions instead of landing on one.
func TestHotKeySplitEqualsUnsplit(t *testing.T) {
	if testing.Short() {
		t.Skip("runs pipelines")
	}
	plain, err := contracts.Shipped("nexmark-q5")
	if err != nil {
		t.Fatal(err)
	}
	gen := corpusConfig(plain)
	gen.Gen.Events = 3000
	gen.Gen.Hard.HotKeyRatio = 0.5
	input := func(ev nexmark.Event) (record.Record, bool) {
		if ev.Bid == nil {
			return record.Record{}, false
		}
		return catalog.BidRecord(ev, strconv.FormatInt(ev.Bid.Auction, 10))
	}
	// The reference: the window evaluator over the records q5-count sees.
	var want q5Result
	run := func(t *testing.T, c *contracts.Contract, split bool) q5Result {
		srv := natstest.Run(t)
		js := srv.JetStream(t)
		half := gen
		half.Count = gen.Gen.Events / 2
		publish(t, js, half)
		if split {
			// Half the corpus, a checkpoint taken after it, then the
			// pipeline stopped and started again on a new host.
			p := streamtest.Run(t, srv.ClientURL(), c, t.TempDir(), q5.Factories())
			_, stopCoordinator := runCoordinator(t, srv.ClientURL(), c, "co")
			store, err := checkpoint.Open(context.Background(), js, c.Pipeline, 1)
			if err != nil {
				t.Fatal(err)
			}
			var after uint64
			streamtest.CheckFor(t, time.Minute, func() error {
				st := p.ByID["q5-key"].Stats()
				if st.In < int64(half.Count) {
					return fmt.Errorf("q5-key has read %d of %d", st.In, half.Count)
				}
				l, _, err := store.Latest(context.Background())
				if after == 0 {
					after = l.Checkpoint
				}
				if err != nil || l.Checkpoint < after+2 {
					return fmt.Errorf("latest checkpoint %d (%v)", l.Checkpoint, err)
				}
				return nil
			})
			stopCoordinator()
			p.Stop()
		}
		rest := gen
		rest.Start = half.Count
		publish(t, js, rest)
		script := corpusScript(t, js, c, gen, input)
		// In the split run, a new host: it restores from the checkpoint.
		p := streamtest.Run(t, srv.ClientURL(), c, t.TempDir(), q5.Factories())
		if split {
			defer func() {
				// Restored from the checkpoint, not rebuilt from the start.
				if in := p.ByID["q5-key"].Stats().In; in >= int64(gen.Gen.Events) {
					t.Errorf("split: the new host read %d events again, the whole corpus: it did not restore", in)
				}
			}()
		}
		if want.counts == nil {
			want = reference(t, c, script)
		}
		var got q5Result
		streamtest.CheckFor(t, 3*time.Minute, func() error { // a CI machine loaded by the compose stack has needed more than 90 s
			got = q5Result{counts: map[string]string{}, hot: map[string]q5.Hot{}}
			versions := map[string]uint64{}
			for _, m := range streamtest.Messages(t, js, edge.StreamName(c.Pipeline, "counts")) {
				recs, err := edge.DecodeFrame(m.Data())
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range recs {
					if r.Kind != record.Data {
						continue
					}
					p, err := window.DecodePane(r.Value)
					if err != nil {
						t.Fatal(err)
					}
					k := p.Key + "|" + p.Window.String()
					if p.Version >= versions[k] {
						versions[k], got.counts[k] = p.Version, string(p.Value)
					}
				}
			}
			for _, m := range resultMessages(t, js, c) {
				var h q5.Hot
				if err := json.Unmarshal(m, &h); err != nil {
					t.Fatalf("result %s: %v", m, err)
				}
				got.hot[h.Window.String()] = h
			}
			if len(got.hot) < len(want.hot) || len(got.counts) < len(want.counts) {
				return fmt.Errorf("%d of %d windows, %d of %d counts out", len(got.hot), len(want.hot), len(got.counts), len(want.counts))
			}
			return nil
		})
		if split {
			// The hot auction's bids spread over the bids edge.
			per := map[string]int{}
			total := 0
			for _, m := range streamtest.Messages(t, js, edge.StreamName(c.Pipeline, "bids")) {
				recs, _ := edge.DecodeFrame(m.Data())
				for _, r := range recs {
					if r.Kind == record.Data && string(r.Key) == strconv.FormatInt(nexmark.HotAuctionID, 10) {
						per[m.Subject()]++
						total++
					}
				}
			}
			for subj, n := range per {
				if float64(n) > 0.6*float64(total) {
					t.Errorf("split: %d of the hot auction's %d bids went to %s", n, total, subj)
				}
			}
			if len(per) < 3 {
				t.Errorf("split: the hot auction's bids went to %d partitions: %v", len(per), per)
			}
			t.Logf("split: the hot auction's %d bids by partition: %v", total, per)
		}
		return got
	}
	got := map[bool]q5Result{}
	for _, split := range []bool{false, true} {
		c := plain
		if split {
			c = splitQ5(t)
		}
		got[split] = run(t, c, split)
		r := got[split]
		for k, v := range want.counts {
			if r.counts[k] != v {
				t.Errorf("split %v: count %s = %s, want %s", split, k, r.counts[k], v)
			}
		}
		for w, h := range want.hot {
			if g := r.hot[w]; g.Count != h.Count || !slices.Equal(g.Auctions, h.Auctions) {
				t.Errorf("split %v: window %s: %+v, want %+v", split, w, g, h)
			}
		}
	}
	if !maps.Equal(got[false].counts, got[true].counts) {
		t.Errorf("the split run's counts differ from the unsplit run's")
	}
	t.Logf("%d counts over %d windows equal", len(want.counts), len(want.hot))
}

// q5Result is what q5 gives: per auction and window the final count
// pane's value, and per window its result.
type q5Result struct {
	counts map[string]string // "auction|window" -> value
	hot    map[string]q5.Hot // window -> result
}

// reference is q5 as the window evaluator computes it from the records
// its count stage sees.
func reference(t *testing.T, c *contracts.Contract, script []window.Step) (r q5Result) {
	t.Helper()
	spec, err := window.SpecOf(c)
	if err != nil {
		t.Fatal(err)
	}
	panes, _, err := window.Evaluate(spec, window.Count(), func(r record.Record) []byte { return r.Key }, script)
	if err != nil {
		t.Fatal(err)
	}
	r.counts, r.hot = map[string]string{}, map[string]q5.Hot{}
	for _, rec := range panes {
		p, err := window.DecodePane(rec.Value)
		if err != nil {
			t.Fatal(err)
		}
		r.counts[p.Key+"|"+p.Window.String()] = string(p.Value)
		var v struct{ Count uint64 }
		if err := json.Unmarshal(p.Value, &v); err != nil {
			t.Fatal(err)
		}
		h := r.hot[p.Window.String()]
		h.Window = p.Window
		switch {
		case v.Count > h.Count:
			h.Count, h.Auctions = v.Count, []string{p.Key}
		case v.Count == h.Count:
			h.Auctions = append(h.Auctions, p.Key)
			slices.Sort(h.Auctions)
		}
		r.hot[p.Window.String()] = h
	}
	return r
}
