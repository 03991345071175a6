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
package checkpoint
