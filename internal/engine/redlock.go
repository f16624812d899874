// Client and its public entry points: New, TryLock, Lock, Close.

package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/redlock-go/redlock/driver"
	"github.com/redlock-go/redlock/internal/master"
	"github.com/redlock-go/redlock/internal/script"
	"github.com/redlock-go/redlock/internal/wait"
	"github.com/redlock-go/redlock/internal/workers"
)

// A Client takes locks over a set of independent Redis masters with the
// Redlock algorithm. A Client is safe for concurrent use.
//
// Every operation sends its requests to all masters in parallel and returns
// as soon as its outcome is known; requests still in flight then finish in
// goroutines of the Client, which release anything a late reply set. Those
// goroutines end on their own, bounded by the node deadline and the
// go-redis client's timeouts; Close waits for them.
type Client struct {
	nodes  []*node
	seeds  []uint64 // each node's seed, for core.Reserves
	quorum int
	cfg    config

	mu      sync.RWMutex // guards closed against bg.Add after bg.Wait
	closed  bool
	closing chan struct{}  // closed by Close: waiting Lock calls return
	bg      sync.WaitGroup // goroutines still talking to nodes
	workers *workers.Pool  // run the calls to the nodes (internal/workers)

	anyCluster bool // a vote is a Redis Cluster: keys must share a slot with the library's keys (checkKey)

	id    string            // tells this Client's notices from others'
	turns *wait.Turns[Lock] // per-key FIFO of this Client's waiters
	wk    *wait.Waker       // notices for waiters

	longestTTL atomic.Int64 // the longest TTL used or heard of, for the restart guard
	wantNode   atomic.Int64 // turns the node a want is published on (wants.go)
	usualRound atomic.Int64 // how long a won round that asked no reserve takes, in ns: a moving average (quorumfirst.go)

	retiredMu sync.Mutex
	retired   map[string]retiredToken // tokens of this Client's wants a hand-off may still reach (wants.go)

	closeOnce sync.Once
}

// NewFromDrivers returns a Client over nodes, which must be independent
// masters: a majority, len(nodes)/2+1, of them must agree for a lock to be
// held. It checks them as newNodes does (a nil node, one server given twice,
// the restart guard's rights, eviction) and returns an error matching
// ErrInvalidArgument, ErrGuardRights or ErrEvictionPolicy; the root
// package's New and NewFromDrivers state the contract in full. The Client
// does not take ownership of the nodes.
func NewFromDrivers(nodes []driver.Conn, opts ...Option) (*Client, error) {
	cfg := defaultConfig()
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: option %d is nil", ErrInvalidArgument, i)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.logger != nil {
		if err := WithObserver(logObserver(cfg.logger, cfg.keyAttributes))(&cfg); err != nil {
			return nil, err
		}
	}
	ns, err := newNodes(nodes, cfg.guard > 0, cfg.evicting) // after the options: it may ask the nodes
	if err != nil {
		return nil, err
	}
	c := &Client{
		nodes:   ns,
		quorum:  quorum(len(ns)),
		cfg:     cfg,
		id:      uuid.NewString() + script.HandedSuffix,
		closing: make(chan struct{}),
	}
	for _, n := range ns {
		c.seeds = append(c.seeds, n.seed)
		c.anyCluster = c.anyCluster || n.isCluster()
		if n.topo.Kind == driver.Ring {
			// A Ring shards pub/sub channels by name, apart from the keys
			// whose scripts publish: its votes cannot carry notices (and
			// go-redis refuses a Ring subscription without a channel).
			// Notices off: waiters poll, and a Client never hands a key to
			// its own waiters past another Client's (WithoutNotices).
			c.cfg.noNotices = true
		}
	}
	c.workers = workers.New()
	if cfg.batchLimit > 1 {
		for _, n := range ns {
			n.pipe = master.NewPipe(n.conn.D, cfg.batchLimit, &c.bg, c.workers.Run)
		}
	}
	c.turns = wait.NewTurns[Lock](c.closing, ErrClosed)
	c.wk = wait.NewWaker(c.conns(), c.wakerConfig())
	return c, nil
}

// conns is what the waker reaches each master by.
func (c *Client) conns() []master.Conn {
	conns := make([]master.Conn, len(c.nodes))
	for i, n := range c.nodes {
		conns[i] = n.conn
	}
	return conns
}

// wakerConfig is the configuration of c's waker: its notices, and the
// observers' hooks on them.
func (c *Client) wakerConfig() wait.Config {
	cfg := c.cfg
	var noticed func(int, string, string, bool)
	var subscribeRefused func(int, error)
	if o := cfg.obs; o != nil {
		for _, n := range c.nodes {
			n.obs = o
		}
		if o.Notice != nil {
			noticed = func(node int, key, kind string, own bool) {
				o.Notice(NoticeEvent{Key: key, Node: node, Kind: kind, Own: own})
			}
		}
		ns := c.nodes
		subscribeRefused = func(node int, err error) { ns[node].refusedNoticeBy(err) }
	}
	return wait.Config{
		ID:               c.id,
		Quorum:           c.quorum,
		Linger:           cfg.linger(),
		SubscribeTimeout: cfg.subscribeTimeout(),
		MaxDelay:         cfg.retryMax,
		Off:              cfg.noNotices,
		LateHandOff:      c.lateHandOff,
		Noticed:          noticed,
		SubscribeRefused: subscribeRefused,
	}
}

// Close waits until no goroutine of the Client is talking to a node any more
// (late replies and their clean-up), then returns nil. Operations started
// after Close return ErrClosed, and so do Lock and Do calls still waiting
// for a lock. Close does not release held locks and does not close the node
// clients. It may wait as long as the go-redis clients' own timeouts when a
// node is hung. When Lock calls were waiting with their wants out to other
// Clients' holders, or had them out within the last few seconds, Close
// withdraws the wants, waits out a hand-off to them that may be on its way
// (the node deadline, DefaultMaxNodeTimeout at least), and releases their
// tokens. A holder that missed a withdrawal (its publish did not reach
// that holder) can still hand the key to such a token after Close: the
// token then stays on the masters until its TTL, and the key is nobody's
// meanwhile (never a second holder). Closing a Client twice, or from two
// goroutines at once, is harmless.
func (c *Client) Close() error {
	if err := c.usable(); err != nil {
		return err
	}
	c.closeOnce.Do(func() { // a concurrent Close waits for this one
		c.mu.Lock()
		c.closed = true
		close(c.closing)
		c.mu.Unlock()
		c.wk.Close()
		c.bg.Wait()
		c.withdrawAll(c.wk.Outstanding(), c.lateTickets(time.Now().Add(-wait.WantFresh)))
		c.bg.Wait()
		c.workers.Close()
	})
	return nil
}

// TryLock makes one attempt to take the lock on key for ttl.
//
// It sets key, where it is free, to a fresh random token with expiry ttl
// (rounded down to whole milliseconds) on every node in parallel, and
// returns as soon as a majority said yes or a majority became impossible. The
// lock is held if a majority said yes and validity is left:
// ttl − elapsed − (ttl·driftFactor + 2 ms) > 0. Lock.Until tells when that
// validity ends.
//
// On failure TryLock returns an error matching ErrNotObtained, with a
// *QuorumError for errors.As, and releases the key on every node that may
// hold its token (those that answered at once; the others as soon as their
// late reply arrives). If ctx ended, the error also matches ctx.Err(). Bad
// input returns an error matching ErrInvalidArgument.
func (c *Client) TryLock(ctx context.Context, key string, ttl time.Duration) (*Lock, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	return c.acquire(ctx, "try_lock", key, ttl, c.tryLock)
}

// acquire runs TryLock's or Lock's body, op, for the observers when the
// Client has any: Start before it, Acquire after it.
func (c *Client) acquire(ctx context.Context, op, key string, ttl time.Duration, body func(context.Context, string, time.Duration) (*Lock, error)) (*Lock, error) {
	if c.cfg.obs == nil {
		return body(ctx, key, ttl)
	}
	began := time.Now()
	ctx = c.start(ctx, op, key)
	l, err := body(ctx, key, ttl)
	c.observeAcquire(ctx, op, key, began, err)
	return l, err
}

func (c *Client) tryLock(ctx context.Context, key string, ttl time.Duration) (*Lock, error) {
	ttl, err := c.checkLock(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	l, err := c.attempt(ctx, key, ttl, 0)
	if err != nil {
		return nil, withCtx(ctx, err)
	}
	return l, nil
}

// Lock takes the lock on key for ttl, waiting until it is obtained or ctx
// ends. It makes an attempt like TryLock, and after each failure waits until
// the key is released or a jittered, growing delay (see WithRetryDelay) has
// passed, whichever comes first, before the next.
//
// Waiting is cheap for the masters and fair:
//   - Goroutines that call Lock on one Client for the same key queue in FIFO
//     order, and only the first makes attempts; the others send nothing
//     until the lock it obtained is released or its validity ends. While no
//     other Client is known to want the key, Unlock hands the lock straight
//     to the next of them in one round (see Lock.Unlock).
//   - Waiters of different Clients (processes) learn from pub/sub notices
//     that the nodes publish when a lock is taken or released (the Client
//     keeps one subscription connection per node, and subscribes to a key
//     after its first failed attempt). A lock nobody else wants is quiet: a
//     Client that watches no waiter of the key announces neither taking it
//     nor, unless another Client's failed attempt marked the key meanwhile,
//     releasing it. After a release, waiters go in order of
//     how many releases they have already waited through, and stand down
//     without an attempt when another waiter takes the key first; a Client
//     that has just released a key others want does not take it straight
//     back. A lost notice costs latency, never liveness or safety: the
//     backoff delay always runs as well, and only a Redlock majority ever
//     grants a lock.
//
// When ctx ends first, Lock returns an error that matches both
// ErrNotObtained and ctx.Err() with errors.Is, and wraps the *QuorumError of
// the last attempt that ran to its decision (one cut short by ctx only if
// there was no other), which tells why the lock could not be had; if ctx
// ended before the call made any attempt (it was waiting behind others), the
// error says so instead. Bad input returns an error matching
// ErrInvalidArgument without any attempt. After Close, and when Close is
// called while it waits, Lock returns an error matching ErrClosed. A Lock
// that is being handed the lock by Unlock as ctx ends or Close is called
// returns that lock rather than give it back (unlike x/sync's semaphore,
// whose Acquire gives back a grant that comes as ctx ends: giving a lock
// back takes a release round, which a closed Client cannot make).
func (c *Client) Lock(ctx context.Context, key string, ttl time.Duration) (*Lock, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	return c.acquire(ctx, "lock", key, ttl, c.lock)
}

func (c *Client) lock(ctx context.Context, key string, ttl time.Duration) (*Lock, error) {
	ttl, err := c.checkLock(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	if c.isClosed() {
		return nil, ErrClosed
	}
	pass := func() {}
	queued := false
	if !c.cfg.test.noQueue {
		var handed *Lock
		if pass, handed, queued, err = c.turns.Take(ctx, key, ttl); err != nil {
			return nil, fmt.Errorf("%w: %q: waiting behind this Client's earlier waiters: %w", ErrNotObtained, key, err)
		}
		if handed != nil {
			return handed, nil
		}
	}
	// A waiter of another Client that cannot hear notices only polls: the
	// next local waiter leaves the key free for a backoff first.
	l, err := c.wait(ctx, key, ttl, queued && c.noticesOff())
	if err != nil {
		pass()
		return nil, err
	}
	c.turns.Saw(key, nil) // the waiters behind it now wait for this lock
	l.passTurnAtEnd(pass)
	return l, nil
}

// announce is the notice the nodes publish when they grant (kind
// acquiredNotice) or release key for token; none when notices are off.
func (c *Client) announce(kind, key, token string, age int) script.Notice {
	if c.cfg.noNotices {
		return script.Notice{}
	}
	return script.NewNotice(kind, key, c.id, token, age)
}

// errNotNew is every call's error on a Client that New did not make: a zero
// Client has no nodes, and a majority of none would grant every lock.
var errNotNew = fmt.Errorf("%w: Client not made by New (use redlock.New)", ErrInvalidArgument)

// usable reports errNotNew for a nil or zero Client.
func (c *Client) usable() error {
	if c == nil || len(c.nodes) == 0 || c.quorum < 1 || c.closing == nil {
		return errNotNew
	}
	return nil
}

// isClosed reports whether Close was called.
func (c *Client) isClosed() bool {
	select {
	case <-c.closing:
		return true
	default:
		return false
	}
}

// enter registers an operation; it fails once the Client is closed.
func (c *Client) enter() error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return ErrClosed
	}
	c.bg.Add(1)
	return nil
}
