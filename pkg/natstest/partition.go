package natstest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// A partitionable cluster routes node i to node j through a link: a
// loopback listener in this process that forwards every connection it
// takes to node j's route port. Isolate cuts the links to and from a node.
//
// The servers must not route around the links. A server tells the nodes it
// routes to the address of each new peer (gossip), and one not yet routed
// to that peer dials the address; it also redials the address a peer gave
// when a duplicate route it kept closes. Without Cluster.Advertise that
// address is the peer's real route port, so a node rejoining after Heal
// or a restart would soon be routed to directly, and a later Isolate could
// not cut it off. Every node of a partitionable cluster therefore
// advertises a dead end: a loopback port nothing listens on, so such dials
// are refused at once and only the routes each node is configured with,
// through the links, connect.

// Isolate cuts node i off from the other nodes, as a network partition
// that leaves it alone would, while it keeps running and its clients stay
// connected to it: every route connection to or from it is closed and new
// ones are refused until Heal(i). The other nodes carry on and elect new
// leaders where node i led; node i's clients get no answer from what it
// cannot reach. MetaLeader and StreamLeader ignore node i meanwhile: it may
// still believe it leads until it notices it has lost its quorum.
//
// Isolate returns once no node has a route to or from node i, and an
// error if the cluster was not started Partitionable or a route outlives
// the cut, which would be a route that bypasses the links.
func (c *Cluster) Isolate(i int) error {
	if c.links == nil {
		return errors.New("natstest: Isolate needs a cluster started Partitionable")
	}
	c.isolated[i] = true
	for j := range c.Servers {
		if j != i {
			c.links[i][j].cut()
			c.links[j][i].cut()
		}
	}
	// The servers notice the closed connections as soon as they read from
	// them; a route through no link would never close.
	return waitFor(10*time.Second, func() error {
		for _, j := range c.Up() {
			if j != i && (c.routed(i, j) || c.routed(j, i)) {
				return fmt.Errorf("natstest: %s and %s still routed after the links between them were cut", c.Servers[i].Name(), c.Servers[j].Name())
			}
		}
		return nil
	})
}

// Heal undoes Isolate(i): the links between node i and every node not
// isolated take connections again. The nodes redial their routes about
// once a second; Heal returns once node i is routed to every other node
// running and not isolated, and an error if it is not within 30 seconds.
func (c *Cluster) Heal(i int) error {
	if c.links == nil {
		return errors.New("natstest: Heal needs a cluster started Partitionable")
	}
	c.isolated[i] = false
	for j := range c.Servers {
		if j != i && !c.isolated[j] {
			c.links[i][j].mend()
			c.links[j][i].mend()
		}
	}
	if c.down[i] {
		return nil
	}
	return waitFor(30*time.Second, func() error {
		for _, j := range c.reachable() {
			if j != i && (!c.routed(i, j) || !c.routed(j, i)) {
				return fmt.Errorf("natstest: %s and %s not routed after the links between them were mended", c.Servers[i].Name(), c.Servers[j].Name())
			}
		}
		return nil
	})
}

// waitFor polls cond until it returns nil or timeout has passed.
func waitFor(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond) // poll interval, not a wait for an outcome
	}
}

// routed reports whether node i has a route connection to node j, or to
// a server of the same name: the node restarted.
func (c *Cluster) routed(i, j int) bool {
	if c.down[i] {
		return false
	}
	rz, err := c.Servers[i].srv.Routez(&server.RoutezOptions{})
	if err != nil {
		return false
	}
	for _, r := range rz.Routes {
		if r.RemoteName == c.Servers[j].Name() {
			return true
		}
	}
	return false
}

// reachable lists the indexes of the nodes running and not isolated.
func (c *Cluster) reachable() []int {
	var up []int
	for _, i := range c.Up() {
		if !c.isolated[i] {
			up = append(up, i)
		}
	}
	return up
}

// partition starts a link from every node to every other, to the route
// ports given, and the dead end the nodes advertise.
func (c *Cluster) partition(ports []int) error {
	n := len(ports)
	var err error
	if c.deadEnd, err = newDeadEnd(); err != nil {
		return err
	}
	c.links = make([][]*link, n)
	for i := range n {
		c.links[i] = make([]*link, n)
		for j := range n {
			if i == j {
				continue
			}
			if c.links[i][j], err = newLink(fmt.Sprintf("127.0.0.1:%d", ports[j])); err != nil {
				return err
			}
		}
	}
	return nil
}

// linkRoutes is the routes node i is configured with in a partitionable
// cluster: the links to every other node.
func (c *Cluster) linkRoutes(i int) string {
	var routes []string
	for j, k := range c.links[i] {
		if j != i {
			routes = append(routes, "nats-route://"+k.addr())
		}
	}
	return strings.Join(routes, ",")
}

// closeLinks closes the links, their connections and the dead end.
func (c *Cluster) closeLinks() {
	for _, row := range c.links {
		for _, k := range row {
			if k != nil {
				k.close()
			}
		}
	}
	if c.deadEnd != nil {
		c.deadEnd.close()
	}
}

// A link carries the route connections one node opens to another: it
// listens on loopback and copies bytes both ways between each connection
// it takes and one it opens to the other node's route port. Cutting it
// closes those connections and refuses new ones until it is mended.
type link struct {
	l  net.Listener
	to string
	// wg counts the accept loop and the goroutines forwarding.
	wg sync.WaitGroup
	mu struct {
		sync.Mutex
		cut   bool
		conns map[net.Conn]struct{}
	}
}

func newLink(to string) (*link, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("natstest: listen for a link: %w", err)
	}
	k := &link{l: l, to: to}
	k.mu.conns = map[net.Conn]struct{}{}
	k.wg.Add(1)
	go k.accept()
	return k, nil
}

func (k *link) addr() string { return k.l.Addr().String() }

func (k *link) accept() {
	defer k.wg.Done()
	for {
		in, err := k.l.Accept()
		if err != nil {
			return // closed
		}
		k.wg.Add(1)
		go k.forward(in)
	}
}

// forward copies between in and a new connection to the node the link
// leads to until either end closes or the link is cut. A node down
// refuses the dial, and in is closed: to the node dialing, that is the
// same as the node being down.
func (k *link) forward(in net.Conn) {
	defer k.wg.Done()
	if k.isCut() {
		in.Close()
		return
	}
	out, err := net.DialTimeout("tcp", k.to, time.Second)
	if err != nil {
		in.Close()
		return
	}
	// Tracked under the lock cut takes, so that no pair escapes a cut
	// that happens during the dial.
	k.mu.Lock()
	if k.mu.cut {
		k.mu.Unlock()
		in.Close()
		out.Close()
		return
	}
	k.mu.conns[in], k.mu.conns[out] = struct{}{}, struct{}{}
	k.mu.Unlock()
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		io.Copy(out, in)
		k.drop(in, out)
	}()
	io.Copy(in, out)
	k.drop(in, out)
}

// drop closes a pair of forwarded connections and forgets them.
func (k *link) drop(in, out net.Conn) {
	k.mu.Lock()
	delete(k.mu.conns, in)
	delete(k.mu.conns, out)
	k.mu.Unlock()
	in.Close()
	out.Close()
}

func (k *link) isCut() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.mu.cut
}

// cut closes every connection the link carries and refuses new ones.
func (k *link) cut() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.mu.cut = true
	for conn := range k.mu.conns {
		conn.Close()
	}
	clear(k.mu.conns)
}

func (k *link) mend() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.mu.cut = false
}

// close stops the link and waits for its goroutines.
func (k *link) close() {
	k.l.Close()
	k.cut()
	k.wg.Wait()
}

// A deadEnd holds a loopback port on which nothing listens, so that a dial
// to it is refused at once and no other socket can listen on it: the
// local end of a connection to a listener that is closed once it has
// accepted.
type deadEnd struct{ near, far net.Conn }

func newDeadEnd() (*deadEnd, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("natstest: reserve a dead end: %w", err)
	}
	defer l.Close()
	near, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		return nil, fmt.Errorf("natstest: reserve a dead end: %w", err)
	}
	far, err := l.Accept()
	if err != nil {
		near.Close()
		return nil, fmt.Errorf("natstest: reserve a dead end: %w", err)
	}
	return &deadEnd{near: near, far: far}, nil
}

func (d *deadEnd) addr() string { return d.near.LocalAddr().String() }

func (d *deadEnd) close() {
	d.near.Close()
	d.far.Close()
}
