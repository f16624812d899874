package redlock

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock-go/redlock/internal/chaos"
)

var clusterChaos = flag.Duration("chaos.cluster", 0, "run TestClusterVotesUnderRandomFaults for this long (off by default: it starts nine cluster masters)")

// Random calls on three votes that are each a 3-shard Redis Cluster, while
// shards are paused and resumed, and now and then one is flushed (it loses
// its data): no two holders' windows on a key may overlap (property 1 of
// the fault generator, whose scenario 20 runs on plain masters). Off by
// default; go test -run TestClusterVotesUnderRandomFaults -args
// -chaos.cluster=60s. The seed is logged; REDLOCK_CHAOS_SEED replays the
// schedule of faults and calls, though not their interleaving.
func TestClusterVotesUnderRandomFaults(t *testing.T) {
	if *clusterChaos == 0 {
		t.Skip("off by default: -args -chaos.cluster=60s")
	}
	seed := chaosSeed(t)
	clusters, nodes := clusterVotes(t, 3, 3)
	keys := []string{"{o}:stock", "{o}:invoice", "job:1", "job:2"}
	for _, n := range nodes { // a deployment that has run a while (guard.go)
		now, err := n.Time(bg).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if err := n.Set(bg, markerKey(k, true), fmt.Sprintf("%d 0", now.Add(-establishedAge).UnixMilli()), 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	var clients []*Client
	for range 4 {
		c, err := New(nodes, WithNodeTimeout(scaled(50*time.Millisecond)), WithRetryDelay(time.Millisecond, scaled(40*time.Millisecond)))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	hist := chaos.NewHistory()
	ctx, cancel := context.WithTimeout(bg, *clusterChaos)
	defer cancel()

	var wg sync.WaitGroup
	var calls, held, flushes atomic.Int64
	wg.Add(1)
	go func() { // the faults
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, 0))
		for ctx.Err() == nil {
			cl := clusters[rng.IntN(len(clusters))]
			s := cl.Masters[rng.IntN(len(cl.Masters))]
			if rng.IntN(10) == 0 {
				// Data loss on one shard of one vote: the restart guard
				// must keep its young votes out while others remember.
				c := s.Client(nil)
				_ = c.FlushAll(bg).Err()
				_ = c.Close()
				flushes.Add(1)
				hist.Note("flushed %s", s.Addr)
			} else {
				s.Pause()
				time.Sleep(time.Duration(rng.IntN(150)+20) * time.Millisecond)
				s.Resume()
			}
			time.Sleep(time.Duration(rng.IntN(200)+50) * time.Millisecond)
		}
	}()
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)+1))
			name := fmt.Sprintf("w%d", w)
			for ctx.Err() == nil {
				c := clients[rng.IntN(len(clients))]
				ttl := time.Duration(rng.IntN(400)+100) * time.Millisecond
				cctx, ccancel := context.WithTimeout(ctx, time.Duration(rng.IntN(300)+10)*time.Millisecond)
				var l *Lock
				var err error
				var lkeys []string
				switch rng.IntN(4) {
				case 0:
					lkeys = keys[:2]
					l, err = c.LockMulti(cctx, lkeys, ttl)
				case 1:
					lkeys = keys[2+rng.IntN(2):][:1]
					l, err = c.TryLock(cctx, lkeys[0], ttl)
				default:
					lkeys = keys[rng.IntN(len(keys)):][:1]
					l, err = c.Lock(cctx, lkeys[0], ttl)
				}
				ccancel()
				calls.Add(1)
				if err != nil {
					if !errors.Is(err, ErrNotObtained) && !errors.Is(err, ErrClosed) {
						t.Errorf("%s: unexpected error: %v", name, err)
					}
					continue
				}
				held.Add(1)
				var xs []*chaos.Hold
				for _, k := range lkeys {
					xs = append(xs, hist.Acquired(name, k, l.Token(), l.Until()))
				}
				if rng.IntN(3) == 0 { // pass it on to another Client
					for _, x := range xs {
						x.Releasing()
					}
					l2, err := clients[rng.IntN(len(clients))].Resume(ctx, lkeys[0], l.Token(), ttl)
					calls.Add(1)
					if err != nil || len(lkeys) > 1 {
						_ = l.Unlock(bg)
						if l2 != nil {
							_ = l2.Unlock(bg)
						}
						continue
					}
					l, xs = l2, []*chaos.Hold{hist.Acquired(name+">", lkeys[0], l2.Token(), l2.Until())}
				}
				time.Sleep(time.Duration(rng.IntN(5)) * time.Millisecond)
				if rng.IntN(2) == 0 {
					_ = l.Extend(ctx, ttl)
					calls.Add(1)
					for _, x := range xs {
						x.Told(l.Until(), time.Now())
					}
				}
				for _, x := range xs {
					x.Releasing()
				}
				_ = l.Unlock(bg)
				calls.Add(1)
			}
		}()
	}
	wg.Wait()
	for _, cl := range clusters {
		for _, s := range cl.Masters {
			s.Resume()
		}
	}
	t.Logf("seed %d: %d calls, %d locks held, %d flushes, %d windows", seed, calls.Load(), held.Load(), flushes.Load(), hist.Acquisitions())
	if held.Load() == 0 {
		t.Fatal("no lock was ever held: the run proves nothing")
	}
	for _, o := range hist.Overlaps() {
		t.Errorf("SAFETY VIOLATION (seed %d): %v", seed, o)
	}
}
