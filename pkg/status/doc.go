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
package status
