// The fault suite's harness: TestChaos, the scenario type and its loads.

package engine

import (
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/chaos"
	"github.com/redlock-go/redlock/internal/script"
)

// The fault-injection suite: five real redis-server masters, each behind an
// in-process fault proxy (internal/chaos), with the faults of the Redlock
// literature injected under contending clients. Every scenario records each holder's
// validity window in a chaos.History and fails if two windows on one key
// overlap or the read-sleep-write counter lost an update. Scenarios 10b and
// 12 are positive controls: known-unsafe setups the checker must catch.
//
// Times scale with timeScale (4× under -race). A failure prints the history
// and the seed; REDLOCK_CHAOS_SEED=<seed> replays the random choices.
// -chaos.soak=30s lengthens the random soak (scenario 18).

var soakFlag = flag.Duration("chaos.soak", 0, "length of the random fault soak (scenario 18); default 3s, scaled")

// chaosClockNode is the master whose clock scenarios 12 and 13 jump.
const chaosClockNode = 2

func TestChaos(t *testing.T) {
	cl := chaos.Start(t, 5, chaos.Options{ClockNode: chaosClockNode, Users: []string{chaosUserRule, chaosSvcRule}})
	nodes := cl.Clients(nil) // go-redis defaults: 3 s read timeout, 3 re-sends
	if cl.Nodes[chaosClockNode].ClockFaked() {
		t.Logf("clock jumps: libfaketime on node %d", chaosClockNode)
	} else {
		t.Logf("clock jumps: libfaketime not installed; libfaketime not installed or turned off; shaving PTTLs on node %d instead", chaosClockNode)
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			cl.Reset(t)
			s := newScenario(t, cl, nodes)
			sc.run(s)
			if !t.Failed() {
				t.Logf("%d acquisitions", s.hist.Acquisitions())
			}
		})
	}
}

// Timings of the suite, all scaled.
var (
	chaosTTL   = scaled(400 * time.Millisecond) // the lock TTL of most scenarios
	chaosNodeD = scaled(40 * time.Millisecond)  // the per-node deadline
	chaosGuard = scaled(3 * time.Second)        // the restart guard: the longest TTL a scenario uses
	chaosSlack = scaled(150 * time.Millisecond) // liveness slack on top of a deadline
	chaosWork  = scaled(2 * time.Millisecond)   // the critical section's sleep
	chaosRun   = scaled(800 * time.Millisecond) // how long a contention phase lasts
)

type scenario struct {
	t     *testing.T
	cl    *chaos.Cluster
	nodes []redis.UniversalClient
	hist  *chaos.History
	seed  uint64
	rng   *rand.Rand
	key   string
}

// chaosSeed is a random seed, or REDLOCK_CHAOS_SEED's, logged for replay.
func chaosSeed(t *testing.T) uint64 {
	seed := rand.Uint64()
	if v := os.Getenv("REDLOCK_CHAOS_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("REDLOCK_CHAOS_SEED: %v", err)
		}
	}
	t.Logf("seed %d (replay with REDLOCK_CHAOS_SEED=%d)", seed, seed)
	return seed
}

func newScenario(t *testing.T, cl *chaos.Cluster, nodes []redis.UniversalClient) *scenario {
	seed := chaosSeed(t)
	s := &scenario{
		t: t, cl: cl, nodes: nodes, hist: chaos.NewHistory(),
		seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		key: "chaos:" + strings.ReplaceAll(t.Name(), "/", ":"),
	}
	// Scenarios run on an established deployment, the common case: in a
	// fresh one (every memory marker young), a master that is down keeps
	// every vote out for the restart guard (scenario 22 shows it).
	s.established()
	return s
}

// client is a Client over the proxied nodes with the suite's node deadline.
// When the test ends the network is healed first, so that Close need not
// wait out go-redis's read timeouts on requests a fault swallowed.
func (s *scenario) client(opts ...Option) *Client {
	s.t.Helper()
	// The restart guard as long as the longest TTL the scenarios use (and
	// what the masters recorded), not a minute: masters the schedules
	// restart empty count again within a scenario.
	c, err := New(s.nodes, append([]Option{WithNodeTimeout(chaosNodeD), WithRestartGuard(chaosGuard)}, opts...)...)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() {
		s.cl.Heal()
		_ = c.Close()
	})
	return c
}

func (s *scenario) fault(err error) {
	s.t.Helper()
	if err != nil {
		s.t.Fatal(err)
	}
}

func (s *scenario) note(format string, args ...any) { s.hist.Note(format, args...) }

// acquired records a lock obtained by holder.
func (s *scenario) acquired(holder string, l *Lock) *chaos.Hold {
	return s.hist.Acquired(holder, l.Key(), l.Token(), l.Until())
}

// take makes c take the lock on the scenario's key for holder, failing the
// scenario if it cannot, and records the window.
func (s *scenario) take(c *Client, holder string, ttl time.Duration) (*Lock, *chaos.Hold) {
	s.t.Helper()
	l, err := c.TryLock(bg, s.key, ttl)
	if err != nil {
		s.t.Fatalf("%s: TryLock: %v", holder, err)
	}
	return l, s.acquired(holder, l)
}

// assertSafe fails the scenario if two windows overlapped or an update was
// lost, printing the history and the seed.
func (s *scenario) assertSafe() {
	s.t.Helper()
	overlaps := s.hist.Overlaps()
	value, completed := s.hist.Counter()
	if len(overlaps) == 0 && value == completed {
		return
	}
	shown := overlaps[:min(len(overlaps), 5)]
	s.t.Fatalf("SAFETY VIOLATION (seed %d)\n%d overlaps, the first: %v\ncounter %d after %d completed sections\nhistory:\n%s",
		s.seed, len(overlaps), shown, value, completed, s.hist)
}

// assertDetected is assertSafe's opposite, for the positive controls.
func (s *scenario) assertDetected() {
	s.t.Helper()
	overlaps := s.hist.Overlaps()
	if len(overlaps) == 0 {
		s.t.Fatalf("positive control: the checker found no overlap (seed %d)\nhistory:\n%s", s.seed, s.hist)
	}
	s.t.Logf("detected as expected: %v", overlaps)
}

// A load is workers contending for one key in the background: each loops
// Lock, critical section, Unlock, until Stop. With contend, each worker has
// its own Client (as separate processes would); with contendShared, they
// share one, so locks pass between them by hand-off.
type load struct {
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	acquired atomic.Int64
	failed   atomic.Int64
	clients  []*Client
}

func (s *scenario) contend(workers int, ttl time.Duration) *load {
	return s.load(workers, ttl, false)
}

func (s *scenario) contendShared(workers int, ttl time.Duration) *load {
	return s.load(workers, ttl, true)
}

func (s *scenario) load(workers int, ttl time.Duration, shared bool) *load {
	ctx, cancel := context.WithCancel(context.Background())
	ld := &load{cancel: cancel}
	for w := range workers {
		if w == 0 || !shared {
			ld.clients = append(ld.clients, s.client())
		}
		c := ld.clients[len(ld.clients)-1]
		ld.wg.Add(1)
		go func() {
			defer ld.wg.Done()
			for ctx.Err() == nil {
				l, err := c.Lock(ctx, s.key, ttl)
				if err != nil {
					ld.failed.Add(1)
					continue
				}
				x := s.acquired(fmt.Sprintf("worker%d", w), l)
				ld.acquired.Add(1)
				x.Section(chaosWork)
				x.Releasing()
				_ = l.Unlock(context.Background())
			}
		}()
	}
	return ld
}

// Stop ends the load and waits for its workers.
func (ld *load) Stop() (acquired, failed int64) {
	ld.cancel()
	ld.wg.Wait()
	return ld.acquired.Load(), ld.failed.Load()
}

// run is contend for d, then Stop, asserting liveness: at least one
// acquisition.
func (s *scenario) run(workers int, d time.Duration) int64 {
	s.t.Helper()
	ld := s.contend(workers, chaosTTL)
	time.Sleep(d) // the length of the load phase
	n, _ := ld.Stop()
	if n == 0 {
		s.t.Fatalf("no acquisition in %v", d)
	}
	return n
}

// timed runs f and returns how long it took.
func timed(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}

// holdOnly makes c's next TryLock reach only the nodes in keep: the others
// reset every connection, so go-redis gives up on them quickly (after its
// re-sends) and no request to them stays in flight. It returns the lock and
// heals the network once every request of the attempt has finished.
func (s *scenario) holdOnly(c *Client, holder string, ttl time.Duration, keep ...int) (*Lock, *chaos.Hold) {
	s.t.Helper()
	kept := map[int]bool{}
	for _, i := range keep {
		kept[i] = true
	}
	for _, n := range s.cl.Nodes {
		if !kept[n.Index] {
			s.fault(n.ResetConnections())
		}
	}
	l, x := s.take(c, holder, ttl)
	settle(c)
	s.cl.Heal()
	vals := s.cl.Values(s.t, s.key)
	for i, v := range vals {
		if (v == l.Token()) != kept[i] {
			s.t.Fatalf("%s should hold exactly nodes %v; values %q", holder, keep, vals)
		}
	}
	s.note("%s holds nodes %v until +%v", holder, keep, time.Until(l.Until()).Round(time.Millisecond))
	return l, x
}

// noKeys fails unless no node holds any key.
func (s *scenario) noKeys(what string) {
	s.t.Helper()
	for i, k := range s.cl.Keys(s.t) {
		if k != 0 {
			s.t.Fatalf("%s: node %d holds %d keys; values %q", what, i, k, s.cl.Values(s.t, s.key))
		}
	}
}

func jump(ttl time.Duration) time.Duration {
	return time.Duration(math.Ceil((ttl + time.Second).Seconds())) * time.Second
}

// dialHook is a go-redis hook that wraps only dialing.
type dialHook func(redis.DialHook) redis.DialHook

func (h dialHook) DialHook(next redis.DialHook) redis.DialHook { return h(next) }
func (dialHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (dialHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// countIn is how many of vals equal v.
func countIn(vals []string, v string) int {
	n := 0
	for _, x := range vals {
		if x == v {
			n++
		}
	}
	return n
}

// established makes the masters' memories an hour old, as in a deployment
// that has run for a while (the suite flushes the masters between
// scenarios): a master that loses its data is then younger than the
// others, and the restart guard can see it. newScenario calls it.
func (s *scenario) established() {
	s.t.Helper()
	var admins []redis.UniversalClient
	for _, n := range s.cl.Nodes {
		admins = append(admins, n.Admin)
	}
	ageMemory(s.t, admins, establishedAge)
	s.note("masters' memories aged %v (an established deployment)", establishedAge)
}

// fresh deletes the masters' memory markers: a deployment whose masters are
// all new.
func (s *scenario) fresh() {
	s.t.Helper()
	for _, n := range s.cl.Nodes {
		if err := n.Admin.Del(bg, script.MarkerKey("", false)).Err(); err != nil {
			s.t.Fatal(err)
		}
	}
	s.note("memory markers deleted (a fresh deployment)")
}
