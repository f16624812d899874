package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/redistest"
	"github.com/redlock-go/redlock/internal/script"
)

// TryLockMulti holds every key or none: with one key held by another, it
// fails and leaves none of the others set anywhere; once that key is free
// it takes all, Extend lengthens all, and Unlock deletes all.
func TestTryLockMultiTakesAllOrNone(t *testing.T) {
	r := startReal(t, 5)
	// Every master must take the keys: a generous node deadline, so that a
	// loaded machine does not make one miss it (that is the library's right).
	c := r.client(WithNodeTimeout(scaled(2 * time.Second)))
	other := mustLock(t, c, "b", time.Minute)
	keys := []string{"a", "b", "c"}
	if _, err := c.TryLockMulti(bg, keys, time.Minute); !errors.Is(err, ErrNotObtained) || !errors.Is(err, ErrNodeRefused) {
		t.Fatalf("TryLockMulti with b held = %v, want ErrNotObtained with the masters' refusals", err)
	}
	settle(c)
	for _, k := range []string{"a", "c"} {
		if vs := r.values(k); strings.Join(vs, "") != "" {
			t.Fatalf("a failed TryLockMulti left %s set: %q", k, vs)
		}
	}
	if err := other.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	settle(c) // Unlock returns at a majority; b may still be on the last master

	before := time.Now()
	l, err := c.TryLockMulti(bg, keys, 10*time.Second)
	if err != nil {
		t.Fatalf("TryLockMulti of free keys: %v", err)
	}
	if got := l.Keys(); strings.Join(got, " ") != "a b c" || l.Key() != "a,b,c" {
		t.Fatalf("Keys = %q, Key = %q", got, l.Key())
	}
	if l.Until().After(validUntil(time.Now(), 10*time.Second, DefaultDriftFactor)) || l.Until().Before(before) {
		t.Fatalf("Until %v after the call began: not within ttl − drift", l.Until().Sub(before))
	}
	settle(c)
	for _, k := range keys {
		if n := r.count(k, l.Token()); n != 5 {
			t.Fatalf("%s holds the lock's token on %d masters, want 5", k, n)
		}
		if _, err := c.TryLock(bg, k, time.Second); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("TryLock(%s) while the multi-key lock holds it = %v, want ErrNotObtained", k, err)
		}
	}
	if err := l.Extend(bg, time.Minute); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	settle(c) // Extend returns at a majority; the last master's extension may still be on its way
	for _, k := range keys {
		for i, d := range r.pttls(k) {
			if d < 50*time.Second {
				t.Fatalf("master %d: %s lives %v after Extend(1m)", i, k, d)
			}
		}
	}
	if held, err := l.Held(bg); !held || err != nil {
		t.Fatalf("Held = %v, %v", held, err)
	}
	if err := l.Unlock(bg); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	settle(c)
	for _, k := range keys {
		if vs := r.values(k); strings.Join(vs, "") != "" {
			t.Fatalf("%s still set after Unlock: %q", k, vs)
		}
	}
}

// On each master the keys are taken all or none: a master where another
// token holds one of them sets none, and the lock is won on the others.
func TestTryLockMultiIsAllOrNoneOnEachMaster(t *testing.T) {
	r := startReal(t, 5)
	c := r.client()
	r.take(0, "b", "someone-else", time.Minute)
	l, err := c.TryLockMulti(bg, []string{"a", "b"}, time.Minute)
	if err != nil {
		t.Fatalf("TryLockMulti with b held on one master of five: %v", err)
	}
	settle(c)
	if va, vb := r.values("a"), r.values("b"); va[0] != "" || vb[0] != "someone-else" {
		t.Fatalf("master 0, where b was another's: a = %q, b = %q; want a unset, b untouched", va[0], vb[0])
	}
	for i := 1; i < 5; i++ {
		if va, vb := r.values("a"), r.values("b"); va[i] != l.Token() || vb[i] != l.Token() {
			t.Fatalf("master %d: a = %q, b = %q; want both the lock's", i, va[i], vb[i])
		}
	}
}

// A master that lost one of the keys votes no on Extend; a majority of such
// masters ends the lock, and the rest is released.
func TestExtendMultiNeedsEveryKey(t *testing.T) {
	r := startReal(t, 5)
	c := r.client()
	l, err := c.TryLockMulti(bg, []string{"a", "b"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	settle(c)
	for i := range 3 {
		if err := r.admin[i].Del(bg, "b").Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Extend(bg, 2*time.Minute); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Extend with b lost on three masters of five = %v, want ErrNotHeld", err)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("Done is open after Extend found the lock lost")
	}
	settle(c)
	for _, k := range []string{"a", "b"} {
		if n := r.count(k, l.Token()); n != 0 {
			t.Fatalf("%s still holds the lost lock's token on %d masters", k, n)
		}
		for i, d := range r.pttls(k) {
			if d > time.Minute {
				t.Fatalf("master %d: the refused Extend lengthened %s to %v", i, k, d)
			}
		}
	}
}

// Two Clients locking {a,b} and {b,a} over and over both make progress, and
// never hold at once.
func TestLockMultiOnOverlappingSetsMakesProgress(t *testing.T) {
	r := startReal(t, 5)
	sets := [][]string{{"a", "b"}, {"b", "a"}, {"b", "c"}}
	const rounds = 15
	var inside atomic.Int32
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(bg, scaled(60*time.Second))
	defer cancel()
	errs := make(chan error, len(sets)*(rounds+1))
	for _, set := range sets {
		c := r.client(WithRetryDelay(time.Millisecond, 50*time.Millisecond))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				l, err := c.LockMulti(ctx, set, 5*time.Second)
				if err != nil {
					errs <- fmt.Errorf("LockMulti(%q): %w", set, err)
					return
				}
				if n := inside.Add(1); n != 1 { // every set holds b
					errs <- fmt.Errorf("LockMulti(%q) returned with %d other holders inside", set, n-1)
				}
				time.Sleep(time.Millisecond) // the critical section
				inside.Add(-1)
				if err := l.Unlock(bg); err != nil {
					errs <- fmt.Errorf("Unlock(%q): %w", set, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// A waiter on {a,b} is woken by a release of a, or of b: long before its
// backoff would have let it try again.
func TestLockMultiIsWokenByAReleaseOfEitherKey(t *testing.T) {
	for _, held := range []string{"a", "b"} {
		t.Run("release of "+held, func(t *testing.T) {
			r := startReal(t, 5)
			holder := r.client()
			waiter := r.client(WithRetryDelay(scaled(30*time.Second), scaled(30*time.Second)))
			l, err := holder.TryLock(bg, held, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			go func() {
				l, err := waiter.LockMulti(bg, []string{"a", "b"}, time.Minute)
				if err == nil {
					err = l.Unlock(bg)
				}
				got <- err
			}()
			// Wait until the waiter's attempt failed and it listens on
			// both keys' channels.
			r.subscribed("a")
			r.subscribed("b")
			if err := l.Unlock(bg); err != nil {
				t.Fatal(err)
			}
			awaitLockWithin(t, got, scaled(5*time.Second), "LockMulti was not woken by the release of "+held)
		})
	}
}

// A LockMulti waiter that finds, when it subscribes after its failed
// attempt, a key's watch taken meanwhile by another waiter of its Client
// (the subscription active already, its gap counted before) counts the
// key's releases from its watch: one heard between its watch and its look
// is a release since its attempt, and it tries again at once instead of
// sleeping its backoff with the key free (as the single-key waiter,
// TestAWaiterWhoseSubscriptionWasActiveBeforeItLookedTriesAgain).
func TestAMultiWaiterCountsReleasesFromItsWatch(t *testing.T) {
	r := startReal(t, 5)
	holder := r.client()
	backoff := scaled(time.Minute)
	waiter := r.client(WithRetryDelay(backoff, backoff), withLinger(time.Hour))
	refused, other := make(chan struct{}), make(chan struct{})
	watched, heard := make(chan struct{}), make(chan struct{})
	// The hooks stage the multi-key waiter's watch: it is the first to
	// come to beforeWatch, and the other waiter's watch is done when it
	// comes to afterWatch.
	var before, armed atomic.Bool
	waiter.cfg.test.beforeWatch = func() {
		if before.CompareAndSwap(false, true) {
			close(refused)
			<-other
			armed.Store(true)
		}
	}
	waiter.cfg.test.afterWatch = func() {
		if armed.CompareAndSwap(true, false) {
			close(watched)
			<-heard
		}
	}

	l := mustLock(t, holder, "a", time.Minute)
	got := multiInBackground(waiter, "a", "b")
	<-refused
	// Another waiter of the Client watches both keys until their
	// subscriptions are active, then gives up: the subscriptions linger,
	// and no gap is left to come (a gap sends the waiter into an attempt
	// too: TestAMultiWaiterTriesAgainWhenItsSubscriptionBecomesActive).
	ctx, cancel := context.WithCancel(bg)
	gaveUp := multiInBackgroundCtx(ctx, waiter, "a", "b")
	awaitSubscribed(t, waiter, "a", len(r.servers))
	awaitSubscribed(t, waiter, "b", len(r.servers))
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("the other waiter's LockMulti = %v, want context.Canceled", err)
	}
	close(other)
	<-watched
	unlockHeardBy(t, r, l, waiter)
	close(heard)
	awaitLockWithin(t, got, scaled(5*time.Second), "the multi-key waiter slept its backoff through a release it heard after its watch")
}

// A LockMulti waiter whose Client watches a key already (a subscription
// lingering after an earlier waiter) watches it from before its first
// attempt: a release heard while the attempt was refused (it landed just
// after) sends it into another attempt, not into its backoff. (An
// adversary's trials: 8% of waiters slept their backoff with the keys free
// when the holder let go within 250 µs of the attempt.)
func TestAMultiWaiterHearsAReleaseDuringItsFirstAttempt(t *testing.T) {
	r := startReal(t, 5)
	holder := r.client()
	backoff := scaled(time.Minute)
	waiter := r.client(WithRetryDelay(backoff, backoff), withLinger(time.Hour))
	first := mustLock(t, holder, "a", time.Minute)
	// An earlier waiter, for both keys: their subscriptions linger, and no
	// gap is left to come.
	res := multiInBackground(waiter, "a", "b")
	awaitSubscribed(t, waiter, "a", len(r.servers))
	awaitSubscribed(t, waiter, "b", len(r.servers))
	if err := first.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	awaitLock(t, res, "the earlier waiter")

	second := mustLock(t, holder, "a", time.Minute)
	refused, heard := make(chan struct{}), make(chan struct{})
	waiter.cfg.test.beforeWatch = func() { close(refused); <-heard }
	got := multiInBackground(waiter, "a", "b")
	<-refused // the first attempt was refused
	unlockHeardBy(t, r, second, waiter)
	close(heard)
	awaitLockWithin(t, got, scaled(5*time.Second), "the multi-key waiter slept its backoff through a release heard during its first attempt")
}

// A LockMulti waiter whose keys were released after its first attempt and
// before its subscription was active heard nothing: the subscription
// becoming active (its gap) sends it into another attempt.
func TestAMultiWaiterTriesAgainWhenItsSubscriptionBecomesActive(t *testing.T) {
	r := startReal(t, 5)
	holder := r.client()
	backoff := scaled(time.Minute)
	waiter := r.client(WithRetryDelay(backoff, backoff))
	l := mustLock(t, holder, "a", time.Minute)
	waiter.cfg.test.beforeWatch = func() {
		if err := l.Unlock(bg); err != nil {
			t.Error(err)
		}
		settle(holder) // released everywhere, heard by nobody
	}
	got := multiInBackground(waiter, "a", "b")
	awaitLockWithin(t, got, scaled(5*time.Second), "the multi-key waiter slept its backoff: its subscription's gap did not send it into an attempt")
}

// unlockHeardBy unlocks l and waits until c has heard its release from
// every master that held it: each is marked first (as a refused attempt
// marks it), so that each announces the release. Every notice thus comes
// before what the test does next (a LockMulti waiter's marks:
// refusalMarks).
func unlockHeardBy(t *testing.T, r *realNodes, l *Lock, c *Client) {
	t.Helper()
	heard := make([]int, len(r.admin)) // -1: the master does not hold l
	for i, a := range r.admin {
		heard[i] = heardReleases(c, l.Key(), i)
		v, err := a.Get(bg, l.Key()).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("GET on node %d: %v", i, err)
		}
		switch {
		case v != l.Token():
			heard[i] = -1
		case v == l.Token():
			if err := a.Set(bg, l.Key()+script.WantedSuffix, fingerprintOf(v), time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := l.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	within(t, scaled(5*time.Second), "the waiter's Client hearing the release from every master", func() bool {
		for i := range r.admin {
			for heard[i] >= 0 && heardReleases(c, l.Key(), i) == heard[i] {
				time.Sleep(time.Millisecond) // the waker offers tests no signal
			}
		}
		return true
	})
}

// multiInBackground calls c.LockMulti(bg, keys, time.Minute) in a goroutine,
// unlocks, and reports its error.
func multiInBackground(c *Client, keys ...string) <-chan error {
	return multiInBackgroundCtx(bg, c, keys...)
}

// multiInBackgroundCtx is multiInBackground with ctx.
func multiInBackgroundCtx(ctx context.Context, c *Client, keys ...string) <-chan error {
	res := make(chan error, 1)
	go func() {
		l, err := c.LockMulti(ctx, keys, time.Minute)
		if err == nil {
			err = l.Unlock(bg)
		}
		res <- err
	}()
	return res
}

func TestMultiRejectsBadInput(t *testing.T) {
	r := startReal(t, 3)
	c := r.client()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		keys []string
		ttl  time.Duration
	}{
		{"nil keys", bg, nil, time.Second},
		{"no keys", bg, []string{}, time.Second},
		{"an empty key", bg, []string{"a", ""}, time.Second},
		{"a key twice", bg, []string{"a", "b", "a"}, time.Second},
		{"the memory marker", bg, []string{"x", "redlock:memory"}, time.Second},
		{"a fence counter", bg, []string{"x", "x:redlock-fence"}, time.Second},
		{"nil ctx", nil, []string{"a", "b"}, time.Second},
		{"zero ttl", bg, []string{"a", "b"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if l, err := c.TryLockMulti(tc.ctx, tc.keys, tc.ttl); l != nil || !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("TryLockMulti = %v, %v; want ErrInvalidArgument", l, err)
			}
			if l, err := c.LockMulti(tc.ctx, tc.keys, tc.ttl); l != nil || !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("LockMulti = %v, %v; want ErrInvalidArgument", l, err)
			}
		})
	}
	// The caller's slice is the caller's: changing it changes nothing.
	keys := []string{"x", "y"}
	l2, err := c.TryLockMulti(bg, keys, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	keys[0] = "z"
	err = l2.Unlock(bg)
	settle(c) // Unlock returns at a majority; the last release may be in flight
	if err != nil || r.count("x", l2.Token()) != 0 {
		t.Fatalf("Unlock after the caller reused its slice: %v; x still held on %d", err, r.count("x", l2.Token()))
	}
	_ = c.Close()
	if _, err := c.TryLockMulti(bg, []string{"a", "b"}, time.Second); !errors.Is(err, ErrClosed) {
		t.Fatalf("TryLockMulti after Close = %v, want ErrClosed", err)
	}
}

// DoMulti holds every key while fn runs, longer than the TTL (its
// watchdog extends them all), and releases them when fn returns.
func TestDoMultiHoldsEveryKeyWhileFnRuns(t *testing.T) {
	r := startReal(t, 5)
	c, other := r.client(), r.client()
	ttl := scaled(300 * time.Millisecond)
	err := c.DoMulti(bg, []string{"a", "b"}, ttl, func(ctx context.Context) error {
		l := LockFromContext(ctx)
		if got := l.Keys(); len(got) != 2 || got[0] != "a" || got[1] != "b" {
			return fmt.Errorf("LockFromContext's keys = %q", got)
		}
		for end := time.Now().Add(3 * ttl); time.Now().Before(end); time.Sleep(ttl / 4) {
			for _, k := range []string{"a", "b"} {
				if _, err := other.TryLock(bg, k, time.Second); !errors.Is(err, ErrNotObtained) {
					return fmt.Errorf("TryLock(%s) by another Client while DoMulti's fn runs = %w", k, err)
				}
			}
			if ctx.Err() != nil {
				return fmt.Errorf("fn's ctx ended: %w", context.Cause(ctx))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("DoMulti: %v", err)
	}
	settle(c)
	for _, k := range []string{"a", "b"} {
		if l, err := other.TryLock(bg, k, time.Second); err != nil {
			t.Fatalf("TryLock(%s) after DoMulti = %v", k, err)
		} else {
			_ = l.Unlock(bg)
		}
	}
	if err := c.DoMulti(bg, []string{"a", "a"}, ttl, func(context.Context) error { return nil }); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("DoMulti with a key twice = %v, want ErrInvalidArgument", err)
	}
}

// DoMulti's fn learns that the lock is lost when one of its keys is lost
// on a majority (its watchdog's Extend needs every key): fn's context ends
// with ErrLockLost, DoMulti reports it, and no key is left behind.
func TestDoMultiLosesTheLockWithOneOfItsKeys(t *testing.T) {
	r := startReal(t, 5)
	c := r.client()
	ttl := scaled(300 * time.Millisecond)
	err := c.DoMulti(bg, []string{"a", "b"}, ttl, func(ctx context.Context) error {
		// Not settle: the watchdog registers in the Client's WaitGroup
		// meanwhile. The SETs the majority did not wait for land first.
		token := LockFromContext(ctx).Token()
		for bound := time.Now().Add(ttl); r.count("b", token) < 5; time.Sleep(time.Millisecond) {
			if time.Now().After(bound) {
				return fmt.Errorf("b never held the token on every master: %q", r.values("b"))
			}
		}
		for i := range 3 { // as if three masters lost b
			if err := r.admin[i].Del(bg, "b").Err(); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			if !errors.Is(context.Cause(ctx), ErrLockLost) {
				return fmt.Errorf("fn's ctx ended with %w, want ErrLockLost", context.Cause(ctx))
			}
			return nil
		case <-time.After(3 * ttl):
			return errors.New("fn's ctx still open three TTLs after b was lost on a majority")
		}
	})
	if !errors.Is(err, ErrLockLost) {
		t.Fatalf("DoMulti with b lost on a majority = %v, want ErrLockLost", err)
	}
	settle(c)
	for _, k := range []string{"a", "b"} {
		if vs := r.values(k); strings.Join(vs, "") != "" {
			t.Fatalf("%s left after the lost DoMulti: %q", k, vs)
		}
	}
}

// A multi-key lock's fence is above every earlier holder's fence of any
// of its keys, and every later holder of any of them draws above it.
func TestFenceOfAMultiKeyLock(t *testing.T) {
	r := startReal(t, 5)
	c := r.client()
	fenceOf := func(l *Lock) uint64 {
		t.Helper()
		f, err := l.Fence(bg)
		if err != nil {
			t.Fatalf("Fence of %q: %v", l.Key(), err)
		}
		if again, err := l.Fence(bg); err != nil || again != f {
			t.Fatalf("a second Fence of %q = %d, %v; want %d", l.Key(), again, err, f)
		}
		if err := l.Unlock(bg); err != nil {
			t.Fatal(err)
		}
		settle(c)
		return f
	}
	fa := fenceOf(mustLock(t, c, "a", time.Minute))
	// b's counter far above a's, as if b had had many more holders: 1000 s
	// of the masters' clock in microseconds, so that a counter of a created
	// meanwhile (at that clock, on a master a's lock did not ask) stays
	// below it, and only incrementing b's counter puts the fence above b's.
	// (With 1 ms, a multi-key fence that incremented a's counter passed
	// about one run in seven.)
	for _, a := range r.admin {
		if err := a.Set(bg, "b"+script.FenceSuffix, fa+1_000_000_000, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	fb := fenceOf(mustLock(t, c, "b", time.Minute))
	l, err := c.TryLockMulti(bg, []string{"a", "b"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	fm := fenceOf(l)
	if fm <= fa || fm <= fb {
		t.Fatalf("the multi-key lock's fence %d is not above a's %d and b's %d", fm, fa, fb)
	}
	for _, k := range []string{"a", "b"} {
		if f := fenceOf(mustLock(t, c, k, time.Minute)); f <= fm {
			t.Fatalf("a later holder of %s drew %d, not above the multi-key lock's %d", k, f, fm)
		}
	}
}

// On a Redis Cluster vote, keys of different hash slots are a clear error
// naming the remedy; keys with a common hash tag work.
func TestMultiKeysOnAClusterVoteNeedOneSlot(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	cc := cluster.Client()
	t.Cleanup(func() { _ = cc.Close() })
	c, err := New([]redis.UniversalClient{cc})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.TryLockMulti(bg, []string{"order:a", "order:b"}, time.Minute)
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "hash tag") {
		t.Fatalf("TryLockMulti of keys in two slots of a cluster = %v, want ErrInvalidArgument naming hash tags", err)
	}
	l, err := c.TryLockMulti(bg, []string{"{order}:a", "{order}:b"}, time.Minute)
	if err != nil {
		t.Fatalf("TryLockMulti of keys with one hash tag: %v", err)
	}
	if err := l.Extend(bg, 2*time.Minute); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if err := l.Unlock(bg); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}

// hashSlot agrees with Redis Cluster's CLUSTER KEYSLOT.
func TestHashSlot(t *testing.T) {
	if got := script.HashSlot("123456789"); got != 0x31C3 { // CRC16/XMODEM's check value
		t.Fatalf("hashSlot(123456789) = %d, want %d", got, 0x31C3)
	}
	cluster := redistest.StartCluster(t, 1)
	cc := cluster.Client()
	t.Cleanup(func() { _ = cc.Close() })
	for _, key := range []string{
		"foo", "bar", "{user1000}.following", "{user1000}.followers", "foo{}{bar}", "{}", "a{b}c{d}",
		"{unterminated", "}{", "{order}:stock", "prefix{user1000}.suffix{", "invoice:42", "\xff\x00",
	} {
		want, err := cc.ClusterKeySlot(bg, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := script.HashSlot(key); int64(got) != want {
			t.Errorf("hashSlot(%q) = %d, CLUSTER KEYSLOT says %d", key, got, want)
		}
	}
}

// A multi-key acquisition announces nothing, so a waiter of LockMulti never
// hears a key taken: it acts only on a new release, or on a release
// announced by a master after that master refused an attempt that another
// master said yes to (the attempt was ahead of the release: refusalMarks).
// The other repeats of a release it heard already (every master sends one)
// renew its wait, and send it into no attempt on a key another waiter just
// took: a repeat heard before the master refused (the master released,
// then another waiter took the key there), or after an attempt no master
// said yes to (another waiter took every master that had released). (Found
// by an adversary review: when repeats began to wake waiters, multi-key
// waiters made twice the attempts, at half the throughput, with 8 Clients.)
func TestAMultiKeyWaiterActsOnlyOnANewRelease(t *testing.T) {
	r := startReal(t, 5)
	backoff := scaled(10 * time.Second)
	attempts := make(chan struct{}, 16) // one per attempt: its call to master 0 answered
	// The staged attempt: master 2 announces the release before it gets
	// the attempt (early), and masters 3 and 4 answer after it did, so that
	// its refusal decides the round.
	var early atomic.Pointer[func()]
	var staging atomic.Pointer[chan struct{}] // closed when the attempt took in master 2's answer
	counted := &scriptHook{script: script.AcquireMulti, after: func(context.Context) error {
		attempts <- struct{}{}
		return nil
	}}
	staged := &scriptHook{script: script.AcquireMulti, before: func(context.Context) {
		if f := early.Swap(nil); f != nil {
			(*f)()
		}
	}}
	twoAnswered, threeAnswered := make(chan struct{}, 16), make(chan struct{}, 16)
	countedTwo := Observer{NodeReply: func(e NodeReplyEvent) { // after the attempt took in the answer (and marked it), before its vote
		if e.Key != "a,b" || e.Op != "lock" {
			return
		}
		switch e.Node {
		case 2:
			if ch := staging.Swap(nil); ch != nil {
				close(*ch)
			}
			twoAnswered <- struct{}{}
		case 3:
			threeAnswered <- struct{}{}
		}
	}}
	clients := make([]redis.UniversalClient, len(r.servers))
	for i, s := range r.servers {
		clients[i] = s.Client(nil)
	}
	// Every master gets every attempt: the test waits for master 0's and
	// master 3's answers to each.
	sentTogether(script.AcquireMulti, clients, scaled(5*time.Second))
	clients[0].AddHook(counted)
	clients[2].AddHook(staged)
	var second atomic.Pointer[chan struct{}] // what masters 3 and 4 wait for
	for _, i := range []int{3, 4} {
		clients[i].AddHook(&scriptHook{script: script.AcquireMulti, after: func(context.Context) error {
			if ch := second.Load(); ch != nil {
				<-*ch
			}
			return nil
		}})
	}
	w, err := New(clients, WithRetryDelay(backoff, backoff), withLinger(time.Hour), WithObserver(countedTwo))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	for i := range r.servers { // held outside any Client
		r.take(i, "a", "other", time.Minute)
		r.take(i, "b", "other", time.Minute)
	}
	// The Client watches both keys before LockMulti starts (two Lock
	// calls, given up; the subscriptions linger), so that no subscription
	// becomes active during its wait: a gap would wake it.
	watching, stop := context.WithCancel(bg)
	waiting := []<-chan error{lockInBackground(watching, w, "a"), lockInBackground(watching, w, "b")}
	awaitSubscribed(t, w, "a", len(r.servers))
	awaitSubscribed(t, w, "b", len(r.servers))
	stop()
	for _, res := range waiting {
		if err := <-res; !errors.Is(err, context.Canceled) {
			t.Fatalf("a watching Lock returned %v", err)
		}
	}
	res := make(chan error, 1)
	go func() {
		l, err := w.LockMulti(bg, []string{"a", "b"}, time.Minute)
		if err == nil {
			err = l.Unlock(bg)
		}
		res <- err
	}()
	attempt := func(what string) {
		t.Helper()
		within(t, scaled(5*time.Second), what, func() bool {
			<-attempts
			return true
		})
	}
	answer := func(ch <-chan struct{}, what string) {
		t.Helper()
		within(t, scaled(5*time.Second), what, func() bool {
			<-ch
			return true
		})
	}
	attempt("the first attempt")
	answer(twoAnswered, "master 2's answer to the first attempt")
	answer(threeAnswered, "master 3's answer to the first attempt")
	notice := func(token string, masters ...int) {
		t.Helper()
		n := script.NewNotice(script.ReleasedNotice, "a", "other", token, 0)
		for _, i := range masters {
			if err := r.admin[i].Publish(bg, n.Channel, n.Message).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	quiet := func(what string) {
		t.Helper()
		select {
		case <-attempts:
			t.Fatal(what + " sent the multi-key waiter into another attempt")
		case <-time.After(scaled(300 * time.Millisecond)): // the absence of an attempt has no signal
		}
	}
	// A release the waiter tries on and loses everywhere: the masters that
	// released went to another waiter first, and the others had not
	// released yet. Their notices then say nothing new: the other waiter
	// holds the key.
	notice("r1", 1)
	attempt("the attempt on the first release")
	// Master 3's refusal marked, or its notice would come before its
	// mark, and be rightly ignored whatever the attempt's yeses.
	answer(threeAnswered, "master 3's answer to the attempt on the first release")
	notice("r1", 3)
	quiet("a release by a master that refused an attempt no master said yes to")

	// A release the waiter tries on and takes master 1 with. Master 2
	// announces it before it refuses the attempt, as a master does that
	// released and then gave the key to another waiter; its refusal is
	// counted before the attempt returns.
	heard := make(chan error, 1)
	repeat := func() { // on the pipe's goroutine: no t.Fatal here
		before := heardReleases(w, "a", 2)
		n := script.NewNotice(script.ReleasedNotice, "a", "other", "r2", 0)
		if err := r.admin[2].Publish(bg, n.Channel, n.Message).Err(); err != nil {
			heard <- err
			return
		}
		for end := time.Now().Add(scaled(5 * time.Second)); heardReleases(w, "a", 2) == before; {
			if time.Now().After(end) {
				heard <- errors.New("the waiter never heard master 2's notice")
				return
			}
			time.Sleep(time.Millisecond) // the waker offers no signal
		}
		heard <- nil
	}
	answered := make(chan struct{})
	staging.Store(&answered)
	second.Store(&answered)
	early.Store(&repeat)
	r.admin[1].Del(bg, "a", "b")
	notice("r2", 1)
	attempt("the attempt on the second release")
	if err := within(t, scaled(10*time.Second), "the attempt on the release reaching master 2", func() error { return <-heard }); err != nil {
		t.Fatal(err)
	}
	quiet("a repeat of a release heard before the master refused")

	notice("r2", 3) // a master that refused, released since
	attempt("the attempt on a release by a master that refused")
	notice("r3", 1) // a new release still wakes it
	attempt("the attempt on a new release")
	for i := range r.servers {
		r.admin[i].Del(bg, "a", "b")
	}
	notice("r4", 1)
	awaitLockWithin(t, res, backoff/2, "the multi-key waiter slept its backoff with the keys free")
}

// heardReleases is how many release notices of key c heard from node.
func heardReleases(c *Client, key string, node int) int {
	c.wk.Mu.Lock()
	defer c.wk.Mu.Unlock()
	if kw := c.wk.Keys[key]; kw != nil && node < len(kw.NodeReleases) {
		return kw.NodeReleases[node]
	}
	return 0
}

// A LockMulti waiter woken by the first master's release notice may try
// before the release reached the other masters, and lose to them; their
// notices, repeats of a release it heard already, then say the key is
// free where the attempt was refused, and it tries again instead of
// sleeping its backoff with the key free. (A CI run under -race: the
// waiter of TestLockMultiIsWokenByAReleaseOfEitherKey slept through the
// release, its attempt ahead of the release on most masters.)
func TestLockMultiTriesAgainWhenTheMastersThatRefusedItReleaseLater(t *testing.T) {
	r := startReal(t, 5)
	holder := r.client()
	rounds, replies := make(chan RoundEvent, 16), make(chan struct{}, 64)
	clients := make([]redis.UniversalClient, len(r.servers))
	for i, s := range r.servers {
		clients[i] = s.Client(nil)
	}
	// Every master gets every attempt, and answers it.
	sentTogether(script.AcquireMulti, clients, scaled(5*time.Second))
	waiter, err := New(clients, WithRetryDelay(scaled(time.Minute), scaled(time.Minute)), WithObserver(Observer{
		Round: func(e RoundEvent) {
			if e.Op == "lock" {
				rounds <- e
			}
		},
		NodeReply: func(e NodeReplyEvent) {
			if e.Op == "lock" {
				replies <- struct{}{}
			}
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = waiter.Close() })
	l := mustLock(t, holder, "b", time.Minute) // on every master: settled, no SET still on its way
	got := multiInBackground(waiter, "a", "b")
	refused := func(what string) {
		t.Helper()
		e := within(t, scaled(5*time.Second), what, func() RoundEvent { return <-rounds })
		if e.Won() {
			t.Fatalf("%s won a held key", what)
		}
	}
	refused("the first attempt")
	// Once a majority confirmed its subscriptions, it tries once more (a
	// release may have gone unheard before them), and is refused again.
	// Staged after it, the release below is what its next attempt hears;
	// staged before, that attempt raced the holder's Unlock, and could
	// read the notices of the masters that refused it before their
	// refusals, which leaves it to its backoff (1 run in 360, six race
	// binaries side by side).
	refused("the attempt its subscriptions woke")
	r.subscribed("a")
	r.subscribed("b")
	// The release reaches master 0 first: the waiter tries on its notice,
	// and the other masters, not released yet, refuse it.
	if err := r.admin[0].Del(bg, "b").Err(); err != nil {
		t.Fatal(err)
	}
	release := script.NewNotice(script.ReleasedNotice, "b", holder.id, l.Token(), 0)
	if err := r.admin[0].Publish(bg, release.Channel, release.Message).Err(); err != nil {
		t.Fatal(err)
	}
	refused("the attempt woken by master 0's release")
	// Every master's answer to it is in, the refusals marked, before the
	// others release: three attempts, five answers each.
	within(t, scaled(5*time.Second), "the attempts' answers", func() bool {
		for range 3 * len(r.servers) {
			<-replies
		}
		return true
	})
	// Now the others: their notices repeat a release the waiter heard.
	if err := l.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	awaitLockWithin(t, got, scaled(5*time.Second), "LockMulti slept through the release on the masters that had refused it")
}

// A LockMulti waiter whose attempt's only yes is taken in after the
// refusing masters' notices of the release (the yes came on one
// connection, the notices on others) looks at those notices again when the
// yes comes: it tries again instead of sleeping its backoff with the keys
// free. (Found by an adversary pass, 4 of 4 with master 0's reply held.)
func TestLockMultiLooksAgainWhenItsAttemptsYesComesLate(t *testing.T) {
	r := startReal(t, 5)
	holder := r.client()
	var armed atomic.Bool
	replied, proceed := make(chan struct{}), make(chan struct{})
	clients := make([]redis.UniversalClient, len(r.servers))
	for i, s := range r.servers {
		clients[i] = s.Client(nil)
	}
	// Every master gets every attempt, so that each answers it: a request
	// still queued when the round was decided would be dropped, and one
	// sent late could land after the holder's release.
	sentTogether(script.AcquireMulti, clients, scaled(5*time.Second))
	clients[0].AddHook(&scriptHook{script: script.AcquireMulti, after: func(context.Context) error {
		if armed.CompareAndSwap(true, false) {
			close(replied)
			<-proceed // the reply read, not yet taken in
		}
		return nil
	}})
	rounds := make(chan RoundEvent, 16)
	answers := make(chan int, 64) // the node of each answer to an attempt
	backoff := scaled(time.Minute)
	waiter, err := New(clients, WithRetryDelay(backoff, backoff), withLinger(time.Hour), WithObserver(Observer{Round: func(e RoundEvent) {
		if e.Op == "lock" {
			rounds <- e
		}
	}, NodeReply: func(e NodeReplyEvent) {
		if e.Op == "lock" && e.Key == "a,b" {
			answers <- e.Node
		}
	}}))
	if err != nil {
		t.Fatal(err)
	}
	var sleeping atomic.Pointer[[]<-chan struct{}] // the key events the waiter last went to sleep on
	waiter.cfg.test.sleepingMulti = func(events []<-chan struct{}) {
		evs := slices.Clone(events)
		sleeping.Store(&evs)
	}
	var opened sync.Once
	open := func() { opened.Do(func() { close(proceed) }) }
	t.Cleanup(func() { open(); _ = waiter.Close() })
	// Subscribed before LockMulti starts: no gap wakes it during the test.
	watching(t, waiter, "a")
	watching(t, waiter, "b")
	l := mustLock(t, holder, "b", time.Minute) // on every master: settled, no SET still on its way
	got := multiInBackground(waiter, "a", "b")
	if (<-rounds).Won() {
		t.Fatal("the first attempt won a held key")
	}
	answered := func(what string, nodes ...int) {
		t.Helper()
		if err := within(t, scaled(5*time.Second), what, func() error {
			for due := len(nodes); due > 0; due-- {
				if n := <-answers; !slices.Contains(nodes, n) {
					return fmt.Errorf("%s: an answer from master %d came too", what, n)
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	answered("every master's answer to the first attempt", 0, 1, 2, 3, 4)
	// The release reaches master 0 first; the waiter tries on its notice,
	// master 0 says yes (held back), the others refuse.
	armed.Store(true)
	if err := r.admin[0].Del(bg, "b").Err(); err != nil {
		t.Fatal(err)
	}
	release := script.NewNotice(script.ReleasedNotice, "b", holder.id, l.Token(), 0)
	if err := r.admin[0].Publish(bg, release.Channel, release.Message).Err(); err != nil {
		t.Fatal(err)
	}
	within(t, scaled(5*time.Second), "master 0's answer to the attempt on the release", func() bool {
		<-replied
		return true
	})
	if (<-rounds).Won() {
		t.Fatal("the attempt won a key held on four masters")
	}
	// Every refusal in before the release: a request of the attempt that
	// reached its master after the release would be a yes of its own.
	answered("the refusals of masters 1-4", 1, 2, 3, 4)
	heard := make([]int, len(r.servers))
	for i := range heard {
		heard[i] = heardReleases(waiter, "b", i)
	}
	if err := l.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	within(t, scaled(5*time.Second), "the waiter hearing the release from masters 1-4", func() bool {
		for i := 1; i < len(heard); i++ {
			for heardReleases(waiter, "b", i) == heard[i] {
				time.Sleep(time.Millisecond) // the waker offers tests no signal
			}
		}
		return true
	})
	// And asleep again with every notice looked at (a notice fires its
	// key's event as it is counted): one it looked at only after the yes
	// came would wake it on its own, and the test would prove nothing.
	within(t, scaled(5*time.Second), "the waiter looking at the notices", func() bool {
		for {
			if evs := sleeping.Load(); evs != nil && !slices.ContainsFunc(*evs, eventFired) {
				return true
			}
			time.Sleep(time.Millisecond) // no signal: the sleeper is blocked in a select
		}
	})
	open() // now the yes
	awaitLockWithin(t, got, scaled(5*time.Second), "LockMulti slept its backoff: its attempt's yes came after the notices")
}

// eventFired reports whether a key event's channel (closed to fire) fired.
func eventFired(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
