// Package state keeps the keyed state of one operator instance in a local
// Pebble store: value, map and list families, event-time and
// processing-time timers, TTL expiry, per-family key limits, and the
// operator-level records (input positions, metadata, staged output) that
// must commit together with the state they describe.
//
// A step's writes go through one Batch and commit atomically: state,
// timers, positions and staged output land together or not at all, so a
// snapshot taken between steps is always a consistent cut, and input is
// acknowledged only after Commit returns. Reads through a Batch see the
// batch's own writes. Every family is declared up front with its kind, TTL
// and MaxKeys; creating a key beyond MaxKeys fails with a *LimitError that
// carries the family's declared action. Entries of a TTL family expire TTL
// after their last write in processing time: reads hide them at once, and
// Store.Expire deletes them in bounded steps. The package never reads the
// clock; the caller passes processing time in.
//
// # Key layout
//
// The first byte of a key is its kind. Every kind but the operator-level
// one is followed by the key group as two big-endian bytes, so the state of
// one key group is a handful of contiguous ranges (KeyGroupSpan), moved
// whole when key groups are reassigned. Strings are length-prefixed with an
// unsigned varint, which keeps every encoding prefix-free. Times are Unix
// nanoseconds with the sign bit flipped, big-endian, so byte order is time
// order for times before 1970 too.
//
//	0x00 0x00                              layout version
//	0x00 0x01 input                        input position
//	0x00 0x02 name                         metadata (PutMeta)
//	0x00 0x03 id                           staged output frame
//	0x00 0x04 seq(8)                       output held for a checkpoint
//	0x01 kg family key                     value, map header or list header
//	0x01 kg family key 0x01 subkey         map entry
//	0x01 kg family key 0x01 seq(8)         list element
//	0x02 kg domain time(8) key name        timer
//	0x03 kg expiry(8) statekey             TTL expiry index
//	0x04 kg 0x01 family                    live keys of family in kg
//	0x04 kg 0x02                           timers in kg
//
// Values, map entries and list headers are stored as cells: a flag byte,
// the expiry (8 bytes) when the family has a TTL, then the payload. A map
// header holds the map's entry count, a list header the next element
// sequence. The live-key and timer counters are kept per key group, so they
// move with their key group; the store sums them at Open.
//
// # Counters, the read cache and disk faults
//
// TTL is processing time: expired
// entries read as absent at once and are deleted by Store.Expire, which the
// runtime calls every tick with a bounded batch. Each family declares
// max_keys; a write that would create one key too many returns a
// *state.LimitError and is not applied. The store counts live keys per
// family and timers as it writes (persisted per key group, so they move
// with it); the bytes of each family's live state are measured instead, by
// a sweep that reads 10,000 keys per tick and goes on where it stopped
// (state.Sweep): a gauge and a status figure as of the last full sweep.
//
// Point reads of state cells, timers and counters go through a read cache
// (pkg/state/cache.go, at most 4 MiB) of committed values, present or
// absent: a window's accumulator or a session touched step after step is
// read from Pebble once. It is written through — a batch notes its writes to
// those keys, reads its own writes from the notes and hands them to the
// cache only at its commit, so a discarded step leaves it untouched — and
// Import, the one writer without a batch, empties it. Scans read Pebble.
//
// DueTimers merges the key groups' timers in time order. The store keeps,
// per domain, a floor no timer is before (pkg/state/timer.go): a step
// whose watermark moved short of every timer learns that nothing is due
// without a seek per key group. Batches keep it the way they keep the
// cache — a scan raises the batch's floor, a timer set lowers it, a commit
// hands it on — and Open, Import and a failed commit forget it. A caller
// firing a DueTimers list whose callbacks set more timers has the batch
// note them (Batch.Note) and merges them into what is left of the list
// (Batch.Merge), so the timers fire in time order without the list being
// read again after each callback.
//
// A write or sync of Pebble's log that the disk refuses (a failing device, a
// full disk) is fatal to Pebble: it calls its logger's Fatalf. The store's
// logger panics with a value of its own, and a commit recovers exactly that
// panic into state.ErrDisk (naming the store's directory and the cause),
// returned by that commit and every later one: the step fails, nothing it
// covers is acknowledged, the runtime stops with that error, and a restart
// once the disk is fixed reopens the store at its last commit. Flush,
// Checkpoint, Snapshot and Import return the same error after it. A
// full disk met while Pebble writes a memtable out to a table file is not
// fatal: Pebble logs it and tries again, and commits wait once the
// memtables are full — the operator pauses, logging the error, and goes on
// by itself when the disk has room. Two faults still end the process, which
// restarts as after a kill: a log Pebble cannot close while rotating it
// (Pebble panics with its mutex released, which no recover survives) and a
// manifest it cannot write.
package state
