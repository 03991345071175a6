//go:build cgo

package stream

// pebbleOutsideHeap: Pebble allocates its cache with cgo, outside the Go
// heap.
const pebbleOutsideHeap = true
