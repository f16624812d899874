// A held lock: its validity, Extend, Unlock, Fence, and how it prints.
// Each method forwards to internal/engine, which keeps the contracts stated
// here.

package redlock

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redlock-go/redlock/internal/engine"
)

// A Lock is a lock obtained by TryLock or Lock. It is safe for concurrent
// use. Its methods do not panic on a nil or zero *Lock: Extend and Unlock
// report ErrNotHeld, Done is closed, and Key, Token and Until are empty.
//
// A *Lock prints (fmt, with any verb; log/slog, with any handler) as its
// key or keys, its number of masters, its Until and its state, never its
// token: Token is the only way to the token. Print the pointer: fmt
// cannot reach the methods of a Lock value's fields, and %s or %q of a
// Lock value show them.
type Lock struct {
	l *engine.Lock // nil: the zero Lock, held by nobody
}

// e is the engine's Lock: nil for a nil *Lock; for the zero Lock, a zero
// one, held by nobody, which prints as one.
func (l *Lock) e() *engine.Lock {
	if l == nil {
		return nil
	}
	if l.l == nil {
		return new(engine.Lock)
	}
	return l.l
}

// wrap is the public Lock of l: nil for nil.
func wrap(l *engine.Lock) *Lock {
	if l == nil {
		return nil
	}
	return &Lock{l: l}
}

// Done returns a channel that is closed when the lock can no longer be
// trusted: its validity ended (Until passed without a successful Extend), an
// Extend found it lost, or Unlock was called. Select on it next to the work
// the lock protects. For a nil *Lock it returns a closed channel.
func (l *Lock) Done() <-chan struct{} {
	return l.e().Done()
}

// Key returns the lock's key; "" for a nil *Lock. For a multi-key lock
// (TryLockMulti, LockMulti, DoMulti) it is the lock's name, its keys joined
// by commas in the order given ("a,b"): the Key its events, QuorumErrors
// and messages carry, so that they can be told apart and matched to it.
// That name is not a key on the masters, and cannot be split back (a key
// may hold a comma): give Keys to what takes keys. Inspect takes one key,
// and Resume resumes single-key locks only.
func (l *Lock) Key() string {
	return l.e().Key()
}

// Keys returns the locked keys: the one key of a single-key lock, or a
// multi-key lock's in the order given; nil for a nil or zero *Lock. The
// slice is the caller's to change.
func (l *Lock) Keys() []string {
	return l.e().Keys()
}

// Token returns the random token that identifies this holder on the nodes;
// "" for a nil *Lock.
func (l *Lock) Token() string {
	return l.e().Token()
}

// String describes the lock: its key (or a multi-key lock's keys), its
// number of masters, its Until and its state: "held" within Until,
// "expired" after it, "lost" once an Extend found it lost, "unlocked"
// once Unlock was called, and "not held" for a zero Lock. String never
// includes the lock's token. A nil *Lock is "<nil>".
func (l *Lock) String() string {
	return l.e().String()
}

// Format prints the lock as String does, for every verb (%v, %+v, %#v,
// %s, %q, %x, ...): never its fields, so never its token.
func (l *Lock) Format(f fmt.State, verb rune) {
	l.e().Format(f, verb)
}

// LogValue is the lock for log/slog: a group of its key ("key", or "keys"
// for a multi-key lock), "masters", "until" (absent for a zero Lock) and
// "state", as in String. It never includes the lock's token.
func (l *Lock) LogValue() slog.Value {
	return l.e().LogValue()
}

// Until returns the end of the lock's validity on the local monotonic clock:
// until then, no other client can hold the lock as long as the nodes' clocks
// run at a rate within the drift factor of this one's. Compare it with
// time.Now(), not with a wall-clock time from elsewhere. After Unlock, or
// once the lock was found lost, Until is in the past. For a nil *Lock it is
// the zero time.
func (l *Lock) Until() time.Time {
	return l.e().Until()
}

// Extend makes the lock live at least ttl from now on every node that still
// holds its token, in parallel (Redlock spec, step 6). It never shortens the
// keys: a ttl shorter than the validity left confirms that the lock is held
// and leaves the keys as they are. It succeeds when a majority answered
// before the current validity ended, and then moves Until to the start of
// the extension + ttl − drift, if that is later. An extension never
// brings back a lock that expired: its round must be decided while the
// validity lasts, and only a lock that may lack the key somewhere (taken
// with WithQuorumFirst, or handed over by another Client, whose hand-off
// leaves free masters free) asks masters to take it, under that deadline.
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
	return l.e().Extend(ctx, ttl)
}

// Unlock releases the lock: it deletes the key on every node where it still
// holds this lock's token, in parallel and under per-node deadlines, and
// never touches a key that holds another token. It returns as soon as the
// outcome is known; deletes still in flight finish in the background.
//
// Hand-off: while a single-key lock is valid and notices are on (no
// WithoutNotices, no master refusing them), Unlock gives the key to the
// next waiter in one round instead, and the key is never free in between.
// The waiters in line are this Client's own Lock (or Do) calls queued for
// the key, in the order they queued (only behind a lock obtained by Lock
// or Do, which holds the Client's turn for the key), and other Clients'
// waiters that announced themselves, each placed by when this Client first
// heard it. The one that asked first gets the key: another Client's waiter
// heard before this Client's next waiter queued comes first; it gets the
// token it announced, and learns from the masters' notices that it holds
// the key, while this Client's waiters keep their order and ask the new
// holder for the key in turn. Otherwise this Client's next waiter gets a
// fresh token, and its Lock returns that new lock, whose validity counts
// from the round's start like any acquisition's; but only while every
// other Client heard to want the key lately has announced itself: when
// one has not (it only waits for a release, and would starve), Unlock
// releases the key and the waiter makes an attempt like the others. If the
// round does not reach a majority, Unlock rolls this Client's waiter's new
// token back (another Client's waiter releases its own), deletes this
// lock's token wherever the hand-off left it, and the waiter makes
// attempts of its own.
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
	return l.e().Unlock(ctx)
}

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
	return l.e().Fence(ctx)
}

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
	if l, ok := ctx.Value(lockKey{}).(*Lock); ok {
		return l
	}
	return wrap(engine.LockFromContext(ctx))
}

// lockKey is the context key under which Do's fn finds its public Lock:
// one *Lock for the whole of fn, as LockFromContext returns it.
type lockKey struct{}

// withLock is fn, given a context that holds the public Lock of the
// engine's lock in the context Do gives it; nil for nil (Do refuses it).
func withLock(fn func(ctx context.Context) error) func(ctx context.Context) error {
	if fn == nil {
		return nil
	}
	return func(ctx context.Context) error {
		return fn(context.WithValue(ctx, lockKey{}, wrap(engine.LockFromContext(ctx))))
	}
}
