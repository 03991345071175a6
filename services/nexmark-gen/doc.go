// Package nexmarkgen publishes the Nexmark event stream of package
// internal/nexmark into a JetStream ingress stream, as a weir pipeline's source
// expects it.
//
// Each generated message goes to "<prefix>.<partition>", where the
// partition owns the key group of the event's ID (see internal/nexmark), with
// the headers Nats-Msg-Id "<producer>-<event index>" (plus "-dup" on an
// injected duplicate, so that JetStream stores it and the pipeline, not the
// broker, has to deduplicate it), Weir-Producer and Nats-Expected-Stream.
// The stream is file-backed with limits retention, MaxAge = Retention and
// a duplicate window of DuplicateWindow (a contract's
// ingress.duplicate_window; two minutes when it declares none).
//
// Publishing is deterministic and resumable. The generator's publish order
// is a pure function of its config; Publish starts at position Config.Start
// and reports, through its progress callback and its result, how many
// messages in a row the broker has acknowledged. A publisher that dies
// restarts with Start advanced by that count, or anywhere before it:
// re-published messages carry the same Nats-Msg-Id and payload, so within
// the duplicate window the broker drops them and the stream is unchanged.
//
// A generator can publish by stream sequence instead (Config.Sequenced,
// the -sequenced flag; weir demo does): no Nats-Msg-Id, one batch in
// flight, each placed right after the one before it and sent again after
// other writers' messages when they land first, and the last message of
// each batch carrying the position after it (Weir-Next-Start), which
// Resume reads back. Without IDs to remember the broker stores more
// events a second (docs/BENCHMARKS-LOG.md, "Publishing by sequence").
//
// Publishing stores atomic batches of up to Batch messages through a
// pkg/producer Pipeline: one write and one fsync per batch on a SyncAlways
// stream, a few batches in flight (one when Sequenced), sent on one
// connection so the stream's order is the generator's. It paces itself to
// Rate messages per wall-clock second from an injected clock (a timer per
// wait, no busy loop); when nothing more is due it sends what it holds if no batch is in
// flight, and otherwise lets the next batch grow until one is stored (group
// commit). On cancellation it stops generating, waits for the batches in
// flight, and returns the stored count.
//
// An ingress placed over several streams (Config.Streams, a contract's
// ingress.streams; -contract sets it) has partition p in Stream_<p mod N>:
// EnsureStream makes each, capturing its partitions' subjects, and Publish
// gathers each stream's messages into batches of their own through a
// producer.Split, with Nats-Expected-Stream naming the message's stream.
// The count it reports is still what is stored in a row from Start over
// every stream. Publishing by sequence is one stream's: it is refused over
// several.
//
// The binary lives in cmd/nexmark-gen; its flags and environment are
// described by Run.
package nexmarkgen
