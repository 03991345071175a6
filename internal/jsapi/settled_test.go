package jsapi_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/jsapi"
)

// TestSettledWaitsForAStreamTheClusterDoesNotKnowYet: a lookup right after
// a check is retried while the stream is not found, as a cluster answers
// for a moment about a stream just created, and succeeds once it is there;
// a stream that never comes is still not found.
func TestSettledWaitsForAStreamTheClusterDoesNotKnowYet(t *testing.T) {
	js := server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() {
		time.Sleep(400 * time.Millisecond)
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "LATE", Subjects: []string{"late"}}); err != nil {
			t.Error(err)
		}
	}()
	var st jetstream.Stream
	err := jsapi.Settled(ctx, "look up LATE", func(ctx context.Context) (err error) {
		st, err = js.Stream(ctx, "LATE")
		return err
	})
	if err != nil || st.CachedInfo().Config.Name != "LATE" {
		t.Fatalf("a stream created while it was looked up: %v", err)
	}
	short, stop := context.WithTimeout(ctx, time.Second)
	defer stop()
	err = jsapi.Settled(short, "look up NEVER", func(ctx context.Context) error {
		_, err := js.Stream(ctx, "NEVER")
		return err
	})
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("a stream that never comes: %v, want not found", err)
	}
}
