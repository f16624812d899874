// Unlock: releasing a held lock on every master, or handing it to the next
// waiter, the Client's own or another Client's (handoff.go).

package engine

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redlock-go/redlock/driver"
	"github.com/redlock-go/redlock/internal/core"
	"github.com/redlock-go/redlock/internal/master"
	"github.com/redlock-go/redlock/internal/script"
)

// Unlock releases the lock: it deletes the key on every node where it still
// holds this lock's token, in parallel and under per-node deadlines, and
// never touches a key that holds another token. It returns as soon as the
// outcome is known; deletes still in flight finish in the background.
//
// Hand-off: while a single-key lock is valid and notices are on (no
// WithoutNotices, no master refusing them), Unlock gives the key to the
// next waiter in one round instead, and the key is never free in between.
// The waiters in line are this Client's own Lock (or Do) calls queued for
// the key, in the order they queued (only behind a lock obtained by Lock
// or Do, which holds the Client's turn for the key), and other Clients'
// waiters that announced themselves, each placed by when this Client first
// heard it. The one that asked first gets the key: another Client's waiter
// heard before this Client's next waiter queued comes first; it gets the
// token it announced, and learns from the masters' notices that it holds
// the key, while this Client's waiters keep their order and ask the new
// holder for the key in turn. Otherwise this Client's next waiter gets a
// fresh token, and its Lock returns that new lock, whose validity counts
// from the round's start like any acquisition's; but only while every
// other Client heard to want the key lately has announced itself: when
// one has not (it only waits for a release, and would starve), Unlock
// releases the key and the waiter makes an attempt like the others. If the
// round does not reach a majority, Unlock rolls this Client's waiter's new
// token back (another Client's waiter releases its own), deletes this
// lock's token wherever the hand-off left it, and the waiter makes
// attempts of its own.
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
	o := l.c.cfg.obs
	if o == nil {
		_, err := l.unlock(ctx)
		return err
	}
	ctx = l.c.start(ctx, "unlock", l.key)
	to, err := l.unlock(ctx)
	if o.Release != nil {
		o.Release(ReleaseEvent{
			Ctx: ctx, Key: l.key, Held: time.Since(l.obtained),
			HandedOff: to != (recipient{}), Remote: to != (recipient{}) && to.local == nil, Err: err,
		})
	}
	return err
}

// unlock is Unlock; handedTo is the waiter the lock went to, if it did.
func (l *Lock) unlock(ctx context.Context) (handedTo recipient, err error) {
	u, err := l.markReleased()
	if err != nil {
		return recipient{}, err
	}
	defer close(u.decided) // after the hand-off's and the deletes' rounds
	if h := l.c.cfg.test.unlocking; h != nil {
		h()
	}
	// Before the hand-off or the deletes: an Extend running now must not
	// take the key on a master the acquisition never asked once they have
	// passed it (quorumfirst.go).
	l.giveUpReserves()
	c := l.c
	if err := c.enter(); err != nil {
		u.pass()
		return recipient{}, err
	}
	defer c.bg.Done()
	defer c.sweepUnheard(l.key, l.token) // a lock a hand-off gave: once decided
	var lost *handOffCalls               // what a hand-off that ran first and lost left
	if to := l.recipient(u); to != (recipient{}) {
		ho := l.handOff(ctx, to, u.ttl)
		if ho.handed {
			if to.local == nil {
				u.pass() // the lock went to another Client: the turn stays here
			}
			if core.Released(true, ho.decided, u.until) {
				return to, nil
			}
			return to, fmt.Errorf("%w: %q: handed to the next waiter after the validity ended", ErrNotHeld, l.key)
		}
		lost = ho.lost
		if to.local != nil {
			u.pass = func() { to.local.Serve(nil) } // the turn alone, after the deletes
		}
	}
	defer u.pass() // the next local waiter tries once the deletes are decided
	r := l.release(ctx, u.ttl, lost)
	l.endBy(r.decided)
	if core.Released(r.won(), r.decided, u.until) {
		return recipient{}, nil
	}
	return recipient{}, r.error(ErrNotHeld)
}

// unlocking is what Unlock takes from the lock as it marks it released.
type unlocking struct {
	until   time.Time     // the validity's end
	ttl     time.Duration // of the last acquisition or extension
	hasTurn bool          // the lock holds the Client's turn for its key
	pass    func()        // passes that turn on; a no-op without one
	decided chan struct{} // Lock.unlocked: closed once Unlock's rounds are decided
}

// markReleased marks the lock released and ends it, once. It returns
// ErrNotHeld when Unlock ran already, or Extend gave the lock up and
// released its keys itself.
func (l *Lock) markReleased() (unlocking, error) {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return unlocking{}, fmt.Errorf("%w: %q was already released", ErrNotHeld, l.key)
	}
	l.released = true
	givenUp := l.givenUp
	var u unlocking
	if !givenUp {
		l.unlocked = make(chan struct{})
		u.decided = l.unlocked
	}
	l.endLocked()
	u.until, u.ttl, u.hasTurn = l.until, l.ttl, l.pass != nil
	u.pass = l.takePass() // after reading l.pass

	l.mu.Unlock()
	if givenUp {
		u.pass()
		return unlocking{}, fmt.Errorf("%w: %q was found lost by Extend, which released it", ErrNotHeld, l.key)
	}
	return u, nil
}

// release is Unlock's round: on every node, the release script deletes the
// key where it holds our token, and announces it (a quiet lock only where
// the key is marked as wanted: Lock.quiet). After a lost hand-off
// (lost not nil), a node where the hand-off replaced our token counts as
// released without a call. The deletes are sent even if ctx is cancelled.
func (l *Lock) release(ctx context.Context, ttl time.Duration, lost *handOffCalls) *round {
	c := l.c
	own := c.wk.Listening(l.key)
	rr := &releaseRound{l: l, lost: lost, keep: c.keep(ttl), args: l.args(0, c.announce(script.ReleasedNotice, l.key, l.token, 0), false)}
	if l.quiet && own == 0 {
		rr.args.quiet = "1" // only a waiter that marked the key listens
	}
	deadline := nodeDeadline(time.Now().Add(c.nodeTimeout(ttl)))
	unheard, hedge := l.unlockReserves(ttl)
	r := c.fanOutQuorumFirst(context.WithoutCancel(ctx), "unlock", l.key, deadline, l.refusedNodes(), 0, rr, unheard, hedge)
	if r.won() && r.unasked == unheard {
		c.noteRound(r.elapsed()) // decided without its reserves: the usual time (unlockReserves)
	}
	if l.keys != nil {
		if r.won() {
			for _, k := range l.keys {
				c.wk.NoteReleased(k, l.token)
			}
		}
		return r // its notices reach other Clients' waiters; nobody hands it a turn
	}
	if r.won() {
		c.wk.NoteReleased(l.key, l.token)
	}
	if rr.heard.Load() > own {
		c.wk.OthersListen(l.key, true)
	}
	return r
}

// A releaseRound is release's call to each node (an asyncOp).
type releaseRound struct {
	l     *Lock
	lost  *handOffCalls
	keep  master.LateSend // the deletes go out past their node deadline (Client.keep)
	args  *roundArgs
	heard atomic.Int64 // the most subscribers a release notice reached
}

func (rr *releaseRound) call(ctx context.Context, n *node) (ballot, error) {
	deleted, receivers, err := rr.l.releaseOn(ctx, n, rr.lost, rr.keep, rr.args)
	maxInto(&rr.heard, receivers)
	return ballot{yes: deleted}, err
}

// start is releaseOn without waiting: only where our acquire call has
// answered (a release never overtakes its own SET) and no hand-off ran;
// otherwise call waits for them on a worker.
func (rr *releaseRound) start(ctx context.Context, t *nodeTask) bool {
	h := rr.l.holds[t.n.index]
	if rr.lost != nil || !h.finished() {
		return false
	}
	err := h.await(ctx) // answered: does not wait
	if !h.abandon() {
		t.vote(ballot{}, refusalAsVote(err))
		return true
	}
	t.n.pipe.Start(ctx, nil, rr.keep, t.n.releaseCmd(rr.args), t)
	return true
}

func (rr *releaseRound) reply(t *nodeTask, cmd driver.Reply) (ballot, error) {
	deleted, receivers, err := t.n.releaseReply(cmd)
	maxInto(&rr.heard, receivers)
	return ballot{yes: deleted}, err
}

// releaseOn is release's call to node n: whether the node no longer holds
// our token because of this Unlock, and how many subscribers heard it.
func (l *Lock) releaseOn(ctx context.Context, n *node, lost *handOffCalls, keep master.LateSend, args *roundArgs) (deleted bool, receivers int64, err error) {
	h := l.holds[n.index]
	err = h.await(ctx)
	if lost != nil && err == nil {
		if yes, err, settled := lost.outcome(ctx, n.index); settled {
			h.abandon() // nothing of ours left to release here
			return yes, 0, err
		}
	}
	if !h.abandon() {
		// Refused, or the acquire call is still running and will
		// release the node itself when it returns.
		return false, 0, refusalAsVote(err)
	}
	return n.release(ctx, keep, args)
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
