package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/redistest"
)

// TryLockMulti holds every key or none: with one key held by another, it
// fails and leaves none of the others set anywhere; once that key is free
// it takes all, Extend lengthens all, and Unlock deletes all.
func TestTryLockMultiTakesAllOrNone(t *testing.T) {
	r := startReal(t, 5)
	c := r.client()
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
	for _, a := range r.admin { // b's counter above a's, as if b had had many more holders
		if err := a.Set(bg, "b"+fenceSuffix, fa+1000, 0).Err(); err != nil {
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
	if got := hashSlot("123456789"); got != 0x31C3 { // CRC16/XMODEM's check value
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
		if got := hashSlot(key); int64(got) != want {
			t.Errorf("hashSlot(%q) = %d, CLUSTER KEYSLOT says %d", key, got, want)
		}
	}
}

// A multi-key acquisition announces nothing, so a waiter of LockMulti never
// hears a key taken: it acts only on a new release. The repeats of a
// release it heard already (every master sends one) renew its wait, and
// send it into no attempt on a key another waiter just took. (Found by an
// adversary review: when repeats began to wake waiters, multi-key waiters
// made twice the attempts, at half the throughput, with 8 Clients.)
func TestAMultiKeyWaiterActsOnlyOnANewRelease(t *testing.T) {
	r := startReal(t, 5)
	backoff := scaled(10 * time.Second)
	attempts := make(chan struct{}, 16) // one per attempt: its call to master 0 answered
	w := hookedClient(t, r, &scriptHook{script: acquireMultiScript, after: func(context.Context) error {
		attempts <- struct{}{}
		return nil
	}}, []int{0}, WithRetryDelay(backoff, backoff), withLinger(time.Hour))
	for i := range r.servers {
		r.take(i, "a", "other", time.Minute) // held outside any Client
		r.take(i, "b", "other", time.Minute)
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
	attempt("the first attempt")
	awaitSubscribed(t, w, "a", len(r.servers))
	notice := func(token string, masters ...int) {
		t.Helper()
		n := newNotice(releasedNotice, "a", "other", token, 0)
		for _, i := range masters {
			if err := r.admin[i].Publish(bg, n.channel, n.message).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	notice("other", 1) // a release, first heard: the waiter tries (and loses: the keys stay taken)
	attempt("the attempt on the release")
	notice("other", 2, 3) // the same release's repeats
	select {
	case <-attempts:
		t.Fatal("a repeat of a release heard already sent the multi-key waiter into another attempt")
	case <-time.After(scaled(300 * time.Millisecond)): // the absence of an attempt has no signal
	}
	notice("other-2", 1) // a new release still wakes it
	attempt("the attempt on a new release")
	for i := range r.servers {
		r.admin[i].Del(bg, "a", "b")
	}
	notice("other-3", 1)
	awaitLockWithin(t, res, backoff/2, "the multi-key waiter slept its backoff with the keys free")
}
