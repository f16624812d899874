package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/redistest"
)

// ringVotes starts n votes, each a go-redis Ring over two servers.
func ringVotes(t *testing.T, n int) []redis.UniversalClient {
	t.Helper()
	var nodes []redis.UniversalClient
	for range n {
		ss := redistest.StartN(t, 2)
		// Each server of a Ring keeps its own marker (the scripts run on
		// the key's server): age them all, as startReal does.
		for _, s := range ss {
			c := s.Client(nil)
			ageMemory(t, []redis.UniversalClient{c}, establishedAge)
			_ = c.Close()
		}
		ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"s0": ss[0].Addr, "s1": ss[1].Addr}})
		t.Cleanup(func() { _ = ring.Close() })
		nodes = append(nodes, ring)
	}
	return nodes
}

// Ring votes cannot carry notices (a Ring shards channels by name, apart
// from the keys whose scripts publish, and go-redis refuses a Ring
// subscription without a channel: an adversary pass found every waiting
// Lock panicking there). They run with notices off: a waiter polls, and a
// Client passing the key among its own goroutines leaves it free for
// another Client's waiter now and then.
func TestRingVotesWaitWithoutNotices(t *testing.T) {
	nodes := ringVotes(t, 3)
	busy, err := New(nodes, WithRetryDelay(time.Millisecond, scaled(50*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	other, err := New(nodes, WithRetryDelay(time.Millisecond, scaled(50*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if !busy.noticesOff() {
		t.Fatal("notices are on over Ring votes")
	}

	ctx, cancel := context.WithTimeout(bg, scaled(10*time.Second))
	defer cancel()
	var wg sync.WaitGroup
	turns := make(chan struct{}, 1)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				l, err := busy.Lock(ctx, "job", 5*time.Second)
				if err != nil {
					return
				}
				select {
				case turns <- struct{}{}:
				default:
				}
				time.Sleep(time.Millisecond)
				_ = l.Unlock(bg)
			}
		}()
	}
	<-turns
	start := time.Now()
	l, err := other.Lock(ctx, "job", 5*time.Second)
	waited := time.Since(start)
	cancel()
	wg.Wait()
	if err != nil {
		t.Fatalf("another Client's Lock on Ring votes, while one Client's goroutines passed the key around: %v after %v", err, waited)
	}
	t.Logf("the other Client's waiter got the key after %v", waited)
	if err := l.Extend(bg, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(bg); err != nil {
		t.Fatal(err)
	}
}
