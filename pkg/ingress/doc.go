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
package ingress
