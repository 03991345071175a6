package jsapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
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

// WatchPoll is how often a watch (WatchKV) asks for what was put since it
// last asked, when the last answer had nothing more.
const WatchPoll = 250 * time.Millisecond

// ListKeys returns the keys of bucket that match filter (a subject
// pattern; ">" for all) and hold a value, in the order their latest
// values were stored: jetstream.KeyValue's ListKeysFiltered, read as
// WatchKV reads.
func ListKeys(ctx context.Context, js jetstream.JetStream, bucket, filter string) ([]string, error) {
	stream, prefix := "KV_"+bucket, "$KV."+bucket+"."
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	latest, _, err := lastPerKey(ctx, js, stream, prefix+filter, st.CachedInfo().State.LastSeq)
	if err != nil {
		return nil, fmt.Errorf("list the keys of %s: %w", bucket, err)
	}
	var keys []string
	for _, m := range latest {
		if operation(m.Header) == jetstream.KeyValuePut {
			keys = append(keys, m.Subject[len(prefix):])
		}
	}
	return keys, nil
}

// WatchKV watches the keys of bucket that match key (a subject pattern;
// ">" for all) as jetstream.KeyValue's Watch does — the latest value of
// each key, a nil entry once those are delivered, then every change — but
// by batched direct gets (jetstreamext.GetBatch) from the stream, asked
// again every WatchPoll, instead of through a consumer.
//
// The difference is the wall between processes of one account. A
// consumer is listed, with its name, filter and deliver subject, to
// anyone who may list the stream's consumers, and anyone who may make
// consumers of the stream may change it: filter it away from what it
// watched, pause it — a watch of erasures that silently never hears of
// one again — or, for nats.go's push consumer, have a consumer of its own
// deliver forged entries to its deliver subject, which no permission
// checks. A direct get makes nothing on the server that another process
// could find or change, and its answers come to the asker's inbox. The
// processes that only watch and read a bucket are granted no consumer of
// it (access).
//
// The watch ends, closing Updates, when ctx ends, Stop is called or the
// connection closes; while the broker is away it asks again.
func WatchKV(ctx context.Context, js jetstream.JetStream, bucket, key string, o WatchOptions) (jetstream.KeyWatcher, error) {
	stream, prefix := "KV_"+bucket, "$KV."+bucket+"."
	var last uint64
	var st jetstream.Stream
	err := Retry(ctx, "watch "+bucket, func(ctx context.Context) error {
		var err error
		if st, err = js.Stream(ctx, stream); err == nil {
			last = st.CachedInfo().State.LastSeq
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	w := &kvWatcher{updates: make(chan jetstream.KeyValueEntry, 256), done: make(chan struct{}), finished: make(chan struct{}),
		js: js, st: st, bucket: bucket, stream: stream, prefix: prefix, filter: prefix + key, o: o}
	go w.run(ctx, last)
	return w, nil
}

// kvWatcher is WatchKV's jetstream.KeyWatcher.
type kvWatcher struct {
	updates        chan jetstream.KeyValueEntry
	done, finished chan struct{}
	once           sync.Once

	js                             jetstream.JetStream
	st                             jetstream.Stream
	bucket, stream, prefix, filter string
	o                              WatchOptions
}

func (w *kvWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.updates }

// Stop ends the watch; Updates is closed when it returns.
func (w *kvWatcher) Stop() error {
	w.once.Do(func() { close(w.done) })
	<-w.finished
	return nil
}

// send delivers e unless the watch has ended.
func (w *kvWatcher) send(ctx context.Context, e jetstream.KeyValueEntry) bool {
	select {
	case w.updates <- e:
		return true
	case <-w.done:
	case <-ctx.Done():
	}
	return false
}

// deliver sends the entry of m unless the options leave it out.
func (w *kvWatcher) deliver(ctx context.Context, m *jetstream.RawStreamMsg) bool {
	op := operation(m.Header)
	if w.o.IgnoreDeletes && op != jetstream.KeyValuePut {
		return true
	}
	e := &kvEntry{bucket: w.bucket, key: m.Subject[len(w.prefix):], revision: m.Sequence, created: m.Time, op: op}
	if !w.o.MetaOnly {
		e.value = m.Data
	}
	e.delta, _ = strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
	return w.send(ctx, e)
}

// run delivers the latest entries through stream sequence last (unless
// updates only), the end of them, and then each entry stored after last.
func (w *kvWatcher) run(ctx context.Context, last uint64) {
	defer close(w.finished)
	defer close(w.updates)
	next := last + 1
	if !w.o.UpdatesOnly {
		for attempt := 1; ; attempt++ {
			latest, _, err := lastPerKey(ctx, w.js, w.stream, w.filter, last)
			if err == nil {
				for _, m := range latest {
					if !w.deliver(ctx, m) {
						return
					}
				}
				if !w.send(ctx, nil) {
					return
				}
				break
			}
			if !w.wait(ctx, err, Backoff(attempt)) {
				return
			}
		}
	}
	idle := false
	for attempt := 0; ; {
		var n int
		var err error
		if idle {
			idle = w.nothingAt(ctx, next)
		}
		if !idle {
			n, err = getBatch(ctx, w.js, w.stream, w.filter, next, func(m *jetstream.RawStreamMsg) bool {
				next = m.Sequence + 1
				return w.deliver(ctx, m)
			})
		}
		pause := WatchPoll
		if err != nil {
			attempt++
			pause = Backoff(attempt)
		} else {
			attempt = 0
			if n > 0 {
				// A batch ends at a count or at the server's byte limit:
				// only an empty one says nothing more is stored.
				continue
			}
			idle = true
		}
		if !w.wait(ctx, err, pause) {
			return
		}
	}
}

// nothingAt asks, by one direct get of the next message on the watch's
// filter at or after seq, whether nothing is stored there yet: the
// question a watch that has read everything asks four times a second.
// A batched direct get answers it too, but jetstreamext.GetBatch makes a
// subscription for each call, whose channel nats.go allocates at 64k
// entries — half a megabyte of garbage per watch per poll, about a tenth
// of a query service's allocations in `weir bench nexmark`. A single
// direct get is answered through the connection's shared inbox. Any
// answer but "not found" (a message, or a failure) sends the watch to
// the batched get, which checks what it reads.
func (w *kvWatcher) nothingAt(ctx context.Context, seq uint64) bool {
	actx, cancel := context.WithTimeout(ctx, w.js.Options().DefaultTimeout)
	defer cancel()
	_, err := w.st.GetMsg(actx, seq, jetstream.WithGetMsgSubject(w.filter))
	return errors.Is(err, jetstream.ErrMsgNotFound)
}

// wait pauses the watch after an answer (err its failure, if any), and
// reports whether it goes on.
func (w *kvWatcher) wait(ctx context.Context, err error, d time.Duration) bool {
	if errors.Is(err, nats.ErrConnectionClosed) {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-w.done:
	case <-ctx.Done():
	}
	return false
}

// getBatchSize and getBatchBytes bound what one direct get of a watch
// asks for: whichever is reached first ends the batch.
const (
	getBatchSize  = 256
	getBatchBytes = 1 << 20
)

// getBatch reads, by a batched direct get, up to getBatchSize messages of
// stream on filter from sequence from, in order, calling fn with each
// until it returns false, and returns how many it read.
func getBatch(ctx context.Context, js jetstream.JetStream, stream, filter string, from uint64, fn func(*jetstream.RawStreamMsg) bool) (int, error) {
	actx, cancel := context.WithTimeout(ctx, js.Options().DefaultTimeout)
	defer cancel()
	msgs, err := jetstreamext.GetBatch(actx, js, stream, getBatchSize, jetstreamext.GetBatchSeq(from), jetstreamext.GetBatchSubject(filter),
		jetstreamext.GetBatchMaxBytes(getBatchBytes))
	if err != nil {
		return 0, err
	}
	n := 0
	for m, err := range msgs {
		switch {
		case errors.Is(err, jetstreamext.ErrNoMessages):
			return n, nil
		case err != nil:
			return n, err
		case m.Header.Get(jetstream.StreamHeader) != stream || !subjectMatches(filter, m.Subject):
			return n, fmt.Errorf("a direct get of %s answered with %s of %s", stream, m.Subject, m.Header.Get(jetstream.StreamHeader))
		}
		n++
		if !fn(m) {
			return n, context.Canceled
		}
	}
	return n, nil
}

// lastPerKey reads the latest message of each key of stream on filter up
// to sequence upTo, in stream order, and how many messages it read.
func lastPerKey(ctx context.Context, js jetstream.JetStream, stream, filter string, upTo uint64) ([]*jetstream.RawStreamMsg, int, error) {
	latest := map[string]*jetstream.RawStreamMsg{}
	read := 0
	for next := uint64(1); next <= upTo; {
		n, err := getBatch(ctx, js, stream, filter, next, func(m *jetstream.RawStreamMsg) bool {
			next = m.Sequence + 1
			if m.Sequence <= upTo {
				latest[m.Subject] = m
			}
			return true
		})
		read += n
		if err != nil {
			return nil, read, err
		}
		if n == 0 {
			// A batch ends at a count or at the server's byte limit
			// (max_pending): only an empty one says nothing more is
			// stored.
			break
		}
	}
	out := make([]*jetstream.RawStreamMsg, 0, len(latest))
	for _, m := range latest {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b *jetstream.RawStreamMsg) int { return cmp.Compare(a.Sequence, b.Sequence) })
	return out, read, nil
}

// subjectMatches reports whether subject matches the subject pattern
// filter (tokens, * and a trailing >).
func subjectMatches(filter, subject string) bool {
	ft, st := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, f := range ft {
		switch {
		case f == ">":
			return len(st) > i
		case i >= len(st):
			return false
		case f != "*" && f != st[i]:
			return false
		}
	}
	return len(ft) == len(st)
}

// operation is what a key-value message records: a put, or a delete or
// purge marker (its KV-Operation header, or a marker the server wrote).
func operation(h nats.Header) jetstream.KeyValueOp {
	switch h.Get("KV-Operation") {
	case "DEL":
		return jetstream.KeyValueDelete
	case "PURGE":
		return jetstream.KeyValuePurge
	case "":
		switch h.Get(jetstream.MarkerReasonHeader) {
		case "MaxAge", "Purge":
			return jetstream.KeyValuePurge
		case "Remove":
			return jetstream.KeyValueDelete
		}
	}
	return jetstream.KeyValuePut
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
