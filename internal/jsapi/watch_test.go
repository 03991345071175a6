package jsapi_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/jsapi"
	"github.com/weirflow/weir/pkg/natstest"
)

// next reads the watch's next entry: its key and operation, or "end" for
// the end of the initial values.
func next(t *testing.T, w jetstream.KeyWatcher) string {
	t.Helper()
	select {
	case e, ok := <-w.Updates():
		switch {
		case !ok:
			return "closed"
		case e == nil:
			return "end"
		case e.Operation() == jetstream.KeyValuePut:
			return e.Key() + "=" + string(e.Value())
		default:
			return e.Key() + " " + e.Operation().String()
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no entry within 10s")
		return ""
	}
}

// TestWatchKVAsKeyValueWatches: WatchKV delivers what jetstream.KeyValue's
// watch does — each key's latest value, the end of them (also when a
// filter matches nothing in a bucket that holds other keys), then every
// change — with deletes left out when asked, updates only when asked, and
// nothing after Stop; ListKeys lists the keys holding a value.
func TestWatchKVAsKeyValueWatches(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js := natstest.Run(t).JetStream(t)
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "B", History: 5})
	if err != nil {
		t.Fatal(err)
	}
	for _, kvs := range [][2]string{{"a.1", "x"}, {"a.1", "y"}, {"a.2", "z"}, {"b.1", "w"}} {
		if _, err := kv.Put(ctx, kvs[0], []byte(kvs[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := kv.Delete(ctx, "a.2"); err != nil {
		t.Fatal(err)
	}

	all, err := jsapi.WatchKV(ctx, js, "B", ">", jsapi.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 4 {
		got = append(got, next(t, all))
	}
	if want := []string{"a.1=y", "b.1=w", "a.2 KeyValueDeleteOp", "end"}; !slices.Equal(got, want) {
		t.Errorf("watch of all: %v, want %v", got, want)
	}
	puts, err := jsapi.WatchKV(ctx, js, "B", "a.*", jsapi.WatchOptions{IgnoreDeletes: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{next(t, puts), next(t, puts)}; !slices.Equal(got, []string{"a.1=y", "end"}) {
		t.Errorf("watch of a.* without deletes: %v", got)
	}
	none, err := jsapi.WatchKV(ctx, js, "B", "c.>", jsapi.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := next(t, none); got != "end" {
		t.Errorf("watch of keys none holds: %v, want the end of nothing", got)
	}
	updates, err := jsapi.WatchKV(ctx, js, "B", "a.1", jsapi.WatchOptions{UpdatesOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "a.1", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "a.1"); err != nil {
		t.Fatal(err)
	}
	if got := []string{next(t, updates), next(t, updates)}; !slices.Equal(got, []string{"a.1=v", "a.1 KeyValueDeleteOp"}) {
		t.Errorf("updates only: %v", got)
	}
	if got := []string{next(t, all), next(t, all)}; !slices.Equal(got, []string{"a.1=v", "a.1 KeyValueDeleteOp"}) {
		t.Errorf("watch of all, after its initial values: %v", got)
	}
	if got := next(t, puts); got != "a.1=v" {
		t.Errorf("watch of a.* without deletes, after its initial values: %v", got)
	}
	if err := all.Stop(); err != nil {
		t.Fatal(err)
	}
	if got := next(t, all); got != "closed" {
		t.Errorf("after Stop: %v", got)
	}

	for i := range 300 { // more than a watch buffers
		if _, err := kv.Put(ctx, fmt.Sprintf("n.%d", i), []byte("1")); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := jsapi.ListKeys(ctx, js, "B", ">")
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 301 || keys[0] != "b.1" || keys[300] != "n.299" {
		t.Errorf("ListKeys: %d keys, %v … ", len(keys), keys[:min(3, len(keys))])
	}
	if keys, err := jsapi.ListKeys(ctx, js, "B", "c.>"); err != nil || len(keys) != 0 {
		t.Errorf("ListKeys of keys none holds: %v, %v", keys, err)
	}
}
