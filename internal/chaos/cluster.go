// Package chaos is the fault-injection harness of redlock's fault suite
// (chaos_test.go at the module root): real redis-server masters, each behind
// an in-process TCP proxy, with faults a test can switch on and off — kill,
// restart with or without persistence, SIGSTOP, black-holed requests, lost
// replies, added latency, connection resets and a forward jump of one node's
// clock — and the History that proves no two holders' validity windows
// overlapped.
//
// Network faults go through our own small proxy (Proxy, proxy.go), since
// tc/iptables are not available on the machines that run the suite. It
// replaced Toxiproxy, which pulled its server's dependencies (Prometheus,
// zerolog, gorilla/mux, protobuf) into the module graph of every program
// that imports the library, and which could deadlock removing a toxic from a
// busy connection. Ours uses the standard library only, applies its faults
// to connections already open as to new ones, heals without ever waiting on
// a connection, and leaves no goroutine behind once stopped.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/redistest"
)

// Where Debian puts the libraries of the clock-jump fault. Redis's jemalloc
// deadlocks under libfaketime alone; tcmalloc preloaded first avoids it.
const (
	libTCMalloc = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"
	libFaketime = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
)

// A Cluster is n independent masters behind proxies.
type Cluster struct {
	Nodes []*Node
	t     testing.TB
}

// A Node is one master: the redis-server process, the proxy clients talk
// through, and an admin client that bypasses the proxy.
type Node struct {
	Index  int
	Server *redistest.Server
	Admin  *redis.Client // straight to the server, never faulted, no retries

	// reader is Lease's own client: reads of a node that is down fill a
	// go-redis pool with dial errors, after which it fails every command
	// for up to a second, and Admin must work right after a restart.
	reader *redis.Client

	proxy *Proxy // the clients' way to the server, where network faults happen

	clockFile string // libfaketime's timestamp file; "" when the clock is real
	mu        sync.Mutex
	faults    map[string]bool // the network faults on since the last Heal
	aof       bool            // running with appendfsync always since the last restart
	oom       bool            // OutOfMemory is in force
	revoked   map[string]bool // users whose channel rights RevokeChannels removed
}

// Options configure a Cluster.
type Options struct {
	// ClockNode is the index of the node whose clock JumpClock may move
	// (started under libfaketime when it is installed); -1 for none.
	ClockNode int
	// Users are ACL users every node starts with and keeps across
	// restarts, each a redis.conf user rule without the word "user", such
	// as "app on >secret ~* +@all &*". The default user stays as it is,
	// and Admin connects as it.
	Users []string
}

// Start starts n masters, each behind its own proxy. Everything stops when
// the test ends.
func Start(t testing.TB, n int, opt Options) *Cluster {
	t.Helper()
	c := &Cluster{t: t}
	var users []string // as redis-server arguments; restarts keep them
	for _, u := range opt.Users {
		users = append(append(users, "--user"), strings.Fields(u)...)
	}
	for i := 0; i < n; i++ {
		node := &Node{Index: i}
		var env []string
		if i == opt.ClockNode && FaketimeAvailable() {
			node.clockFile = filepath.Join(t.TempDir(), "faketime")
			if err := os.WriteFile(node.clockFile, []byte("+0\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			env = []string{
				"LD_PRELOAD=" + libTCMalloc + ":" + libFaketime,
				"FAKETIME_TIMESTAMP_FILE=" + node.clockFile,
				"FAKETIME_NO_CACHE=1",
				"FAKETIME_DONT_FAKE_MONOTONIC=1",
			}
		}
		node.Server = redistest.StartEnv(t, env, users...)
		// ContextTimeoutEnabled: a read of a SIGSTOPped node ends with its
		// ctx instead of go-redis's 3 s read timeout.
		node.Admin = node.Server.Client(&redis.Options{MaxRetries: -1, ContextTimeoutEnabled: true})
		node.reader = node.Server.Client(&redis.Options{MaxRetries: -1, ContextTimeoutEnabled: true})
		p, err := NewProxy("127.0.0.1:0", node.Server.Addr)
		if err != nil {
			t.Fatalf("chaos: proxy for node %d: %v", i, err)
		}
		t.Cleanup(p.Stop)
		node.proxy = p
		c.Nodes = append(c.Nodes, node)
	}
	return c
}

// FaketimeAvailable reports whether the clock-jump libraries are installed
// (Debian packages libfaketime and libtcmalloc-minimal4) and not turned off
// with REDLOCK_CHAOS_NO_FAKETIME=1, which selects the TTL-shaving fallback.
func FaketimeAvailable() bool {
	if os.Getenv("REDLOCK_CHAOS_NO_FAKETIME") == "1" {
		return false
	}
	for _, f := range []string{libTCMalloc, libFaketime} {
		if _, err := os.Stat(f); err != nil {
			return false
		}
	}
	return true
}

// Clients returns one go-redis client per node, through the proxies, with
// go-redis's default options (3 s read timeout, 3 retries that re-send a
// command after a network error) unless opt says otherwise.
func (c *Cluster) Clients(opt *redis.Options) []redis.UniversalClient {
	cs := make([]redis.UniversalClient, len(c.Nodes))
	for i, n := range c.Nodes {
		o := redis.Options{}
		if opt != nil {
			o = *opt
		}
		o.Addr = n.ProxyAddr()
		rc := redis.NewClient(&o)
		c.t.Cleanup(func() { _ = rc.Close() })
		cs[i] = rc
	}
	return cs
}

// Heal removes every network fault, resumes every paused node, and undoes
// OutOfMemory and RevokeChannels.
func (c *Cluster) Heal() {
	for _, n := range c.Nodes {
		n.Heal()
		n.Server.Resume()
		n.restoreConfig()
	}
}

// Reset returns the cluster to its initial state between scenarios: faults
// healed, every node running without persistence and with its real clock,
// and no keys.
func (c *Cluster) Reset(t testing.TB) {
	t.Helper()
	c.Heal()
	for _, n := range c.Nodes {
		if n.Server.Stopped() || n.aof {
			n.Server.Kill()
			if err := n.Server.WipeData(); err != nil {
				t.Fatal(err)
			}
			n.Server.Restart()
			n.aof = false
		}
		if n.clockFile != "" {
			n.setClock("+0")
		}
		if err := n.Admin.FlushAll(context.Background()).Err(); err != nil {
			t.Fatalf("chaos: FLUSHALL on node %d: %v", n.Index, err)
		}
	}
}

// Keys returns how many keys each node holds, apart from the library's own
// bookkeeping: the memory marker of the restart guard and the fence
// counters, which outlive every lock by design.
func (c *Cluster) Keys(t testing.TB) []int64 {
	t.Helper()
	out := make([]int64, len(c.Nodes))
	for i, n := range c.Nodes {
		keys, err := n.Admin.Keys(context.Background(), "*").Result()
		if err != nil {
			t.Fatalf("chaos: KEYS on node %d: %v", i, err)
		}
		for _, k := range keys {
			if !Bookkeeping(k) {
				out[i]++
			}
		}
	}
	return out
}

// Bookkeeping reports whether key is one the library keeps beside the
// locks: the restart guard's memory marker or a fence counter.
func Bookkeeping(key string) bool {
	return key == "redlock:memory" || strings.HasSuffix(key, ":redlock-memory") || strings.HasSuffix(key, ":redlock-fence")
}

// Values returns the value key holds on every node, "" where absent: a
// lock key holds nothing or exactly its holder's token (lua/token.lua).
func (c *Cluster) Values(t testing.TB, key string) []string {
	t.Helper()
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		v, err := n.Admin.Get(context.Background(), key).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("chaos: GET on node %d: %v", i, err)
		}
		out[i] = v
	}
	return out
}

// PTTLs returns key's remaining time to live on every node (negative where
// the key is absent or has no expiry, as Redis reports it).
func (c *Cluster) PTTLs(t testing.TB, key string) []time.Duration {
	t.Helper()
	out := make([]time.Duration, len(c.Nodes))
	for i, n := range c.Nodes {
		d, err := n.Admin.PTTL(context.Background(), key).Result()
		if err != nil {
			t.Fatalf("chaos: PTTL on node %d: %v", i, err)
		}
		out[i] = d
	}
	return out
}

// Lease reads the value key holds (as Values) and its remaining time to live on the node, in one
// MULTI/EXEC straight to the server (no proxy, so no network fault), within
// ctx. at is when the reply arrived: the key lives until at most at + ttl
// (+1 ms for PTTL's rounding). A missing key reads as "" with a negative
// ttl.
func (n *Node) Lease(ctx context.Context, key string) (value string, ttl time.Duration, at time.Time, err error) {
	var get *redis.StringCmd
	var pttl *redis.DurationCmd
	_, err = n.reader.TxPipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, key)
		pttl = p.PTTL(ctx, key)
		return nil
	})
	at = time.Now()
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", 0, at, err
	}
	value, err = get.Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", 0, at, err
	}
	ttl, err = pttl.Result()
	return value, ttl, at, err
}

// Sample returns the string values of the keys that match pattern on the
// node, straight from the server (no proxy) within ctx, through Lease's
// reader: never Admin, whose pool a node that is down would fill with dial
// errors. A key that expires between the two reads is left out.
func (n *Node) Sample(ctx context.Context, pattern string) (map[string]string, error) {
	keys, err := n.reader.Keys(ctx, pattern).Result()
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		if v, err := n.reader.Get(ctx, k).Result(); err == nil {
			out[k] = v
		}
	}
	return out, nil
}

// KeyTTLs returns, for every node, the remaining time to live of each key
// that matches pattern (negative for a key without expiry, as PTTL says).
func (c *Cluster) KeyTTLs(t testing.TB, pattern string) []map[string]time.Duration {
	t.Helper()
	ctx := context.Background()
	out := make([]map[string]time.Duration, len(c.Nodes))
	for i, n := range c.Nodes {
		keys, err := n.Admin.Keys(ctx, pattern).Result()
		if err != nil {
			t.Fatalf("chaos: KEYS on node %d: %v", i, err)
		}
		out[i] = map[string]time.Duration{}
		for _, k := range keys {
			d, err := n.Admin.PTTL(ctx, k).Result()
			if err != nil {
				t.Fatalf("chaos: PTTL on node %d: %v", i, err)
			}
			if d != -2*time.Nanosecond { // expired since KEYS
				out[i][k] = d
			}
		}
	}
	return out
}

// logTail is the end of the node's redis.log, for an error message.
func (n *Node) logTail() string {
	b, err := os.ReadFile(filepath.Join(n.Server.Dir, "redis.log"))
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return "\nredis.log:\n" + strings.Join(lines[max(0, len(lines)-15):], "\n")
}

// ClientConns returns the connections to the nodes' proxies that are
// established from this process's side, each named by its local address as
// /proc/net/tcp spells it (Linux); ok is false where it cannot be read.
// Once every client opened after a snapshot is closed, no connection may be
// in a later snapshot that was not in the first: a client connection left
// open is the client's leak. Connections of clients opened earlier, such as
// a suite's shared clients idle in their pools, are in both.
func (c *Cluster) ClientConns() (conns map[string]bool, ok bool) {
	ports := map[string]bool{}
	for _, nd := range c.Nodes {
		_, port, err := net.SplitHostPort(nd.ProxyAddr())
		if err != nil {
			return nil, false
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, false
		}
		ports[fmt.Sprintf("%04X", p)] = true
	}
	b, err := os.ReadFile("/proc/self/net/tcp")
	if err != nil {
		return nil, false
	}
	conns = map[string]bool{}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		// sl local_address rem_address st …; 01 is ESTABLISHED.
		if len(f) < 4 || f[3] != "01" {
			continue
		}
		if _, rport, found := strings.Cut(f[2], ":"); found && ports[rport] {
			conns[f[1]] = true
		}
	}
	return conns, true
}

// NewConns returns how many of ClientConns are not in before.
func (c *Cluster) NewConns(before map[string]bool) (n int, ok bool) {
	now, ok := c.ClientConns()
	for conn := range now {
		if !before[conn] {
			n++
		}
	}
	return n, ok
}
