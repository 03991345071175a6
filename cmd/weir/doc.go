// Command weir is the operator's CLI of weir: it lints and shows contracts,
// provisions streams and credentials, and inspects and steers running
// pipelines — status, checkpoints and savepoints, scaling, recovery, replays
// and shadows, cutovers, views, effects and erasure. `weir help` lists the
// commands; each names its flags and environment variables in -h.
//
// Development builds (without -tags release) add the harness of package
// internal/harness: demo, bench and chaos.
//
// # Recovering from a gap: weir recover
//
// A refusing instance records trimmed.<op>.<inst> in the checkpoint bucket
// and exits. weir recover lists the refusals and every snapshot (recent
// checkpoints and savepoints) with whether the streams still hold what its
// positions need (Store.Gaps), and carries out the choice:
//
//   - restart from a snapshot that is still held (-from-checkpoint N,
//     -from-savepoint S): checkpoint.Restart writes an assignment naming
//     it with the instances that took it, and fences each of them at the
//     snapshot's cut at once, so the whole pipeline restarts from that cut, as
//     a rescale does;
//   - declare the loss (-declare-loss): an audit.ActionDeclareLoss
//     record for the stream, from the first sequence a refused input still
//     needed through one that covers every refused gap. An instance refused for
//     a gap that the stream's newest declaration covers raises its clear mark
//     to the gap's end — never further, and not at all for a loss counted
//     ahead of the reader — and starts, logging who declared it and why.
//
// The third choice of the specification, a bounded rebuild from what is
// retained into a new result generation, is weir replay (below); it does
// not restart the refusing pipeline itself.
//
// # Bounded replay, compare and the audit stream
//
// weir replay -pipeline P -from A -to B runs the pipeline over ingress
// sequences A through B (or the records stored between two times) into a
// new result generation: the runtime (stream.Config.Replay, or a
// service's -replay-generation/-replay-from/-replay-until) renames the
// pipeline P-<generation>, so its edges, result streams, views,
// checkpoint buckets, dead letters and state are its own, while it reads the
// contract's ingress. Each ingress input starts at A — a position, so a range
// retention has already cut into is refused — and reads through B only: the
// reader delivers an End after the last message at or before B
// (edge.Input.Until), and the runtime moves that input's watermark to
// watermark.End. Once every input has ended, every event-time window and
// timer fires, and the final watermark flows downstream behind the last
// panes. The command runs the shipped pipelines' operators in its own
// process, waits until every ingress input ended, nothing lags, every
// watermark is at the end and nothing moves, then stops them and prints what
// each operator read and wrote. A pipeline whose sink releases results at
// checkpoints (transactional, outbox) is refused: a replay runs no
// coordinator and no dispatcher yet; so is one with windows in processing
// time, which the final watermark does not close. A replay sheds nothing
// (its consumers count the live stream past the range as lag), its ingress
// consumers are deleted when it ends, and a generation whose edge streams
// would land on existing ones is refused. -contract replays a changed contract
// into the new generation — a trigger policy, a lateness — beside the live
// one.
//
// weir compare -pipeline P -with Q reads the json result edges (those no
// operator reads) of both generations and compares them result by result,
// revision by revision: a window's result is its key and bounds, its
// revisions its panes in the order stored, compared on everything they say
// but the final flag (which records how far the watermark had gone when
// the pane fired, and so depends on how the input was cut into steps); any
// other record is a result of its own, named by its ID without the
// pipeline's prefix. It reports, per edge, the results equal revision by
// revision, those whose revisions differ (the first differing revision: a
// different value, an extra revision such as an early pane, or a missing one
// such as a retraction), and those only in one generation; a message stored
// again after the duplicate window counts once; -json prints the
// same as one object, and the exit status is 1 when anything differs.
// -until T compares only windows ending at or before event time T: the
// source coordinate both generations reached, since a continuous run's last
// windows stay open while a replay's final watermark closes them. A view
// (versioned-upsert) keeps only each window's newest pane and is not
// compared: weir view list reads both.
//
// Every manual act is appended to the pipeline's audit stream
// WEIR_<P>_AUDIT (subjects weir.<p>.audit.<action>.<target>, no age
// limit, deletes and purges denied): weir checkpoint trigger,
// weir savepoint restore, weir scale, weir recover, weir effects
// retry. weir audit lists them; -as/WEIR_ACTOR names the actor
// (default user@host).
//
// # Migration checks, cutover and the continuous shadow
//
// weir migrate check -savepoint S -contract NEW does the same on a copy
// before anything changes: it downloads each snapshot (checking digests),
// opens it as the new build's state, and prints each change, semantic or
// not; for a semantic one it prints the shadow run to do instead — weir
// replay of the new contract from the savepoint's positions into a shadow
// generation, then weir compare with the live one.
//
// weir cutover -pipeline P -to P-shadow switches readers (to a generation
// of P: P itself or P-<generation>): the KV key
// serving of P's checkpoint bucket (checkpoint.Serving) names the
// generation whose results readers of P read, the one it replaced, the
// rollback savepoint and the end of the observation window (-keep);
// -rollback serves the replaced one again. weir's readers (weir view,
// weir tail) follow it and say so; other readers resolve it with
// checkpoint.ServingOf. weir deletes no generation and no savepoint, so
// both stay for the window and after; the record says until when they are
// needed.
//
// weir shadow (cmd/weir/shadow.go) is the continuous shadow: a
// stream.Replay with Until 0, so the ingress readers start at From
// and read on into the live records, no End and no final watermark —
// windows close when the watermark passes them, as in the live run. Its
// state is kept in -data; started again on it, the instances read on from
// their committed positions (From 1 leaves them as they are, so a gap
// retention opened meanwhile is refused as for any reader). -caught-up
// stops it once every operator has read all its input (the ingress's lag 0),
// stored every result and stayed so for three looks. Services run with
// -replay-generation G -replay-from N and no -replay-until are the same
// thing deployed. A shadow, like a replay, sheds nothing and runs no
// coordinator.
package main
