package test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/services/dedup"
)

// TestAFirstDeliveryNeverReceivedIsReadAgain is the end-to-end form of
// edge.TestAFirstDeliveryPastTheFirstIsADrop, over a real server: a proxy
// between the dedup service and the broker swallows the first message
// one ingress consumer delivers — as a broker does that is killed after it
// recorded a delivery and before it sent it (weir chaos, q7 unaligned,
// seed 26). The reader meets consumer sequence 2 first, stops, and reads
// the input again from its position: every event comes out exactly once.
// Before the fix the swallowed record, redelivered after the ack wait,
// fell below the position and was lost.
func TestAFirstDeliveryNeverReceivedIsReadAgain(t *testing.T) {
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	ctx := context.Background()
	c := loadContract(t)
	cfg := genConfig(c, 400)
	publish(t, js, cfg)
	want, future := expected(t, cfg)

	p := newDeliveryProxy(t, srv.ClientURL(), func(d jsDelivery) bool {
		return d.stream == c.Ingress.Stream && d.consumerSeq == 1 && d.delivered == 1
	})
	streamtest.Run(t, p.url, c, t.TempDir(), dedup.Factories())
	streamtest.CheckFor(t, 60*time.Second, func() error {
		// Counted first, read only once all are there: each read makes a
		// consumer, and the edge's stream takes a limited number.
		if n, err := countStream(ctx, js, edge.StreamName(c.Pipeline, "events")); err != nil || n < uint64(len(want)) {
			return fmt.Errorf("%d of %d events out of dedup, %d deliveries swallowed (%v)", n, len(want), p.swallowed.Load(), err)
		}
		counts, total, err := sinkCounts(ctx, js, c)
		if err != nil {
			return err
		}
		for id := range want {
			if counts[id] != 1 {
				return fmt.Errorf("event %s came out %d times", id, counts[id])
			}
		}
		if total != len(want) {
			return fmt.Errorf("%d events out of dedup, want %d", total, len(want))
		}
		return nil
	})
	if p.swallowed.Load() != 1 {
		t.Fatalf("the proxy swallowed %d deliveries, want 1: the test did not test", p.swallowed.Load())
	}
	if n := len(streamtest.Letters(t, js, c.Pipeline)); n != future {
		t.Errorf("%d dead letters, want the %d events in the future", n, future)
	}
}

// jsDelivery is what a JetStream delivery's reply subject says of it.
type jsDelivery struct {
	stream, consumer                  string
	delivered, streamSeq, consumerSeq uint64
}

// parseAckSubject reads a reply subject $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>
// or its newer form with a domain and an account hash after ACK.
func parseAckSubject(reply string) (jsDelivery, bool) {
	tok := strings.Split(reply, ".")
	if len(tok) < 9 || tok[0] != "$JS" || tok[1] != "ACK" {
		return jsDelivery{}, false
	}
	if len(tok) > 9 {
		tok = tok[2:] // the domain and the account hash
	}
	num := func(s string) uint64 { n, _ := strconv.ParseUint(s, 10, 64); return n }
	return jsDelivery{stream: tok[2], consumer: tok[3], delivered: num(tok[4]), streamSeq: num(tok[5]), consumerSeq: num(tok[6])}, true
}

// deliveryProxy forwards NATS connections to a server, reading what the
// server sends message by message, and swallows — once — the first
// JetStream delivery drop picks.
type deliveryProxy struct {
	url       string
	swallowed atomic.Int64
	drop      func(jsDelivery) bool
	once      sync.Mutex
	done      bool
}

func newDeliveryProxy(t *testing.T, serverURL string, drop func(jsDelivery) bool) *deliveryProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := strings.TrimPrefix(serverURL, "nats://")
	p := &deliveryProxy{url: "nats://" + l.Addr().String(), drop: drop}
	var conns sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		conns.Wait()
	})
	go func() {
		for {
			client, err := l.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				client.Close()
				continue
			}
			conns.Add(2)
			go func() {
				defer conns.Done()
				_, _ = io.Copy(server, client)
				server.Close()
			}()
			go func() {
				defer conns.Done()
				_ = p.forward(client, server)
				client.Close()
				server.Close()
			}()
		}
	}()
	return p
}

// forward copies the server's protocol to the client, a line at a time
// and a message with its payload at a time.
func (p *deliveryProxy) forward(client io.Writer, server io.Reader) error {
	r := bufio.NewReaderSize(server, 64<<10)
	w := bufio.NewWriterSize(client, 64<<10)
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return err
		}
		head := string(line)
		var payload []byte
		f := strings.Fields(head)
		if len(f) > 0 && (f[0] == "MSG" || f[0] == "HMSG") {
			// MSG <subject> <sid> [reply] <bytes>, HMSG … <header bytes> <total bytes>
			n, err := strconv.Atoi(f[len(f)-1])
			if err != nil {
				return fmt.Errorf("proxy: %q: %w", head, err)
			}
			payload = make([]byte, n+2) // and its CRLF
			if _, err := io.ReadFull(r, payload); err != nil {
				return err
			}
			reply := ""
			if (f[0] == "MSG" && len(f) == 5) || (f[0] == "HMSG" && len(f) == 6) {
				reply = f[3]
			}
			if d, ok := parseAckSubject(reply); ok && p.take(d) {
				continue
			}
		}
		if _, err := w.WriteString(head); err != nil {
			return err
		}
		if _, err := w.Write(payload); err != nil {
			return err
		}
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
}

// take reports whether to swallow d: the first delivery drop picks.
func (p *deliveryProxy) take(d jsDelivery) bool {
	p.once.Lock()
	defer p.once.Unlock()
	if p.done || !p.drop(d) {
		return false
	}
	p.done = true
	p.swallowed.Add(1)
	return true
}
