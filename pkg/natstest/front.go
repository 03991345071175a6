package natstest

import (
	"fmt"
	"net"
	"sync"
	"testing"
)

// A Front is a loopback address in front of a server: it forwards every
// client connection it takes to the server. Stall stops it passing bytes
// either way while every connection stays open — what a broker paused
// (SIGSTOP) or stuck on its disk looks like to its clients: no error and
// no answer — until Resume. Clients that connect to the server directly
// are not stalled: a test can publish while the clients behind the front
// wait.
type Front struct {
	l  net.Listener
	to string
	wg sync.WaitGroup // the accept loop and the forwarding goroutines
	mu struct {
		sync.Mutex
		stalled, closed bool
		resumed         *sync.Cond
		conns           map[net.Conn]struct{}
	}
}

// Front starts a front for the server, closed when the test ends.
func (s *Server) Front(t testing.TB) *Front {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("natstest: listen for a front: %v", err)
	}
	f := &Front{l: l, to: s.srv.Addr().String()}
	f.mu.resumed = sync.NewCond(&f.mu.Mutex)
	f.mu.conns = map[net.Conn]struct{}{}
	f.wg.Add(1)
	go f.accept()
	t.Cleanup(f.Close)
	return f
}

// URL is the URL clients connect to, to reach the server through the
// front.
func (f *Front) URL() string { return fmt.Sprintf("nats://%s", f.l.Addr()) }

// Stall stops the front passing bytes; the connections stay open.
func (f *Front) Stall() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.stalled = true
}

// Resume passes bytes again, those held during the stall first.
func (f *Front) Resume() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.stalled = false
	f.mu.resumed.Broadcast()
}

// Close closes the front and every connection through it.
func (f *Front) Close() {
	f.mu.Lock()
	if f.mu.closed {
		f.mu.Unlock()
		return
	}
	f.mu.closed = true
	f.mu.resumed.Broadcast()
	for c := range f.mu.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.l.Close()
	f.wg.Wait()
}

func (f *Front) accept() {
	defer f.wg.Done()
	for {
		in, err := f.l.Accept()
		if err != nil {
			return // closed
		}
		out, err := net.Dial("tcp", f.to)
		if err != nil {
			in.Close()
			continue
		}
		f.mu.Lock()
		if f.mu.closed {
			f.mu.Unlock()
			in.Close()
			out.Close()
			return
		}
		f.mu.conns[in], f.mu.conns[out] = struct{}{}, struct{}{}
		f.mu.Unlock()
		f.wg.Add(2)
		go f.pipe(out, in)
		go f.pipe(in, out)
	}
}

// pipe copies from src to dst, holding what it read while the front is
// stalled, until either end closes or the front does.
func (f *Front) pipe(dst, src net.Conn) {
	defer f.wg.Done()
	defer func() {
		f.mu.Lock()
		delete(f.mu.conns, src)
		delete(f.mu.conns, dst)
		f.mu.Unlock()
		src.Close()
		dst.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !f.pass() {
				return
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// pass waits while the front is stalled, and reports whether it is still
// open.
func (f *Front) pass() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.mu.stalled && !f.mu.closed {
		f.mu.resumed.Wait()
	}
	return !f.mu.closed
}
