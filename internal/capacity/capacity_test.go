package capacity_test

import (
	"strings"
	"testing"
	"time"

	"github.com/weirflow/weir/internal/capacity"
)

func near(t *testing.T, what string, got, want time.Duration) {
	t.Helper()
	if d := got - want; d < -time.Millisecond || d > time.Millisecond {
		t.Errorf("%s: %s, want %s", what, got, want)
	}
}

// TestFiguresOnKnownInputs works the arithmetic through by hand: 1,000
// records/s arriving, 1,500 processed, 60,000 behind.
func TestFiguresOnKnownInputs(t *testing.T) {
	f := capacity.Compute(capacity.Inputs{
		ArrivalRate: 1000, RecordBytes: 200, ProcessRate: 1500, Backlog: 60000,
		StateBytes: 1 << 30, ChangedBytes: 50 << 20, Bandwidth: 100 << 20,
		Interval: 10 * time.Second, Replicas: 3,
		Detection: time.Minute, Repair: 5 * time.Minute, Restore: 50 * time.Second, Margin: time.Hour,
		Retention: 24 * time.Hour,
	})
	if f.Never || len(f.Problems) != 0 {
		t.Fatalf("figures %+v: want no problem", f)
	}
	near(t, "catch-up", f.CatchUp, 120*time.Second) // 60,000 / 500
	// Waiting after a failure: 10s + 1m + 5m + 50s = 7m = 420s of
	// arrivals, plus the backlog: 480,000 records, 960s to catch up.
	if f.RecoveryBacklog != 480000 {
		t.Errorf("recovery backlog %.0f, want 480000", f.RecoveryBacklog)
	}
	near(t, "recovery catch-up", f.RecoveryCatchUp, 960*time.Second)
	near(t, "required retention", f.RequiredRetention, 420*time.Second+960*time.Second+time.Hour)
	if want := 1000 * 200 * 86400 * 3.0; f.BrokerBytes != want {
		t.Errorf("broker bytes %.0f, want %.0f", f.BrokerBytes, want)
	}
	near(t, "full upload", f.FullUpload, 10240*time.Millisecond) // 1 GiB / 100 MiB/s
	near(t, "incremental upload", f.IncrementalUpload, 500*time.Millisecond)
	if f.Replay != 70000 {
		t.Errorf("replay %.0f, want 10,000 arrivals of an interval plus the 60,000 backlog", f.Replay)
	}
	near(t, "kept for", f.KeptFor, 24*time.Hour)
}

// TestThreatsAreNamed: a pipeline slower than its input cannot catch up;
// byte limits that keep less than the declared retention, a retention
// shorter than a recovery needs and an upload as long as the interval are
// each named.
func TestThreatsAreNamed(t *testing.T) {
	f := capacity.Compute(capacity.Inputs{ArrivalRate: 2000, ProcessRate: 1500, Backlog: 1000, Retention: time.Hour})
	if !f.Never || f.CatchUp >= 0 || len(f.Problems) != 1 || !strings.Contains(f.Problems[0], "cannot catch up") {
		t.Fatalf("slower than arrival: %+v", f)
	}
	f = capacity.Compute(capacity.Inputs{ArrivalRate: 1000, RecordBytes: 1000, ProcessRate: 1100,
		Retention: 24 * time.Hour, MaxBytes: 1 << 30, Interval: 10 * time.Second,
		StateBytes: 1 << 30, ChangedBytes: 1 << 30, Bandwidth: 50 << 20,
		Detection: time.Minute, Repair: time.Hour, Restore: time.Minute, Margin: time.Hour})
	near(t, "kept for", f.KeptFor, seconds(float64(1<<30)/1e6))
	var named []string
	for _, p := range f.Problems {
		for _, w := range []string{"little margin", "limits keep records only", "shorter than a recovery needs", "takes the whole interval"} {
			if strings.Contains(p, w) {
				named = append(named, w)
			}
		}
	}
	if len(named) != 4 {
		t.Fatalf("problems %q: want each threat named once", f.Problems)
	}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
