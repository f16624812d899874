package engine

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/chaos"
	"github.com/redlock-go/redlock/internal/redistest"
)

// Benchmarks on real redis-server processes. Compare runs with benchstat:
//
//	go test -run '^$' -bench . -benchmem -count 10 | tee new.txt
//	benchstat old.txt new.txt
//
// BenchmarkSingleNode is the baseline the others are read against: the same
// scripts on one master, i.e. the cost of one round trip per operation.

// benchLockUnlock measures TryLock+Unlock; after the loop it calls heal (if
// not nil) before Close, so that Close need not wait out hung requests.
func benchLockUnlock(b *testing.B, nodes []redis.UniversalClient, heal func(), opts ...Option) {
	c, err := New(nodes, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	retries := 0
	for b.Loop() {
		l, err := c.TryLock(bg, "bench", 10*time.Second)
		for errors.Is(err, ErrNotObtained) && retries < 100 {
			// Unlock returns at the majority: on a loaded machine the
			// other deletes can still be on their way, and refuse the
			// next attempt. Rare; counted below.
			retries++
			l, err = c.TryLock(bg, "bench", 10*time.Second)
		}
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(bg); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(retries)/float64(b.N), "retries/op")
	if heal != nil {
		heal()
	}
	_ = c.Close()
}

// benchClients returns a client per server, with each master's memory
// established (the restart guard holds back a master younger than another
// by more than a second, as a benchmark's fresh servers can be).
func benchClients(b *testing.B, servers []*redistest.Server) []redis.UniversalClient {
	cs := make([]redis.UniversalClient, len(servers))
	for i, s := range servers {
		cs[i] = s.Client(nil)
	}
	ageMemory(b, cs, establishedAge)
	return cs
}

// BenchmarkSingleNode: TryLock+Unlock on one master (baseline).
func BenchmarkSingleNode(b *testing.B) {
	benchLockUnlock(b, benchClients(b, redistest.StartN(b, 1)), nil)
}

// BenchmarkFiveNodes: TryLock+Unlock, uncontended, on five masters.
func BenchmarkFiveNodes(b *testing.B) {
	benchLockUnlock(b, benchClients(b, redistest.StartN(b, 5)), nil)
}

// BenchmarkFiveNodesOnePaused: the same with one master SIGSTOPped for the
// whole run. Early return at a majority keeps it near BenchmarkFiveNodes;
// waiting for every node would make each operation take the node timeout.
func BenchmarkFiveNodesOnePaused(b *testing.B) {
	servers := redistest.StartN(b, 5)
	clients := benchClients(b, servers)
	servers[4].Pause()
	benchLockUnlock(b, clients, servers[4].Resume, WithNodeTimeout(50*time.Millisecond))
}

// BenchmarkFiveNodesOneSlow: the same with one master 2 ms away (a proxy
// that delays its replies): the majority is the four others, so it should
// cost nothing measurable.
func BenchmarkFiveNodesOneSlow(b *testing.B) {
	servers := redistest.StartN(b, 5)
	clients := benchClients(b, servers)
	p, err := chaos.NewProxy("127.0.0.1:0", servers[4].Addr)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Stop()
	p.Latency(2 * time.Millisecond)
	clients[4] = redis.NewClient(&redis.Options{Addr: p.Addr()})
	benchLockUnlock(b, clients, nil)
}

// withoutWaitShortcuts turns off the local FIFO, the hand-off and the
// pub/sub notices, so that BenchmarkContended can measure them against plain
// jittered polling in the same run.
func withoutWaitShortcuts() Option {
	return func(cfg *config) error {
		cfg.test.noQueue, cfg.noNotices, cfg.test.noHandOff = true, true, true
		return nil
	}
}

// withoutWants keeps the Client's waiters from announcing wants to other
// Clients' holders (wants.go).
func withoutWants() Option {
	return func(cfg *config) error {
		cfg.test.noRemoteHandOff = true
		return nil
	}
}

// withoutHandOff turns off only the hand-off, to measure what it adds.
func withoutHandOff() Option {
	return func(cfg *config) error {
		cfg.test.noHandOff = true
		return nil
	}
}

// BenchmarkContended: 8 workers take one key in turn on five masters, each
// holding it 1 ms, until b.N acquisitions in all. "one-client" is 8
// goroutines of one process sharing a Client (the local FIFO and the
// hand-off apply); "8-clients" is 8 Clients, as 8 processes would be (the
// notices apply). "default" is the library as shipped; "no-hand-off" turns
// the hand-off off (it only applies within one Client); "polling" turns
// FIFO, hand-off and notices off: the retry delay alone. Custom metrics:
// commands sent per acquisition (go-redis commands plus the
// SUBSCRIBE/UNSUBSCRIBE calls the servers saw), the p99 wait in Lock, the
// share of acquisitions won by the worker that held the lock just before,
// the share of turns passed by a hand-off (the rest went through a release
// and an acquisition), and the median turn: from a holder's Unlock call to
// the next holder's Lock returning.
func BenchmarkContended(b *testing.B) {
	servers := redistest.StartN(b, 5)
	for _, mode := range []string{"polling", "no-hand-off", "default"} {
		for _, shape := range []string{"one-client", "8-clients"} {
			if mode == "no-hand-off" && shape == "8-clients" {
				continue // the same as default
			}
			b.Run(mode+"/"+shape, func(b *testing.B) {
				var opts []Option
				switch mode {
				case "polling":
					opts = append(opts, withoutWaitShortcuts())
				case "no-hand-off":
					opts = append(opts, withoutHandOff())
				}
				benchContended(b, servers, shape == "one-client", opts...)
			})
		}
	}
}

func benchContended(b *testing.B, servers []*redistest.Server, shared bool, opts ...Option) {
	const workers = 8
	const hold = time.Millisecond
	clients := benchClients(b, servers)
	cmds := countCommands(clients)
	admins := redistest.Clients(servers)
	subs := func() int64 {
		var n int64
		for _, a := range admins {
			n += commandCalls(b, a, "subscribe", "unsubscribe")
		}
		return n
	}
	cs := make([]*Client, workers)
	for i := range cs {
		if i == 0 || !shared {
			c, err := New(clients, opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			cs[i] = c
		} else {
			cs[i] = cs[0]
		}
	}
	key := fmt.Sprintf("contended:%d", b.N)
	var mu sync.Mutex
	var waits, turns []time.Duration
	var unlocking atomic.Int64 // when the last holder called Unlock (UnixNano); 0: none yet
	last, same, total := -1, 0, 0
	var wg sync.WaitGroup
	subs0, cmds0, srv0 := subs(), cmds(), serverCommands(b, admins)
	b.ResetTimer()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				start := time.Now()
				l, err := cs[w].Lock(bg, key, 10*time.Second)
				if err != nil {
					b.Error(err)
					return
				}
				now := time.Now()
				waited := now.Sub(start)
				mu.Lock()
				done := total >= b.N
				if !done {
					total++
					waits = append(waits, waited)
					if u := unlocking.Swap(0); u != 0 {
						turns = append(turns, time.Duration(now.UnixNano()-u))
					}
					if w == last {
						same++
					}
					last = w
				}
				mu.Unlock()
				time.Sleep(hold) // the critical section
				unlocking.Store(time.Now().UnixNano())
				_ = l.Unlock(bg)
				if done {
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	for _, c := range cs {
		settle(c)
	}
	sent := int64(cmds()-cmds0) + subs() - subs0
	srv := serverCommands(b, admins) - srv0
	slices.Sort(waits)
	b.ReportMetric(float64(sent)/float64(total), "cmds/acq")
	b.ReportMetric(float64(srv)/float64(total), "srv-cmds/acq")
	b.ReportMetric(float64(waits[len(waits)*99/100].Microseconds())/1000, "p99-wait-ms")
	b.ReportMetric(100*float64(same)/float64(total), "same-worker-%")
	if len(turns) > 0 {
		slices.Sort(turns)
		b.ReportMetric(float64(turns[len(turns)/2].Nanoseconds())/1000, "turn-µs")
	}
	var handed int64 // turns passed by a hand-off, within a Client or across
	for i, c := range cs {
		if i == 0 || !shared {
			handed += c.cfg.test.handOffs.Load() + c.cfg.test.remoteHandOffs.Load()
		}
	}
	b.ReportMetric(100*float64(handed)/float64(total), "handed-%")
}

// serverCommands is how many commands the servers ran, counting those run
// inside scripts (INFO commandstats), less the INFO calls that read it.
func serverCommands(tb testing.TB, admins []*redis.Client) int64 {
	tb.Helper()
	var n int64
	for _, a := range admins {
		calls, err := redistest.CommandCalls(bg, a)
		if err != nil {
			tb.Fatal(err)
		}
		for name, c := range calls {
			if name != "info" {
				n += c
			}
		}
	}
	return n
}

// BenchmarkParallel: TryLock+Unlock from 64 goroutines on distinct keys, on
// one master (the baseline) and on five. Custom metric: server commands per
// pair, counting those run inside scripts.
func BenchmarkParallel(b *testing.B) {
	servers := redistest.StartN(b, 5)
	for _, n := range []int{1, 5} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			benchParallel(b, servers[:n])
		})
	}
}

func benchParallel(b *testing.B, servers []*redistest.Server, opts ...Option) {
	c, err := New(benchClients(b, servers), opts...)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	admins := redistest.Clients(servers)
	var next atomic.Int64
	srv0 := serverCommands(b, admins)
	b.ReportAllocs()
	b.SetParallelism(64 / runtime.GOMAXPROCS(0))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		key := fmt.Sprintf("parallel:%d", next.Add(1))
		for pb.Next() {
			l, err := c.TryLock(bg, key, 10*time.Second)
			for errors.Is(err, ErrNotObtained) {
				// Unlock returns at the majority: its last delete can
				// still be on its way.
				l, err = c.TryLock(bg, key, 10*time.Second)
			}
			if err != nil {
				b.Error(err)
				return
			}
			if err := l.Unlock(bg); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	settle(c)
	b.ReportMetric(float64(serverCommands(b, admins)-srv0)/float64(b.N), "srv-cmds/op")
}

// BenchmarkMultiKey: TryLockMulti+Unlock of 1 and 3 keys on five masters,
// uncontended, against TryLock+Unlock of one key in the same run.
func BenchmarkMultiKey(b *testing.B) {
	clients := benchClients(b, redistest.StartN(b, 5))
	c, err := New(clients)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct {
		name string
		lock func() (*Lock, error)
	}{
		{"TryLock", func() (*Lock, error) { return c.TryLock(bg, "bench", 10*time.Second) }},
		{"TryLockMulti/keys=1", func() (*Lock, error) { return c.TryLockMulti(bg, []string{"bench"}, 10*time.Second) }},
		{"TryLockMulti/keys=3", func() (*Lock, error) {
			return c.TryLockMulti(bg, []string{"bench", "bench:2", "bench:3"}, 10*time.Second)
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			retries := 0
			for b.Loop() {
				l, err := tc.lock()
				for errors.Is(err, ErrNotObtained) && retries < 100 {
					retries++ // the last deletes of the previous Unlock still on their way
					l, err = tc.lock()
				}
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Unlock(bg); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(retries)/float64(b.N), "retries/op")
		})
	}
}
