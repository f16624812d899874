// Fencing tokens: a number per holder of a key that only grows from one
// holder to the next, issued by a majority (Lock.Fence).

package engine

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// Fence returns the lock's fencing token. Call it just before the side
// effect the lock protects, pass the number along with it, and have the
// resource refuse any number lower than the highest it has seen (and a
// number it has seen from another writer): a holder that was paused past
// Until then cannot act after the next holder did.
//
// Fences of one key only grow from holder to holder: if this lock's fence
// is f, any later holder of the key that obtains a fence gets one greater
// than f. A multi-key lock (TryLockMulti) draws one fence above every
// earlier fence of each of its keys, and raises every key's counter to it. That holds while masters are killed, paused, slowed or restarted
// with their data (appendfsync always), and needs no single master to
// survive: every fence is held by a majority, and any later majority meets
// it. A master that loses its data (a restart without persistence, a
// flush) loses its counters; a new counter starts at the master's clock in
// microseconds, above the fences issued before from older readings, so
// fences keep growing then too, as long as the masters' clocks agree to
// within the time between the two fences.
//
// The first call costs one round (two when the masters' counters differ)
// and is made only while the lock is valid; later calls return the same
// number without contacting the masters, as long as the lock is held.
// Locks that never call Fence cost nothing extra.
//
// Fence returns an error matching ErrNotHeld when the lock was released,
// its validity ended, or a majority no longer holds its token; an error
// matching ErrNotObtained when no majority answered in time for other
// reasons (the lock may still be held: try again); both with a
// *QuorumError when masters were asked. Concurrent calls return the same
// fence; a call waiting for another one returns ErrNotObtained with ctx's
// error if ctx ends first. Each master keeps one counter per key that ever had a fence,
// never expiring (see the README's "Fencing").
func (l *Lock) Fence(ctx context.Context) (uint64, error) {
	if l == nil || l.c == nil {
		return 0, fmt.Errorf("%w: no lock", ErrNotHeld)
	}
	if ctx == nil {
		return 0, fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	if err := l.enterFence(ctx); err != nil {
		return 0, err
	}
	defer func() { <-l.gate() }()
	until, err := l.heldUntil()
	if err != nil {
		return 0, err
	}
	if l.fence > 0 {
		return l.fence, nil
	}
	c := l.c
	if err := c.enter(); err != nil {
		return 0, err
	}
	defer c.bg.Done()
	f, err := l.drawFence(ctx, until)
	if err != nil {
		return 0, err
	}
	if _, err := l.heldUntil(); err != nil {
		return 0, err // released, or over, while the fence was drawn
	}
	l.fence = f
	return f, nil
}

// gate returns the semaphore that lets one Fence of l run at a time.
func (l *Lock) gate() chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fenceGate == nil {
		l.fenceGate = make(chan struct{}, 1)
	}
	return l.fenceGate
}

// enterFence takes the gate, waiting within ctx only while another Fence of
// l holds it: a free gate is taken even if ctx has ended, so that the call
// answers as the lock's state says.
func (l *Lock) enterFence(ctx context.Context) error {
	gate := l.gate()
	select {
	case gate <- struct{}{}:
		return nil
	default:
	}
	select {
	case gate <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: %q: waiting for another Fence of this lock: %w", ErrNotObtained, l.key, ctx.Err())
	}
}

// drawFence increments the counter on every master that holds our token,
// and, unless a majority already has the largest value f, raises the
// counters to f on a majority: then any later majority meets a master whose
// counter is at least f, and increments it past f.
func (l *Lock) drawFence(ctx context.Context, until time.Time) (uint64, error) {
	c := l.c
	values := make([]atomic.Uint64, len(c.nodes))
	r := l.fenceRound(ctx, until, values, 0)
	if err := l.fenceVerdict(ctx, r, until); err != nil {
		return 0, err
	}
	seen := make([]uint64, len(values))
	for i := range values {
		seen[i] = values[i].Load()
	}
	f, held := fenceFrom(seen)
	if held >= c.quorum {
		return f, nil
	}
	r = l.fenceRound(ctx, until, values, f)
	if err := l.fenceVerdict(ctx, r, until); err != nil {
		return 0, err
	}
	return f, nil
}

// fenceRound runs the fence script on every master (see node.fence),
// storing each counter's value in values. A master votes yes when it holds
// our token and, when raise is set, its counter is now at least raise.
func (l *Lock) fenceRound(ctx context.Context, until time.Time, values []atomic.Uint64, raise uint64) *round {
	c := l.c
	deadline := nodeDeadline(time.Now().Add(c.nodeTimeout(l.ttlNow()))).until(until)
	return c.fanOut(ctx, "fence", l.key, deadline, l.refusedNodes(), 0, func(ctx context.Context, n *node) (ballot, error) {
		if err := l.holds[n.index].await(ctx); err != nil {
			return ballot{}, refusalAsVote(err)
		}
		v, err := n.fence(ctx, l.Keys(), l.token, raise)
		values[n.index].Store(v)
		return ballot{yes: err == nil && v > 0 && v >= raise}, err
	})
}

// fenceVerdict is Fence's error for round r: nil when a majority answered
// yes before the validity ended.
func (l *Lock) fenceVerdict(ctx context.Context, r *round, until time.Time) error {
	c := l.c
	switch {
	case r.won() && r.decided.Before(until):
		return nil
	case r.refused > len(c.nodes)-c.quorum || !r.decided.Before(until):
		return r.error(ErrNotHeld)
	}
	return withCtx(ctx, r.error(ErrNotObtained))
}

// fenceFrom returns the fence that a round's counter values give (their
// maximum; 0 for a master that did not answer yes) and on how many masters
// the counter has reached it.
func fenceFrom(values []uint64) (f uint64, held int) {
	for _, v := range values {
		f = max(f, v)
	}
	for _, v := range values {
		if v > 0 && v == f {
			held++
		}
	}
	return f, held
}

// lockKey is the context key under which Do's fn finds its lock.
type lockKey struct{}

// LockFromContext returns the lock held for the context that Do gives its
// function (or a context derived from it), or nil. Use it to get the
// lock's fence inside Do:
//
//	err := c.Do(ctx, "invoice:42", ttl, func(ctx context.Context) error {
//		fence, err := redlock.LockFromContext(ctx).Fence(ctx)
//		...
//	})
//
// Fence on the nil *Lock of a context without one returns ErrNotHeld.
func LockFromContext(ctx context.Context) *Lock {
	if ctx == nil {
		return nil
	}
	l, _ := ctx.Value(lockKey{}).(*Lock)
	return l
}
