package coordinator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/status"
)

// statusServer is the coordinator's HTTP status server, when
// Config.StatusAddr asks for one.
type statusServer struct {
	mu struct {
		sync.Mutex
		url string
	}
}

// StatusURL is the base URL of the status page, or "" when the
// coordinator does not serve one (yet: it starts listening in Run).
func (co *Coordinator) StatusURL() string {
	co.status.mu.Lock()
	defer co.status.mu.Unlock()
	return co.status.mu.url
}

func (st *statusServer) setURL(u string) {
	st.mu.Lock()
	st.mu.url = u
	st.mu.Unlock()
}

// serveStatus listens on Config.StatusAddr and serves the status page
// until the returned stop is called.
func (co *Coordinator) serveStatus(nc *nats.Conn, js jetstream.JetStream) (stop func(), err error) {
	ln, err := net.Listen("tcp", co.cfg.StatusAddr)
	if err != nil {
		return nil, fmt.Errorf("coordinator: status page: %w", err)
	}
	srv := &http.Server{Handler: status.NewHandler(nc, js, co.cfg.Contract), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			co.log.Warn("status page stopped", "err", err)
		}
	}()
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "localhost"
	}
	url := "http://" + net.JoinHostPort(host, port)
	co.status.setURL(url)
	co.log.Info("status page", "url", url)
	return func() {
		co.status.setURL("")
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			co.log.Warn("status page: requests cut short at the stop", "err", err)
		}
		<-done
	}, nil
}
