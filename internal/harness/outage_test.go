package harness

import (
	"io"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestAPipelineOutlastsABrokerThatDoesNotAnswer starts a pipeline's
// processes while their broker does not answer — stopped with SIGSTOP for
// seven seconds, as a broker busy recovering its streams after a restart
// looks to its clients — and every one of them waits for it and comes up
// ready instead of ending. weir chaos found it: a restart under a rescale's
// new assignment, landing while a restarted broker recovered, ended
// service processes on a request that timed out.
func TestAPipelineOutlastsABrokerThatDoesNotAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	b := &nexmarkBench{cat: testHarness().Catalog, exe: exe, dir: t.TempDir(), interval: time.Second, log: io.Discard}
	r, err := b.open(ctx, "q5", "")
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	if err := r.broker.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := time.AfterFunc(7*time.Second, func() { _ = r.broker.cmd.Process.Signal(syscall.SIGCONT) })
	defer resumed.Stop()
	if err := r.start(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range r.procs {
		if err := p.failed(); err != nil {
			t.Error(err)
		}
	}
	if err := r.publish(ctx, 500, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.waitDrained(ctx, 500); err != nil {
		t.Fatal(err)
	}
}
