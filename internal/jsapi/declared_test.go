package jsapi_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/jsapi"
	"github.com/weirflow/weir/pkg/natstest"
)

func server(t *testing.T) jetstream.JetStream { return natstest.Run(t).JetStream(t) }

// TestCheckRefusesWhatDiffers: Check creates a missing stream, bucket
// and object bucket and then finds each as declared, the fields the
// server fills in left out; a stream changed by hand — its max age, a
// republish added — and a bucket of another history are refused, naming
// the fields, and left as they are. Provision brings them back, and then
// finds them as declared.
func TestCheckRefusesWhatDiffers(t *testing.T) {
	js := server(t)
	ctx := context.Background()
	stream := jsapi.Declared{Stream: jetstream.StreamConfig{Name: "S", Subjects: []string{"s.*"}, MaxAge: time.Hour,
		Duplicates: time.Minute, AllowAtomicPublish: true}}
	kv := jsapi.Declared{Kind: jsapi.KindKeyValue, KV: jetstream.KeyValueConfig{Bucket: "B", History: 4, TTL: time.Hour}}
	obj := jsapi.Declared{Kind: jsapi.KindObjectStore, Obj: jetstream.ObjectStoreConfig{Bucket: "O"}}
	for _, d := range []jsapi.Declared{stream, kv, obj} {
		for range 2 {
			if err := jsapi.Check(ctx, js, d); err != nil {
				t.Fatalf("%s: %v", d, err)
			}
		}
	}

	cfg := stream.Stream
	cfg.MaxAge = 2 * time.Hour
	cfg.RePublish = &jetstream.RePublish{Source: "s.*", Destination: "elsewhere.{{wildcard(1)}}"}
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	changed := kv.KV
	changed.History = 2
	if _, err := js.UpdateKeyValue(ctx, changed); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		d    jsapi.Declared
		want []string
	}{
		{stream, []string{"stream S", "max_age is 2h0m0s, the contract wants 1h0m0s", "republish is", "the contract wants none", "weir provision"}},
		{kv, []string{"key-value bucket B", "max_msgs_per_subject is 2, the contract wants 4"}},
	} {
		err := jsapi.Check(ctx, js, c.d)
		var differs *jsapi.DiffersError
		if !errors.As(err, &differs) || !errors.Is(err, jsapi.ErrDiffers) {
			t.Fatalf("%s changed by hand: %v", c.d, err)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: the refusal does not say %q: %v", c.d, w, err)
			}
		}
	}
	if st, err := js.Stream(ctx, "S"); err != nil || st.CachedInfo().Config.MaxAge != 2*time.Hour {
		t.Fatalf("Check changed the stream (%v)", err)
	}

	for _, c := range []struct {
		d      jsapi.Declared
		action string
	}{{stream, jsapi.Updated}, {kv, jsapi.Updated}, {obj, jsapi.AsDeclared}} {
		out, err := jsapi.Provision(ctx, js, c.d)
		if err != nil || out.Action != c.action {
			t.Fatalf("provision %s: %v (%v), want %s", c.d, out, err, c.action)
		}
		t.Log(out)
		if err := jsapi.Check(ctx, js, c.d); err != nil {
			t.Fatalf("%s after provision: %v", c.d, err)
		}
	}
}

// TestProvisionKeepsACreateOnlyStream: a create-only stream (the audit
// trail) that differs is reported and left as it is.
func TestProvisionKeepsACreateOnlyStream(t *testing.T) {
	js := server(t)
	ctx := context.Background()
	d := jsapi.Declared{CreateOnly: true, Stream: jetstream.StreamConfig{Name: "A", Subjects: []string{"a.>"}, DenyDelete: true, DenyPurge: true}}
	if out, err := jsapi.Provision(ctx, js, d); err != nil || out.Action != jsapi.Created {
		t.Fatalf("%v (%v)", out, err)
	}
	cfg := d.Stream
	cfg.MaxMsgs = 10
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	out, err := jsapi.Provision(ctx, js, d)
	if err != nil || out.Action != jsapi.Kept || !strings.Contains(out.String(), "max_msgs 10 → -1") {
		t.Fatalf("%v (%v)", out, err)
	}
	if st, err := js.Stream(ctx, "A"); err != nil || st.CachedInfo().Config.MaxMsgs != 10 {
		t.Fatalf("the create-only stream was changed (%v)", err)
	}
}
