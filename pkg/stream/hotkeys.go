package stream

import (
	"sync"
	"sync/atomic"
)

// groupLoad counts the data records an instance handles per key group, in
// windows of loadSpan: the hot-key indicator. A key that carries much of
// the traffic shows as one key group far above the others, and keyed
// state cannot spread it over instances.
type groupLoad struct {
	counts []atomic.Int64 // the window in progress
	mu     sync.Mutex
	prev   []int64 // the last complete window
}

func newGroupLoad(groups int) *groupLoad {
	return &groupLoad{counts: make([]atomic.Int64, groups), prev: make([]int64, groups)}
}

// add counts a record of key group kg.
func (g *groupLoad) add(kg int) {
	if g != nil && kg >= 0 && kg < len(g.counts) {
		g.counts[kg].Add(1)
	}
}

// rotate ends a window.
func (g *groupLoad) rotate() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := range g.counts {
		g.prev[i] = g.counts[i].Swap(0)
	}
}

// hot reports, over the last complete window and the one in progress
// among key groups lo to hi, the busiest key group, its share of the
// records and its skew — its count over the mean count of the groups —
// and how many records that is over.
func (g *groupLoad) hot(lo, hi int) (group int, share, skew float64, records int64) {
	if g == nil {
		return -1, 0, 0, 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	hi = min(hi, len(g.counts))
	group = -1
	var top int64
	for kg := lo; kg < hi; kg++ {
		n := g.prev[kg] + g.counts[kg].Load()
		records += n
		if n > top {
			group, top = kg, n
		}
	}
	if records == 0 || hi <= lo {
		return -1, 0, 0, 0
	}
	share = float64(top) / float64(records)
	return group, share, share * float64(hi-lo), records
}
