// The fault suite's scripted scenarios, 1 to 20: one fault each, or a
// positive control the checker must catch (see chaos_test.go).

package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
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
