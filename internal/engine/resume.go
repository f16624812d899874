// Resume: continuing, in this Client, a lock that another took, by its
// token.

package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/redlock-go/redlock/internal/script"
)

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
	if err := c.usable(); err != nil {
		return nil, err
	}
	return c.acquire(ctx, "resume", key, ttl, func(ctx context.Context, key string, ttl time.Duration) (*Lock, error) {
		return c.resume(ctx, key, token, ttl)
	})
}

func (c *Client) resume(ctx context.Context, key, token string, ttl time.Duration) (*Lock, error) {
	ttl, err := c.checkLock(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	if err := checkToken(token); err != nil {
		return nil, err
	}
	if err := c.enter(); err != nil {
		return nil, err
	}
	defer c.bg.Done()
	l := c.handedLock(key, token, ttl, false)
	start := time.Now()
	args := newRoundArgs(key, token, ttl, script.Notice{}, c.guard(ttl) > 0)
	r := c.fanOut(ctx, "resume", key, c.deadline(start, ttl), nil, ttl, func(ctx context.Context, n *node) (ballot, error) {
		// born 0: no repair. This Client never saw the key set, so it
		// cannot tell a master that lost it from one where it expired.
		b, err := n.extend(ctx, args, 0)
		if err == nil && b.yes {
			l.holds[n.index].born.Store(b.mem.born) // where a later Extend may repair it
		}
		return b, err
	})
	if !l.won(r) {
		if r.refused > len(c.nodes)-c.quorum {
			// A majority said the token is gone: no lock holds it any
			// more, and nobody would release it where this round
			// lengthened it, for ttl.
			l.abandon(ttl)
		}
		return nil, withCtx(ctx, r.error(ErrNotHeld))
	}
	return l, nil
}

// checkToken reports whether token can be a Lock's Token(): a UUID in its
// canonical form, as newLock makes them.
func checkToken(token string) error {
	id, err := uuid.Parse(token)
	if err != nil || id.String() != token {
		// Not quoting it: errors end up in logs and spans, and a token that
		// is nearly a lock's (a trailing newline, upper case) is a capability.
		return fmt.Errorf("%w: token is not a lock's Token() (a UUID in canonical form, 36 characters; got %d)", ErrInvalidArgument, len(token))
	}
	return nil
}
