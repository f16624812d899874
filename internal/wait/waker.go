// Notices to waiters: one pub/sub subscription per master, the keys watched,
// and the goroutines that fold notices into them.

package wait

import (
	"context"
	"sync"
	"time"

	"github.com/redlock-go/redlock/driver"
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

// SubscriptionLinger is how long a key's subscription outlives its last
// waiter.
const SubscriptionLinger = time.Second

// Waker delivers notices to the Client's waiters.
type Waker struct {
	Nodes []master.Conn // the masters, in the Client's order
	Cfg   Config
	wg    sync.WaitGroup // its goroutines, which live until close

	Mu     sync.Mutex
	Keys   map[string]*KeyWatch
	Subs   []*nodeSub // per node, created with the first watch
	closed bool
}

// Config is what a Waker needs to know of the Client it serves.
type Config struct {
	ID               string        // the Client's, in the notices it sends
	Quorum           int           // nodes that must announce an acquisition
	Linger           time.Duration // a key's subscription outlives its last waiter by this
	SubscribeTimeout time.Duration // bounds one SUBSCRIBE or UNSUBSCRIBE call
	MaxDelay         time.Duration // the longest contention delay (the backoff's cap)
	Off              bool          // notices are off: every watch is nil

	// LateHandOff is told of a node's notice that it handed key to one of
	// the Client's tokens no waiter expects any more (wants.go). It must
	// not block.
	LateHandOff func(key, token string, node int)

	// For the observers, when set (observe.go): a notice received, and a
	// subscription a node refused.
	Noticed          func(node int, key, kind string, own bool)
	SubscribeRefused func(node int, err error)
}

// NewWaker returns a waker for the masters nodes. It opens no connection
// until the first watch.
func NewWaker(nodes []master.Conn, cfg Config) *Waker {
	return &Waker{Cfg: cfg, Nodes: nodes}
}

// nodeSub is the subscription connection to one node, with the queue of
// SUBSCRIBE/UNSUBSCRIBE calls its goroutine sends in order.
type nodeSub struct {
	index   int
	sharded bool // a Redis Cluster: the keys' shard channels (shardedChannel)
	Ps      driver.Subscription
	mu      sync.Mutex
	pending []subOp
	kick    chan struct{}
}

type subOp struct {
	subscribe bool
	key       string // whose notice channel
}

// Watch returns a reference to key's watch, subscribing if there is none;
// nil when notices are off.
func (w *Waker) Watch(key string) *Watcher {
	return w.ref(key, true)
}

// Existing returns a reference to key's watch if there is one (a waiter
// has it, or it lingers), nil otherwise.
func (w *Waker) Existing(key string) *Watcher {
	return w.ref(key, false)
}

func (w *Waker) ref(key string, create bool) *Watcher {
	if w.Cfg.Off {
		return nil
	}
	w.Mu.Lock()
	defer w.Mu.Unlock()
	if w.closed {
		return nil
	}
	kw := w.Keys[key]
	if kw == nil {
		if !create {
			return nil
		}
		if w.Subs == nil {
			w.start()
		}
		if w.Keys == nil {
			w.Keys = map[string]*KeyWatch{}
		}
		kw = &KeyWatch{Ch: make(chan struct{}), Factor: initSlotFactor}
		w.Keys[key] = kw
		w.queue(subOp{true, key})
	}
	if kw.linger != nil {
		kw.linger.Stop()
		kw.linger = nil
	}
	kw.refs++
	return &Watcher{W: w, Key: key, Kw: kw, taken: kw.Ch, takenReleases: kw.releases, takenGaps: kw.Gaps}
}

// Listening is how many subscriptions of this Client hear key's notices on
// one node: 1 when it watches key, 0 otherwise.
func (w *Waker) Listening(key string) int64 {
	w.Mu.Lock()
	defer w.Mu.Unlock()
	if w.Keys[key] != nil {
		return 1
	}
	return 0
}

// OthersSeen reports whether another Client was heard to want key lately.
func (w *Waker) OthersSeen(key string) bool {
	w.Mu.Lock()
	defer w.Mu.Unlock()
	kw := w.Keys[key]
	return kw != nil && time.Since(kw.othersAt) < w.Cfg.Linger
}

// OthersListen records that a notice of this Client's reached subscribers
// of other Clients: they want key. The Client watches key from now on (the
// watch lingers), so that its next waiters wait their turn among them.
// freed tells whether the notice was a release.
func (w *Waker) OthersListen(key string, freed bool) {
	h := w.Watch(key)
	if h == nil {
		return
	}
	w.Mu.Lock()
	h.Kw.othersAt = time.Now()
	if freed && h.Kw.Latest == NoEvent {
		h.Kw.Latest = Released
	}
	w.Mu.Unlock()
	h.Close()
}

// NoteReleased records this Client's own Unlock of key at once, before its
// notices come back, so that its next Lock of key sees the key released.
func (w *Waker) NoteReleased(key, token string) {
	w.Mu.Lock()
	defer w.Mu.Unlock()
	if kw := w.Keys[key]; kw != nil {
		kw.event(Released, false, token)
	}
}

// start opens one PubSub per node and a goroutine each for its messages and
// its subscription calls. Called with w.mu held.
func (w *Waker) start() {
	for i, n := range w.Nodes {
		s := &nodeSub{index: i, sharded: n.Cluster(), Ps: n.Subscribe(), kick: make(chan struct{}, 1)}
		w.Subs = append(w.Subs, s)
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
func (w *Waker) queue(op subOp) {
	for _, s := range w.Subs {
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
// call is not retried: the driver re-subscribes a reconnected connection to its
// channels, and a waiter without notices still has its backoff timer.
func (w *Waker) send(s *nodeSub) {
	for range s.kick {
		s.mu.Lock()
		ops := s.pending
		s.pending = nil
		s.mu.Unlock()
		for _, op := range ops {
			// The key's notice channel, and this Client's channel for
			// hand-offs of the key to its waiters (handedChannel).
			for _, channel := range [2]string{script.NoticeChannelOn(op.key, s.sharded), script.ChannelOn(op.key, script.HandedChannel(op.key, w.Cfg.ID), s.sharded)} {
				if op.subscribe {
					w.subscribe(s, channel)
					continue
				}
				ctx, cancel := context.WithTimeout(context.Background(), w.Cfg.SubscribeTimeout)
				_ = s.Ps.Unsubscribe(ctx, channel)
				cancel()
			}
		}
	}
}

// subscribe subscribes node s's connection to channel, and asks once more
// when the connection broke under the SUBSCRIBE: it may have been replaced
// without the channel (driver.Subscription). Not when the master refused
// it (ACL), nor when the call ran out of time: that connection was still
// opening, and will be subscribed to the channel once open (asking again
// would confirm it twice, which the watch takes for a lost connection); a
// closed connection fails at once.
func (w *Waker) subscribe(s *nodeSub, channel string) {
	for try := 0; try < 2; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), w.Cfg.SubscribeTimeout)
		err := s.Ps.Subscribe(ctx, channel)
		timedOut := ctx.Err() != nil
		cancel()
		if master.IsNoPerm(err) && w.Cfg.SubscribeRefused != nil {
			w.Cfg.SubscribeRefused(s.index, err)
		}
		if err == nil || master.IsNoPerm(err) || timedOut {
			return
		}
	}
}

// receive folds node s's notices, and the confirmations of its
// subscriptions, into the watches, until the PubSub is closed.
func (w *Waker) receive(s *nodeSub) {
	s.Ps.Run(func(e driver.Event) {
		if e.Kind == driver.Message {
			w.Notice(s.index, e.Channel, e.Payload)
		} else {
			w.Confirmed(s.index, e.Channel, e.Kind == driver.Subscribed)
		}
	})
}

// Confirmed records that node confirmed a subscription, or its end; once a
// majority confirmed both of a key's, the key's waiters are woken (they may
// announce themselves: wants.go).
func (w *Waker) Confirmed(node int, channel string, on bool) {
	key, handed, ok := script.ChannelKey(channel, w.Cfg.ID)
	if !ok {
		return
	}
	w.Mu.Lock()
	defer w.Mu.Unlock()
	kw := w.Keys[key]
	if kw == nil {
		return
	}
	if handed {
		kw.handedOn(node, on, len(w.Nodes), w.Cfg.Quorum)
		return
	}
	if kw.subs == nil {
		kw.subs = make([]bool, len(w.Nodes))
	}
	if kw.subs[node] == on {
		if on { // again: the node's connection was lost, and notices with it
			kw.Gaps++
			kw.Line.Deaf(node)
			kw.wake()
		}
		return
	}
	kw.subs[node] = on
	if !on {
		kw.Nsubs--
		kw.Line.Deaf(node)
		return
	}
	if kw.Nsubs++; kw.Nsubs == w.Cfg.Quorum {
		kw.Gaps++
		kw.wake()
	}
}

// Notice folds one notice of node into its key's watch.
func (w *Waker) Notice(node int, channel, payload string) {
	key, handed, ok := script.ChannelKey(channel, w.Cfg.ID)
	if !ok {
		return
	}
	kind, client, token, n, ok := script.ParseNotice(payload)
	if !ok || (handed && (kind != script.HandedNotice || client != w.Cfg.ID)) {
		return // a handedChannel carries hand-offs to its Client only
	}
	foreign := client != w.Cfg.ID
	if w.Cfg.Noticed != nil {
		w.Cfg.Noticed(node, key, kind, !foreign)
	}
	w.Mu.Lock()
	defer w.Mu.Unlock()
	kw := w.Keys[key]
	if kw == nil {
		return
	}
	if foreign {
		kw.othersAt = time.Now()
	}
	switch kind {
	case script.WantedNotice:
		if foreign {
			kw.Line.Heard(client, token, time.Duration(n)*time.Millisecond, time.Now(), kw.subs, len(w.Nodes))
		}
		return
	case script.ReleasedNotice:
		if kw.NodeReleases == nil {
			kw.NodeReleases = make([]int, len(w.Nodes))
		}
		kw.NodeReleases[node]++
		kw.event(Released, foreign, token)
		return
	case script.HandedNotice:
		kw.Line.Served(token)
		if !foreign && !kw.handed(token, node, w.Cfg.Quorum) && w.Cfg.LateHandOff != nil {
			w.Cfg.LateHandOff(key, token, node)
		}
	}
	if kw.vote(token, node, len(w.Nodes)) == w.Cfg.Quorum && !kw.wasReleased(token) {
		kw.Depth += (float64(n) - kw.Depth) / 4
		kw.event(Taken, foreign, token)
	}
}

// Close ends every subscription and waits for its goroutines.
func (w *Waker) Close() {
	w.Mu.Lock()
	var subs []*nodeSub
	if !w.closed {
		w.closed = true // queue sends nothing more on a kick
		for _, kw := range w.Keys {
			if kw.linger != nil {
				kw.linger.Stop()
			}
		}
		subs = w.Subs
		for _, s := range subs {
			close(s.kick)
		}
	}
	w.Mu.Unlock()
	// Not under w.mu: PubSub.Close waits for a SUBSCRIBE in flight, which
	// a hung master holds for the driver's read timeout, and the Client's
	// waiters, returning ErrClosed meanwhile, need w.mu to let go.
	for _, s := range subs {
		_ = s.Ps.Close()
	}
	w.wg.Wait()
}
