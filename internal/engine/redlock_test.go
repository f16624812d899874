package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// TestMain fails a run whose tests passed when a goroutine outlived them.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goroutinesLeft(leakPatience); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// leakPatience is how long goroutines told to stop get to return before
// they count as leaks: on 2 cores under -race that may take seconds, and
// goleak.Find alone waits less than half a second.
const leakPatience = 6 * time.Second

// goroutinesLeft is goleak.Find, asked again for up to patience.
func goroutinesLeft(patience time.Duration, opts ...goleak.Option) error {
	deadline := time.Now().Add(patience)
	for {
		err := goleak.Find(opts...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
	}
}

// noLeaks fails t when goroutinesLeft finds any.
func noLeaks(t testing.TB, opts ...goleak.Option) {
	t.Helper()
	if err := goroutinesLeft(leakPatience, opts...); err != nil {
		t.Error(err)
	}
}

var bg = context.Background()

func TestQuorum(t *testing.T) {
	for n, want := range map[int]int{1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 4} {
		if got := quorum(n); got != want {
			t.Errorf("quorum(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestNewRejectsBadInput(t *testing.T) {
	m := newMinis(t, 2, nil)
	a, b := m.clients[0], m.clients[1]
	sameAddr := redis.NewClient(&redis.Options{Addr: m.servers[0].Addr()})
	defer sameAddr.Close()
	_, port, _ := strings.Cut(m.servers[0].Addr(), ":")
	localhost := redis.NewClient(&redis.Options{Addr: "localhost:" + port})
	defer localhost.Close()
	otherDB := redis.NewClient(&redis.Options{Addr: m.servers[0].Addr(), DB: 3})
	defer otherDB.Close()
	var typedNil *redis.Client

	for _, tc := range []struct {
		name  string
		nodes []redis.UniversalClient
		opts  []Option
		want  string
	}{
		{"no nodes", nil, nil, "no nodes"},
		{"empty slice", []redis.UniversalClient{}, nil, "no nodes"},
		{"nil node", []redis.UniversalClient{a, nil}, nil, "node 1 is nil"},
		{"typed nil node", []redis.UniversalClient{typedNil, a}, nil, "node 0 is nil"},
		{"same client twice", []redis.UniversalClient{a, b, a}, nil, "nodes 0 and 2 are the same server"},
		{"same address twice", []redis.UniversalClient{a, b, sameAddr}, nil, "nodes 0 and 2 are the same server"},
		{"localhost and 127.0.0.1", []redis.UniversalClient{a, localhost}, nil, "same server"},
		{"same server other DB", []redis.UniversalClient{a, otherDB}, nil, "same server"},
		{"nil option", []redis.UniversalClient{a, b}, []Option{nil}, "option 0 is nil"},
		{"zero node timeout", []redis.UniversalClient{a}, []Option{WithNodeTimeout(0)}, "node timeout"},
		{"negative node timeout", []redis.UniversalClient{a}, []Option{WithNodeTimeout(-time.Second)}, "node timeout"},
		{"negative drift", []redis.UniversalClient{a}, []Option{WithDriftFactor(-0.1)}, "drift factor"},
		{"drift of one", []redis.UniversalClient{a}, []Option{WithDriftFactor(1)}, "drift factor"},
		{"NaN drift", []redis.UniversalClient{a}, []Option{WithDriftFactor(math.NaN())}, "drift factor"},
		{"zero retry delay", []redis.UniversalClient{a}, []Option{WithRetryDelay(0, time.Second)}, "retry delay"},
		{"retry max below min", []redis.UniversalClient{a}, []Option{WithRetryDelay(time.Second, time.Millisecond)}, "retry delay"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(tc.nodes, tc.opts...)
			if c != nil || !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("New = %v, %v; want nil, ErrInvalidArgument", c, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

func TestLockRejectsBadInput(t *testing.T) {
	m := newMinis(t, 3, nil)
	c := m.client()
	l := mustLock(t, c, "held", time.Minute)
	var nilCtx context.Context
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"TryLock empty key", func() error { _, err := c.TryLock(bg, "", time.Second); return err }},
		{"TryLock zero ttl", func() error { _, err := c.TryLock(bg, "k", 0); return err }},
		{"TryLock negative ttl", func() error { _, err := c.TryLock(bg, "k", -time.Second); return err }},
		{"TryLock ttl below drift", func() error { _, err := c.TryLock(bg, "k", 2*time.Millisecond); return err }},
		{"TryLock sub-millisecond ttl", func() error { _, err := c.TryLock(bg, "k", 999*time.Microsecond); return err }},
		{"TryLock nil ctx", func() error { _, err := c.TryLock(nilCtx, "k", time.Second); return err }},
		{"Lock empty key", func() error { _, err := c.Lock(bg, "", time.Second); return err }},
		{"Lock zero ttl", func() error { _, err := c.Lock(bg, "k", 0); return err }},
		{"Lock nil ctx", func() error { _, err := c.Lock(nilCtx, "k", time.Second); return err }},
		// Names of the library's own keys: a lock would overwrite them (an
		// adversary pass found the marker reset by a lock on its name).
		{"TryLock of the memory marker", func() error { _, err := c.TryLock(bg, "redlock:memory", time.Second); return err }},
		{"TryLock of a cluster marker", func() error { _, err := c.TryLock(bg, "{k}:redlock-memory", time.Second); return err }},
		{"Lock of a fence counter", func() error { _, err := c.Lock(bg, "k:redlock-fence", time.Second); return err }},
		{"Resume of the memory marker", func() error {
			_, err := c.Resume(bg, "redlock:memory", "00000000-0000-4000-8000-000000000000", time.Second)
			return err
		}},
		{"Extend zero ttl", func() error { return l.Extend(bg, 0) }},
		{"Extend nil ctx", func() error { return l.Extend(nilCtx, time.Second) }},
		{"Unlock nil ctx", func() error { return l.Unlock(nilCtx) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("got %v, want ErrInvalidArgument", err)
			}
		})
	}
	if m.count("k", "") != 3 {
		t.Fatalf("bad input reached the nodes: %q", m.values("k"))
	}
	if m.count("held", l.Token()) != 3 {
		t.Fatalf("bad Extend/Unlock input changed the lock: %q", m.values("held"))
	}
}

// TestTryLockSucceedsIffMajorityFree: all 32 ways of pre-taking five nodes.
func TestTryLockSucceedsIffMajorityFree(t *testing.T) {
	m := newMinis(t, 5, nil)
	checkAllMasks(t, m.client(), m)
}

// TestTryLockReturnsAtMajority holds two of five nodes' requests forever: a
// TryLock that waited for every node would never return.
func TestTryLockReturnsAtMajority(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client(WithNodeTimeout(time.Hour))
	m.block(3)
	m.block(4)
	r := within(t, scaled(5*time.Second), "TryLock with 2 of 5 nodes hung", tryLock(bg, c, "k", time.Minute))
	if r.err != nil {
		t.Fatalf("TryLock: %v", r.err)
	}
}

// TestTryLockFailsAtImpossibleMajority: three nodes refuse at once while two
// hang; the attempt is lost and must not wait for the hung two.
func TestTryLockFailsAtImpossibleMajority(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client(WithNodeTimeout(time.Hour))
	for i := range 3 {
		m.take(i, "k", "other", time.Minute)
	}
	m.block(3)
	m.block(4)
	r := within(t, scaled(5*time.Second), "TryLock with 3 refusals and 2 hung nodes", tryLock(bg, c, "k", time.Minute))
	var qe *QuorumError
	if !errors.Is(r.err, ErrNotObtained) || !errors.As(r.err, &qe) {
		t.Fatalf("TryLock: %v, want ErrNotObtained with a *QuorumError", r.err)
	}
	if qe.Votes != 0 || qe.Quorum != 3 || len(qe.Nodes) != 3 {
		t.Fatalf("QuorumError = %+v, want 0 votes of 3 and the three refusals", qe)
	}
	for _, ne := range qe.Nodes {
		if !errors.Is(ne, ErrNodeRefused) || ne.Addr != m.servers[ne.Node].Addr() {
			t.Fatalf("node error %v: want ErrNodeRefused from %s", ne, m.servers[ne.Node].Addr())
		}
	}
}

// TestNodeDeadlineIsEnforcedByTheLibrary: two nodes hang and one refuses, so
// the outcome needs the deadline. The driver's own read timeout is far
// longer; the attempt must end at our per-node deadline.
// TestUnlockWithRefusedNodesReturnsAtItsDecidingVote: an Unlock does not
// send to the two masters that refused its lock, and counts them as failed;
// one more "not ours" puts a majority out of reach, while two masters hang.
// It must return at that one vote: a round that waited for as many votes as
// a round without skipped masters needs would wait for the hung two.
func TestUnlockWithRefusedNodesReturnsAtItsDecidingVote(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client(WithNodeTimeout(time.Hour))
	for i := range 2 {
		m.take(i, "k", "other", time.Minute)
	}
	l := mustLock(t, c, "k", time.Minute)
	settle(c)                            // the refusals are in
	m.take(2, "k", "third", time.Minute) // not ours: a refusal
	m.block(3)
	m.block(4)
	err := within(t, scaled(5*time.Second), "Unlock with 3 failures and 2 hung nodes", func() error { return l.Unlock(bg) })
	var qe *QuorumError
	if !errors.As(err, &qe) || len(qe.Nodes) != 3 {
		t.Fatalf("Unlock: %v, want a *QuorumError with the three failures", err)
	}
}

func TestNodeDeadlineIsEnforcedByTheLibrary(t *testing.T) {
	for _, ctxTimeouts := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", ctxTimeouts), func(t *testing.T) {
			m := newMinis(t, 5, &redis.Options{ReadTimeout: time.Hour, ContextTimeoutEnabled: ctxTimeouts})
			nodeTimeout := 50 * time.Millisecond
			c := m.client(WithNodeTimeout(nodeTimeout))
			m.take(0, "k", "other", time.Minute)
			m.block(3)
			m.block(4)
			start := time.Now()
			r := within(t, scaled(10*time.Second), "TryLock", tryLock(bg, c, "k", time.Minute))
			took := time.Since(start)
			if !errors.Is(r.err, ErrNotObtained) || !errors.Is(r.err, ErrNodeTimeout) {
				t.Fatalf("TryLock: %v, want ErrNotObtained with ErrNodeTimeout", r.err)
			}
			if errors.Is(r.err, context.DeadlineExceeded) {
				t.Fatalf("a node deadline must not look like the caller's: %v", r.err)
			}
			if took < nodeTimeout || took > nodeTimeout+scaled(time.Second) {
				t.Fatalf("TryLock took %v, want about the node timeout %v", took, nodeTimeout)
			}
		})
	}
}

// TestLateReplyAfterFailedAttemptIsReleased: a hung node answers yes after
// the attempt was lost; the key its late SET left must be deleted.
func TestLateReplyAfterFailedAttemptIsReleased(t *testing.T) {
	m := newMinis(t, 5, &redis.Options{ReadTimeout: time.Hour})
	c := m.client(WithNodeTimeout(20 * time.Millisecond))
	warmScripts(t, c)
	m.take(2, "k", "other", time.Minute)
	m.take(3, "k", "other", time.Minute)
	arrived, unblock := m.block(4)
	if _, err := c.TryLock(bg, "k", time.Minute); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock: %v, want ErrNotObtained", err)
	}
	<-arrived // the SET is queued at node 4
	unblock() // ... and now lands there, after the attempt was decided
	settle(c)
	if got := m.values("k"); got[0] != "" || got[1] != "" || got[4] != "" {
		t.Fatalf("keys left behind by a failed attempt: %q", got)
	}
}

// givenUp reports whether the lock gave the node up (abandon).
func (h *hold) givenUp() bool { return !h.Send() }

// warmScripts loads the scripts on every node, so that a held EVALSHA runs
// when it is let go, instead of failing NOSCRIPT and leaving its EVAL to a
// ctx that has ended: a late reply must be a real one. With a short node
// timeout under -race, the first EVAL (the in-process master compiles the
// script) may miss its deadline; the master keeps the script, and the next
// attempt finds it.
func warmScripts(t *testing.T, c *Client) {
	t.Helper()
	end := time.Now().Add(scaled(5 * time.Second))
	for {
		l, err := c.TryLock(bg, "warm-up", time.Minute)
		if err == nil {
			if err := l.Unlock(bg); err != nil {
				t.Fatal(err)
			}
			settle(c)
			return
		}
		settle(c) // the failed attempt's releases done
		if time.Now().After(end) {
			t.Fatalf("TryLock(%q): %v", "warm-up", err)
		}
	}
}

// TestLateReplyAfterUnlockIsReleased: the lock wins on three nodes while two
// hang; their SETs land after Unlock and must be deleted, not left to expire.
func TestLateReplyAfterUnlockIsReleased(t *testing.T) {
	m := newMinis(t, 5, &redis.Options{ReadTimeout: time.Hour})
	// Unlock gives up waiting for the hung nodes' SETs at its deadline,
	// so only their own late replies can release them.
	c := m.client(WithNodeTimeout(scaled(50 * time.Millisecond)))
	warmScripts(t, c)
	arrived3, unblock3 := m.block(3)
	arrived4, unblock4 := m.block(4)
	r := within(t, scaled(5*time.Second), "TryLock", tryLock(bg, c, "k", time.Minute))
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := r.l.Unlock(bg); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	<-arrived3
	<-arrived4
	// Let the SETs go only once Unlock gave those nodes up.
	within(t, scaled(5*time.Second), "Unlock giving up the hung nodes", func() bool {
		for !r.l.holds[3].givenUp() || !r.l.holds[4].givenUp() {
			time.Sleep(time.Millisecond) // a hold has no signal for it
		}
		return true
	})
	unblock3()
	unblock4()
	settle(c)
	if m.count("k", "") != 5 {
		t.Fatalf("late SETs escaped Unlock: %q", m.values("k"))
	}
}

func TestLockWaitsForRelease(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client(WithRetryDelay(time.Millisecond, 5*time.Millisecond))
	first := mustLock(t, c, "k", time.Minute)
	got := make(chan lockResult, 1)
	go func() {
		l, err := c.Lock(bg, "k", time.Minute)
		got <- lockResult{l, err}
	}()
	if err := first.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("Lock: %v", r.err)
		}
		settle(c)
		// The first holder's last deletes may still have been in flight.
		if m.count("k", r.l.Token()) < 3 {
			t.Fatalf("second holder's keys: %q", m.values("k"))
		}
	case <-time.After(scaled(5 * time.Second)):
		t.Fatal("Lock did not obtain a released lock")
	}
}

func TestLockMatchesBothSentinelsWhenCtxEnds(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client()
	mustLock(t, c, "k", time.Minute)
	ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
	defer cancel()
	l, err := c.Lock(ctx, "k", time.Minute)
	if l != nil || !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock = %v, %v; want nil and an error matching ErrNotObtained and DeadlineExceeded", l, err)
	}
	var qe *QuorumError
	if !errors.As(err, &qe) || !errors.Is(qe, ErrNodeRefused) {
		t.Fatalf("Lock error %v should carry the last attempt's *QuorumError", err)
	}
}

// TestLockReportsTheLastCompleteAttempt: the first attempt fails on three
// broken nodes; the second hangs on them until ctx ends. The error must say
// why the lock could not be had (the nodes' errors), not merely that the
// last attempt was cut short.
func TestLockReportsTheLastCompleteAttempt(t *testing.T) {
	m := newMinis(t, 5, &redis.Options{ReadTimeout: time.Hour})
	c := m.client(WithNodeTimeout(time.Hour), WithRetryDelay(time.Millisecond, time.Millisecond))
	gate := make(chan struct{})
	defer close(gate)
	for i := range 3 {
		var calls atomic.Int32
		m.servers[i].SetPreHook(func(cmd string, _ []string) error {
			if cmd != "EVALSHA" && cmd != "EVAL" {
				return nil
			}
			if calls.Add(1) == 1 {
				return errors.New("ERR disk on fire")
			}
			<-gate
			return nil
		})
	}
	ctx, cancel := context.WithTimeout(bg, scaled(200*time.Millisecond))
	defer cancel()
	_, err := c.Lock(ctx, "k", time.Minute)
	var qe *QuorumError
	if !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &qe) {
		t.Fatalf("Lock: %v; want ErrNotObtained, DeadlineExceeded and a *QuorumError", err)
	}
	for _, ne := range qe.Nodes {
		if !strings.Contains(ne.Error(), "disk on fire") {
			t.Fatalf("Lock reported the cut-short attempt, not the complete one: %v", qe)
		}
	}
}

func TestTryLockWithEndedCtxSendsNothing(t *testing.T) {
	m := newMinis(t, 3, nil)
	c := m.client()
	ctx, cancel := context.WithCancel(bg)
	cancel()
	before := m.servers[0].CommandCount()
	_, err := c.TryLock(ctx, "k", time.Minute)
	if !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.Canceled) {
		t.Fatalf("TryLock = %v; want ErrNotObtained and context.Canceled", err)
	}
	if after := m.servers[0].CommandCount(); after != before {
		t.Fatalf("a cancelled TryLock sent %d commands", after-before)
	}
}

func TestUntilIsStartPlusTTLMinusDrift(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client()
	const ttl = 10 * time.Second
	before := time.Now()
	l, err := c.TryLock(bg, "k", ttl+999*time.Microsecond) // rounded down to ttl
	after := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	start := l.Until().Add(-(ttl - drift(ttl, DefaultDriftFactor)))
	if start.Before(before) || start.After(after) {
		t.Fatalf("Until − (ttl − drift) = %v after the call began; want within the call (%v)", start.Sub(before), after.Sub(before))
	}
	settle(c)
	if pttl := m.servers[0].TTL("k"); pttl != ttl {
		t.Fatalf("key expiry %v, want the rounded ttl %v", pttl, ttl)
	}
}

// TestSlowMajorityIsNotObtained: every node answers later than the validity
// allows. The attempt must fail, never hand out a lock with no validity, and
// release what the slow SETs left.
func TestSlowMajorityIsNotObtained(t *testing.T) {
	m := newMinis(t, 5, &redis.Options{ReadTimeout: time.Hour})
	c := m.client(WithNodeTimeout(time.Hour))
	var wg sync.WaitGroup
	unblocks := make([]func(), 5)
	for i := range 5 {
		var arrived <-chan string
		arrived, unblocks[i] = m.block(i)
		wg.Add(1)
		go func() { defer wg.Done(); <-arrived }()
	}
	const ttl = 20 * time.Millisecond
	done := make(chan lockResult, 1)
	go func() { done <- tryLock(bg, c, "k", ttl)() }()
	wg.Wait() // every SET reached its node ...
	var r lockResult
	select {
	case r = <-done: // ... and the attempt gave up at the end of the validity
	case <-time.After(scaled(5 * time.Second)):
		t.Fatal("TryLock waited for nodes past the validity")
	}
	for _, u := range unblocks {
		u()
	}
	if r.l != nil || !errors.Is(r.err, ErrNotObtained) || !errors.Is(r.err, ErrNodeTimeout) {
		t.Fatalf("TryLock = %v, %v; want ErrNotObtained after node timeouts", r.l, r.err)
	}
	settle(c)
	if m.count("k", "") != 5 {
		t.Fatalf("slow SETs left keys: %q", m.values("k"))
	}
}

func TestExtend(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client()
	l := mustLock(t, c, "k", time.Second)
	before := time.Now()
	if err := l.Extend(bg, time.Minute); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	settle(c)
	if min := before.Add(time.Minute - drift(time.Minute, DefaultDriftFactor)); l.Until().Before(min) {
		t.Fatalf("Until after Extend is %v before start+ttl−drift", min.Sub(l.Until()))
	}
	for i, s := range m.servers {
		if got := s.TTL("k"); got != time.Minute {
			t.Fatalf("node %d expiry %v, want 1m", i, got)
		}
	}
}

// TestExtendSkipsNodesThatRefusedTheLock: a node that was held by another
// when we locked is not asked to extend, and its key is left alone.
func TestExtendSkipsNodesThatRefusedTheLock(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client()
	m.take(0, "k", "other", time.Second)
	l := mustLock(t, c, "k", time.Second)
	before := m.servers[0].CommandCount()
	if err := l.Extend(bg, time.Minute); err != nil {
		t.Fatal(err)
	}
	if m.servers[0].CommandCount() != before || m.servers[0].TTL("k") != time.Second {
		t.Fatal("Extend contacted or changed a node that refused the lock")
	}
}

func TestExtendAfterExpiryIsNotHeldAndCreatesNoKey(t *testing.T) {
	m := newMinis(t, 5, nil)
	ttl := scaled(100 * time.Millisecond)
	c := m.client(WithNodeTimeout(ttl / 2))
	l := mustLock(t, c, "k", ttl)
	time.Sleep(time.Until(l.Until()) + time.Millisecond) // waiting for the lock's own expiry is the test
	m.fastForward(ttl)
	if err := l.Extend(bg, time.Minute); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Extend after expiry: %v, want ErrNotHeld", err)
	}
	if m.count("k", "") != 5 {
		t.Fatalf("Extend re-created an expired key: %q", m.values("k"))
	}
}

func TestExtendWhenMajorityLostTokenIsNotHeld(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client()
	l := mustLock(t, c, "k", time.Minute)
	for i := range 3 {
		m.servers[i].FlushAll() // a restart without persistence
	}
	err := l.Extend(bg, time.Minute)
	var qe *QuorumError
	if !errors.Is(err, ErrNotHeld) || !errors.As(err, &qe) || qe.Votes > 2 {
		t.Fatalf("Extend: %v; want ErrNotHeld with at most 2 votes", err)
	}
	if !l.Until().Before(time.Now()) {
		t.Fatal("Until should be in the past once the lock is known lost")
	}
	// Its repair put our token back on the flushed masters, which stay in
	// quarantine; the lock, found lost, is given up and released everywhere.
	settle(c)
	if m.count("k", "") != 5 {
		t.Fatalf("keys left after the lost lock was given up: %q", m.values("k"))
	}
}

func TestExtendWhenNodesFailKeepsUntil(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client()
	l := mustLock(t, c, "k", time.Minute)
	until := l.Until()
	for i := range 3 {
		m.servers[i].SetError("LOADING Redis is loading the dataset in memory")
	}
	err := l.Extend(bg, time.Hour)
	if !errors.Is(err, ErrNotObtained) || errors.Is(err, ErrNotHeld) {
		t.Fatalf("Extend: %v; want ErrNotObtained, not ErrNotHeld", err)
	}
	if !l.Until().Equal(until) {
		t.Fatal("a failed extension moved Until")
	}
}

func TestExtendAndUnlockAfterUnlockAreNotHeld(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client()
	l := mustLock(t, c, "k", time.Minute)
	if err := l.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	settle(c)
	if !l.Until().Before(time.Now()) {
		t.Fatal("Until should be in the past after Unlock")
	}
	if err := l.Unlock(bg); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("second Unlock: %v, want ErrNotHeld", err)
	}
	if err := l.Extend(bg, time.Minute); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Extend after Unlock: %v, want ErrNotHeld", err)
	}
	if m.count("k", "") != 5 {
		t.Fatalf("keys after Unlock: %q", m.values("k"))
	}
}

func TestNilLockReportsNotHeld(t *testing.T) {
	var l *Lock
	if err := l.Unlock(bg); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Unlock: %v", err)
	}
	if err := l.Extend(bg, time.Second); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Extend: %v", err)
	}
}

func TestUnlockWithMinorityLeftIsNotHeld(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client()
	l := mustLock(t, c, "k", time.Minute)
	for i := range 3 {
		m.servers[i].FlushAll()
	}
	var qe *QuorumError
	if err := l.Unlock(bg); !errors.Is(err, ErrNotHeld) || !errors.As(err, &qe) || qe.Votes > 2 {
		t.Fatalf("Unlock: %v; want ErrNotHeld with at most 2 votes", err)
	}
	settle(c)
	if m.count("k", "") != 5 {
		t.Fatalf("Unlock left keys: %q", m.values("k"))
	}
}

func TestUnlockWithCancelledCtxStillReleases(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client()
	l := mustLock(t, c, "k", time.Minute)
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	settle(c)
	if m.count("k", "") != 5 {
		t.Fatalf("keys after Unlock with a cancelled ctx: %q", m.values("k"))
	}
}

func TestClosedClient(t *testing.T) {
	m := newMinis(t, 3, nil)
	c := m.client()
	l := mustLock(t, c, "k", time.Minute)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(bg, "k2", time.Minute); !errors.Is(err, ErrClosed) {
		t.Fatalf("TryLock after Close: %v", err)
	}
	if _, err := c.Lock(bg, "k2", time.Minute); !errors.Is(err, ErrClosed) {
		t.Fatalf("Lock after Close: %v", err)
	}
	if err := l.Extend(bg, time.Minute); !errors.Is(err, ErrClosed) {
		t.Fatalf("Extend after Close: %v", err)
	}
}

func TestBackoffStaysInBounds(t *testing.T) {
	cfg := config{retryMin: 10 * time.Millisecond, retryMax: 250 * time.Millisecond}
	for k := range 100 {
		hi := cfg.retryMax
		if k < 5 {
			hi = cfg.retryMin << (k + 1)
		}
		for range 50 {
			if d := cfg.backoff(k); d < cfg.retryMin || d > hi {
				t.Fatalf("backoff(%d) = %v, want in [%v, %v]", k, d, cfg.retryMin, hi)
			}
		}
	}
	huge := config{retryMin: 1, retryMax: math.MaxInt64}
	for k := range 100 {
		if d := huge.backoff(k); d < 1 {
			t.Fatalf("backoff(%d) overflowed to %v", k, d)
		}
	}
}

func TestQuorumErrorMessage(t *testing.T) {
	m := newMinis(t, 3, nil)
	c := m.client()
	m.take(0, "k", "other", time.Minute)
	m.take(1, "k", "other", time.Minute)
	_, err := c.TryLock(bg, "k", time.Minute)
	msg := fmt.Sprint(err)
	for _, want := range []string{"redlock: not obtained", `lock "k"`, "of 2 votes", m.servers[0].Addr(), "node refused"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
}

// TestContendingGoroutinesNeverOverlap: 16 goroutines of one process fight
// for one key; at most one may be inside at any time, and a counter updated
// read-then-write inside must end exact.
func TestContendingGoroutinesNeverOverlap(t *testing.T) {
	m := newMinis(t, 5, nil)
	contend(t, m.clients, 16, 10)
}

// TestTheLeakCheckFindsAGoroutineLeft: the positive control of the leak
// checks (TestMain, noLeaks): a goroutine still blocked is reported, one
// that returned is not.
func TestTheLeakCheckFindsAGoroutineLeft(t *testing.T) {
	before := goleak.IgnoreCurrent()
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		<-stop
	}()
	if err := goroutinesLeft(100*time.Millisecond, before); err == nil {
		t.Error("a goroutine blocked on a channel was not found")
	}
	close(stop)
	<-stopped
	if err := goroutinesLeft(leakPatience, before); err != nil {
		t.Errorf("a goroutine that returned was found: %v", err)
	}
}

// TestNoGoroutineOutlivesItsWork: hung nodes leave goroutines behind an
// attempt only until their replies arrive and are cleaned up; Close waits
// for exactly that, and nothing is left after it.
func TestNoGoroutineOutlivesItsWork(t *testing.T) {
	defer noLeaks(t, goleak.IgnoreCurrent())
	m := newMinis(t, 5, &redis.Options{ReadTimeout: time.Hour})
	c, err := New(m.clients, WithNodeTimeout(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	warmScripts(t, c)
	_, unblock3 := m.block(3)
	_, unblock4 := m.block(4)
	l, err := c.TryLock(bg, "a", time.Minute) // not mustLock: settling would wait for the blocked nodes
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(bg, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	m.take(0, "b", "other", time.Minute)
	if _, err := c.TryLock(bg, "b", time.Minute); !errors.Is(err, ErrNotObtained) {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { _ = c.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while requests to hung nodes were still in flight")
	case <-time.After(scaled(20 * time.Millisecond)):
	}
	unblock3()
	unblock4()
	<-closed
	if m.count("a", "") != 5 || m.count("b", "") != 4 {
		t.Fatalf("keys left: a=%q b=%q", m.values("a"), m.values("b"))
	}
	for i, cl := range m.clients {
		_ = cl.Close()
		m.servers[i].Close()
	}
}

// The classic Redis-lock mistakes (the README's "The ten classic Redis-lock
// mistakes"), each guarded here where it belongs to the core. 8 (releasing before the
// surrounding transaction commits) is the caller's ordering: see the README.

// recordCommands records every command the Client sends to node i, as the
// go-redis client sees it (connection set-up aside).
func recordCommands(m *minis, i int) func() []string {
	rec := &commandRecorder{}
	m.clients[i].AddHook(rec)
	return rec.commands
}

type commandRecorder struct {
	mu   sync.Mutex
	cmds []string
}

func (r *commandRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *commandRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			r.add(c.Name())
		}
		return next(ctx, cmds)
	}
}
func (r *commandRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.add(cmd.Name())
		return next(ctx, cmd)
	}
}
func (r *commandRecorder) add(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cmds = append(r.cmds, strings.ToUpper(name))
}
func (r *commandRecorder) commands() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.cmds...)
}

// onlyScripts fails unless every command is a script call: a lock built from
// separate commands (SETNX then EXPIRE, GET then DEL) would show them here.
func onlyScripts(t *testing.T, what string, cmds []string) {
	t.Helper()
	if len(cmds) == 0 {
		t.Fatalf("%s sent nothing", what)
	}
	for _, c := range cmds {
		switch c {
		case "EVALSHA", "EVAL":
		case "HELLO", "CLIENT", "AUTH", "SELECT", "PING": // go-redis connection set-up
		default:
			t.Fatalf("%s sent %q: %v; each step must be one atomic script", what, c, cmds)
		}
	}
}

func TestPitfall1_SetAndExpiryAreOneAtomicStep(t *testing.T) {
	m := newMinis(t, 3, nil)
	c := m.client()
	cmds := recordCommands(m, 0)
	mustLock(t, c, "k", time.Minute)
	onlyScripts(t, "TryLock", cmds())
	if ttl := m.servers[0].TTL("k"); ttl != time.Minute {
		t.Fatalf("key expiry %v right after TryLock, want 1m", ttl)
	}
}

func TestPitfall2_ValueIsTokenAndExpiryIsTheServers(t *testing.T) {
	m := newMinis(t, 3, nil)
	c := m.client()
	l := mustLock(t, c, "k", time.Minute)
	if _, err := uuid.Parse(l.Token()); err != nil || m.count("k", l.Token()) != 3 {
		t.Fatalf("value %q is not the holder's random token %q", m.values("k"), l.Token())
	}
	// A racer cannot overwrite the holder's value, as GETSET-based locks let it.
	if _, err := c.TryLock(bg, "k", time.Minute); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("second TryLock: %v", err)
	}
	if m.count("k", l.Token()) != 3 {
		t.Fatalf("a racer overwrote the holder's value: %q", m.values("k"))
	}
}

func TestPitfall3_AbandonedLockExpires(t *testing.T) {
	m := newMinis(t, 3, nil)
	c := m.client()
	if _, err := c.TryLock(bg, "k", time.Second); err != nil { // never unlocked: the holder crashed
		t.Fatal(err)
	}
	settle(c) // every SET has landed
	m.fastForward(time.Second)
	if _, err := c.TryLock(bg, "k", time.Second); err != nil {
		t.Fatalf("a crashed holder's lock never expired: %v", err)
	}
}

func TestPitfall4_FailedAttemptAndUnlockReleaseEverything(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client()
	for i := range 3 {
		m.take(i, "k", "other", time.Minute)
	}
	if _, err := c.TryLock(bg, "k", time.Minute); !errors.Is(err, ErrNotObtained) {
		t.Fatal(err)
	}
	settle(c)
	if m.count("k", "") != 2 {
		t.Fatalf("a failed attempt kept its partial keys: %q", m.values("k"))
	}
	l := mustLock(t, c, "free", time.Minute)
	if err := l.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	settle(c)
	if m.count("free", "") != 5 {
		t.Fatalf("Unlock left keys: %q", m.values("free"))
	}
}

func TestPitfall5_UnlockNeverDeletesAnotherHoldersKey(t *testing.T) {
	m := newMinis(t, 5, nil)
	ttl := scaled(100 * time.Millisecond)
	c := m.client(WithNodeTimeout(ttl / 2))
	a := mustLock(t, c, "k", ttl)
	time.Sleep(time.Until(a.Until()) + time.Millisecond) // a's validity ends ...
	m.fastForward(ttl)                                   // ... and its keys expire
	b := mustLock(t, c, "k", time.Minute)
	if err := a.Unlock(bg); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("stale Unlock: %v, want ErrNotHeld", err)
	}
	settle(c)
	if m.count("k", b.Token()) != 5 {
		t.Fatalf("a stale Unlock deleted the new holder's keys: %q", m.values("k"))
	}
}

func TestPitfall6_CheckAndDeleteAreOneAtomicStep(t *testing.T) {
	m := newMinis(t, 3, nil)
	c := m.client()
	l := mustLock(t, c, "k", time.Minute)
	cmds := recordCommands(m, 0)
	if err := l.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	settle(c)
	onlyScripts(t, "Unlock", cmds())
}

func TestPitfall7_ExpiryDuringWorkIsReported(t *testing.T) {
	m := newMinis(t, 3, nil)
	ttl := scaled(100 * time.Millisecond)
	c := m.client(WithNodeTimeout(ttl / 2))
	l := mustLock(t, c, "k", ttl)
	time.Sleep(time.Until(l.Until()) + time.Millisecond) // the work outlives the lock
	if time.Now().Before(l.Until()) {
		t.Fatal("Until does not tell the lock has expired")
	}
	if err := l.Extend(bg, time.Minute); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Extend after expiry: %v, want ErrNotHeld", err)
	}
	if err := l.Unlock(bg); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Unlock after expiry: %v, want ErrNotHeld", err)
	}
}

func TestPitfall9_NestedLockIsNotGrantedTwice(t *testing.T) {
	m := newMinis(t, 3, nil)
	c := m.client()
	outer := mustLock(t, c, "k", time.Minute)
	// Re-entrancy is not implied: a nested acquisition of the same key is a
	// second holder and must be refused, not silently granted. Callers pass
	// the *Lock down instead.
	if inner, err := c.TryLock(bg, "k", time.Minute); inner != nil || !errors.Is(err, ErrNotObtained) {
		t.Fatalf("nested TryLock = %v, %v; want ErrNotObtained", inner, err)
	}
	if err := outer.Unlock(bg); err != nil {
		t.Fatalf("outer Unlock after refused nested lock: %v", err)
	}
}

func TestPitfall10_OneMasterLosingItsKeysDoesNotAdmitASecondHolder(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client()
	mustLock(t, c, "k", time.Minute)
	settle(c)               // the first lock's SETs have all landed ...
	m.servers[0].FlushAll() // ... and then a failover to a replica that missed the write
	if _, err := c.TryLock(bg, "k", time.Minute); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("second holder admitted after one master lost its keys: %v", err)
	}
	// And one master given twice, which would let its vote count double, is refused.
	if _, err := New([]redis.UniversalClient{m.clients[0], m.clients[1], m.clients[0]}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("New with a repeated master: %v", err)
	}
}

// TestUnlockAfterTheValidityEndedIsNotHeld (I7): an Unlock whose release
// round is decided after the lock's validity ended reports ErrNotHeld,
// though every key was still there to delete: the caller cannot be sure
// it held the lock alone to its end.
func TestUnlockAfterTheValidityEndedIsNotHeld(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client(WithDriftFactor(0.5)) // the validity ends halfway through the keys' TTL
	l := mustLock(t, c, "k", scaled(2*time.Second))
	<-l.Done()
	if n := m.count("k", l.token); n < 3 {
		t.Fatalf("the keys expired with the validity (%d left): the test needs them to outlive it", n)
	}
	if err := l.Unlock(bg); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Unlock after the validity ended: %v, want ErrNotHeld", err)
	}
	settle(c)
	if n := m.count("k", ""); n != 5 {
		t.Fatalf("Unlock left keys: %q", m.values("k"))
	}
}
