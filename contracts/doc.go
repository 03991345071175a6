// Package contracts defines weir's streaming-contract file format, loads it
// and refuses contracts that are incomplete or contradict themselves.
//
// A contract file, contracts/<pipeline>.yaml, states the decisions of the
// streaming contract for one pipeline: event identity (where each event's ID,
// key, producer and event time come from), source replay (the ingress stream,
// its partitions, offsets and retention), time domain, progress (watermarks,
// idleness, alignment), emission (output mode, accumulation, the window
// shape, triggers, allowed lateness), state (key groups, and a declared
// bound for every state family), recovery (checkpoint interval and mode,
// worst-case recovery time), sink effect, overload (fetch, ack and frame
// bounds), and the graph of operators and internal edges, each operator
// stating the identity field that keys its state and the families it keeps.
//
// What nearly every pipeline decides alike has a default, kept in one
// place (Defaults, defaults.go): the format version, offsets and message
// bound, the producer header, event time and its skew, idleness and
// alignment, one on-time pane appended, key groups, checkpointing, the
// overload bounds, an edge's partitions and retention (the ingress's),
// dead letters, keys in the clear. Parse applies them, so every reader —
// the runtime, Lint, the deploy generator, weir auth, the fingerprint and
// what a checkpoint records its state to mean — sees the effective
// contract (Effective prints it, each default marked), and a file stating
// a default's value is the same contract as one leaving it out. A missing
// field without a default is a problem, as is an unknown one.
//
// The window shape (emission.window) sits beside the triggers and lateness
// it completes; window operators read it from the contract they run
// (package window's SpecOf), and Lint holds the state it bounds to it: a
// window operator's family expiring by TTL before a window's length, its
// allowed lateness and the watermark's delay have passed is refused, and so
// is a window that ends while no family is bound by it (bound: window): no
// operator would read its shape.
//
// Load parses a file and lints it;
// Lint reports every problem at once, each with the file, line and dotted
// field it concerns, why it is a problem and how to fix it. Most rules refuse
// contradictions rather than missing values: accumulating panes into an
// append-only sink, a deduplication TTL shorter than the replay horizon,
// state with no bound, retention shorter than the recovery envelope. No weir
// service starts on a contract that Load refuses, and the runtime identifies
// the contract it runs by its Fingerprint.
//
// contracts/README.md documents every field and every rule.
//
// # How the runtime is held to the contract
//
// contracts/<pipeline>.yaml declares the nine decisions (identity, source
// replay, time domain, progress, emission, state, recovery, sink effect,
// overload) plus the operator graph. contracts.Load parses with line
// numbers, rejects unknown fields, and runs every lint rule; every problem names
// file, line, field, why and how to fix (contracts/README.md lists the rules).
// stream.New refuses to build a runtime on a contract with any problem, and on
// an operator whose declared state families the contract does not bound. All
// reading of the contract by the runtime happens in pkg/stream/plan.go (the
// plan keeps the contract only to hand its ingress section to pkg/ingress).
//
// The contract is binding: every field is read by the runtime or is a
// declaration whose every accepted value the runtime already does. Values the
// runtime implements only in part are listed in contracts.Implemented and
// refused by lint, and so at start (today every declared value of
// overload.policy is implemented: block, admission and shed). contracts/binding_test.go
// type-checks the module and fails on a field no code outside contracts/
// selects that is not in its list of declarations, and checks that lint
// refuses an edit of each declaration. At start a service also refuses frames
// (overload.frame_max_bytes plus headers) larger than its server's
// max_payload, a window family whose TTL would free a window's state before
// the window, its allowed lateness and the watermark's delay have passed
// (operator.Horizoned, which pkg/window implements), and an operator with
// dead_letter: false stops at a record it would file, naming it, rather
// than drop it.
package contracts
