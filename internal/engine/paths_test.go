package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/script"
)

// Every path, tried as an adversary would: late replies, a cancelled ctx,
// concurrent calls on one Lock, masters at maxmemory or without channel
// rights, a closed or zero Client, a nil Lock. Each test here failed on the
// code before its fix.

// scriptHook lets a test hold one script's requests on their way to the
// node (before) or their replies on the way back (after the command ran
// on the node). An error from after replaces the reply: it was lost.
type scriptHook struct {
	script *script.Script
	match  func(argv []any) bool // nil: every call of script
	before func(ctx context.Context)
	after  func(ctx context.Context) error
}

func (h *scriptHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessPipelineHook does the same for a batch (pipe.go): before runs once
// when a request of the batch matches, and after once per matching request,
// its error replacing that request's reply alone.
func (h *scriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var matched []redis.Cmder
		for _, cmd := range cmds {
			if h.matches(cmd) {
				matched = append(matched, cmd)
			}
		}
		if len(matched) == 0 {
			return next(ctx, cmds)
		}
		if h.before != nil {
			h.before(ctx)
		}
		err := next(ctx, cmds)
		if h.after != nil {
			for _, cmd := range matched {
				if cmd.Err() != nil && strings.HasPrefix(cmd.Err().Error(), "NOSCRIPT") {
					continue
				}
				if lost := h.after(ctx); lost != nil {
					cmd.SetErr(lost)
				}
			}
		}
		return err
	}
}
func (h *scriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !h.matches(cmd) {
			return next(ctx, cmd)
		}
		if h.before != nil {
			h.before(ctx)
		}
		err := next(ctx, cmd)
		if h.after != nil && (err == nil || !strings.HasPrefix(err.Error(), "NOSCRIPT")) {
			if lost := h.after(ctx); lost != nil {
				return lost
			}
		}
		return err
	}
}

func (h *scriptHook) matches(cmd redis.Cmder) bool {
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	if h.script == script.Acquire && isQuickSet(args) {
		// The quick acquisition (quick.go's quickCmds) stands for the
		// acquire script: its token and TTL are the script's ARGV[1..2].
		return h.match == nil || h.match([]any{args[2], args[5]})
	}
	if name := strings.ToLower(fmt.Sprint(args[0])); name != "evalsha" && name != "eval" {
		return false
	}
	if s := fmt.Sprint(args[1]); s != h.script.Hash() && !isSource(s, h.script) {
		return false
	}
	if h.match == nil {
		return true
	}
	nkeys, err := strconv.Atoi(fmt.Sprint(args[2]))
	return err == nil && len(args) >= 3+nkeys && h.match(args[3+nkeys:]) // ARGV
}

// isQuickSet reports whether args are the quick acquisition's SET key
// token NX PX ttl.
func isQuickSet(args []any) bool {
	return len(args) == 6 && strings.EqualFold(fmt.Sprint(args[0]), "set") && strings.EqualFold(fmt.Sprint(args[3]), "nx")
}

// isSource reports whether src is the source of s (EVAL after NOSCRIPT).
func isSource(src string, s *script.Script) bool {
	return redis.NewScript(src).Hash() == s.Hash()
}

// hookAll adds h to every client.
func hookAll(clients []redis.UniversalClient, h redis.Hook) {
	for _, c := range clients {
		c.AddHook(h)
	}
}

// ttlArg matches a script call whose ARGV[i+1] is d in milliseconds.
func ttlArg(i int, d time.Duration) func(args []any) bool {
	want := fmt.Sprint(d.Milliseconds())
	return func(args []any) bool { return len(args) > i && fmt.Sprint(args[i]) == want }
}

// supporters counts the nodes on which key certainly lives until at least
// until with token: what Until promises of a majority. t1 is taken after
// the PTTL reply, so t1 + PTTL + 1 ms (PTTL rounds down) is no earlier than
// the real expiry.
func (r *realNodes) supporters(key, token string, until time.Time) int {
	r.t.Helper()
	n := 0
	for i, a := range r.admin {
		v, err := a.Get(bg, key).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			r.t.Fatalf("GET on node %d: %v", i, err)
		}
		pttl, err := a.PTTL(bg, key).Result()
		if err != nil {
			r.t.Fatalf("PTTL on node %d: %v", i, err)
		}
		if v == token && time.Now().Add(pttl+time.Millisecond).After(until) {
			n++
		}
	}
	return n
}

// assertUntilTrue fails unless a majority of the nodes keep l's key at
// least until l.Until(): otherwise another client could take it while l's
// holder still trusts it.
func (r *realNodes) assertUntilTrue(l *Lock) {
	r.t.Helper()
	until := l.Until()
	if !until.After(time.Now()) {
		return // nothing is promised any more
	}
	if n := r.supporters(l.Key(), l.Token(), until); n < quorum(len(r.admin)) {
		r.t.Fatalf("Until() is %v ahead, but only %d nodes keep the key that long: %q, PTTLs %v",
			time.Until(until).Round(time.Millisecond), n, r.values(l.Key()), r.pttls(l.Key()))
	}
}

func (r *realNodes) pttls(key string) []time.Duration {
	out := make([]time.Duration, len(r.admin))
	for i, a := range r.admin {
		out[i], _ = a.PTTL(bg, key).Result()
	}
	return out
}

// Defect 1: a failed Extend to a shorter TTL. The masters shortened the
// keys, but the caller was told ErrNotObtained with Until unchanged.
func TestFailedExtendToAShorterTTLLeavesUntilTrue(t *testing.T) {
	for _, how := range []string{"replies after the node deadline", "ctx cancelled in flight"} {
		t.Run(how, func(t *testing.T) {
			r := startReal(t, 5)
			c := r.client(WithNodeTimeout(scaled(50 * time.Millisecond)))
			l, err := c.TryLock(bg, "k", 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			settle(c)
			ctx, cancel := context.WithCancel(bg)
			defer cancel()
			hookAll(r.clients, &scriptHook{script: script.Extend, after: func(nctx context.Context) error {
				if how == "ctx cancelled in flight" {
					cancel()
				}
				<-nctx.Done()
				return nctx.Err() // the reply comes back too late
			}})
			if err := l.Extend(ctx, scaled(300*time.Millisecond)); !errors.Is(err, ErrNotObtained) {
				t.Fatalf("Extend with late replies = %v, want ErrNotObtained", err)
			}
			settle(c)
			r.assertUntilTrue(l)
			// And the holder's belief is safe against a second holder.
			other := r.client()
			time.Sleep(scaled(400 * time.Millisecond)) // past the shorter TTL: the keys' lifetime is what is tested
			if l2, err := other.TryLock(bg, "k", time.Second); err == nil && time.Now().Before(l.Until()) {
				t.Fatalf("a second holder (%.8s) got in while the first one's Until is %v ahead", l2.Token(), time.Until(l.Until()))
			}
		})
	}
}

// Defect 2: two concurrent Extends on one Lock, the longer one's replies
// delayed until the shorter one returned. Both succeed; Until must not
// outrun the keys.
func TestConcurrentExtendsNeverLeaveUntilPastTheKeys(t *testing.T) {
	r := startReal(t, 5)
	c := r.client(WithNodeTimeout(scaled(2 * time.Second)))
	l, err := c.TryLock(bg, "k", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	settle(c)
	long, short := 10*time.Second, scaled(500*time.Millisecond)
	ran := make(chan struct{}, len(r.clients))
	gate := make(chan struct{})
	open := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(open) // before Close, should the test fail while it is shut
	hookAll(r.clients, &scriptHook{script: script.Extend, match: ttlArg(1, long), after: func(context.Context) error {
		ran <- struct{}{}
		<-gate
		return nil
	}})
	longDone := make(chan error, 1)
	go func() { longDone <- l.Extend(bg, long) }()
	for range r.clients {
		<-ran // the long extension has run on every node; its replies are held
	}
	if err := l.Extend(bg, short); err != nil {
		t.Fatalf("short Extend: %v", err)
	}
	open()
	if err := <-longDone; err != nil {
		t.Fatalf("long Extend: %v", err)
	}
	r.assertUntilTrue(l)
}

// Extend to a shorter TTL than the validity left never shortens the keys,
// and never moves Until back.
func TestExtendNeverShortensTheKeys(t *testing.T) {
	r := startReal(t, 5)
	c := r.client()
	l, err := c.TryLock(bg, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	settle(c)
	until := l.Until()
	if err := l.Extend(bg, time.Second); err != nil {
		t.Fatal(err)
	}
	settle(c)
	if l.Until().Before(until) {
		t.Fatalf("Extend(1s) moved Until back by %v", until.Sub(l.Until()))
	}
	for i, d := range r.pttls("k") {
		if d < 8*time.Second {
			t.Fatalf("node %d: PTTL %v after Extend(1s) of a 10 s lock: the key was shortened", i, d)
		}
	}
	r.assertUntilTrue(l)
}

// Investigation: an Extend decided at the validity end, whose replies land
// just after it, extended the keys by a full TTL; a caller told ErrNotHeld
// and following the docs (no Unlock) left them behind.
func TestExtendThatEndsNotHeldLeavesNoKeys(t *testing.T) {
	r := startReal(t, 5)
	ttl := scaled(300 * time.Millisecond)
	c := r.client(WithNodeTimeout(scaled(2 * time.Second)))
	l, err := c.TryLock(bg, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	settle(c)
	hookAll(r.clients, &scriptHook{script: script.Extend, after: func(context.Context) error {
		<-l.Done() // the extension landed; its reply arrives after the validity ended
		return nil
	}})
	if err := l.Extend(bg, time.Minute); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Extend whose replies came after the validity end = %v, want ErrNotHeld", err)
	}
	settle(c)
	if got := r.values("k"); r.count("k", "") != 5 {
		t.Fatalf("keys left behind by an Extend that returned ErrNotHeld: %q, PTTLs %v", got, r.pttls("k"))
	}
	if err := l.Unlock(bg); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Unlock after the lock was lost = %v, want ErrNotHeld", err)
	}
}

// lockWithAWaiter takes "k" with c.Lock for ttl, which holds the turn a
// hand-off needs, and queues a second Lock of c behind it (a minute, within
// ctx), whose outcome res reports.
func lockWithAWaiter(ctx context.Context, t *testing.T, c *Client, ttl time.Duration) (holder *Lock, res <-chan error) {
	t.Helper()
	holder, err := c.Lock(bg, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	settle(c)
	res = lockInBackground(ctx, c, "k")
	queued(t, c, "k", 1)
	return holder, res
}

// Defect 3: a hand-off that fails on every master (maxmemory: the
// hand-off's SET answers OOM) must still release the lock, return nil and
// let the waiter try at once, not after the TTL.
func TestFailedHandOffReleasesAndServesTheWaiter(t *testing.T) {
	r := startReal(t, 5)
	c := r.client()
	ctx, cancel := context.WithTimeout(bg, scaled(20*time.Second))
	defer cancel()
	holder, res := lockWithAWaiter(ctx, t, c, time.Minute)
	r.setMaxmemory(t, "1", 0, 1, 2, 3, 4)
	if err := holder.Unlock(bg); err != nil {
		t.Fatalf("Unlock whose hand-off failed on OOM = %v, want nil (the deletes still work)", err)
	}
	// Not settle: the waiter keeps making attempts. The deletes past the
	// majority land within their node deadline.
	within(t, scaled(2*time.Second), "the old token gone from every master", func() bool {
		for r.count("k", holder.Token()) != 0 {
			time.Sleep(time.Millisecond) // the masters give no signal
		}
		return true
	})
	r.setMaxmemory(t, "0", 0, 1, 2, 3, 4)
	select {
	case err := <-res:
		if err != nil {
			t.Fatalf("the waiter's Lock: %v", err)
		}
	case <-time.After(scaled(3 * time.Second)): // the TTL is a minute: it was not waited out
		t.Fatal("the waiter did not get the lock after the failed hand-off")
	}
	if c.cfg.test.handOffs.Load() != 0 {
		t.Fatal("a failed hand-off was counted")
	}
}

// Defect 3, second half: a hand-off that wins on a majority must not leave
// the old token on the masters where its script errored.
func TestWinningHandOffLeavesNoOldTokenWhereItErrored(t *testing.T) {
	r := startReal(t, 5)
	c := r.client()
	holder, res := lockWithAWaiter(bg, t, c, time.Minute)
	r.setMaxmemory(t, "1", 0, 1)
	if err := holder.Unlock(bg); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	awaitLock(t, res, "the waiter")
	settle(c)
	r.setMaxmemory(t, "0", 0, 1)
	if got := r.values("k"); r.count("k", holder.Token()) != 0 {
		t.Fatalf("the old token outlived the hand-off on the masters where it failed: %q", got)
	}
	if c.cfg.test.handOffs.Load() != 1 {
		t.Fatalf("hand-offs = %d, want 1", c.cfg.test.handOffs.Load())
	}
}

// Defect 3, under latency: the hand-off's deadline comes from the waiter's
// short TTL, so 20 ms of latency fails it; Unlock must still release.
func TestHandOffTooSlowForTheWaitersTTLStillReleases(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client()
	holder, err := c.Lock(bg, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	settle(c)
	res := make(chan error, 1)
	go func() {
		_, err := c.Lock(bg, "k", scaled(100*time.Millisecond)) // node deadline ttl/10
		res <- err
	}()
	queued(t, c, "k", 1)
	hookAll(m.clients, &scriptHook{script: script.HandOff, before: func(context.Context) {
		time.Sleep(scaled(20 * time.Millisecond)) // latency, not synchronisation
	}})
	if err := holder.Unlock(bg); err != nil {
		t.Fatalf("Unlock whose hand-off timed out = %v, want nil", err)
	}
	awaitLock(t, res, "the waiter")
}

func (r *realNodes) setMaxmemory(t *testing.T, v string, nodes ...int) {
	t.Helper()
	for _, i := range nodes {
		if err := r.admin[i].ConfigSet(bg, "maxmemory", v).Err(); err != nil {
			t.Fatal(err)
		}
		if err := r.admin[i].ConfigSet(bg, "maxmemory-policy", "noeviction").Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// Defect 4: Lock after Close returns ErrClosed even while another goroutine
// of the Client holds the key; waiters queued when Close is called return
// too.
func TestLockAfterCloseReturnsErrClosed(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client()
	if _, err := c.Lock(bg, "k", time.Minute); err != nil {
		t.Fatal(err)
	}
	queuedRes := lockInBackground(bg, c, "k")
	queued(t, c, "k", 1)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	err := within(t, scaled(time.Second), "Lock after Close", func() error {
		_, err := c.Lock(bg, "k", time.Minute)
		return err
	})
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("Lock after Close = %v, want ErrClosed", err)
	}
	err = within(t, scaled(time.Second), "a waiter queued at Close", func() error { return <-queuedRes })
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("a waiter queued at Close = %v, want ErrClosed", err)
	}
	err = within(t, scaled(time.Second), "Do after Close", func() error {
		return c.Do(bg, "k", time.Minute, func(context.Context) error { return nil })
	})
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("Do after Close = %v, want ErrClosed", err)
	}
}

// A waiter backing off between attempts (another Client holds the key)
// returns ErrClosed at Close, not at its next attempt.
func TestCloseEndsALockWaitingOnItsBackoff(t *testing.T) {
	m := newMinis(t, 5, nil)
	holder := m.client()
	if _, err := holder.TryLock(bg, "k", time.Minute); err != nil {
		t.Fatal(err)
	}
	c := m.client(WithRetryDelay(time.Hour, time.Hour))
	// The key's subscription is active before the waiter's first attempt:
	// one becoming active after it would wake the waiter into another
	// attempt (a gap), and a Close during that attempt ends the call by
	// another path than the backoff's (its mutant survived first runs so,
	// in two of three full mutant runs).
	h := c.wk.Watch("k")
	defer h.Close()
	awaitSubscribed(t, c, "k", len(m.servers))
	res := lockInBackground(bg, c, "k")
	// The first attempt fails at once and marks the holder's key; the
	// waiter then waits on its hour-long backoff.
	within(t, scaled(5*time.Second), "the waiter's attempt", func() bool {
		for marked := 0; marked < c.quorum; {
			time.Sleep(time.Millisecond) // an attempt gives no signal
			marked = 0
			for _, s := range m.servers {
				v, _ := s.Get("k")
				if w, _ := s.Get("k" + script.WantedSuffix); isMarked(v, w) {
					marked++
				}
			}
		}
		return true
	})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	err := within(t, scaled(time.Second), "Lock waiting on its backoff at Close", func() error { return <-res })
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("Lock at Close = %v, want ErrClosed", err)
	}
}

// Defect 5: no method panics on a nil or zero *Lock.
func TestNilAndZeroLockNeverPanic(t *testing.T) {
	for name, l := range map[string]*Lock{"nil": nil, "zero": {}} {
		t.Run(name, func(t *testing.T) {
			if l.Key() != "" || l.Token() != "" || !l.Until().IsZero() {
				t.Fatalf("Key %q, Token %q, Until %v; want empty", l.Key(), l.Token(), l.Until())
			}
			select {
			case <-l.Done():
			default:
				t.Fatal("Done is not closed")
			}
			if err := l.Extend(bg, time.Second); !errors.Is(err, ErrNotHeld) {
				t.Fatalf("Extend: %v", err)
			}
			if err := l.Unlock(bg); !errors.Is(err, ErrNotHeld) {
				t.Fatalf("Unlock: %v", err)
			}
			if _, err := l.Fence(bg); !errors.Is(err, ErrNotHeld) {
				t.Fatalf("Fence: %v", err)
			}
		})
	}
}

// Defect 6: a Client not made by New refuses every call and never returns
// a lock (a zero Client has no nodes, and 0 votes of 0 made a "majority").
func TestZeroClientRefusesEveryCall(t *testing.T) {
	for name, c := range map[string]*Client{"nil": nil, "zero": {}} {
		t.Run(name, func(t *testing.T) {
			check := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "New") {
					t.Fatalf("%s = %v, want ErrInvalidArgument saying to use New", what, err)
				}
			}
			l, err := c.TryLock(bg, "k", time.Second)
			check("TryLock", err)
			if l != nil {
				t.Fatal("TryLock returned a lock")
			}
			l, err = c.Lock(bg, "k", time.Second)
			check("Lock", err)
			if l != nil {
				t.Fatal("Lock returned a lock")
			}
			ran := false
			check("Do", c.Do(bg, "k", time.Second, func(context.Context) error { ran = true; return nil }))
			if ran {
				t.Fatal("Do ran fn")
			}
			check("Close", c.Close())
		})
	}
}

// Concurrent Extend and Unlock on one Lock: whatever the order, the keys
// are gone afterwards, Unlock reports nil (it was held), and Until is in
// the past.
func TestConcurrentExtendAndUnlock(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client()
	for i := range 50 {
		key := fmt.Sprintf("k%d", i)
		l := mustLock(t, c, key, time.Minute)
		var wg sync.WaitGroup
		var unlockErr, extendErr error
		wg.Add(2)
		go func() { defer wg.Done(); extendErr = l.Extend(bg, 2*time.Minute) }()
		go func() { defer wg.Done(); unlockErr = l.Unlock(bg) }()
		wg.Wait()
		settle(c)
		if unlockErr != nil {
			t.Fatalf("round %d: Unlock next to Extend = %v (Extend %v)", i, unlockErr, extendErr)
		}
		if extendErr != nil && !errors.Is(extendErr, ErrNotHeld) {
			t.Fatalf("round %d: Extend next to Unlock = %v", i, extendErr)
		}
		if m.count(key, "") != 5 {
			t.Fatalf("round %d: keys left: %q", i, m.values(key))
		}
		if l.Until().After(time.Now()) {
			t.Fatalf("round %d: Until in the future after Unlock", i)
		}
	}
}

// Until counts from the round's start, not from its decision: every key was
// set after the start, so start + ttl − drift is what the keys guarantee;
// counting from a slow decision would promise more than they hold.
func TestUntilCountsFromTheRoundsStartNotItsDecision(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client(WithNodeTimeout(scaled(time.Second)))
	slow := scaled(50 * time.Millisecond)
	hookAll(m.clients, &scriptHook{script: script.Acquire, before: func(context.Context) {
		time.Sleep(slow) // latency on every node, not synchronisation
	}})
	const ttl = 10 * time.Second
	before := time.Now()
	l, err := c.TryLock(bg, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if promised, latest := l.Until(), before.Add(ttl-drift(ttl, DefaultDriftFactor)+slow/2); promised.After(latest) {
		t.Fatalf("Until is %v past start + ttl − drift: it counts from the decision", promised.Sub(latest)+slow/2)
	}
}

// Found by the adversarial review of the fixes: an Extend whose replies came
// too late (ErrNotObtained) had lengthened the keys to a minute; a later
// Extend, after the validity ended, returned ErrNotHeld without releasing
// them, so the key stayed blocked for a minute.
func TestExtendAfterTheValidityEndedReleasesWhatAFailedExtendLengthened(t *testing.T) {
	r := startReal(t, 5)
	c := r.client(WithNodeTimeout(scaled(50 * time.Millisecond)))
	l, err := c.TryLock(bg, "k", scaled(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	settle(c)
	hookAll(r.clients, &scriptHook{script: script.Extend, match: ttlArg(1, time.Minute), after: func(nctx context.Context) error {
		<-nctx.Done()
		return nctx.Err() // the extension ran on the node; its reply comes too late
	}})
	if err := l.Extend(bg, time.Minute); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("Extend with late replies = %v, want ErrNotObtained", err)
	}
	<-l.Done() // the validity ends
	if err := l.Extend(bg, time.Second); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Extend after the validity ended = %v, want ErrNotHeld", err)
	}
	settle(c)
	if n := r.count("k", l.Token()); n != 0 {
		t.Fatalf("Extend returned ErrNotHeld but left %d keys behind, PTTLs %v", n, r.pttls("k"))
	}
}

// Found by the adversarial review: Close while Unlock hands the lock to a
// queued waiter. The waiter gave the handed lock back with an Unlock that
// a closed Client refuses, so its keys stayed for the whole TTL while both
// calls reported failure or release. The waiter now keeps the lock it was
// handed (x/sync's semaphore gives back what it got as ctx ends, but a lock
// given back takes a round that a closed Client cannot make).
func TestCloseDuringAHandOffLeavesNoUnownedLock(t *testing.T) {
	r := startReal(t, 5)
	c := r.client()
	holder, err := c.Lock(bg, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	settle(c)
	type result struct {
		l   *Lock
		err error
	}
	res := make(chan result, 1)
	go func() {
		l, err := c.Lock(bg, "k", time.Minute)
		res <- result{l, err}
	}()
	queued(t, c, "k", 1)
	inHandOff := make(chan struct{}, 5)
	hookAll(r.clients, &scriptHook{script: script.HandOff, after: func(context.Context) error {
		inHandOff <- struct{}{}
		time.Sleep(scaled(30 * time.Millisecond)) // the replies take a while: latency, not synchronisation
		return nil
	}})
	unlocked := make(chan error, 1)
	go func() { unlocked <- holder.Unlock(bg) }()
	<-inHandOff
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-unlocked; err != nil {
		t.Fatalf("the holder's Unlock: %v", err)
	}
	w := <-res
	switch {
	case w.err == nil && r.count("k", w.l.Token()) < 3:
		t.Fatalf("the waiter's Lock returned a lock that holds %d masters: %q", r.count("k", w.l.Token()), r.values("k"))
	case w.err != nil && r.count("k", "") != 5:
		t.Fatalf("the waiter's Lock = %v, yet keys remain: %q, PTTLs %v", w.err, r.values("k"), r.pttls("k"))
	}
}

// Found by the adversarial review: with a waiter queued and a majority of
// masters hung, Unlock waited out the hand-off's deadline and then the
// deletes' deadline for the same hung masters.
func TestUnlockWhoseHandOffTimesOutWaitsOneDeadline(t *testing.T) {
	r := startReal(t, 5)
	nt := scaled(200 * time.Millisecond)
	c := r.client(WithNodeTimeout(nt))
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	holder, res := lockWithAWaiter(ctx, t, c, 10*time.Second)
	for _, i := range []int{2, 3, 4} {
		r.servers[i].Pause()
	}
	start := time.Now()
	err := holder.Unlock(bg)
	took := time.Since(start)
	if !errors.Is(err, ErrNotHeld) || !errors.Is(err, ErrNodeTimeout) {
		t.Fatalf("Unlock with a majority hung = %v, want ErrNotHeld with node timeouts", err)
	}
	if limit := nt + nt/2; took > limit {
		t.Fatalf("Unlock took %v with a majority hung; the node deadline is %v", took, nt)
	}
	cancel()
	if err := <-res; !errors.Is(err, context.Canceled) && err != nil {
		t.Fatalf("the waiter's Lock = %v", err)
	}
}

// Found by the second adversarial review: the hand-off round's goroutines
// read the new lock's ttl after the waiter had it, while its Extend wrote
// it (a data race under -race).
func TestHandOffRoundDoesNotRaceTheWaitersExtend(t *testing.T) {
	r := startReal(t, 5)
	c := r.client(WithNodeTimeout(scaled(2 * time.Second)))
	r.clients[4].AddHook(&scriptHook{script: script.Acquire, after: func(context.Context) error {
		// One slow master: the hand-off's goroutine for it waits for this
		// SET first, and outlives the round.
		time.Sleep(scaled(300 * time.Millisecond))
		return nil
	}})
	holder, err := c.Lock(bg, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Lock, 1)
	go func() {
		l, err := c.Lock(bg, "k", time.Second)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	queued(t, c, "k", 1)
	if err := holder.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if err := l.Extend(bg, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(bg); err != nil {
		t.Fatal(err)
	}
}

// Without notices a Client cannot hear another Client's waiter, which
// only polls: an Unlock releases the key even with a local waiter queued
// (I12), never hands it over.
func TestWithoutNoticesAnUnlockReleasesPastALocalWaiter(t *testing.T) {
	m := newMinis(t, 5, nil)
	a := m.client(WithoutNotices())
	l, err := a.Lock(bg, "k", time.Minute) // it holds the Client's turn for k
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, scaled(5*time.Second))
	defer cancel()
	res := lockInBackground(ctx, a, "k")
	queued(t, a, "k", 1)
	if err := l.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	awaitLock(t, res, "the local waiter")
	if n := a.cfg.test.handOffs.Load(); n != 0 {
		t.Fatalf("a Client without notices handed %d locks over to its own waiters; want a release", n)
	}
}

// Without notices, a Client whose goroutines contend for a key leaves it
// free between their turns (no hand-off, and the next local waiter backs
// off before its first attempt), so another Client's Lock, which only
// polls, gets it.
func TestWithoutNoticesOneClientDoesNotStarveAnother(t *testing.T) {
	m := newMinis(t, 5, nil)
	a := m.client(WithoutNotices())
	b := m.client(WithoutNotices())
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				l, err := a.Lock(ctx, "k", time.Second)
				if err != nil {
					continue
				}
				time.Sleep(5 * time.Millisecond) // the work under the lock
				_ = l.Unlock(bg)
			}
		}()
	}
	queued(t, a, "k", 2) // a's goroutines contend among themselves
	bctx, bcancel := context.WithTimeout(bg, scaled(5*time.Second))
	defer bcancel()
	start := time.Now()
	l, err := b.Lock(bctx, "k", time.Second)
	if err != nil {
		t.Fatalf("another Client's Lock starved for %v: %v (hand-offs by a: %d)", time.Since(start), err, a.cfg.test.handOffs.Load())
	}
	t.Logf("another Client got the lock after %v", time.Since(start).Round(time.Millisecond))
	_ = l.Unlock(bg)
	cancel()
	wg.Wait()
}

// Found by the fault generator: Close held the waker's mutex while closing
// a subscription whose SUBSCRIBE a hung master held for the driver's read
// timeout, and every waiter of the Client, returning ErrClosed, queued on
// that mutex for seconds past its deadline.
func TestCloseDoesNotStallWaitersBehindAHungSubscription(t *testing.T) {
	r := startReal(t, 5)
	holder := r.client()
	if _, err := holder.TryLock(bg, "k", time.Minute); err != nil {
		t.Fatal(err)
	}
	c, err := New(r.clients, WithNodeTimeout(scaled(50*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	r.servers[0].Pause() // its SUBSCRIBE will hang for go-redis's 3 s read timeout
	defer r.servers[0].Resume()
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	res := lockInBackground(ctx, c, "k")
	// The waiter's first attempt fails; it then subscribes, on every master.
	within(t, scaled(5*time.Second), "the subscriptions", func() bool {
		for {
			n := 0
			for _, a := range r.admin[1:] {
				if m, err := a.PubSubNumSub(bg, script.NoticeChannel("k")).Result(); err == nil && m[script.NoticeChannel("k")] > 0 {
					n++
				}
			}
			if n == 4 {
				return true
			}
			time.Sleep(time.Millisecond) // no signal for another client's SUBSCRIBE
		}
	})
	closed := make(chan struct{})
	go func() {
		_ = c.Close() // may wait for the hung SUBSCRIBE: that is documented
		close(closed)
	}()
	select {
	case err := <-res:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("the waiter's Lock at Close = %v, want ErrClosed", err)
		}
	case <-time.After(scaled(time.Second)):
		t.Fatal("the waiter's Lock did not return at Close: it waits behind the hung subscription")
	}
	r.servers[0].Resume()
	<-closed
}

// sentTogether makes every master's request of script wait, before it is
// sent, until each of the clients' masters has one on its way: no master
// answers a round before all of them were sent, so no request of it is
// ever given up unsent (a round decided first drops the requests still
// queued, and they report no NodeReply). A test that waits for one
// master's answer to every attempt needs it: on a loaded machine, three
// masters could refuse before the fourth's pipe sent its request. It
// counts the first send of each round (EVALSHA), not the EVAL that follows
// a NOSCRIPT, and stops waiting after limit (a master that truly was not
// sent), so that a test fails on its own check rather than hangs here.
func sentTogether(script *script.Script, clients []redis.UniversalClient, limit time.Duration) {
	together(&sendBarrier{n: len(clients), limit: limit}, script, clients)
}

// firstSentTogether is sentTogether for the first round only: the next
// go out as they come (a master's may wait behind a held reply).
func firstSentTogether(script *script.Script, clients []redis.UniversalClient, limit time.Duration) {
	together(&sendBarrier{n: len(clients), limit: limit, rounds: 1}, script, clients)
}

func together(b *sendBarrier, script *script.Script, clients []redis.UniversalClient) {
	for i, c := range clients {
		c.AddHook(&barrierHook{b: b, node: i, filter: &scriptHook{script: script}})
	}
}

// A sendBarrier lets a round's requests go once all n arrived, for the
// first `rounds` rounds (0: every round).
type sendBarrier struct {
	n      int
	limit  time.Duration
	rounds int

	mu      sync.Mutex
	arrived map[int]bool // this round's
	open    chan struct{}
	opened  int
}

func (b *sendBarrier) arrive(node int) {
	b.mu.Lock()
	if b.rounds > 0 && b.opened >= b.rounds {
		b.mu.Unlock()
		return
	}
	if b.open == nil || b.arrived[node] { // a node's second arrival is the next round's
		b.open, b.arrived = make(chan struct{}), map[int]bool{}
	}
	open := b.open
	b.arrived[node] = true
	if len(b.arrived) == b.n {
		close(open)
		b.open = nil
		b.opened++
	}
	b.mu.Unlock()
	select {
	case <-open:
	case <-time.After(b.limit):
	}
}

type barrierHook struct {
	b      *sendBarrier
	node   int
	filter *scriptHook
}

func (h *barrierHook) first(cmd redis.Cmder) bool {
	return h.filter.matches(cmd) && strings.EqualFold(fmt.Sprint(cmd.Args()[0]), "evalsha")
}

func (h *barrierHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *barrierHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.first(cmd) {
			h.b.arrive(h.node)
		}
		return next(ctx, cmd)
	}
}

func (h *barrierHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			// EVAL too: a batch sends a script's source the first time it
			// carries it (pipe.withSources), and is never answered NOSCRIPT
			// here, so no batch is a run again.
			if h.filter.matches(cmd) {
				h.b.arrive(h.node)
				break
			}
		}
		return next(ctx, cmds)
	}
}
