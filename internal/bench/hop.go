package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/keygroup"
	"github.com/weirflow/weir/pkg/natstest"
)

// HopMode says how records cross the hop.
type HopMode int

const (
	// Framed batches records into frames, one JetStream message and one
	// ack per frame: weir's edge.
	Framed HopMode = iota
	// PerMessage publishes every record as its own JetStream message and
	// acks it on its own: what a user writes by hand.
	PerMessage
)

func (m HopMode) String() string {
	switch m {
	case Framed:
		return "framed"
	case PerMessage:
		return "permsg"
	}
	return fmt.Sprintf("HopMode(%d)", int(m))
}

// Hop defaults. In-flight, fetch and ack-pending bounds count JetStream
// messages: frames in Framed mode, records in PerMessage mode.
const (
	// DefaultFrameRecords: 1000 bids make a frame of about 265 KB, which
	// measured faster than 500 or 2000 (docs/BENCHMARKS-LOG.md).
	DefaultFrameRecords = 1000
	DefaultFrameBytes   = 1 << 20

	DefaultFramedInFlight      = 16
	DefaultFramedFetchBatch    = 16
	DefaultFramedMaxAckPending = 64

	DefaultPerMessageInFlight      = 1024
	DefaultPerMessageFetchBatch    = 500
	DefaultPerMessageMaxAckPending = 2000
)

// HopConfig configures one hop.
type HopConfig struct {
	Mode HopMode
	// Relaxed runs the server with its default sync interval instead of
	// syncing every write (natstest.Options.RelaxedSync).
	Relaxed bool
	// Records is how many records cross the hop.
	Records int
	// FrameRecords bounds the records of a frame (Framed only); frames are
	// also bounded by DefaultFrameBytes. 0 means DefaultFrameRecords.
	FrameRecords int
	// Partitions of the edge, one subject and one consumer each; records
	// are routed by key. 0 means 1.
	Partitions int
	// Dir holds the server's storage, in a fresh directory that Hop
	// removes when it is done.
	Dir string

	// InFlight bounds the publishes awaiting JetStream's ack. 0 means the
	// mode's default.
	InFlight int
	// FetchBatch bounds the messages one pull requests. 0 means the mode's
	// default.
	FetchBatch int
	// MaxAckPending bounds each consumer's unacknowledged messages. 0 means
	// the mode's default.
	MaxAckPending int
}

// Name names the hop for tables and sub-benchmarks, e.g.
// "framed-syncalways" or "permsg-defaultsync".
func (c HopConfig) Name() string {
	if c.Relaxed {
		return c.Mode.String() + "-defaultsync"
	}
	return c.Mode.String() + "-syncalways"
}

func (c HopConfig) withDefaults() HopConfig {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.FrameRecords, DefaultFrameRecords)
	def(&c.Partitions, 1)
	if c.Mode == Framed {
		def(&c.InFlight, DefaultFramedInFlight)
		def(&c.FetchBatch, DefaultFramedFetchBatch)
		def(&c.MaxAckPending, DefaultFramedMaxAckPending)
	} else {
		def(&c.InFlight, DefaultPerMessageInFlight)
		def(&c.FetchBatch, DefaultPerMessageFetchBatch)
		def(&c.MaxAckPending, DefaultPerMessageMaxAckPending)
	}
	return c
}

// Validate reports whether the configuration describes a hop that can run.
func (c HopConfig) Validate() error {
	switch {
	case c.Mode != Framed && c.Mode != PerMessage:
		return fmt.Errorf("bench: unknown hop mode %v", c.Mode)
	case c.Records <= 0:
		return fmt.Errorf("bench: hop of %d records, want at least 1", c.Records)
	case c.Dir == "":
		return errors.New("bench: hop needs a Dir")
	case c.FrameRecords < 0, c.Partitions < 0, c.InFlight < 0, c.FetchBatch < 0, c.MaxAckPending < 0:
		return fmt.Errorf("bench: negative hop bound in %+v", c)
	}
	return nil
}

// HopResult is what one hop measured.
type HopResult struct {
	Records int
	// Elapsed runs from the first publish until the last message is
	// acknowledged; starting the server and creating the stream and
	// consumers are not part of it.
	Elapsed       time.Duration
	RecordsPerSec float64
	// Frames is how many JetStream messages carried the records: frames
	// in Framed mode, Records in PerMessage mode.
	Frames int
}

// Errors a hop reports when delivery was not exactly once.
var (
	ErrDuplicate = errors.New("bench: record delivered twice")
	ErrBadRecord = errors.New("bench: record not sent by the hop")
	ErrUnsettled = errors.New("bench: messages published but not delivered and acknowledged exactly once")
)

// settleTime bounds the wait for the last acks once every record arrived.
const settleTime = 30 * time.Second

// Hop starts a server in a fresh directory under c.Dir, creates the edge's
// stream and its consumers, then publishes c.Records records while consuming
// them, and returns once every record has been received and every message
// acknowledged. It returns an error if a record is missing, duplicated or
// redelivered. The server is shut down and its directory removed before Hop
// returns.
func Hop(ctx context.Context, c HopConfig) (HopResult, error) {
	h, err := openHop(ctx, c)
	if err != nil {
		return HopResult{}, err
	}
	defer h.close()
	return h.run(ctx)
}

// hop is one prepared hop: a server, a stream with its consumers ready to
// pull, and a publisher. run may be called once.
type hop struct {
	cfg      HopConfig
	dir      string
	srv      *natstest.Server
	pubConn  *nats.Conn
	subConn  *nats.Conn
	pub      jetstream.JetStream
	spec     edge.Spec
	stream   jetstream.Stream
	layout   keygroup.Layout
	subjects []string

	// consumers are the hop's consumers, one per partition, for checking
	// that every message was acknowledged once.
	consumers []jetstream.Consumer

	// Framed.
	writer *edge.Writer
	reader *edge.Reader

	// PerMessage.
	iters  []jetstream.MessagesContext
	pubErr struct {
		sync.Mutex
		err error
	}
}

const benchKeyGroups = 256

func openHop(ctx context.Context, c HopConfig) (_ *hop, err error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c = c.withDefaults()
	h := &hop{cfg: c}
	defer func() {
		if err != nil {
			h.close()
		}
	}()
	if h.dir, err = os.MkdirTemp(c.Dir, "hop-"); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if h.srv, err = natstest.Start(natstest.Options{Dir: h.dir, RelaxedSync: c.Relaxed}); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	// Publisher and consumer have a connection each, as two processes would.
	if h.pubConn, err = nats.Connect(h.srv.ClientURL()); err != nil {
		return nil, fmt.Errorf("bench: connect: %w", err)
	}
	if h.subConn, err = nats.Connect(h.srv.ClientURL()); err != nil {
		return nil, fmt.Errorf("bench: connect: %w", err)
	}
	h.pub, err = jetstream.New(h.pubConn,
		jetstream.WithPublishAsyncMaxPending(c.InFlight),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) {
			h.pubErr.Lock()
			defer h.pubErr.Unlock()
			if h.pubErr.err == nil {
				h.pubErr.err = fmt.Errorf("bench: publish to %s: %w", m.Subject, err)
			}
		}))
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	sub, err := jetstream.New(h.subConn)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	h.spec = edge.Spec{Pipeline: "bench", Edge: "hop", Partitions: c.Partitions, Retention: time.Hour}
	if h.stream, err = edge.Ensure(ctx, h.pub, h.spec); err != nil {
		return nil, err
	}
	h.layout = keygroup.Layout{Groups: benchKeyGroups, Partitions: c.Partitions}
	for p := range c.Partitions {
		h.subjects = append(h.subjects, h.spec.Subject(p))
	}
	if c.Mode == Framed {
		err = h.openFramed(ctx, sub)
	} else {
		err = h.openPerMessage(ctx, sub)
	}
	return h, err
}

func (h *hop) close() {
	if h.reader != nil {
		h.reader.Close()
	}
	for _, it := range h.iters {
		it.Stop()
	}
	if h.subConn != nil {
		h.subConn.Close()
	}
	if h.pubConn != nil {
		h.pubConn.Close()
	}
	if h.srv != nil {
		h.srv.Shutdown()
	}
	if h.dir != "" {
		os.RemoveAll(h.dir)
	}
}

// run publishes and consumes concurrently and waits until every message is
// acknowledged.
func (h *hop) run(ctx context.Context) (HopResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t := newTally(h.cfg.Records)
	start := time.Now()

	var (
		wg     sync.WaitGroup
		sent   int
		pubErr error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if h.cfg.Mode == Framed {
			sent, pubErr = h.publishFrames(ctx)
		} else {
			sent, pubErr = h.publishMessages(ctx)
		}
		if pubErr != nil {
			cancel()
		}
	}()
	var consErr error
	if h.cfg.Mode == Framed {
		consErr = h.consumeFrames(ctx, t)
	} else {
		consErr = h.consumeMessages(ctx, t)
	}
	if consErr != nil {
		cancel()
	}
	wg.Wait()
	switch {
	case consErr != nil && !errors.Is(consErr, context.Canceled):
		return HopResult{}, consErr
	case pubErr != nil:
		return HopResult{}, pubErr
	case consErr != nil:
		return HopResult{}, consErr
	}
	if err := h.settle(ctx, sent); err != nil {
		return HopResult{}, err
	}
	elapsed := time.Since(start)
	return HopResult{
		Records:       h.cfg.Records,
		Elapsed:       elapsed,
		RecordsPerSec: float64(h.cfg.Records) / elapsed.Seconds(),
		Frames:        sent,
	}, nil
}

// settle waits until the consumers have acknowledged every message, then
// checks that the stream holds exactly the messages sent and that none was
// delivered twice.
func (h *hop) settle(ctx context.Context, sent int) error {
	deadline := time.Now().Add(settleTime)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		var delivered uint64
		settled := true
		for _, c := range h.consumers {
			info, err := c.Info(ctx)
			if err != nil {
				return fmt.Errorf("bench: consumer info: %w", err)
			}
			if info.NumAckPending > 0 || info.NumPending > 0 {
				settled = false
				break
			}
			delivered += info.Delivered.Consumer
		}
		if settled {
			info, err := h.stream.Info(ctx)
			if err != nil {
				return fmt.Errorf("bench: stream info: %w", err)
			}
			if info.State.Msgs != uint64(sent) || delivered != uint64(sent) {
				return fmt.Errorf("%w: sent %d, stream holds %d, consumers delivered %d",
					ErrUnsettled, sent, info.State.Msgs, delivered)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: acks still pending after %v", ErrUnsettled, settleTime)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// tally records which records arrived. It is safe for concurrent use.
type tally struct {
	seen  []atomic.Uint64 // bit per record id
	n     int64
	count atomic.Int64
	done  chan struct{} // closed when all n have arrived
}

func newTally(n int) *tally {
	return &tally{seen: make([]atomic.Uint64, (n+63)/64), n: int64(n), done: make(chan struct{})}
}

// mark records the arrival of the record with the given payload.
func (t *tally) mark(payload []byte) error {
	id, ok := bidID(payload)
	if !ok || id >= uint64(t.n) {
		return fmt.Errorf("%w: %.40q", ErrBadRecord, payload)
	}
	bit := uint64(1) << (id % 64)
	if t.seen[id/64].Or(bit)&bit != 0 {
		return fmt.Errorf("%w: id %d", ErrDuplicate, id)
	}
	if t.count.Add(1) == t.n {
		close(t.done)
	}
	return nil
}

// complete reports whether every record arrived; since mark rejects
// duplicates and ids out of range, n marks mean each record once.
func (t *tally) complete() bool { return t.count.Load() == t.n }
