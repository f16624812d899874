package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/redistest"
	"github.com/redlock-go/redlock/internal/script"
)

// clusterVotes starts n votes, each a Redis Cluster of shards masters, and
// returns a cluster client per vote.
func clusterVotes(t *testing.T, n, shards int) ([]*redistest.Cluster, []redis.UniversalClient) {
	t.Helper()
	var clusters []*redistest.Cluster
	var nodes []redis.UniversalClient
	for range n {
		cl := redistest.StartCluster(t, shards)
		cc := cl.Client()
		t.Cleanup(func() { _ = cc.Close() })
		clusters = append(clusters, cl)
		nodes = append(nodes, cc)
	}
	return clusters, nodes
}

// Three votes, each a 3-shard Redis Cluster, and keys whose notice
// channels hash to another shard than the keys: a PUBLISH run in a script
// counts only the subscribers of the script's shard, though every node
// delivers it.
func TestClusterVotes(t *testing.T) {
	const shards = 3
	clusters, nodes := clusterVotes(t, 3, shards)
	keys := keysOffTheirChannelsShard(t, shards, 2)
	t.Run("every call across slots", func(t *testing.T) {
		acrossSlots(t, nodes)
	})
	t.Run("a slot migrates while the lock is held", func(t *testing.T) {
		slotMigrates(t, clusters[0], nodes, shards)
	})
	t.Run("a hand-off's notice counts as heard", func(t *testing.T) {
		handOffNoticeHeard(t, nodes, keys[0])
	})
	t.Run("another Client's waiter is not starved", func(t *testing.T) {
		noStarvation(t, nodes, keys[1])
	})
	t.Run("a hand-off to another Client's waiter reaches it on its shard channel", func(t *testing.T) {
		remoteHandOff(t, nodes, keys[0])
	})
	t.Run("notices travel on shard channels", func(t *testing.T) {
		shardNotices(t, clusters, nodes, shards, keys[1], -1)
	})
	t.Run("a waiter's subscription follows its slot", func(t *testing.T) {
		shardNotices(t, clusters, nodes, shards, "follows", 1)
	})
	t.Run("a waiter's subscriptions survive a reconnect", func(t *testing.T) {
		shardReconnect(t, clusters, nodes, shards)
	})
	t.Run("keys whose library keys cannot share their slot are refused", func(t *testing.T) {
		unslottableKeys(t, nodes)
	})
	t.Run("a shard fails inside one vote", func(t *testing.T) { // last: vote 0 stays broken
		shardFails(t, clusters[0], nodes, shards)
	})
}

// acrossSlots: every call works on keys of every shard (the library's own
// keys, the memory marker and the fence counter, share the lock key's
// slot), and a multi-key lock works on keys with one hash tag.
func acrossSlots(t *testing.T, nodes []redis.UniversalClient) {
	c, err := New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 12 {
		key := fmt.Sprintf("slots:%d", i)
		l, err := c.TryLock(bg, key, time.Minute)
		if err != nil {
			t.Fatalf("TryLock(%s): %v", key, err)
		}
		if err := l.Extend(bg, 2*time.Minute); err != nil {
			t.Fatalf("Extend(%s): %v", key, err)
		}
		if _, err := l.Fence(bg); err != nil {
			t.Fatalf("Fence(%s): %v", key, err)
		}
		if in, err := c.Inspect(bg, key); err != nil || in.HoldingFor(l.Token()) < 2 {
			t.Fatalf("Inspect(%s) = %+v, %v", key, in, err)
		}
		r, err := c.Resume(bg, key, l.Token(), time.Minute)
		if err != nil {
			t.Fatalf("Resume(%s): %v", key, err)
		}
		if err := r.Unlock(bg); err != nil {
			t.Fatalf("Unlock(%s): %v", key, err)
		}
	}
	l, err := c.TryLockMulti(bg, []string{"{order:7}:stock", "{order:7}:invoice"}, time.Minute)
	if err != nil {
		t.Fatalf("TryLockMulti: %v", err)
	}
	if _, err := l.Fence(bg); err != nil {
		t.Fatalf("Fence of the multi-key lock: %v", err)
	}
	if err := l.Unlock(bg); err != nil {
		t.Fatalf("Unlock of the multi-key lock: %v", err)
	}
}

// slotMigrates: the key's slot moves to another shard of one vote while the
// lock is held (with the key, its marker and its fence counter); Extend and
// Unlock follow it there.
func slotMigrates(t *testing.T, cl *redistest.Cluster, nodes []redis.UniversalClient, shards int) {
	c, err := New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const key = "migrating"
	l, err := c.TryLock(bg, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Fence(bg); err != nil {
		t.Fatal(err)
	}
	settle(c)
	slot := script.HashSlot(key)
	to := (redistest.ShardOf(slot, shards) + 1) % shards
	cl.MigrateSlot(slot, to)
	moved := cl.Masters[to].Client(nil)
	defer moved.Close()
	if v, err := moved.Get(bg, key).Result(); err != nil || v != l.Token() {
		t.Fatalf("after the migration, the new shard holds %q (%v), want the lock's token", v, err)
	}
	if err := l.Extend(bg, 2*time.Minute); err != nil {
		t.Fatalf("Extend after the migration: %v", err)
	}
	settle(c) // Extend returns at a majority; vote 0 may be the last
	if d := moved.PTTL(bg, key).Val(); d < time.Minute {
		t.Fatalf("the migrated key lives %v after Extend(2m): the extension did not reach its new shard", d)
	}
	if in, err := c.Inspect(bg, key); err != nil || in.HoldingFor(l.Token()) != 3 {
		t.Fatalf("Inspect after the migration = %+v, %v; want all three votes", in, err)
	}
	if err := l.Unlock(bg); err != nil {
		t.Fatalf("Unlock after the migration: %v", err)
	}
	settle(c)
	if n := moved.Exists(bg, key).Val(); n != 0 {
		t.Fatal("the migrated key is still on its new shard after Unlock")
	}
}

// shardFails: the master of the key's shard in one vote dies while the
// lock is held; the other two votes carry Extend and Unlock, and a new
// lock is had with them.
func shardFails(t *testing.T, cl *redistest.Cluster, nodes []redis.UniversalClient, shards int) {
	c, err := New(nodes, WithNodeTimeout(scaled(200*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const key = "failing-shard"
	// A deployment that has run a while: the key's memory marker (one per
	// hash slot on a cluster, guard.go) is old on every vote. A fresh one
	// would hold back every vote's yes while one vote cannot report its
	// memory: the restart guard's documented cost, per key on a cluster
	// vote (README, "Redis Cluster votes").
	for _, n := range nodes {
		now, err := n.Time(bg).Result()
		if err != nil {
			t.Fatal(err)
		}
		born := now.Add(-establishedAge).UnixMilli()
		if err := n.Set(bg, script.MarkerKey(key, true), fmt.Sprintf("%d 0", born), 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	l := mustLock(t, c, key, time.Minute)
	cl.Masters[redistest.ShardOf(script.HashSlot(key), shards)].Kill()
	if err := l.Extend(bg, time.Minute); err != nil {
		t.Fatalf("Extend with the key's shard dead in one vote: %v", err)
	}
	if err := l.Unlock(bg); err != nil {
		t.Fatalf("Unlock with the key's shard dead in one vote: %v", err)
	}
	l, err = c.TryLock(bg, key, time.Minute)
	if err != nil {
		t.Fatalf("TryLock with the key's shard dead in one vote: %v", err)
	}
	var qe *QuorumError
	if err := l.Unlock(bg); err != nil && !errors.As(err, &qe) {
		t.Fatalf("Unlock: %v", err)
	}
}

// keysOffTheirChannelsShard returns n keys whose notice channels hash to
// another shard than the keys themselves.
func keysOffTheirChannelsShard(t *testing.T, shards, n int) []string {
	var out []string
	for i := 0; len(out) < n && i < 1000; i++ {
		k := fmt.Sprintf("k%d", i)
		if redistest.ShardOf(script.HashSlot(k), shards) != redistest.ShardOf(script.HashSlot(script.NoticeChannel(k)), shards) {
			out = append(out, k)
		}
	}
	if len(out) < n {
		t.Fatal("too few keys whose notice channel is on another shard")
	}
	return out
}

// handOffNoticeHeard: a holder whose Client hands the key to its own next
// waiter, while another Client listens on the key's shard channel and
// marked the key as wanted, learns from the hand-off's notice that others
// listen: the script's SPUBLISH counts every subscriber of a shard channel
// (a script's PUBLISH counted only those on its own shard, though every
// node delivered it). Then it listens for their wants and serves them in
// turn; without that it hands the key only to its own goroutines
// (noStarvation). The keys' plain channels hash to another shard than the
// keys (keysOffTheirChannelsShard), where a PUBLISH would go unheard here.
func handOffNoticeHeard(t *testing.T, nodes []redis.UniversalClient, key string) {
	busy, err := New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	l, err := busy.Lock(bg, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	next := make(chan *Lock, 1)
	go func() {
		l, _ := busy.Lock(bg, key, time.Minute)
		next <- l
	}()
	queued(t, busy, key, 1)
	settle(busy)
	for i, n := range nodes {
		ps := n.(*redis.ClusterClient).SSubscribe(bg, script.ShardedChannel(key))
		t.Cleanup(func() { _ = ps.Close() })
		if _, err := ps.Receive(bg); err != nil { // the confirmation
			t.Fatalf("vote %d: SUBSCRIBE: %v", i, err)
		}
		// What another Client's failed attempt does (acquire.lua).
		if err := n.Set(bg, script.WantedKey(key, true), fingerprintOf(l.Token()), time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if busy.wk.OthersSeen(key) {
		t.Fatal("the busy Client knew of the listener before the hand-off: the test proves nothing")
	}
	if err := l.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	nl := <-next
	if nl == nil {
		t.Fatal("the hand-off to the busy Client's own waiter failed")
	}
	defer func() { _ = nl.Unlock(bg) }()
	if !busy.wk.OthersSeen(key) {
		t.Fatal("after a hand-off that published to a wanted key on cluster votes, the Client does not know others listen")
	}
}

// remoteHandOff: a holder hands the key to another Client's waiter, whose
// Client hears the hand-off's notices on its own channel for the key
// (handedChannel), a shard channel in the key's slot: the waiter, whose
// timer would fire only after a minute, returns the lock its want asked
// for.
func remoteHandOff(t *testing.T, nodes []redis.UniversalClient, key string) {
	h, err := New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	w, err := New(nodes, WithRetryDelay(time.Minute, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	watch := h.wk.Watch(key) // the holder hears the want
	defer watch.Close()
	awaitSubscribed(t, h, key, len(nodes))
	l, err := h.Lock(bg, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	settle(h)
	res := tryLockAsync(w, key, time.Minute)
	wantKnown(t, h, key, 1)
	token := wantsOf(h, key)[0]
	if err := l.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	got := within(t, scaled(5*time.Second), "the waiter, after the hand-off", func() lockResult { return <-res })
	if got.err != nil || got.l.Token() != token {
		t.Fatalf("the waiter: %v, token %q; want its announced token %q", got.err, got.l.Token(), token)
	}
	_ = got.l.Unlock(bg)
	if n := h.cfg.test.remoteHandOffs.Load(); n != 1 {
		t.Fatalf("%d hand-offs to the waiter; want 1", n)
	}
}

// noStarvation: one Client's goroutines pass a key among themselves over
// and over; another Client's waiter must get its turn while they do.
func noStarvation(t *testing.T, nodes []redis.UniversalClient, key string) {
	busy, err := New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	other, err := New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	bound := scaled(5 * time.Second)
	ctx, cancel := context.WithTimeout(bg, bound)
	defer cancel()
	var wg sync.WaitGroup
	turns := make(chan struct{}, 1)
	for range 6 { // enough that one is always queued for the hand-off
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				l, err := busy.Lock(ctx, key, 5*time.Second)
				if err != nil {
					return
				}
				select {
				case turns <- struct{}{}:
				default:
				}
				time.Sleep(time.Millisecond) // the critical section
				_ = l.Unlock(bg)
			}
		}()
	}
	<-turns // the busy Client is passing the key around
	start := time.Now()
	l, err := other.Lock(ctx, key, 5*time.Second)
	waited := time.Since(start)
	cancel() // the busy goroutines stop
	wg.Wait()
	if err != nil {
		t.Fatalf("another Client's waiter starved for %v while one Client passed %q around: %v", waited, key, err)
	}
	t.Logf("the other Client's waiter got %q after %v", key, waited)
	_ = l.Unlock(bg)
}

// unslottableKeys: a key with a '}' but no hash tag ("a}b", "a{}b") cannot
// give its memory marker and fence counter its own slot (wrapping it in
// braces makes another tag). Taken on a cluster vote, its marker landed in
// another slot, the script's read of it failed quietly, and the restart
// guard was off for that key: an adversary pass had two holders at once
// after a vote's flush (7 of 7 such keys). Such keys are refused there; a
// key with a hash tag, or without any '}', is taken.
func unslottableKeys(t *testing.T, nodes []redis.UniversalClient) {
	c, err := New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, key := range []string{"a}b", "a{}b", "{}", "job}0", "{}{a}"} {
		if _, err := c.TryLock(bg, key, time.Minute); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "hash tag") {
			t.Fatalf("TryLock(%q) on cluster votes = %v, want ErrInvalidArgument naming hash tags", key, err)
		}
		if _, err := c.TryLockMulti(bg, []string{key}, time.Minute); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("TryLockMulti([%q]) on cluster votes = %v, want ErrInvalidArgument", key, err)
		}
	}
	for _, key := range []string{"{a}}b", "x{a", "plain", "{job}}0"} {
		l, err := c.TryLock(bg, key, time.Minute)
		if err != nil {
			t.Fatalf("TryLock(%q) on cluster votes: %v", key, err)
		}
		if _, err := l.Fence(bg); err != nil {
			t.Fatalf("Fence of %q on cluster votes: %v", key, err)
		}
		if marker := script.MarkerKey(key, true); script.HashSlot(marker) != script.HashSlot(key) {
			t.Fatalf("the marker of %q, %q, is in slot %d, the key in %d", key, marker, script.HashSlot(marker), script.HashSlot(key))
		}
		if err := l.Unlock(bg); err != nil {
			t.Fatal(err)
		}
	}
}

// shardNotices: a waiter of another Client subscribes to the key's shard
// channel (SSUBSCRIBE on the master of the key's slot, in every vote) and
// to no plain channel; when migrate is a vote, the key's slot moves to
// another master there while the waiter waits, and its subscription follows
// it. The holder's Unlock then reaches the waiter by notice, long before
// its backoff.
func shardNotices(t *testing.T, clusters []*redistest.Cluster, nodes []redis.UniversalClient, shards int, key string, migrate int) {
	a, b, backoff := holderAndSlowWaiter(t, nodes)
	l := mustLock(t, a, key, time.Minute)
	ctx, cancel := context.WithTimeout(bg, 2*backoff)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		lb, err := b.Lock(ctx, key, time.Minute)
		if err == nil {
			defer func() { _ = lb.Unlock(bg) }()
		}
		got <- err
	}()
	home := redistest.ShardOf(script.HashSlot(key), shards)
	awaitSubscribed := func(vote, master int) {
		t.Helper()
		deadline := time.Now().Add(scaled(5 * time.Second))
		for shardSubscribers(t, clusters, vote, master, key) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("vote %d: no subscriber of %q on master %d, which serves its key", vote, script.ShardedChannel(key), master)
			}
			time.Sleep(5 * time.Millisecond) // the subscription sends no signal the test can wait on
		}
	}
	for v := range clusters {
		awaitSubscribed(v, home)
	}
	for v, cl := range clusters {
		for _, m := range cl.Masters {
			c := m.Client(nil)
			n, err := c.PubSubNumSub(bg, script.NoticeChannel(key)).Result()
			_ = c.Close()
			if err != nil || n[script.NoticeChannel(key)] != 0 {
				t.Fatalf("vote %d, master %s: %v plain subscribers of %q (%v), want none", v, m.Addr, n, script.NoticeChannel(key), err)
			}
		}
	}
	if migrate >= 0 {
		to := (home + 1) % shards
		clusters[migrate].MigrateSlot(script.HashSlot(key), to)
		awaitSubscribed(migrate, to)
	}
	start := time.Now()
	if err := l.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the waiter's Lock: %v", err)
		}
		if d := time.Since(start); d > backoff/2 {
			t.Fatalf("the waiter got the key %v after Unlock: by its backoff (%v), not by a notice", d, backoff)
		}
	case <-time.After(2 * backoff):
		t.Fatal("the waiter never got the key")
	}
}

// shardSubscribers is how many subscribers the shard channel of key has
// on master of vote.
func shardSubscribers(t *testing.T, clusters []*redistest.Cluster, vote, master int, key string) int64 {
	t.Helper()
	c := clusters[vote].Masters[master].Client(nil)
	defer c.Close()
	v, err := c.Do(bg, "PUBSUB", "SHARDNUMSUB", script.ShardedChannel(key)).Slice()
	if err != nil || len(v) != 2 {
		t.Fatalf("PUBSUB SHARDNUMSUB: %v %v", v, err)
	}
	n, _ := v[1].(int64)
	return n
}

// shardReconnect: a waiter watches two keys in two slots of one master of
// every vote; the master drops its pub/sub connections (CLIENT KILL), and
// the waiter's Client subscribes both again (go-redis re-subscribes a
// PubSub's channels with one SSUBSCRIBE, refused across slots: one PubSub
// per slot). The holder's Unlocks then reach the waiter by notice.
func shardReconnect(t *testing.T, clusters []*redistest.Cluster, nodes []redis.UniversalClient, shards int) {
	var keys []string
	for i := 0; len(keys) < 2; i++ {
		k := fmt.Sprintf("rc%d", i)
		if redistest.ShardOf(script.HashSlot(k), shards) == 0 && (len(keys) == 0 || script.HashSlot(k) != script.HashSlot(keys[0])) {
			keys = append(keys, k)
		}
	}
	a, b, backoff := holderAndSlowWaiter(t, nodes)
	ctx, cancel := context.WithTimeout(bg, 2*backoff)
	defer cancel()
	var held []*Lock
	got := make(chan error, len(keys))
	for _, k := range keys {
		held = append(held, mustLock(t, a, k, time.Minute))
		go func() {
			lb, err := b.Lock(ctx, k, time.Minute)
			if err == nil {
				defer func() { _ = lb.Unlock(bg) }()
			}
			got <- err
		}()
	}
	awaitSubscribed := func() {
		t.Helper()
		deadline := time.Now().Add(scaled(5 * time.Second))
		for v := range clusters {
			for _, k := range keys {
				for shardSubscribers(t, clusters, v, 0, k) == 0 {
					if time.Now().After(deadline) {
						t.Fatalf("vote %d: no subscriber of %q on master 0", v, script.ShardedChannel(k))
					}
					time.Sleep(5 * time.Millisecond) // the subscription sends no signal the test can wait on
				}
			}
		}
	}
	awaitSubscribed()
	for _, cl := range clusters {
		c := cl.Masters[0].Client(nil)
		if err := c.Do(bg, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
			t.Fatal(err)
		}
		_ = c.Close()
	}
	awaitSubscribed()
	start := time.Now()
	for _, l := range held {
		if err := l.Unlock(bg); err != nil {
			t.Fatal(err)
		}
	}
	for range keys {
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("the waiter's Lock: %v", err)
			}
		case <-time.After(2 * backoff):
			t.Fatal("the waiter never got the key")
		}
	}
	if d := time.Since(start); d > backoff/2 {
		t.Fatalf("the waiter got the keys %v after Unlock: by its backoff (%v), not by notices", d, backoff)
	}
}

// holderAndSlowWaiter returns two Clients on nodes, closed when the test
// ends: a holder's, and a waiter's whose every backoff is backoff, long
// enough that a wait which ends sooner was ended by a notice.
func holderAndSlowWaiter(t *testing.T, nodes []redis.UniversalClient) (a, b *Client, backoff time.Duration) {
	t.Helper()
	backoff = scaled(10 * time.Second)
	for i, opts := range [][]Option{nil, {WithRetryDelay(backoff, backoff)}} {
		c, err := New(nodes, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if i == 0 {
			a = c
		} else {
			b = c
		}
	}
	return a, b, backoff
}
