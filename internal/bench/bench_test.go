package bench

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strconv"
	"testing"
)

var hopBenchmarks = []HopConfig{
	{Mode: Framed},
	{Mode: PerMessage},
	{Mode: PerMessage, Relaxed: true},
}

// BenchmarkHop runs one hop of b.N records per round; only the hop itself
// is timed, not starting the server or creating the stream and consumers.
//
//	go test ./internal/bench -run '^$' -bench Hop -benchtime 3s -count 3
func BenchmarkHop(b *testing.B) {
	ctx := context.Background()
	for _, c := range hopBenchmarks {
		b.Run(c.Name(), func(b *testing.B) {
			b.StopTimer()
			c.Records, c.Dir = b.N, b.TempDir()
			h, err := openHop(ctx, c)
			if err != nil {
				b.Fatal(err)
			}
			defer h.close()
			b.StartTimer()
			res, err := h.run(ctx)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(res.RecordsPerSec, "records/s")
			b.ReportMetric(float64(res.Records)/float64(res.Frames), "records/msg")
		})
	}
}

func TestHop(t *testing.T) {
	ctx := context.Background()
	for _, c := range []HopConfig{
		{Mode: Framed, Records: 600, FrameRecords: 100},
		{Mode: Framed, Records: 600, FrameRecords: 100, Partitions: 3, InFlight: 2},
		{Mode: PerMessage, Records: 300},
		{Mode: PerMessage, Records: 300, Partitions: 2},
		{Mode: PerMessage, Relaxed: true, Records: 300},
	} {
		t.Run(c.Name()+"-p"+strconv.Itoa(max(c.Partitions, 1)), func(t *testing.T) {
			t.Parallel()
			c.Dir = t.TempDir()
			res, err := Hop(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			if res.Records != c.Records || res.Elapsed <= 0 || res.RecordsPerSec <= 0 {
				t.Fatalf("result %+v for %d records", res, c.Records)
			}
			want := c.Records
			if c.Mode == Framed {
				want = c.Records / c.FrameRecords
			}
			if c.Mode == Framed && c.Partitions > 1 {
				// Routing by key leaves partial frames per partition.
				if res.Frames < want || res.Frames > want+c.Partitions*(c.Records/(c.InFlight*c.FrameRecords)+1) {
					t.Fatalf("%d frames, want about %d", res.Frames, want)
				}
			} else if res.Frames != want {
				t.Fatalf("%d messages, want %d", res.Frames, want)
			}
			entries, err := os.ReadDir(c.Dir)
			if err != nil || len(entries) != 0 {
				t.Fatalf("hop left %d entries in its Dir (%v)", len(entries), err)
			}
		})
	}
}

func TestHopRejectsBadConfig(t *testing.T) {
	for _, c := range []HopConfig{
		{Mode: Framed, Records: 0, Dir: t.TempDir()},
		{Mode: Framed, Records: 10},
		{Mode: HopMode(7), Records: 10, Dir: t.TempDir()},
		{Mode: PerMessage, Records: 10, Dir: t.TempDir(), InFlight: -1},
	} {
		if _, err := Hop(context.Background(), c); err == nil {
			t.Errorf("Hop(%+v) succeeded", c)
		}
	}
}

func TestTallyCatchesDuplicatesAndStrangers(t *testing.T) {
	tl := newTally(3)
	payload := func(id uint64) []byte { return makeBid(id).appendJSON(nil) }
	if err := tl.mark(payload(1)); err != nil {
		t.Fatal(err)
	}
	if err := tl.mark(payload(1)); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("second delivery of 1: %v, want ErrDuplicate", err)
	}
	if err := tl.mark(payload(3)); !errors.Is(err, ErrBadRecord) {
		t.Fatalf("id out of range: %v, want ErrBadRecord", err)
	}
	if err := tl.mark([]byte(`{"n":1}`)); !errors.Is(err, ErrBadRecord) {
		t.Fatalf("foreign payload: %v, want ErrBadRecord", err)
	}
	for _, id := range []uint64{0, 2} {
		if tl.complete() {
			t.Fatal("complete before every record arrived")
		}
		if err := tl.mark(payload(id)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-tl.done:
	default:
		t.Fatal("done not closed after every record arrived")
	}
}

func TestBidPayload(t *testing.T) {
	for _, id := range []uint64{0, 7, 123456789} {
		p := makeBid(id).appendJSON(nil)
		if got, ok := bidID(p); !ok || got != id {
			t.Errorf("bidID(%s) = %d, %v", p, got, ok)
		}
		if n := len(p); n < 180 || n > 230 {
			t.Errorf("bid %d is %d bytes, want about 200: %s", id, n, p)
		}
		if !bytes.HasPrefix(p, []byte(`{"id":`+strconv.FormatUint(id, 10)+`,`)) {
			t.Errorf("bid %d: %s", id, p)
		}
	}
}

// TestCompareHop prints the side-by-side comparison of docs/BENCHMARKS-LOG.md.
// It runs for minutes, so only when WEIR_BENCH=1:
//
//	WEIR_BENCH=1 go test ./internal/bench -run TestCompareHop -v -timeout 20m
//
// WEIR_BENCH_RECORDS sets the record count (default 500000).
func TestCompareHop(t *testing.T) {
	if os.Getenv("WEIR_BENCH") != "1" {
		t.Skip("set WEIR_BENCH=1 to run the hop comparison")
	}
	records := 500000
	if s := os.Getenv("WEIR_BENCH_RECORDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("WEIR_BENCH_RECORDS: %v", err)
		}
		records = n
	}
	var out bytes.Buffer
	if err := CompareHop(context.Background(), t.TempDir(), records, &out); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", out.String())
}
