package engine

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/redistest"
)

// sentinelMasters starts n independent masters and one sentinel that
// monitors them as m0, m1, ….
func sentinelMasters(t *testing.T, n int) ([]*redistest.Server, *redistest.Sentinel) {
	t.Helper()
	masters := redistest.StartN(t, n)
	sentinel := redistest.StartSentinel(t)
	for i, m := range masters {
		sentinel.Monitor(fmt.Sprintf("m%d", i), m)
	}
	return masters, sentinel
}

// failoverClient returns a client of the master the sentinel knows as name;
// it is closed when the test ends.
func failoverClient(t *testing.T, sentinel *redistest.Sentinel, name string) *redis.Client {
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: name, SentinelAddrs: []string{sentinel.Addr}})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// checkLockAndUnlock takes and releases a lock through c, and looks on every
// master that it was there and is gone.
func checkLockAndUnlock(t *testing.T, c *Client, masters []*redistest.Server) {
	t.Helper()
	l := mustLock(t, c, "k", time.Minute)
	for i, m := range masters {
		if v, err := m.Client(nil).Get(bg, "k").Result(); err != nil || v != l.Token() {
			t.Fatalf("master %d holds %q (%v), want the lock's token", i, v, err)
		}
	}
	if err := l.Unlock(bg); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	settle(c) // Unlock returns at a majority; the last release may be in flight
	for i, m := range masters {
		if n, err := m.Client(nil).Exists(bg, "k").Result(); err != nil || n != 0 {
			t.Fatalf("master %d still holds the key after Unlock (%v)", i, err)
		}
	}
}

// checkSentinelNames checks that each node, a failover client of master i,
// goes by a name that says so and where that master was.
func checkSentinelNames(t *testing.T, c *Client, masters []*redistest.Server) {
	t.Helper()
	for i, n := range c.nodes {
		want := fmt.Sprintf("sentinel master node[%d] (%s when New ran)", i, masters[i].Addr)
		if n.addr != want {
			t.Errorf("node %d is named %q, want %q", i, n.addr, want)
		}
	}
}

func TestNewAcceptsSentinelManagedMasters(t *testing.T) {
	masters, sentinel := sentinelMasters(t, 3)
	nodes := make([]redis.UniversalClient, len(masters))
	for i := range masters {
		nodes[i] = failoverClient(t, sentinel, fmt.Sprintf("m%d", i))
	}
	c, err := New(nodes)
	if err != nil {
		t.Fatalf("New over three sentinel-managed masters: %v", err)
	}
	defer c.Close()
	checkSentinelNames(t, c, masters)
	checkLockAndUnlock(t, c, masters)
}

func TestNewAcceptsUniversalClientsWithMasterName(t *testing.T) {
	masters, sentinel := sentinelMasters(t, 3)
	nodes := make([]redis.UniversalClient, len(masters))
	for i := range masters {
		u := redis.NewUniversalClient(&redis.UniversalOptions{MasterName: fmt.Sprintf("m%d", i), Addrs: []string{sentinel.Addr}})
		t.Cleanup(func() { _ = u.Close() })
		nodes[i] = u
	}
	c, err := New(nodes)
	if err != nil {
		t.Fatalf("New over three universal clients with MasterName: %v", err)
	}
	defer c.Close()
	checkSentinelNames(t, c, masters)
	checkLockAndUnlock(t, c, masters)
}

func TestNewRefusesTheSameServerBehindTwoClientKinds(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	m0, m1 := cluster.Masters[0].Addr, cluster.Masters[1].Addr
	masters, sentinel := sentinelMasters(t, 1)
	master := masters[0]
	_, port, _ := strings.Cut(master.Addr, ":")
	localhost := redis.NewClient(&redis.Options{Addr: "localhost:" + port})
	t.Cleanup(func() { _ = localhost.Close() })
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": master.Addr}})
	t.Cleanup(func() { _ = ring.Close() })

	for _, tc := range []struct {
		name  string
		nodes []redis.UniversalClient
		names [2]string // what the error must call each node
	}{
		{"failover client and a plain client to its master",
			[]redis.UniversalClient{failoverClient(t, sentinel, "m0"), master.Client(nil)},
			[2]string{"sentinel master node[0] (" + master.Addr + " when New ran)", master.Addr}},
		{"two cluster clients of one cluster",
			[]redis.UniversalClient{cluster.Client(m0), cluster.Client(m1)},
			[2]string{"cluster " + m0, "cluster " + m1}},
		{"cluster client and a plain client to a master it was not seeded with",
			[]redis.UniversalClient{cluster.Client(m0), cluster.Masters[1].Client(nil)},
			[2]string{"cluster " + m0, m1}},
		{"cluster client and a plain client to its seed",
			[]redis.UniversalClient{cluster.Client(m0, m1), cluster.Masters[1].Client(nil)},
			[2]string{"cluster " + m0 + "," + m1, m1}},
		{"ring and a failover client to one of its shards",
			[]redis.UniversalClient{ring, failoverClient(t, sentinel, "m0")},
			[2]string{"ring " + master.Addr, "sentinel master node[1] (" + master.Addr + " when New ran)"}},
		{"localhost and 127.0.0.1",
			[]redis.UniversalClient{localhost, master.Client(nil)},
			[2]string{"localhost:" + port, master.Addr}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(tc.nodes)
			if err == nil {
				_ = c.Close()
				t.Fatal("New accepted one server twice; want ErrInvalidArgument")
			}
			if c != nil || !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("New = %v; want nil, ErrInvalidArgument", err)
			}
			// The server itself is named between them, by address or run_id.
			prefix, suffix := "nodes 0 and 1 are the same server (", "): "+tc.names[0]+" and "+tc.names[1]
			if msg := err.Error(); !strings.Contains(msg, prefix) || !strings.HasSuffix(msg, suffix) {
				t.Fatalf("error %q does not say %q…%q", err, prefix, suffix)
			}
		})
	}
}

// TestNewDoesNotWaitForNodesItCannotAsk: a node with nothing listening and a
// hung one are not checked; New neither fails nor waits past its deadline
// for them (go-redis alone would wait 3 s on the hung one).
func TestNewDoesNotWaitForNodesItCannotAsk(t *testing.T) {
	servers := redistest.StartN(t, 3)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nothing := l.Addr().String()
	_ = l.Close()
	down := redis.NewClient(&redis.Options{Addr: nothing})
	t.Cleanup(func() { _ = down.Close() })

	for _, tc := range []struct {
		name  string
		fault func()
		nodes []redis.UniversalClient
	}{
		{"nothing listening", func() {}, []redis.UniversalClient{servers[0].Client(nil), servers[1].Client(nil), down}},
		{"hung", servers[2].Pause, []redis.UniversalClient{servers[0].Client(nil), servers[1].Client(nil), servers[2].Client(nil)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.fault()
			defer servers[2].Resume()
			start := time.Now()
			c, err := New(tc.nodes)
			elapsed := time.Since(start)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			defer c.Close()
			if limit := identityTimeout + scaled(250*time.Millisecond); elapsed > limit {
				t.Fatalf("New took %v, over its deadline %v", elapsed, limit)
			}
		})
	}
}

// TestNewDoesNotCheckANodeThatRefusesINFO: a node whose ACL user may not run
// INFO is not checked, and New still succeeds.
func TestNewDoesNotCheckANodeThatRefusesINFO(t *testing.T) {
	servers := redistest.StartN(t, 3)
	admin := servers[0].Client(nil)
	if err := admin.Do(bg, "ACL", "SETUSER", "locker", "on", ">secret", "~*", "&*", "+@all", "-info").Err(); err != nil {
		t.Fatal(err)
	}
	locker := servers[0].Client(&redis.Options{Username: "locker", Password: "secret"})
	if err := locker.Info(bg, "server").Err(); err == nil {
		t.Fatal("the ACL user may run INFO; the test proves nothing")
	}
	c, err := New([]redis.UniversalClient{locker, servers[1].Client(nil), servers[2].Client(nil)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer c.Close()
	checkLockAndUnlock(t, c, servers)
}

// New refuses a master whose maxmemory-policy may evict a lock key (an
// evicted key is a lost vote the restart guard's marker, without a TTL,
// cannot show), names it, and accepts it with
// WithEvictingMasters; without maxmemory, or with noeviction, nothing is
// evicted and New accepts the master.
func TestNewRefusesMastersThatMayEvict(t *testing.T) {
	r := startReal(t, 3)
	set := func(maxmemory, policy string) {
		t.Helper()
		for k, v := range map[string]string{"maxmemory": maxmemory, "maxmemory-policy": policy} {
			if err := r.admin[2].ConfigSet(bg, k, v).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		maxmemory, policy string
		refused           bool
	}{
		{"100mb", "volatile-ttl", true},
		{"100mb", "allkeys-lru", true},
		{"0", "volatile-lru", false},
		{"100mb", "noeviction", false},
	} {
		set(tc.maxmemory, tc.policy)
		c, err := New(r.clients)
		if c != nil {
			_ = c.Close()
		}
		if tc.refused != errors.Is(err, ErrEvictionPolicy) {
			t.Fatalf("maxmemory %s, %s: New = %v; refused by ErrEvictionPolicy: want %v", tc.maxmemory, tc.policy, err, tc.refused)
		}
		if tc.refused && (!strings.Contains(err.Error(), tc.policy) || !strings.Contains(err.Error(), "node 2")) {
			t.Fatalf("New = %v; want it to name node 2 and its policy", err)
		}
		if !tc.refused {
			continue
		}
		c, err = New(r.clients, WithEvictingMasters())
		if err != nil {
			t.Fatalf("maxmemory %s, %s, WithEvictingMasters: New = %v", tc.maxmemory, tc.policy, err)
		}
		_ = c.Close()
	}
	// A user without INFO cannot be told: New does not check, and does not fail.
	set("100mb", "volatile-ttl")
	c, err := New(r.aclClients("noinfo", "~*", "+@all", "-info", "&*"))
	if err != nil {
		t.Fatalf("a user without INFO: New = %v; want the master unchecked", err)
	}
	_ = c.Close()
}
