// Package edge carries records between weir operators over JetStream.
//
// An edge is a weir-owned JetStream stream with limits retention, one subject
// per partition: weir.<pipeline>.<edge>.<partition>. Records are batched into
// frames so that one JetStream message carries many records: JetStream syncs
// every write to disk (SyncAlways), and a frame of a few hundred records costs
// one sync instead of hundreds. Control records (watermark, idle, barrier, end
// of input) travel inside the same frames as data, in order, so a replay of an
// edge sees exactly what the first reader saw.
//
// Every frame has a deterministic Nats-Msg-Id built from the pipeline,
// producing operator, instance, generation, partition and the partition's
// frame sequence, and carries epoch and generation headers. A producer that
// crashes after staging a frame and re-publishes it on restart sends the same
// ID, which JetStream's duplicate window drops; a reader also drops frames
// whose sequence it has already passed, so a duplicate published after the
// window closes is dropped too.
//
// Readers pull with a bounded batch and a bounded MaxAckPending: an operator
// never holds more unacknowledged input than its contract allows.
//
// An edge's stream is declared from the contract once (ForContract,
// Declared): weir provision creates it or brings it to the declaration, and
// its writer and readers check it when they open it (Ensure) and refuse
// one that differs — they never change it. A reader's per-instance durable
// consumers are its own runtime state, made anew at every open.
//
// # Frames and messages
//
// An edge is a JetStream stream WEIR_<PIPELINE>_<EDGE>, subjects
// weir.<pipeline>.<edge>.<p>, limits retention, file storage, MaxAge from the
// contract, a 10-minute duplicate window. A frame is one message carrying many
// records in a small versioned binary format (internal/edge/frame.go; version 4
// carries each record's tenant and is written only for a frame holding one,
// version 3 writes times as Unix seconds plus nanoseconds, exact for every
// time, and frames of versions 3 and 2 (Unix nanoseconds) still read — an
// older reader refuses a newer version, so a running pipeline upgrades its
// downstream services first, and a pipeline without tenants, whose frames
// stay version 3, can roll back past the build that added them); control
// records (watermark, idle, barrier, end) are records in the same frames, in
// order. Frame headers: Nats-Msg-Id =
// <pipeline>.<operator>/<instance>.g<generation>.<edge>.<partition>.<seq>,
// Weir-Producer, Weir-Generation, Weir-Epoch, Weir-Frame-Seq,
// Weir-Records, and Weir-Erased once the writer has applied an erasure.
// Frames are cut at frame_max_records / frame_max_bytes and at the end
// of every step.
//
// A json edge's message carries one record's value; its Nats-Msg-Id is
// <pipeline>.<edge>.<id> with the record ID escaped (edge.IDPart:
// whitespace, control characters, % and bytes that are not UTF-8 as %XX,
// and beyond 200 bytes a prefix plus the ID's SHA-256), because NATS trims
// and rewrites header values and JetStream would drop a second message whose
// ID came out equal; Weir-Key carries the key escaped the same way.
//
// Readers (edge.OpenReader) create one durable pull consumer per input
// partition, filtered to its subject, starting after the position recorded in
// state, with MaxAckPending and the pull batch bounded by the contract. On
// weir edges the consumers are kept in the broker's memory (MemoryStorage):
// the committed position, not the consumer, says where reading resumes, and
// a file-backed consumer's state is written and synced up to ten times a
// second each. A broker that restarts forgets them; the reader notices at
// its reconnect and fails, and the runtime reopens the input. An ingress's
// consumers stay on disk: admission measures the pipeline's lag by them,
// a stopped instance's included. All partitions feed one channel of
// capacity fetch_batch. The reader parses a
// frame's headers once per delivery (Delivery.Frame: producer, generation,
// epoch, sequence, records), and only on inputs that are weir edges
// (Input.Frames): on an ingress, headers a producer sets that look like
// weir's mean nothing, and every message is one record.
//
// # Retention: never read past a gap
//
// Retention (an ingress's max_age, max_bytes, max_msgs, or a purge)
// can remove records an input has not read; JetStream then starts or moves
// its consumer to the first message it still holds, without a word. weir
// refuses to read past such a gap (internal/edge/trimmed.go,
// pkg/stream/retention.go):
//
//   - Every input has a position from its first start. state.Position
//     holds, beside the last sequence processed, a clear mark: a sequence
//     through which the input's subject held nothing more to read. The first
//     start sets it to where its consumer began (nothing before was the
//     input's to read); from then on a missing position cannot pass for a
//     first start.
//   - At every open (start and reopen) the reader creates each consumer at
//     the position's next sequence; the server starts it at that sequence or,
//     when retention removed it, at the stream's first, which the creation's
//     answer reports (Delivered.Stream). A server killed while it
//     registered or deleted a consumer can instead resume a stale state left
//     under the name and start elsewhere; a consumer that does not start
//     where the stream says it must is deleted and created again
//     (createConsumer). When the start lies past
//     max(position, clear mark) + 1, OpenReader returns an
//     edge.TrimmedError naming the stream, partition, committed and first
//     sequences and the records lost — exact when the stream has that one
//     subject, otherwise "up to" the sequences removed, since a stream's
//     sequences interleave its partitions and JetStream does not say whose
//     messages it removed.
//   - The clear mark moves while reading. Every ~5 s the tick reads each
//     input stream's state, each input's newest message, and the state again
//     (refreshHeads, watchRetention): an input whose newest message is at or
//     before its committed position, with nothing past that position removed,
//     has nothing to read up to the stream's last sequence read first, and its
//     clear mark moves there (a small commit of positions outside a step). An
//     idle partition therefore never looks trimmed because other partitions'
//     messages aged out around it. A clear mark is a fact about the stream, so
//     a snapshot may carry it with its positions (manifests record both:
//     Manifest.Positions).
//   - While reading, every step checks the jumps of its deliveries: a
//     stream's sequences interleave its subjects, so an input's next delivery
//     usually skips sequences; it hides a loss only if the stream has since
//     removed what lay after the sequence it jumped from. Each step with a jump
//     reads the streams' first sequences in the background, after all its
//     deliveries were received, and before it commits refuses
//     (TrimmedError) when a stream begins past a jump's start — so no
//     position ever moves past a removed record, whatever arrived meanwhile
//     (jumps, checkJumps). The tick also stops the instance when a stream's
//     first sequence passed what a consumer was last sent.
//   - A mirror of the ingress (a pipeline in its own account) skips,
//     inside itself, what the ingress's retention removed before it copied it:
//     its first sequence does not move, the skipped sequences are deleted
//     ones. At open, on every tick and for every step with a jump, a mirror
//     with deleted sequences past an input's position stops the instance the
//     same way (mirrorGaps; Trimmed.Skipped).
//   - Removal that is not oldest-first — a purge of one subject, a deleted
//     message — does not move where a stream begins. The pump compares the
//     server's count of what the consumer has still to deliver (NumPending:
//     one less per delivery, one more per arrival) and stops at a larger drop,
//     counting the records removed somewhere ahead (Trimmed.Ahead); the
//     runtime keeps that loss in its state (meta lost), so a restart refuses
//     too until a declaration covers it. Streams that remove by subject or per
//     message (max_msgs_per_subject, allow_msg_ttl) are refused at start.
//     (After a purge the server's count is not always updated; a purge under a
//     running pipeline can then escape this check.)
//   - At a stop the instance marks its inputs once more, so a stopped
//     pipeline whose stream ages out around its idle partitions does not look
//     trimmed when it starts. A position past the stream's last sequence (the
//     stream was recreated) is refused with what to do.
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
package edge
