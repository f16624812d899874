// Telling the masters apart in New: one server must never vote twice.

package engine

import (
	"context"
	"fmt"
	"maps"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/core"
	"github.com/redlock-go/redlock/internal/master"
)

// identityTimeout bounds New's questions to the nodes about the servers
// behind them. A node that has not answered by then is not checked: it may
// be down, and a Client must start with a minority of its nodes down.
const identityTimeout = time.Second

// failoverAddr is the Options().Addr go-redis gives every client made by
// NewFailoverClient, or by NewUniversalClient with a MasterName: a
// placeholder that names no server. go-redis keeps the master name and the
// sentinel addresses out of reach of such a *redis.Client.
const failoverAddr = "FailoverClient"

// newNodes checks the clients given to New and wraps them.
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
func newNodes(clients []redis.UniversalClient, guard, evicting bool) ([]*node, error) {
	if len(clients) == 0 {
		return nil, fmt.Errorf("%w: no nodes", ErrInvalidArgument)
	}
	nodes := make([]*node, len(clients))
	seen := make(map[any]int, len(clients))
	for i, c := range clients {
		if isNil(c) {
			return nil, fmt.Errorf("%w: node %d is nil", ErrInvalidArgument, i)
		}
		name, marks := describe(i, c)
		conn := master.GoRedis{C: c}
		nodes[i] = &node{index: i, addr: name, seed: core.KeyHash(name), client: c, conn: conn, inSlot: conn.Cluster()}
		for _, m := range marks {
			if j, dup := seen[m.key]; dup && j != i {
				return nil, sameServer(nodes[j], nodes[i], m.server)
			}
			seen[m.key] = i
		}
	}
	ids, guardErrs := askServers(nodes, guard)
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
		if isFailover(n.client) && len(ids[i]) == 1 && ids[i][0].addr != "" {
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

// isNil reports whether c is nil or a typed nil pointer, which would panic on
// first use.
func isNil(c redis.UniversalClient) bool {
	if c == nil {
		return true
	}
	v := reflect.ValueOf(c)
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return v.IsNil()
	}
	return false
}

// isFailover reports whether c finds its master through Redis Sentinel.
func isFailover(c redis.UniversalClient) bool {
	rc, ok := c.(*redis.Client)
	return ok && rc.Options().Addr == failoverAddr
}

// A mark is something two clients of one server can share without the
// network.
type mark struct {
	key    any    // comparable; equal for two clients of one server
	server string // that server, for the message
}

// describe returns the name node i goes by in messages, and its marks.
func describe(i int, c redis.UniversalClient) (name string, marks []mark) {
	switch c := c.(type) {
	case *redis.Client:
		o := c.Options()
		switch {
		case o.Addr == failoverAddr:
			return fmt.Sprintf("sentinel master node[%d]", i), []mark{{c, "one client given twice"}}
		case o.Network == "unix":
			return o.Addr, []mark{{"unix:" + o.Addr, o.Addr}}
		default:
			return o.Addr, addrMarks(o.Addr)
		}
	case *redis.ClusterClient:
		seeds := c.Options().Addrs
		marks = append(addrMarks(seeds...), mark{c, "one client given twice"})
		if len(seeds) == 0 { // its slots come from ClusterSlots
			return fmt.Sprintf("cluster node[%d]", i), marks
		}
		return "cluster " + strings.Join(seeds, ","), marks
	case *redis.Ring:
		shards := slices.Sorted(maps.Values(c.Options().Addrs))
		return "ring " + strings.Join(shards, ","), append(addrMarks(shards...), mark{c, "one client given twice"})
	}
	name = fmt.Sprintf("node[%d]", i)
	if reflect.TypeOf(c).Comparable() {
		return name, []mark{{c, "one client given twice"}}
	}
	return name, nil // cannot be told apart without the network
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
// could not answer in time. It does not wait for the late ones: their
// requests end with the cancelled context, or at the go-redis client's own
// timeouts where it does not watch the context.
func askServers(nodes []*node, guard bool) (ids [][]serverID, guardErrs []error) {
	ctx, cancel := context.WithTimeout(context.Background(), identityTimeout)
	defer cancel()
	type answer struct {
		i        int
		ids      []serverID
		guardErr error
	}
	answers := make(chan answer, len(nodes))
	for i, n := range nodes {
		go func() {
			a := answer{i: i, ids: serversBehind(ctx, n.client)}
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
			ids[a.i], guardErrs[a.i] = a.ids, a.guardErr
		case <-ctx.Done():
			return ids, guardErrs
		}
	}
	return ids, guardErrs
}

// serversBehind returns the masters behind c that answered INFO: every
// master of a cluster, every shard of a ring, else the one server. An error
// leaves a server out: a node without INFO rights, or a server that does
// not implement INFO server, is not checked.
func serversBehind(ctx context.Context, c redis.UniversalClient) []serverID {
	switch c := c.(type) {
	case *redis.ClusterClient:
		return eachServer(ctx, c.ForEachMaster)
	case *redis.Ring:
		return eachServer(ctx, c.ForEachShard)
	case *redis.Client:
		id := serverInfo(ctx, c)
		id.addr = c.Options().Addr
		if id.addr == failoverAddr {
			// Where the sentinel sent us, as the master saw it.
			id.addr = ""
			if ci, err := c.ClientInfo(ctx).Result(); err == nil {
				id.addr = ci.LAddr
			}
		}
		if id.runID == "" {
			return nil
		}
		return []serverID{id}
	}
	if id := serverInfo(ctx, c); id.runID != "" {
		return []serverID{id}
	}
	return nil
}

// eachServer collects the servers forEach visits (ForEachMaster,
// ForEachShard), keeping those that answered when others did not.
func eachServer(ctx context.Context, forEach func(context.Context, func(context.Context, *redis.Client) error) error) []serverID {
	var mu sync.Mutex
	var ids []serverID
	_ = forEach(ctx, func(ctx context.Context, c *redis.Client) error {
		if id := serverInfo(ctx, c); id.runID != "" {
			id.addr = c.Options().Addr
			mu.Lock()
			ids = append(ids, id)
			mu.Unlock()
		}
		return nil
	})
	return ids
}

// serverInfo reads c's INFO (its default sections, server and memory among
// them, in one command that Redis 6 takes too): the run_id ("" when it has
// none or refused), and whether its maxmemory-policy may evict keys.
func serverInfo(ctx context.Context, c redis.Cmdable) serverID {
	info, err := c.Info(ctx).Result()
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
