package engine

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// Tests of Do, Lock.Done, the local FIFO of waiters and pub/sub wake-ups.

func TestDoRunsFnUnderTheLockAndReleasesIt(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client()
	errFn := errors.New("fn failed")
	var during int
	err := c.Do(bg, "k", time.Minute, func(context.Context) error {
		during = m.everywhere("k")
		return errFn
	})
	if !errors.Is(err, errFn) || errors.Is(err, ErrLockLost) {
		t.Fatalf("Do = %v, want fn's error and not ErrLockLost", err)
	}
	if during != 5 {
		t.Fatalf("fn ran with the key on %d nodes, want 5", during)
	}
	settle(c)
	if n := m.count("k", ""); n != 5 {
		t.Fatalf("Do left the key on %d nodes: %q", 5-n, m.values("k"))
	}
}

// everywhere waits until all nodes hold the same value for key and returns
// how many do. It stands in for settle inside Do's fn, where the watchdog
// may start operations concurrently.
func (m *minis) everywhere(key string) int {
	m.t.Helper()
	return within(m.t, scaled(5*time.Second), "the key on every node", func() int {
		for {
			vals := m.values(key)
			if n := m.count(key, vals[0]); vals[0] != "" && n == len(vals) {
				return n
			}
			time.Sleep(time.Millisecond) // late SETs give no signal
		}
	})
}

func TestDoReleasesAndStopsExtendingWhenFnPanics(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client()
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want fn's panic", r)
			}
		}()
		_ = c.Do(bg, "k", scaled(300*time.Millisecond), func(context.Context) error { panic("boom") }) // node deadline ttl/10: roomy on a loaded machine
	}()
	settle(c)
	if n := m.count("k", ""); n != 5 {
		t.Fatalf("the key is still on %d nodes after fn panicked", 5-n)
	}
}

func TestDoRejectsBadInputWithoutRunningFn(t *testing.T) {
	m := newMinis(t, 3, nil)
	c := m.client()
	if err := c.Do(bg, "k", time.Minute, nil); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("nil fn: %v", err)
	}
	ran := false
	fn := func(context.Context) error { ran = true; return nil }
	if err := c.Do(bg, "", time.Minute, fn); !errors.Is(err, ErrInvalidArgument) || ran {
		t.Fatalf("empty key: %v, fn ran: %v", err, ran)
	}
}

func TestDoReturnsNotObtainedWithoutRunningFn(t *testing.T) {
	m := newMinis(t, 3, nil)
	c := m.client()
	for i := range 3 {
		m.take(i, "k", "other", time.Minute)
	}
	ctx, cancel := context.WithTimeout(bg, scaled(50*time.Millisecond))
	defer cancel()
	ran := false
	err := c.Do(ctx, "k", time.Minute, func(context.Context) error { ran = true; return nil })
	if !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) || ran {
		t.Fatalf("Do on a taken key = %v (fn ran: %v); want ErrNotObtained and DeadlineExceeded", err, ran)
	}
}

// TestDoKeepsTheLockForAFnMuchLongerThanTheTTL: fn runs for many TTLs on
// real masters while another client keeps trying; the extensions must keep
// it out, and fn's context must stay alive.
func TestDoKeepsTheLockForAFnMuchLongerThanTheTTL(t *testing.T) {
	r := startReal(t, 5)
	c, other := r.client(), r.client()
	ttl := scaled(150 * time.Millisecond)
	stolen := make(chan *Lock, 1)
	err := c.Do(bg, "k", ttl, func(ctx context.Context) error {
		end := time.Now().Add(6 * ttl)
		for time.Now().Before(end) {
			if l, err := other.TryLock(bg, "k", ttl); err == nil {
				stolen <- l
				return nil
			}
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(ttl / 10): // the contender's pace
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Do with fn ≫ ttl: %v", err)
	}
	select {
	case l := <-stolen:
		t.Fatalf("another client took the lock while fn ran (until %v)", l.Until())
	default:
	}
	if _, err := other.TryLock(bg, "k", ttl); err != nil {
		t.Fatalf("after Do, the lock should be free: %v", err)
	}
}

// TestDoCancelsFnWhenTheMajorityIsLost: three of five masters are killed
// under a running fn. Extensions fail, and fn's context must be cancelled by
// the validity end at the latest, with ErrLockLost from Do.
func TestDoCancelsFnWhenTheMajorityIsLost(t *testing.T) {
	r := startReal(t, 5)
	c := r.client()
	ttl := scaled(300 * time.Millisecond)
	var killed, cancelled time.Time
	var cause error
	err := c.Do(bg, "k", ttl, func(ctx context.Context) error {
		for i := range 3 {
			r.servers[i].Kill()
		}
		killed = time.Now()
		select {
		case <-ctx.Done():
			cancelled = time.Now()
			cause = context.Cause(ctx)
		case <-time.After(10 * ttl):
		}
		return nil
	})
	if cancelled.IsZero() {
		t.Fatalf("fn's context was not cancelled within %v of losing the majority", 10*ttl)
	}
	if d := cancelled.Sub(killed); d > ttl+scaled(100*time.Millisecond) {
		t.Fatalf("fn's context was cancelled %v after the majority was lost, want within the TTL %v", d, ttl)
	}
	if !errors.Is(err, ErrLockLost) || !errors.Is(cause, ErrLockLost) {
		t.Fatalf("Do = %v, cause %v; want ErrLockLost for both", err, cause)
	}
}

// TestDoCancelsFnAtOnceWhenTheKeysAreGone: the keys vanish from a majority
// (flushed, as after restarts without persistence); the next extension is
// refused and fn's context is cancelled then, well before the validity end.
func TestDoCancelsFnAtOnceWhenTheKeysAreGone(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client()
	ttl := scaled(600 * time.Millisecond)
	var flushed, cancelled time.Time
	err := c.Do(bg, "k", ttl, func(ctx context.Context) error {
		m.everywhere("k")
		for i := range 3 {
			m.servers[i].FlushAll()
		}
		flushed = time.Now()
		<-ctx.Done()
		cancelled = time.Now()
		return ctx.Err()
	})
	if !errors.Is(err, ErrLockLost) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Do = %v, want ErrLockLost joined with fn's context.Canceled", err)
	}
	if !strings.Contains(err.Error(), "not held") {
		t.Fatalf("Do = %v, want the refused extension as the cause", err)
	}
	// The first extension is due ttl/3 after the lock was taken.
	if d := cancelled.Sub(flushed); d > ttl/3+scaled(100*time.Millisecond) {
		t.Fatalf("cancelled %v after the keys vanished, want by the next extension (%v)", d, ttl/3)
	}
}

func TestDoneClosesAtTheValidityEnd(t *testing.T) {
	m := newMinis(t, 3, nil)
	c := m.client()
	l := mustLock(t, c, "k", scaled(100*time.Millisecond))
	select {
	case <-l.Done():
		t.Fatal("Done closed right after the lock was taken")
	default:
	}
	select {
	case <-l.Done():
		if now := time.Now(); now.Before(l.Until()) {
			t.Fatalf("Done closed %v before Until", l.Until().Sub(now))
		}
	case <-time.After(time.Until(l.Until()) + scaled(200*time.Millisecond)):
		t.Fatal("Done did not close at the validity end")
	}
}

func TestDoneClosesAtUnlockAndStaysOpenAcrossExtend(t *testing.T) {
	m := newMinis(t, 3, nil)
	ttl := scaled(100 * time.Millisecond)
	c := m.client(WithNodeTimeout(ttl / 2)) // the default, ttl/10, is tight on a loaded machine
	l := mustLock(t, c, "k", ttl)
	first := l.Until()
	if err := l.Extend(bg, 10*ttl); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
		t.Fatal("Done closed after a successful Extend")
	case <-time.After(time.Until(first) + ttl): // past the first validity end
	}
	if err := l.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("Done still open after Unlock")
	}
	var nilLock *Lock
	<-nilLock.Done() // closed, not nil: must not block
}

func TestLocalWaitersAreServedInArrivalOrder(t *testing.T) {
	m := newMinis(t, 5, nil)
	cmds := countCommands(m.clients)
	c := m.client()
	holder, err := c.Lock(bg, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	settle(c)
	before := cmds()
	const waiters = 5
	order := make(chan int, waiters)
	var wg sync.WaitGroup
	for i := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Lock(bg, "k", time.Minute)
			if err != nil {
				t.Error(err)
				return
			}
			order <- i
			_ = l.Unlock(bg)
		}()
		queued(t, c, "k", i+1)
	}
	if n := cmds() - before; n != 0 {
		t.Fatalf("queued local waiters sent %d commands while the lock was held locally", n)
	}
	if err := holder.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(order)
	want := 0
	for got := range order {
		if got != want {
			t.Fatalf("waiter %d got the lock in place %d", got, want)
		}
		want++
	}
}

func TestLocalWaiterGivesUpItsPlaceWhenCtxEnds(t *testing.T) {
	m := newMinis(t, 3, nil)
	c := m.client()
	holder, err := c.Lock(bg, "k", time.Minute) // Lock, not TryLock, holds the turn
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	res := lockInBackground(ctx, c, "k")
	queued(t, c, "k", 1)
	cancel()
	if err := <-res; !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock cancelled in the queue: %v", err)
	}
	if err := holder.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	// The queue is empty again: the next Lock takes the turn at once.
	got := within(t, scaled(time.Second), "Lock", func() error {
		_, err := c.Lock(bg, "k", time.Minute)
		return err
	})
	if got != nil {
		t.Fatal(got)
	}
}

func TestLocalTurnPassesWhenTheHoldersValidityEnds(t *testing.T) {
	m := newMinis(t, 3, nil)
	c := m.client(WithRetryDelay(time.Millisecond, 5*time.Millisecond))
	ttl := scaled(100 * time.Millisecond)
	if _, err := c.Lock(bg, "k", ttl); err != nil { // never unlocked
		t.Fatal(err)
	}
	m.fastForward(ttl) // the keys expire on the servers
	got := within(t, ttl+scaled(time.Second), "the next local Lock", func() error {
		_, err := c.Lock(bg, "k", ttl)
		return err
	})
	if got != nil {
		t.Fatal(got)
	}
}

// TestWaiterWakesOnReleaseNotOnItsBackoff: a waiter in another Client (as in
// another process) has a 1 s backoff; the release notice must wake it long
// before that.
func TestWaiterWakesOnReleaseNotOnItsBackoff(t *testing.T) {
	r := startReal(t, 5)
	backoff := scaled(time.Second)
	holderC := r.client()
	waiterC := r.client(WithRetryDelay(backoff, 2*backoff))
	holder, err := holderC.TryLock(bg, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan time.Time, 1)
	go func() {
		if _, err := waiterC.Lock(bg, "k", time.Minute); err != nil {
			t.Error(err)
		}
		res <- time.Now()
	}()
	r.subscribed("k")
	released := time.Now()
	if err := holder.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	woke := <-res
	d := woke.Sub(released)
	t.Logf("waiter had the lock %v after the release (backoff %v)", d, backoff)
	if d > backoff/4 {
		t.Fatalf("waiter took %v after the release, not well under its backoff %v", d, backoff)
	}
}

// TestLostSubscriptionDegradesToPolling: the waiter's subscription
// connections are killed on every node before the release; it must still
// get the lock, through its backoff timer or a re-subscription.
func TestLostSubscriptionDegradesToPolling(t *testing.T) {
	r := startReal(t, 5)
	holderC := r.client()
	waiterC := r.client(WithRetryDelay(scaled(50*time.Millisecond), scaled(100*time.Millisecond)))
	holder, err := holderC.TryLock(bg, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	res := lockInBackground(bg, waiterC, "k")
	r.subscribed("k")
	for i, a := range r.admin {
		if err := a.ClientKillByFilter(bg, "TYPE", "pubsub").Err(); err != nil {
			t.Fatalf("CLIENT KILL on node %d: %v", i, err)
		}
	}
	if err := holder.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	awaitLock(t, res, "the waiter hung after losing its subscription")
}

// TestClosedSubscriptionDegradesToPolling: the same with the subscription
// gone for good (closed under the waker), so only the timer is left.
func TestClosedSubscriptionDegradesToPolling(t *testing.T) {
	m := newMinis(t, 3, nil)
	holderC := m.client()
	waiterC := m.client(WithRetryDelay(scaled(20*time.Millisecond), scaled(50*time.Millisecond)))
	holder := mustLock(t, holderC, "k", time.Minute)
	res := lockInBackground(bg, waiterC, "k")
	within(t, scaled(5*time.Second), "the waiter's subscription", func() bool {
		for {
			waiterC.wk.Mu.Lock()
			n := len(waiterC.wk.Subs)
			waiterC.wk.Mu.Unlock()
			if n > 0 {
				return true
			}
			time.Sleep(time.Millisecond) // no signal exists
		}
	})
	waiterC.wk.Mu.Lock()
	for _, s := range waiterC.wk.Subs {
		_ = s.Ps.Close()
	}
	waiterC.wk.Mu.Unlock()
	if err := holder.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	awaitLock(t, res, "the waiter hung with its subscription closed")
}
