package natstest

import (
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Options configure an embedded server. The zero value is a durable server on
// a random loopback port.
type Options struct {
	// Dir is where JetStream stores its data. Required.
	Dir string
	// Port to listen on; 0 picks a free port.
	Port int
	// RelaxedSync uses the server's default sync interval instead of
	// syncing every write. Only benchmarks set it, to show what durability
	// costs; nothing in weir runs this way.
	RelaxedSync bool
	// ServerName names the server; empty picks "weir-embedded".
	ServerName string
	// ConfigFile, when set, is a nats-server configuration file the
	// server starts from — its authorization, accounts and tls blocks, as
	// weir auth and the compose stack write them; the options above
	// override what it says of the same things.
	ConfigFile string
	// LogFile, when set, is where the server logs — permission violations
	// among what it says; otherwise it logs nothing.
	LogFile string

	// ClusterName, when set, makes the server a node of that cluster,
	// listening for routes on ClusterPort and routing to Routes (a comma-
	// separated list of nats-route:// URLs, its own among them), as
	// StartCluster starts its nodes and weir chaos -cluster its brokers.
	ClusterName string
	ClusterPort int
	Routes      string

	// Set by StartCluster in a partitionable cluster: the route address
	// the node gives its peers.
	advertise string
}

// Server is a running embedded nats-server.
type Server struct {
	srv  *server.Server
	opts Options
}

// MaxBatch is the largest atomic batch the servers Start runs accept.
const MaxBatch = 10_000

// Start starts a server and waits until it accepts connections.
func Start(o Options) (*Server, error) {
	if o.Dir == "" {
		return nil, errors.New("natstest: Options.Dir is required")
	}
	port := o.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	name := o.ServerName
	if name == "" {
		name = "weir-embedded"
	}
	sopts := &server.Options{}
	if o.ConfigFile != "" {
		var err error
		if sopts, err = server.ProcessConfigFile(o.ConfigFile); err != nil {
			return nil, fmt.Errorf("natstest: %w", err)
		}
	}
	sopts.ServerName = name
	sopts.Host = "127.0.0.1"
	sopts.Port = port
	sopts.JetStream = true
	sopts.StoreDir = o.Dir
	sopts.NoSigs = true
	sopts.NoLog = o.LogFile == ""
	sopts.LogFile = o.LogFile
	// Frames are at most a few MiB; leave headroom.
	sopts.MaxPayload = 8 << 20
	// Atomic batches of up to MaxBatch messages: a producer that fills
	// them pays a tenth of the per-batch writes, fsyncs and staging stores
	// of the server's default limit (1,000).
	sopts.JetStreamLimits = server.JSLimitOpts{MaxBatchSize: MaxBatch}
	if !o.RelaxedSync {
		sopts.SyncAlways = true
	}
	if o.ClusterName != "" {
		sopts.Cluster.Name = o.ClusterName
		sopts.Cluster.Host = "127.0.0.1"
		sopts.Cluster.Port = o.ClusterPort
		sopts.Routes = server.RoutesFromStr(o.Routes)
		sopts.Cluster.Advertise = o.advertise
	}
	srv, err := server.NewServer(sopts)
	if err != nil {
		return nil, fmt.Errorf("natstest: new server: %w", err)
	}
	if o.LogFile != "" {
		srv.ConfigureLogger()
	}
	go srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		return nil, errors.New("natstest: server not ready after 30s")
	}
	// Restart takes the same port, also after Shutdown, when the server no
	// longer knows it.
	o.Port = srv.Addr().(*net.TCPAddr).Port
	return &Server{srv: srv, opts: o}, nil
}

// Run starts a server for the test, storing data in t.TempDir(), and shuts
// it down at the end of the test.
func Run(t testing.TB) *Server {
	t.Helper()
	s, err := Start(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

// ClientURL is the URL clients connect to.
func (s *Server) ClientURL() string { return s.srv.ClientURL() }

// Dir is the JetStream storage directory.
func (s *Server) Dir() string { return s.opts.Dir }

// Connect opens a client connection for a test and closes it at the end.
func (s *Server) Connect(t testing.TB) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// JetStream connects to the server and returns a JetStream context; the
// connection closes when the test ends.
func (s *Server) JetStream(t testing.TB) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(s.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// Shutdown stops the server and waits for it to finish.
func (s *Server) Shutdown() {
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
}

// Name is the server's name.
func (s *Server) Name() string { return s.srv.Name() }

// NumRoutes is the number of route connections the server has to the other
// nodes of its cluster: several to each, since servers pool them.
func (s *Server) NumRoutes() int { return s.srv.NumRoutes() }

// Restart shuts the server down and starts a new one on the same port and
// storage directory, as an operator restarting the broker would. A node of
// a cluster rejoins it.
func (s *Server) Restart() error { return s.RestartAfter(0) }

// RestartAfter is Restart with the server down for down: an outage.
func (s *Server) RestartAfter(down time.Duration) error {
	s.Shutdown()
	time.Sleep(down) // the outage itself
	ns, err := Start(s.opts)
	if err != nil {
		return err
	}
	*s = *ns
	return nil
}
