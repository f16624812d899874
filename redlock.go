package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// Defaults for the options.
const (
	// DefaultMaxNodeTimeout caps the default per-node deadline, which is
	// otherwise a tenth of the TTL.
	DefaultMaxNodeTimeout = 250 * time.Millisecond
	// DefaultRetryMin and DefaultRetryMax bound Lock's wait between attempts.
	DefaultRetryMin = 10 * time.Millisecond
	DefaultRetryMax = 250 * time.Millisecond
)

// An Option configures a Client. Options are checked by New, which returns
// an error matching ErrInvalidArgument for a value out of range.
type Option func(*config) error

type config struct {
	nodeTimeout time.Duration // 0: derived from the TTL
	driftFactor float64
	retryMin    time.Duration
	retryMax    time.Duration

	// Off only in tests and benchmarks that measure what they save,
	// except noWake.
	noQueue   bool          // no per-key FIFO of local waiters
	noWake    bool          // no pub/sub notices (WithoutNotices)
	noHandOff bool          // Unlock never passes a lock straight to a local waiter
	linger    time.Duration // how long a key's subscription outlives its waiters
}

// subscribeTimeout bounds one SUBSCRIBE or UNSUBSCRIBE call.
func (cfg *config) subscribeTimeout() time.Duration {
	if cfg.nodeTimeout > 0 {
		return cfg.nodeTimeout
	}
	return DefaultMaxNodeTimeout
}

// WithNodeTimeout sets the deadline each node has to answer one request,
// enforced by the Client whatever the go-redis client's own timeouts are. A
// node that misses it counts as failed (ErrNodeTimeout) for that request.
//
// The default is a tenth of the TTL (or of the extension), at most
// DefaultMaxNodeTimeout, so that an attempt always leaves most of the
// validity. d must be positive.
func WithNodeTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: node timeout %v is not positive", ErrInvalidArgument, d)
		}
		c.nodeTimeout = d
		return nil
	}
}

// WithDriftFactor sets the share of the TTL given up for clock drift
// between the client and the masters: validity = ttl − elapsed − (ttl·f + 2 ms).
// The default is DefaultDriftFactor (0.01). f must be in [0, 1).
func WithDriftFactor(f float64) Option {
	return func(c *config) error {
		if !(f >= 0 && f < 1) { // also rejects NaN
			return fmt.Errorf("%w: drift factor %v is not in [0, 1)", ErrInvalidArgument, f)
		}
		c.driftFactor = f
		return nil
	}
}

// WithRetryDelay bounds Lock's jittered, capped exponential backoff: the
// k-th wait (from 0) is drawn uniformly from [min, min(max, min·2^(k+1))],
// so competing clients fall out of step. The defaults are DefaultRetryMin
// and DefaultRetryMax. It requires 0 < min ≤ max.
func WithRetryDelay(min, max time.Duration) Option {
	return func(c *config) error {
		if min <= 0 || max < min {
			return fmt.Errorf("%w: retry delay [%v, %v] needs 0 < min ≤ max", ErrInvalidArgument, min, max)
		}
		c.retryMin, c.retryMax = min, max
		return nil
	}
}

// WithoutNotices turns the pub/sub notices off: the scripts publish nothing
// and the Client subscribes to nothing, so a waiting Lock learns of a
// release only by its next attempt (see WithRetryDelay), and waiters of
// different Clients are no longer ordered by seniority. Use it where the
// masters' ACL grants no channel rights, or pub/sub is unwanted.
//
// Without it, a master that refuses a notice (a Redis 7 ACL user without
// channel rights) is sent none for a while: locks keep working there, and
// waiting falls back to the backoff for what that master would have told.
func WithoutNotices() Option {
	return func(c *config) error {
		c.noWake = true
		return nil
	}
}

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
	quorum int
	cfg    config

	mu      sync.RWMutex // guards closed against bg.Add after bg.Wait
	closed  bool
	closing chan struct{}  // closed by Close: waiting Lock calls return
	bg      sync.WaitGroup // goroutines still talking to nodes

	id       string       // tells this Client's notices from others'
	turns    turns        // per-key FIFO of this Client's waiters
	handOffs atomic.Int64 // locks Unlock passed straight to a local waiter
	wk       waker        // notices for waiters
}

// New returns a Client over nodes, which must be independent masters (not
// replicas of each other, not one server given twice): a majority,
// len(nodes)/2+1, of them must agree for a lock to be held. The Client does
// not take ownership of the node clients; closing them is the caller's job.
//
// New returns an error matching ErrInvalidArgument when nodes is empty,
// holds a nil client or the same server twice, or an option is out of
// range. The same server is recognised in two steps. First without the
// network: one client given twice, or one address given to two clients
// (plain clients, cluster seeds, ring shards; "localhost:p" and ":p" count
// as "127.0.0.1:p", other names are not resolved). Then New asks every node,
// in parallel and for at most one second in all, for the run_id of each
// master behind it: the master its sentinel names for a failover client,
// every master of a *redis.ClusterClient, every shard of a *redis.Ring. Two
// nodes that share one are refused. A node that cannot answer in that time
// (down, hung, an ACL user without INFO, a server without INFO server) is
// not checked: it neither makes New fail nor keeps it past the second, and
// its request ends in the background within the go-redis client's own
// timeouts. A replica of another node's master is not recognised.
func New(nodes []redis.UniversalClient, opts ...Option) (*Client, error) {
	cfg := config{
		driftFactor: DefaultDriftFactor,
		retryMin:    DefaultRetryMin,
		retryMax:    DefaultRetryMax,
		linger:      subscriptionLinger,
	}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: option %d is nil", ErrInvalidArgument, i)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	ns, err := newNodes(nodes) // after the options: it may ask the nodes
	if err != nil {
		return nil, err
	}
	c := &Client{
		nodes:   ns,
		quorum:  quorum(len(ns)),
		cfg:     cfg,
		id:      uuid.NewString(),
		closing: make(chan struct{}),
	}
	c.turns.closing = c.closing
	c.wk.c = c
	return c, nil
}

// Close waits until no goroutine of the Client is talking to a node any more
// (late replies and their clean-up), then returns nil. Operations started
// after Close return ErrClosed, and so do Lock and Do calls still waiting
// for a lock. Close does not release held locks and does not close the node
// clients. It may wait as long as the go-redis clients' own timeouts when a
// node is hung. Closing a Client twice is harmless.
func (c *Client) Close() error {
	if err := c.usable(); err != nil {
		return err
	}
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.closing)
	}
	c.mu.Unlock()
	c.wk.close()
	c.bg.Wait()
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
//     after its first failed attempt). After a release they go in order of
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
// returns that lock, like x/sync's semaphore, rather than give it back.
func (c *Client) Lock(ctx context.Context, key string, ttl time.Duration) (*Lock, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	ttl, err := c.checkLock(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	if c.isClosed() {
		return nil, ErrClosed
	}
	pass := func() {}
	if !c.cfg.noQueue {
		var handed *Lock
		if pass, handed, err = c.turns.take(ctx, key, ttl); err != nil {
			return nil, fmt.Errorf("%w: %q: waiting behind this Client's earlier waiters: %w", ErrNotObtained, key, err)
		}
		if handed != nil {
			return handed, nil
		}
	}
	l, err := c.wait(ctx, key, ttl)
	if err != nil {
		pass()
		return nil, err
	}
	l.passTurnAtEnd(pass)
	return l, nil
}

// wait is Lock's retry loop. It makes attempts, and between them waits for
// its backoff delay or, sooner, for the key's notices (see wait.go): after a
// release, a random delay in the contention window, then an attempt; when
// another waiter takes the key during that delay, back to waiting, without
// an attempt that must fail.
func (c *Client) wait(ctx context.Context, key string, ttl time.Duration) (*Lock, error) {
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

// withCtx makes err match ctx.Err() as well when ctx has ended.
func withCtx(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		return fmt.Errorf("%w (%w)", err, ctxErr)
	}
	return err
}

// backoff is the wait after the k-th failed attempt (from 0).
func (cfg *config) backoff(k int) time.Duration {
	hi := cfg.retryMax
	if k < 62 && cfg.retryMin <= cfg.retryMax>>(k+1) {
		hi = cfg.retryMin << (k + 1)
	}
	return cfg.retryMin + rand.N(hi-cfg.retryMin+1)
}

// checkLock validates TryLock and Lock arguments and returns ttl rounded
// down to what Redis is told (whole milliseconds), so that validity is
// computed from the expiry the nodes really apply.
func (c *Client) checkLock(ctx context.Context, key string, ttl time.Duration) (time.Duration, error) {
	if ctx == nil {
		return 0, fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	if key == "" {
		return 0, fmt.Errorf("%w: empty key", ErrInvalidArgument)
	}
	return c.checkTTL(ttl)
}

func (c *Client) checkTTL(ttl time.Duration) (time.Duration, error) {
	ttl = ttl.Truncate(time.Millisecond)
	if !ttlLeavesValidity(ttl, c.cfg.driftFactor) {
		return 0, fmt.Errorf("%w: ttl %v leaves no validity after drift %v", ErrInvalidArgument, ttl, drift(ttl, c.cfg.driftFactor))
	}
	return ttl, nil
}

// nodeTimeout is the per-node deadline for a request about a lock of ttl.
func (c *Client) nodeTimeout(ttl time.Duration) time.Duration {
	if c.cfg.nodeTimeout > 0 {
		return c.cfg.nodeTimeout
	}
	return min(ttl/10, DefaultMaxNodeTimeout)
}

// deadline is when a round started at start stops waiting for nodes: at the
// node deadline, but never past the end of the validity it could win, since
// a later yes would be worthless.
func (c *Client) deadline(start time.Time, ttl time.Duration) time.Time {
	d := start.Add(c.nodeTimeout(ttl))
	if end := validUntil(start, ttl, c.cfg.driftFactor); end.Before(d) {
		return end
	}
	return d
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

// attempt is one acquisition round (Redlock spec, steps 1–4).
// age is how many releases the caller saw go to other waiters, for the
// acquired notice.
func (c *Client) attempt(ctx context.Context, key string, ttl time.Duration, age int) (*Lock, error) {
	if err := c.enter(); err != nil {
		return nil, err
	}
	defer c.bg.Done()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotObtained, err)
	}
	l, err := c.newLock(key, ttl)
	if err != nil {
		return nil, err
	}

	announce := c.announce(acquiredNotice, key, l.token, age)
	start := time.Now()
	r := c.fanOut(ctx, "lock", key, c.deadline(start, ttl), nil, func(ctx context.Context, n *node) (bool, error) {
		if !l.holds[n.index].send() {
			l.holds[n.index].finish(false, nil)
			return false, errGivenUp
		}
		yes, err := n.acquire(ctx, key, l.token, ttl, announce)
		if l.holds[n.index].finish(yes, err) {
			c.releaseNode(n, key, l.token, ttl)
		}
		return yes, err
	})
	if l.won(r) {
		return l, nil
	}
	// Spec step 4: release everywhere, including nodes that failed or timed
	// out, since their SET may have landed and only the reply been lost.
	l.abandon(ttl)
	return nil, r.error(ErrNotObtained)
}

// newLock makes the Lock an acquisition round fills in. A fresh token per
// round: a late release from an earlier, failed round can then never remove
// a key this one counted.
func (c *Client) newLock(key string, ttl time.Duration) (*Lock, error) {
	id, err := uuid.NewRandom()
	if err != nil {
		return nil, fmt.Errorf("redlock: token: %w", err)
	}
	return &Lock{c: c, key: key, token: id.String(), ttl: ttl, holds: newHolds(len(c.nodes))}, nil
}

// won reports whether acquisition round r obtained l with validity left,
// and if so starts its validity.
func (l *Lock) won(r *round) bool {
	if !r.won() || validity(l.ttl, r.elapsed(), l.c.cfg.driftFactor) <= 0 {
		return false
	}
	l.until = validUntil(r.start, l.ttl, l.c.cfg.driftFactor)
	l.done = make(chan struct{})
	l.mu.Lock() // expire may run before the assignment is done
	l.timer = time.AfterFunc(time.Until(l.until), l.expire)
	l.mu.Unlock()
	return true
}

// releaseNode deletes key on n if it holds token, in the background, under
// the node deadline; it is clean-up whose result nobody waits for.
func (c *Client) releaseNode(n *node, key, token string, ttl time.Duration) {
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), c.nodeTimeout(ttl))
		defer cancel()
		_, _, _ = n.release(ctx, key, token, notice{})
	}()
}

// A Lock is a lock obtained by TryLock or Lock. It is safe for concurrent
// use. Its methods do not panic on a nil or zero *Lock: Extend and Unlock
// report ErrNotHeld, Done is closed, and Key, Token and Until are empty.
type Lock struct {
	c     *Client
	key   string
	token string
	holds []*hold // per node, indexed like c.nodes

	mu       sync.Mutex
	ttl      time.Duration // of the last successful acquisition or extension
	until    time.Time
	released bool
	givenUp  bool          // Extend found the lock lost and released its keys
	done     chan struct{} // closed when the validity ends or Unlock is called
	ended    bool          // done is closed
	timer    *time.Timer   // runs expire at until
	pass     func()        // hands the Client's turn for key to its next waiter
}

// Done returns a channel that is closed when the lock can no longer be
// trusted: its validity ended (Until passed without a successful Extend), an
// Extend found it lost, or Unlock was called. Select on it next to the work
// the lock protects. For a nil *Lock it returns a closed channel.
func (l *Lock) Done() <-chan struct{} {
	if l == nil || l.done == nil {
		return closedChan
	}
	return l.done
}

var closedChan = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// expire runs at Until: it ends the lock unless an extension moved Until.
func (l *Lock) expire() {
	l.mu.Lock()
	if !l.ended {
		if d := time.Until(l.until); d > 0 {
			l.timer.Reset(d)
			l.mu.Unlock()
			return
		}
	}
	l.endLocked()
	pass := l.takePass()
	l.mu.Unlock()
	pass()
}

// endLocked closes done once. Called with l.mu held.
func (l *Lock) endLocked() {
	if l.ended {
		return
	}
	l.ended = true
	close(l.done)
	l.timer.Stop()
}

// takePass returns the turn-passing function, once. Called with l.mu held.
func (l *Lock) takePass() func() {
	p := l.pass
	l.pass = nil
	if p == nil {
		return func() {}
	}
	return p
}

// passTurnAtEnd makes the lock hand the Client's turn for its key to the
// next local waiter when it is released or its validity ends.
func (l *Lock) passTurnAtEnd(pass func()) {
	l.mu.Lock()
	if l.ended && !l.released {
		l.mu.Unlock()
		pass() // the validity already ended
		return
	}
	l.pass = pass
	l.mu.Unlock()
}

// Key returns the locked key; "" for a nil *Lock.
func (l *Lock) Key() string {
	if l == nil {
		return ""
	}
	return l.key
}

// Token returns the random token that identifies this holder on the nodes;
// "" for a nil *Lock.
func (l *Lock) Token() string {
	if l == nil {
		return ""
	}
	return l.token
}

// Until returns the end of the lock's validity on the local monotonic clock:
// until then, no other client can hold the lock as long as the nodes' clocks
// run at a rate within the drift factor of this one's. Compare it with
// time.Now(), not with a wall-clock time from elsewhere. After Unlock, or
// once the lock was found lost, Until is in the past. For a nil *Lock it is
// the zero time.
func (l *Lock) Until() time.Time {
	if l == nil {
		return time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// Extend makes the lock live at least ttl from now on every node that still
// holds its token, in parallel (Redlock spec, step 6). It never shortens the
// keys: a ttl shorter than the validity left confirms that the lock is held
// and leaves the keys as they are. It succeeds when a majority answered
// before the current validity ended, and then moves Until to the start of
// the extension + ttl − drift, if that is later. An extension never
// re-creates a key that expired.
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
	if l == nil || l.c == nil {
		return fmt.Errorf("%w: no lock", ErrNotHeld)
	}
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	c := l.c
	ttl, err := c.checkTTL(ttl)
	if err != nil {
		return err
	}
	if err := c.enter(); err != nil {
		return err
	}
	defer c.bg.Done()
	until, err := l.heldUntil()
	if err != nil {
		// An earlier Extend that failed may have lengthened the keys all
		// the same: a lock whose validity ended is given up here too.
		l.giveUp(ttl)
		return err
	}

	start := time.Now()
	deadline := c.deadline(start, ttl)
	if until.Before(deadline) {
		deadline = until // a majority after the validity ended is too late
	}
	r := c.fanOut(ctx, "extend", l.key, deadline, l.refusedNodes(), func(ctx context.Context, n *node) (bool, error) {
		if err := l.holds[n.index].await(ctx); err != nil {
			return false, refusalAsVote(err)
		}
		return n.extend(ctx, l.key, l.token, ttl)
	})

	l.mu.Lock()
	settled := r.refused > len(c.nodes)-c.quorum || !r.decided.Before(l.until)
	switch {
	case !l.ended && r.won() && !settled && validity(ttl, r.elapsed(), c.cfg.driftFactor) > 0:
		// Every key of the majority now lives at least until start+ttl and
		// was never shortened, so the later of the two ends holds.
		if end := validUntil(start, ttl, c.cfg.driftFactor); end.After(l.until) {
			l.ttl, l.until = ttl, end
			l.timer.Reset(time.Until(end))
		}
		l.mu.Unlock()
		return nil
	case !l.ended && !settled: // undecided: the lock may still be held until Until
		l.mu.Unlock()
		return withCtx(ctx, r.error(ErrNotObtained))
	}
	// Lost: no majority holds our token, or the validity ended (this round
	// reached its end, or the expiry timer, Unlock or another Extend came
	// first). This round may have lengthened the keys all the same.
	if !l.ended && r.decided.Before(l.until) {
		l.until = r.decided
	}
	l.mu.Unlock()
	l.giveUp(ttl)
	return r.error(ErrNotHeld)
}

// giveUp ends a lock whose validity is over, if Unlock has not, and
// releases its keys once, since an extension may have lengthened them;
// unless Unlock is releasing them already. Unlock after it reports
// ErrNotHeld without contacting the nodes. The caller holds a registration
// (enter).
func (l *Lock) giveUp(ttl time.Duration) {
	l.mu.Lock()
	if l.released || l.givenUp || (!l.ended && time.Now().Before(l.until)) {
		l.mu.Unlock()
		return
	}
	l.givenUp = true
	l.endLocked()
	pass := l.takePass()
	l.mu.Unlock()
	pass()
	l.abandon(ttl)
}

// heldUntil returns the lock's validity end, or ErrNotHeld if the lock was
// released or its validity ended.
func (l *Lock) heldUntil() (time.Time, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return time.Time{}, fmt.Errorf("%w: %q was released", ErrNotHeld, l.key)
	}
	if !time.Now().Before(l.until) {
		return time.Time{}, fmt.Errorf("%w: validity of %q ended", ErrNotHeld, l.key)
	}
	return l.until, nil
}

// Unlock releases the lock: it deletes the key on every node where it still
// holds this lock's token, in parallel and under per-node deadlines, and
// never touches a key that holds another token. It returns as soon as the
// outcome is known; deletes still in flight finish in the background.
//
// Hand-off: when the lock was obtained by Lock (or Do), another goroutine
// of the same Client is queued for the key, and no other Client is known to
// want it, Unlock instead replaces this lock's token with a fresh one for
// that waiter, in one round; the waiter's Lock returns that new lock, whose
// validity counts from the round's start like any acquisition's. The key is
// never free in between. If the round does not reach a majority, Unlock
// rolls the new token back, deletes this lock's token wherever the hand-off
// left it, and the waiter makes attempts of its own.
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
	if l == nil || l.c == nil {
		return fmt.Errorf("%w: no lock", ErrNotHeld)
	}
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	c := l.c
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return fmt.Errorf("%w: %q was already released", ErrNotHeld, l.key)
	}
	l.released = true
	givenUp := l.givenUp
	l.endLocked()
	until, ttl := l.until, l.ttl
	hasTurn := l.pass != nil
	pass := l.takePass()
	l.mu.Unlock()
	if givenUp {
		pass()
		return fmt.Errorf("%w: %q was found lost by Extend, which released it", ErrNotHeld, l.key)
	}
	if err := c.enter(); err != nil {
		pass()
		return err
	}
	defer c.bg.Done()
	var failed *handOffCalls // a hand-off that ran first and lost
	if hasTurn && c.mayHandOff(l.key, until) {
		if next := c.turns.claim(l.key); next != nil {
			ok, calls, err := l.handOff(ctx, next, until, ttl)
			if ok {
				return err
			}
			failed = calls
			// The waiter gets the turn alone, after the deletes.
			pass = func() { next.served <- nil }
		}
	}
	defer pass() // the next local waiter tries once the deletes are decided

	own := c.wk.listening(l.key)
	var heard atomic.Int64 // the most subscribers a release notice reached
	announce := c.announce(releasedNotice, l.key, l.token, 0)
	start := time.Now()
	r := c.fanOut(context.WithoutCancel(ctx), "unlock", l.key, start.Add(c.nodeTimeout(ttl)), l.refusedNodes(),
		func(ctx context.Context, n *node) (bool, error) {
			h := l.holds[n.index]
			err := h.await(ctx)
			if failed != nil && err == nil {
				if yes, err, settled := failed.outcome(ctx, n.index); settled {
					h.abandon() // nothing of ours left to release here
					return yes, err
				}
			}
			if !h.abandon() {
				// Refused, or the acquire call is still running and
				// will release the node itself when it returns.
				return false, refusalAsVote(err)
			}
			deleted, receivers, err := n.release(ctx, l.key, l.token, announce)
			maxInto(&heard, receivers)
			return deleted, err
		})
	if r.won() {
		c.wk.noteReleased(l.key, l.token)
	}
	if heard.Load() > own {
		c.wk.othersListen(l.key, true)
	}

	l.endBy(r.decided)
	if r.won() && r.decided.Before(until) {
		return nil
	}
	return r.error(ErrNotHeld)
}

// endBy moves the end of l's validity back to t if it is later: the lock
// was released (or handed over) at t.
func (l *Lock) endBy(t time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t.Before(l.until) {
		l.until = t
	}
}

// mayHandOff reports whether Unlock may pass the lock on key straight to
// the Client's next local waiter: only while no other Client is known to
// want the key, since they would never see it free.
func (c *Client) mayHandOff(key string, until time.Time) bool {
	return !c.cfg.noHandOff && time.Now().Before(until) && !c.wk.othersSeen(key)
}

// handOffCalls are a hand-off round's calls, one per node, for what comes
// after the round: each call's hold records whether our token may still be
// on its node (the script failed or did not answer), and replaced whether
// the script replaced our token there.
type handOffCalls struct {
	holds    []*hold
	replaced []bool    // written before the node's hold finishes
	budget   time.Time // Unlock's node deadline, counted from before the hand-off
}

// outcome tells Unlock, after a lost hand-off, what the hand-off did on
// node i: settled is true when it answered, and then yes (it replaced our
// token: nothing of ours is left there) or no (the key was free or
// another's). A call still running is waited for within ctx and Unlock's
// node deadline, counted from before the hand-off (so that hung masters
// cost one deadline, not two); if it does not answer by then, settled is
// true with ErrNodeTimeout, and the call releases our token itself if it
// fails. When it failed, settled is false: our token may be there, and
// Unlock releases it.
func (hc *handOffCalls) outcome(ctx context.Context, i int) (yes bool, err error, settled bool) {
	h := hc.holds[i]
	ctx, cancel := context.WithDeadline(ctx, hc.budget)
	defer cancel()
	switch err := h.await(ctx); {
	case errors.Is(err, ErrNodeRefused): // answered without error
		return hc.replaced[i], nil, true
	case err != nil:
		h.abandon()
		return false, ErrNodeTimeout, true
	}
	h.abandon()
	return false, nil, false
}

// handOff gives the lock, valid until until for ttl, to next, the Client's
// next local waiter, in one round instead of a release round and an acquisition round: on every node
// the hand-off script replaces our token with a fresh one for next's TTL
// (or takes the key if it is free), so the key is never free in between.
// It succeeds when a majority of nodes replaced our token, which both
// releases our lock and obtains the new one; the new lock's validity is
// computed as for any acquisition, from the round's start.
//
// When it succeeds it returns ok and Unlock's error, and releases our token
// on the nodes where the script failed (a master at maxmemory answers OOM),
// where it may be left. When the round failed, it rolls the new token back
// and returns the calls, from which Unlock's deletes learn what is left.
func (l *Lock) handOff(ctx context.Context, next *turnWaiter, until time.Time, ttl time.Duration) (bool, *handOffCalls, error) {
	c := l.c
	nl, err := c.newLock(l.key, next.ttl)
	if err != nil {
		return false, nil, nil
	}
	calls := &handOffCalls{
		holds:    newHolds(len(c.nodes)),
		replaced: make([]bool, len(c.nodes)),
		budget:   time.Now().Add(c.nodeTimeout(ttl)),
	}
	announce := c.announce(acquiredNotice, l.key, nl.token, 0)
	own := c.wk.listening(l.key)
	var heard atomic.Int64
	start := time.Now()
	r := c.fanOut(context.WithoutCancel(ctx), "hand-off", l.key, c.deadline(start, nl.ttl), nil,
		func(ctx context.Context, n *node) (bool, error) {
			// Our own SET first: a hand-off that overtook it would find
			// the key free and leave our late SET behind.
			_ = l.holds[n.index].await(ctx)
			state, receivers, err := n.handOff(ctx, l.key, l.token, nl.token, nl.ttl, announce)
			maxInto(&heard, receivers)
			if nl.holds[n.index].finish(err == nil && state != handOffRefused, err) {
				c.releaseNode(n, l.key, nl.token, nl.ttl)
			}
			calls.replaced[n.index] = err == nil && state == handOffReplaced
			if calls.holds[n.index].finish(false, err) {
				// Given up before it answered, and it failed: our
				// token may be there.
				c.releaseNode(n, l.key, l.token, ttl)
			}
			// Only a node that held our token votes yes: the lock
			// passes as a whole from a majority of ours, or not at all.
			return err == nil && state == handOffReplaced, err
		})
	if heard.Load() > own {
		c.wk.othersListen(l.key, false)
	}
	l.endBy(r.decided)
	if !nl.won(r) {
		nl.abandon(nl.ttl)
		return false, calls, nil
	}
	// Won: Unlock sends no deletes, so clean up here what the hand-off may
	// have left of our token — where its script failed, now or when it
	// answers, and where our own SET had not answered yet.
	for i, n := range c.nodes {
		if calls.holds[i].abandon() {
			c.releaseNode(n, l.key, l.token, ttl)
		}
		if h := l.holds[i]; !h.finished() && h.abandon() {
			c.releaseNode(n, l.key, l.token, ttl)
		}
	}
	nl.passTurnAtEnd(c.turns.passer(l.key))
	next.served <- nl
	c.handOffs.Add(1)
	if r.decided.Before(until) {
		return true, nil, nil
	}
	return true, nil, fmt.Errorf("%w: %q: handed to the next waiter after the validity ended", ErrNotHeld, l.key)
}

// maxInto raises a to v if v is larger.
func maxInto(a *atomic.Int64, v int64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return
		}
	}
}

// refusedNodes marks the nodes that refused the lock when it was taken:
// Extend and Unlock need not ask them, and count them as refusals.
func (l *Lock) refusedNodes() []error {
	skip := make([]error, len(l.holds))
	for i, h := range l.holds {
		if h.refused() {
			skip[i] = ErrNodeRefused
		}
	}
	return skip
}

// refusalAsVote turns ErrNodeRefused into a no vote (false, nil) for fanOut.
func refusalAsVote(err error) error {
	if errors.Is(err, ErrNodeRefused) {
		return nil
	}
	return err
}

// abandon gives up every node of a failed attempt and releases those that
// may hold our token; nodes still answering release themselves.
func (l *Lock) abandon(ttl time.Duration) {
	for i := range l.holds {
		if l.holds[i].abandon() {
			l.c.releaseNode(l.c.nodes[i], l.key, l.token, ttl)
		}
	}
}
