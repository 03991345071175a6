// Package nexmark is the Nexmark auction benchmark's data model and a
// deterministic, seeded generator of its event stream.
//
// Nexmark models an online auction site: people register (Person), open
// auctions (Auction) and bid on them (Bid). Of every 50 events one is a
// person, three are auctions and 46 are bids, and ids grow with the event
// index the way the Beam and Flink generators lay them out: person and
// auction ids start at 1000, a bid names one of the last 100 auctions (or
// the hot auction) and a bidder among the last 1000 people, so every
// reference points to an entity that was generated earlier in index order.
//
// Event i is a pure function of the Config and i (Generator.Event): a random
// stream seeded from (Seed, i) decides its fields, so a restarted generator
// resumes at any index and produces byte-identical payloads. On top of the
// ordinary stream the generator injects the hard cases a stream processor
// must survive, each at a fixed, seed-independent cadence: events late by a
// fixed amount, duplicates (same id, same payload), events from the future,
// one partition that falls silent for a range of events and then delivers
// what it held back, and a hot key that takes a share of all bids.
//
// Each event travels as one JSON message (Event, Decode) to the partition
// that owns the key group of its event ID. Ingress is partitioned by event
// ID rather than by business key because the first operator of a pipeline
// deduplicates by event ID: a dedup instance that owns a partition then owns
// exactly the key groups of the IDs that arrive on it, so its state moves
// with whole partitions on rescale and no ID is ever seen by two owners.
// Later operators re-key by Event.Key (auction or person id).
//
// Generator.Next yields the publish order, including duplicates and
// held-back events; Generator.Seek positions it at any message of that
// order, which is how a publisher resumes after a crash.
package nexmark
