// Package producer writes messages into JetStream streams at high rates
// without weakening their durability.
//
// A stream that syncs every write (SyncAlways, as weir's do) pays one fsync
// per stored message when messages are published one by one: about 2–4k
// messages a second on a small machine. An atomic batch
// (AllowAtomicPublish, nats-server 2.12+) is stored whole with one write and
// one acknowledgement, so a producer that batches pays one fsync per batch
// instead, and each message still lands as its own message that any
// consumer reads. A Pipeline keeps a few batches in flight, so the
// producer builds the next batch while the server writes and syncs the
// last; Publish sends a slice of messages through one, in batches of up to
// MaxBatch, in order.
//
// Two cases fall back to publishing message by message, with the same
// result: a stream that does not allow atomic batches, and a batch holding
// a Nats-Msg-Id the stream has already stored — a retry after a failure —
// which the server refuses whole, where one by one the duplicates are
// dropped and the rest stored.
//
// An atomic batch lies in one stream. A producer writing an ingress placed
// over several streams (a contract's ingress.streams: partition p in
// stream p mod N) gathers each stream's messages into batches of their own
// through a Split — a Pipeline per stream, each with its batches in flight
// — and the server stores the streams side by side, each on its own
// goroutine; PublishSplit is Publish for such messages.
//
// A Pipeline can also publish by stream sequence instead of by message ID
// (NewSequenced): no Nats-Msg-Id for the broker to check and
// remember, each batch placed right after the one before it, for
// producers that can tell from the stream where they stopped.
//
// # Durability
//
// The embedded server (pkg/natstest) runs JetStream with SyncAlways;
// deploy/nats.conf sets sync_interval: always. Pebble commits are synced.
// Throughput comes from frames and batches: see docs/BENCHMARKS.md.
//
// Every stream weir writes to allows atomic batch publish
// (AllowAtomicPublish), and everything weir publishes goes through
// pkg/producer: up to 1,000 messages (the server's default limit; the
// embedded server of pkg/natstest takes 10,000, and the demo's generator
// fills them) stored as one atomic batch, with one write and one fsync, each
// still its own message — except a batch of fewer than PlainBelow messages
// all on different subjects (a step's frames, one per partition), which
// goes as plain messages: on a one-replica file stream the server stages
// each atomic batch in a file store of its own, which costs more than the
// small batch's fsyncs. A producer.Pipeline
// keeps up to four batches in flight on one connection, so the next batch is
// built while the server stores the last, and the stream's order is the send
// order; it goes back to one batch at a time after a refusal, so a refused
// batch stored message by message never lands behind a later one. A batch holding a message
// ID the stream already has (a re-publish after a crash) is refused whole by
// the server; the producer then publishes it message by message, where the
// duplicates are dropped and the rest stored, so re-publishing stays
// idempotent. A stream created before atomic batches (an existing ingress) is
// written message by message, correct and slower. The ingress stream weir
// creates remembers producers' message IDs for ingress.duplicate_window
// (two minutes when the contract declares none; pkg/ingress.Duplicates):
// the broker keeps each in memory and updates them on the stream's one
// writing goroutine, which bounds a stream's ingest, so a high-rate ingress
// declares a window as short as its producers' retries (the shipped
// contracts: 20 s). A service refuses to start on an existing ingress
// stream whose window is shorter than the one declared, and logs a longer
// one (checkDuplicateWindow). A stop publishes the frames its last step
// committed, within 5 s; what it cannot publish stays staged for the next
// start.
//
// A producer can do without message IDs altogether:
// producer.NewSequenced puts Nats-Expected-Last-Sequence on the first
// message of each batch and keeps one batch in flight, so a batch is stored
// only right after the one before it, whole or not at all. When other
// writers' messages land first, the stream refuses the batch and the
// Pipeline sends it again after them — unless one of them is its own
// producer's (another instance, or an earlier run's last batch landing
// late), when it fails with ErrOvertaken rather than store events twice.
// Resuming is the producer's own business: nexmark-gen -sequenced and
// weir demo write their position into the last message of each batch
// (Weir-Next-Start) and read it back (nexmarkgen.Resume, which refuses
// when messages were removed before the stream's first and the producer's
// may have been among them). With no IDs to remember the broker stores more
// events a second: 12% more in the demo unpaced, 23% in BenchmarkIngest
// (docs/BENCHMARKS-LOG.md). The ingest gateway keeps IDs: its clients retry.
//
// On a NATS cluster every stream and bucket weir creates — edges, dead-letter
// stream, checkpoint KV and Object Store buckets — has the replicas of the
// deployment setting WEIR_REPLICAS (stream.Config.Replicas, default 1; the
// Kubernetes manifests set 3 on their three servers), so an acknowledged write
// is on a quorum of disks. weir provision -replicas N, run as the
// administrator, creates the assets or brings them to N (raising an R1
// pipeline to R3 in place); a service creates only what is missing, where its
// credentials allow, and refuses to start on assets whose replicas or other
// declared fields differ from its own (jsapi.Declared), naming them —
// it never updates one. Creation is retried when the cluster leaves a
// request unanswered, as it does when several services create one replicated
// stream at once. Clients reconnect to the surviving servers
// without limit: when one of three servers dies, streams and consumers elect
// new leaders on the others and the pipeline goes on exactly-once
// (test/cluster_test.go, on natstest.RunCluster, kills the server leading
// an edge; on a cluster whose routes run through links it can cut, it isolates
// the meta leader from the others while its clients stay connected, heals the
// partition, and kills and restarts the next meta leader). Two things make that hold: a publish whose acknowledgement died
// with its server times out (10 s) and the step publishes again; and a reader
// that sees its consumer's delivery sequence jump — the client dropped
// deliveries, as a pull iterator does when it re-pulls after a reconnect while
// its earlier pull is still served — or hears of a slow consumer, reopens the
// input at its committed position, because delivering what follows would move
// the position past the dropped records. A start waits for its consumers the
// same way: when the broker cannot create them yet — just restarted and still
// recovering its streams, so the creation times out — the run retries with a
// back-off (reopenReader), not ready meanwhile, rather than end the process
// (a trimmed input still stops it at once). Any other step of a start the
// broker does not answer in time — connecting, opening the checkpoint
// buckets, registering, reading fences — ends that run, not the process:
// Runtime.Run and the coordinator's Run start again after a back-off
// when the error says the broker was unreachable or silent
// (jsapi.Unreachable: timeouts, no servers, a dropped connection), as a restarted process
// would. weir scale and weir checkpoint
// open the checkpoint buckets as they are (checkpoint.Open with replicas 0),
// never changing their replicas.
package producer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// Header names the producer of a message: the writer of an edge's frames
// (internal/edge), a generator's events on an ingress, which an ingress
// contract may read a producer's identity from ({from: header, header:
// Weir-Producer}), and what a Sequenced Pipeline tells its own messages
// from other writers' by, when given it (NewSequenced).
const Header = "Weir-Producer"

// MaxBatch is the largest atomic batch a nats-server accepts by default,
// and the batch size Publish uses when given 0. A server configured for
// larger batches (jetstream { limits { batch { max_msgs: N } } }) takes up
// to N: larger batches mean fewer writes, fewer fsyncs and fewer staging
// stores per message. A batch over the server's limit is refused, with an
// error saying so.
const MaxBatch = 1000

// Stats count how a Publish stored its messages.
type Stats struct {
	// Batches were stored atomically; Single messages one by one.
	Batches, Single int
	// Resent counts the batches a Sequenced Pipeline sent again after
	// other writers' messages.
	Resent int
}

// Publish stores msgs in the stream their subjects belong to — one stream
// per call — in order, in atomic batches of up to maxBatch messages (0:
// MaxBatch), and returns once every message is stored
// or found a duplicate of one stored. Message by message, at most
// maxInFlight publishes are outstanding. It changes the messages' headers.
//
// Up to DefaultDepth batches are in flight. A batch is stored whole or not
// at all, so a retry of the same messages in the same batches finds each
// batch either wholly stored (refused, then dropped one by one as
// duplicates) or wholly new, and the stream keeps their order.
func Publish(ctx context.Context, js jetstream.JetStream, msgs []*nats.Msg, maxBatch, maxInFlight int) (Stats, error) {
	return PublishSplit(ctx, js, msgs, 1, nil, maxBatch, maxInFlight)
}

// PublishSplit is Publish for messages bound for several streams: route
// says which, 0 to streams-1, each message is for, and each stream's
// messages go in batches of their own, in order, through a Split — up to
// DefaultDepth batches in flight per stream.
//
// Whatever fails, no message is stored behind a later one of its subject:
// a batch waits while one sharing a subject is in flight, so a batch
// refused or unanswered is not overtaken by the next (a weir edge's
// reader takes a frame stored behind a later one of its writer's for a
// copy, and stops: stream.FrameGapError).
func PublishSplit(ctx context.Context, js jetstream.JetStream, msgs []*nats.Msg, streams int, route func(*nats.Msg) int, maxBatch, maxInFlight int) (Stats, error) {
	s := NewSplit(js, streams, route, maxBatch, 0, maxInFlight)
	defer s.Close()
	for _, p := range s.pipes {
		p.bySubject = true
	}
	for _, m := range msgs {
		if _, err := s.Add(ctx, m); err != nil {
			return s.Stats(), err
		}
	}
	_, err := s.Flush(ctx)
	return s.Stats(), err
}

// fallBack reports whether a refused batch is stored message by message:
// the stream does not allow atomic batches, or the batch repeats a message
// ID the stream holds. A Sequenced Pipeline never falls back: one by one,
// a message the stream dropped as a duplicate would leave the ones behind
// it expecting the wrong sequence. Nor does a batch refused because one of
// its IDs is in process (10158, a cluster's proposal not yet applied, or
// lost and held for the duplicate window): one by one, many in flight,
// the messages behind that one would be stored before it, and a reader
// that drops a frame at or below the last it read from its writer would
// drop it when it comes. Refused whole, the batch is sent again whole.
func (p *Pipeline) fallBack(err error) bool {
	var api *jetstream.APIError
	if p.sequenced || !errors.As(err, &api) {
		return false
	}
	switch api.ErrorCode {
	case errAtomicDisabled, errBatchDuplicate:
		return true
	}
	return false
}

// Error codes of nats-server for atomic batches.
const (
	errAtomicDisabled     jetstream.ErrorCode = 10174 // atomic publish is disabled
	errBatchDuplicate     jetstream.ErrorCode = 10201 // batch contains duplicate message id
	errDuplicateInProcess jetstream.ErrorCode = 10158 // duplicate message id is in process
	errBatchTooLarge      jetstream.ErrorCode = 10199 // atomic publish batch is too large
)

func clearBatchHeaders(msgs []*nats.Msg) {
	for _, m := range msgs {
		m.Header.Del(jetstreamext.BatchIDHeader)
		m.Header.Del(jetstreamext.BatchSeqHeader)
		m.Header.Del(jetstreamext.BatchCommitHeader)
		m.Reply = ""
	}
}

// eachInOrder is Each for a batch the stream refused as a batch: one by
// one, at most maxInFlight outstanding, in order, and a message never sent
// while one of its subject is unacknowledged. A message refused or
// unanswered fails the call with none of its subject behind it stored, so
// the caller's retry keeps each subject's order.
func eachInOrder(ctx context.Context, js jetstream.JetStream, msgs []*nats.Msg, maxInFlight int) error {
	if maxInFlight <= 0 {
		maxInFlight = 64
	}
	for len(msgs) > 0 {
		n := 0
		seen := make(map[string]struct{}, min(len(msgs), 64))
		for n < len(msgs) && n < maxInFlight {
			if _, ok := seen[msgs[n].Subject]; ok {
				break
			}
			seen[msgs[n].Subject] = struct{}{}
			n++
		}
		if err := Each(ctx, js, msgs[:n], n); err != nil {
			return err
		}
		msgs = msgs[n:]
	}
	return nil
}

// Each publishes msgs one by one, at most maxInFlight outstanding (0: 64),
// and waits until JetStream has acknowledged every one. A message
// JetStream reports as a duplicate counts as stored. An acknowledgement
// that does not come within the JetStream context's default timeout — a
// stream without a leader answers nothing — fails the call, so a caller
// that retries is never left waiting on a reply that will not come.
func Each(ctx context.Context, js jetstream.JetStream, msgs []*nats.Msg, maxInFlight int) error {
	if maxInFlight <= 0 {
		maxInFlight = 64
	}
	timeout := js.Options().DefaultTimeout
	futures := make([]jetstream.PubAckFuture, 0, maxInFlight)
	wait := func() error {
		t := time.NewTimer(timeout)
		defer t.Stop()
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return fmt.Errorf("producer: publish %s: %w", f.Msg().Header.Get(jetstream.MsgIDHeader), err)
			case <-t.C:
				return fmt.Errorf("producer: publish %s: no acknowledgement within %s", f.Msg().Header.Get(jetstream.MsgIDHeader), timeout)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		futures = futures[:0]
		return nil
	}
	for _, m := range msgs {
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			return fmt.Errorf("producer: publish %s: %w", m.Header.Get(jetstream.MsgIDHeader), err)
		}
		futures = append(futures, f)
		if len(futures) == maxInFlight {
			if err := wait(); err != nil {
				return err
			}
		}
	}
	return wait()
}
