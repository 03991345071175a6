// Package contracts defines weir's streaming-contract file format, loads it
// and refuses contracts that are incomplete or contradict themselves.
//
// A contract file, contracts/<pipeline>.yaml, states every decision of the
// streaming contract for one pipeline: event identity (where each event's ID,
// key, producer and event time come from), source replay (the ingress stream,
// its partitions, offsets and retention), time domain, progress (watermarks,
// idleness, alignment), emission (output mode, accumulation, triggers,
// allowed lateness), state (key groups, and a declared bound for every
// state family), recovery (checkpoint interval and mode, worst-case
// recovery time), sink effect, overload (fetch, ack and frame bounds), and
// the graph of operators and internal edges, each operator stating the
// identity field that keys its state and the families it keeps. Nothing has a default: a missing
// field is a problem, as is an unknown one. Load parses a file and lints it;
// Lint reports every problem at once, each with the file, line and dotted
// field it concerns, why it is a problem and how to fix it. Most rules refuse
// contradictions rather than missing values: accumulating panes into an
// append-only sink, a deduplication TTL shorter than the replay horizon,
// state with no bound, retention shorter than the recovery envelope. No weir
// service starts on a contract that Load refuses, and the runtime identifies
// the contract it runs by its Fingerprint.
//
// contracts/README.md documents every field and every rule.
package contracts
