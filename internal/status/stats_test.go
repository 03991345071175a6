package status

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/weirflow/weir/internal/status/meta"
	"github.com/weirflow/weir/pkg/natstest"
)

// TestStatsRoundTrip: an instance's Stats read back as its endpoint
// encoded them, over a real broker; a reply that is no Stats is an error,
// never an instance with zero counters.
func TestStatsRoundTrip(t *testing.T) {
	want := Stats{Operator: "dedup", Instance: "0", Ready: true, Steps: 3, In: 10, Out: 9, Busy: 0.25,
		InputBusy: map[string]float64{"ingress/0": 0.5}, StateKeys: map[string]int64{"seen": 4},
		Watermark: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Paused: []string{"ingress/1"},
		InputWatermarks: map[string]time.Time{"ingress/0": time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)}}
	nc := natstest.Run(t).Connect(t)
	replies := map[string][]byte{"p.dedup.0": nil, "p.dedup.1": []byte(`{"operator":"dedup","instance":"1","colour":"red"}`), "p.dedup.2": []byte(`{}`)}
	for subject, reply := range replies {
		sub, err := nc.Subscribe("weir.svc."+subject+".status", func(m *nats.Msg) {
			b := reply
			if b == nil {
				var err error
				if b, err = EncodeStats(want); err != nil {
					t.Error(err)
				}
			}
			if err := m.Respond(b); err != nil {
				t.Error(err)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := RequestStats(ctx, nc, "p", "dedup", "0")
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("RequestStats: %+v %v, want %+v", got, err, want)
	}
	for _, inst := range []string{"1", "2"} {
		if got, err := RequestStats(ctx, nc, "p", "dedup", inst); err == nil {
			t.Errorf("instance %s's malformed reply read as %+v", inst, got)
		}
	}
}

// TestCoordinatorMetadataRoundTrip: a coordinator's registration reads
// back as registered; a memory that is no number is an error, not 0.
func TestCoordinatorMetadataRoundTrip(t *testing.T) {
	info := micro.Info{ServiceIdentity: micro.ServiceIdentity{ID: "abc", Metadata: CoordinatorMetadata("p", "co-1", 64<<20)}}
	ref, err := coordinatorOf(info)
	if want := (CoordinatorRef{Holder: "co-1", Service: "abc", Memory: 64 << 20}); err != nil || ref != want {
		t.Errorf("coordinatorOf: %+v %v, want %+v", ref, err, want)
	}
	info.Metadata[meta.Memory] = "lots"
	if _, err := coordinatorOf(info); err == nil {
		t.Errorf("a memory of %q read without an error", "lots")
	}
}
