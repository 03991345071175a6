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
package restore
