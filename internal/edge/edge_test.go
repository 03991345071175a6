package edge_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/record"
)

func newJS(t *testing.T) jetstream.JetStream { return natstest.Run(t).JetStream(t) }

func dataRecord(i int) record.Record {
	return record.Record{Kind: record.Data, ID: fmt.Sprintf("e-%d", i), Key: []byte(fmt.Sprintf("k-%d", i%13)),
		Time: time.Unix(int64(i), 0).UTC(), Value: []byte(fmt.Sprintf(`{"n":%d}`, i))}
}

// TestHopPreservesOrderAndDropsRepublishedFrames writes records through a
// framed edge, re-publishes the same frames as a restarted producer would,
// and reads every record exactly once, in per-partition order, with the
// control records in place.
func TestHopPreservesOrderAndDropsRepublishedFrames(t *testing.T) {
	ctx := context.Background()
	js := newJS(t)
	spec := edge.Spec{Pipeline: "p", Edge: "e", Partitions: 3, Retention: time.Hour}
	if _, err := edge.Ensure(ctx, js, spec); err != nil {
		t.Fatal(err)
	}
	w, err := edge.NewWriter(edge.WriterConfig{Spec: spec, KeyGroups: 256, Producer: "op/0", Generation: 1,
		Limits: edge.Limits{MaxRecords: 7, MaxBytes: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	want := make([][]record.Record, spec.Partitions)
	for i := 0; i < 100; i++ {
		r := dataRecord(i)
		w.Write(r)
		p := w.Partition(r.Key)
		want[p] = append(want[p], r)
		if i == 50 {
			wm := record.Record{Kind: record.Watermark, Time: time.Unix(40, 0).UTC()}
			w.Broadcast(wm)
			for p := range want {
				want[p] = append(want[p], wm)
			}
		}
	}
	msgs := w.Flush()
	if err := edge.Publish(ctx, js, msgs, 16); err != nil {
		t.Fatal(err)
	}
	// A producer that crashed after publishing re-publishes its staged frames.
	if err := edge.Publish(ctx, js, msgs, 16); err != nil {
		t.Fatal(err)
	}
	info, err := js.Stream(ctx, spec.StreamName())
	if err != nil {
		t.Fatal(err)
	}
	if n := info.CachedInfo().State.Msgs; n != uint64(len(msgs)) {
		t.Fatalf("stream holds %d frames, want %d: re-published frames were not deduplicated", n, len(msgs))
	}

	var inputs []edge.Input
	for p := 0; p < spec.Partitions; p++ {
		inputs = append(inputs, edge.Input{Name: fmt.Sprintf("e/%d", p), Partition: p, Stream: spec.StreamName(), Subject: spec.Subject(p), Frames: true})
	}
	r, err := edge.OpenReader(ctx, js, edge.ReaderConfig{Consumer: "reader", Inputs: inputs, FetchBatch: 4, MaxAckPending: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := make([][]record.Record, spec.Partitions)
	deadline := time.After(20 * time.Second)
	for frames := 0; frames < len(msgs); frames++ {
		select {
		case d := <-r.C():
			recs, err := edge.DecodeFrame(d.Msg.Data())
			if err != nil {
				t.Fatal(err)
			}
			got[d.Input.Partition] = append(got[d.Input.Partition], recs...)
			if err := d.Msg.Ack(); err != nil {
				t.Fatal(err)
			}
		case err := <-r.Err():
			t.Fatal(err)
		case <-deadline:
			t.Fatalf("read %d of %d frames before the deadline", frames, len(msgs))
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("records differ after the hop:\n got %v\nwant %v", got, want)
	}
}

func TestWriterCutsFramesAtLimits(t *testing.T) {
	spec := edge.Spec{Pipeline: "p", Edge: "e", Partitions: 1, Retention: time.Hour}
	w, err := edge.NewWriter(edge.WriterConfig{Spec: spec, KeyGroups: 16, Producer: "op/0", Generation: 3,
		Limits: edge.Limits{MaxRecords: 10, MaxBytes: 600}, Seqs: []uint64{41}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 25; i++ {
		w.Write(dataRecord(i))
	}
	msgs := w.Flush()
	if len(msgs) < 3 {
		t.Fatalf("cut %d frames, want at least 3", len(msgs))
	}
	total := 0
	for i, m := range msgs {
		if m.Records > 10 || (len(m.Data) > 600 && m.Records > 1) {
			t.Errorf("frame %d: %d records, %d bytes exceed the limits", i, m.Records, len(m.Data))
		}
		if want := uint64(42 + i); m.Seq != want {
			t.Errorf("frame %d: seq %d, want %d", i, m.Seq, want)
		}
		if want := edge.FrameID("p", "op/0", 3, "e", 0, m.Seq); m.ID != want {
			t.Errorf("frame %d: id %q, want %q", i, m.ID, want)
		}
		var back edge.Message
		b, _ := m.MarshalBinary()
		if err := back.UnmarshalBinary(b); err != nil || !reflect.DeepEqual(back, m) {
			t.Errorf("frame %d: staged round trip = %+v, %v", i, back, err)
		}
		total += m.Records
	}
	if total != 25 {
		t.Fatalf("frames hold %d records, want 25", total)
	}
	if got := w.Seqs(); got[0] != msgs[len(msgs)-1].Seq {
		t.Fatalf("Seqs() = %v, want last cut %d", got, msgs[len(msgs)-1].Seq)
	}
}

// TestReaderPausesAnInput holds back one input's messages while another
// flows, then releases them in order.
func TestReaderPausesAnInput(t *testing.T) {
	ctx := context.Background()
	js := newJS(t)
	spec := edge.Spec{Pipeline: "p", Edge: "e", Partitions: 2, Retention: time.Hour}
	if _, err := edge.Ensure(ctx, js, spec); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		for p := 0; p < 2; p++ {
			if _, err := js.Publish(ctx, spec.Subject(p), []byte(fmt.Sprint(i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	inputs := []edge.Input{
		{Name: "e/0", Partition: 0, Stream: spec.StreamName(), Subject: spec.Subject(0)},
		{Name: "e/1", Partition: 1, Stream: spec.StreamName(), Subject: spec.Subject(1)},
	}
	r, err := edge.OpenReader(ctx, js, edge.ReaderConfig{Consumer: "c", Inputs: inputs, FetchBatch: 4, MaxAckPending: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.SetPaused("e/1", true)
	if !r.Paused("e/1") || r.Paused("e/0") {
		t.Fatal("Paused does not report the gate")
	}
	next := func() edge.Delivery {
		t.Helper()
		select {
		case d := <-r.C():
			_ = d.Msg.Ack()
			return d
		case <-time.After(10 * time.Second):
			t.Fatal("no delivery within 10s")
		}
		return edge.Delivery{}
	}
	for i := 0; i < 20; i++ {
		if d := next(); d.Input.Name != "e/0" {
			t.Fatalf("delivery %d from paused input %s", i, d.Input.Name)
		}
	}
	// e/0 is drained; e/1 is held.
	select {
	case d := <-r.C():
		t.Fatalf("paused input delivered %s", d.Msg.Data())
	case <-time.After(200 * time.Millisecond): // the absence of a delivery is the assertion
	}
	r.SetPaused("e/1", false)
	for i := 0; i < 20; i++ {
		d := next()
		if d.Input.Name != "e/1" || string(d.Msg.Data()) != fmt.Sprint(i) {
			t.Fatalf("after resume got %s %q, want e/1 %d in order", d.Input.Name, d.Msg.Data(), i)
		}
	}
}

func TestJSONWriterWritesOneValuePerMessage(t *testing.T) {
	spec := edge.Spec{Pipeline: "p", Edge: "results", Partitions: 2, Retention: time.Hour}
	w, err := edge.NewWriter(edge.WriterConfig{Spec: spec, KeyGroups: 16, Producer: "op/0", Generation: 1,
		Limits: edge.Limits{MaxRecords: 100, MaxBytes: 1 << 20}, JSON: true})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(dataRecord(1))
	w.Broadcast(record.Record{Kind: record.Watermark, Time: time.Unix(9, 0)})
	w.Write(dataRecord(2))
	msgs := w.Flush()
	if len(msgs) != 2 {
		t.Fatalf("%d messages, want 2 (one per data record, none for the watermark)", len(msgs))
	}
	m := msgs[0]
	if string(m.Data) != `{"n":1}` || m.ID != "p.results.e-1" || !m.JSON {
		t.Fatalf("message %+v", m)
	}
	nm := m.NATS()
	if nm.Header.Get(edge.HeaderKey) != "k-1" || nm.Header.Get(edge.HeaderEventTime) == "" || nm.Header.Get(edge.HeaderFrameSeq) != "" {
		t.Fatalf("headers %v", nm.Header)
	}
	var back edge.Message
	b, _ := m.MarshalBinary()
	if err := back.UnmarshalBinary(b); err != nil || !reflect.DeepEqual(back, m) {
		t.Fatalf("staged round trip %+v, %v", back, err)
	}
}

// TestJSONMessageIDsDoNotCollide is the regression test of an event lost at
// a json result edge: IDs that differ only in whitespace, or in bytes a
// header cannot carry, gave message IDs that NATS trimmed to one, and
// JetStream dropped the second message as a duplicate.
func TestJSONMessageIDsDoNotCollide(t *testing.T) {
	js := newJS(t)
	ctx := context.Background()
	spec := edge.Spec{Pipeline: "p", Edge: "results", Partitions: 1, Retention: time.Hour}
	if _, err := edge.Ensure(ctx, js, spec); err != nil {
		t.Fatal(err)
	}
	w, err := edge.NewWriter(edge.WriterConfig{Spec: spec, KeyGroups: 16, Producer: "op/0", Generation: 1,
		Limits: edge.Limits{MaxRecords: 100, MaxBytes: 1 << 20}, JSON: true})
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"a", "a ", " a", "a\t", "a\r\n", "a\n", "a%20", "a\xff", "a\xfe"}
	for i, id := range ids {
		w.Write(record.Record{Kind: record.Data, ID: id, Key: []byte("k \r\n"), Value: []byte(fmt.Sprintf(`{"n":%d}`, i))})
	}
	if err := edge.Publish(ctx, js, w.Flush(), 8); err != nil {
		t.Fatal(err)
	}
	st, _ := js.Stream(ctx, spec.StreamName())
	info, _ := st.Info(ctx)
	if info.State.Msgs != uint64(len(ids)) {
		t.Fatalf("%d messages stored of %d records with distinct IDs", info.State.Msgs, len(ids))
	}
	m, err := st.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if k, _ := edge.UnescapeHeader(m.Header.Get(edge.HeaderKey)); k != "k \r\n" {
		t.Fatalf("key header %q reads back as %q", m.Header.Get(edge.HeaderKey), k)
	}
}

// TestIngressHeadersAreNotFrameHeaders: a producer's message on an ingress
// input that carries weir's frame headers is one record, not the billion its
// Weir-Records header claims, and no frame.
func TestIngressHeadersAreNotFrameHeaders(t *testing.T) {
	js := newJS(t)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}}); err != nil {
		t.Fatal(err)
	}
	forged := nats.NewMsg("in.0")
	forged.Data = []byte(`{"id":"x"}`)
	for k, v := range map[string]string{edge.HeaderRecords: "1000000000", edge.HeaderProducer: "dedup/0",
		edge.HeaderGeneration: "99", edge.HeaderFrameSeq: "7", edge.HeaderEpoch: "3"} {
		forged.Header.Set(k, v)
	}
	for range 2 {
		if _, err := js.PublishMsg(ctx, forged); err != nil {
			t.Fatal(err)
		}
	}
	inputs := []edge.Input{{Name: "ingress/0", Stream: "IN", Subject: "in.0"}}
	r, err := edge.OpenReader(ctx, js, edge.ReaderConfig{Consumer: "c", Inputs: inputs, FetchBatch: 4, MaxAckPending: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	d := <-r.C()
	if d.Records != 1 || d.Frame != nil {
		t.Fatalf("ingress delivery read as %d records, frame %+v", d.Records, d.Frame)
	}
	// The same headers on an edge input are a frame's.
	r.Close()
	inputs[0].Frames = true
	r, err = edge.OpenReader(ctx, js, edge.ReaderConfig{Consumer: "c2", Inputs: inputs, FetchBatch: 4, MaxAckPending: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if d := <-r.C(); d.Records != 1e9 || d.Frame == nil || d.Frame.Writer() != "dedup/0@g99" || d.Frame.Seq != 7 {
		t.Fatalf("edge delivery %d records, frame %+v", d.Records, d.Frame)
	}
}

// TestWriterStampsTheErasureApplied: frames and json messages cut after
// SetErased carry the revision in Weir-Erased, staged with them; those
// cut before, and a writer that applied none, carry no such header.
func TestWriterStampsTheErasureApplied(t *testing.T) {
	for _, json := range []bool{false, true} {
		spec := edge.Spec{Pipeline: "p", Edge: "e", Partitions: 1, Retention: time.Hour}
		w, err := edge.NewWriter(edge.WriterConfig{Spec: spec, KeyGroups: 16, Producer: "op/0", Generation: 1,
			Limits: edge.Limits{MaxRecords: 10, MaxBytes: 1 << 20}, JSON: json})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(dataRecord(1))
		before := w.Flush()
		w.SetErased(42)
		w.Write(dataRecord(2))
		after := w.Flush()
		if len(before) != 1 || len(after) != 1 {
			t.Fatalf("json %v: %d and %d messages, want one each", json, len(before), len(after))
		}
		if h := before[0].NATS().Header.Get(edge.HeaderErased); h != "" {
			t.Errorf("json %v: a message cut before any erasure says %s %q", json, edge.HeaderErased, h)
		}
		m := after[0]
		if h := m.NATS().Header.Get(edge.HeaderErased); h != "42" {
			t.Errorf("json %v: %s %q, want 42", json, edge.HeaderErased, h)
		}
		var back edge.Message
		b, _ := m.MarshalBinary()
		if err := back.UnmarshalBinary(b); err != nil || !reflect.DeepEqual(back, m) {
			t.Errorf("json %v: staged round trip %+v, %v", json, back, err)
		}
	}
}

// TestWriterStampsErasureNames: a json message written with erasure names
// carries each in Weir-Erasable, and keeps them when staged; a frame
// carries none, nor does a json message written without.
func TestWriterStampsErasureNames(t *testing.T) {
	names := []string{"key.aa", "tenant.bb"}
	for _, json := range []bool{false, true} {
		spec := edge.Spec{Pipeline: "p", Edge: "e", Partitions: 1, Retention: time.Hour}
		w, err := edge.NewWriter(edge.WriterConfig{Spec: spec, KeyGroups: 16, Producer: "op/0", Generation: 1,
			Limits: edge.Limits{MaxRecords: 10, MaxBytes: 1 << 20}, JSON: json})
		if err != nil {
			t.Fatal(err)
		}
		w.WriteErasable(dataRecord(1), names)
		w.Write(dataRecord(2))
		ms := w.Flush()
		var got [][]string
		for _, m := range ms {
			got = append(got, m.NATS().Header.Values(edge.HeaderErasable))
			var back edge.Message
			b, _ := m.MarshalBinary()
			if err := back.UnmarshalBinary(b); err != nil || !reflect.DeepEqual(back, m) {
				t.Errorf("json %v: staged round trip %+v, %v", json, back, err)
			}
		}
		want := [][]string{nil}
		if json {
			want = [][]string{names, nil}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("json %v: %s of each message %q, want %q", json, edge.HeaderErasable, got, want)
		}
	}
}
