// Package wait is the waiting machinery below the lock logic: the per-key
// FIFO of a Client's own waiters (Turns), which hands the turn, and a lock
// with it, from one waiter to the next; the per-master subscriptions to
// the keys' notices (Waker); the per-key view waiters act on (Watcher,
// KeyWatch); and the wants other Clients' waiters announce, kept in the
// protocol core's line (core.Line, core.Expected). It knows nothing of
// rounds: it tells the engine what it heard.
package wait

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Turns is the per-key FIFO of local waiters. T is what a holder may hand
// to the next waiter along with the turn (the Client's Lock); the queue
// itself never looks into it.
type Turns[T any] struct {
	closing <-chan struct{} // closed when waiters must give up (with closed)
	closed  error

	mu sync.Mutex
	q  map[string]*turnQueue[T]
}

// NewTurns returns an empty FIFO whose waiters return closed once closing
// is closed.
func NewTurns[T any](closing <-chan struct{}, closed error) *Turns[T] {
	return &Turns[T]{closing: closing, closed: closed, q: map[string]*turnQueue[T]{}}
}

type turnQueue[T any] struct {
	waiters []*Waiter[T]
	last    error // the last failed attempt of the turn's holder since it last held the key (saw)
}

// A Waiter is a queued Lock call. It is served exactly once, by serve:
// with the turn alone (nil), or with the turn and a value handed over by
// the previous holder.
type Waiter[T any] struct {
	TTL    time.Duration // the TTL the waiter asked for
	at     time.Time     // when it queued
	served chan *T       // buffered: serving never blocks
}

// Serve passes the turn to w, with handed (nil for the turn alone).
func (w *Waiter[T]) Serve(handed *T) { w.served <- handed }

// Take waits for key's turn in FIFO order and returns the function that
// passes it on (safe to call more than once), with the lock if the previous
// holder handed it over, and whether it had to queue behind another
// waiter; or ctx's error, or closed once closing is.
func (t *Turns[T]) Take(ctx context.Context, key string, ttl time.Duration) (pass func(), handed *T, queued bool, err error) {
	t.mu.Lock()
	q, busy := t.q[key]
	if !busy {
		t.q[key] = &turnQueue[T]{}
		t.mu.Unlock()
		return t.Passer(key), nil, false, nil
	}
	me := &Waiter[T]{TTL: ttl, at: time.Now(), served: make(chan *T, 1)}
	q.waiters = append(q.waiters, me)
	t.mu.Unlock()

	var quit error
	select {
	case l := <-me.served:
		return t.Passer(key), l, true, nil
	case <-ctx.Done():
		quit = ctx.Err()
	case <-t.closing:
		quit = t.closed
	}
	t.mu.Lock()
	if q.last != nil {
		// Say why the queue did not move: its head's last attempt (a
		// majority unreachable, say), not only that ctx ended.
		quit = fmt.Errorf("%w; the last attempt ahead of it: %w", quit, q.last)
	}
	for i, w := range q.waiters {
		if w == me {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			t.mu.Unlock()
			return nil, nil, true, quit
		}
	}
	t.mu.Unlock()
	// We were being served as ctx ended or Close came (a hand-off takes
	// one round). Keep a lock that was handed over rather than give it
	// back, as x/sync's semaphore gives back a grant (since 2023): that
	// would take another round, which a closed Client cannot make, and
	// would leave its keys behind.
	if l := <-me.served; l != nil {
		return t.Passer(key), l, true, nil
	}
	t.Passer(key)()
	return nil, nil, true, quit
}

// Saw records the outcome of an attempt by the holder of key's turn: its
// error when it failed, nil once it holds the key. A waiter that gives up
// in the queue reports the last failure, which says why the queue did not
// move.
func (t *Turns[T]) Saw(key string, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if q := t.q[key]; q != nil {
		q.last = err
	}
}

// LastSeen returns the last failure saw recorded for key's turn, if any.
func (t *Turns[T]) LastSeen(key string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if q := t.q[key]; q != nil {
		return q.last
	}
	return nil
}

// Claim removes key's first waiter from the queue, to be served by the
// caller, who holds the turn and passes it to that waiter with serve; nil
// when nobody waits.
func (t *Turns[T]) Claim(key string) *Waiter[T] {
	t.mu.Lock()
	defer t.mu.Unlock()
	q := t.q[key]
	if q == nil || len(q.waiters) == 0 {
		return nil
	}
	w := q.waiters[0]
	q.waiters = q.waiters[1:]
	return w
}

// Waiting reports how many waiters are queued for key.
func (t *Turns[T]) Waiting(key string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if q := t.q[key]; q != nil {
		return len(q.waiters)
	}
	return 0
}

// HeadSince returns when key's next waiter queued, if one does.
func (t *Turns[T]) HeadSince(key string) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if q := t.q[key]; q != nil && len(q.waiters) > 0 {
		return q.waiters[0].at, true
	}
	return time.Time{}, false
}

// Passer returns the idempotent function that hands key's turn to the next
// waiter, or frees it.
func (t *Turns[T]) Passer(key string) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			q := t.q[key]
			if len(q.waiters) == 0 {
				delete(t.q, key)
				return
			}
			next := q.waiters[0]
			q.waiters = q.waiters[1:]
			next.Serve(nil)
		})
	}
}
