// A Redis Cluster of real redis-server processes, masters only.

package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Cluster is a Redis Cluster of masters only (no replicas), each owning an
// equal share of the 16384 slots.
type Cluster struct {
	Masters []*Server
	t       testing.TB
}

// StartCluster starts n masters with cluster mode on, gives each its slots,
// joins them, and returns once every master sees a healthy cluster of n.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{t: t}
	buses := make([]string, n)
	for i := range n {
		// The bus port defaults to port+10000, which may be taken or out
		// of range for a free port picked at random.
		bus, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		buses[i] = strconv.Itoa(bus)
		c.Masters = append(c.Masters, Start(t, "--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", "--cluster-port", buses[i]))
	}
	admins := make([]*redis.Client, n)
	for i, s := range c.Masters {
		admins[i] = s.Client(&redis.Options{MaxRetries: -1})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const slots = 16384
	for i, a := range admins {
		first, last := i*slots/n, (i+1)*slots/n-1
		if err := a.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", first, last).Err(); err != nil {
			t.Fatalf("redistest: CLUSTER ADDSLOTSRANGE on %s: %v", c.Masters[i].Addr, err)
		}
	}
	host, port, _ := strings.Cut(c.Masters[0].Addr, ":")
	for i, a := range admins[1:] {
		if err := a.Do(ctx, "CLUSTER", "MEET", host, port, buses[0]).Err(); err != nil {
			t.Fatalf("redistest: CLUSTER MEET on %s: %v", c.Masters[i+1].Addr, err)
		}
	}
	for i, a := range admins {
		if err := awaitClusterOK(ctx, a, n); err != nil {
			t.Fatalf("redistest: cluster master %s: %v", c.Masters[i].Addr, err)
		}
	}
	return c
}

// awaitClusterOK polls a until it reports cluster_state:ok with n known
// nodes; the gossip that gets it there sends no signal to wait on.
func awaitClusterOK(ctx context.Context, a *redis.Client, n int) error {
	want := fmt.Sprintf("cluster_known_nodes:%d", n)
	for {
		info, err := a.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, want) {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("CLUSTER INFO: %w", err)
			}
			return fmt.Errorf("no cluster_state:ok with %s: %q", want, info)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Addrs returns the masters' addresses.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Masters))
	for i, s := range c.Masters {
		addrs[i] = s.Addr
	}
	return addrs
}

// Client returns a go-redis cluster client seeded with the given addresses
// (all masters' when none are given). It is closed when the test ends.
func (c *Cluster) Client(seeds ...string) *redis.ClusterClient {
	if len(seeds) == 0 {
		seeds = c.Addrs()
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: seeds})
	c.t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// MigrateSlot moves slot, with its keys, from the master that serves it to
// master to (an index into Masters), the way redis-cli --cluster reshard
// does: IMPORTING on the target, MIGRATING on the source, MIGRATE of every
// key, then SETSLOT NODE on both. Clients follow the MOVED and ASK
// redirections meanwhile.
func (c *Cluster) MigrateSlot(slot int, to int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	admins := make([]*redis.Client, len(c.Masters))
	ids := make([]string, len(c.Masters))
	from := -1
	for i, s := range c.Masters {
		admins[i] = s.Client(&redis.Options{MaxRetries: -1})
		defer admins[i].Close()
		id, err := admins[i].Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			c.t.Fatalf("redistest: CLUSTER MYID on %s: %v", s.Addr, err)
		}
		ids[i] = id
	}
	for i := range c.Masters {
		first, last := i*16384/len(c.Masters), (i+1)*16384/len(c.Masters)-1
		if slot >= first && slot <= last {
			from = i
		}
	}
	if from < 0 || from == to {
		c.t.Fatalf("redistest: slot %d is on master %d; cannot move it to %d", slot, from, to)
	}
	must := func(a *redis.Client, args ...any) {
		if err := a.Do(ctx, args...).Err(); err != nil {
			c.t.Fatalf("redistest: %v: %v", args, err)
		}
	}
	must(admins[to], "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[from])
	must(admins[from], "CLUSTER", "SETSLOT", slot, "MIGRATING", ids[to])
	host, port, _ := strings.Cut(c.Masters[to].Addr, ":")
	for {
		keys, err := admins[from].ClusterGetKeysInSlot(ctx, slot, 100).Result()
		if err != nil {
			c.t.Fatalf("redistest: CLUSTER GETKEYSINSLOT: %v", err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		must(admins[from], args...)
	}
	must(admins[to], "CLUSTER", "SETSLOT", slot, "NODE", ids[to])
	must(admins[from], "CLUSTER", "SETSLOT", slot, "NODE", ids[to])
	for i, a := range admins {
		if i != from && i != to {
			must(a, "CLUSTER", "SETSLOT", slot, "NODE", ids[to])
		}
	}
}

// ShardOf is which of shards equal slot ranges (StartCluster's) serves
// slot.
func ShardOf(slot, shards int) int {
	for i := range shards {
		if slot <= (i+1)*16384/shards-1 {
			return i
		}
	}
	return shards - 1
}
