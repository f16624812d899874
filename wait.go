package redlock

import (
	"context"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
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
//   - Release notices over pub/sub (waker). The release script publishes the
//     released token on a per-key channel on every node; a Client subscribes
//     (one PubSub connection per node, shared by all keys) while it has a
//     waiter for the key, and wakes the waiter at once. A lost notice, a
//     broken subscription or a lock that simply expired costs the waiter its
//     backoff delay, never liveness: the backoff timer always runs.

// releasePrefix + key is the pub/sub channel on which releases of key are
// announced.
const releasePrefix = "redlock:released:"

func releaseChannel(key string) string { return releasePrefix + key }

// turns is the per-key FIFO of local waiters.
type turns struct {
	mu sync.Mutex
	q  map[string]*turnQueue
}

type turnQueue struct {
	waiters []chan struct{} // closed when the turn passes to that waiter
}

// take waits for key's turn in FIFO order and returns the function that
// passes it on (safe to call more than once), or ctx's error.
func (t *turns) take(ctx context.Context, key string) (func(), error) {
	t.mu.Lock()
	if t.q == nil {
		t.q = map[string]*turnQueue{}
	}
	q, busy := t.q[key]
	if !busy {
		t.q[key] = &turnQueue{}
		t.mu.Unlock()
		return t.passer(key), nil
	}
	ch := make(chan struct{})
	q.waiters = append(q.waiters, ch)
	t.mu.Unlock()

	select {
	case <-ch:
		return t.passer(key), nil
	case <-ctx.Done():
	}
	t.mu.Lock()
	for i, w := range q.waiters {
		if w == ch {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			t.mu.Unlock()
			return nil, ctx.Err()
		}
	}
	t.mu.Unlock()
	// The turn reached us as ctx ended: pass it on.
	t.passer(key)()
	return nil, ctx.Err()
}

// passer returns the idempotent function that hands key's turn to the next
// waiter, or frees it.
func (t *turns) passer(key string) func() {
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
			close(next)
		})
	}
}

// waker delivers release notices to the Client's waiters.
type waker struct {
	c  *Client
	wg sync.WaitGroup // its goroutines, which live until close

	mu     sync.Mutex
	keys   map[string]*keyWatch
	subs   []*nodeSub // per node, created with the first watch
	closed bool
}

type keyWatch struct {
	refs   int
	ch     chan struct{} // closed, and replaced, on each new release notice
	recent [8]string     // tokens already announced: each node repeats them
	next   int
}

// nodeSub is the subscription connection to one node, with the queue of
// SUBSCRIBE/UNSUBSCRIBE calls its goroutine sends in order.
type nodeSub struct {
	ps      *redis.PubSub
	mu      sync.Mutex
	pending []subOp
	kick    chan struct{}
}

type subOp struct {
	subscribe bool
	channel   string
}

// watch registers interest in key's release notices. notices returns the
// channel to wait on, snapshotted before an attempt so that a notice that
// arrives during the attempt is not missed; unwatch ends the interest.
func (w *waker) watch(key string) (notices func() <-chan struct{}, unwatch func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		never := make(chan struct{})
		return func() <-chan struct{} { return never }, func() {}
	}
	if w.subs == nil {
		w.start()
	}
	if w.keys == nil {
		w.keys = map[string]*keyWatch{}
	}
	kw := w.keys[key]
	if kw == nil {
		kw = &keyWatch{ch: make(chan struct{})}
		w.keys[key] = kw
		w.queue(subOp{true, releaseChannel(key)})
	}
	kw.refs++
	notices = func() <-chan struct{} {
		w.mu.Lock()
		defer w.mu.Unlock()
		return kw.ch
	}
	var once sync.Once
	unwatch = func() {
		once.Do(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			if kw.refs--; kw.refs == 0 {
				delete(w.keys, key)
				if !w.closed {
					w.queue(subOp{false, releaseChannel(key)})
				}
			}
		})
	}
	return notices, unwatch
}

// start opens one PubSub per node and a goroutine each for its messages and
// its subscription calls. Called with w.mu held.
func (w *waker) start() {
	for _, n := range w.c.nodes {
		s := &nodeSub{ps: n.client.Subscribe(context.Background()), kick: make(chan struct{}, 1)}
		w.subs = append(w.subs, s)
		w.wg.Add(2)
		go func() {
			defer w.wg.Done()
			w.receive(s)
		}()
		go func() {
			defer w.wg.Done()
			w.send(s)
		}()
	}
}

// queue adds a subscription call for every node. Called with w.mu held.
func (w *waker) queue(op subOp) {
	for _, s := range w.subs {
		s.mu.Lock()
		s.pending = append(s.pending, op)
		s.mu.Unlock()
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

// send makes the queued subscription calls in order, until Close. A failed
// call is not retried: go-redis re-subscribes a reconnected PubSub to its
// channels, and a waiter without notices still has its backoff timer.
func (w *waker) send(s *nodeSub) {
	for range s.kick {
		s.mu.Lock()
		ops := s.pending
		s.pending = nil
		s.mu.Unlock()
		for _, op := range ops {
			ctx, cancel := context.WithTimeout(context.Background(), w.c.cfg.subscribeTimeout())
			if op.subscribe {
				_ = s.ps.Subscribe(ctx, op.channel)
			} else {
				_ = s.ps.Unsubscribe(ctx, op.channel)
			}
			cancel()
		}
	}
}

// receive wakes the waiters of each key whose release is announced, until
// the PubSub is closed.
func (w *waker) receive(s *nodeSub) {
	for msg := range s.ps.Channel() {
		key, ok := strings.CutPrefix(msg.Channel, releasePrefix)
		if !ok {
			continue
		}
		w.mu.Lock()
		if kw := w.keys[key]; kw != nil && !kw.seen(msg.Payload) {
			close(kw.ch)
			kw.ch = make(chan struct{})
		}
		w.mu.Unlock()
	}
}

// seen reports whether token's release was already announced (by another
// node), and remembers it otherwise.
func (kw *keyWatch) seen(token string) bool {
	for _, t := range kw.recent {
		if t == token {
			return true
		}
	}
	kw.recent[kw.next] = token
	kw.next = (kw.next + 1) % len(kw.recent)
	return false
}

// close ends every subscription and waits for its goroutines.
func (w *waker) close() {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		for _, s := range w.subs {
			_ = s.ps.Close()
			close(s.kick)
		}
	}
	w.mu.Unlock()
	w.wg.Wait()
}
