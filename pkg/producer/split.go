package producer

import (
	"context"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A Split stores messages bound for several streams — an ingress placed
// over several streams, partition p in one of them — each stream's through
// a Pipeline of its own. An atomic batch lies in one stream, so each
// stream's messages are gathered into batches of their own, and each
// stream has up to depth batches in flight: the server stores a stream's
// messages on that stream's one goroutine, so streams are written side by
// side. Within a stream the messages keep the order Add was called in;
// across streams there is no order to keep.
//
// A Split is not safe for concurrent use.
type Split struct {
	// route says which stream, 0 to len(pipes)-1, a message is for.
	route   func(*nats.Msg) int
	batch   int
	pipes   []*Pipeline
	pending [][]*nats.Msg
	// stored counts, per stream, the messages its Pipeline stored.
	stored []int
}

// NewSplit returns a Split over streams streams: route says which, 0 to
// streams-1, a message is for (nil: 0). Each stream's messages go in
// atomic batches of up to batch messages (0: MaxBatch); depth and
// maxInFlight are each stream's Pipeline's (NewPipeline).
func NewSplit(js jetstream.JetStream, streams int, route func(*nats.Msg) int, batch, depth, maxInFlight int) *Split {
	if batch <= 0 {
		batch = MaxBatch
	}
	if route == nil || streams <= 1 {
		streams, route = 1, func(*nats.Msg) int { return 0 }
	}
	s := &Split{route: route, batch: batch, pipes: make([]*Pipeline, streams), pending: make([][]*nats.Msg, streams), stored: make([]int, streams)}
	for i := range s.pipes {
		s.pipes[i] = NewPipeline(js, depth, maxInFlight)
	}
	return s
}

// Add appends m to its stream's batch and sends the batch once it holds
// batch messages. It returns how many messages of earlier batches it found
// stored meanwhile (Pipeline.Send). The Split keeps m until it is stored;
// the caller must not change it.
func (s *Split) Add(ctx context.Context, m *nats.Msg) (stored int, err error) {
	i := s.route(m)
	if s.pending[i] == nil {
		s.pending[i] = make([]*nats.Msg, 0, s.batch)
	}
	s.pending[i] = append(s.pending[i], m)
	if len(s.pending[i]) < s.batch {
		return 0, nil
	}
	return s.sendOne(ctx, i)
}

// Send sends every stream's gathered messages, each stream's as one batch.
func (s *Split) Send(ctx context.Context) (stored int, err error) {
	for i := range s.pipes {
		n, err := s.sendOne(ctx, i)
		stored += n
		if err != nil {
			return stored, err
		}
	}
	return stored, nil
}

// Gathered is the number of messages added and not yet sent.
func (s *Split) Gathered() (n int) {
	for _, b := range s.pending {
		n += len(b)
	}
	return n
}

func (s *Split) sendOne(ctx context.Context, i int) (int, error) {
	b := s.pending[i]
	if len(b) == 0 {
		return 0, nil
	}
	s.pending[i] = nil
	n, err := s.pipes[i].Send(ctx, b)
	s.stored[i] += n
	return n, err
}

// Stored is how many messages of the i-th stream were stored so far: its
// first Stored(i) messages added, in the order Add was called.
func (s *Split) Stored(i int) int { return s.stored[i] }

// Streams is the number of streams the Split writes.
func (s *Split) Streams() int { return len(s.pipes) }

// Poll settles, without waiting, the batches whose acknowledgements have
// arrived, and returns how many messages they stored.
func (s *Split) Poll(ctx context.Context) (stored int, err error) {
	return s.each(func(p *Pipeline) (int, error) { return p.Poll(ctx) })
}

// Flush sends what is gathered and waits until every batch sent is
// stored, and returns how many messages that was.
func (s *Split) Flush(ctx context.Context) (stored int, err error) {
	stored, err = s.Send(ctx)
	if err != nil {
		return stored, err
	}
	n, err := s.each(func(p *Pipeline) (int, error) { return p.Flush(ctx) })
	return stored + n, err
}

func (s *Split) each(f func(*Pipeline) (int, error)) (stored int, err error) {
	for i, p := range s.pipes {
		n, err := f(p)
		s.stored[i] += n
		stored += n
		if err != nil {
			return stored, err
		}
	}
	return stored, nil
}

// InFlight is the number of batches sent and not yet acknowledged, over
// every stream.
func (s *Split) InFlight() (n int) {
	for _, p := range s.pipes {
		n += p.InFlight()
	}
	return n
}

// Stats reports how the batches acknowledged so far were stored, over
// every stream.
func (s *Split) Stats() Stats {
	var st Stats
	for _, p := range s.pipes {
		ps := p.Stats()
		st.Batches += ps.Batches
		st.Single += ps.Single
		st.Resent += ps.Resent
	}
	return st
}

// Close abandons what is gathered and the batches in flight.
func (s *Split) Close() {
	for i, p := range s.pipes {
		p.Close()
		s.pending[i] = nil
	}
}
