// Lock's wait loop: attempts, with the backoff and the notices between them.

package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"
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

// wait is Lock's retry loop. It makes attempts, and between them waits for
// its backoff delay or, sooner, for the key's notices (see watch.go): after a
// release, a random delay in the contention window, then an attempt; when
// another waiter takes the key during that delay, back to waiting, without
// an attempt that must fail.
func (c *Client) wait(ctx context.Context, key string, ttl time.Duration, backOffFirst bool) (*Lock, error) {
	// Only a key this Client saw contended lately has a watch: the first
	// attempt on any other costs nothing extra.
	w := c.wk.existing(key)
	defer func() { w.close() }()

	var timer *time.Timer
	var tick <-chan time.Time
	arm := func(d time.Duration) {
		if timer != nil {
			timer.Stop()
		}
		timer = time.NewTimer(d)
		tick = timer.C
	}
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()

	var last error // the last attempt that was decided without ctx ending
	k := 0         // failed attempts, for the backoff
	events := w.events()
	state := w.approach()
	if backOffFirst {
		state = waitFirst
	}
	switch state {
	case jitterFirst:
		arm(w.delay(0))
	case waitFirst:
		arm(c.cfg.backoff(k))
	}
	delayed := false // the next attempt follows a contention delay
	age := 0         // releases seen go to other waiters
	for {
		switch state {
		case attemptNow:
			events = w.events() // taken before the attempt: one during it counts
			began := time.Now()
			l, err := c.attempt(ctx, key, ttl, age)
			took := time.Since(began)
			if err == nil {
				w.attempted(took, delayed, false)
				return l, nil
			}
			if !errors.Is(err, ErrNotObtained) {
				return nil, err
			}
			if ctx.Err() != nil {
				// An attempt cut short by ctx says little about why the
				// lock could not be had; the last complete one does.
				if last == nil {
					last = err
				}
				return nil, withCtx(ctx, last)
			}
			last = err
			if w == nil {
				// Subscribe after the first failure, so uncontended locks
				// cost nothing. An event before the subscription is
				// active is missed and costs this one wait its timer.
				w = c.wk.watch(key)
				events = w.events()
			}
			w.attempted(took, delayed, true)
			arm(c.cfg.backoff(k))
			k++
			state, delayed = waitFirst, false

		case waitFirst: // for a release, or the backoff timer
			select {
			case <-tick:
				state = attemptNow
			case <-events:
				events = w.events()
				if w.latest() == released {
					age++
					arm(w.delay(age))
					state = jitterFirst
				}
			case <-ctx.Done():
				return nil, waitFailed(ctx, key, last)
			case <-c.closing:
				return nil, fmt.Errorf("%w: %q: %w while waiting", ErrNotObtained, key, ErrClosed)
			}

		case jitterFirst: // the contention delay after a release
			select {
			case <-tick:
				state, delayed = attemptNow, true
			case <-events:
				events = w.events()
				if w.latest() == taken {
					w.stoodDown()
					arm(c.cfg.backoff(k))
					state = waitFirst
				}
			case <-ctx.Done():
				return nil, waitFailed(ctx, key, last)
			case <-c.closing:
				return nil, fmt.Errorf("%w: %q: %w while waiting", ErrNotObtained, key, ErrClosed)
			}
		}
	}
}

// waitFailed is Lock's error when ctx ended while waiting: the last
// complete attempt's, or, if none was made, one that says so.
func waitFailed(ctx context.Context, key string, last error) error {
	if last == nil {
		last = fmt.Errorf("%w: %q: contended; ctx ended before this call's first attempt", ErrNotObtained, key)
	}
	return withCtx(ctx, last)
}
