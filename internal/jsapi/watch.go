package jsapi

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// WatchOptions choose what a key-value watch (WatchKV) delivers.
type WatchOptions struct {
	// UpdatesOnly delivers only what is put after the watch starts, and no
	// end-of-initial-values marker.
	UpdatesOnly bool
	// IgnoreDeletes leaves out deletes and purges.
	IgnoreDeletes bool
	// MetaOnly delivers entries without their values.
	MetaOnly bool
}

// ListKeys returns the keys of bucket that match filter (a subject
// pattern; ">" for all) and hold a value, in the order their latest
// values were stored: jetstream.KeyValue's ListKeysFiltered, through
// WatchKV.
func ListKeys(ctx context.Context, js jetstream.JetStream, bucket, filter string) ([]string, error) {
	w, err := WatchKV(ctx, js, bucket, filter, WatchOptions{IgnoreDeletes: true, MetaOnly: true})
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Stop() }() // stopping only unsubscribes: what ListKeys returns is decided
	var keys []string
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("list the keys of %s: the watch ended", bucket)
			}
			if e == nil {
				return keys, nil
			}
			keys = append(keys, e.Key())
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// WatchKV watches the keys of bucket that match key (a subject pattern;
// ">" for all) as jetstream.KeyValue's Watch does — the latest value of
// each key, a nil entry once those are delivered, then every change —
// but through an ordered pull consumer instead of nats.go's ordered push
// consumer, and asking again while the cluster cannot make the consumer
// for the moment (Watch).
//
// The difference is the wall between processes of one account. A push
// consumer's deliver subject is listed to anyone who may list the
// stream's consumers, and a deliver subject is checked against no
// permission: another process could make a consumer of a stream it may
// write, delivering its own messages to the watcher's inbox, and a push
// watcher takes whatever arrives there with a JetStream reply as an entry
// of the bucket — a forged erasure request, a forged assignment. A pull
// consumer's messages go to the reply subject of each pull, which no API
// discloses. An entry whose reply names another stream is dropped too.
func WatchKV(ctx context.Context, js jetstream.JetStream, bucket, key string, o WatchOptions) (jetstream.KeyWatcher, error) {
	stream, prefix := "KV_"+bucket, "$KV."+bucket+"."
	var w *kvWatcher
	_, err := Watch(ctx, func(ctx context.Context) (jetstream.KeyWatcher, error) {
		var err error
		w, err = startKVWatch(ctx, js, stream, prefix, key, o)
		return w, err
	})
	if err != nil {
		return nil, err
	}
	return w, nil
}

func startKVWatch(ctx context.Context, js jetstream.JetStream, stream, prefix, key string, o WatchOptions) (*kvWatcher, error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{prefix + key}, DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy,
		HeadersOnly: o.MetaOnly, InactiveThreshold: watchInactive}
	if o.UpdatesOnly {
		// From the stream's end as it is now, not "new": a consumer the
		// ordered consumer makes again before delivering anything (after
		// a reconnect) would otherwise start at the end as it is then,
		// past what was put meanwhile.
		st, err := js.Stream(ctx, stream)
		if err != nil {
			return nil, err
		}
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, st.CachedInfo().State.LastSeq+1
	}
	cons, err := js.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return nil, err
	}
	w := &kvWatcher{updates: make(chan jetstream.KeyValueEntry, 256), done: make(chan struct{}), js: js, stream: stream, cons: cons}
	w.init.done = o.UpdatesOnly
	if info := cons.CachedInfo(); info != nil && !o.UpdatesOnly {
		// The consumer says how many values it starts with; with none,
		// their end is now (the buffer is empty).
		if w.initialPending(info.NumPending) {
			w.updates <- nil
		}
	}
	bucket := strings.TrimSuffix(strings.TrimPrefix(prefix, "$KV."), ".")
	cc, err := cons.Consume(func(m jetstream.Msg) {
		meta, err := m.Metadata()
		if err != nil || meta.Stream != stream || !strings.HasPrefix(m.Subject(), prefix) {
			return // not a delivery of this watch's consumer
		}
		op := jetstream.KeyValuePut
		switch m.Headers().Get("KV-Operation") {
		case "DEL":
			op = jetstream.KeyValueDelete
		case "PURGE":
			op = jetstream.KeyValuePurge
		case "":
			switch m.Headers().Get(jetstream.MarkerReasonHeader) {
			case "MaxAge", "Purge":
				op = jetstream.KeyValuePurge
			case "Remove":
				op = jetstream.KeyValueDelete
			}
		}
		if !o.IgnoreDeletes || op == jetstream.KeyValuePut {
			w.send(&kvEntry{bucket: bucket, key: m.Subject()[len(prefix):], value: m.Data(),
				revision: meta.Sequence.Stream, created: meta.Timestamp, delta: meta.NumPending, op: op})
		}
		if w.initialDone(1, meta.NumPending == 0) {
			w.send(nil)
		}
	})
	if err != nil {
		w.deleteConsumer()
		return nil, err
	}
	w.cc = cc
	go func() {
		select {
		case <-ctx.Done():
		case <-cc.Closed(): // the connection closed
		case <-w.done:
		}
		_ = w.Stop() // the watch ends with its context, as nats.go's does
	}()
	return w, nil
}

// watchInactive is how long the server keeps a watch's consumer that
// nobody pulls from: a watch that stops removes it at once (Stop), one
// whose process died leaves it this long.
const watchInactive = time.Minute

// kvWatcher is WatchKV's jetstream.KeyWatcher.
type kvWatcher struct {
	updates chan jetstream.KeyValueEntry
	cc      jetstream.ConsumeContext
	js      jetstream.JetStream
	stream  string
	cons    jetstream.Consumer
	done    chan struct{} // closed by Stop
	once    sync.Once
	// sending is held while an entry is handed over, so that Stop closes
	// updates only once none is.
	sending sync.RWMutex
	stopped bool
	// init tells when the initial values have all been delivered: once
	// received reaches what the consumer had pending when made, or a
	// delivery has nothing pending behind it.
	init struct {
		sync.Mutex
		done              bool
		received, pending uint64
		known             bool
	}
}

// initialDone counts n deliveries, last when nothing is pending behind
// them, and reports whether they end the initial values.
func (w *kvWatcher) initialDone(n uint64, last bool) bool {
	w.init.Lock()
	defer w.init.Unlock()
	if w.init.done {
		return false
	}
	w.init.received += n
	if last || w.init.known && w.init.received >= w.init.pending {
		w.init.done = true
		return true
	}
	return false
}

// initialPending notes how many values the consumer had to deliver when
// made, and reports whether that ends the initial values.
func (w *kvWatcher) initialPending(pending uint64) bool {
	w.init.Lock()
	defer w.init.Unlock()
	if w.init.done {
		return false
	}
	w.init.pending, w.init.known = pending, true
	if w.init.received >= pending {
		w.init.done = true
		return true
	}
	return false
}

func (w *kvWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.updates }

// send delivers e unless the watch has stopped.
func (w *kvWatcher) send(e jetstream.KeyValueEntry) {
	w.sending.RLock()
	defer w.sending.RUnlock()
	if w.stopped {
		return
	}
	select {
	case w.updates <- e:
	case <-w.done:
	}
}

// Stop ends the watch and closes Updates.
func (w *kvWatcher) Stop() error {
	w.once.Do(func() {
		close(w.done) // a send waiting for room gives up
		if w.cc != nil {
			w.cc.Stop()
		}
		w.sending.Lock()
		w.stopped = true
		close(w.updates)
		w.sending.Unlock()
		w.deleteConsumer()
	})
	return nil
}

// deleteConsumer removes the watch's consumer in the background, as
// nats.go's watch does when it unsubscribes; one left behind goes after
// watchInactive.
func (w *kvWatcher) deleteConsumer() {
	info := w.cons.CachedInfo()
	if info == nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.js.DeleteConsumer(ctx, w.stream, info.Name) // best effort: it expires anyway
	}()
}

// kvEntry is a jetstream.KeyValueEntry read by WatchKV.
type kvEntry struct {
	bucket, key string
	value       []byte
	revision    uint64
	created     time.Time
	delta       uint64
	op          jetstream.KeyValueOp
}

func (e *kvEntry) Bucket() string                  { return e.bucket }
func (e *kvEntry) Key() string                     { return e.key }
func (e *kvEntry) Value() []byte                   { return e.value }
func (e *kvEntry) Revision() uint64                { return e.revision }
func (e *kvEntry) Created() time.Time              { return e.created }
func (e *kvEntry) Delta() uint64                   { return e.delta }
func (e *kvEntry) Operation() jetstream.KeyValueOp { return e.op }
