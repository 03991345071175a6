package ingress

import (
	"testing"
	"time"

	"github.com/weirflow/weir/contracts"
)

// TestStreamConfigDuplicateWindow: the stream weir creates remembers
// message IDs for ingress.duplicate_window, two minutes when the contract
// declares none, and never longer than the retention.
func TestStreamConfigDuplicateWindow(t *testing.T) {
	for _, c := range []struct {
		window, retention, want time.Duration
	}{
		{20 * time.Second, 24 * time.Hour, 20 * time.Second},
		{0, 24 * time.Hour, DuplicateWindow},
		{0, time.Minute, time.Minute},
		{10 * time.Minute, 0, 10 * time.Minute},
	} {
		in := contracts.Ingress{Stream: "S", SubjectPrefix: "s", DuplicateWindow: contracts.Duration{Duration: c.window}, Retention: contracts.Duration{Duration: c.retention}}
		if got := StreamConfig(in, 0, 1).Duplicates; got != c.want {
			t.Errorf("duplicate_window %v, retention %v: stream's window %v, want %v", c.window, c.retention, got, c.want)
		}
	}
}
