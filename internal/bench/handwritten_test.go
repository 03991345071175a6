package bench

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// TestReadUsage reads this process's CPU time, which grows as it works,
// and its peak memory.
func TestReadUsage(t *testing.T) {
	before, err := ReadUsage(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	sink := 0
	for start := time.Now(); time.Since(start) < 100*time.Millisecond; {
		sink += len(fmt.Sprint(sink))
	}
	after, err := ReadUsage(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after.CPU <= before.CPU || after.PeakRSS < 1<<20 {
		t.Fatalf("CPU %s then %s, peak RSS %d", before.CPU, after.CPU, after.PeakRSS)
	}
	if _, err := ReadUsage(1 << 30); err == nil {
		t.Fatal("no error for a process that does not exist")
	}
}
