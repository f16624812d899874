// Client and its entry points: New, TryLock, Lock, the multi-key locks,
// Resume, Do, Inspect, Close. Each forwards to internal/engine, which keeps
// the contracts stated here.

package redlock

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/driver"
	"github.com/redlock-go/redlock/driver/goredis"
	"github.com/redlock-go/redlock/internal/engine"
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
	c *engine.Client // nil: not made by New (every call returns ErrInvalidArgument)
}

// e is the engine's Client: nil for a nil *Client; for a Client not made
// by New, a zero one, which refuses every call and prints as one.
func (c *Client) e() *engine.Client {
	if c == nil {
		return nil
	}
	if c.c == nil {
		return new(engine.Client)
	}
	return c.c
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
//
// With the restart guard on (the default; WithRestartGuard), the same
// questions check that the Client's credentials let the guard read and
// write each master's memory marker and read its clock: a plain master's
// "redlock:memory", on every shard of a *redis.Ring. A master that refuses
// (an ACL user whose key pattern covers only the lock keys) makes New
// return an error matching ErrGuardRights that names the master, the right
// and the remedies. The check creates the marker where it is missing, as
// the first vote would. A master that cannot answer in time, and a Redis
// Cluster (whose markers are one per hash tag), are not checked here: their
// votes fail, with the server's NOPERM error, rather than count unguarded.
//
// The same INFO tells whether a master may evict keys (maxmemory set, and
// a maxmemory-policy other than noeviction): New then returns an error
// matching ErrEvictionPolicy that names the master and its policy, unless
// WithEvictingMasters accepts the risk. An evicted lock key is a lost vote
// that nothing can see. Only the masters New can see are checked: those
// listed above; a client of another type (a wrapper around a
// *redis.ClusterClient, say) is asked as one server, and INFO reaches
// whichever master it sends it to.
func New(nodes []redis.UniversalClient, opts ...Option) (*Client, error) {
	return NewFromDrivers(goredis.Wrap(nodes), opts...)
}

// NewFromDrivers returns a Client over nodes reached through any Redis
// client library's adapter of package driver (drivers/rueidis,
// drivers/redigo, or one of your own that passes drivertest). New
// is NewFromDrivers over go-redis's adapter (driver/goredis), and the
// contract is New's: a nil node (or a nil pointer of an adapter's type), an
// empty nodes or the same server twice return an error matching
// ErrInvalidArgument; ErrGuardRights and ErrEvictionPolicy as there.
//
// What New can tell about the servers behind each node comes from its
// driver.Topology: two nodes that share an address, or one comparable
// driver.Conn given twice, are refused without the network; every server
// the Topology names (Servers), or the node itself, is asked for its INFO
// run_id. A node whose Topology names no address goes by "node[i]" in
// errors and logs.
func NewFromDrivers(nodes []driver.Conn, opts ...Option) (*Client, error) {
	e, err := engine.NewFromDrivers(nodes, opts...)
	if err != nil {
		return nil, err
	}
	return &Client{c: e}, nil
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
	return c.e().Close()
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
	l, err := c.e().TryLock(ctx, key, ttl)
	return wrap(l), err
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
	l, err := c.e().Lock(ctx, key, ttl)
	return wrap(l), err
}

// TryLockMulti makes one attempt to take every key of keys for ttl, as one
// lock: the *Lock it returns holds all of them, or it returns none. On each
// master one script takes every key or none (a master where another token
// holds one of the keys votes no and sets nothing), and the usual Redlock
// rules apply to the set: a majority, validity = ttl − elapsed − drift, and
// release everywhere on failure. Extend, Unlock, Done and Until work on
// all the keys at once; Unlock announces the release on every key, so
// waiters on any of them try again. Fence draws one fence for all the
// keys: above every earlier holder's of any of them, and below every later
// holder's (see Lock.Fence). DoMulti is Do for a set of keys. A multi-key
// lock is never handed to a waiter by Unlock (see Lock.Unlock): it is
// released, and waiters compete.
//
// keys must be non-empty, each non-empty, and distinct: otherwise the
// error matches ErrInvalidArgument. Where a vote is a Redis Cluster, the
// keys must share a hash slot, since a script may only touch one; give
// them a common hash tag ("{order:7}:stock", "{order:7}:invoice").
// Otherwise TryLockMulti fails as TryLock does.
func (c *Client) TryLockMulti(ctx context.Context, keys []string, ttl time.Duration) (*Lock, error) {
	l, err := c.e().TryLockMulti(ctx, keys, ttl)
	return wrap(l), err
}

// LockMulti takes every key of keys for ttl, as TryLockMulti does, waiting
// until it has them all or ctx ends. After a failed attempt it waits for a
// release of any of the keys (a notice) or a jittered, growing delay,
// whichever comes first. Lock calls on overlapping key sets cannot
// deadlock: no call ever holds some keys while it waits for others.
// Errors are Lock's: ErrNotObtained with the last attempt's *QuorumError
// and ctx's error when ctx ends, ErrClosed after Close, ErrInvalidArgument
// for bad input (see TryLockMulti).
func (c *Client) LockMulti(ctx context.Context, keys []string, ttl time.Duration) (*Lock, error) {
	l, err := c.e().LockMulti(ctx, keys, ttl)
	return wrap(l), err
}

// Resume returns a Lock on key for token, the Token() of a lock that
// another Client (often another process) obtained, so that this one can
// go on with it: extend it, fence it, unlock it, or hand it on. It makes
// one extension round: every master that holds token for key keeps it at
// least ttl from now (no key is ever created or shortened), and the Lock
// is returned only when a majority did so in time. Its validity counts
// from that round's start, like an acquisition's: Until is at most the
// round's start + ttl − drift.
//
// A token is a capability: whoever has it can extend and release the lock,
// so pass it only to whom the lock is meant for, over a channel you
// trust. Tokens are 128-bit random values (UUID version 4), not
// guessable. After passing the token on, the first holder should stop
// using its Lock: both are the same lock on the masters, and either's
// Unlock releases it for both. A fence drawn by the resumed Lock
// (Lock.Fence) is higher than the first holder's, so a resource that
// checks fences refuses the first holder's writes from then on.
//
// A lock that a hand-off from another Client gave to a waiter (Lock's
// wait, wants.go), passed on here and unlocked, can be handed the key
// again by a holder that missed the want's withdrawal: its token then
// stays until its TTL on the masters that holder held, and the key is
// nobody's meanwhile. The Client the lock came from cannot release it: the
// token may be held here still. This costs a turn, never a second holder.
//
// Resume returns an error matching ErrNotHeld, with a *QuorumError, when
// no majority holds token for key in time. When a majority said the token
// is gone (the lock was released, expired or taken over), no lock holds it
// any more, and Resume releases it wherever it remains, since its round
// may have lengthened it there. When too few masters answered (timeouts,
// errors, ctx), the lock may still be its first holder's, and Resume
// releases nothing; masters that answered have kept the key at least ttl,
// as an Extend cut short does. If ctx ended, the error also matches
// ctx.Err(). A token that is
// not a Lock's Token(), an empty key or a TTL too short return an error
// matching ErrInvalidArgument; after Close, ErrClosed.
func (c *Client) Resume(ctx context.Context, key, token string, ttl time.Duration) (*Lock, error) {
	l, err := c.e().Resume(ctx, key, token, ttl)
	return wrap(l), err
}

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
	return c.e().Do(ctx, key, ttl, withLock(fn))
}

// DoMulti is Do holding every key of keys, as one lock taken by LockMulti
// (see TryLockMulti for the rules and the bad input). fn finds the lock
// with LockFromContext, for its fence (Lock.Fence: one fence above every
// earlier fence of each key).
func (c *Client) DoMulti(ctx context.Context, keys []string, ttl time.Duration, fn func(ctx context.Context) error) error {
	return c.e().DoMulti(ctx, keys, ttl, withLock(fn))
}

// An Inspection is what the masters said of a key during one round of
// Client.Inspect. It is a snapshot: by the time it is read, the key may
// have expired, been released or been taken. Use it to watch and to
// debug, never to decide whether to act on what a lock protects; only a
// Lock you hold, within its Until, says that.
//
// An Inspection prints (fmt, with any verb; log/slog, with any handler) as
// its exported fields, never as the values the masters hold: HoldingFor is
// the only way to compare them with a token.
//
// Its fields:
//
//	Key     string
//	Masters int // how many masters the Client has
//	Quorum  int // a majority of them
//	// Answered is how many masters answered; the others are in Failed.
//	Answered int
//	// Holding is how many of those that answered hold the key, with any
//	// token (or a value that is no token: a key of another kind blocks a
//	// lock as well).
//	Holding int
//	// MinTTL and MaxTTL are the smallest and largest TTL left on the
//	// holding masters, as each reported it; 0 when none holds the key. A
//	// key without an expiry (set by something other than this library)
//	// counts as -1.
//	MinTTL, MaxTTL time.Duration
//	// Failed lists the masters that did not answer before their deadline,
//	// or answered with an error.
//	Failed []*NodeError
type Inspection = engine.Inspection

// Inspect asks every master, in parallel and under the per-node deadline
// (WithNodeTimeout, or DefaultMaxNodeTimeout), what key holds: how many
// hold it, the TTLs left there, and, with HoldingFor, how many hold it for
// a given token. It changes nothing on the masters, and waits for every master
// until its deadline (not only for a majority), so that the answer is as
// complete as the masters allow.
//
// The Inspection is a snapshot; see its documentation. Inspect returns it
// with a nil error when a majority of the masters answered; otherwise it
// returns it all the same, with an error matching ErrNotObtained and
// carrying a *QuorumError, since fewer than a majority tell little. Bad
// input returns an error matching ErrInvalidArgument, and after Close an
// error matching ErrClosed.
func (c *Client) Inspect(ctx context.Context, key string) (Inspection, error) {
	return c.e().Inspect(ctx, key)
}

// Held asks the masters whether the lock is still held (an Inspect round
// per key): true when its validity has not ended and, for each of its keys,
// a majority of the masters answered that they hold its token. Like Inspect, it is a snapshot for
// watching and debugging: Until, Done and Extend are how a holder knows
// it may act. It returns false and the error when Inspect could not reach
// a majority; false and nil for a nil *Lock.
func (l *Lock) Held(ctx context.Context) (bool, error) {
	return l.e().Held(ctx)
}

// String describes the Client: its masters, its quorum and whether it is
// closed. It never includes a token: not those of its waiters, which a
// hand-off makes a lock's, nor those of the locks it gave.
func (c *Client) String() string {
	return c.e().String()
}

// Format prints the Client as String does, for every verb (%v, %+v, %#v,
// %s, %q, %x, ...): never its fields, so never a token.
func (c *Client) Format(f fmt.State, verb rune) {
	c.e().Format(f, verb)
}

// LogValue is the Client for log/slog: a group of its masters, quorum and
// whether it is closed; never a token.
func (c *Client) LogValue() slog.Value {
	return c.e().LogValue()
}
