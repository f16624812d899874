package engine

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/chaos"
	"github.com/redlock-go/redlock/internal/redistest"
	"github.com/redlock-go/redlock/internal/script"
)

var clusterChaos = flag.Duration("chaos.cluster", 0, "length of TestClusterAndSentinelVotesUnderRandomFaults; default 6s")

// Random calls on three votes, two of them 3-shard Redis Clusters and one
// a Sentinel-managed master with a replica, reached through fault proxies,
// while masters are paused, slowed (late replies), cut off mid-reply (lost
// replies, which go-redis re-sends), and flushed (they lose their data);
// and, the restart guard's case, while one vote's master of a key is
// paused, the key is taken and its master on another vote flushed: the
// holder holds the key on the flushed master and the third vote, and once
// the paused one is back, a young yes there would make a second majority.
// No two holders' windows on a key may overlap (property 1 of the fault
// generator, whose scenario 20 runs on plain masters). Failovers are left
// out: an asynchronous replica loses acknowledged writes by design (README,
// "Sentinel-managed votes"). go test -run
// TestClusterAndSentinelVotesUnderRandomFaults -args -chaos.cluster=60s runs
// it longer. The seed is logged; REDLOCK_CHAOS_SEED replays the schedule of
// faults and calls, though not their interleaving.
func TestClusterAndSentinelVotesUnderRandomFaults(t *testing.T) {
	redistest.SkipShort(t)
	run := *clusterChaos
	if run == 0 {
		run = 6 * time.Second
	}
	seed := chaosSeed(t)
	const shards = 3
	proxies := map[string]*chaos.Proxy{} // by the master's own address
	proxied := func(masters ...*redistest.Server) func(ctx context.Context, network, addr string) (net.Conn, error) {
		for _, s := range masters {
			p, err := chaos.NewProxy("127.0.0.1:0", s.Addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Stop)
			proxies[s.Addr] = p
		}
		// A cluster names its masters by their own addresses (CLUSTER
		// SLOTS), a sentinel its master; every connection to one goes
		// through its proxy.
		return func(ctx context.Context, network, addr string) (net.Conn, error) {
			if p := proxies[addr]; p != nil {
				addr = p.Addr()
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
	}
	var votes []chaosVote
	var nodes []redis.UniversalClient
	for range 2 {
		cl := redistest.StartCluster(t, shards)
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Dialer: proxied(cl.Masters...)})
		t.Cleanup(func() { _ = cc.Close() })
		votes = append(votes, chaosVote{cl.Masters, func(key string) *redistest.Server { return cl.Masters[redistest.ShardOf(script.HashSlot(key), shards)] }})
		nodes = append(nodes, cc)
	}
	// The third vote is a master with a replica, managed by a sentinel
	// (failovers lose acknowledged writes by design: none here).
	sv := sentinelVotes(t, 1)[0]
	fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: sv.name, SentinelAddrs: []string{sv.sentinel.Addr}, Dialer: proxied(sv.master)})
	t.Cleanup(func() { _ = fc.Close() })
	votes = append(votes, chaosVote{[]*redistest.Server{sv.master}, func(string) *redistest.Server { return sv.master }})
	nodes = append(nodes, fc)
	keys := []string{"{o}:stock", "{o}:invoice", "job:1", "job:2"}
	for _, n := range nodes { // a deployment that has run a while (guard.go)
		now, err := n.Time(bg).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			_, cluster := n.(*redis.ClusterClient)
			if err := n.Set(bg, script.MarkerKey(k, cluster), fmt.Sprintf("%d 0", now.Add(-establishedAge).UnixMilli()), 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	var clients []*Client
	for range 4 {
		// A guard of a second (at least every TTL used here): a flushed
		// shard's vote is back in the run soon, for the next flush.
		c, err := New(nodes, WithNodeTimeout(scaled(50*time.Millisecond)), WithRetryDelay(time.Millisecond, scaled(40*time.Millisecond)), WithRestartGuard(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	hist := chaos.NewHistory()
	ctx, cancel := context.WithTimeout(bg, run)
	defer cancel()

	var wg sync.WaitGroup
	var calls, held, flushes, guardHolds atomic.Int64
	wg.Add(1)
	go func() { // the faults
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, 0))
		pause := func() time.Duration { return time.Duration(rng.IntN(150)+20) * time.Millisecond }
		// Masters whose memories began within memorySlack of each other
		// read as a fresh deployment (guard.go): what a majority losing its
		// data at once costs. The guard promises nothing there, so shards
		// are flushed farther apart: each flush has a witness that kept its
		// data for longer.
		const flushGap = memorySlack + 500*time.Millisecond
		var lastFlush time.Time
		for ctx.Err() == nil {
			vote := rng.IntN(len(votes))
			s := votes[vote].masters[rng.IntN(len(votes[vote].masters))]
			f := rng.IntN(10)
			switch {
			case time.Since(lastFlush) < flushGap:
				f = 4 + rng.IntN(6) // too soon after the last flush: no flush
			case f > 1:
				f = 1 + rng.IntN(3) // mostly the guard's case while a flush may come
			}
			switch {
			case f == 0: // data loss on one shard of one vote
				lastFlush = time.Now()
				flushes.Add(1)
				flushShard(s)
				hist.Note("flushed %s", s.Addr)
			case f <= 3: // the guard's case: pause a key's shard on one vote, take the key, flush it on another
				k := keys[rng.IntN(len(keys))]
				other := (vote + 1 + rng.IntN(len(votes)-1)) % len(votes)
				paused, flushed := votes[vote].masterOf(k), votes[other].masterOf(k)
				paused.Pause()
				hist.Note("paused %s", paused.Addr)
				// Held on two votes (when the key was free), one of them
				// about to forget it: while this holds, the resumed vote's
				// yes and the flushed one's are no majority.
				var x *chaos.Hold
				lctx, lcancel := context.WithTimeout(ctx, 2*pause())
				l, err := clients[rng.IntN(len(clients))].Lock(lctx, k, 400*time.Millisecond)
				lcancel()
				if err == nil {
					x = hist.Acquired("faults", k, l.Token(), l.Until())
					guardHolds.Add(1)
				}
				flushes.Add(1)
				lastFlush = time.Now()
				flushShard(flushed)
				hist.Note("flushed %s", flushed.Addr)
				time.Sleep(time.Duration(rng.IntN(50)) * time.Millisecond)
				paused.Resume()
				hist.Note("resumed %s", paused.Addr)
				if l != nil {
					time.Sleep(time.Duration(rng.IntN(200)+50) * time.Millisecond)
					x.Releasing()
					_ = l.Unlock(bg)
				}
			case f <= 5: // late replies
				p := proxies[s.Addr]
				d := time.Duration(rng.IntN(120)+10) * time.Millisecond
				p.Latency(d)
				hist.Note("replies from %s late by %v", s.Addr, d)
				time.Sleep(pause())
				p.Heal()
				hist.Note("healed %s", s.Addr)
			case f == 6: // lost replies: the connection closes, go-redis sends again
				p := proxies[s.Addr]
				p.DropReplies(time.Duration(rng.IntN(30)+5) * time.Millisecond)
				hist.Note("replies from %s lost", s.Addr)
				time.Sleep(pause())
				p.Heal()
				hist.Note("healed %s", s.Addr)
			default:
				s.Pause()
				hist.Note("paused %s", s.Addr)
				time.Sleep(pause())
				s.Resume()
				hist.Note("resumed %s", s.Addr)
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
				hold := time.Duration(rng.IntN(5)) * time.Millisecond
				if rng.IntN(4) == 0 { // a long hold, past faults that land meanwhile
					hold = time.Duration(rng.IntN(300)) * time.Millisecond
				}
				time.Sleep(hold)
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
	for _, v := range votes {
		for _, s := range v.masters {
			s.Resume()
			proxies[s.Addr].Heal()
		}
	}
	t.Logf("seed %d: %d calls, %d locks held, %d flushes, %d held through a flush, %d windows", seed, calls.Load(), held.Load(), flushes.Load(), guardHolds.Load(), hist.Acquisitions())
	if held.Load() == 0 || flushes.Load() == 0 {
		t.Fatal("no lock was ever held, or no shard flushed: the run proves nothing")
	}
	for _, o := range hist.Overlaps() {
		t.Errorf("SAFETY VIOLATION (seed %d): %v\nhistory:\n%s", seed, o, hist.Excerpt(o.Key, o.At.Add(-2*time.Second), o.At.Add(o.By)))
	}
}

// flushShard makes s lose its data, as a restart without persistence would.
func flushShard(s *redistest.Server) {
	c := s.Client(nil)
	defer c.Close()
	_ = c.FlushAll(bg).Err()
}

// A chaosVote is one vote of TestClusterAndSentinelVotesUnderRandomFaults: its
// masters, and the one that serves a key.
type chaosVote struct {
	masters  []*redistest.Server
	masterOf func(key string) *redistest.Server
}
