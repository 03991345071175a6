package jsapi_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/jsapi"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/stream/streamtest"
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

// TestWatchKVAcrossAServerRestart: a watch of updates only gets what was
// put while it reconnected (its consumer, made again before delivering
// anything, starts where the watch began, not at the stream's end then);
// a watch ends when its connection closes; and what watches and listings
// leave on the server goes with them. Each was found missing in review
// (helper-27), against nats.go's watch.
func TestWatchKVAcrossAServerRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := natstest.Run(t)
	nc, err := nats.Connect(srv.ClientURL(), nats.ReconnectWait(3*time.Second), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "B"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "k", []byte("v0")); err != nil {
		t.Fatal(err)
	}
	w, err := jsapi.WatchKV(ctx, js, "B", "k", jsapi.WatchOptions{UpdatesOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	kv2, err := srv.JetStream(t).KeyValue(ctx, "B")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv2.Put(ctx, "k", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	select {
	case e, ok := <-w.Updates():
		if !ok || e == nil || string(e.Value()) != "v1" {
			t.Fatalf("after the restart the watch gave %v (open %t), want k=v1", e, ok)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the put made while the watch reconnected never arrived")
	}

	for range 5 {
		if _, err := jsapi.ListKeys(ctx, js, "B", ">"); err != nil {
			t.Fatal(err)
		}
	}
	streamtest.CheckFor(t, 10*time.Second, func() error {
		st, err := js.Stream(ctx, "KV_B")
		if err != nil {
			return err
		}
		if n := st.CachedInfo().State.Consumers; n != 0 {
			return fmt.Errorf("%d consumers after a watch and five listings, want none", n)
		}
		return nil
	})

	all, err := jsapi.WatchKV(ctx, js, "B", ">", jsapi.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{next(t, all), next(t, all)}; !slices.Equal(got, []string{"k=v1", "end"}) {
		t.Fatalf("watch of all: %v", got)
	}
	nc.Close()
	if got := next(t, all); got != "closed" {
		t.Errorf("after its connection closed the watch gave %v, want it closed", got)
	}
}

// TestListKeysReadsPastAFullBatch: a batched direct get ends at a count
// or at a byte limit, whichever comes first; a listing that took a short
// batch for the end of the bucket stopped early — and a collection that
// lists the manifests still in use deleted the files of those it did not
// see (an attacker's review, helper-29). Keys of 64 KiB values fill
// batches by bytes long before by count.
func TestListKeysReadsPastAFullBatch(t *testing.T) {
	ctx, js, kv := bucketB(t)
	big := make([]byte, 64<<10)
	for i := range 40 {
		if _, err := kv.Put(ctx, fmt.Sprintf("big.%d", i), big); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kv.Put(ctx, "manifest.last", []byte("x")); err != nil {
		t.Fatal(err)
	}
	keys, err := jsapi.ListKeys(ctx, js, "B", ">")
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 41 || keys[40] != "manifest.last" {
		t.Errorf("ListKeys: %d keys, the last %q; want 41, the last manifest.last", len(keys), keys[len(keys)-1])
	}
	w, err := jsapi.WatchKV(ctx, js, "B", ">", jsapi.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	n := 0
	for next(t, w) != "end" {
		n++
	}
	if n != 41 {
		t.Errorf("a watch's initial values: %d, want 41", n)
	}
}

// TestAnIdleWatchAsksCheaply: a watch that has read everything asks four
// times a second whether more is stored. Each batched direct get makes a
// subscription, whose channel nats.go allocates at 64k entries — half a
// megabyte per ask, per watch, in every service — so an idle watch asks
// with one direct get instead, through the connection's shared inbox,
// and still sees what is put next.
func TestAnIdleWatchAsksCheaply(t *testing.T) {
	ctx, js, kv := bucketB(t)
	var ws []jetstream.KeyWatcher
	for range 8 {
		w, err := jsapi.WatchKV(ctx, js, "B", ">", jsapi.WatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = w.Stop() }()
		if got := next(t, w); got != "end" {
			t.Fatalf("first entry %s, want the end of none", got)
		}
		ws = append(ws, w)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const idle = 2 * time.Second
	time.Sleep(idle)
	runtime.ReadMemStats(&after)
	asks := int(idle / jsapi.WatchPoll * 8)
	if per := (after.TotalAlloc - before.TotalAlloc) / uint64(asks); per > 64<<10 {
		t.Errorf("an idle watch allocates %d bytes per ask (%d asks), want under 64 KiB", per, asks)
	}
	if _, err := kv.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if got := next(t, w); got != "k=v" {
			t.Fatalf("after idling: %s, want k=v", got)
		}
	}
}

// bucketB is a key-value bucket B on a server of the test's own, with a
// context that ends with the test or after a minute.
func bucketB(t *testing.T) (context.Context, jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	js := natstest.Run(t).JetStream(t)
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "B"})
	if err != nil {
		t.Fatal(err)
	}
	return ctx, js, kv
}
