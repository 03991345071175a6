// Package restore decides where an operator instance's state comes from
// when it starts, and keeps the records that decision reads and writes.
//
// Decide is given the instance (Instance: its operator, instance key,
// the pipeline's assignment and the partitions it owns under it, what
// its build's state means), its local state (Local: whether a store is
// there, the assignment version it was built under, the restore marker)
// and the checkpoint store, and returns a Plan:
//
//   - Reopen: local state built under the current assignment wins;
//   - RestoreCheckpoint: the instance's own snapshot of checkpoint N whole
//     (the latest taken under the current assignment, on a new host, or
//     the one the assignment names when it owns what it owned then), or
//     its key groups assembled from the snapshots of the instances that
//     owned them (Parts);
//   - RestoreSavepoint: the same from a savepoint the assignment names,
//     or a savepoint `weir savepoint restore` put in place;
//   - StartOver: no local state and nothing to restore — a first start,
//     or, for an instance that ran before, a new generation;
//   - Refuse: a snapshot or local state this build cannot run, with the
//     reason.
//
// A restore found corrupt (checkpoint.ErrCorrupt) is answered by
// DecideFallBack, which plans a restart of the whole pipeline from the newest
// older checkpoint that verifies, or refuses; Restart carries it out and
// records it in the audit stream. The runtime (package stream) carries
// out the other plans: it downloads, opens Pebble, and fences.
//
// The records kept here are the restore marker — a file in the
// instance's data directory, in one format (Marker), naming a restore put
// in place but not yet fenced — and the operator-level records in the
// state that say under which assignment it was built, which checkpoint it
// was restored from, and what it means. Each decodes strictly: a record
// that cannot be read refuses the start with its reason, never passes
// for "none", since each decides whether state is kept, restored or
// thrown away.
//
// # Two ways back from a failure
//
// Two ways back from a failure, chosen by what survived:
//
//   - Local state present (the process died, the host did not): the instance
//     reopens its Pebble store, which is exactly as new as its last committed
//     step, re-publishes the frames that step staged, and reads on from its
//     committed positions. No rollback, no generation change; exactly-once across
//     edges comes from staging and frame sequences (see "The step"). This is the
//     path every kill test exercises.
//   - Local state gone (a new host), or a savepoint restored on purpose: the
//     instance restores the snapshot of the latest completed checkpoint (or the
//     named savepoint) from the Object Store, bumps its generation and publishes a
//     fence, then replays its input from the snapshot's positions.
//   - Local state gone before the pipeline's first checkpoint: nothing to
//     restore. An instance that ran before — registered, fenced, or with frames
//     on its output edge — starts over from the beginning of its input as a
//     new generation, fencing the lost one whole (a StartOver plan): the lost
//     generation's frames carry the same producer, generation and sequences as
//     the new one's would, and JetStream would drop the new frames as their
//     duplicates though they hold other records. Its readers, starting over
//     too, wait for that fence before reading its frames. Like a restore, a
//     start-over writes the restored-from marker (started_over) before
//     the store makes its state directory, and the fence removes it: a
//     start-over killed before its fence starts over again
//     (Decide reads the marker), rather than run what it began as local state of the
//     lost generation.
//
// # What a snapshot's state means
//
// Every manifest records what the instance's state meant when it was taken
// (checkpoint.Meaning, built by pkg/stream/meaning.go), and so does the
// state itself (meta meaning): the state schema version, key groups, input
// partitions, how state is keyed (the record ID or identity.key, and a hot
// key's split), each family's kind, TTL, bound and key limit, and for a
// windowed operator its event time, watermark policy, triggers,
// accumulation and allowed lateness. A stateless operator records no key,
// spread or policy: nothing of it can be misread. Every restore — a
// checkpoint, a rebuild after a rescale (of the snapshots it imports), a
// savepoint put in place by hand — and every start on local state (an
// upgrade in place) compares it with what this build's state would mean
// (Meaning.Changes, restore.Judge). A change that makes the state unreadable
// (other key groups or partitions, a family's kind, the schema version) is
// refused, declaration or not: it runs as a shadow generation. A semantic
// one (another key selection, a family dropped or bound otherwise, a shorter
// TTL, another time or emission policy) is refused unless the instance runs
// with -semantic-migration (Config.SemanticMigration), and a declared
// one is audited (migrate) once the state is in place. Compatible changes
// (a new family, a longer TTL, another key limit) are logged. A snapshot or
// state of an older build records none and is not compared.
package restore
