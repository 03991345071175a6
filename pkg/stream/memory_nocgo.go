//go:build !cgo

package stream

// pebbleOutsideHeap: without cgo Pebble allocates its cache on the Go
// heap.
const pebbleOutsideHeap = false
