// Package dispatcher will hold weir's idempotent dispatcher: it reads the
// outbox, calls the provider with an idempotency key, and records the
// outcome in KV before acknowledging. See docs/ARCHITECTURE.md ("Effects").
package dispatcher
