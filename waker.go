// Notices to waiters: one pub/sub subscription per master, the keys watched,
// and the goroutines that fold notices into them.

package redlock

import (
	"context"
	"sync"
	"time"

	"github.com/redlock-go/redlock/internal/master"
	"github.com/redlock-go/redlock/internal/script"
)

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

// subscriptionLinger is how long a key's subscription outlives its last
// waiter.
const subscriptionLinger = time.Second

// waker delivers notices to the Client's waiters.
type waker struct {
	nodes []master.Conn // the masters, in the Client's order
	cfg   wakerConfig
	wg    sync.WaitGroup // its goroutines, which live until close

	mu     sync.Mutex
	keys   map[string]*keyWatch
	subs   []*nodeSub // per node, created with the first watch
	closed bool
}

// wakerConfig is what a waker needs to know of the Client it serves.
type wakerConfig struct {
	id               string        // the Client's, in the notices it sends
	quorum           int           // nodes that must announce an acquisition
	linger           time.Duration // a key's subscription outlives its last waiter by this
	subscribeTimeout time.Duration // bounds one SUBSCRIBE or UNSUBSCRIBE call
	maxDelay         time.Duration // the longest contention delay (the backoff's cap)
	off              bool          // notices are off: every watch is nil

	// lateHandOff is told of a node's notice that it handed key to one of
	// the Client's tokens no waiter expects any more (wants.go). It must
	// not block.
	lateHandOff func(key, token string, node int)

	// For the observers, when set (observe.go): a notice received, and a
	// subscription a node refused.
	noticed          func(node int, key, kind string, own bool)
	subscribeRefused func(node int, err error)
}

// newWaker returns a waker for the masters nodes. It opens no connection
// until the first watch.
func newWaker(nodes []master.Conn, cfg wakerConfig) *waker {
	return &waker{cfg: cfg, nodes: nodes}
}

// nodeSub is the subscription connection to one node, with the queue of
// SUBSCRIBE/UNSUBSCRIBE calls its goroutine sends in order.
type nodeSub struct {
	index   int
	sharded bool // a Redis Cluster: the keys' shard channels (shardedChannel)
	ps      master.Subscription
	mu      sync.Mutex
	pending []subOp
	kick    chan struct{}
}

type subOp struct {
	subscribe bool
	key       string // whose notice channel
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
	if w.cfg.off {
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
		w.queue(subOp{true, key})
	}
	if kw.linger != nil {
		kw.linger.Stop()
		kw.linger = nil
	}
	kw.refs++
	return &watcher{w: w, key: key, kw: kw, taken: kw.ch, takenReleases: kw.releases, takenGaps: kw.gaps}
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
	return kw != nil && time.Since(kw.othersAt) < w.cfg.linger
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
	for i, n := range w.nodes {
		s := &nodeSub{index: i, sharded: n.Cluster(), ps: n.Subscribe(), kick: make(chan struct{}, 1)}
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
			// The key's notice channel, and this Client's channel for
			// hand-offs of the key to its waiters (handedChannel).
			for _, channel := range [2]string{script.NoticeChannelOn(op.key, s.sharded), script.ChannelOn(op.key, script.HandedChannel(op.key, w.cfg.id), s.sharded)} {
				ctx, cancel := context.WithTimeout(context.Background(), w.cfg.subscribeTimeout)
				if op.subscribe {
					err := s.ps.Subscribe(ctx, channel)
					if w.cfg.subscribeRefused != nil && master.IsNoPerm(err) {
						w.cfg.subscribeRefused(s.index, err)
					}
				} else {
					_ = s.ps.Unsubscribe(ctx, channel)
				}
				cancel()
			}
		}
	}
}

// receive folds node s's notices, and the confirmations of its
// subscriptions, into the watches, until the PubSub is closed.
func (w *waker) receive(s *nodeSub) {
	s.ps.Run(func(e master.SubEvent) {
		if e.Kind == master.SubMessage {
			w.notice(s.index, e.Channel, e.Payload)
		} else {
			w.confirmed(s.index, e.Channel, e.Kind == master.SubConfirmed)
		}
	})
}

// confirmed records that node confirmed a subscription, or its end; once a
// majority confirmed both of a key's, the key's waiters are woken (they may
// announce themselves: wants.go).
func (w *waker) confirmed(node int, channel string, on bool) {
	key, handed, ok := script.ChannelKey(channel, w.cfg.id)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	kw := w.keys[key]
	if kw == nil {
		return
	}
	if handed {
		kw.handedOn(node, on, len(w.nodes), w.cfg.quorum)
		return
	}
	if kw.subs == nil {
		kw.subs = make([]bool, len(w.nodes))
	}
	if kw.subs[node] == on {
		if on { // again: the node's connection was lost, and notices with it
			kw.gaps++
			kw.deafTo(node)
			kw.wake()
		}
		return
	}
	kw.subs[node] = on
	if !on {
		kw.nsubs--
		kw.deafTo(node)
		return
	}
	if kw.nsubs++; kw.nsubs == w.cfg.quorum {
		kw.gaps++
		kw.wake()
	}
}

// notice folds one notice of node into its key's watch.
func (w *waker) notice(node int, channel, payload string) {
	key, handed, ok := script.ChannelKey(channel, w.cfg.id)
	if !ok {
		return
	}
	kind, client, token, n, ok := script.ParseNotice(payload)
	if !ok || (handed && (kind != script.HandedNotice || client != w.cfg.id)) {
		return // a handedChannel carries hand-offs to its Client only
	}
	foreign := client != w.cfg.id
	if w.cfg.noticed != nil {
		w.cfg.noticed(node, key, kind, !foreign)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	kw := w.keys[key]
	if kw == nil {
		return
	}
	if foreign {
		kw.othersAt = time.Now()
	}
	switch kind {
	case script.WantedNotice:
		if foreign {
			kw.wanted(client, token, time.Duration(n)*time.Millisecond, time.Now(), len(w.nodes))
		}
		return
	case script.ReleasedNotice:
		if kw.nodeReleases == nil {
			kw.nodeReleases = make([]int, len(w.nodes))
		}
		kw.nodeReleases[node]++
		kw.event(released, foreign, token)
		return
	case script.HandedNotice:
		kw.served(token)
		if !foreign && !kw.handed(token, node, w.cfg.quorum) && w.cfg.lateHandOff != nil {
			w.cfg.lateHandOff(key, token, node)
		}
	}
	if kw.vote(token, node, len(w.nodes)) == w.cfg.quorum && !kw.wasReleased(token) {
		kw.depth += (float64(n) - kw.depth) / 4
		kw.event(taken, foreign, token)
	}
}

// close ends every subscription and waits for its goroutines.
func (w *waker) close() {
	w.mu.Lock()
	var subs []*nodeSub
	if !w.closed {
		w.closed = true // queue sends nothing more on a kick
		for _, kw := range w.keys {
			if kw.linger != nil {
				kw.linger.Stop()
			}
		}
		subs = w.subs
		for _, s := range subs {
			close(s.kick)
		}
	}
	w.mu.Unlock()
	// Not under w.mu: PubSub.Close waits for a SUBSCRIBE in flight, which
	// a hung master holds for the driver's read timeout, and the Client's
	// waiters, returning ErrClosed meanwhile, need w.mu to let go.
	for _, s := range subs {
		_ = s.ps.Close()
	}
	w.wg.Wait()
}
