// Telling the masters apart in New: one server must never vote twice.

package engine

import (
	"context"
	"fmt"
	"net"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/redlock-go/redlock/driver"
	"github.com/redlock-go/redlock/internal/core"
	"github.com/redlock-go/redlock/internal/master"
)

// identityTimeout bounds New's questions to the nodes about the servers
// behind them. A node that has not answered by then is not checked: it may
// be down, and a Client must start with a minority of its nodes down.
const identityTimeout = time.Second

// newNodes checks the nodes given to New and makes them the Client's.
//
// Two entries for one master would count one server's vote twice and break
// the majority arithmetic silently, so duplicates are an error. They are
// found in two steps. First, without the network: one client value given
// twice, one address given to two clients (plain clients, cluster seeds,
// ring shards). Then every node is asked, in parallel and within
// identityTimeout, for the run_id of each master behind it, which catches
// the same server behind two kinds of client (a failover client and a plain
// one, two cluster clients of one cluster). A node that cannot be asked in
// time is not checked.
//
// With guard, the same questions check the Client's rights to each
// master's memory marker (checkGuardRights): a node whose answer says a
// right is missing makes newNodes fail with ErrGuardRights. Unless
// evicting, a master whose INFO says it may evict keys makes it fail with
// ErrEvictionPolicy (evictionRisk).
func newNodes(conns []driver.Conn, guard, evicting bool) ([]*node, error) {
	if len(conns) == 0 {
		return nil, fmt.Errorf("%w: no nodes", ErrInvalidArgument)
	}
	nodes := make([]*node, len(conns))
	seen := make(map[any]int, len(conns))
	for i, d := range conns {
		if isNil(d) {
			return nil, fmt.Errorf("%w: node %d is nil, or a Conn made of no client", ErrInvalidArgument, i)
		}
		t := d.Topology()
		name, marks := describe(i, d, t)
		cluster := t.Kind == driver.Cluster
		nodes[i] = &node{index: i, addr: name, seed: core.KeyHash(name), topo: t, conn: master.NewConn(d, cluster), inSlot: cluster}
		for _, m := range marks {
			if j, dup := seen[m.key]; dup && j != i {
				return nil, sameServer(nodes[j], nodes[i], m.server)
			}
			seen[m.key] = i
		}
	}
	ids, guardErrs, err := askServers(nodes, guard)
	if err != nil {
		return nil, err
	}
	if err := guardRightsMissing(nodes, guardErrs); err != nil {
		return nil, err
	}
	if !evicting {
		if err := evictionRisk(nodes, ids); err != nil {
			return nil, err
		}
	}
	owner := make(map[string]int)
	for i, n := range nodes {
		if n.topo.Kind == driver.Failover && len(ids[i]) == 1 && ids[i][0].addr != "" {
			// The best name there is for a master found through a
			// sentinel, though a failover may move it.
			n.addr = fmt.Sprintf("%s (%s when New ran)", n.addr, ids[i][0].addr)
		}
		for _, id := range ids[i] {
			if j, dup := owner[id.runID]; dup && j != i {
				return nil, sameServer(nodes[j], n, id.String())
			}
			owner[id.runID] = i
		}
	}
	return nodes, nil
}

func sameServer(a, b *node, server string) error {
	return fmt.Errorf("%w: nodes %d and %d are the same server (%s): %s and %s",
		ErrInvalidArgument, a.index, b.index, server, a.addr, b.addr)
}

// isNil reports whether d is nil, a typed nil pointer, or the zero value of
// its type (an adapter's Conn made of no client: goredis.Conn{}): each
// would panic on first use.
func isNil(d driver.Conn) bool {
	if d == nil {
		return true
	}
	v := reflect.ValueOf(d)
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return v.IsNil()
	}
	return v.IsZero()
}

// A mark is something two clients of one server can share without the
// network.
type mark struct {
	key    any    // comparable; equal for two clients of one server
	server string // that server, for the message
}

// describe returns the name node i goes by in messages, and its marks.
func describe(i int, d driver.Conn, t driver.Topology) (name string, marks []mark) {
	// The Conn itself, given twice; when its value (dynamic parts too) is
	// comparable: a map key must not panic.
	var self []mark
	if reflect.ValueOf(d).Comparable() {
		self = []mark{{d, "one client given twice"}}
	}
	switch t.Kind {
	case driver.Failover:
		return fmt.Sprintf("sentinel master node[%d]", i), self
	case driver.Cluster:
		if len(t.Addrs) == 0 { // its slots come from elsewhere (ClusterSlots)
			return fmt.Sprintf("cluster node[%d]", i), self
		}
		return "cluster " + strings.Join(t.Addrs, ","), append(addrMarks(t.Addrs...), self...)
	case driver.Ring:
		return "ring " + strings.Join(t.Addrs, ","), append(addrMarks(t.Addrs...), self...)
	}
	if len(t.Addrs) == 1 {
		if path, ok := strings.CutPrefix(t.Addrs[0], "unix:"); ok {
			return path, []mark{{t.Addrs[0], path}}
		}
		return t.Addrs[0], addrMarks(t.Addrs[0])
	}
	return fmt.Sprintf("node[%d]", i), self // cannot be told apart without the network, unless comparable
}

// addrMarks marks each TCP address, in the spelling canonicalAddr gives it.
func addrMarks(addrs ...string) []mark {
	marks := make([]mark, len(addrs))
	for i, a := range addrs {
		a = canonicalAddr(a)
		marks[i] = mark{"tcp:" + a, a}
	}
	return marks
}

// canonicalAddr folds the common spellings of one loopback address together,
// so that "localhost:6379" and ":6379" are recognised as "127.0.0.1:6379".
// Other names are compared as written: resolving them would need DNS in New.
func canonicalAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return strings.ToLower(addr)
	}
	host = strings.ToLower(host)
	if host == "" || host == "localhost" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// A serverID is one server a node said is behind it.
type serverID struct {
	runID  string // INFO server's run_id: a fresh random value each time a server starts
	addr   string // where it was reached; "" when unknown
	evicts string // its maxmemory-policy and maxmemory when it may evict keys; "" otherwise
}

func (id serverID) String() string {
	if id.addr == "" {
		return "run_id " + id.runID
	}
	return id.addr + ", run_id " + id.runID
}

// askServers asks every node, in parallel, for the servers behind it, and,
// with guard, whether its marker rights are missing (checkGuardRights), by
// node; it returns what came back within identityTimeout: nothing for a node that
// could not answer in time. A driver that panics makes it return an error
// matching ErrInvalidArgument. It does not wait for the late ones: their
// requests end with the cancelled context, or at the driver's own timeouts
// where it does not watch the context.
func askServers(nodes []*node, guard bool) (ids [][]serverID, guardErrs []error, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), identityTimeout)
	defer cancel()
	type answer struct {
		i        int
		ids      []serverID
		guardErr error
		panicked error
	}
	answers := make(chan answer, len(nodes))
	for i, n := range nodes {
		go func() {
			defer func() { // an adapter's panic fails New, never the process
				if r := recover(); r != nil {
					answers <- answer{i: i, panicked: fmt.Errorf("%w: node %d's driver panicked: %v", ErrInvalidArgument, i, r)}
				}
			}()
			a := answer{i: i, ids: serversBehind(ctx, n)}
			if guard {
				a.guardErr = checkGuardRights(ctx, n)
			}
			answers <- a
		}()
	}
	ids, guardErrs = make([][]serverID, len(nodes)), make([]error, len(nodes))
	for range nodes {
		select {
		case a := <-answers:
			if a.panicked != nil {
				return nil, nil, a.panicked
			}
			ids[a.i], guardErrs[a.i] = a.ids, a.guardErr
		case <-ctx.Done():
			return ids, guardErrs, nil
		}
	}
	return ids, guardErrs, nil
}

// serversBehind returns the masters behind n that answered INFO: each
// server its Topology's Servers visits (every master of a cluster, every
// shard of a ring), else the one server. An error leaves a server out: a
// node without INFO rights, or a server that does not implement INFO
// server, is not checked.
func serversBehind(ctx context.Context, n *node) []serverID {
	var mu sync.Mutex
	var ids []serverID
	_ = eachServer(ctx, n, func(ctx context.Context, addr string, server driver.Conn) {
		if id := serverInfo(ctx, server); id.runID != "" {
			id.addr = addr
			mu.Lock()
			ids = append(ids, id)
			mu.Unlock()
		}
	})
	return ids
}

// eachServer calls fn for each master behind n, in parallel or in turn
// (driver.Topology's Servers): n's conn itself, at its one address, when it
// names none.
func eachServer(ctx context.Context, n *node, fn func(ctx context.Context, addr string, server driver.Conn)) error {
	if n.topo.Servers != nil {
		return n.topo.Servers(ctx, fn)
	}
	var addr string
	if len(n.topo.Addrs) == 1 {
		addr = n.topo.Addrs[0]
	}
	fn(ctx, addr, n.conn.D)
	return nil
}

// serverInfo reads c's INFO (its default sections, server and memory among
// them, in one command that Redis 6 takes too): the run_id ("" when it has
// none or refused), and whether its maxmemory-policy may evict keys.
func serverInfo(ctx context.Context, d driver.Conn) serverID {
	info, err := d.Do(ctx, "info").Text()
	if err != nil {
		return serverID{}
	}
	var id serverID
	var maxmemory, policy string
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch k {
		case "run_id":
			id.runID = v
		case "maxmemory":
			maxmemory = v
		case "maxmemory_policy":
			policy = v
		}
	}
	if maxmemory != "" && maxmemory != "0" && policy != "" && policy != "noeviction" {
		id.evicts = fmt.Sprintf("maxmemory-policy %s with maxmemory %s", policy, maxmemory)
	}
	return id
}

// evictionRisk returns an error matching ErrEvictionPolicy naming the
// first master that may evict keys, or nil.
func evictionRisk(nodes []*node, ids [][]serverID) error {
	for i, n := range nodes {
		for _, id := range ids[i] {
			if id.evicts == "" {
				continue
			}
			return fmt.Errorf("%w: node %d (%s), master %s: %s: an evicted lock key is a lost vote nothing can see;"+
				" set maxmemory-policy noeviction (CONFIG SET maxmemory-policy noeviction), or accept the risk with WithEvictingMasters",
				ErrEvictionPolicy, i, n.addr, id, id.evicts)
		}
	}
	return nil
}
