package main

import (
	bytespkg "bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/pkg/ingress"
	"github.com/weirflow/weir/pkg/natstest"
)

// TestCapacityFromFlags prints the figures of known inputs: a pipeline
// slower than its input cannot catch up; a faster one catches up with its
// backlog in L / (r_proc − r_in).
func TestCapacityFromFlags(t *testing.T) {
	run1 := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytespkg.Buffer
		if err := run(context.Background(), append([]string{"capacity"}, args...), func(string) string { return "" }, &stdout, &stderr); err != nil {
			t.Fatalf("weir capacity %v: %v\n%s", args, err, stderr.String())
		}
		return stdout.String()
	}
	out := run1("-arrival-rate", "2000", "-process-rate", "1500", "-backlog", "10000", "-interval", "10s", "-retention", "24h")
	for _, want := range []string{"catch-up             never", "problem: cannot catch up", "none suffices"} {
		if !strings.Contains(out, want) {
			t.Errorf("slower than arrival: no %q in\n%s", want, out)
		}
	}
	out = run1("-arrival-rate", "1000", "-process-rate", "1500", "-backlog", "60000", "-record-bytes", "200",
		"-state-bytes", "1073741824", "-changed-bytes", "52428800", "-checkpoint-bandwidth", "104857600",
		"-interval", "10s", "-replicas", "3", "-retention", "24h")
	for _, want := range []string{
		"catch-up             2m0s for the backlog of 60000 records",
		"790000 records wait", "caught up in 26m20s",
		"required retention   1h39m0s",
		"at least 10.2s full, 500ms incremental",
		"about 70000 records",
		"no threat to the contract",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}

// TestCapacityReadsEveryIngressStream: over an ingress of two streams,
// the figures weir capacity measures — records, bytes, the sequence the
// arrival rate is sampled from, the limits — are the two streams'
// together.
func TestCapacityReadsEveryIngressStream(t *testing.T) {
	js := natstest.Run(t).JetStream(t)
	in := contracts.Ingress{Stream: "CAP", SubjectPrefix: "cap", Partitions: 4, Streams: 2,
		Retention: contracts.Duration{Duration: time.Hour}, MaxMsgs: 1000}
	if _, err := ingress.Create(t.Context(), js, in, 1); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := js.Publish(t.Context(), in.Subject(i%4), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	info, err := ingressInfo(t.Context(), js, in)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 10 || info.State.LastSeq != 10 || info.Config.MaxMsgs != 2000 || info.State.Bytes == 0 {
		t.Errorf("the ingress as one: %d messages, last sequence %d, max_msgs %d, %d bytes; want 10, 10, 2000", info.State.Msgs, info.State.LastSeq, info.Config.MaxMsgs, info.State.Bytes)
	}
}
