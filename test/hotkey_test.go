package test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/pkg/keygroup"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/nexmark"
	"github.com/weirflow/weir/pkg/status"
	"github.com/weirflow/weir/pkg/stream/streamtest"
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
