// Options and defaults: what New can be told, checked when it is called.

package engine

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/redlock-go/redlock/internal/master"
	"github.com/redlock-go/redlock/internal/wait"
)

// Defaults for the options.
const (
	// DefaultMaxNodeTimeout caps the default per-node deadline, which is
	// otherwise a tenth of the TTL.
	DefaultMaxNodeTimeout = 250 * time.Millisecond
	// DefaultRetryMin and DefaultRetryMax bound Lock's wait between attempts.
	DefaultRetryMin = 10 * time.Millisecond
	DefaultRetryMax = 250 * time.Millisecond
	// DefaultRestartGuard is the least quarantine of a master that lost its
	// data (see WithRestartGuard).
	DefaultRestartGuard = time.Minute
	// DefaultBatchLimit is how many requests one pipeline to a master
	// carries at most (WithBatchLimit).
	DefaultBatchLimit = master.DefaultBatchLimit
)

// An Option configures a Client. Options are checked by New, which returns
// an error matching ErrInvalidArgument for a value out of range.
type Option func(*config) error

type config struct {
	nodeTimeout   time.Duration // 0: derived from the TTL
	driftFactor   float64
	retryMin      time.Duration
	retryMax      time.Duration
	noNotices     bool          // WithoutNotices
	guard         time.Duration // WithRestartGuard; 0: off
	batchLimit    int           // WithBatchLimit; 1: batching off
	quorumFirst   bool          // WithQuorumFirst
	strictGuard   bool          // WithStrictRestartGuard
	evicting      bool          // WithEvictingMasters
	obs           *Observer     // WithObserver and WithLogger, joined; nil: none
	logger        *slog.Logger  // WithLogger
	keyAttributes bool          // WithKeyAttributes

	test *testHooks // never nil
}

// defaultConfig is the configuration options start from.
func defaultConfig() config {
	return config{
		driftFactor: DefaultDriftFactor,
		retryMin:    DefaultRetryMin,
		retryMax:    DefaultRetryMax,
		guard:       DefaultRestartGuard,
		batchLimit:  DefaultBatchLimit,
		test:        new(testHooks),
	}
}

// linger is how long a key's subscription outlives its last waiter, and
// how long another Client heard on a key counts as present.
func (cfg *config) linger() time.Duration {
	if cfg.test.linger > 0 {
		return cfg.test.linger
	}
	return wait.SubscriptionLinger
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
		c.noNotices = true
		return nil
	}
}

// WithRestartGuard sets the least time a master that lost its data (a
// restart without persistence, FLUSHALL, a failover to an empty replica)
// stays in quarantine: its yes votes are not counted until its memory is
// older than the guard, since it may have forgotten a key another holder
// still counts on (Redlock spec, "delayed restarts"). The guard is also at
// least the TTL of the request and the longest TTL this Client has used or
// heard of from any master (each master records the longest TTL granted
// there since its memory began, and reports it with every vote), so that
// other Clients' longer TTLs are covered once this Client has heard from a
// master that granted them; set d to the longest TTL any Client uses to
// cover them from the first call. The default is DefaultRestartGuard. d = 0
// turns the guard off, and with it Extend's repair of a master that lost the
// key. d must not be negative.
func WithRestartGuard(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: restart guard %v is negative", ErrInvalidArgument, d)
		}
		c.guard = d
		return nil
	}
}

// WithEvictingMasters lets New accept masters whose maxmemory-policy may
// evict keys (any policy but noeviction, with maxmemory set). By default
// New refuses them with ErrEvictionPolicy: an evicted lock key is a lost
// vote that nothing can see (the restart guard's marker has no TTL, so a
// volatile-* policy never evicts it), and with one such master of a lock's
// majority a second holder can get in. Use it only where the masters'
// memory can never reach maxmemory.
func WithEvictingMasters() Option {
	return func(c *config) error {
		c.evicting = true
		return nil
	}
}

// WithStrictRestartGuard makes the restart guard count a young master's
// yes only once every master has reported its memory in the round, not all
// but n/2 − 1 of them. Redlock tolerates a minority of masters losing their
// data; the default rule sees any single loss, but two masters of a lock's
// majority losing their data at once, while the masters that kept theirs
// are slow or down, can let a second holder in before the first one's TTL
// is over. The strict guard keeps them out as long as one master that
// kept its data answers, at a price: while its masters are younger than
// the guard (a fresh deployment's first minute), a master down or hung
// stops every lock. Without the guard (WithRestartGuard(0)) the option
// does nothing.
func WithStrictRestartGuard() Option {
	return func(c *config) error {
		c.strictGuard = true
		return nil
	}
}

// WithBatchLimit sets how many requests one pipeline to a master carries at
// most. Requests to a master go out together, as one pipeline, while the
// previous batch to it is on its way; a request that finds the master idle
// goes out at once, alone. The default is DefaultBatchLimit. n = 1 turns
// batching off: every request is then its own command, on a connection of
// its own from the go-redis pool, as when diagnosing a driver or a proxy
// that mishandles pipelines. n must be at least 1.
//
// Batching changes no guarantee: each request keeps its own deadline, a
// request whose attempt was given up before it went out is not sent, late
// replies are released, requests to one master go out in the order they
// were made, and a hung master delays no other master's requests (see
// pipe.go for the details).
func WithBatchLimit(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: batch limit %d is less than 1", ErrInvalidArgument, n)
		}
		c.batchLimit = n
		return nil
	}
}

// backoff is the wait after the k-th failed attempt (from 0).
func (cfg *config) backoff(k int) time.Duration {
	hi := cfg.retryMax
	if k < 62 && cfg.retryMin <= cfg.retryMax>>(k+1) {
		hi = cfg.retryMin << (k + 1)
	}
	return cfg.retryMin + rand.N(hi-cfg.retryMin+1)
}

// WithQuorumFirst makes each attempt to take a lock ask a majority of the
// masters first, and the others only when those cannot decide it alone:
// one answers no or fails, the restart guard holds a vote back (as on
// masters younger than the guard), or they have not answered within three
// of the Client's usual rounds. The Redlock spec's rule is unchanged: the
// lock is held when a majority of all the masters holds its token, within
// the validity, counted from before the first request. Under load the
// masters then run about half the scripts per lock and release (see
// quorumfirst.go).
//
// A lock taken so is set on a bare majority until its first Extend that
// lengthens it, which asks the masters the attempt never asked to take the
// key too (Do's renewals included). Until then a master of the lock that fails costs it
// more: Fence needs every one of them, and so do Unlock and a hand-off to
// the next waiter to report success (when one does not answer, Unlock
// returns an error matching ErrNotHeld, and the key there expires with its
// TTL). A widening that failed is tried again by the next Extend; a lock
// such a holder hands to another Client's waiter widens at its first
// Extend too. Without the restart guard (WithRestartGuard(0)) the option asks
// every master: a master that restarts empty would take a bare majority's
// lock down with it. Without the option, every attempt asks every master
// at once.
func WithQuorumFirst() Option {
	return func(c *config) error {
		c.quorumFirst = true
		return nil
	}
}
