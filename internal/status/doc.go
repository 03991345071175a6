// Package status is the status model of a running pipeline, and how it is
// gathered and shown.
//
// Every operator instance reports its Stats — counters, watermark, paused
// inputs, state keys — on its micro status endpoint (EndpointSubject).
// Gather assembles a pipeline's Status live from NATS: the graph from the
// contract, the instances from micro discovery and their endpoints,
// consumer lag per input partition, edge sizes, dead letters and side
// outputs, the coordinators and the lease, and the checkpoint log. `weir
// status` prints it; Handler serves it as one self-contained HTML page with
// no build step, and as /status.json.
//
// # What the status view gathers
//
// The status view (internal/status) gathers the pipeline
// live: the graph from the contract, the running instances through the micro
// framework ($SRV.INFO, then each instance's status endpoint), consumer lag
// per input, edge stream sizes, dead letters and side outputs, and the
// checkpoint log. weir status prints it in the terminal (-watch refreshes);
// the coordinator serves it as one self-contained HTML page with no build step
// at WEIR_STATUS_ADDR (/ and /status.json); a gathering that does
// not finish within 8 s (a broker slow under overload) serves the last
// status gathered with a problem naming its age and the failure, so the page
// stays up when it is needed most (503 only before the first). Each instance reports the
// shares of about the last ten seconds it spent busy, waiting for the broker
// to store its output, and idle (a window of one-second samples of its time
// counters, pkg/stream/stats.go), and within busy the share committing
// state (the Pebble batch and its fsync) and, per input partition, the share
// decoding and processing its messages (each step times its deliveries and
// adds them when it commits); from them the status names the
// bottleneck — the busiest instance, with its input partition furthest
// behind and its busiest one, its state I/O, timers and state keys — or the
// broker, or checkpoint alignment (Status.Bottleneck, docs/OPERATIONS.md).
// Every ~5 s the step loop also reads when the broker stored each input
// partition's newest message (GetLastMsgForSubject); less the broker time
// of the last message a committed step took, that is the source lag
// (weir_source_lag_seconds).
package status
