// Package bench measures what weir's design choices cost and buy, on a real
// embedded JetStream server.
//
// Hop measures one edge hop: records published to a JetStream stream, pulled
// by a consumer and acknowledged, end to end, in records per second. It runs
// the hop the way weir does it (Framed: records batched into frames by
// edge.Writer, published with edge.Publish, read with edge.Reader, decoded
// with edge.DecodeFrame, one ack per frame) or the way a user would write it
// by hand (PerMessage: one JetStream message and one ack per record), on a
// server that syncs every write to disk before acknowledging it (SyncAlways,
// weir's setting) or, with Relaxed, on one that uses the server's default
// sync interval. Under SyncAlways the server pays one fsync per JetStream
// message, so a frame of hundreds of records pays one fsync where the
// per-message hop pays hundreds. CompareHop runs the hops side by side in one
// process and prints their ratios; docs/BENCHMARKS-LOG.md records the figures.
//
// Every hop checks what it measures: each record must be received exactly
// once, every message acknowledged and none redelivered, or Hop returns an
// error instead of a figure.
//
// `weir bench nexmark` (internal/harness) weighs whole pipelines against the pieces
// here: FetchAndAck, the physical limit of reading a stream (a bare
// consumer, acknowledging in bulk, doing nothing else); ReadAndWrite, the
// floor of a query that writes a synced result per event (the same read,
// each message stored again in atomic batches); HandWritten, a
// Nexmark query as a user writes it with nats.go and maps (internal/catalog
// holds them, beside the queries), with none of
// weir's guarantees; Ingest, storing events through pkg/producer's atomic
// batches or one message per publish; and ReadUsage, a process's CPU time
// and peak memory from /proc. A Measurement is one figure of such a run,
// printed as a table or as JSON lines. Costs reads the CPU profiles of a
// run's processes into its per-event cost model: µs per event by stage
// and process, the broker's included.
package bench
