package edge

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// Headers of a transactional result edge. A result carries its record's ID
// in Weir-Result-Id rather than Nats-Msg-Id: exactly-once there rests on
// the commit markers, not on JetStream's duplicate window, and a batch is
// never refused for an ID the window remembers. A commit marker names its
// writer and the writer's sequence of the last result it commits; results
// and marker carry the checkpoint epoch that released them.
const (
	HeaderResultID = "Weir-Result-Id"
	HeaderWriter   = "Weir-Writer"
	HeaderHeldSeq  = "Weir-Seq"
)

// ErrCommitConflict reports a commit marker refused because the writer's
// last marker is not the one expected: another process published as the
// same writer — a zombie, or a restore on another host. The publisher
// must stop and recover, reading the marker again.
var ErrCommitConflict = errors.New("edge: commit marker conflict: another process committed as this writer")

// CommitSubject is where writer ("operator/instance") puts its commit
// markers: weir.<pipeline>.<edge>.commit.<operator>.<instance>. It is
// deeper than the partition subjects, so a reader of weir.<pipeline>.<edge>.*
// sees results only.
func (s Spec) CommitSubject(writer string) string {
	return "weir." + s.Pipeline + "." + s.Edge + ".commit." + strings.ReplaceAll(writer, "/", ".")
}

func (s Spec) commitSubjects() string { return "weir." + s.Pipeline + "." + s.Edge + ".commit.>" }

// IsCommitMarker reports whether a message of a transactional edge, by its
// headers, is a commit marker rather than a result.
func IsCommitMarker(h nats.Header) bool { return h.Get(HeaderWriter) != "" }

// Commit is what a commit marker says: the writer, the writer's sequence
// of the last result stored with it, the checkpoint epoch released, and
// where the marker is in the stream.
type Commit struct {
	Writer    string
	Seq       uint64
	Epoch     uint64
	StreamSeq uint64
}

// LastCommit reads writer's last commit marker; the zero Commit (with the
// writer set) when it has none.
func LastCommit(ctx context.Context, js jetstream.JetStream, s Spec, writer string) (Commit, error) {
	c := Commit{Writer: writer}
	st, err := js.Stream(ctx, s.StreamName())
	if err != nil {
		return c, fmt.Errorf("edge: last commit of %s: %w", writer, err)
	}
	m, err := st.GetLastMsgForSubject(ctx, s.CommitSubject(writer))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("edge: last commit of %s: %w", writer, err)
	}
	c.StreamSeq = m.Sequence
	if c.Seq, err = strconv.ParseUint(m.Header.Get(HeaderHeldSeq), 10, 64); err != nil {
		return c, fmt.Errorf("edge: commit marker %d of %s: %s %q: %w", m.Sequence, writer, HeaderHeldSeq, m.Header.Get(HeaderHeldSeq), err)
	}
	if c.Epoch, err = strconv.ParseUint(m.Header.Get(HeaderEpoch), 10, 64); err != nil {
		return c, fmt.Errorf("edge: commit marker %d of %s: %s %q: %w", m.Sequence, writer, HeaderEpoch, m.Header.Get(HeaderEpoch), err)
	}
	return c, nil
}

// PublishCommitted stores results and a commit marker c as one atomic
// batch: all are stored or none. The marker expects the writer's previous
// marker at stream sequence prev (0: none), so a second process publishing
// as the same writer is refused with ErrCommitConflict. It returns the
// marker's stream sequence, the prev of the next call. results must fit,
// with the marker, in one batch of the server's limit.
func PublishCommitted(ctx context.Context, js jetstream.JetStream, s Spec, c Commit, prev uint64, results []Message) (uint64, error) {
	epoch := strconv.FormatUint(c.Epoch, 10)
	msgs := make([]*nats.Msg, 0, len(results)+1)
	for _, r := range results {
		m := r.NATS()
		m.Header.Del(HeaderMsgID)
		m.Header.Set(HeaderResultID, r.ID) // what Nats-Msg-Id would have been
		m.Header.Set(HeaderEpoch, epoch)
		msgs = append(msgs, m)
	}
	marker := nats.NewMsg(s.CommitSubject(c.Writer))
	marker.Header.Set(HeaderWriter, c.Writer)
	marker.Header.Set(HeaderHeldSeq, strconv.FormatUint(c.Seq, 10))
	marker.Header.Set(HeaderEpoch, epoch)
	marker.Header.Set(HeaderRecords, strconv.Itoa(len(results)))
	marker.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(prev, 10))
	msgs = append(msgs, marker)
	ack, err := jetstreamext.PublishMsgBatch(ctx, js, msgs)
	var api *jetstream.APIError
	if errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return 0, fmt.Errorf("%w (%s, expected its last marker at %d: %v)", ErrCommitConflict, c.Writer, prev, err)
	}
	if err != nil {
		return 0, fmt.Errorf("edge: commit %d results of %s (epoch %d): %w", len(results), c.Writer, c.Epoch, err)
	}
	return ack.Sequence, nil
}

// StoredSince returns the result IDs writer stored after its own sequence
// seq, each mapped to false: the results of its batches whose commit markers say more than seq,
// read from the stream up to its last marker at the time of the call. A
// writer restored from an older snapshot than the stream reflects — a
// savepoint, an older checkpoint — recomputes those results; their IDs
// let it recognize them and store none twice, however long ago they were
// stored. Batches are atomic, so a batch's results are the messages just
// before its marker since the previous marker of any writer.
func StoredSince(ctx context.Context, js jetstream.JetStream, s Spec, writer string, seq uint64) (map[string]bool, error) {
	ids := map[string]bool{}
	last, err := LastCommit(ctx, js, s, writer)
	if err != nil || last.Seq <= seq {
		return ids, err
	}
	st, err := js.Stream(ctx, s.StreamName())
	if err != nil {
		return nil, fmt.Errorf("edge: results of %s: %w", writer, err)
	}
	// Where to start: after the writer's last marker at or below seq.
	var from uint64
	if seq > 0 {
		markers, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{s.CommitSubject(writer)}})
		if err != nil {
			return nil, fmt.Errorf("edge: commit markers of %s: %w", writer, err)
		}
		for {
			m, err := markers.Next(jetstream.FetchContext(ctx))
			if err != nil {
				return nil, fmt.Errorf("edge: commit markers of %s: %w", writer, err)
			}
			meta, _ := m.Metadata()
			held, _ := strconv.ParseUint(m.Headers().Get(HeaderHeldSeq), 10, 64)
			if held > seq || meta == nil {
				break
			}
			from = meta.Sequence.Stream
			if meta.Sequence.Stream >= last.StreamSeq {
				break
			}
		}
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from + 1})
	if err != nil {
		return nil, fmt.Errorf("edge: results of %s: %w", writer, err)
	}
	var batch []string
	for {
		m, err := cons.Next(jetstream.FetchContext(ctx))
		if err != nil {
			return nil, fmt.Errorf("edge: results of %s: %w", writer, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return nil, err
		}
		h := m.Headers()
		switch {
		case !IsCommitMarker(h):
			batch = append(batch, h.Get(HeaderResultID))
		case h.Get(HeaderWriter) == writer:
			for _, id := range batch {
				ids[id] = false
			}
			fallthrough
		default:
			batch = batch[:0]
		}
		if meta.Sequence.Stream >= last.StreamSeq {
			return ids, nil
		}
	}
}
