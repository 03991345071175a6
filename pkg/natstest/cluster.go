package natstest

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// ClusterName is the name of the clusters StartCluster starts.
const ClusterName = "weir-test"

// Cluster is a JetStream cluster of embedded servers on loopback: every
// node has its own store and syncs every write (SyncAlways), and routes to
// every other node.
type Cluster struct {
	// Servers are the nodes, named weir-0, weir-1, ….
	Servers []*Server
	down    []bool

	// Set when the cluster is partitionable: links[i][j] carries node i's
	// routes to node j (nil when i == j), isolated marks the nodes cut off
	// by Isolate, and deadEnd is the address every node advertises.
	links    [][]*link
	isolated []bool
	deadEnd  *deadEnd
}

// ClusterOptions configure a cluster.
type ClusterOptions struct {
	// Nodes is the number of servers, at least 2.
	Nodes int
	// Partitionable routes every node to every other through a link in
	// this process that Isolate can cut, so that a test can partition the
	// cluster. Without it the nodes route to each other directly.
	Partitionable bool
}

// StartCluster starts an n-node JetStream cluster storing node i's data
// in dir/weir-<i>, and waits until the cluster has elected a JetStream
// meta leader that sees every node. A cluster of one is refused: a single
// server is Start's.
func StartCluster(dir string, n int) (*Cluster, error) {
	return StartClusterWith(dir, ClusterOptions{Nodes: n})
}

// StartClusterWith is StartCluster with options.
func StartClusterWith(dir string, o ClusterOptions) (*Cluster, error) {
	if o.Nodes < 2 {
		return nil, fmt.Errorf("natstest: a cluster needs at least 2 nodes, not %d", o.Nodes)
	}
	var err error
	// The route ports are chosen before the nodes start, since every node
	// names all of them; another process may take one in between, so try
	// again with new ones.
	for attempt := 0; attempt < 3; attempt++ {
		var c *Cluster
		if c, err = startCluster(dir, o); err == nil {
			return c, nil
		}
	}
	return nil, err
}

func startCluster(dir string, o ClusterOptions) (*Cluster, error) {
	n := o.Nodes
	ports, err := freePorts(n)
	if err != nil {
		return nil, err
	}
	routes := make([]string, n)
	for i, p := range ports {
		routes[i] = "nats-route://127.0.0.1:" + strconv.Itoa(p)
	}
	c := &Cluster{down: make([]bool, n), isolated: make([]bool, n)}
	if o.Partitionable {
		if err := c.partition(ports); err != nil {
			c.Shutdown()
			return nil, err
		}
	}
	for i := range n {
		name := "weir-" + strconv.Itoa(i)
		so := Options{
			Dir:         filepath.Join(dir, name),
			ServerName:  name,
			ClusterName: ClusterName,
			ClusterPort: ports[i],
			Routes:      strings.Join(routes, ","),
		}
		if o.Partitionable {
			so.Routes = c.linkRoutes(i)
			so.advertise = c.deadEnd.addr()
		}
		s, err := Start(so)
		if err != nil {
			c.Shutdown()
			return nil, err
		}
		c.Servers = append(c.Servers, s)
	}
	if err := c.WaitForLeader(30 * time.Second); err != nil {
		c.Shutdown()
		return nil, err
	}
	return c, nil
}

// freePorts finds n free loopback ports.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("natstest: find a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// RunCluster starts an n-node cluster for the test, storing data under
// t.TempDir(), and shuts it down at the end of the test.
func RunCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	return RunClusterWith(t, ClusterOptions{Nodes: n})
}

// RunClusterWith is RunCluster with options.
func RunClusterWith(t testing.TB, o ClusterOptions) *Cluster {
	t.Helper()
	c, err := StartClusterWith(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	return c
}

// ClientURLs lists the client URLs of every node, separated by commas, as
// nats.Connect takes them: a client connected to a node that dies
// reconnects to another. Nodes shut down stay in the list.
func (c *Cluster) ClientURLs() string {
	urls := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		urls[i] = s.ClientURL()
	}
	return strings.Join(urls, ",")
}

// Connect opens a client connection to the cluster for a test, reconnecting
// for as long as the test runs, and closes it at the end.
func (c *Cluster) Connect(t testing.TB) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(c.ClientURLs(), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// ShutdownNode stops node i, as a machine dying would; the others carry
// on. Wait with WaitForLeader for the survivors to agree on a meta leader.
func (c *Cluster) ShutdownNode(i int) {
	if !c.down[i] {
		c.down[i] = true
		c.Servers[i].Shutdown()
	}
}

// RestartNode starts node i again on its ports and store; it rejoins the
// cluster.
func (c *Cluster) RestartNode(i int) error {
	c.down[i] = false
	return c.Servers[i].Restart()
}

// Shutdown stops every node still running, and the links of a
// partitionable cluster.
func (c *Cluster) Shutdown() {
	for i := range c.Servers {
		c.ShutdownNode(i)
	}
	c.closeLinks()
}

// Up lists the indexes of the nodes running.
func (c *Cluster) Up() []int {
	var up []int
	for i := range c.Servers {
		if !c.down[i] {
			up = append(up, i)
		}
	}
	return up
}

// MetaLeader is the index of the node that leads the JetStream meta group,
// or -1 while there is none. A node cut off by Isolate is not asked.
func (c *Cluster) MetaLeader() int {
	for _, i := range c.reachable() {
		if c.Servers[i].srv.JetStreamIsLeader() {
			return i
		}
	}
	return -1
}

// StreamLeader is the index of the node that leads stream name of the
// default account, or -1 while there is none. A node cut off by Isolate
// is not asked.
func (c *Cluster) StreamLeader(name string) int {
	for _, i := range c.reachable() {
		s := c.Servers[i].srv
		if s.JetStreamIsStreamLeader(s.GlobalAccount().Name, name) {
			return i
		}
	}
	return -1
}

// WaitForLeader waits until a meta leader is elected and sees every
// running node with JetStream enabled, so that streams of as many replicas
// as there are nodes can be placed. While a node is isolated, the leader
// is one of the others and needs to see only them.
//
// It also waits until every node it asks counts every node of the cluster
// in its meta group. A node that has not yet applied the leader's word
// that a third node joined counts itself and the leader only, and needs
// the leader's vote to elect another: isolating the leader right after a
// cluster started left the other two without a leader for good.
func (c *Cluster) WaitForLeader(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	want := len(c.reachable())
	for {
		l := c.MetaLeader()
		var seen int
		var short string
		if l >= 0 {
			seen = len(c.Servers[l].srv.JetStreamClusterPeers())
			for _, i := range c.reachable() {
				if n := c.metaSize(i); n != len(c.Servers) {
					short = fmt.Sprintf("%s counts %d nodes in the meta group", c.Servers[i].Name(), n)
					break
				}
			}
			if seen >= want && short == "" {
				return nil
			}
		}
		if time.Now().After(deadline) {
			switch {
			case l < 0:
				return errors.New("natstest: no JetStream meta leader after " + timeout.String())
			case seen < want:
				return fmt.Errorf("natstest: meta leader %s sees %d of %d nodes after %s", c.Servers[l].Name(), seen, want, timeout)
			default:
				return fmt.Errorf("natstest: %s of %d after %s", short, len(c.Servers), timeout)
			}
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// metaSize is the number of nodes node i counts in the JetStream meta
// group, itself included, or 0 when it has none.
func (c *Cluster) metaSize(i int) int {
	const meta = "_meta_" // the group's name in nats-server
	rz := c.Servers[i].srv.Raftz(&server.RaftzOptions{GroupFilter: meta})
	if rz == nil {
		return 0
	}
	for _, groups := range *rz {
		if g, ok := groups[meta]; ok {
			return g.Size
		}
	}
	return 0
}
