package redlock

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/leakcheck"

	"github.com/redlock-go/redlock/internal/chaos"
)

// The fault-injection suite: five real redis-server masters, each behind an
// in-process Toxiproxy proxy, with the faults of the Redlock literature
// injected under contending clients. Every scenario records each holder's
// validity window in a chaos.History and fails if two windows on one key
// overlap or the read-sleep-write counter lost an update. Scenarios 10 and
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

func newScenario(t *testing.T, cl *chaos.Cluster, nodes []redis.UniversalClient) *scenario {
	seed := rand.Uint64()
	if v := os.Getenv("REDLOCK_CHAOS_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("REDLOCK_CHAOS_SEED: %v", err)
		}
	}
	t.Logf("seed %d (replay with REDLOCK_CHAOS_SEED=%d)", seed, seed)
	return &scenario{
		t: t, cl: cl, nodes: nodes, hist: chaos.NewHistory(),
		seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		key: "chaos:" + strings.ReplaceAll(t.Name(), "/", ":"),
	}
}

// client is a Client over the proxied nodes with the suite's node deadline.
// When the test ends the network is healed first, so that Close need not
// wait out go-redis's read timeouts on requests a fault swallowed.
func (s *scenario) client(opts ...Option) *Client {
	s.t.Helper()
	c, err := New(s.nodes, append([]Option{WithNodeTimeout(chaosNodeD)}, opts...)...)
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

var scenarios = []struct {
	name string
	run  func(s *scenario)
}{
	{"01_baseline_contention", func(s *scenario) {
		s.run(4, chaosRun)
		s.assertSafe()
	}},

	{"02_two_nodes_stopped", func(s *scenario) {
		s.cl.Nodes[3].Server.Kill()
		s.cl.Nodes[4].Server.Kill()
		s.note("nodes 3 and 4 killed")
		s.run(4, chaosRun)
		s.assertSafe()
	}},

	{"03_two_nodes_black_holed", func(s *scenario) {
		c := s.client()
		s.fault(s.cl.Nodes[0].BlackHole())
		s.fault(s.cl.Nodes[1].BlackHole())
		s.note("nodes 0 and 1 black-holed")
		// go-redis would wait its 3 s read timeout on the black-holed
		// nodes; the library's own node deadline must bound every call.
		limit := chaosNodeD + chaosSlack
		for i := range 5 {
			var l *Lock
			var err error
			if d := timed(func() { l, err = c.TryLock(bg, s.key, chaosTTL) }); err != nil || d > limit {
				s.t.Fatalf("TryLock %d: %v after %v (limit %v)", i, err, d, limit)
			}
			x := s.acquired("client", l)
			x.Releasing()
			if d := timed(func() { err = l.Unlock(bg) }); err != nil || d > limit {
				s.t.Fatalf("Unlock %d: %v after %v (limit %v)", i, err, d, limit)
			}
		}
		s.run(3, chaosRun)
		s.assertSafe()
	}},

	{"04_majority_lost", func(s *scenario) {
		c := s.client()
		for i := range 3 {
			s.fault(s.cl.Nodes[i].BlackHole())
		}
		s.note("nodes 0, 1, 2 black-holed")
		var err error
		d := timed(func() { _, err = c.TryLock(bg, s.key, chaosTTL) })
		if !errors.Is(err, ErrNotObtained) || !errors.Is(err, ErrNodeTimeout) {
			s.t.Fatalf("TryLock without a majority: %v, want ErrNotObtained with node timeouts", err)
		}
		if limit := chaosNodeD + chaosSlack; d > limit {
			s.t.Fatalf("TryLock without a majority took %v, want under %v", d, limit)
		}
		// Heal: go-redis re-sends the swallowed SETs on new connections,
		// they land, and the late replies trigger their release.
		s.cl.Heal()
		settle(c)
		s.noKeys("after the failed attempt")

		// The same with the majority killed outright.
		for i := range 3 {
			s.cl.Nodes[i].Server.Kill()
		}
		d = timed(func() { _, err = c.TryLock(bg, s.key, chaosTTL) })
		if !errors.Is(err, ErrNotObtained) || d > chaosNodeD+chaosSlack {
			s.t.Fatalf("TryLock with three nodes killed: %v after %v", err, d)
		}
		settle(c)
		for _, i := range []int{3, 4} {
			if n := s.cl.Nodes[i].Admin.Exists(bg, s.key).Val(); n != 0 {
				s.t.Fatalf("live node %d kept the failed attempt's key", i)
			}
		}
	}},

	{"05_lost_replies", func(s *scenario) {
		// Two nodes run every command but their replies are lost.
		s.fault(s.cl.Nodes[0].DropReplies())
		s.fault(s.cl.Nodes[1].DropReplies())
		s.note("replies of nodes 0 and 1 dropped")
		s.run(3, chaosRun)
		s.assertSafe()

		// Three: no majority hears yes, yet the SETs landed.
		s.fault(s.cl.Nodes[2].DropReplies())
		c := s.client()
		if _, err := c.TryLock(bg, s.key, chaosTTL); !errors.Is(err, ErrNotObtained) {
			s.t.Fatalf("TryLock with three replies lost: %v, want ErrNotObtained", err)
		}
		healed := time.Now()
		for i, d := range s.cl.PTTLs(s.t, s.key) {
			if d > chaosTTL {
				s.t.Fatalf("node %d: key lives %v, longer than the TTL %v", i, d, chaosTTL)
			}
		}
		s.cl.Heal()
		settle(c)
		// Whatever release was lost with the replies, no key may outlive
		// its TTL: by then every node must be empty.
		time.Sleep(time.Until(healed.Add(chaosTTL + 10*time.Millisecond))) // letting TTLs run out
		s.noKeys("one TTL after healing")
	}},

	{"06_node_paused_then_resumed", func(s *scenario) {
		ld := s.contend(3, chaosTTL)
		time.Sleep(chaosRun / 4) // load before the fault
		s.cl.Nodes[0].Server.Pause()
		s.note("node 0 SIGSTOPped")
		time.Sleep(chaosRun / 2) // requests queue up in its socket
		s.cl.Nodes[0].Server.Resume()
		s.note("node 0 resumed: its queued commands run now")
		time.Sleep(chaosRun / 2) // load after the fault
		if n, _ := ld.Stop(); n == 0 {
			s.t.Fatal("no acquisition")
		}
		s.assertSafe()
	}},

	{"07_slow_minority_validity", func(s *scenario) {
		// Nodes 3 and 4 answer after lat, within the deadline; node 2 is
		// taken, so every majority needs a slow node and elapsed ≥ lat.
		lat := chaosNodeD / 2
		c := s.client()
		// Warm up first: open connections and load the scripts (a node
		// restarted by an earlier scenario answers EVALSHA with NOSCRIPT,
		// and the EVAL after it would cost a second slow round trip).
		if l, err := c.TryLock(bg, s.key, chaosTTL); err != nil || l.Unlock(bg) != nil {
			s.t.Fatalf("warm-up: %v", err)
		}
		settle(c)
		s.fault(s.cl.Nodes[3].Latency(lat))
		s.fault(s.cl.Nodes[4].Latency(lat))
		if err := s.cl.Nodes[2].Admin.Set(bg, s.key, "someone-else", time.Minute).Err(); err != nil {
			s.t.Fatal(err)
		}
		tol := scaled(2 * time.Millisecond) // from the call to the round's first send
		for i := range 5 {
			called := time.Now()
			l, err := c.TryLock(bg, s.key, chaosTTL)
			returned := time.Now()
			if err != nil {
				s.t.Fatalf("TryLock %d: %v", i, err)
			}
			elapsed := returned.Sub(called)
			if elapsed < lat {
				s.t.Fatalf("TryLock %d returned after %v, before the slow nodes (%v) could answer", i, elapsed, lat)
			}
			bound := chaosTTL - elapsed - drift(chaosTTL, DefaultDriftFactor)
			if left := l.Until().Sub(returned); left > bound+tol {
				s.t.Fatalf("TryLock %d: validity left %v after %v elapsed, above ttl − elapsed − drift = %v", i, left, elapsed, bound)
			}
			x := s.acquired("client", l)
			x.Releasing()
			_ = l.Unlock(bg)
		}
		s.assertSafe()
	}},

	{"08_delay_beyond_ttl", func(s *scenario) {
		// Every reply takes longer than the TTL, and the node deadline is
		// longer still: only the validity can end the attempt.
		ttl := scaled(100 * time.Millisecond)
		for _, n := range s.cl.Nodes {
			s.fault(n.Latency(ttl + ttl/2))
		}
		c := s.client(WithNodeTimeout(10 * ttl))
		var l *Lock
		var err error
		d := timed(func() { l, err = c.TryLock(bg, s.key, ttl) })
		if l != nil || !errors.Is(err, ErrNotObtained) {
			s.t.Fatalf("TryLock with replies slower than the TTL: %v, %v; want ErrNotObtained", l, err)
		}
		if d > ttl+chaosSlack {
			s.t.Fatalf("TryLock took %v, want it to stop at the validity end (ttl %v)", d, ttl)
		}
		settle(c) // the late yes votes arrive and are released
		s.noKeys("after the late replies")
	}},

	{"09_holder_paused_past_validity", func(s *scenario) {
		a, b := s.client(), s.client()
		la, _ := s.take(a, "A", chaosTTL)
		settle(a)
		set := time.Now() // every SET of A has landed by now
		// A stalls (a GC pause, a swapped-out process) past its validity
		// and past every node's expiry of its key.
		time.Sleep(time.Until(set.Add(chaosTTL + 10*time.Millisecond)))
		s.note("A wakes up")
		lb, err := b.TryLock(bg, s.key, time.Minute)
		if err != nil {
			s.t.Fatalf("B after A's expiry: %v", err)
		}
		s.acquired("B", lb)
		settle(b)
		if err := la.Extend(bg, time.Minute); !errors.Is(err, ErrNotHeld) {
			s.t.Fatalf("stale Extend: %v, want ErrNotHeld", err)
		}
		if err := la.Unlock(bg); !errors.Is(err, ErrNotHeld) {
			s.t.Fatalf("stale Unlock: %v, want ErrNotHeld", err)
		}
		settle(a)
		if got := s.cl.Values(s.t, s.key); countIn(got, lb.Token()) != 5 {
			s.t.Fatalf("the stale holder touched B's keys: %q", got)
		}
		for i, d := range s.cl.PTTLs(s.t, s.key) {
			if d > time.Minute {
				s.t.Fatalf("node %d: B's key lives %v, longer than B's TTL", i, d)
			}
		}
		s.assertSafe()
	}},

	{"10_control_restart_without_persistence", func(s *scenario) {
		// Known unsafe: A holds nodes 0–2; node 2 crashes and comes back
		// empty at once; B takes nodes 2–4 while A still holds.
		a, b := s.client(), s.client()
		ttl := scaled(3 * time.Second)
		s.holdOnly(a, "A", ttl, 0, 1, 2)
		s.fault(s.cl.Nodes[2].RestartEmpty())
		s.note("node 2 restarted without persistence")
		lb, err := b.TryLock(bg, s.key, ttl)
		if err != nil {
			s.t.Fatalf("B after node 2 forgot A's key: %v (the control needs B to get in)", err)
		}
		s.acquired("B", lb)
		s.assertDetected()
	}},

	{"11_restart_delayed_or_persistent", func(s *scenario) {
		a, b := s.client(), s.client()
		// (a) The restart is delayed past the maximum TTL: B cannot get in
		// while node 2 is down, and afterwards A's validity is over.
		la, _ := s.holdOnly(a, "A", chaosTTL, 0, 1, 2)
		s.cl.Nodes[2].Server.Kill()
		s.note("node 2 killed")
		if _, err := b.TryLock(bg, s.key, chaosTTL); !errors.Is(err, ErrNotObtained) {
			s.t.Fatalf("B while node 2 is down: %v, want ErrNotObtained", err)
		}
		time.Sleep(time.Until(la.Until().Add(chaosTTL))) // the delay: one maximum TTL
		s.fault(s.cl.Nodes[2].RestartEmpty())
		s.note("node 2 restarted empty, one TTL later")
		lb, err := b.TryLock(bg, s.key, chaosTTL)
		if err != nil {
			s.t.Fatalf("B after the delayed restart: %v", err)
		}
		s.acquired("B", lb).Releasing()
		_ = lb.Unlock(bg)
		settle(b)

		// (b) appendfsync always: the restarted node still has A's key.
		s.fault(s.cl.Nodes[2].EnableAOF())
		ttl := scaled(3 * time.Second)
		la, _ = s.holdOnly(a, "A2", ttl, 0, 1, 2)
		s.cl.Nodes[2].RestartAOF()
		s.note("node 2 restarted from its AOF")
		if v := s.cl.Values(s.t, s.key)[2]; v != la.Token() {
			s.t.Fatalf("node 2 lost A's key across an AOF restart: %q", v)
		}
		if lb, err := b.TryLock(bg, s.key, ttl); err == nil {
			s.acquired("B2", lb)
		} else if !errors.Is(err, ErrNotObtained) {
			s.t.Fatalf("B after the AOF restart: %v", err)
		}
		s.assertSafe()
	}},

	{"12_control_clock_jump_in_majority", func(s *scenario) {
		// Known unsafe: A holds nodes 0–2; node 2's clock jumps forward
		// past A's TTL, so Redis expires A's key there; B takes 2–4.
		a, b := s.client(), s.client()
		ttl := scaled(3 * time.Second)
		s.holdOnly(a, "A", ttl, 0, 1, chaosClockNode)
		s.fault(s.cl.Nodes[chaosClockNode].JumpClock(jump(ttl)))
		s.note("node %d clock jumps forward %v", chaosClockNode, jump(ttl))
		lb, err := b.TryLock(bg, s.key, ttl)
		if err != nil {
			s.t.Fatalf("B after the clock jump: %v (the control needs B to get in)", err)
		}
		s.acquired("B", lb)
		s.assertDetected()
	}},

	{"13_clock_jump_outside_majority", func(s *scenario) {
		a, b := s.client(), s.client()
		ttl := scaled(3 * time.Second)
		s.holdOnly(a, "A", ttl, 0, 1, 3)
		s.fault(s.cl.Nodes[chaosClockNode].JumpClock(jump(ttl)))
		s.note("node %d clock jumps forward %v", chaosClockNode, jump(ttl))
		if lb, err := b.TryLock(bg, s.key, ttl); err == nil {
			s.acquired("B", lb)
		} else if !errors.Is(err, ErrNotObtained) {
			s.t.Fatalf("B: %v", err)
		}
		settle(b)
		if n := countIn(s.cl.Values(s.t, s.key), ""); n != 2 {
			s.t.Fatalf("B's failed attempt left keys: %q", s.cl.Values(s.t, s.key))
		}
		s.assertSafe()
	}},

	{"14_client_wall_clock_jump", func(s *scenario) {
		// Go's time.Now reads the clock through the vDSO, which
		// libfaketime cannot reach, so the client's wall clock cannot be
		// jumped from here. What makes a jump harmless is that every
		// validity computation uses Go's monotonic reading; a time that
		// lost it (Round(0), a Unix-nanos round trip) would be compared by
		// wall clock. So: Until must carry the monotonic reading, before
		// and after Extend, and Until − now must agree with it.
		c := s.client()
		l, x := s.take(c, "client", chaosTTL)
		hasMono := func(tm time.Time) bool { return strings.Contains(tm.String(), " m=") }
		if !hasMono(l.Until()) {
			s.t.Fatalf("Until %v has no monotonic reading: a wall-clock jump would move it", l.Until())
		}
		if err := l.Extend(bg, chaosTTL); err != nil {
			s.t.Fatal(err)
		}
		x.Extended(l.Until())
		if !hasMono(l.Until()) {
			s.t.Fatalf("Until after Extend %v has no monotonic reading", l.Until())
		}
		if left := time.Until(l.Until()); left <= 0 || left > chaosTTL {
			s.t.Fatalf("validity left %v, want in (0, %v]", left, chaosTTL)
		}
		x.Releasing()
		if err := l.Unlock(bg); err != nil {
			s.t.Fatal(err)
		}
		s.assertSafe()
	}},

	{"15_extend_with_nodes_black_holed", func(s *scenario) {
		c := s.client()
		l, x := s.take(c, "client", chaosTTL)
		settle(c)
		s.fault(s.cl.Nodes[0].BlackHole())
		s.fault(s.cl.Nodes[1].BlackHole())
		before := l.Until()
		limit := chaosNodeD + chaosSlack
		var err error
		if d := timed(func() { err = l.Extend(bg, chaosTTL) }); err != nil || d > limit {
			s.t.Fatalf("Extend with 2 of 5 black-holed: %v after %v (limit %v)", err, d, limit)
		}
		if !l.Until().After(before) {
			s.t.Fatalf("Extend succeeded but Until stayed %v", before)
		}
		x.Extended(l.Until())
		s.fault(s.cl.Nodes[2].BlackHole())
		before = l.Until()
		if d := timed(func() { err = l.Extend(bg, chaosTTL) }); !errors.Is(err, ErrNotObtained) || d > limit {
			s.t.Fatalf("Extend with 3 of 5 black-holed: %v after %v; want ErrNotObtained within %v", err, d, limit)
		}
		if !l.Until().Equal(before) {
			s.t.Fatalf("failed Extend moved Until from %v to %v", before, l.Until())
		}
		x.Releasing()
		_ = l.Unlock(bg)
		s.assertSafe()
	}},

	{"16_expired_release_with_resends", func(s *scenario) {
		// A's go-redis clients heal their node's proxy when they dial a new
		// connection: the signal that go-redis is about to re-send a
		// command whose connection broke.
		direct := s.cl.Clients(nil)
		var armed [3]atomic.Bool
		for i := range armed {
			direct[i].AddHook(dialHook(func(next redis.DialHook) redis.DialHook {
				return func(ctx context.Context, network, addr string) (net.Conn, error) {
					if armed[i].CompareAndSwap(true, false) {
						s.cl.Nodes[i].Heal()
					}
					return next(ctx, network, addr)
				}
			}))
		}
		// A's node deadline leaves go-redis time for its re-send.
		a, err := New(direct, WithNodeTimeout(scaled(time.Second)))
		if err != nil {
			s.t.Fatal(err)
		}
		s.t.Cleanup(func() { s.cl.Heal(); _ = a.Close() })
		b := s.client()

		ttl := scaled(100 * time.Millisecond)
		la, _ := s.take(a, "A", ttl)
		settle(a)
		set := time.Now()                                          // every SET of A has landed by now
		time.Sleep(time.Until(set.Add(ttl + 10*time.Millisecond))) // A's keys expire
		lb, _ := s.take(b, "B", time.Minute)
		settle(b)

		// A's late release runs, loses its reply and its connection, and
		// go-redis re-sends it on a new connection, where it runs again.
		before := make([]int64, 3)
		for i := range before {
			before[i] = commandCalls(s.t, s.cl.Nodes[i].Admin, "eval", "evalsha")
			armed[i].Store(true)
			s.fault(s.cl.Nodes[i].DropRepliesThenClose(5 * time.Millisecond))
		}
		if err := la.Unlock(bg); !errors.Is(err, ErrNotHeld) {
			s.t.Fatalf("A's late Unlock: %v, want ErrNotHeld", err)
		}
		settle(a)
		s.cl.Heal()
		for i := range before {
			if n := commandCalls(s.t, s.cl.Nodes[i].Admin, "eval", "evalsha") - before[i]; n < 2 {
				s.t.Fatalf("node %d ran A's release %d times; the scenario needs a go-redis re-send", i, n)
			}
		}
		if got := s.cl.Values(s.t, s.key); countIn(got, lb.Token()) != 5 {
			s.t.Fatalf("A's re-sent release deleted B's keys: %q", got)
		}
		s.assertSafe()
	}},

	{"17_many_clients_with_jitter", func(s *scenario) {
		const clients = 16
		start := time.Now()
		var wg sync.WaitGroup
		var mu sync.Mutex
		var winners []*Lock
		var first time.Duration
		cs := make([]*Client, clients)
		jitter := make([]time.Duration, clients)
		for i := range cs {
			cs[i] = s.client()
			jitter[i] = time.Duration(s.rng.Int64N(int64(5 * time.Millisecond)))
		}
		ctx, cancel := context.WithTimeout(bg, scaled(time.Second))
		defer cancel()
		for i, c := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(jitter[i]) // the seeded start jitter
				l, err := c.Lock(ctx, s.key, time.Minute)
				if err != nil {
					if !errors.Is(err, ErrNotObtained) {
						s.t.Errorf("client %d: %v", i, err)
					}
					return
				}
				s.acquired(fmt.Sprintf("client%d", i), l) // held until the end
				mu.Lock()
				if len(winners) == 0 {
					first = time.Since(start)
				}
				winners = append(winners, l)
				mu.Unlock()
			}()
		}
		wg.Wait()
		for _, c := range cs {
			settle(c)
		}
		if len(winners) == 0 {
			s.t.Fatalf("nobody of %d clients won within %v", clients, scaled(time.Second))
		}
		s.t.Logf("first of %d clients won after %v", clients, first)
		for i, v := range s.cl.Values(s.t, s.key) {
			if v != "" && v != winners[0].Token() {
				s.t.Fatalf("node %d holds a loser's key %q", i, v)
			}
		}
		s.assertSafe()
	}},

	{"18_random_soak", func(s *scenario) { soak(s, s.contend(4, chaosTTL)) }},

	{"19_hand_offs_under_faults", func(s *scenario) {
		ld := s.contendShared(3, chaosTTL)
		soak(s, ld)
		n := ld.clients[0].cfg.test.handOffs.Load()
		s.t.Logf("%d hand-offs", n)
		if n == 0 {
			s.t.Fatal("no hand-off: the scenario did not test them")
		}
	}},

	{"20_whole_api_generator", generate},
}

// jump is a forward clock jump that outlives a TTL: whole seconds, since
// libfaketime reads its offset in seconds.
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

// soak runs the load ld while a seeded random schedule injects the
// faults that must stay safe: pauses, kills with restarts delayed past the
// TTL, black holes, lost replies, latency and resets, on at most two nodes
// at a time so that the load keeps making progress.
func soak(s *scenario, ld *load) {
	length := scaled(3 * time.Second)
	if *soakFlag > 0 {
		length = *soakFlag
	}
	type state struct {
		faulty bool
		killed time.Time
		what   string
	}
	nodes := make([]state, len(s.cl.Nodes))
	faulty := func() int {
		n := 0
		for _, st := range nodes {
			if st.faulty {
				n++
			}
		}
		return n
	}
	heal := func(i int) {
		n := s.cl.Nodes[i]
		if !nodes[i].killed.IsZero() {
			// Restart only once a maximum TTL has passed since the crash.
			time.Sleep(time.Until(nodes[i].killed.Add(chaosTTL)))
			s.fault(n.RestartEmpty())
		}
		n.Heal()
		n.Server.Resume()
		s.note("node %d healed (was %s)", i, nodes[i].what)
		nodes[i] = state{}
	}
	faults := 0
	end := time.Now().Add(length)
	for time.Now().Before(end) {
		time.Sleep(time.Duration(s.rng.Int64N(int64(scaled(150 * time.Millisecond))))) // the schedule's pace
		i := s.rng.IntN(len(s.cl.Nodes))
		if nodes[i].faulty {
			heal(i)
			continue
		}
		if faulty() >= 2 {
			continue
		}
		n := s.cl.Nodes[i]
		var what string
		switch s.rng.IntN(6) {
		case 0:
			n.Server.Pause()
			what = "paused"
		case 1:
			n.Server.Kill()
			nodes[i].killed = time.Now()
			what = "killed"
		case 2:
			s.fault(n.BlackHole())
			what = "black-holed"
		case 3:
			s.fault(n.DropReplies())
			what = "dropping replies"
		case 4:
			d := time.Duration(s.rng.Int64N(int64(2 * chaosNodeD)))
			s.fault(n.Latency(d))
			what = fmt.Sprintf("slow by %v", d)
		case 5:
			s.fault(n.ResetConnections())
			what = "resetting connections"
		}
		nodes[i].faulty, nodes[i].what = true, what
		faults++
		s.note("node %d %s", i, what)
	}
	for i := range nodes {
		if nodes[i].faulty {
			heal(i)
		}
	}
	acquired, failed := ld.Stop()
	s.t.Logf("soak %v: %d faults, %d acquisitions, %d Lock calls ended by the soak's end or a fault", length, faults, acquired, failed)
	if acquired == 0 {
		s.t.Fatal("no acquisition during the soak")
	}
	s.assertSafe()
}

// The whole-API fault generator (scenario 20), in the spirit of Jepsen: no
// scripted scenario, but workers drawing random operations through the
// public API — TryLock, Lock and Do with random deadlines and TTLs, Extend
// to shorter and longer TTLs, concurrent Extends and Unlocks on one Lock,
// Close with calls in flight — over a few keys and a few Clients (shared by
// several workers, so that locks pass by hand-off), while a seeded
// chaos.Schedule injects faults, now and then on a majority. It checks
// properties, not outcomes:
//
//  1. no two holders' windows on a key overlap (chaos.History), a window
//     running from the acquire call's return to the earlier of its Unlock
//     call and the latest Until() it was told (read after every Extend,
//     whatever it returned); for Do, from fn's start to fn's return or its
//     context's end;
//  2. Until() is never later than the keys' real expiry on a majority
//     (sampled: GET+PTTL on the masters themselves);
//  3. once the clients are closed, no key lives longer than the largest
//     TTL, and after that long none is left;
//  4. every call returns within its bound: TryLock and Extend the node
//     deadline, Unlock two (a hand-off round, then a release round), Lock
//     and Do's wait their ctx deadline, plus slack; Close go-redis's
//     timeouts; and calls on a Client whose Close returned return ErrClosed
//     at once;
//  5. no goroutine outlives the run (leakcheck);
//  6. Unlock releases: after it, no node that stayed up and reachable
//     since the lock was requested, and answered every command that
//     carried the token, keeps the token (out of memory and without channel
//     rights count as up: DEL needs neither);
//  7. liveness: while a majority of the nodes is up, reachable and not out
//     of memory, a TryLock of a free key succeeds within three attempts,
//     whether or not the ACL user may publish there.
//
// Every call's outcome is counted per kind; a kind that never succeeded
// fails the run, which would otherwise prove nothing. -chaos.ops sets the
// number of calls (make chaos-soak runs more).

var genOpsFlag = flag.Int("chaos.ops", 0, "calls the whole-API fault generator (scenario 20) makes; default 20000")

// The ACL users the generator's clients connect as; Admin stays the
// default user. The schedule revokes the channel rights of chaosUser only:
// a Client that meets a master refusing its notices stops handing locks
// over, and chaosService's Clients keep them, as a second service with its
// own ACL user would.
const (
	chaosUser     = "app"
	chaosService  = "svc"
	chaosPassword = "chaos-pw"
	chaosUserRule = chaosUser + " on >" + chaosPassword + " ~* +@all &*"
	chaosSvcRule  = chaosService + " on >" + chaosPassword + " ~* +@all &*"
)

// The generator's timings, all scaled.
var (
	genMinTTL    = scaled(50 * time.Millisecond)
	genMaxTTL    = scaled(time.Second)
	genWork      = scaled(3 * time.Millisecond)  // the longest critical section of a step
	genLeaseWait = scaled(15 * time.Millisecond) // a property-2 read of one master
	genPace      = scaled(100 * time.Millisecond)
	// Liveness slack: calls race genWorkers workers, the schedule and the
	// property checks for 2 cores, and fsyncs (appendfsync always) stall
	// the masters.
	genSlack       = 2 * chaosSlack
	genOpLimit     = chaosNodeD + genSlack   // TryLock, Extend
	genUnlockLimit = 2*chaosNodeD + genSlack // Unlock: a hand-off round, then a release round
	genWaitLimit   = 2*chaosNodeD + genSlack // Lock and Do after their ctx deadline: a hand-off served as ctx ended is unlocked
	genAfterFn     = 3*chaosNodeD + genSlack // Do after fn: the watchdog's Extend, then Unlock
	// Close waits for requests in flight, which go-redis with its defaults
	// may hold for its 3 s read timeout on each of its 4 tries.
	genCloseLimit = 4*3*time.Second + scaled(3*time.Second)
	// A call this far past its bound has stalled: see stalled.
	genStall = scaled(500 * time.Millisecond)
)

// Workers, and slots of Clients they share: worker w mostly uses slot
// w % genSlots.
const (
	genWorkers = 24
	genSlots   = 6
	genShared  = 6 // keys every Client contends for
)

var (
	errFn    = errors.New("chaos: fn failed")
	errPanic = errors.New("chaos: fn panicked")
)

type generator struct {
	s        *scenario
	sched    *chaos.Schedule
	tally    chaos.Tally
	keys     []string
	profiles [][]redis.UniversalClient // go-redis clients of the ACL users, per option set
	slots    []*genSlot
	probe    *Client // property 7's
	target   int64
	calls    chaos.Calls // which nodes answered every command carrying a token

	ops         atomic.Int64 // API calls made
	handOffs    atomic.Int64 // of the Clients already closed
	leaseChecks atomic.Int64
	relChecks   atomic.Int64
	bg          sync.WaitGroup // Closes and property-6 checks in the background

	dumped atomic.Bool // a stalled call's goroutine dump was taken

	mu         sync.Mutex
	dump       string                    // of the first stalled call
	violations map[string][]genViolation // by property: the first few
	counts     map[string]int            // by property
	nclients   int
}

// A genViolation is a property's failure, about key when not "".
type genViolation struct {
	key string
	at  time.Time
	msg string
}

// The properties, as failures name them.
const (
	pOverlap  = "1 two holders at once"
	pUntil    = "2 Until later than the keys"
	pExpiry   = "3 a key outlives its TTL"
	pBound    = "4 a call over its time bound"
	pClosed   = "4 a call on a closed Client"
	pRelease  = "6 Unlock left a key"
	pProgress = "7 no progress with a majority up"
	pOutcome  = "an outcome the API does not document"
)

// A genSlot is where workers find a Client; Close replaces it.
type genSlot struct {
	mu sync.Mutex
	c  *genClient
}

type genClient struct {
	*Client
	name   string
	closed atomic.Bool // its Close has returned
}

func generate(s *scenario) {
	leaks := leakcheck.Current()
	began := time.Now()
	g := &generator{s: s, target: 20000}
	if *genOpsFlag > 0 {
		g.target = int64(*genOpsFlag)
	}
	// Keys every Client contends for, and one per slot that only
	// its Client uses, where Unlock may hand the lock to a waiter of the
	// same Client (it does not while other Clients want the key).
	for i := range genShared {
		g.keys = append(g.keys, fmt.Sprintf("chaos:gen:k%d", i))
	}
	for i := range genSlots {
		g.keys = append(g.keys, fmt.Sprintf("chaos:gen:own%d", i))
	}
	// Every master persists each write before answering, so a kill and
	// restart is safe whenever it comes (Redlock spec, "Performance, crash
	// recovery and fsync").
	for _, n := range s.cl.Nodes {
		s.fault(n.EnableAOF())
	}
	user := redis.Options{Username: chaosUser, Password: chaosPassword}
	ctxUser := user
	ctxUser.ContextTimeoutEnabled = true
	svc := redis.Options{Username: chaosService, Password: chaosPassword}
	g.profiles = [][]redis.UniversalClient{s.cl.Clients(&user), s.cl.Clients(&ctxUser), s.cl.Clients(&svc)}
	for _, cs := range g.profiles {
		for i, c := range cs {
			c.AddHook(g.calls.Hook(i))
		}
	}
	for range genSlots {
		g.slots = append(g.slots, &genSlot{c: g.newClient(len(g.slots))})
	}
	g.probe = g.newClient(0).Client
	g.sched = s.cl.NewSchedule(chaos.ScheduleOptions{
		Seed: s.seed, NodeDeadline: chaosNodeD, MaxTTL: genMaxTTL, User: chaosUser,
		Pace: genPace, MaxFaulty: len(s.cl.Nodes) - quorum(len(s.cl.Nodes)), EpisodeOdds: 0.05,
		Settle: 2 * time.Second, History: s.hist,
	})

	schedCtx, stopSched := context.WithCancel(bg)
	schedErr := make(chan error, 1)
	go func() {
		err := errors.New("chaos: the schedule stopped (a restart failed)")
		defer func() { schedErr <- err }()
		err = g.sched.Run(schedCtx)
	}()
	probeCtx, stopProbe := context.WithCancel(bg)
	probed := make(chan struct{})
	go func() { defer close(probed); g.prober(probeCtx) }()

	var workers sync.WaitGroup
	for w := range genWorkers {
		workers.Add(1)
		go func() { defer workers.Done(); g.worker(w) }()
	}
	g.await(&workers, "the workers")
	ran := time.Since(began)
	stopProbe()
	<-probed
	stopSched()
	if err := <-schedErr; err != nil {
		s.t.Error(err)
	}
	s.cl.Heal()

	// Property 4 for Close, and the hand-offs of the Clients still open.
	for _, sl := range g.slots {
		g.close(sl.c)
	}
	g.close(&genClient{Client: g.probe, name: "probe"})
	g.await(&g.bg, "Closes and release checks")
	for _, p := range g.profiles {
		for _, rc := range p {
			_ = rc.Close()
		}
	}

	g.checkExpiry()
	s.t.Logf("%d calls in %v (%.0f/s) by %d workers over %d keys and %d Clients; %d hand-offs; %d Until checks, %d release checks\n%s\nschedule: %s",
		g.ops.Load(), ran.Round(time.Millisecond), float64(g.ops.Load())/ran.Seconds(), genWorkers, len(g.keys),
		g.nclients, g.handOffs.Load(), g.leaseChecks.Load(), g.relChecks.Load(), &g.tally, g.sched)
	g.report()
	// Property 5. The proxy's own goroutines may outlive a connection (see
	// TestMain); that no client connection outlives its Client is checked
	// on the sockets instead.
	for wait := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) { // sockets close asynchronously
		n, ok := s.cl.OpenConns()
		if !ok || n == 0 {
			break
		}
		if time.Now().After(wait) {
			s.t.Errorf("seed %d: %d connections to the masters are still open after every Client and go-redis client closed", s.seed, n)
			break
		}
	}
	leakcheck.VerifyNone(s.t, leaks,
		// The process-exit watcher of each master the schedule restarted.
		"github.com/redlock-go/redlock/internal/redistest.(*Server).start.func1")
}

// await waits for wg, failing the run with every goroutine's stack if no
// call returned for far longer than any call may take.
func (g *generator) await(wg *sync.WaitGroup, what string) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	stall := genCloseLimit + scaled(10*time.Second)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last, progressed := g.ops.Load(), time.Now()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		if n := g.ops.Load(); n != last {
			last, progressed = n, time.Now()
		} else if time.Since(progressed) > stall {
			var b strings.Builder
			_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
			g.s.t.Fatalf("%s: no call returned for %v (seed %d); goroutines:\n%s", what, stall, g.s.seed, b.String())
		}
	}
}

func (g *generator) newClient(profile int) *genClient {
	c, err := New(g.profiles[profile%len(g.profiles)], WithNodeTimeout(chaosNodeD))
	if err != nil {
		g.s.t.Fatal(err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.nclients++
	return &genClient{Client: c, name: fmt.Sprintf("c%d", g.nclients)}
}

// violation records a failure of property p about key (or none: ""). The
// run stops early after very many.
func (g *generator) violation(p, key, format string, args ...any) {
	v := genViolation{key: key, at: time.Now(), msg: fmt.Sprintf(format, args...)}
	g.s.hist.NoteKey(key, "VIOLATION of %s: %s", p, v.msg)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.counts == nil {
		g.counts, g.violations = map[string]int{}, map[string][]genViolation{}
	}
	g.counts[p]++
	if len(g.violations[p]) < 3 {
		g.violations[p] = append(g.violations[p], v)
	}
}

func (g *generator) failing() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, c := range g.counts {
		n += c
	}
	return n >= 500
}

// stalled arms a dump of every goroutine's stack, taken once per run, for
// a call still running at limit (well past its bound): the state of a hang
// is gone by the time the call returns. Call the result when it does.
func (g *generator) stalled(what string, limit time.Duration) (stop func() bool) {
	return time.AfterFunc(limit, func() {
		if g.dumped.Swap(true) {
			return
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%s still running after %v; goroutines:\n", what, limit)
		_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
		g.mu.Lock()
		g.dump = b.String()
		g.mu.Unlock()
	}).Stop
}

// within checks property 4 for one call about key ("" for none).
func (g *generator) within(key, what string, took, limit time.Duration, err error) {
	if took > limit {
		g.violation(pBound, key, "%s of %q returned after %v, over its bound %v (%v)", what, key, took.Round(time.Millisecond), limit, err)
	}
}

// outcome names err for the tally.
func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrLockLost): // also when the watchdog's Extend found the Client closed
		return "lock lost"
	case errors.Is(err, ErrClosed):
		return "closed"
	case errors.Is(err, errFn):
		return "fn error"
	case errors.Is(err, ErrNotHeld):
		return "not held"
	case errors.Is(err, ErrNotObtained):
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return "not obtained (ctx)"
		}
		return "not obtained"
	}
	return "unexpected"
}

// count tallies a call of kind and checks its outcome is one of allowed;
// on a Client whose Close had returned when the call began, closed says
// which outcomes remain allowed.
func (g *generator) count(kind string, err error, afterClose bool, allowed, closed []string) string {
	g.ops.Add(1)
	o := outcome(err)
	g.tally.Add(kind, o)
	if afterClose {
		allowed = closed
	}
	if !slices.Contains(allowed, o) {
		if afterClose {
			g.violation(pClosed, "", "%s on a closed Client: %v, want one of %v", kind, err, allowed)
		} else {
			g.violation(pOutcome, "", "%s: unexpected outcome %q: %v", kind, o, err)
		}
	}
	return o
}

var (
	acquireOutcomes = []string{"ok", "not obtained", "not obtained (ctx)", "closed"}
	extendOutcomes  = []string{"ok", "not obtained", "not obtained (ctx)", "not held", "closed"}
	unlockOutcomes  = []string{"ok", "not held", "closed"}
	closedOutcomes  = []string{"closed"}
	closedLockOps   = []string{"closed", "not held"} // Extend or Unlock of an expired or released lock says so first
)

// ttl draws a TTL log-uniformly in [genMinTTL, genMaxTTL].
func (g *generator) ttl(rng *rand.Rand) time.Duration {
	return logUniform(rng, genMinTTL, genMaxTTL)
}

func logUniform(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return time.Duration(float64(lo) * math.Pow(float64(hi)/float64(lo), rng.Float64()))
}

func (g *generator) work(rng *rand.Rand) time.Duration {
	return time.Duration(rng.Int64N(int64(genWork)))
}

// callCtx is a context for TryLock, Extend and Unlock: mostly none, now and
// then one that ends during the call or has already ended.
func callCtx(rng *rand.Rand) (context.Context, context.CancelFunc) {
	switch r := rng.IntN(20); {
	case r < 2:
		ctx, cancel := context.WithCancel(bg)
		cancel()
		return ctx, cancel
	case r < 5:
		return context.WithTimeout(bg, time.Duration(rng.Int64N(int64(chaosNodeD))))
	}
	return context.WithCancel(bg)
}

// waitCtx is a context for Lock and Do's wait: already ended, short
// (within a node deadline), or long enough to wait through a release.
func waitCtx(rng *rand.Rand, extra time.Duration) (context.Context, context.CancelFunc) {
	var d time.Duration
	switch r := rng.IntN(20); {
	case r < 2:
	case r < 6:
		d = time.Duration(rng.Int64N(int64(chaosNodeD)))
	default:
		d = logUniform(rng, chaosNodeD, scaled(800*time.Millisecond))
	}
	if d == 0 {
		ctx, cancel := context.WithCancel(bg)
		cancel()
		return ctx, cancel
	}
	return context.WithTimeout(bg, d+extra)
}

func (g *generator) worker(w int) {
	rng := rand.New(rand.NewPCG(g.s.seed, uint64(w)+1))
	name := fmt.Sprintf("w%d", w)
	for g.ops.Load() < g.target && !g.failing() {
		// Mostly the worker's own slot, which one other worker shares.
		i := w % genSlots
		if rng.IntN(8) == 0 {
			i = rng.IntN(genSlots)
		}
		sl := g.slots[i]
		sl.mu.Lock()
		gc := sl.c
		sl.mu.Unlock()
		key := g.keys[rng.IntN(genShared)]
		if rng.IntN(3) == 0 {
			key = g.keys[genShared+i] // the slot's own
		}
		switch r := rng.IntN(200); {
		case r < 90:
			g.tryLockSession(rng, name, gc, key)
		case r < 150:
			g.lockSession(rng, name, gc, key)
		case r < 199:
			g.doSession(rng, name, gc, key)
		default:
			g.replace(rng)
		}
	}
}

func (g *generator) tryLockSession(rng *rand.Rand, name string, gc *genClient, key string) {
	ttl := g.ttl(rng)
	ctx, cancel := callCtx(rng)
	health := g.sched.Health()
	afterClose := gc.closed.Load()
	start := time.Now()
	stop := g.stalled("TryLock", genOpLimit+genStall)
	l, err := gc.TryLock(ctx, key, ttl)
	took := time.Since(start)
	stop()
	cancel()
	g.count("TryLock", err, afterClose, acquireOutcomes, closedOutcomes)
	g.within(key, "TryLock", took, genOpLimit, err)
	if err == nil {
		g.held(rng, name+"/"+gc.name, "TryLock", ttl, gc, l, health)
	}
}

func (g *generator) lockSession(rng *rand.Rand, name string, gc *genClient, key string) {
	ttl := g.ttl(rng)
	ctx, cancel := waitCtx(rng, 0)
	deadline, _ := ctx.Deadline()
	health := g.sched.Health()
	afterClose := gc.closed.Load()
	stop := g.stalled("Lock", max(time.Until(deadline), 0)+genWaitLimit+genStall)
	l, err := gc.Lock(ctx, key, ttl)
	returned := time.Now()
	stop()
	cancel()
	g.count("Lock", err, afterClose, acquireOutcomes, closedOutcomes)
	if !deadline.IsZero() {
		g.within(key, "Lock", returned.Sub(deadline), genWaitLimit, err)
	}
	if err == nil {
		g.held(rng, name+"/"+gc.name, "Lock", ttl, gc, l, health)
	}
}

// held is what a holder does with a lock: a few steps of work, Extends
// and property-2 checks, then Unlock (alone or racing an Extend), or
// rarely nothing, letting a short lock expire.
func (g *generator) held(rng *rand.Rand, holder, how string, ttl time.Duration, gc *genClient, l *Lock, health chaos.Health) {
	x := g.s.hist.Acquired(holder, l.Key(), l.Token(), l.Until())
	g.s.hist.NoteKey(l.Key(), "%s %s %.8s (%v): Until %+v", holder, how, l.Token(), ttl, time.Until(l.Until()).Round(time.Millisecond))
	if rng.IntN(8) == 0 {
		g.checkLease(l, "after the acquisition")
	}
	if rng.IntN(16) == 0 {
		g.strike(rng, l.Key())
	}
	for steps := rng.IntN(4); steps > 0 && time.Now().Before(l.Until()); steps-- {
		switch r := rng.IntN(10); {
		case r < 3:
			x.Section(g.work(rng))
		case r < 7:
			what := g.extend(rng, gc, l, x, "Extend")
			if rng.IntN(3) == 0 {
				g.checkLease(l, "after "+what)
			}
		case r < 9:
			g.checkLease(l, "after "+g.extendPair(rng, gc, l, x))
		default:
			g.checkLease(l, "while held")
		}
	}
	switch r := rng.IntN(20); {
	case r == 0 && time.Until(l.Until()) < scaled(250*time.Millisecond):
		g.s.hist.NoteKey(l.Key(), "%s abandons %.8s", holder, l.Token())
	case r < 4:
		// Either may go first, by up to about one round: an Extend that
		// finishes before Unlock begins succeeds.
		x.Releasing()
		extendFirst := rng.IntN(2) == 0
		stagger := time.Duration(rng.Int64N(int64(scaled(2 * time.Millisecond))))
		r2 := rand.New(rand.NewPCG(rng.Uint64(), 0))
		done := make(chan struct{})
		go func() {
			defer close(done)
			if !extendFirst {
				time.Sleep(stagger) // Unlock first
			}
			g.extend(r2, gc, l, x, "Extend (racing Unlock)")
		}()
		if extendFirst {
			time.Sleep(stagger) // Extend first
		}
		g.unlock(rng, holder, gc, l, health, "Unlock (racing Extend)")
		<-done
	default:
		x.Releasing()
		g.unlock(rng, holder, gc, l, health, "Unlock")
	}
}

// extend runs one Extend of l to a random TTL, and describes it.
func (g *generator) extend(rng *rand.Rand, gc *genClient, l *Lock, x *chaos.Hold, kind string) string {
	ttl := g.ttl(rng)
	ctx, cancel := callCtx(rng)
	afterClose := gc.closed.Load()
	start := time.Now()
	left := l.Until().Sub(start)
	stop := g.stalled(kind, genOpLimit+genStall)
	err := l.Extend(ctx, ttl)
	took := time.Since(start)
	stop()
	cancel()
	until := l.Until()
	x.Told(until, time.Now())
	o := g.count(kind, err, afterClose, extendOutcomes, closedLockOps)
	g.within(l.Key(), kind, took, genOpLimit, err)
	g.s.hist.NoteKey(l.Key(), "%s %.8s (%v): %s, Until now %+v", kind, l.Token(), ttl, o, time.Until(until).Round(time.Millisecond))
	return fmt.Sprintf("Extend(%v) with %v left: %s", ttl.Round(time.Millisecond), left.Round(time.Millisecond), o)
}

// strike lands a fault while a lock is held, where it changes what its
// Extends and its Unlock (a hand-off, a release) meet: most often a master
// that answers OOM to the hand-off's SET, or no longer lets the user
// publish, or answers late.
func (g *generator) strike(rng *rand.Rand, key string) {
	f := chaos.OutOfMemory
	switch rng.IntN(4) {
	case 0:
		f = chaos.ChannelsRevoked
	case 1:
		f = chaos.LateReplies
	}
	i, err := g.sched.Strike(f, rng)
	if err != nil {
		g.violation(pOutcome, "", "the schedule could not strike: %v", err)
	}
	if i >= 0 {
		g.s.hist.NoteKey(key, "strike: node %d %s while %q is held", i, f, key)
		g.tally.Add("strike", f.String())
	}
}

// extendPair runs two Extends with random TTLs on l at once, and
// describes them.
func (g *generator) extendPair(rng *rand.Rand, gc *genClient, l *Lock, x *chaos.Hold) string {
	r1, r2 := rand.New(rand.NewPCG(rng.Uint64(), 1)), rand.New(rand.NewPCG(rng.Uint64(), 2))
	stagger := time.Duration(rng.Int64N(int64(time.Millisecond)))
	var wg sync.WaitGroup
	var d1, d2 string
	wg.Add(2)
	go func() { defer wg.Done(); d1 = g.extend(r1, gc, l, x, "Extend (pair)") }()
	go func() {
		defer wg.Done()
		time.Sleep(stagger) // who goes first
		d2 = g.extend(r2, gc, l, x, "Extend (pair)")
	}()
	wg.Wait()
	return d1 + " and, concurrently, " + d2
}

func (g *generator) unlock(rng *rand.Rand, holder string, gc *genClient, l *Lock, health chaos.Health, kind string) {
	ctx, cancel := callCtx(rng) // Unlock sends its deletes even with ctx ended
	afterClose := gc.closed.Load()
	handOffs := gc.cfg.test.handOffs.Load()
	start := time.Now()
	stop := g.stalled(kind, genUnlockLimit+genStall)
	err := l.Unlock(ctx)
	took := time.Since(start)
	stop()
	cancel()
	o := g.count(kind, err, afterClose, unlockOutcomes, closedLockOps)
	g.within(l.Key(), kind, took, genUnlockLimit, err)
	if gc.cfg.test.handOffs.Load() != handOffs {
		o += ", a hand-off by its Client meanwhile"
	}
	g.s.hist.NoteKey(l.Key(), "%s %s %.8s: %s (%v)", holder, kind, l.Token(), o, err)
	if !errors.Is(err, ErrClosed) {
		g.checkRelease(l.Key(), l.Token(), health, holder, start)
	}
}

// The kinds of Do's fn.
const (
	fnNil   = "Do (fn ok)"
	fnErr   = "Do (fn error)"
	fnPanic = "Do (fn panics)"
	fnLong  = "Do (fn outlives the TTL)"
)

func (g *generator) doSession(rng *rand.Rand, name string, gc *genClient, key string) {
	ttl := g.ttl(rng)
	var kind string
	var length time.Duration // fn's work
	switch r := rng.IntN(20); {
	case r < 8:
		kind = fnNil
	case r < 13:
		kind = fnErr
	case r < 16:
		kind = fnPanic
	default:
		kind = fnLong
		ttl = logUniform(rng, genMinTTL, 2*genMinTTL)
		length = time.Duration(float64(ttl) * (1.2 + 1.3*rng.Float64()))
	}
	// fn's context is a child of ctx: leave a long fn its time after the
	// wait.
	var extra time.Duration
	if length > 0 {
		extra = length + scaled(300*time.Millisecond)
	}
	ctx, cancel := waitCtx(rng, extra)
	defer cancel()
	deadline, _ := ctx.Deadline()
	work := g.work(rng)
	afterClose := gc.closed.Load()
	holder := name + "/" + gc.name + "/do"
	var ran, returned time.Time
	stop := g.stalled(kind+" wait", max(time.Until(deadline), 0)+genWaitLimit+genStall)
	fn := func(fctx context.Context) error {
		ran = time.Now()
		stop()
		defer func() { returned = time.Now() }()
		// The window ends with fn's context, or when fn returns; a context
		// already done means the lock is not to be trusted: no window.
		var x *chaos.Hold
		if fctx.Err() == nil {
			x = g.s.hist.Acquired(holder, key, "do", ran.Add(time.Hour))
			stop := context.AfterFunc(fctx, x.Releasing)
			defer func() {
				x.Releasing()
				stop()
			}()
			x.SectionWhile(fctx.Done(), work)
		}
		switch kind {
		case fnErr:
			return errFn
		case fnPanic:
			panic(errPanic)
		case fnLong:
			tick := time.NewTicker(max(ttl/8, time.Millisecond))
			defer tick.Stop()
			for x != nil && time.Since(ran) < length {
				select {
				case <-fctx.Done():
					return nil
				case <-tick.C:
				}
				x.SectionWhile(fctx.Done(), work/4)
			}
		}
		return nil
	}
	var err error
	panicked := false
	func() {
		defer func() {
			if r := recover(); r != nil {
				if r != errPanic { //nolint:errorlint // the value fn panicked with, not an error chain
					panic(r)
				}
				panicked = true
			}
		}()
		err = gc.Do(ctx, key, ttl, fn)
	}()
	done := time.Now()
	stop()

	g.ops.Add(1)
	o := outcome(err)
	if panicked {
		o = "panicked"
	}
	g.tally.Add(kind, o)
	allowed := []string{"not obtained", "not obtained (ctx)", "closed", "lock lost"}
	switch kind {
	case fnNil, fnLong:
		allowed = append(allowed, "ok")
	case fnErr:
		allowed = append(allowed, "fn error")
	case fnPanic:
		allowed = append(allowed, "panicked")
	}
	if afterClose {
		allowed = closedOutcomes
	}
	if !slices.Contains(allowed, o) {
		g.violation(pOutcome, key, "%s: outcome %q, want one of %v: %v", kind, o, allowed, err)
	}
	if ran.IsZero() != (o == "not obtained" || o == "not obtained (ctx)" || o == "closed") {
		g.violation(pOutcome, key, "%s: %q but fn ran: %v", kind, o, !ran.IsZero())
	}
	if ran.IsZero() {
		if !deadline.IsZero() {
			g.within(key, kind+" without the lock", done.Sub(deadline), genWaitLimit, err)
		}
		return
	}
	if !deadline.IsZero() {
		g.within(key, kind+" wait", ran.Sub(deadline), genWaitLimit, err)
	}
	g.within(key, kind+" after fn", done.Sub(returned), genAfterFn, err)
}

// replace closes a Client with calls in flight, in the background, and
// puts a new one in its slot.
func (g *generator) replace(rng *rand.Rand) {
	i := rng.IntN(len(g.slots))
	sl := g.slots[i]
	next := g.newClient(rng.IntN(len(g.profiles)))
	sl.mu.Lock()
	old := sl.c
	sl.c = next
	sl.mu.Unlock()
	// Now and then a lock of the closing Client outlives its Close (Close
	// releases nothing): its validity ends on its own, and a Lock of its
	// key after Close must not wait for that.
	var kept string
	if rng.IntN(3) == 0 {
		key := g.keys[genShared+i]
		ctx, cancel := context.WithTimeout(bg, chaosNodeD)
		l, err := old.Lock(ctx, key, genOpLimit+scaled(200*time.Millisecond))
		cancel()
		g.count("Lock", err, false, acquireOutcomes, nil)
		if err == nil {
			g.s.hist.Acquired(old.name+"/kept", key, l.Token(), l.Until())
			g.s.hist.NoteKey(key, "%s keeps %.8s across its Close", old.name, l.Token())
			kept = key
		}
	}
	g.s.hist.Note("closing Client %s, replaced by %s", old.name, next.name)
	seed := rng.Uint64()
	g.bg.Add(1)
	go func() {
		defer g.bg.Done()
		g.close(old)
		g.afterClose(rand.New(rand.NewPCG(seed, 3)), old, kept)
	}()
}

// close closes gc, checking property 4 for Close.
func (g *generator) close(gc *genClient) {
	start := time.Now()
	err := gc.Close()
	took := time.Since(start)
	gc.closed.Store(true)
	g.handOffs.Add(gc.cfg.test.handOffs.Load())
	g.count("Close", err, false, []string{"ok"}, nil)
	g.within("", "Close", took, genCloseLimit, err)
}

// afterClose makes calls on a closed Client: each must return ErrClosed at
// once, also a Lock of a key another worker still holds through it.
func (g *generator) afterClose(rng *rand.Rand, gc *genClient, kept string) {
	for _, key := range g.keys {
		// Time enough to wait behind a holder of the closed Client, which
		// a Lock after Close must not do.
		ctx, cancel := context.WithTimeout(bg, 2*genMaxTTL)
		start := time.Now()
		var err error
		op := rng.IntN(3)
		if key == kept {
			op = 1
		}
		switch op {
		case 0:
			_, err = gc.TryLock(ctx, key, g.ttl(rng))
		case 1:
			_, err = gc.Lock(ctx, key, g.ttl(rng))
		case 2:
			err = gc.Do(ctx, key, g.ttl(rng), func(context.Context) error {
				g.violation(pClosed, key, "Do on a closed Client ran fn")
				return nil
			})
		}
		took := time.Since(start)
		cancel()
		g.count("call after Close", err, true, nil, closedOutcomes)
		g.within(key, "call after Close", took, genOpLimit, err)
	}
}

// checkLease checks property 2 for l, which no other call is using: a
// majority of the masters keeps l's token at least until l.Until(). A
// master counts against it if its key is gone, holds another token, or
// expires before Until (reply time + PTTL + 1 ms for PTTL's rounding);
// masters that cannot be read (paused, down) count neither way.
func (g *generator) checkLease(l *Lock, when string) {
	until := l.Until()
	if !time.Now().Before(until) {
		return
	}
	g.leaseChecks.Add(1)
	nodes := g.s.cl.Nodes
	seen := make([]string, len(nodes))
	against := make([]bool, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(bg, genLeaseWait)
			defer cancel()
			v, ttl, at, err := n.Lease(ctx, l.Key())
			switch {
			case err != nil:
				seen[i] = "unread"
			case v != l.Token():
				against[i] = at.Before(until)
				seen[i] = fmt.Sprintf("%.8q", v)
			case ttl == -1: // no expiry at all: property 3's business
				seen[i] = "ours, no expiry"
			default:
				against[i] = at.Add(ttl + time.Millisecond).Before(until)
				seen[i] = fmt.Sprintf("ours until %+v", time.Until(at.Add(ttl)).Round(time.Millisecond))
			}
		}()
	}
	wg.Wait()
	n := 0
	for _, a := range against {
		if a {
			n++
		}
	}
	if n > len(nodes)-quorum(len(nodes)) {
		g.violation(pUntil, l.Key(), "Until %+v of %.8s on %q %s is later than its keys' expiry on %d masters: %v",
			time.Until(until).Round(time.Millisecond), l.Token(), l.Key(), when, n, seen)
	}
}

// checkRelease checks property 6 after an Unlock that began at start:
// once every delete it sends has had its node deadline (two rounds: a
// hand-off, then the release), on the masters that stayed up and reachable
// and answered every command that carried the token. (Where one went
// unanswered, a late SET may land after its release and stay until its
// TTL: a documented limitation, bounded by property 3.) A key still there
// is read again a little later, so that a delete merely slow to start is
// not taken for a missing one; a key that expired meanwhile proves nothing.
func (g *generator) checkRelease(key, token string, health chaos.Health, holder string, start time.Time) {
	clean := func() []int {
		var out []int
		for i, up := range g.sched.Reachable(health) {
			if up && g.calls.Settled(token, i) {
				out = append(out, i)
			}
		}
		return out
	}
	kept := func(i int) (bool, time.Duration) {
		ctx, cancel := context.WithTimeout(bg, genLeaseWait)
		defer cancel()
		v, ttl, _, err := g.s.cl.Nodes[i].Lease(ctx, key)
		return err == nil && v == token, ttl
	}
	g.bg.Add(1)
	time.AfterFunc(time.Until(start.Add(2*chaosNodeD+scaled(25*time.Millisecond))), func() {
		defer g.bg.Done()
		g.relChecks.Add(1)
		var suspects []int
		for _, i := range clean() {
			if ok, _ := kept(i); ok {
				suspects = append(suspects, i)
			}
		}
		if len(suspects) == 0 {
			return
		}
		time.Sleep(chaosNodeD) // a delete slow to start
		for _, i := range suspects {
			if !slices.Contains(clean(), i) {
				continue
			}
			if ok, ttl := kept(i); ok {
				g.violation(pRelease, key, "%s's Unlock of %.8s on %q left its key on master %d (up and answering every command since the lock was requested; now %v) for another %v",
					holder, token, key, i, g.sched.Health().Faults()[i], ttl)
			}
		}
	})
}

// prober checks property 7 now and then: while a majority and one more
// of the masters are up, reachable and not out of memory, one of three
// TryLocks of a free key (a fresh one each, so that an attempt's clean-up
// never stands in the next one's way) must succeed.
func (g *generator) prober(ctx context.Context) {
	rng := rand.New(rand.NewPCG(g.s.seed, 100))
	usable := func(faults []chaos.Fault) int {
		n := 0
		for _, f := range faults {
			if f == chaos.Healthy || f == chaos.ChannelsRevoked {
				n++
			}
		}
		return n
	}
	need := quorum(len(g.s.cl.Nodes)) + 1
	select { // the run's start: dials, script loads and AOF rewrites
	case <-ctx.Done():
		return
	case <-time.After(scaled(500 * time.Millisecond)):
	}
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(rng.Int64N(int64(scaled(200 * time.Millisecond))))):
		}
		health := g.sched.Health()
		if usable(g.sched.Since(health)) < need {
			continue
		}
		var errs []error
		for try := range 3 {
			l, err := g.probe.TryLock(bg, fmt.Sprintf("chaos:gen:probe%d.%d", i, try), genMinTTL)
			if err == nil {
				_ = l.Unlock(bg)
				break
			}
			errs = append(errs, err)
		}
		if usable(g.sched.Since(health)) < need { // a fault came meanwhile: no verdict
			continue
		}
		g.tally.Add("probe TryLock", map[bool]string{true: "ok", false: "failed"}[len(errs) < 3])
		if len(errs) == 3 {
			g.violation(pProgress, "", "3 TryLocks of free keys failed while the masters were %v: %v", health.Faults(), errs)
		}
	}
}

// checkExpiry checks property 3: with every Client closed, no lock key
// lives longer than the largest TTL, and after that long none is left.
func (g *generator) checkExpiry() {
	start := time.Now()
	for i, keys := range g.s.cl.KeyTTLs(g.s.t, "chaos:gen:*") {
		for k, ttl := range keys {
			if ttl < 0 || ttl > genMaxTTL {
				g.violation(pExpiry, k, "master %d keeps %q for %v, longer than the largest TTL %v", i, k, ttl, genMaxTTL)
			}
		}
	}
	time.Sleep(time.Until(start.Add(genMaxTTL + scaled(50*time.Millisecond)))) // every TTL runs out
	for i, keys := range g.s.cl.KeyTTLs(g.s.t, "chaos:gen:*") {
		for k, ttl := range keys {
			g.violation(pExpiry, k, "master %d still keeps %q (PTTL %v) a largest TTL after the clients closed", i, k, ttl)
		}
	}
}

// report fails the run for every property that failed, with the seed and
// the part of the history that shows it, and for every kind of call that
// never succeeded.
func (g *generator) report() {
	t, seed := g.s.t, g.s.seed
	overlaps := g.s.hist.Overlaps()
	for i, o := range overlaps {
		if i == 3 {
			t.Errorf("… %d overlaps in all", len(overlaps))
			break
		}
		t.Errorf("SAFETY VIOLATION (seed %d), property %s: %v\nhistory of %q around it:\n%s", seed, pOverlap, o, o.Key,
			g.s.hist.Excerpt(o.Key, o.At.Add(-genMaxTTL), o.At.Add(o.By+chaosSlack)))
	}
	if value, completed := g.s.hist.Counter(); value != completed {
		t.Errorf("SAFETY VIOLATION (seed %d): counter %d after %d completed sections", seed, value, completed)
	}
	g.mu.Lock()
	for _, p := range slices.Sorted(maps.Keys(g.counts)) {
		t.Errorf("seed %d: property %s: %d violations; the first:", seed, p, g.counts[p])
		for i, v := range g.violations[p] {
			if i == 0 && v.key != "" {
				t.Errorf("  %s\nhistory of %q before it:\n%s", v.msg, v.key, g.s.hist.Excerpt(v.key, v.at.Add(-genMaxTTL), v.at))
				continue
			}
			t.Errorf("  %s", v.msg)
		}
	}
	g.mu.Unlock()
	success := map[string]string{
		"TryLock": "ok", "Lock": "ok", "Extend": "ok", "Extend (pair)": "ok", "Extend (racing Unlock)": "not held", // Unlock nearly always wins
		"Unlock": "ok", "Unlock (racing Extend)": "ok", fnNil: "ok", fnErr: "fn error", fnPanic: "panicked",
		fnLong: "ok", "Close": "ok", "call after Close": "closed", "probe TryLock": "ok",
	}
	for _, kind := range slices.Sorted(maps.Keys(success)) {
		if g.tally.Count(kind, success[kind]) == 0 {
			t.Errorf("seed %d: no %s ever succeeded (%d calls): the run did not test it", seed, kind, g.tally.Calls(kind))
		}
	}
	if g.handOffs.Load() == 0 {
		t.Errorf("seed %d: no hand-off: the run did not test them", seed)
	}
	g.mu.Lock()
	if g.dump != "" {
		t.Logf("%s", g.dump)
	}
	g.mu.Unlock()
	if t.Failed() {
		t.Logf("replay the schedule with REDLOCK_CHAOS_SEED=%d", seed)
	}
}
