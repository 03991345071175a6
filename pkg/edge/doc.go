// Package edge carries records between weir operators over JetStream.
//
// An edge is a weir-owned JetStream stream with limits retention, one subject
// per partition: weir.<pipeline>.<edge>.<partition>. Records are batched into
// frames so that one JetStream message carries many records: JetStream syncs
// every write to disk (SyncAlways), and a frame of a few hundred records costs
// one sync instead of hundreds. Control records (watermark, idle, barrier, end
// of input) travel inside the same frames as data, in order, so a replay of an
// edge sees exactly what the first reader saw.
//
// Every frame has a deterministic Nats-Msg-Id built from the pipeline,
// producing operator, instance, generation, partition and the partition's
// frame sequence, and carries epoch and generation headers. A producer that
// crashes after staging a frame and re-publishes it on restart sends the same
// ID, which JetStream's duplicate window drops; a reader also drops frames
// whose sequence it has already passed, so a duplicate published after the
// window closes is dropped too.
//
// Readers pull with a bounded batch and a bounded MaxAckPending: an operator
// never holds more unacknowledged input than its contract allows.
//
// An edge's stream is declared from the contract once (ForContract,
// Declared): weir provision creates it or brings it to the declaration, and
// its writer and readers check it when they open it (Ensure) and refuse
// one that differs — they never change it. A reader's per-instance durable
// consumers are its own runtime state, made anew at every open.
package edge
