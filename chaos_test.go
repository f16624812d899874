package redlock

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
	cl := chaos.Start(t, 5, chaos.Options{ClockNode: chaosClockNode})
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
		n := ld.clients[0].handOffs.Load()
		s.t.Logf("%d hand-offs", n)
		if n == 0 {
			s.t.Fatal("no hand-off: the scenario did not test them")
		}
	}},
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

// commandCalls is how many calls of the named commands (lower case, as
// INFO commandstats spells them) the server has run.
func commandCalls(tb testing.TB, admin *redis.Client, names ...string) int64 {
	tb.Helper()
	info, err := admin.Info(bg, "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		for _, name := range names {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+name+":"); ok {
				var calls int64
				if _, err := fmt.Sscanf(rest, "calls=%d", &calls); err == nil {
					n += calls
				}
			}
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
