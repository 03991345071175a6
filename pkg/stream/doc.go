// Package stream is weir's runtime: it runs operator instances — the
// operator.Operators a service's contract assigns it — and is the host of
// a service (Config, New, RunService, Main). Runtimes is the one place a
// contract's operators and their Factories become runtimes: a service's
// main, the demo and benchmarks (internal/harness), replays (cmd/weir) and
// tests (streamtest) build theirs with it. An operator sees only its
// operator.Env, which the runtime's env (context.go) implements; the runtime does
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
// (restore.Decide); the runtime's restorer carries out the plan
// (restore.go: downloading, assembling key groups, opening Pebble) and
// fences the restored generation (fence.go).
//
// # The runtime's parts
//
// A Runtime (runtime.go) keeps its configuration and its counters
// (stats.go). Everything it learns while running belongs to a run
// (run.go), which owns one of each part below and drives the loop
// (loop.go) and the step (step.go) through them. Each part has one job and
// names what it takes from the run — a pointer to the Config, the plan,
// the logger — rather than reaching into it:
//
//   - conn (conn.go): the connection to the broker — NATS and JetStream,
//     whether it is down or just came back, and the handlers that stop the
//     run on a denial or fail a reader whose deliveries were dropped;
//   - layout and watch (layout.go): the input partitions and key groups
//     the assignment gives the instance, its input channels (a partition,
//     or a partition and one of its writers), and the watch that ends the
//     run when the assignment changes;
//   - inputs (input.go): input reading — the reader, each input's
//     committed position, what was delivered (seen, ended), the watermark
//     tracker, shedding (shed.go), the looks that tell silence from
//     idleness, and fencing (fence.go), which says whose frames are a
//     zombie's. Its retention (retention.go) opens the consumers at the
//     committed positions and holds them to what the streams still have;
//   - output (output.go): output staging — the writer that cuts the
//     operator's output into frames, the frames staged and being stored
//     (flight.go), the results a transactional sink holds for their
//     checkpoint (txn.go), or the view a versioned sink applies panes to;
//   - barriers (checkpoint.go): checkpoint participation — triggers,
//     barriers arriving and blocking their channels, whether a snapshot is
//     due; the run's snapshot gathers the parts' records into the manifest;
//   - erasures (erase.go): the erasure registry's requests and, under
//     erasure-wins, the records they drop;
//   - observer (observe.go): metrics, spans and gauges, the memory budget
//     (memory.go) and the state families' measured bytes;
//   - restorer (restore.go, fence.go, meaning.go): a start's carrying-out
//     of package restore's plan — a phase of the start the run makes one
//     for, not a part it keeps.
//
// A record's walk through them: the reader of inputs (input.go), opened by
// retention (retention.go), delivers it; the loop (loop.go) gathers it
// into a step; the layout (layout.go) names its channel, and fencing
// (fence.go) drops it if a fenced writer's zombie wrote it; the step
// (step.go) decodes it and hands it to the operator through its
// operator.Env (context.go); what the operator emits joins a frame of
// output staging (output.go), which the step commits and a flight
// (flight.go) stores — or a transactional sink (txn.go) holds until a
// checkpoint (checkpoint.go) completes; the observer (observe.go) counts
// it.
//
// # The step: how progress is made atomic
//
// The runtime (pkg/stream) processes input in steps. A step takes messages
// until they carry fetch_batch records (a frame counts its records; at least
// one message), waiting at most frame_linger for more. Under backlog — the
// last delivery says the broker holds more — it goes on taking what arrives
// within the linger, up to eight fetch batches of records or max_ack_pending
// messages, so that a step's fixed costs (two fsyncs, the acks) are paid once
// for more records; sparse input keeps steps small (stream.fill). Then it:
//
//  1. drops messages at or below the input's committed position (redeliveries),
//     and edge frames whose sequence is at or below the last one seen from the
//     same writer and generation (duplicates published after JetStream's window);
//  2. decodes each message — an ingress event through pkg/ingress, a frame
//     through internal/edge — and calls the operator once per data record, with the
//     state scoped to the record's key;
//  3. files dead letters for bad input and poison records (deterministic
//     Nats-Msg-Id from the source coordinate, so a re-run files nothing twice);
//  4. waits for the previous step's frames to be stored (step 5 of that step,
//     which ran meanwhile);
//  5. commits ONE Pebble batch (synced): state writes, timers, positions, the
//     output frames (staged), the writer's frame sequences, and the deletion of
//     frames staged by the previous step that are now published;
//  6. starts publishing the staged frames in the background (flight.go): the
//     next step decodes and processes its input while JetStream stores and
//     acknowledges them, and one publish at a time keeps every partition's
//     frames in sequence order;
//  7. acknowledges the input: one acknowledgement per input, of its last
//     delivery, since the consumers acknowledge all (AckAllPolicy). Acks
//     only release flow control; the committed position decides where
//     reading resumes.
//
// A crash before 5 loses the step whole: its input is read again from the
// committed position. A crash after 5 keeps it whole: at start the runtime
// re-publishes every staged frame with its original ID before reading any
// input. Acks only release flow control; the committed position, not the
// consumer's ack floor, says where reading resumes, which is why consumers are
// recreated at every start.
//
// # Chained operators
//
// A contract may chain stateless operators into an operator's step
// (operators[].before; Runtimes builds them from the service's factories,
// NewChained takes them). In step 2 each record goes through them first,
// and each record the last one emits is handed to the operator as if it
// had been read: no frame is written, stored, delivered or decoded for
// that hop. Exactly once holds as for any step: the input's positions,
// the operator's state and the output commit in the one batch of step 5,
// a crash before it loses the whole step and a crash after keeps it, and
// the chained operators keep nothing a restore must bring back — they
// cannot reach state (their scope names no key group) or set timers. A
// chained operator may key a record into any key group, where the two-hop
// pipeline's edge would route it to the instance owning the group; a chain
// cannot route, so an operator with a chain and state runs as one instance, owning
// every key group (loadLayout refuses an assignment that splits it, and
// checkpoint.Rescale a rescale that would). Each record the chain hands
// on is then the operator's to keep, and what the one step computes is
// what the two hops would; a record in a group the instance does not own
// stops the step all the same, and a chained operator that drops the
// error Emit returns from further down the chain does not hide it (chain
// returns the first such error). A record the chain re-keys to an erased
// key is dropped, as the operator reading it from an edge would drop it.
// A snapshot's meaning names the operator's input and chain
// (checkpoint.Meaning.Input), so a restore over another is refused; a
// state from before it named them is refused by its positions, in
// another input than the operator reads (plan.checkInputName), at start
// and in a rebuild. An operator with a chain and no state may run as
// many instances as any.
//
// Errors are classified: operator.Poison → dead letter and go on; a state-bound
// crossing → the family's declared action (dead-letter or fail);
// operator.Retry → the step is discarded (batch closed, writer reset) and
// retried in place after a back-off, holding its input; anything else stops the
// runtime, to be restarted from its last commit.
//
// # Services and the runtime
//
// A service is a library package with its operator and a Run(ctx, args,
// getenv, …) function, plus cmd/<name>/main.go that only adds signals and
// the exit code. stream.ParseConfig reads flags and environment (NATS_URL,
// WEIR_CONTRACT, WEIR_DATA_DIR, WEIR_OPERATOR, WEIR_INSTANCE, …; every
// command of weir names its variables in -h, through internal/envflag),
// validates them and the runtime logs them once at start. A Runtime keeps
// its configuration and counters; everything it learns while running belongs
// to a run, which starts afresh when the pipeline's assignment changes. A
// source operator whose ingress stream does not exist yet stops with an error
// naming the stream, its subjects and how to create it, or creates it from
// the contract with -create-ingress. Each instance registers with
// the nats.go micro framework as weir-<operator> with metadata (pipeline,
// operator, instance, contract fingerprint) and a status endpoint at
// weir.svc.<pipeline>.<operator>.<instance>.status answering its counters.
//
// # What each sink kind guarantees
//
// sink.effect decides how an operator writes a result edge (format: json).
//
// at-least-once. Each result carries a Nats-Msg-Id derived from its
// source coordinate, so a re-publish after a crash is dropped by the stream
// within its duplicate window (edges[].retention-bounded, 10 minutes at most
// here), and a reader that keeps the IDs it has seen gets each result once
// beyond it. Results of a step become visible when the step's atomic batch is
// stored — before the checkpoint that covers them completes — so a restore to
// an older checkpoint can repeat results a reader has already seen, under the
// same IDs and with the same values. Scope: operator state and source plus
// state are exact; sink visibility is at least once; the reader deduplicates
// by ID.
//
// transactional (pkg/stream/txn.go, internal/edge/commit.go). A step
// holds its results in its Pebble batch (state.Batch.HoldOutput, keyspace
// 0x00 0x04), numbered in order and tagged with the writer
// (operator/instance) and the writer's own result sequence. Before each
// snapshot the runtime records a cut — checkpoint N holds results up to held
// sequence H — so the snapshot of N holds exactly the results of the epochs up
// to N. The operator subscribes to the coordinator's completion announcements
// (weir.ctl.<pipeline>.checkpoint.complete; while it holds epochs it also
// polls the checkpoint log, in case one was missed); when N completes, it
// publishes the results of the cuts up to N in atomic batches
// (jetstreamext.PublishMsgBatch) of one writer and one epoch, at most 999
// results each, each ending with a commit marker on
// weir.<pipeline>.<edge>.commit.<operator>.<instance> that names the writer's
// last result in the batch and the epoch (Weir-Writer, Weir-Seq,
// Weir-Epoch), and then releases them from the state. The marker carries
// Nats-Expected-Last-Subject-Sequence of the writer's previous marker: a
// second process publishing as the same writer is refused and restarts.
// At start an operator reads the last marker of every writer whose results it
// holds and releases, unpublished, those the stream already has — after a
// crash between storing a batch and releasing it, or after a restore on a new
// host from a checkpoint whose snapshot still holds results published since.
// A state whose own result sequence is behind its writer's last marker was
// restored from a savepoint or an older checkpoint (or is new under a reused
// writer name): the input it replays recomputes results the stream already
// holds. The operator then reads, once at start, the IDs of the results its
// writer stored after the restored sequence (edge.StoredSince: the batches
// before that writer's markers past it), and drops a recomputed result with
// one of those IDs instead of holding it (counted in already_stored). It
// keeps the restored sequence in its state until every one is recognized,
// so a restart during the replay reads them again.
//
// So a reader of the result stream sees only results of completed
// checkpoints, each once, however long after the fact a replay happens —
// a crash's, a new host's or a savepoint's (test.TestReplayFromASavepointAddsNothing
// replays a whole input after every duplicate window passed). What a replay
// cannot recognize is a result it computes differently, with another ID: an
// operator whose output depends on the order partitions are read in.
// Results carry Weir-Result-Id (the ID Nats-Msg-Id would have held) and
// Weir-Epoch, not Nats-Msg-Id: exactly-once rests on the markers, not on
// the duplicate window. An aborted checkpoint's results wait for the next one
// that completes (its snapshot covers them); a restore to an older checkpoint
// drops the results held after it, with the state. A rescale moves the
// results an old instance held, with its writer name, to the new instance
// that owns its first partition, which publishes them under the old writer's
// markers. Results become visible a checkpoint interval (plus the
// checkpoint's duration) after they are computed, a batch at a time: an epoch
// larger than one batch appears over several. max_pending_epochs bounds the
// cuts an operator holds: at the bound it reads no input (its lag grows) and
// snapshots at the next trigger instead of at barriers — unaligned, as when
// alignment holds too much — so the next checkpoint can complete; the epoch
// still open is bounded by the checkpoint interval while checkpoints run.
// Scope: sink visibility is exactly once for readers of the result stream;
// what a reader does with a result afterwards — an external effect — is the
// reader's to make idempotent, by Weir-Result-Id. Readers subscribe to
// weir.<pipeline>.<edge>.*, which leaves out the deeper commit subjects.
//
// versioned-upsert writes a window operator's panes to a KV view instead
// (package view says what it guarantees); outbox writes intents that the
// dispatcher performs (package outbox).
//
// # Overload and memory
//
// Every operator blocks when it cannot keep up: it fetches at most
// fetch_batch records with at most max_ack_pending unacknowledged and
// max_buffered_frames frames buffered, so the slowdown reaches the source
// as lag, not memory (policy: block).
//
// Memory is a declared budget, not a hope (pkg/stream/memory.go). Each
// instance computes, when it starts, what its parts hold at most and logs it
// (memory budget), answers it in its status (memory) and exports it
// (weir_memory_budget_bytes):
//
//   - runtime: 64 MiB for the Go runtime, the code, the connection, micro and
//     telemetry, once per process;
//   - state: Pebble's block cache (its memtables are charged to it) plus a
//     memtable in flush, table metadata and the read cache
//     (state.Options.MemoryBound);
//   - input: the reader's byte budget (edge.ReaderConfig.MaxBytes, 16 MiB):
//     a pump hands out no delivery while the bytes handed out and not yet
//     released (Delivery.Ack, Delivery.Release) would pass it, except one when none are
//     held; plus each input's pull buffer, in messages of the largest size the
//     contract lets it hold (a frame, frame_max_bytes; an event,
//     ingress.max_message_bytes) sharing 64 MiB, between 1 and
//     fetch_batch messages (Input.Pull). A byte-limited pull is not used:
//     nats.go counts a pull that bytes cut short as whole, and its buffer
//     overflows. Held records behind a barrier past half the byte budget make
//     the snapshot unaligned at once, as past half max_ack_pending;
//   - output: one step's output three times (the batch's copy and the
//     messages', plus the last step's messages still being stored while this
//     step runs): as much as its input, plus its timers' results. A step fires at most
//     maxStepTimers timers (8 × fetch_batch); one that leaves due timers
//     sets firing, and the run fires the rest in input-free steps before it
//     reads more (run.fireLeft, retried like any step; event-time timers —
//     processing-time ones a step left fire at the next ticks, so an operator
//     that keeps setting them cannot hold input off), forwarding the watermark only behind the
//     last of them — a start whose stored watermark is ahead of the one it
//     forwarded does the same first. A step whose output passes its share is
//     logged, once.
//
// A service process (stream.Main) sets the Go runtime's soft memory limit
// (debug.SetMemoryLimit) to the sum of its runtimes' budgets, less
// Pebble's share when Pebble allocates outside the Go heap (cgo), unless
// GOMEMLIMIT is set; the coordinator declares 64 MiB (coordinator.Memory,
// in its micro metadata) and sets the same. test.TestSlowSinkKeepsMemoryBounded
// checks the processes' resident memory, read from /proc, against what
// they declare while a slowed sink lets a backlog larger than any budget
// build up. policy: admission adds a brake at
// the entry weir owns (internal/admission): the ingest gateway measures, every
// half second, the largest lag of an operator reading the ingress (its
// durable consumers' undelivered and unacknowledged messages, summed over
// its input partitions, each partition counting its least-behind consumer:
// a consumer an earlier instance left behind until its 24 h inactive
// threshold does not count) and, while it exceeds overload.max_lag,
// answers every request 429 with Retry-After and the lag and bound named,
// storing nothing; before the first measurement, or when the lag cannot be
// read, it admits. A producer publishing straight to the ingress stream is
// not asked. policy: shed acts inside the operator reading the ingress
// (pkg/stream/shed.go): each ingress message's delivery says how many
// messages of its partition the consumer has not delivered yet; while their
// sum over the instance's partitions exceeds max_lag, a decoded record
// matching overload.shed (a JSON path and values, read as the decoder
// reads the envelope: ingress.Predicate, so a key repeated on the path
// matches nothing) is dropped after it has
// moved the watermark, counted, and filed by coordinate on
// weir.<pipeline>.shed.<operator> in the step's letters, so it is recorded
// exactly when the step commits. weir capacity (internal/capacity, docs/OPERATIONS.md) does the
// arithmetic that says whether a pipeline can catch up at all; the
// contract's linter runs the same arithmetic (contracts/rules.go
// capacityRules, the only weir package contracts/ imports) on an
// optional capacity section, and an operator reading the ingress refuses
// to start when the live stream's byte or message limits keep records less
// than ingress.retention at the declared arrival rate (run.checkLimits).
package stream
