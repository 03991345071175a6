// Package stream is weir's runtime: it runs operator instances — the
// operator.Operators a service's contract assigns it — and is the host of
// a service (Config, New, RunService, Main). Runtimes is the one place a
// contract's operators and their Factories become runtimes: a service's
// main, the demo and benchmarks (internal/harness), replays (cmd/weir) and
// tests (streamtest) build theirs with it. An operator sees only its
// operator.Env, which the runtime's Context implements; the runtime does
// the plumbing.
//
// The runtime does the plumbing, in steps. A step takes up to the contract's
// fetch batch of input messages (waiting at most the frame linger for more),
// decodes them — ingress events through package ingress, edge frames through
// package edge — and hands each data record to the operator. Everything the
// step changed is then committed in ONE Pebble batch: state writes, timers,
// the input positions it reached, the output frames it produced (staged, not
// yet published) and the frame sequences it used. Only after that commit are
// the staged frames published and the input acknowledged. A crash at any
// point therefore either loses the whole step (its input is read again from
// the committed position) or keeps it whole (its staged frames are
// re-published with the same Nats-Msg-Id at restart, which JetStream and the
// reader's frame-sequence check drop as duplicates).
//
// Bad input never stops the stream and is never skipped silently: a record
// that cannot be decoded, or that the operator rejects with operator.Poison,
// goes to the pipeline's dead-letter stream with its source coordinate and
// reason, is counted, and the step goes on. An error returned with
// operator.Retry makes the runtime retry the whole step in place after a
// back-off; any other error stops the runtime, to be restarted from its
// last commit.
//
// Where an instance's state comes from when it starts — local state, a
// checkpoint, a savepoint, nothing — is package restore's decision
// (restore.Decide); the runtime carries out the plan (restore.go:
// downloading, assembling key groups, opening Pebble) and fences the
// restored generation (fence.go).
package stream
