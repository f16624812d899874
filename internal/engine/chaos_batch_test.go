// The fault suite's scenarios for batching (pipe.go): many goroutines of one
// Client on several keys, so that its requests to each master go out in
// pipelines, with a master hung inside a batch, batches whose requests have
// different deadlines, and connections torn down mid-pipeline.

package engine

import (
	"context"
	"errors"
	"fmt"
	"time"
)

func init() {
	scenarios = append(scenarios, []struct {
		name string
		run  func(s *scenario)
	}{
		{"24_hung_master_inside_a_batch", hungInsideABatch},
		{"25_batch_with_mixed_deadlines", mixedDeadlines},
		{"26_connections_dropped_mid_pipeline", droppedMidPipeline},
	}...)
}

// batchKeys is how many keys a batching load spreads over; two workers
// share each, so that the checker sees contention on every key.
const batchKeys = 4

// batchLoad runs 2·batchKeys workers on c, worker w on key w mod batchKeys
// with TTL ttl(w): Lock, critical section, Unlock, until Stop. Waiting
// workers of one key queue in c; the keys' requests batch.
func (s *scenario) batchLoad(c *Client, ttl func(w int) time.Duration) (*load, []int64) {
	ctx, cancel := context.WithCancel(context.Background())
	ld := &load{cancel: cancel, clients: []*Client{c}}
	perWorker := make([]int64, 2*batchKeys)
	for w := range 2 * batchKeys {
		key := fmt.Sprintf("%s:%d", s.key, w%batchKeys)
		ld.wg.Add(1)
		go func() {
			defer ld.wg.Done()
			for ctx.Err() == nil {
				l, err := c.Lock(ctx, key, ttl(w))
				if err != nil {
					ld.failed.Add(1)
					continue
				}
				x := s.acquired(fmt.Sprintf("worker%d", w), l)
				ld.acquired.Add(1)
				perWorker[w]++ // read after Stop
				x.Section(chaosWork)
				x.Releasing()
				_ = l.Unlock(context.Background())
			}
		}()
	}
	return ld, perWorker
}

// boundedTryLock makes one TryLock and its Unlock while the load's requests
// queue in the pipes, and fails the scenario unless each returns within the
// node deadline and the slack: a request behind a hung batch costs its own
// deadline at most. It returns TryLock's error.
func (s *scenario) boundedTryLock(c *Client, key string) error {
	s.t.Helper()
	limit := chaosNodeD + chaosSlack
	var l *Lock
	var err error
	if d := timed(func() { l, err = c.TryLock(bg, key, chaosTTL) }); d > limit {
		s.t.Fatalf("TryLock took %v (limit %v): %v", d, limit, err)
	}
	if err != nil {
		return err
	}
	x := s.acquired("bounded", l)
	x.Releasing()
	if d := timed(func() { err = l.Unlock(bg) }); d > limit {
		s.t.Fatalf("Unlock took %v (limit %v): %v", d, limit, err)
	}
	return nil
}

// hungInsideABatch: under batching load, node 1 is SIGSTOPped (a whole
// master hung, its batches with it); then one batch to node 0 hangs on its
// connection while node 0 is otherwise well. A lock that needs node 0 (nodes
// 3 and 4 are taken) must still be won within the node deadline: the
// requests queued behind the hung batch go out beside it. No two holders
// overlap.
func hungInsideABatch(s *scenario) {
	nodes := s.cl.Clients(nil)
	hang := newBatchHold(nil, 0) // armed below
	nodes[0].AddHook(hang)
	c := s.client()
	c2, err := New(nodes, WithNodeTimeout(chaosNodeD), WithRestartGuard(chaosGuard))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { s.cl.Heal(); hang.open(); _ = c2.Close() })
	ld, _ := s.batchLoad(c2, func(int) time.Duration { return chaosTTL })
	time.Sleep(chaosRun / 4) // batches on their way
	s.cl.Nodes[1].Server.Pause()
	s.note("node 1 SIGSTOPped under batching load")
	before := ld.acquired.Load()
	if err := s.boundedTryLock(c, s.key+":bounded:1"); err != nil {
		s.note("bounded TryLock with node 1 hung: %v", err) // the time is what is checked
	}
	time.Sleep(chaosRun / 4)
	if ld.acquired.Load() == before {
		s.t.Fatal("no acquisition while node 1 hung")
	}
	s.cl.Nodes[1].Server.Resume()
	s.note("node 1 resumed")

	hang.arm(1)
	<-hang.holding
	s.note("a batch to node 0 hangs on its connection")
	key := s.key + ":bounded:0"
	for _, i := range []int{3, 4} {
		if err := s.cl.Nodes[i].Admin.Set(bg, key, "someone-else", time.Minute).Err(); err != nil {
			s.t.Fatal(err)
		}
	}
	err = s.boundedTryLock(c2, key)
	hang.open()
	if err != nil {
		s.t.Fatalf("TryLock needing node 0, one batch to it hung: %v", err)
	}
	time.Sleep(chaosRun / 4)
	if n, _ := ld.Stop(); n == 0 {
		s.t.Fatal("no acquisition")
	}
	s.assertSafe()
}

// mixedDeadlines: a Client without a fixed node deadline, so that each
// request's deadline is a tenth of its TTL; half the workers use a short
// TTL, half a long one, and their requests share batches. Nodes 0 and 1
// answer after a latency beyond the short deadline but within the long one:
// short requests there fail at their own deadline while the long ones in
// the same batch succeed, and both kinds still win at the other three.
func mixedDeadlines(s *scenario) {
	short, long := scaled(300*time.Millisecond), chaosGuard
	c, err := New(s.nodes, WithRestartGuard(chaosGuard))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { s.cl.Heal(); _ = c.Close() })
	lat := short / 10 * 2 // twice the short deadline, a tenth of the long one
	s.fault(s.cl.Nodes[0].Latency(lat))
	s.fault(s.cl.Nodes[1].Latency(lat))
	s.note("nodes 0 and 1: %v latency; deadlines %v and %v", lat, short/10, min(long/10, DefaultMaxNodeTimeout))
	ld, per := s.batchLoad(c, func(w int) time.Duration {
		if w < batchKeys { // workers on every key, of both kinds
			return short
		}
		return long
	})
	time.Sleep(chaosRun)
	ld.Stop()
	s.assertSafe()
	var shorts, longs int64
	for w, n := range per {
		if w < batchKeys {
			shorts += n
		} else {
			longs += n
		}
	}
	if shorts == 0 || longs == 0 {
		s.t.Fatalf("acquisitions: %d with the short TTL, %d with the long one; want both", shorts, longs)
	}
	s.t.Logf("%d short, %d long acquisitions", shorts, longs)
}

// droppedMidPipeline: node 0 drops replies and then closes the connection
// (go-redis re-sends the whole pipeline on a new one, where its scripts run
// again), node 1 resets connections, under batching load. Re-sent scripts
// are idempotent: no overlap, and once healed and a TTL has passed, no key
// is left anywhere.
func droppedMidPipeline(s *scenario) {
	c := s.client()
	ld, _ := s.batchLoad(c, func(int) time.Duration { return chaosTTL })
	time.Sleep(chaosRun / 4)
	s.fault(s.cl.Nodes[0].DropRepliesThenClose(chaosNodeD / 4))
	s.fault(s.cl.Nodes[1].ResetConnections())
	s.note("node 0 drops replies then closes, node 1 resets connections")
	time.Sleep(chaosRun / 2)
	s.cl.Heal()
	s.note("healed")
	time.Sleep(chaosRun / 4)
	if n, _ := ld.Stop(); n == 0 {
		s.t.Fatal("no acquisition")
	}
	s.assertSafe()
	settle(c)
	time.Sleep(chaosTTL + 10*time.Millisecond) // letting TTLs run out
	s.noKeys("one TTL after healing")
	// And the Client works as before.
	l, err := c.TryLock(bg, s.key, chaosTTL)
	if err != nil {
		s.t.Fatalf("TryLock after healing: %v", err)
	}
	if err := l.Unlock(bg); err != nil && !errors.Is(err, ErrNotHeld) {
		s.t.Fatal(err)
	}
}
