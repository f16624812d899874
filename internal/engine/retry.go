// Lock's wait loop: attempts, with the backoff and the notices between them.

package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redlock-go/redlock/internal/core"
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
		switch lp.core.State {
		case core.AttemptNow:
			l, err = lp.attempt()
		case core.WaitFirst, core.JitterFirst:
			err = lp.await()
		case core.HandedOver:
			if l, err = lp.takeHanded(); l == nil && err == nil {
				lp.arm(lp.core.NotHanded(lp.heard()))
			}
		}
		if l != nil || err != nil {
			return l, err
		}
	}
}

// A waitLoop is one Lock call's attempts and the waits between them: the
// shell of a core.Waiter, which decides them. It makes the attempts, reads
// the key's watch, arms the timer, and sends the want (wanting.go):
//
//   - AttemptNow: make an attempt; on failure, wait (WaitFirst).
//   - WaitFirst: ask holders of other Clients for the key (wanting.go); wait
//     for the timer, then attempt; or for a release notice, then draw a
//     contention delay (JitterFirst).
//   - JitterFirst: wait out the contention delay, then attempt; or stand
//     down when another waiter takes the key first (WaitFirst).
//   - HandedOver: a holder handed the key to this waiter's want: take the
//     lock, or wait again (WaitFirst).
//
// The key's watch (its notices) is nil until the first failed attempt,
// unless the Client watched the key already: uncontended locks subscribe to
// nothing. A nil watch hears nothing, so only the timer moves the machine.
type waitLoop struct {
	c   *Client
	ctx context.Context
	key string
	ttl time.Duration

	core   core.Waiter
	w      *wait.Watcher   // the key's notices; may be nil
	events <-chan struct{} // closed at the key's next notice
	timer  *time.Timer     // armed in every waiting state
	handed <-chan struct{} // closed once a majority of nodes handed the key to the want; nil: no want
	last   error           // the last attempt decided without ctx ending
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
	lp.arm(lp.core.Start(lp.w.Approach(), backOffFirst, lp.heard()))
	return lp
}

// heard is what the key's watch knows now, for the waiter's next decision.
func (lp *waitLoop) heard() core.Heard {
	latest := lp.w.Latest()
	return core.Heard{
		Released:    latest == wait.Released,
		Taken:       latest == wait.Taken,
		HeldByOther: lp.w.HeldByOther(),
		Subscribed:  lp.w.Subscribed(),
		Gaps:        lp.w.Gaps(),
	}
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

// arm (re)starts the timer as t says. A new timer each time: with a module
// whose go directive predates Go 1.23, Reset would not drain a tick already
// sent.
func (lp *waitLoop) arm(t core.Timer) {
	var d time.Duration
	switch t.Kind {
	case core.Keep:
		return
	case core.Backoff:
		d = lp.c.cfg.backoff(t.N)
	case core.Longest:
		d = lp.c.cfg.retryMax
	case core.Contention:
		d = lp.w.Delay(t.N)
	}
	if lp.timer != nil {
		lp.timer.Stop()
	}
	lp.timer = time.NewTimer(d)
}

// attempt makes one acquisition round. It returns the lock, or the error
// that ends the call, or neither: then the machine waits (waitFirst).
func (lp *waitLoop) attempt() (*Lock, error) {
	if lp.core.Probes() { // the timer fired: a hand-off's notices may have been lost
		if l, err := lp.probe(); l != nil || err != nil {
			return l, err
		}
	}
	lp.events = lp.w.Events() // taken before the attempt: one during it counts
	subscribed, gaps := lp.w.Subscribed(), lp.w.Gaps()
	began := time.Now()
	l, err := lp.c.attempt(lp.ctx, lp.key, lp.ttl, lp.core.Age())
	took := time.Since(began)
	if err == nil {
		lp.w.Attempted(took, lp.core.Delayed(), false)
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
	lp.w.Attempted(took, lp.core.Delayed(), true)
	lp.arm(lp.core.Failed(takenByAMajority(err), subscribed, gaps, lp.heard()))
	lp.announce()
	return nil, nil
}

// await sleeps in WaitFirst (first announcing the want, as A1 says: once
// subscribed, and again at a wake wantRefresh or more after its last copy,
// or after a gap) or JitterFirst, and moves the machine as what woke it
// says. A want is repeated only at a wake: a holder that missed every copy
// releases the key, and the release wakes the waiter.
func (lp *waitLoop) await() error {
	if lp.core.State == core.WaitFirst {
		lp.announce()
	}
	woke, err := lp.sleep()
	if err != nil {
		return err
	}
	t, stoodDown := lp.core.Woke(woke, lp.heard())
	if stoodDown {
		lp.w.StoodDown()
	}
	lp.arm(t)
	return nil
}

// sleep waits for the timer, the key's next notice or a hand-off to the
// call's want, or returns the call's error when ctx ends or the Client is
// closed.
func (lp *waitLoop) sleep() (core.Wake, error) {
	select {
	case <-lp.timer.C:
		return core.Fired, nil
	case <-lp.handed:
		return core.HandedTo, nil
	case <-lp.events:
		lp.events = lp.w.Events()
		return core.Noticed, nil
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
// majority of the nodes refused it for one holder: the key is held
// (core.HeldByOne).
func takenByAMajority(err error) bool {
	var qe *QuorumError
	if !errors.As(err, &qe) {
		return false
	}
	holders := make([]int64, len(qe.Nodes))
	for i, a := range qe.Nodes {
		if errors.Is(a.Err, ErrNodeRefused) {
			holders[i] = a.holder
		}
	}
	return core.HeldByOne(holders, qe.Quorum)
}

// waitFailed is Lock's error when ctx ended while waiting: the last
// complete attempt's, or, if none was made, one that says so.
func waitFailed(ctx context.Context, key string, last error) error {
	if last == nil {
		last = fmt.Errorf("%w: %q: contended; ctx ended before this call's first attempt", ErrNotObtained, key)
	}
	return withCtx(ctx, last)
}
