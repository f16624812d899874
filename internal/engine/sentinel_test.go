package engine

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/redistest"
)

// A sentinel-managed vote: a master, its replica, and a sentinel watching
// them under name.
type sentinelVote struct {
	name            string
	master, replica *redistest.Server
	sentinel        *redistest.Sentinel
}

// sentinelVotes starts n votes, each a master with one replica, all watched
// by one sentinel, and waits until the sentinel knows every replica (a
// forced failover needs one).
func sentinelVotes(t *testing.T, n int) []sentinelVote {
	t.Helper()
	sentinel := redistest.StartSentinel(t)
	votes := make([]sentinelVote, n)
	for i := range votes {
		m := redistest.Start(t)
		host, port, _ := net.SplitHostPort(m.Addr)
		r := redistest.Start(t, "--replicaof", host, port)
		votes[i] = sentinelVote{name: fmt.Sprintf("v%d", i), master: m, replica: r, sentinel: sentinel}
		sentinel.Monitor(votes[i].name, m)
	}
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = sc.Close() })
	for _, v := range votes {
		for bound := time.Now().Add(scaled(30 * time.Second)); ; time.Sleep(50 * time.Millisecond) {
			replicas, err := sc.Replicas(bg, v.name).Result()
			if err == nil && len(replicas) == 1 {
				break
			}
			if time.Now().After(bound) {
				t.Fatalf("the sentinel does not know %s's replica: %v %v", v.name, replicas, err)
			}
		}
	}
	return votes
}

// failover forces the sentinel to promote v's replica, and waits until the
// sentinel names it as v's master.
func (v sentinelVote) failover(t *testing.T) {
	t.Helper()
	sc := redis.NewSentinelClient(&redis.Options{Addr: v.sentinel.Addr, MaxRetries: -1})
	defer sc.Close()
	// The replica must be in sync for the test's purpose: what the master
	// acknowledged is on the replica (WAIT), as when a failover goes well.
	if n, err := v.master.Client(nil).Do(bg, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT on %s's master: %d replicas, %v", v.name, n, err)
	}
	for bound := time.Now().Add(scaled(30 * time.Second)); ; time.Sleep(100 * time.Millisecond) {
		err := sc.Failover(bg, v.name).Err()
		if err == nil {
			break
		}
		if time.Now().After(bound) {
			t.Fatalf("SENTINEL FAILOVER %s: %v", v.name, err)
		}
	}
	for bound := time.Now().Add(scaled(30 * time.Second)); ; time.Sleep(50 * time.Millisecond) {
		addr, err := sc.GetMasterAddrByName(bg, v.name).Result()
		if err == nil && len(addr) == 2 && net.JoinHostPort(addr[0], addr[1]) == v.replica.Addr {
			return
		}
		if time.Now().After(bound) {
			t.Fatalf("the sentinel still names %v (%v) as %s's master after the failover", addr, err, v.name)
		}
	}
}

// Votes that are sentinel-managed masters keep a lock through a failover
// of one of them: the promoted replica holds the key, and Extend, Inspect
// and Unlock reach it through the failover client.
func TestSentinelVotesKeepALockThroughAFailover(t *testing.T) {
	votes := sentinelVotes(t, 3)
	nodes := make([]redis.UniversalClient, len(votes))
	for i, v := range votes {
		nodes[i] = failoverClient(t, v.sentinel, v.name)
	}
	c, err := New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l := mustLock(t, c, "k", time.Minute)

	votes[0].failover(t)
	if v, err := votes[0].replica.Client(nil).Get(bg, "k").Result(); err != nil || v != l.Token() {
		t.Fatalf("the promoted replica holds %q (%v), want the lock's token", v, err)
	}
	// The failover client moves to the new master on its own, when the
	// sentinel announces the switch. Until then it still talks to the old
	// master: while the sentinel has not yet demoted it, that master still
	// accepts writes, which the promoted replica never sees (the README's
	// Sentinel caveat); once demoted, its writes fail (READONLY), and the
	// other two votes carry the lock.
	if err := l.Extend(bg, time.Minute); err != nil {
		t.Fatalf("Extend right after the failover: %v", err)
	}
	for bound := time.Now().Add(scaled(30 * time.Second)); ; time.Sleep(50 * time.Millisecond) {
		// Not ROLE: the old master says "master" until the sentinel
		// reconfigures it. The server's own address says where we are.
		info, err := nodes[0].Do(bg, "CLIENT", "INFO").Text()
		if err == nil && strings.Contains(info, " laddr="+votes[0].replica.Addr+" ") {
			break
		}
		if time.Now().After(bound) {
			t.Fatalf("the failover client still talks to %q (%v), not the promoted replica %s", info, err, votes[0].replica.Addr)
		}
	}
	if err := l.Extend(bg, 2*time.Minute); err != nil {
		t.Fatalf("Extend after the failover client moved: %v", err)
	}
	if in, err := c.Inspect(bg, "k"); err != nil || in.HoldingFor(l.Token()) != 3 || in.MinTTL < time.Minute {
		t.Fatalf("after the failover, Inspect = %+v, %v; want the lock on all three votes, extended", in, err)
	}
	ctx, cancel := context.WithTimeout(bg, scaled(10*time.Second))
	defer cancel()
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock after the failover: %v", err)
	}
	settle(c)
	if n, err := votes[0].replica.Client(nil).Exists(bg, "k").Result(); err != nil || n != 0 {
		t.Fatalf("the promoted master still holds the key after Unlock (%v)", err)
	}
	if _, err := c.TryLock(bg, "k", time.Minute); err != nil {
		t.Fatalf("TryLock after the failover and Unlock: %v", err)
	}
}
