// Package outbox will hold weir's transactional outbox: an operator records
// an effect intent in the same state batch as the step that caused it, and
// after the step's epoch completes the intent is published to the outbox
// stream with a deterministic ID. See docs/ARCHITECTURE.md ("Effects"); it
// arrives with the checkpoint protocol, which defines when an epoch is
// complete.
package outbox
