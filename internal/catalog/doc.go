// Package catalog is the one list of the pipelines weir's tools run. A
// query registers once, as a Query: its name, its contract, the service
// whose operators it runs and their factories, where its results are read,
// and what the development harness and the tests weigh it against — a
// hand-written Baseline (`weir bench nexmark`'s d-hand-written mode) and a
// Reference evaluator of its window stage over the generated corpus.
//
// The demo, `weir bench nexmark`, `weir chaos` (internal/harness), `weir
// replay`, `weir shadow` and `weir migrate` (cmd/weir) and the query tests
// (test/) find their queries in a Catalog — Shipped for the queries weir
// ships — rather than in lists of their own, and build a query's runtimes
// with stream.Runtimes, the one loop from contract and factories to
// runtimes. Adding a query is its service, its contract and one entry in
// Shipped; a test adds a query of its own by appending to a Catalog.
//
// The deploy generator (deploy/) needs no entry: it deploys every contract
// whose services have code under services/.
package catalog
