// Package checkpoint keeps weir's checkpoints and savepoints in JetStream.
//
// A snapshot of one operator instance is a Pebble checkpoint of its state
// store — hard links to the store's immutable SST files plus a copy of its
// manifest — taken at a step boundary, so it holds the instance's state,
// timers, input positions, watermarks, frame sequences and staged output as
// of one commit. Store uploads it to its operator's Object Store bucket
// (FilesBucket) incrementally: SST files are immutable and named uniquely
// within a store, so a file already uploaded by an earlier snapshot of the
// same instance is referenced, not sent again; the few mutable files
// (MANIFEST, OPTIONS, marker files) are uploaded under the snapshot's own
// prefix. A Manifest in the pipeline's KV bucket lists what a snapshot
// consists of, and names the bucket its files are in.
//
// Each operator has a file bucket of its own because an object bucket
// cannot refuse rollups — its metadata is written with one — and no
// subject permission splits one by operator: in a bucket every operator
// shared, any of their services could purge all the others' files with
// one message carrying Nats-Rollup: all. Only the services running an
// operator may write its bucket (package access). A manifest naming no
// bucket was written when the pipeline's operators still shared one,
// BucketName's: it restores from there for as long as that bucket is
// kept, and the coordinator collects its files there.
//
// Checkpoint N of a pipeline is complete when every instance that should
// have acknowledged it has, and the coordinator has moved the "latest" key
// to N with a compare-and-set: that write is the commit point. Restore
// downloads the files of a manifest into an empty directory that Pebble
// then opens as the instance's store.
//
// A store given keys (Store.Seal, Keys) seals every file before it leaves
// the host, under a key bound to the pipeline and the object, and
// authenticates every manifest with an HMAC under a key derived from the
// current checkpoint key and the pipeline. It then trusts the buckets for
// nothing: a manifest whose MAC does not authenticate it, or that is
// stored under another manifest's key, is forged (ErrForged); one without
// a MAC, or listing a file without a key ID, is unsealed (ErrUnsealed);
// a file sealed with a key it was not given needs that key (ErrNoKey).
// None of these is corruption, which a restore answers by falling back to
// an older checkpoint: each stops the instance with the reason. So
// someone who can write the buckets but holds no key can delete a
// snapshot, or damage it into ErrCorrupt, but cannot make a keyed process
// restore state of their choosing, an older snapshot in a newer one's
// place, or another pipeline's snapshot. A store without keys checks a
// manifest's checksum only, which finds damage, not forgery.
//
// # The checkpoint protocol and fencing
//
// The checkpoint protocol over control subjects (services/coordinator,
// pkg/stream/checkpoint.go, restore.go, fence.go):
//
//  1. The coordinator holding the lease (KV key coordinator in the pipeline's
//     WEIR_<P>_CHECKPOINTS bucket, renewed with compare-and-set; standbys take
//     over when it lapses) writes a pending record for checkpoint N, expecting
//     the instances the assignment names and every other instance registered
//     under instance.<op>.<inst>, and publishes the
//     trigger on weir.ctl.<p>.checkpoint.trigger.
//  2. A source operator (one reading ingress) turns the trigger into a step of
//     its own: it broadcasts Barrier(N) behind everything it emitted, commits,
//     and snapshots. Frames are cut at every step, so a barrier always ends its
//     frame.
//  3. Other operators, on Barrier(N) from an input channel, block that
//     channel: its later deliveries are held in memory and the reader pauses
//     the partition once all its channels are blocked (see "Assignment and
//     rescaling"). Aligned mode snapshots when every input delivered the
//     barrier; unaligned mode at the first barrier or at the trigger,
//     whichever reaches the operator first (in unaligned mode every operator
//     subscribes to triggers) — the in-flight records need no channel state,
//     because the snapshot holds the positions each input had reached, which
//     lie before the upstream barriers, and a restore replays from the durable
//     edge. So unaligned checkpoints do not wait for barriers to cross a
//     backlog (docs/BENCHMARKS.md). Either
//     way the barrier is forwarded behind the step's output, the snapshot is
//     taken, and the held deliveries run next.
//  4. The snapshot is state.Store.Snapshot (flush, then a Pebble checkpoint
//     without the WAL: only immutable SSTs plus a small manifest), uploaded
//     incrementally by checkpoint.Store.Upload, its Manifest (files, sizes,
//     generation, state schema version, the output frame sequences at the
//     barrier) stored in KV. The instance acknowledges on its own subject,
//     weir.ctl.<p>.checkpoint.ack.<operator>.<instance>, with alignment,
//     snapshot and upload times.
//  5. When every expected instance has acknowledged — the coordinator counts
//     an acknowledgement only from an instance it expects, on that instance's
//     subject, naming that instance's manifest of N (checkpoint.Ack.Sent),
//     one per instance — the coordinator moves
//     latest to N with a compare-and-set — the commit point — then marks the
//     record complete and announces on weir.ctl.<p>.checkpoint.complete. A
//     coordinator that dies between the two is replaced by one that finds the
//     record still pending below latest, completes and re-announces it. A
//     checkpoint missing an acknowledgement past the timeout is aborted.
//
// Fencing: a restored instance writes fence.<op>.<inst> = {generation, cut,
// checkpoint, assignment} where cut is, per output partition, the last frame
// sequence of the restored snapshot, and generation is above every one the
// instance ever ran (its state's, the snapshot's, its previous fence's). A
// restore first writes a restored-from marker holding the cut, then puts the
// state in place; the generation bump commits with the state's assignment
// version, and the marker is removed only once the fence is published, so a
// crash anywhere in between fences at the next start. A reader restored from
// checkpoint N under assignment version v waits (up to 30 s, or until it
// stops) for each writer's fence of N and v before reading its frames — and
// so does one started again from that restored state before a checkpoint
// after N completed (the fence's batch records N as restored): a rescale
// restarts its instances one by one, and a reader killed and started again
// at once must not read, unfenced, what a writer not yet restarted wrote past
// the cut. Readers drop frames of that writer from an older generation beyond
// the cut — the zombie's output of the rolled-back epoch — and accept the new
// generation's frames, whose sequences continue from the cut. The restored
// instance's downstream must restore from the same checkpoint (a whole-pipeline
// restore, as on a new host or from a savepoint); restoring one operator while
// its downstream keeps newer local state is not supported yet.
//
// # Verified snapshots, fallback and collection
//
// Every file of a snapshot is recorded in its manifest with its size and
// SHA-256 digest (the Object Store's own, SHA-256=<base64url>), and every
// manifest carries a checksum over its JSON members
// (internal/checkpoint/store.go; members a later build adds are covered too).
// Download checks each file against its manifest after the Object Store
// checked it against its own digest; Verify checks, without downloading,
// that every manifest reads back and every object exists with the recorded
// digest. A failure is checkpoint.ErrCorrupt.
//
// An instance whose restore hits ErrCorrupt cannot take an older
// checkpoint on its own — its downstream holds state of the newer cut — so
// it restarts the whole pipeline from the newest older checkpoint that
// verifies, does not share the damaged file, and holds state this build can
// restore (not one from before a semantic migration) (restore.DecideFallBack and
// restore.Restart, through checkpoint.RestartIf: an assignment naming it, written only over the
// assignment the instance started under, so that instances finding the same
// damage restart the pipeline once; operators keep today's instances, and
// rebuild their state from the older cut as a rescale does), records the
// fallback in the audit stream with the replay it adds (stream sequences
// between the two checkpoints' positions, and the time between them), and
// restarts under the new assignment with everyone else. A savepoint
// restored on purpose — an assignment with any savepoint snapshot, or a
// checkpoint taken for one — is never replaced by a checkpoint: that start
// fails, naming the damage.
//
// After each completed checkpoint the coordinator collects the snapshots of
// all but the newest recovery.retained_checkpoints (default 3)
// (Store.Collect): their manifests go, their records stay with status
// marked collected first, and an Object Store file goes only when no
// manifest left refers to it and it was stored before the newest completed
// checkpoint's record was written (a later one may belong to an upload in
// progress; both times are the server's). Never
// collected: savepoints, the checkpoint the assignment restarts from, the
// latest, and anything newer than the oldest kept.
//
// # Assignment and rescaling
//
// internal/checkpoint/assign.go, internal/checkpoint/rescale.go, pkg/stream/layout.go,
// pkg/stream/restore.go.
// The KV key assignment of the checkpoint bucket says which instances run
// each operator: {version, operators: {op: [inst...]}, checkpoint,
// manifests}. An operator it does not name runs as one instance owning
// everything (every pipeline before its first weir scale). Instance k of n
// owns the contiguous input partitions [ceil(k·P/n), ceil((k+1)·P/n)) and
// therefore the key groups those partitions carry: key groups are assigned
// through partitions, so an instance reads only its own partitions'
// consumers. Keyed state of a record whose key group the instance does not
// own is dead-lettered with the reason (the input is not partitioned by the
// state key).
//
// checkpoint.Rescale (weir scale -service S -instances a,b,c) writes a new
// version naming a checkpoint: the latest one taken under the current
// version, or a savepoint (-from-savepoint). It fences the instances it
// drops at that checkpoint's cut (generation above any they ran), then
// compare-and-sets the assignment. Every runtime watches the key and restarts
// its run when the version changes; the whole pipeline restarts from the same
// cut, as Flink does on a rescale. At start an instance whose local state was
// built under another version discards it and either restores its own
// snapshot (it owns what it owned) or rebuilds: for each snapshot of its
// operator in the checkpoint whose partitions (Manifest.Partitions) overlap
// its own, it downloads the snapshot, copies the overlapping key groups with
// state.Store.Import (entries, timers, TTL index and per-key-group counters
// — the KeyGroupSpan ranges), and takes the positions of those partitions
// and their channels' watermarks (watermark.Tracker.Relayout): each
// channel of a partition takes the least watermark any channel of that
// partition had in the snapshots, whichever writer it was — a writer whose
// range of inputs changed promises no more than that — and the emitted
// watermark is the least. (Restoring the remaining writer's own channel, as
// it once did, let q11's sessions close before the records of the input a
// retired key instance had read: weir chaos, TestARescaledWriterPromisesNoMoreThanItsPartitionsLeast.) It then bumps its generation above every one it
// ran (its fence records the last) and fences itself like any restore. An
// instance the assignment no longer names stops. The coordinator expects the
// acknowledgements of the assigned instances (registered ones for the other
// operators), records the assignment version with each checkpoint, and aborts
// a checkpoint acknowledged under another version, so a snapshot of the old
// layout never completes a checkpoint of the new.
//
// With several upstream instances, an edge partition has several writers.
// Each (partition, writer) pair is a channel: the watermark tracker, idle
// detection, and barrier alignment work per channel, from the writer list the
// assignment gives for the upstream operator. A barrier blocks its channel,
// not the partition: deliveries of a blocked channel are held, the other
// writers' records on that partition go on, and the partition's position
// stays below the first held delivery (records of other writers read again
// after a restore are recognised by their frame sequences). The reader pauses
// a partition only when all its channels are blocked. Held records are
// unacknowledged, so if they reach half the consumer's max_ack_pending the
// aligned snapshot is taken at once, unaligned — with durable edges an
// unaligned snapshot costs nothing, and this keeps alignment from stalling a
// partition's other writers (Flink's aligned-checkpoint timeout, bounded by
// records instead of time).
//
// Checkpoint objects are named <op>/<inst>/g<generation>/<file>: Pebble
// numbers files anew in a rebuilt or restored store, so only within one
// generation does a file name stand for one content.
//
// Savepoints are checkpoints taken on request with a name
// (weir savepoint create), indexed under savepoints.<name>;
// weir savepoint restore NAME -data DIR downloads every instance's snapshot
// into a new deployment's data directory and leaves a marker that makes the
// instance fence its predecessors when it starts; a savepoint of a scaled
// pipeline (several instances of an operator) restores through
// weir scale -from-savepoint NAME instead, into any layout. A restore checks the
// operator's state schema version (stream.Versioned) and refuses a snapshot
// of another version with both versions named.
//
// Exactly-once scopes, honestly: between operators, exactly-once (staging plus
// frame sequences plus fencing). At a json result edge, every message has a
// deterministic Nats-Msg-Id, so a replay is dropped by JetStream's duplicate
// window (10 minutes on edges): exactly-once within that window, at-least-once
// beyond it — which is what the shipped contracts declare (sink.effect:
// at-least-once). The other sink kinds — transactional edges,
// versioned-upsert views, the outbox with its dispatcher — are in "Effects:
// what each sink kind guarantees" above.
package checkpoint
