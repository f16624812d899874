package redlock

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/redistest"
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

// shardOf is which of shards equal slot ranges (redistest.StartCluster's)
// serves slot.
func shardOf(slot, shards int) int {
	for i := range shards {
		if slot <= (i+1)*16384/shards-1 {
			return i
		}
	}
	return shards - 1
}

// Three votes, each a 3-shard Redis Cluster, and keys whose notice
// channels hash to another shard than the keys: a PUBLISH run in a script
// counts only the subscribers of the script's shard, though every node
// delivers it.
func TestClusterVotes(t *testing.T) {
	const shards = 3
	_, nodes := clusterVotes(t, 3, shards)
	keys := keysOffTheirChannelsShard(t, shards, 2)
	t.Run("a hand-off's notice counts as heard", func(t *testing.T) {
		handOffNoticeHeard(t, nodes, keys[0])
	})
	t.Run("another Client's waiter is not starved", func(t *testing.T) {
		noStarvation(t, nodes, keys[1])
	})
}

// keysOffTheirChannelsShard returns n keys whose notice channels hash to
// another shard than the keys themselves.
func keysOffTheirChannelsShard(t *testing.T, shards, n int) []string {
	var out []string
	for i := 0; len(out) < n && i < 1000; i++ {
		k := fmt.Sprintf("k%d", i)
		if shardOf(hashSlot(k), shards) != shardOf(hashSlot(noticeChannel(k)), shards) {
			out = append(out, k)
		}
	}
	if len(out) < n {
		t.Fatal("too few keys whose notice channel is on another shard")
	}
	return out
}

// handOffNoticeHeard: a holder whose Client hands the key to its own next
// waiter, while another Client listens on the key's channel and marked the
// key as wanted, learns from the hand-off's notice that others listen,
// though no subscriber of the script's shard heard it. Then it listens for
// their wants and serves them in turn; without that it hands the key only
// to its own goroutines (noStarvation). The listener is a plain
// subscription made with the channel, so that it lands on the channel's
// shard, never the key's: a Client's own subscription lands on a random
// node, and the failure would show only now and then.
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
		ps := n.Subscribe(bg, noticeChannel(key))
		t.Cleanup(func() { _ = ps.Close() })
		if _, err := ps.Receive(bg); err != nil { // the confirmation
			t.Fatalf("vote %d: SUBSCRIBE: %v", i, err)
		}
		// What another Client's failed attempt does (acquire.lua).
		if err := n.SetArgs(bg, key, l.Token()+"~", redis.SetArgs{KeepTTL: true}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if busy.wk.othersSeen(key) {
		t.Fatal("the busy Client knew of the listener before the hand-off: the test proves nothing")
	}
	if err := l.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	nl := <-next
	if nl == nil {
		t.Fatal("the hand-off to the busy Client's own waiter failed")
	}
	defer nl.Unlock(bg)
	if !busy.wk.othersSeen(key) {
		t.Fatal("after a hand-off that published to a wanted key on cluster votes, the Client does not know others listen")
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
