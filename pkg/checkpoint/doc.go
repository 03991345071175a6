// Package checkpoint keeps weir's checkpoints and savepoints in JetStream.
//
// A snapshot of one operator instance is a Pebble checkpoint of its state
// store — hard links to the store's immutable SST files plus a copy of its
// manifest — taken at a step boundary, so it holds the instance's state,
// timers, input positions, watermarks, frame sequences and staged output as
// of one commit. Store uploads it to the pipeline's Object Store bucket
// incrementally: SST files are immutable and named uniquely within a store,
// so a file already uploaded by an earlier snapshot of the same instance is
// referenced, not sent again; the few mutable files (MANIFEST, OPTIONS,
// marker files) are uploaded under the snapshot's own prefix. A Manifest in
// the pipeline's KV bucket lists what a snapshot consists of.
//
// Checkpoint N of a pipeline is complete when every instance that should
// have acknowledged it has, and the coordinator has moved the "latest" key
// to N with a compare-and-set: that write is the commit point. Restore
// downloads the files of a manifest into an empty directory that Pebble
// then opens as the instance's store.
package checkpoint
