// Do: a critical section under a lock that is extended while it runs.

package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Do runs fn while holding the lock on key, and keeps the lock for as long
// as fn runs.
//
// It waits for the lock like Lock (ctx bounds the wait and is the parent of
// fn's context). While fn runs, a goroutine extends the lock to ttl every
// ttl/3, retrying a failed extension within the remaining validity. The
// moment the lock can no longer be trusted — an extension found it lost, or
// its validity ended without a successful extension — fn's context is
// cancelled, with a cause matching ErrLockLost (context.Cause). fn must stop
// acting on the protected resource when its context is done. When fn
// returns, the lock is released, and no goroutine started by Do outlives it.
//
// Do returns:
//   - the Lock error (matching ErrNotObtained, ErrInvalidArgument, …) when
//     the lock was not obtained; fn did not run;
//   - an error matching ErrLockLost when the lock was lost while fn ran,
//     joined with fn's own error if it returned one;
//   - otherwise fn's error, unchanged (nil on success).
//
// fn finds the lock with LockFromContext(ctx), for its fence (Lock.Fence).
//
// If fn panics, Do stops extending, releases the lock and re-panics.
//
// A release that fails after fn succeeded under the lock is not reported:
// the work was done while the lock was held, and the keys expire with their
// TTL. Nested Do or Lock calls for the same key from inside fn are not
// re-entrant: pass the held lock's context down instead (see the README).
func (c *Client) Do(ctx context.Context, key string, ttl time.Duration, fn func(ctx context.Context) error) error {
	return c.doWith(ctx, "do", key, ttl, fn, func(ctx context.Context) (*Lock, error) { return c.Lock(ctx, key, ttl) })
}

// DoMulti is Do holding every key of keys, as one lock taken by LockMulti
// (see TryLockMulti for the rules and the bad input). fn finds the lock
// with LockFromContext, for its fence (Lock.Fence: one fence above every
// earlier fence of each key).
func (c *Client) DoMulti(ctx context.Context, keys []string, ttl time.Duration, fn func(ctx context.Context) error) error {
	return c.doWith(ctx, "do_multi", strings.Join(keys, ","), ttl, fn, func(ctx context.Context) (*Lock, error) { return c.LockMulti(ctx, keys, ttl) })
}

// doWith is Do, or op, with lock taking the lock on key (or keys, joined).
func (c *Client) doWith(ctx context.Context, op, key string, ttl time.Duration, fn func(ctx context.Context) error, lock func(context.Context) (*Lock, error)) error {
	if fn == nil {
		return fmt.Errorf("%w: nil fn", ErrInvalidArgument)
	}
	if err := c.usable(); err != nil {
		return err
	}
	o := c.cfg.obs
	if o == nil || ctx == nil {
		_, err := c.do(ctx, key, ttl, fn, lock)
		return err
	}
	ctx = c.start(ctx, op, key)
	finished := false
	defer func() {
		if !finished && o.DoEnd != nil { // fn panicked: the call still ends
			o.DoEnd(DoEvent{Ctx: ctx, Key: key, Err: fmt.Errorf("%w: fn panicked", ErrNotHeld)})
		}
	}()
	l, err := c.do(ctx, key, ttl, fn, lock)
	finished = true
	if o.DoEnd != nil {
		e := DoEvent{Ctx: ctx, Key: key, Err: err}
		if l != nil {
			e.Held = time.Since(l.obtained)
		}
		if errors.Is(err, ErrLockLost) {
			e.Lost = err
		}
		o.DoEnd(e)
	}
	return err
}

// do is Do; l is the lock it held, if it got one.
func (c *Client) do(ctx context.Context, key string, ttl time.Duration, fn func(ctx context.Context) error, lock func(context.Context) (*Lock, error)) (l *Lock, err error) {
	l, err = lock(ctx)
	if err != nil {
		return nil, err
	}
	fnCtx, cancel := context.WithCancelCause(context.WithValue(ctx, lockKey{}, l))
	defer cancel(nil)
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		l.keepAlive(context.WithoutCancel(ctx), stop, ttl, cancel)
	}()

	finished := false
	defer func() {
		if !finished { // fn panicked: stop extending and release, then let the panic go on
			close(stop)
			<-watched
			_ = l.Unlock(context.WithoutCancel(ctx))
		}
	}()
	fnErr := fn(fnCtx)
	finished = true
	close(stop)
	<-watched
	lost := context.Cause(fnCtx)
	if !errors.Is(lost, ErrLockLost) && !time.Now().Before(l.Until()) {
		// fn returned just as the validity ended, before the watchdog saw it.
		lost = fmt.Errorf("%w: %q: validity ended as fn returned", ErrLockLost, key)
	}
	_ = l.Unlock(context.WithoutCancel(ctx))
	if errors.Is(lost, ErrLockLost) {
		return l, errors.Join(lost, fnErr)
	}
	return l, fnErr
}

// keepAlive extends l to ttl every ttl/3 until stop is closed, and calls
// lose with an ErrLockLost cause as soon as the lock is lost or its
// validity ends. ctx carries Do's values (its span, for an Observer) and
// is never cancelled: only stop ends the extensions.
func (l *Lock) keepAlive(ctx context.Context, stop <-chan struct{}, ttl time.Duration, lose context.CancelCauseFunc) {
	c := l.c
	every := max(ttl/3, time.Millisecond)
	timer := time.NewTimer(every)
	defer timer.Stop()
	failures := 0
	for {
		select {
		case <-stop:
			return
		case <-l.Done():
			lose(fmt.Errorf("%w: %q: validity ended without a successful extension", ErrLockLost, l.key))
			return
		case <-timer.C:
		}
		err := l.Extend(ctx, ttl)
		switch {
		case err == nil:
			failures = 0
			timer.Reset(every)
		case errors.Is(err, ErrNotHeld) || errors.Is(err, ErrClosed):
			lose(fmt.Errorf("%w: %q: %w", ErrLockLost, l.key, err))
			return
		default:
			// Not obtained this time (timeouts, errors): retry while
			// validity is left; Done fires if none is.
			timer.Reset(c.cfg.backoff(failures))
			failures++
		}
	}
}
