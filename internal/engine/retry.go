// Lock's wait loop: attempts, with the backoff and the notices between them.

package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redlock-go/redlock/internal/wait"
)

// Waiting for a lock, without hammering the masters.
//
// Two mechanisms, both only shortcuts — safety never depends on them:
//
//   - A per-key FIFO of the Client's own waiters (turns). Only the goroutine
//     whose turn it is makes attempts; a Lock keeps the turn while it is held
//     and hands it to the next local waiter when it is released or its
//     validity ends. A process thus sends one attempt at a time per key, and
//     its goroutines are served in arrival order.
//   - Notices over pub/sub (waker), which order the waiters of different
//     Clients: see below.

// wait is Lock's retry loop: see waitLoop.
func (c *Client) wait(ctx context.Context, key string, ttl time.Duration, backOffFirst bool) (*Lock, error) {
	lp := c.newWaitLoop(ctx, key, ttl, backOffFirst)
	defer lp.stop()
	for {
		var l *Lock
		var err error
		switch lp.state {
		case wait.AttemptNow:
			l, err = lp.attempt()
		case wait.WaitFirst:
			err = lp.awaitRelease()
		case wait.JitterFirst:
			err = lp.awaitSlot()
		case wait.HandedOver:
			if l, err = lp.takeHanded(); l == nil && err == nil {
				lp.waitForRelease()
			}
		}
		if l != nil || err != nil {
			return l, err
		}
	}
}

// A waitLoop is one Lock call's attempts and the waits between them, a
// machine of four states (approach):
//
//   - attemptNow: make an attempt; on failure, arm the backoff timer and
//     wait for a release (waitFirst).
//   - waitFirst: ask holders of other Clients for the key (wants.go); wait
//     for the timer, then attempt; or for a release notice, then draw a
//     contention delay (jitterFirst).
//   - jitterFirst: wait out the contention delay, then attempt; or stand
//     down when another waiter takes the key first (waitFirst).
//   - handedOver: a holder handed the key to this waiter's want: take the
//     lock, or wait again (waitFirst).
//
// The key's watch (its notices) is nil until the first failed attempt,
// unless the Client watched the key already: uncontended locks subscribe to
// nothing. A nil watch hears nothing, so only the timer moves the machine.
type waitLoop struct {
	c   *Client
	ctx context.Context
	key string
	ttl time.Duration

	state   wait.Approach
	w       *wait.Watcher   // the key's notices; may be nil
	events  <-chan struct{} // closed at the key's next notice
	timer   *time.Timer     // armed in every waiting state
	fails   int             // failed attempts, for the backoff
	age     int             // releases seen go to other waiters
	delayed bool            // the next attempt follows a contention delay
	last    error           // the last attempt decided without ctx ending
	want    *wantOut        // this call's announcement to other Clients' holders; nil: none
	held    bool            // an attempt made while subscribed found the key held by one holder (takenByAMajority), and no release was heard since
	// gaps is the watch's count of the times its subscription may have
	// missed notices (keyWatch.gaps: it became active, or a node confirmed
	// it again after a lost connection) as of the last attempt. When it
	// moves, a release since the attempt may have gone unheard, and a
	// holder that took the key quietly after it (Lock.quiet) will announce
	// its release only if marked: the waiter tries again, and takes the
	// key or marks it for its holder's release.
	gaps int
}

// newWaitLoop starts the machine where what the Client knows of key says:
// at once, after a contention delay, or after a backoff (also when
// backOffFirst).
func (c *Client) newWaitLoop(ctx context.Context, key string, ttl time.Duration, backOffFirst bool) *waitLoop {
	// last starts as the queue's last failure: when this call's own first
	// attempt is cut short by ctx, that says more of why the lock could not
	// be had (the call waited behind the attempts that saw it).
	lp := &waitLoop{c: c, ctx: ctx, key: key, ttl: ttl, w: c.wk.Existing(key), last: c.turns.LastSeen(key)}
	lp.events = lp.w.Events()
	lp.gaps = lp.w.Gaps() // a call that starts by waiting trusts what the watch heard so far
	lp.state = lp.w.Approach()
	if backOffFirst {
		lp.state = wait.WaitFirst
	}
	switch lp.state {
	case wait.JitterFirst:
		lp.arm(lp.w.Delay(0))
	case wait.WaitFirst:
		lp.waitForRelease()
	}
	return lp
}

// waitForRelease arms the backoff timer, asks for the key (wants.go), and
// waits (waitFirst).
func (lp *waitLoop) waitForRelease() {
	lp.state = wait.WaitFirst
	lp.arm(lp.timeout())
	lp.announce()
}

// timeout is how long the waiter waits before its next attempt: the
// backoff; or, while its want is out and another Client holds the key (its
// notices said so, or an attempt made while subscribed found it held by
// one holder, and no release was heard since), the longest backoff, since
// that holder hands the key over without the timer, which is then only for
// lost notices. A key whose release came before this Client's subscription
// is free with nobody to hand it over: the backoff finds it.
func (lp *waitLoop) timeout() time.Duration {
	if lp.want != nil && !lp.want.first.IsZero() && (lp.held || lp.w.HeldByOther()) {
		return lp.c.cfg.retryMax
	}
	return lp.c.cfg.backoff(lp.fails)
}

// stop withdraws the call's want, unless its lock came of it, and releases
// the timer and the watch.
func (lp *waitLoop) stop() {
	if lp.timer != nil {
		lp.timer.Stop()
	}
	lp.withdraw()
	lp.w.Close()
}

// arm (re)starts the timer for d. A new timer each time: with a module
// whose go directive predates Go 1.23, Reset would not drain a tick already
// sent.
func (lp *waitLoop) arm(d time.Duration) {
	if lp.timer != nil {
		lp.timer.Stop()
	}
	lp.timer = time.NewTimer(d)
}

// attempt makes one acquisition round. It returns the lock, or the error
// that ends the call, or neither: then the machine waits (waitFirst).
func (lp *waitLoop) attempt() (*Lock, error) {
	if !lp.delayed { // the timer fired: a hand-off's notices may have been lost
		if l, err := lp.probe(); l != nil || err != nil {
			return l, err
		}
	}
	lp.events = lp.w.Events() // taken before the attempt: one during it counts
	subscribed, gaps := lp.w.Subscribed(), lp.w.Gaps()
	began := time.Now()
	l, err := lp.c.attempt(lp.ctx, lp.key, lp.ttl, lp.age)
	took := time.Since(began)
	if err == nil {
		lp.w.Attempted(took, lp.delayed, false)
		return l, nil
	}
	if !errors.Is(err, ErrNotObtained) {
		return nil, err
	}
	if lp.ctx.Err() != nil {
		// An attempt cut short by ctx says little about why the lock
		// could not be had; the last complete one does.
		if lp.last == nil {
			lp.last = err
		}
		return nil, withCtx(lp.ctx, lp.last)
	}
	lp.last = err
	lp.c.turns.Saw(lp.key, err) // for the waiters queued behind this one
	if lp.w == nil {
		// Subscribe after the first failure, so uncontended locks cost
		// nothing. An event before the subscription is active is missed;
		// the subscription becoming active is an event (a gap), and the
		// waiter, woken by it, tries again. It counts from the watch, not
		// from here: the subscription may be active already.
		if hook := lp.c.cfg.test.beforeWatch; hook != nil {
			hook()
		}
		lp.w = lp.c.wk.Watch(lp.key)
		if hook := lp.c.cfg.test.afterWatch; hook != nil {
			hook()
		}
		lp.events, _, _ = lp.w.SinceTaken()
	}
	lp.w.Attempted(took, lp.delayed, true)
	lp.held = subscribed && takenByAMajority(err)
	lp.gaps = gaps
	lp.waitForRelease()
	lp.fails++
	lp.delayed = false
	return nil, nil
}

// awaitRelease waits for the backoff timer (then attempt), a hand-off to
// its want, or a release notice (then a contention delay).
func (lp *waitLoop) awaitRelease() error {
	lp.announce() // once subscribed, then again every wantRefresh
	woke, err := lp.sleep()
	switch {
	case err != nil:
		return err
	case woke == fired:
		lp.state = wait.AttemptNow
	case woke == handed:
		lp.state = wait.HandedOver
	case lp.w.Latest() == wait.Released:
		lp.held = false
		lp.age++
		lp.arm(lp.w.Delay(lp.age))
		lp.state = wait.JitterFirst
	case lp.w.Gaps() != lp.gaps && lp.w.Subscribed():
		lp.state, lp.delayed = wait.AttemptNow, false // probes first: a hand-off's notices may be what went unheard
		if lp.want != nil {
			// Other Clients may have missed notices too, and now doubt
			// the want (wants.go): it goes out again after the attempt.
			lp.want.at = time.Time{}
		}
	}
	return nil
}

// awaitSlot waits out the contention delay after a release (then attempt),
// unless another waiter takes the key first (then back off and wait).
func (lp *waitLoop) awaitSlot() error {
	woke, err := lp.sleep()
	switch {
	case err != nil:
		return err
	case woke == fired:
		lp.state, lp.delayed = wait.AttemptNow, true
	case woke == handed:
		lp.state = wait.HandedOver
	case lp.w.Latest() == wait.Taken:
		lp.w.StoodDown()
		lp.waitForRelease()
	}
	return nil
}

// A wake is what ended a sleep.
type wake int

const (
	fired   wake = iota // the timer
	noticed             // the key's next notice
	handed              // a majority of nodes handed the key to this call's want
)

// sleep waits for the timer, the key's next notice or a hand-off to the
// call's want, or returns the call's error when ctx ends or the Client is
// closed.
func (lp *waitLoop) sleep() (wake, error) {
	var handOff <-chan struct{}
	if lp.want != nil {
		handOff = lp.want.handed
	}
	select {
	case <-lp.timer.C:
		return fired, nil
	case <-handOff:
		return handed, nil
	case <-lp.events:
		lp.events = lp.w.Events()
		return noticed, nil
	case <-lp.ctx.Done():
		return 0, waitFailed(lp.ctx, lp.key, lp.last)
	case <-lp.c.closing:
		return 0, lp.closedWhileWaiting()
	}
}

// closedWhileWaiting is the call's error when the Client closed while it
// waited.
func (lp *waitLoop) closedWhileWaiting() error {
	return fmt.Errorf("%w: %q: %w while waiting", ErrNotObtained, lp.key, ErrClosed)
}

// takenByAMajority reports whether a failed attempt's error says that a
// majority of the nodes refused it for one holder: the key is held. Nodes
// that refused for different holders (the leftovers of other waiters'
// attempts, each its own token, lost in a split vote and being released
// silently) say nothing of the sort: waiting for a hand-off then would
// wait the longest backoff for one nobody makes (every waiter of 8
// Clients that started at once did, in 1 start of 30; 4 of 30 quorum-first).
func takenByAMajority(err error) bool {
	var qe *QuorumError
	if !errors.As(err, &qe) {
		return false
	}
	for i, a := range qe.Nodes {
		if a.holder == 0 || !errors.Is(a.Err, ErrNodeRefused) {
			continue
		}
		n := 0
		for _, b := range qe.Nodes[i:] {
			if b.holder == a.holder && errors.Is(b.Err, ErrNodeRefused) {
				n++
			}
		}
		if n >= qe.Quorum {
			return true
		}
	}
	return false
}

// waitFailed is Lock's error when ctx ended while waiting: the last
// complete attempt's, or, if none was made, one that says so.
func waitFailed(ctx context.Context, key string, last error) error {
	if last == nil {
		last = fmt.Errorf("%w: %q: contended; ctx ended before this call's first attempt", ErrNotObtained, key)
	}
	return withCtx(ctx, last)
}
