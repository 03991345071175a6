package coordinator

import (
	"fmt"
	"sync"

	"github.com/weirflow/weir/internal/checkpoint"
)

// acks gathers the acknowledgements of the checkpoint in progress: at
// most one per instance the checkpoint expects, the first valid one it
// sent. Nothing else is kept, so what arrives on the ack subjects —
// an instance not expected, a checkpoint not in progress, a flood of
// copies on one instance's subject — costs a look and is dropped, and can
// neither push out another instance's acknowledgement nor grow memory.
// The coordinator subscribes once per operator (checkpoint.
// OperatorAcksSubject), so each operator's messages also queue apart in
// the client: one service flooding its own subjects fills its own
// subscription's buffer, never another's.
type acks struct {
	mu struct {
		sync.Mutex
		n         uint64
		savepoint string
		want      map[string]bool
		got       map[string]checkpoint.Ack
		// refused counts what was dropped during the checkpoint, first
		// the reason of the first.
		refused int
		first   string
	}
	// ready has a value when got has news.
	ready chan struct{}
}

func newAcks() *acks {
	a := &acks{ready: make(chan struct{}, 1)}
	a.mu.got = map[string]checkpoint.Ack{}
	return a
}

// expect starts gathering the acknowledgements of checkpoint n from the
// expected instances ("operator/instance"); n 0 gathers none.
func (a *acks) expect(n uint64, savepoint string, expected []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.mu.n, a.mu.savepoint = n, savepoint
	a.mu.want = make(map[string]bool, len(expected))
	for _, e := range expected {
		a.mu.want[e] = true
	}
	clear(a.mu.got)
	a.mu.refused, a.mu.first = 0, ""
	select {
	case <-a.ready:
	default:
	}
}

// offer takes what arrived on the acknowledgement subject of the instance
// of operator; it reports why it did not count it.
func (a *acks) offer(operator, instance string, data []byte) error {
	key := operator + "/" + instance
	a.mu.Lock()
	defer a.mu.Unlock()
	err := func() error {
		if a.mu.n == 0 {
			return nil // no checkpoint in progress: an aborted one's
		}
		if !a.mu.want[key] {
			return fmt.Errorf("an acknowledgement from %s, which checkpoint %d does not expect", key, a.mu.n)
		}
		if _, ok := a.mu.got[key]; ok {
			return nil // a copy: the first counts
		}
		ack, err := checkpoint.ParseAck(data)
		if err != nil {
			return err
		}
		if ack.Checkpoint != a.mu.n {
			return nil // an earlier checkpoint's, late
		}
		if err := ack.Sent(operator, instance, a.mu.n, a.mu.savepoint); err != nil {
			return err
		}
		a.mu.got[key] = ack
		select {
		case a.ready <- struct{}{}:
		default:
		}
		return nil
	}()
	if err != nil {
		if a.mu.refused++; a.mu.refused == 1 {
			a.mu.first = err.Error()
		}
	}
	return err
}

// take returns the acknowledgements gathered so far, and how many were
// refused and why the first was.
func (a *acks) take() (map[string]checkpoint.Ack, int, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]checkpoint.Ack, len(a.mu.got))
	for k, v := range a.mu.got {
		out[k] = v
	}
	return out, a.mu.refused, a.mu.first
}
