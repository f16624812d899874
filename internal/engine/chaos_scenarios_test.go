// The fault suite's scripted scenarios, 1 to 21: one fault each, or a
// positive control the checker must catch (see chaos_test.go); and 21,
// fencing tokens under the faults that keep the masters' data.

package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/chaos"
)

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

	{"10_restart_without_persistence_quarantined", func(s *scenario) {
		// A holds nodes 0–2 of an established deployment; node 2 crashes
		// and comes back empty at once. With the default options its
		// yes is quarantined (it is younger than the others' memories):
		// B, a Client made after the restart, cannot take nodes 2–4.
		s.established()
		a := s.client(WithRestartGuard(DefaultRestartGuard)) // the default, which s.client shortens
		ttl := scaled(3 * time.Second)
		s.holdOnly(a, "A", ttl, 0, 1, 2)
		s.fault(s.cl.Nodes[2].RestartEmpty())
		s.note("node 2 restarted without persistence")
		b := s.client(WithRestartGuard(DefaultRestartGuard))
		lb, err := b.TryLock(bg, s.key, ttl)
		if err == nil {
			s.acquired("B", lb)
			s.t.Fatalf("B got the lock while A still counts on node 2: %q", s.cl.Values(s.t, s.key))
		}
		if !errors.Is(err, ErrNodeQuarantined) {
			s.t.Fatalf("B: %v, want ErrNotObtained naming node 2 quarantined", err)
		}
		s.assertSafe()
	}},

	{"10b_control_restart_guard_off", func(s *scenario) {
		// Known unsafe: the same with the restart guard off; B takes
		// nodes 2–4 while A still holds. The checker must catch it.
		s.established()
		a, b := s.client(WithRestartGuard(0)), s.client(WithRestartGuard(0))
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
		// Node 3 this time: node 2, restarted empty above, is in quarantine
		// for the guard (a minute), however long it was down.
		s.fault(s.cl.Nodes[3].EnableAOF())
		ttl := scaled(3 * time.Second)
		la, xa := s.holdOnly(a, "A2", ttl, 0, 1, 3)
		s.cl.Nodes[3].RestartAOF()
		s.note("node 3 restarted from its AOF")
		if v := s.cl.Values(s.t, s.key)[3]; v != la.Token() {
			s.t.Fatalf("node 3 lost A's key across an AOF restart: %q", v)
		}
		if lb, err := b.TryLock(bg, s.key, ttl); err == nil {
			s.acquired("B2", lb)
		} else if !errors.Is(err, ErrNotObtained) {
			s.t.Fatalf("B after the AOF restart: %v", err)
		}
		// (c) The node restarted from its AOF kept its memory marker: it
		// is not quarantined, and counts at once where it is needed.
		xa.Releasing()
		_ = la.Unlock(bg)
		settle(a)
		s.cl.Nodes[0].Admin.Set(bg, s.key, "other", time.Minute)
		s.cl.Nodes[2].Admin.Set(bg, s.key, "other", time.Minute)
		lc, err := b.TryLock(bg, s.key, ttl) // nodes 1, 3 and 4
		if err != nil {
			s.t.Fatalf("C, which needs node 3 restarted from its AOF: %v", err)
		}
		s.acquired("C", lc).Releasing()
		_ = lc.Unlock(bg)
		s.assertSafe()
	}},

	{"12_control_clock_jump_in_majority", func(s *scenario) {
		// Known unsafe: A holds nodes 0–2; node 2's clock jumps forward
		// past A's TTL, so Redis expires A's key there; B takes 2–4.
		// The guard off: the jumped node's memory looks older than the
		// others' by the jump, and would quarantine them (a fresh
		// deployment's young votes), hiding what this control shows.
		a, b := s.client(WithRestartGuard(0)), s.client(WithRestartGuard(0))
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
			s.fault(s.cl.Nodes[i].DropReplyThenClose()) // once the release ran there
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

	{"21_fence_monotonic_under_faults", fenceUnderFaults},

	{"22_fresh_deployment_no_stall", func(s *scenario) {
		// Five new masters: every memory marker is born in the first
		// round, none remembers further back, and the first TryLock
		// succeeds at once.
		s.fresh()
		c := s.client()
		start := time.Now()
		l, err := c.TryLock(bg, s.key, chaosTTL)
		if err != nil {
			s.t.Fatalf("first TryLock on a fresh deployment: %v", err)
		}
		if took := time.Since(start); took > chaosNodeD+scaled(50*time.Millisecond) {
			s.t.Fatalf("first TryLock took %v", took)
		}
		s.acquired("A", l).Releasing()
		_ = l.Unlock(bg)
		settle(c)
		// A minority down changes nothing (guard.go, G2): the young
		// masters that answer are a majority, and none remembers further
		// back. The strict guard (G3) cannot tell, and says so.
		s.cl.Nodes[4].Server.Kill()
		s.note("node 4 killed")
		l, err = c.TryLock(bg, s.key, chaosTTL)
		if err != nil {
			s.t.Fatalf("TryLock on a fresh deployment with a master down: %v", err)
		}
		s.acquired("B", l).Releasing()
		_ = l.Unlock(bg)
		settle(c)
		strict := s.client(WithStrictRestartGuard())
		if _, err := strict.TryLock(bg, s.key, chaosTTL); !errors.Is(err, ErrNodeQuarantined) {
			s.t.Fatalf("strict guard: TryLock on a fresh deployment with a master down: %v, want ErrNodeQuarantined", err)
		}
		settle(strict)
		s.assertSafe()
	}},

	{"23_rolling_restarts_under_do", rollingRestarts},

	{"27_processes_linearizable", func(s *scenario) { s.processes(4) }},
	{"27b_processes_without_the_lock", func(s *scenario) { s.processesUnlocked(4) }},
}

// jump is a forward clock jump that outlives a TTL: whole seconds, since
// libfaketime reads its offset in seconds.

// Scenario 21's shape: fenceClients Clients (processes), fenceWorkers
// goroutines on each, over fenceShared keys every Client takes and one per
// Client that only its goroutines take, where Unlock hands the lock to the
// next of them (it does not while another Client wants the key).
const (
	fenceClients = 3
	fenceWorkers = 3
	fenceShared  = 2
)

// fenceCounts is what scenario 21's holders did.
type fenceCounts struct {
	lockFailed, fenceFailed  atomic.Int64 // Lock, or a holder's first Fence, did not succeed
	again, paused, abandoned atomic.Int64 // holders that asked twice, slept past Until, let the lock expire
	staleAccepted            atomic.Int64 // a paused holder's write no later holder had overtaken
	strikes                  atomic.Int64
}

// fenceUnderFaults is scenario 21: holders on several Clients take a few
// keys, call Fence, and write through a chaos.FenceStore (the resource the
// fences protect), then release; some let the lock expire, and some sleep
// past Until before writing, as a paused process would, so that the store
// must refuse them once a later holder wrote. Meanwhile a seeded schedule
// injects the faults a fence must survive, on at most two masters at a time
// and now and then on a majority: pauses, kills with a restart from an
// appendfsync-always AOF, black holes, lost and late replies, resets,
// OOM; and holders strike some of these (a kill among them) right after
// their Fence, so that the next holder meets the counters they left.
//
// It checks the fences themselves (chaos.FenceStore.Check): a Fence call
// that began after another's returned gets a higher fence, no two holders
// get the same one, a holder asking again gets the same one, a holder still
// valid is never refused; and Fence is ErrNotHeld after Unlock and past
// Until. The schedule also draws restarts without persistence (KilledEmpty,
// one master at a time), which a fence is not promised to survive, and
// which ScheduleOptions cannot turn off: the store is told of each by
// WatchDataLoss and excuses the pairs of fences it falls between, and only
// those (they are counted). The lock's own windows are checked as in every
// scenario.
func fenceUnderFaults(s *scenario) {
	began := time.Now()
	// Every write is on disk before its reply, so that a kill loses no
	// counter (Redlock spec, "Performance, crash recovery and fsync").
	for _, n := range s.cl.Nodes {
		s.fault(n.EnableAOF())
	}
	ttl := scaled(100 * time.Millisecond)
	length := scaled(3 * time.Second)
	store := chaos.NewFenceStore(s.hist)
	sched := s.cl.NewSchedule(chaos.ScheduleOptions{
		Seed: s.seed, NodeDeadline: chaosNodeD, MaxTTL: ttl, User: chaosUser,
		Pace: scaled(100 * time.Millisecond), MaxFaulty: 2, EpisodeOdds: 0.03, History: s.hist,
	})
	var shared []string
	for i := range fenceShared {
		shared = append(shared, fmt.Sprintf("%s:k%d", s.key, i))
	}
	// Each Client has go-redis clients of its own, as a process would:
	// the first as the ACL user whose channel rights the schedule revokes
	// (a Client refused its notices stops handing locks over), the others
	// as a second service's user, which keeps them.
	clients := make([]*Client, fenceClients)
	for i := range clients {
		user := redis.Options{Username: chaosService, Password: chaosPassword}
		if i == 0 {
			user.Username = chaosUser
		}
		c, err := New(s.cl.Clients(&user), WithNodeTimeout(chaosNodeD))
		if err != nil {
			s.t.Fatal(err)
		}
		s.t.Cleanup(func() { s.cl.Heal(); _ = c.Close() })
		clients[i] = c
	}

	watchCtx, stopWatch := context.WithCancel(bg)
	watched := make(chan struct{})
	go func() { defer close(watched); store.WatchDataLoss(watchCtx, s.cl, sched, time.Millisecond) }()
	schedCtx, stopSched := context.WithCancel(bg)
	schedErr := make(chan error, 1)
	go func() { schedErr <- sched.Run(schedCtx) }()

	var n fenceCounts
	ctx, stop := context.WithCancel(bg)
	var wg sync.WaitGroup
	for ci, c := range clients {
		for w := range fenceWorkers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				keys := append(slices.Clip(shared), fmt.Sprintf("%s:own%d", s.key, ci))
				fenceHolder(ctx, s, c, fmt.Sprintf("c%d.w%d", ci, w), rand.New(rand.NewPCG(s.seed, uint64(ci*fenceWorkers+w)+1)), keys, ttl, store, sched, &n)
			}()
		}
	}
	time.Sleep(length) // the run itself
	stop()
	wg.Wait()
	stopSched()
	if err := <-schedErr; err != nil {
		s.t.Error(err)
	}
	stopWatch()
	<-watched
	s.cl.Heal()

	var handOffs int64
	for _, c := range clients {
		handOffs += c.cfg.test.handOffs.Load()
	}
	st := store.Stats()
	s.t.Logf("%v (run %v): %v; %d Lock calls failed, %d first Fences failed; %d holders asked twice, %d slept past Until (%d of their writes accepted: no later holder had written), %d let the lock expire; %d hand-offs; %d strikes\nschedule: %s",
		time.Since(began).Round(time.Millisecond), length, st, n.lockFailed.Load(), n.fenceFailed.Load(), n.again.Load(), n.paused.Load(),
		n.staleAccepted.Load(), n.abandoned.Load(), handOffs, n.strikes.Load(), sched)
	if vs := store.Check(); len(vs) > 0 {
		v := vs[0]
		from := v.At.Add(-2 * ttl)
		if !v.First.Acquiring.IsZero() && v.First.Acquiring.Before(from) {
			from = v.First.Acquiring
		}
		s.t.Fatalf("FENCE VIOLATION (seed %d): %s\nhistory of %q around the first (faults, holds, fences):\n%s",
			s.seed, store.Report(5), v.Key, s.hist.Excerpt(v.Key, from, v.At.Add(chaosSlack)))
	}
	s.assertSafe()
	// The run must have tested something: fences drawn and compared, a
	// paused holder refused, locks passed by hand-off.
	if least := 100; st.Fences < least || st.Successive == 0 {
		s.t.Fatalf("only %d fences (%d successive pairs checked) in %v: the scenario did not test them (seed %d)", st.Fences, st.Successive, length, s.seed)
	}
	if st.RefusedStale == 0 {
		s.t.Fatalf("the store refused no paused holder's write (%d paused): the scenario did not test fencing (seed %d)", n.paused.Load(), s.seed)
	}
	if handOffs == 0 {
		s.t.Fatalf("no hand-off: the scenario did not test fences across them (seed %d)", s.seed)
	}
}

// fenceHolder is one of scenario 21's workers: until ctx ends, it takes a
// random key of keys (the last, its Client's own, half of the time), gets
// its fence, and writes through store as one of four holders: one that
// writes and releases (after which Fence must say ErrNotHeld); one that
// also asks again (the same fence) and writes twice; one that lets the
// lock expire; one that sleeps past Until before writing (Fence must then
// say ErrNotHeld, and the store refuse the write once a later holder
// wrote).
func fenceHolder(ctx context.Context, s *scenario, c *Client, name string, rng *rand.Rand, keys []string,
	ttl time.Duration, store *chaos.FenceStore, sched *chaos.Schedule, n *fenceCounts) {
	for seq := 0; ctx.Err() == nil; seq++ {
		key := keys[len(keys)-1]
		if rng.IntN(2) > 0 {
			key = keys[rng.IntN(len(keys)-1)]
		}
		holder := fmt.Sprintf("%s#%d", name, seq)
		lctx, cancel := context.WithTimeout(ctx, scaled(time.Second))
		acquiring := time.Now()
		l, err := c.Lock(lctx, key, ttl)
		cancel()
		if err != nil {
			n.lockFailed.Add(1)
			continue
		}
		acquired := time.Now()
		x := s.acquired(holder, l)
		asked := time.Now()
		f, err := l.Fence(bg)
		got := time.Now()
		if err != nil {
			if !errors.Is(err, ErrNotHeld) && !errors.Is(err, ErrNotObtained) {
				s.t.Errorf("%s: Fence: %v, want ErrNotHeld or ErrNotObtained", holder, err)
			}
			n.fenceFailed.Add(1)
			x.Releasing()
			_ = l.Unlock(bg)
			continue
		}
		store.Obtained(chaos.FenceRecord{Key: key, Holder: holder, Fence: f, Acquiring: acquiring, Acquired: acquired, Asked: asked, Got: got})
		if rng.IntN(12) == 0 {
			// A fault right after the fence, on one master: the next
			// holder meets the counters this one left there.
			fault := []chaos.Fault{chaos.Killed, chaos.Killed, chaos.Paused, chaos.LostReplies, chaos.BlackHoled}[rng.IntN(5)]
			if i, err := sched.Strike(fault, rng); err != nil {
				s.t.Errorf("strike: %v", err)
			} else if i >= 0 {
				n.strikes.Add(1)
				s.hist.NoteKey(key, "strike: node %d %s after %s's fence %d", i, fault, holder, f)
			}
		}
		switch r := rng.IntN(20); {
		case r < 1: // paused past its validity, then writes
			n.paused.Add(1)
			// The pause itself: past Until by half a TTL at least, so that
			// the keys expired and a waiter (whose backoff is the library's,
			// not scaled) usually took the key and wrote meanwhile, and the
			// store's refusal of the late write is exercised.
			time.Sleep(time.Until(l.Until()) + ttl/2 + time.Duration(rng.Int64N(int64(ttl/2))))
			if _, err := l.Fence(bg); !errors.Is(err, ErrNotHeld) {
				s.t.Errorf("%s: Fence past Until: %v, want ErrNotHeld", holder, err)
			}
			if store.Write(key, holder, f, l.Until()) {
				n.staleAccepted.Add(1)
			}
			_ = l.Unlock(bg)
		case r < 2: // writes, and lets the lock expire
			n.abandoned.Add(1)
			store.Write(key, holder, f, l.Until())
			x.Section(chaosWork)
		default: // writes (maybe twice, asking again), and releases
			store.Write(key, holder, f, l.Until())
			x.Section(chaosWork)
			if rng.IntN(3) == 0 {
				n.again.Add(1)
				asked := time.Now()
				f2, err := l.Fence(bg)
				switch {
				case err == nil:
					store.Obtained(chaos.FenceRecord{Key: key, Holder: holder, Fence: f2, Acquiring: acquiring, Acquired: acquired, Asked: asked, Got: time.Now()})
					store.Write(key, holder, f2, l.Until())
				case !errors.Is(err, ErrNotHeld): // the validity may have ended meanwhile
					s.t.Errorf("%s: second Fence: %v, want fence %d or ErrNotHeld", holder, err, f)
				}
			}
			x.Releasing()
			_ = l.Unlock(bg)
			if _, err := l.Fence(bg); !errors.Is(err, ErrNotHeld) {
				s.t.Errorf("%s: Fence after Unlock: %v, want ErrNotHeld", holder, err)
			}
		}
	}
}
