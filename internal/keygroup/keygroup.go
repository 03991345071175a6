// Package keygroup maps record keys to key groups and key groups to edge
// partitions.
//
// A key group is a fixed hash bucket of keys. The number of key groups of a
// pipeline is declared in its contract and never changes while state exists:
// state is laid out by key group, and rescaling moves whole key groups between
// instances. A key's group is FNV-1a (64-bit) of the key bytes modulo the
// group count. Partitions own contiguous ranges of key groups: group g of G
// belongs to partition g*P/G of P, so partition p owns groups
// [ceil(p*G/P), ceil((p+1)*G/P)). The mapping depends only on the key and the
// two declared counts, so every service, every restart and every language
// that implements it agrees.
package keygroup

import (
	"errors"
	"fmt"
	"hash/fnv"
)

// DefaultGroups is the key-group count used when a contract does not set one.
const DefaultGroups = 256

// MaxGroups bounds the key-group count; state keys store the group in two bytes.
const MaxGroups = 1 << 15

// Layout is a pipeline's key-group count and an edge's partition count.
type Layout struct {
	Groups     int
	Partitions int
}

// Validate reports whether the layout can be used.
func (l Layout) Validate() error {
	switch {
	case l.Groups <= 0 || l.Groups > MaxGroups:
		return fmt.Errorf("keygroup: groups %d out of range [1, %d]", l.Groups, MaxGroups)
	case l.Partitions <= 0:
		return fmt.Errorf("keygroup: partitions %d must be positive", l.Partitions)
	case l.Partitions > l.Groups:
		return errors.New("keygroup: more partitions than key groups leaves partitions empty")
	}
	return nil
}

// Of returns the key group of key among groups key groups.
func Of(key []byte, groups int) int {
	h := fnv.New64a()
	h.Write(key)
	return int(h.Sum64() % uint64(groups))
}

// Group returns the key group of key.
func (l Layout) Group(key []byte) int { return Of(key, l.Groups) }

// PartitionOf returns the partition that owns key group g.
func (l Layout) PartitionOf(g int) int { return g * l.Partitions / l.Groups }

// Partition returns the partition of key.
func (l Layout) Partition(key []byte) int { return l.PartitionOf(l.Group(key)) }

// GroupRange returns the half-open range [lo, hi) of key groups owned by partition p.
func (l Layout) GroupRange(p int) (lo, hi int) {
	return ceilDiv(p*l.Groups, l.Partitions), ceilDiv((p+1)*l.Groups, l.Partitions)
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
