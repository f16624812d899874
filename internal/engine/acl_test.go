package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/redistest"
	"github.com/redlock-go/redlock/internal/script"
)

// Redis 7 ACL users, on real masters. A user made with "~* +@all" has no
// channel rights (acl-pubsub-default resetchannels): the acquire script's
// PUBLISH failed after its SET ran, so no lock was ever obtained.

// The minimal rights, as the README states them: the lock keys (with their
// wanted keys and fence counters, lk:…:redlock-…), the restart guard's
// marker, the two script commands, and every command the scripts call; with
// notices, also their channels, PUBLISH (from the scripts) and the
// subscription commands.
var (
	aclWithoutNotices = []string{"~lk:*", "~redlock:memory", "+evalsha", "+eval", "+set", "+get", "+mget", "+del", "+pexpire", "+pttl", "+time"}
	aclWithNotices    = append(append([]string(nil), aclWithoutNotices...),
		"&redlock:notices:*", "+publish", "+subscribe", "+unsubscribe", "+ping")
)

// aclClients makes user with rules on every node and returns clients that
// log in as that user.
func (r *realNodes) aclClients(user string, rules ...string) []redis.UniversalClient {
	r.t.Helper()
	args := []any{"ACL", "SETUSER", user, "reset", "on", ">pw"}
	for _, rule := range rules {
		args = append(args, rule)
	}
	var out []redis.UniversalClient
	for i, a := range r.admin {
		if err := a.Do(bg, args...).Err(); err != nil {
			r.t.Fatalf("node %d: %v: %v", i, args, err)
		}
		c := r.servers[i].Client(&redis.Options{Username: user, Password: "pw"})
		out = append(out, c)
	}
	return out
}

// exerciseEveryCall runs TryLock, Extend, Unlock, a contended Lock, and Do
// through c, failing on any error; waitBound bounds the contended Lock's
// wait after the release.
func exerciseEveryCall(t *testing.T, c *Client, key string, waitBound time.Duration) {
	t.Helper()
	l, err := c.TryLock(bg, key, 10*time.Second)
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	if err := l.Extend(bg, 20*time.Second); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if err := l.Unlock(bg); err != nil {
		t.Fatalf("Unlock: %v", err)
	}

	holder, err := c.TryLock(bg, key, 10*time.Second)
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	ctx, cancel := context.WithTimeout(bg, scaled(20*time.Second))
	defer cancel()
	got := make(chan error, 1)
	go func() {
		l, err := c.Lock(ctx, key, 10*time.Second)
		if err == nil {
			err = l.Unlock(bg)
		}
		got <- err
	}()
	// Most often the waiter has made its first, failing attempt by now; if
	// not, it simply wins at once, which is no failure of the contract.
	time.Sleep(scaled(50 * time.Millisecond))
	released := time.Now()
	if err := holder.Unlock(bg); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	awaitLockWithin(t, got, waitBound, fmt.Sprintf("contended Lock did not get the lock within %v of its release", waitBound))
	t.Logf("contended Lock got the lock %v after the release", time.Since(released).Round(time.Millisecond))

	ran := false
	if err := c.Do(bg, key, 10*time.Second, func(context.Context) error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("Do: %v (fn ran: %v)", err, ran)
	}
}

// exerciseEveryCallAs runs exerciseEveryCall on a Client over nodes (an
// ACL user's clients) with a short backoff, and waits for its clean-up.
func exerciseEveryCallAs(t *testing.T, nodes []redis.UniversalClient, opts ...Option) {
	t.Helper()
	c, err := New(nodes, append(opts, WithRetryDelay(10*time.Millisecond, 50*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	exerciseEveryCall(t, c, "lk:a", scaled(2*time.Second))
	settle(c)
}

// refusedPublishes is how many PUBLISH calls the node refused for want of
// channel rights, from its ACL log.
func refusedPublishes(t *testing.T, admin *redis.Client) int64 {
	t.Helper()
	entries, err := admin.ACLLog(bg, 100).Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range entries {
		if e.Reason == "channel" {
			n += e.Count
		}
	}
	return n
}

func TestACLUserWithoutChannelRightsCanUseEveryCall(t *testing.T) {
	r := startReal(t, 5)
	exerciseEveryCallAs(t, r.aclClients("app", "~*", "+@all", "resetchannels"))
	for i, a := range r.admin {
		// Found out by the first scripts on each master, not paid for on
		// every call: the waiter's refused SUBSCRIBEs (the key's notice
		// channel, and its Client's hand-off channel: handedChannel), and
		// the first script that publishes, or two when they run at once
		// (the holder's release of the key the waiter marked, and the
		// waiter's announced acquisition: uncontended locks publish
		// nothing).
		if n := refusedPublishes(t, a); n < 1 || n > 4 {
			t.Errorf("node %d refused %d notices; want the first ones only", i, n)
		}
	}
}

func TestMinimalACLWithoutNotices(t *testing.T) {
	r := startReal(t, 5)
	exerciseEveryCallAs(t, r.aclClients("app", aclWithoutNotices...), WithoutNotices())
	for i, a := range r.admin {
		if n := refusedPublishes(t, a); n != 0 {
			t.Errorf("node %d was sent %d notices with notices off", i, n)
		}
		if n := commandCalls(t, a, "publish", "subscribe"); n != 0 {
			t.Errorf("node %d ran %d PUBLISH/SUBSCRIBE calls with notices off", i, n)
		}
	}
}

// With notices and the minimal rights that include them, a waiter of
// another Client wakes on the release notice, long before its backoff.
func TestMinimalACLWithNotices(t *testing.T) {
	r := startReal(t, 5)
	wokenByRelease(t, r.aclClients("app", aclWithNotices...), r.aclClients("app", aclWithNotices...), nil, func() {
		subscribed(t, r, "redlock:notices:lk:a")
	})
	for i, a := range r.admin {
		if n := refusedPublishes(t, a); n != 0 {
			t.Errorf("node %d refused %d notices under the minimal ACL with notices", i, n)
		}
	}
}

// subscribed waits until every node has a subscriber on channel.
func subscribed(t *testing.T, r *realNodes, channel string) {
	t.Helper()
	within(t, scaled(5*time.Second), "the subscriptions", func() bool {
		for {
			all := true
			for _, a := range r.admin {
				m, err := a.PubSubNumSub(bg, channel).Result()
				if err != nil || m[channel] == 0 {
					all = false
				}
			}
			if all {
				return true
			}
			time.Sleep(time.Millisecond) // no signal for another client's SUBSCRIBE
		}
	})
}

// The rights a lock needs are exactly the minimal ones: a user without one
// of the scripts' commands gets a clear per-node error, never a lock.
func TestACLWithoutAScriptCommandIsAnErrorNotALock(t *testing.T) {
	r := startReal(t, 5)
	rules := slices.DeleteFunc(slices.Clone(aclWithoutNotices), func(r string) bool { return r == "+pttl" })
	c, err := New(r.aclClients("app", rules...), WithoutNotices())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.TryLock(bg, "lk:a", 10*time.Second)
	if err != nil {
		t.Fatalf("TryLock needs no PTTL: %v", err)
	}
	err = l.Extend(bg, 20*time.Second)
	if !errors.Is(err, ErrNotObtained) || !strings.Contains(fmt.Sprint(err), "can't run this command") {
		t.Fatalf("Extend without +pttl = %v, want ErrNotObtained with the ACL error", err)
	}
	if err := l.Unlock(bg); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}

// Fence needs the counter keys (the lock keys' pattern covers them) and
// INCR, as the README says; without INCR it is a clear error, not a fence.
func TestMinimalACLForFence(t *testing.T) {
	r := startReal(t, 5)
	for _, tc := range []struct {
		name  string
		rules []string
		ok    bool
	}{
		{"with +incr", append(slices.Clone(aclWithoutNotices), "+incr"), true},
		{"without +incr", aclWithoutNotices, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(r.aclClients("app", tc.rules...), WithoutNotices())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			l, err := c.TryLock(bg, "lk:fenced", 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Unlock(bg) //nolint:errcheck // the test is about Fence
			f, err := l.Fence(bg)
			switch {
			case tc.ok && (err != nil || f == 0):
				t.Fatalf("Fence = %d, %v; want a fence", f, err)
			case !tc.ok && (!errors.Is(err, ErrNotObtained) || !strings.Contains(fmt.Sprint(err), "can't run this command")):
				t.Fatalf("Fence without +incr = %d, %v; want ErrNotObtained with the ACL error", f, err)
			}
		})
	}
}

// aclOnClusterVotes: on Redis Cluster votes, the library's keys share the
// lock key's slot ({lk:…}), notices use shard channels, and the cluster
// client reads the slot map (CLUSTER SLOTS) and the command table (COMMAND).
var aclOnClusterVotes = append(append([]string(nil), aclWithoutNotices...),
	"~{lk:*", "+incr", "+time", "&{*}redlock:notices:*", "+spublish", "+ssubscribe", "+sunsubscribe", "+ping",
	"+cluster|slots", "+command")

// TestMinimalACLOnClusterVotes: the README's rights for cluster votes take,
// fence and release locks, and carry notices: a waiter whose backoff is
// long is woken by the release.
func TestMinimalACLOnClusterVotes(t *testing.T) {
	var nodes, waiterNodes []redis.UniversalClient
	var clusters []*redistest.Cluster
	for range 3 {
		cl := redistest.StartCluster(t, 3)
		clusters = append(clusters, cl)
		args := []any{"ACL", "SETUSER", "app", "reset", "on", ">pw"}
		for _, rule := range aclOnClusterVotes {
			args = append(args, rule)
		}
		for _, m := range cl.Masters {
			a := m.Client(nil)
			if err := a.Do(bg, args...).Err(); err != nil {
				t.Fatalf("%v: %v", args, err)
			}
			_ = a.Close()
		}
		for _, to := range []*[]redis.UniversalClient{&nodes, &waiterNodes} {
			cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Username: "app", Password: "pw"})
			t.Cleanup(func() { _ = cc.Close() })
			*to = append(*to, cc)
		}
	}
	wokenByRelease(t, nodes, waiterNodes, func(l *Lock) {
		if _, err := l.Fence(bg); err != nil {
			t.Fatalf("Fence: %v", err)
		}
	}, func() {
		within(t, scaled(5*time.Second), "the waiter's subscriptions", func() bool {
			for v := range clusters {
				for shardSubscribers(t, clusters, v, redistest.ShardOf(script.HashSlot("lk:a"), 3), "lk:a") == 0 {
					time.Sleep(time.Millisecond) // no signal for another client's SSUBSCRIBE
				}
			}
			return true
		})
	})
}

// wokenByRelease takes "lk:a" through a Client on nodes (and runs with on
// the lock, when not nil), starts a Lock of it through a Client on
// waiterNodes whose backoff is long, waits until subscribed says the waiter
// listens, and fails unless the Unlock wakes the waiter long before its
// backoff.
func wokenByRelease(t *testing.T, nodes, waiterNodes []redis.UniversalClient, with func(*Lock), subscribed func()) {
	t.Helper()
	slow := WithRetryDelay(scaled(10*time.Second), scaled(10*time.Second))
	c, err := New(nodes, slow)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	holder, err := c.TryLock(bg, "lk:a", 10*time.Second)
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	if with != nil {
		with(holder)
	}
	w, err := New(waiterNodes, slow)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	got := make(chan error, 1)
	go func() {
		l, err := w.Lock(bg, "lk:a", 10*time.Second)
		if err == nil {
			err = l.Unlock(bg)
		}
		got <- err
	}()
	subscribed()
	if err := holder.Unlock(bg); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	awaitLock(t, got, "the waiter did not wake on the release notice") // its backoff is 10 s
}

// A user made with the minimal rule as it was before the release script
// read its two keys with MGET (no +mget) still has its locks released:
// the script falls back to two GETs (lua/release.lua). Its masters' ACL
// logs record the refused MGET; docs/operations.md's rule grants it.
func TestARuleWithoutMGETStillReleases(t *testing.T) {
	r := startReal(t, 5)
	rules := slices.DeleteFunc(slices.Clone(aclWithoutNotices), func(r string) bool { return r == "+mget" })
	c, err := New(r.aclClients("app", rules...), WithoutNotices())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 3 {
		l, err := c.TryLock(bg, "lk:a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(bg); err != nil {
			t.Fatalf("Unlock without +mget: %v", err)
		}
		settle(c)
		if n := r.count("lk:a", l.Token()); n != 0 {
			t.Fatalf("Unlock without +mget left the token on %d masters", n)
		}
	}
}
