package redlock

import (
	"context"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

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
//   - Notices over pub/sub (waker), which order the waiters of different
//     Clients: see below.

// turns is the per-key FIFO of local waiters.
type turns struct {
	closing <-chan struct{} // the Client's: waiters return ErrClosed

	mu sync.Mutex
	q  map[string]*turnQueue
}

type turnQueue struct {
	waiters []*turnWaiter
}

// A turnWaiter is a queued Lock call. It is served exactly once: with the
// turn alone (a nil *Lock), or with the turn and a lock handed over by the
// previous holder.
type turnWaiter struct {
	ttl    time.Duration
	served chan *Lock // buffered: serving never blocks
}

// take waits for key's turn in FIFO order and returns the function that
// passes it on (safe to call more than once), with the lock if the previous
// holder handed it over; or ctx's error, or ErrClosed.
func (t *turns) take(ctx context.Context, key string, ttl time.Duration) (func(), *Lock, error) {
	t.mu.Lock()
	if t.q == nil {
		t.q = map[string]*turnQueue{}
	}
	q, busy := t.q[key]
	if !busy {
		t.q[key] = &turnQueue{}
		t.mu.Unlock()
		return t.passer(key), nil, nil
	}
	me := &turnWaiter{ttl: ttl, served: make(chan *Lock, 1)}
	q.waiters = append(q.waiters, me)
	t.mu.Unlock()

	var quit error
	select {
	case l := <-me.served:
		return t.passer(key), l, nil
	case <-ctx.Done():
		quit = ctx.Err()
	case <-t.closing:
		quit = ErrClosed
	}
	t.mu.Lock()
	for i, w := range q.waiters {
		if w == me {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			t.mu.Unlock()
			return nil, nil, quit
		}
	}
	t.mu.Unlock()
	// We were being served as ctx ended or Close came (a hand-off takes
	// one round). Like x/sync's semaphore, keep a lock that was handed
	// over rather than give it back: that would take another round, which
	// a closed Client cannot make, and would leave its keys behind.
	if l := <-me.served; l != nil {
		return t.passer(key), l, nil
	}
	t.passer(key)()
	return nil, nil, quit
}

// claim removes key's first waiter from the queue, to be served by the
// caller, who holds the turn and passes it to that waiter with serve; nil
// when nobody waits.
func (t *turns) claim(key string) *turnWaiter {
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
			next.served <- nil
		})
	}
}

// Notices. Each node announces, on the key's notice channel, every lock
// taken there ("acquired <client> <token>", from the acquire script) and
// every Unlock ("released <client> <token>", from the release script;
// clean-up after failed attempts stays silent). A Client subscribes while
// it has waiters for the key, and some time after (subscriptionLinger), and
// folds the notices of all nodes into one view per key: the lock was just
// released, or a majority of nodes just gave it to one token (taken).
//
// Waiters of different Clients act on that view so as to spend few commands
// and to share the lock fairly:
//
//   - After a release notice, every waiter draws a random delay in a
//     contention window before its attempt; the first to fire takes the lock
//     and its "acquired" notices reach the others before they fire, and they
//     stand down without sending anything. A waiter whose attempt still lost
//     widens its window (up to maxWindowFactor attempt durations); one that
//     stood down narrows it a little.
//   - A Client that heard other Clients take the key recently does not barge:
//     its next Lock of the key (the releaser's own, typically) waits its turn
//     in the same window, or, if another Client holds the key, waits for the
//     release instead of making an attempt that must fail.
//
// All of this is a shortcut: a lost notice costs a waiter its backoff delay,
// never liveness or safety, since the backoff timer always runs and every
// decision to hold a lock is the Redlock majority's.

const (
	noticePrefix       = "redlock:notices:"
	subscriptionLinger = time.Second // keep a key's subscription after its last waiter

	// A slot, the spacing between waiters of different seniority, in
	// attempt durations: long enough for the one in the slot before to
	// take the lock and announce it.
	minSlotFactor  = 1
	initSlotFactor = 2
	maxSlotFactor  = 8

	maxAge = 1 << 16 // in a notice; more is not a notice of ours
)

// noticeChannel is the pub/sub channel on which key's releases and
// acquisitions are announced.
func noticeChannel(key string) string { return noticePrefix + key }

const (
	acquiredNotice = "acquired"
	releasedNotice = "released"
)

// notice formats the message a node publishes for kind; age is how many
// releases the acquiring waiter had seen go to others.
func (c *Client) notice(kind, token string, age int) string {
	return kind + " " + c.id + " " + token + " " + strconv.Itoa(age)
}

// announce is the notice the nodes publish when they grant (kind
// acquiredNotice) or release key for token; none when notices are off.
func (c *Client) announce(kind, key, token string, age int) notice {
	if c.cfg.noWake {
		return notice{}
	}
	return notice{noticeChannel(key), c.notice(kind, token, age)}
}

// parseNotice splits a notice; ok is false for anything else.
func parseNotice(msg string) (kind, client, token string, age int, ok bool) {
	f := strings.Fields(msg)
	if len(f) != 4 || (f[0] != acquiredNotice && f[0] != releasedNotice) {
		return "", "", "", 0, false
	}
	age, err := strconv.Atoi(f[3])
	if err != nil || age < 0 || age > maxAge || strconv.Itoa(age) != f[3] {
		return "", "", "", 0, false
	}
	return f[0], f[1], f[2], age, true
}

// event is the latest state of a key, as the notices tell it.
type event int

const (
	noEvent  event = iota
	released       // the last holder released the key
	taken          // a majority of nodes gave the key to one token
)

// approach is how a Lock call starts, given what its Client knows of the key.
type approach int

const (
	attemptNow  approach = iota // no contention known: try at once
	jitterFirst                 // just released, others are waiting: draw a delay
	waitFirst                   // another Client holds it: wait for the release
)

// waker delivers notices to the Client's waiters.
type waker struct {
	c  *Client
	wg sync.WaitGroup // its goroutines, which live until close

	mu     sync.Mutex
	keys   map[string]*keyWatch
	subs   []*nodeSub // per node, created with the first watch
	closed bool
}

// keyWatch is what a Client knows of one key from its notices.
type keyWatch struct {
	refs   int
	linger *time.Timer // unsubscribes once refs has stayed 0 for subscriptionLinger

	ch       chan struct{} // closed, and replaced, on each new event
	latest   event
	foreign  bool      // the latest event came from another Client
	holder   string    // the token of the latest taken event, until released
	othersAt time.Time // when another Client's lock or release was last heard

	released [8]string // tokens whose release was heard: each node repeats it
	nextRel  int
	votes    [8]tokenVotes // nodes that announced each recent acquisition
	nextVote int

	round  time.Duration // attempt duration, moving average
	factor float64       // a slot is factor × round
	depth  float64       // the age at which waiters lately won the key
}

type tokenVotes struct {
	token string
	nodes []bool
	n     int
}

// nodeSub is the subscription connection to one node, with the queue of
// SUBSCRIBE/UNSUBSCRIBE calls its goroutine sends in order.
type nodeSub struct {
	index   int
	ps      *redis.PubSub
	mu      sync.Mutex
	pending []subOp
	kick    chan struct{}
}

type subOp struct {
	subscribe bool
	channel   string
}

// A watcher is one waiter's reference to a keyWatch. Its methods may be
// called on a nil *watcher, which knows nothing (notices are off).
type watcher struct {
	w    *waker
	key  string
	kw   *keyWatch
	once sync.Once
}

// watch returns a reference to key's watch, subscribing if there is none;
// nil when notices are off.
func (w *waker) watch(key string) *watcher {
	return w.ref(key, true)
}

// existing returns a reference to key's watch if there is one (a waiter
// has it, or it lingers), nil otherwise.
func (w *waker) existing(key string) *watcher {
	return w.ref(key, false)
}

func (w *waker) ref(key string, create bool) *watcher {
	if w.c.cfg.noWake {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	kw := w.keys[key]
	if kw == nil {
		if !create {
			return nil
		}
		if w.subs == nil {
			w.start()
		}
		if w.keys == nil {
			w.keys = map[string]*keyWatch{}
		}
		kw = &keyWatch{ch: make(chan struct{}), factor: initSlotFactor}
		w.keys[key] = kw
		w.queue(subOp{true, noticeChannel(key)})
	}
	if kw.linger != nil {
		kw.linger.Stop()
		kw.linger = nil
	}
	kw.refs++
	return &watcher{w: w, key: key, kw: kw}
}

// close drops the reference; the subscription lingers a while after the
// last one.
func (h *watcher) close() {
	if h == nil {
		return
	}
	h.once.Do(func() {
		w, kw := h.w, h.kw
		w.mu.Lock()
		defer w.mu.Unlock()
		if kw.refs--; kw.refs > 0 || w.closed {
			return
		}
		kw.linger = time.AfterFunc(w.c.cfg.linger, func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			if kw.refs == 0 && w.keys[h.key] == kw && !w.closed {
				delete(w.keys, h.key)
				w.queue(subOp{false, noticeChannel(h.key)})
			}
		})
	})
}

// events returns the channel closed at the next event. Take it before an
// attempt, so that an event during the attempt is not missed.
func (h *watcher) events() <-chan struct{} {
	if h == nil {
		return nil
	}
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	return h.kw.ch
}

// latest returns the key's latest event.
func (h *watcher) latest() event {
	if h == nil {
		return noEvent
	}
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	return h.kw.latest
}

// approach tells how a Lock call should start.
func (h *watcher) approach() approach {
	if h == nil {
		return attemptNow
	}
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	kw := h.kw
	switch {
	case kw.latest == taken && kw.foreign:
		return waitFirst
	case kw.latest == released && time.Since(kw.othersAt) < h.w.c.cfg.linger:
		return jitterFirst
	}
	return attemptNow
}

// delay draws the wait before an attempt after a release, for a waiter that
// has seen age releases go to others. Waiters go in order of seniority: one
// slot for each release fewer than the recent winners had seen, plus a
// random part of a slot. The longest waiter thus usually goes first, and
// the next ones hear it take the key before their turn and stand down.
func (h *watcher) delay(age int) time.Duration {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	kw := h.kw
	slot := time.Duration(kw.factor * float64(kw.round))
	ahead := max(0, min(math.Round(kw.depth)-float64(age), 64))
	// Never longer than the backoff could be: notices steer the order, the
	// timer bounds the wait.
	return min(time.Duration(ahead)*slot+rand.N(slot/2+1), h.w.c.cfg.retryMax)
}

// attempted records how long an attempt took and, for one made after a
// delay, whether it lost to another waiter's (which widens the window).
func (h *watcher) attempted(took time.Duration, delayed, lost bool) {
	if h == nil {
		return
	}
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	if h.kw.round == 0 {
		h.kw.round = took
	}
	h.kw.round += (took - h.kw.round) / 4
	if delayed && lost {
		h.kw.factor = min(1.25*h.kw.factor, maxSlotFactor)
	}
}

// stoodDown records that another waiter took the lock before this one's
// delay ran out: the slots separated them, so they may narrow a little.
func (h *watcher) stoodDown() {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	h.kw.factor = max(h.kw.factor*0.98, minSlotFactor)
}

// listening is how many subscriptions of this Client hear key's notices on
// one node: 1 when it watches key, 0 otherwise.
func (w *waker) listening(key string) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.keys[key] != nil {
		return 1
	}
	return 0
}

// othersSeen reports whether another Client was heard to want key lately.
func (w *waker) othersSeen(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	kw := w.keys[key]
	return kw != nil && time.Since(kw.othersAt) < w.c.cfg.linger
}

// othersListen records that a notice of this Client's reached subscribers
// of other Clients: they want key. The Client watches key from now on (the
// watch lingers), so that its next waiters wait their turn among them.
// freed tells whether the notice was a release.
func (w *waker) othersListen(key string, freed bool) {
	h := w.watch(key)
	if h == nil {
		return
	}
	w.mu.Lock()
	h.kw.othersAt = time.Now()
	if freed && h.kw.latest == noEvent {
		h.kw.latest = released
	}
	w.mu.Unlock()
	h.close()
}

// noteReleased records this Client's own Unlock of key at once, before its
// notices come back, so that its next Lock of key sees the key released.
func (w *waker) noteReleased(key, token string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if kw := w.keys[key]; kw != nil {
		kw.event(released, false, token)
	}
}

// start opens one PubSub per node and a goroutine each for its messages and
// its subscription calls. Called with w.mu held.
func (w *waker) start() {
	for _, n := range w.c.nodes {
		s := &nodeSub{index: n.index, ps: n.client.Subscribe(context.Background()), kick: make(chan struct{}, 1)}
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

// receive folds node s's notices into the watches, until the PubSub is
// closed.
func (w *waker) receive(s *nodeSub) {
	for msg := range s.ps.Channel() {
		key, ok := strings.CutPrefix(msg.Channel, noticePrefix)
		if !ok {
			continue
		}
		kind, client, token, age, ok := parseNotice(msg.Payload)
		if !ok {
			continue
		}
		foreign := client != w.c.id
		w.mu.Lock()
		if kw := w.keys[key]; kw != nil {
			if foreign {
				kw.othersAt = time.Now()
			}
			switch {
			case kind == releasedNotice:
				kw.event(released, foreign, token)
			case kw.vote(token, s.index, len(w.c.nodes)) == w.c.quorum && !kw.wasReleased(token):
				kw.depth += (float64(age) - kw.depth) / 4
				kw.event(taken, foreign, token)
			}
		}
		w.mu.Unlock()
	}
}

// event records a new event and wakes the watchers. A release already
// heard (from another node, or noted by Unlock) is not news, and nor is the
// release of a token other than the holder's: it comes from a node whose
// notices lag, after a majority already gave the key to the next holder.
func (kw *keyWatch) event(e event, foreign bool, token string) {
	switch e {
	case released:
		stale := kw.holder != "" && kw.holder != token
		if kw.wasReleased(token) || stale {
			return
		}
		kw.released[kw.nextRel] = token
		kw.nextRel = (kw.nextRel + 1) % len(kw.released)
		kw.holder = ""
	case taken:
		kw.holder = token
	}
	kw.latest, kw.foreign = e, foreign
	close(kw.ch)
	kw.ch = make(chan struct{})
}

func (kw *keyWatch) wasReleased(token string) bool {
	for _, t := range kw.released {
		if t == token {
			return true
		}
	}
	return false
}

// vote counts node's announcement that it gave the key to token and returns
// how many distinct nodes did.
func (kw *keyWatch) vote(token string, node, nodes int) int {
	for i := range kw.votes {
		v := &kw.votes[i]
		if v.token == token {
			if !v.nodes[node] {
				v.nodes[node] = true
				v.n++
			}
			return v.n
		}
	}
	v := &kw.votes[kw.nextVote]
	kw.nextVote = (kw.nextVote + 1) % len(kw.votes)
	*v = tokenVotes{token: token, nodes: make([]bool, nodes), n: 1}
	v.nodes[node] = true
	return 1
}

// close ends every subscription and waits for its goroutines.
func (w *waker) close() {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		for _, kw := range w.keys {
			if kw.linger != nil {
				kw.linger.Stop()
			}
		}
		for _, s := range w.subs {
			_ = s.ps.Close()
			close(s.kick)
		}
	}
	w.mu.Unlock()
	w.wg.Wait()
}
