package test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/pkg/natstest"
)

// TestNATSServerRestartMidRun restarts the NATS server under a running
// pipeline, twice, while it processes: the operators reconnect, their
// consumers resume from the committed positions, and every event reaches
// the sink exactly once.
func TestNATSServerRestartMidRun(t *testing.T) {
	srv := natstest.Run(t)
	js, _ := jetstream.New(srv.Connect(t))
	c := loadContract(t)
	cfg := genConfig(c, 6000)
	cfg.Gen.Hard.FutureEvery = 0
	all := cfg
	all.Count = 6000
	want, _ := expected(t, all)
	rts, _ := runPipeline(t, srv.ClientURL(), c, t.TempDir())
	for part := uint64(0); part < 3; part++ {
		pc := cfg
		pc.Start, pc.Count = part*2000, 2000
		if part > 0 {
			js, _ = jetstream.New(srv.Connect(t))
		}
		publish(t, js, pc)
		// Restart while the pipeline is still working through the part.
		checkFor(t, 60*time.Second, func() error {
			if s := rts[0].Stats(); s.In < int64(part*1500+200) {
				return fmt.Errorf("dedup at %d", s.In)
			}
			return nil
		})
		if part < 2 {
			if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
		}
	}
	js, _ = jetstream.New(srv.Connect(t))
	checkFor(t, 90*time.Second, func() error {
		got, total := sinkEvents(t, js, c)
		if err := checkExactlyOnce(want, got); err != nil {
			return err
		}
		if total != len(want) {
			return fmt.Errorf("sink holds %d for %d ids", total, len(want))
		}
		return nil
	}, func() string {
		return fmt.Sprintf("dedup %+v\npublish %+v", rts[0].Stats(), rts[1].Stats())
	})
}
