// Package ingress turns ingress messages into weir records.
//
// Ingress streams belong to the user: one JSON event per message, on
// subjects <prefix>.<partition>. The pipeline's contract says where each
// part of the envelope comes from — the event ID, key, producer and event
// time, each from a JSON field or a header — and what to do with an event
// whose time lies too far in the future. A Decoder applies those
// declarations. Anything it cannot decode is a *FieldError naming the field
// and the source coordinate (stream, subject, stream sequence); the runtime
// sends such a record to the dead-letter stream, counts it and goes on. No
// bad record is skipped silently.
//
// # The envelope, tenants, schemas and key groups
//
// Every data record carries ID, key, producer, event time, source coordinate
// (ingress stream, subject, stream sequence), its tenant where the contract
// declares one, and the payload (pkg/record). With state.tenant_scoped
// the decoder makes the key keygroup.Scoped(tenant, key), and
// Context.tenanted keeps every emitted record in the tenant it was handled
// in (re-keyed records are scoped again; a key of another tenant is poison;
// another tenant stops the step). State keyed by ID is keyed by (tenant, ID)
// (step.data), a json edge's message ID carries the tenant
// (edge.JSONMsgID), and plan.meaning records the scoping.
// Event times live in a declared domain, 1678-01-01 to 2262-01-01
// (record.CheckTime): the span Unix nanoseconds hold, which is how state
// stores timers, with months to spare. The ingress decoder (pkg/ingress)
// reads the envelope fields raw in one pass over the JSON object
// (readFields), and refuses — as a dead letter naming the field — identity
// fields that are not valid UTF-8 or hold unpaired surrogate escapes (a
// decoder would turn them into U+FFFD and merge two IDs), a key repeated on
// the way to an envelope field, a payload that is not UTF-8 JSON text,
// numeric times that are not exact integers in 64 bits (read without floats),
// and times outside the domain. A producer's traceparent is continued only
// when valid, in canonical form. docs/RELIABILITY.md lists every input
// class and its test.
// Where the contract declares versioned decoders (identity.schema), the
// decoder first finds the record's schema version (a header, or a JSON path
// read on its own), then reads the envelope through that schema's fields
// (Decoder.schema, one field set and path tree per version). A version that
// is undeclared or dropped, or missing without unnamed, is a dead letter
// with field schema_version; the letter carries the schema a record was
// read as (Weir-Read-As-Schema). Lint rule I3 holds dropped to
// written_until plus the ingress retention. The versions are part of an
// ingress reader's checkpoint.Meaning (Schemas): one that disappears from
// the contract is a semantic change at restore.
// A key's group is FNV-1a 64 of the key bytes modulo the pipeline's key-group
// count; partition p of P owns the contiguous group range
// [ceil(p·G/P), ceil((p+1)·G/P)) (internal/keygroup). The state key of a record is
// its ID or its key, as state.keying says.
package ingress
