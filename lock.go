// A held lock: its validity and expiry, Extend, and Unlock.

package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// A Lock is a lock obtained by TryLock or Lock. It is safe for concurrent
// use. Its methods do not panic on a nil or zero *Lock: Extend and Unlock
// report ErrNotHeld, Done is closed, and Key, Token and Until are empty.
type Lock struct {
	c     *Client
	key   string
	token string
	holds []*hold // per node, indexed like c.nodes

	mu       sync.Mutex
	ttl      time.Duration // of the last successful acquisition or extension
	until    time.Time
	released bool
	givenUp  bool          // Extend found the lock lost and released its keys
	done     chan struct{} // closed when the validity ends or Unlock is called
	ended    bool          // done is closed
	timer    *time.Timer   // runs expire at until
	pass     func()        // hands the Client's turn for key to its next waiter
}

// Done returns a channel that is closed when the lock can no longer be
// trusted: its validity ended (Until passed without a successful Extend), an
// Extend found it lost, or Unlock was called. Select on it next to the work
// the lock protects. For a nil *Lock it returns a closed channel.
func (l *Lock) Done() <-chan struct{} {
	if l == nil || l.done == nil {
		return closedChan
	}
	return l.done
}

var closedChan = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// expire runs at Until: it ends the lock unless an extension moved Until.
func (l *Lock) expire() {
	l.mu.Lock()
	if !l.ended {
		if d := time.Until(l.until); d > 0 {
			l.timer.Reset(d)
			l.mu.Unlock()
			return
		}
	}
	l.endLocked()
	pass := l.takePass()
	l.mu.Unlock()
	pass()
}

// endLocked closes done once. Called with l.mu held.
func (l *Lock) endLocked() {
	if l.ended {
		return
	}
	l.ended = true
	close(l.done)
	l.timer.Stop()
}

// takePass returns the turn-passing function, once. Called with l.mu held.
func (l *Lock) takePass() func() {
	p := l.pass
	l.pass = nil
	if p == nil {
		return func() {}
	}
	return p
}

// passTurnAtEnd makes the lock hand the Client's turn for its key to the
// next local waiter when it is released or its validity ends.
func (l *Lock) passTurnAtEnd(pass func()) {
	l.mu.Lock()
	if l.ended && !l.released {
		l.mu.Unlock()
		pass() // the validity already ended
		return
	}
	l.pass = pass
	l.mu.Unlock()
}

// Key returns the locked key; "" for a nil *Lock.
func (l *Lock) Key() string {
	if l == nil {
		return ""
	}
	return l.key
}

// Token returns the random token that identifies this holder on the nodes;
// "" for a nil *Lock.
func (l *Lock) Token() string {
	if l == nil {
		return ""
	}
	return l.token
}

// Until returns the end of the lock's validity on the local monotonic clock:
// until then, no other client can hold the lock as long as the nodes' clocks
// run at a rate within the drift factor of this one's. Compare it with
// time.Now(), not with a wall-clock time from elsewhere. After Unlock, or
// once the lock was found lost, Until is in the past. For a nil *Lock it is
// the zero time.
func (l *Lock) Until() time.Time {
	if l == nil {
		return time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// Extend makes the lock live at least ttl from now on every node that still
// holds its token, in parallel (Redlock spec, step 6). It never shortens the
// keys: a ttl shorter than the validity left confirms that the lock is held
// and leaves the keys as they are. It succeeds when a majority answered
// before the current validity ended, and then moves Until to the start of
// the extension + ttl − drift, if that is later. An extension never
// re-creates a key that expired.
//
// Extend returns an error matching ErrNotHeld, and makes Until the past,
// when the lock was released, its validity had ended, or so many nodes said
// our token is gone that no majority holds it; the lock is then given up,
// and unless Unlock is already releasing it, Extend releases its keys in
// the background. It returns an error matching ErrNotObtained when a
// majority could not be reached for other reasons (timeouts, errors, ctx);
// Until is then unchanged and remains true: the lock may still be held
// until then, since no extension can have shortened it. Failures carry a
// *QuorumError. Bad input returns an error matching ErrInvalidArgument.
//
// Extend is safe to call concurrently with itself and with Unlock: Until
// only ever moves back when the lock ends.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if l == nil || l.c == nil {
		return fmt.Errorf("%w: no lock", ErrNotHeld)
	}
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	c := l.c
	ttl, err := c.checkTTL(ttl)
	if err != nil {
		return err
	}
	if err := c.enter(); err != nil {
		return err
	}
	defer c.bg.Done()
	until, err := l.heldUntil()
	if err != nil {
		// An earlier Extend that failed may have lengthened the keys all
		// the same: a lock whose validity ended is given up here too.
		l.giveUp(ttl)
		return err
	}

	start := time.Now()
	deadline := c.deadline(start, ttl)
	if until.Before(deadline) {
		deadline = until // a majority after the validity ended is too late
	}
	r := c.fanOut(ctx, "extend", l.key, deadline, l.refusedNodes(), func(ctx context.Context, n *node) (bool, error) {
		if err := l.holds[n.index].await(ctx); err != nil {
			return false, refusalAsVote(err)
		}
		return n.extend(ctx, l.key, l.token, ttl)
	})

	l.mu.Lock()
	settled := r.refused > len(c.nodes)-c.quorum || !r.decided.Before(l.until)
	switch {
	case !l.ended && r.won() && !settled && validity(ttl, r.elapsed(), c.cfg.driftFactor) > 0:
		// Every key of the majority now lives at least until start+ttl and
		// was never shortened, so the later of the two ends holds.
		if end := validUntil(start, ttl, c.cfg.driftFactor); end.After(l.until) {
			l.ttl, l.until = ttl, end
			l.timer.Reset(time.Until(end))
		}
		l.mu.Unlock()
		return nil
	case !l.ended && !settled: // undecided: the lock may still be held until Until
		l.mu.Unlock()
		return withCtx(ctx, r.error(ErrNotObtained))
	}
	// Lost: no majority holds our token, or the validity ended (this round
	// reached its end, or the expiry timer, Unlock or another Extend came
	// first). This round may have lengthened the keys all the same.
	if !l.ended && r.decided.Before(l.until) {
		l.until = r.decided
	}
	l.mu.Unlock()
	l.giveUp(ttl)
	return r.error(ErrNotHeld)
}

// giveUp ends a lock whose validity is over, if Unlock has not, and
// releases its keys once, since an extension may have lengthened them;
// unless Unlock is releasing them already. Unlock after it reports
// ErrNotHeld without contacting the nodes. The caller holds a registration
// (enter).
func (l *Lock) giveUp(ttl time.Duration) {
	l.mu.Lock()
	if l.released || l.givenUp || (!l.ended && time.Now().Before(l.until)) {
		l.mu.Unlock()
		return
	}
	l.givenUp = true
	l.endLocked()
	pass := l.takePass()
	l.mu.Unlock()
	pass()
	l.abandon(ttl)
}

// heldUntil returns the lock's validity end, or ErrNotHeld if the lock was
// released or its validity ended.
func (l *Lock) heldUntil() (time.Time, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return time.Time{}, fmt.Errorf("%w: %q was released", ErrNotHeld, l.key)
	}
	if !time.Now().Before(l.until) {
		return time.Time{}, fmt.Errorf("%w: validity of %q ended", ErrNotHeld, l.key)
	}
	return l.until, nil
}

// Unlock releases the lock: it deletes the key on every node where it still
// holds this lock's token, in parallel and under per-node deadlines, and
// never touches a key that holds another token. It returns as soon as the
// outcome is known; deletes still in flight finish in the background.
//
// Hand-off: when the lock was obtained by Lock (or Do), another goroutine
// of the same Client is queued for the key, and no other Client is known to
// want it, Unlock instead replaces this lock's token with a fresh one for
// that waiter, in one round; the waiter's Lock returns that new lock, whose
// validity counts from the round's start like any acquisition's. The key is
// never free in between. If the round does not reach a majority, Unlock
// rolls the new token back, deletes this lock's token wherever the hand-off
// left it, and the waiter makes attempts of its own.
//
// Unlock returns nil when a majority deleted (or handed over) the key before
// the validity ended. Otherwise it returns an error matching ErrNotHeld,
// with a *QuorumError when nodes were asked: the lock had expired, been
// taken over, or its nodes did not answer, so the critical section may have
// overlapped another holder's. A second Unlock, or an Unlock after Extend
// found the lock lost (and released its keys), returns ErrNotHeld without
// contacting the nodes. Unlock is safe to call concurrently with Extend.
//
// The deletes are sent even if ctx is already cancelled, so that an
// abandoned request does not leave its lock behind until the TTL; Unlock
// waits for them at most the node deadline.
func (l *Lock) Unlock(ctx context.Context) error {
	if l == nil || l.c == nil {
		return fmt.Errorf("%w: no lock", ErrNotHeld)
	}
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	c := l.c
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return fmt.Errorf("%w: %q was already released", ErrNotHeld, l.key)
	}
	l.released = true
	givenUp := l.givenUp
	l.endLocked()
	until, ttl := l.until, l.ttl
	hasTurn := l.pass != nil
	pass := l.takePass()
	l.mu.Unlock()
	if givenUp {
		pass()
		return fmt.Errorf("%w: %q was found lost by Extend, which released it", ErrNotHeld, l.key)
	}
	if err := c.enter(); err != nil {
		pass()
		return err
	}
	defer c.bg.Done()
	var failed *handOffCalls // a hand-off that ran first and lost
	if hasTurn && c.mayHandOff(l.key, until) {
		if next := c.turns.claim(l.key); next != nil {
			ok, calls, err := l.handOff(ctx, next, until, ttl)
			if ok {
				return err
			}
			failed = calls
			// The waiter gets the turn alone, after the deletes.
			pass = func() { next.served <- nil }
		}
	}
	defer pass() // the next local waiter tries once the deletes are decided

	own := c.wk.listening(l.key)
	var heard atomic.Int64 // the most subscribers a release notice reached
	announce := c.announce(releasedNotice, l.key, l.token, 0)
	start := time.Now()
	r := c.fanOut(context.WithoutCancel(ctx), "unlock", l.key, start.Add(c.nodeTimeout(ttl)), l.refusedNodes(),
		func(ctx context.Context, n *node) (bool, error) {
			h := l.holds[n.index]
			err := h.await(ctx)
			if failed != nil && err == nil {
				if yes, err, settled := failed.outcome(ctx, n.index); settled {
					h.abandon() // nothing of ours left to release here
					return yes, err
				}
			}
			if !h.abandon() {
				// Refused, or the acquire call is still running and
				// will release the node itself when it returns.
				return false, refusalAsVote(err)
			}
			deleted, receivers, err := n.release(ctx, l.key, l.token, announce)
			maxInto(&heard, receivers)
			return deleted, err
		})
	if r.won() {
		c.wk.noteReleased(l.key, l.token)
	}
	if heard.Load() > own {
		c.wk.othersListen(l.key, true)
	}

	l.endBy(r.decided)
	if r.won() && r.decided.Before(until) {
		return nil
	}
	return r.error(ErrNotHeld)
}

// endBy moves the end of l's validity back to t if it is later: the lock
// was released (or handed over) at t.
func (l *Lock) endBy(t time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t.Before(l.until) {
		l.until = t
	}
}

// refusedNodes marks the nodes that refused the lock when it was taken:
// Extend and Unlock need not ask them, and count them as refusals.
func (l *Lock) refusedNodes() []error {
	skip := make([]error, len(l.holds))
	for i, h := range l.holds {
		if h.refused() {
			skip[i] = ErrNodeRefused
		}
	}
	return skip
}

// refusalAsVote turns ErrNodeRefused into a no vote (false, nil) for fanOut.
func refusalAsVote(err error) error {
	if errors.Is(err, ErrNodeRefused) {
		return nil
	}
	return err
}
