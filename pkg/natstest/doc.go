// Package natstest runs a nats-server with JetStream inside the current
// process, the way net/http/httptest runs an HTTP server.
//
// Tests use Run, which stores JetStream data in t.TempDir() and shuts the
// server down when the test ends. `weir demo` uses Start with a directory of
// its own. Either way JetStream syncs every write to disk before it
// acknowledges it (SyncAlways): the Jepsen analysis of NATS 2.12.1 showed
// acknowledged writes lost under the default two-minute sync interval, and
// weir's guarantees assume an acknowledged write is durable.
//
// RunCluster and StartCluster run a JetStream cluster of several such
// servers, routed to each other on loopback, for tests of replicated
// streams that must survive a node dying. A cluster started Partitionable
// routes its nodes to each other through links in the test's process, so
// that Isolate can cut a node off from its peers while its clients still
// reach it, and Heal can route it back: a network partition without root.
package natstest
