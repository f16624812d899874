// One acquisition round (Redlock spec, steps 1–4) and the clean-up after it.

package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/redlock-go/redlock/driver"

	"github.com/redlock-go/redlock/internal/core"
	"github.com/redlock-go/redlock/internal/master"
	"github.com/redlock-go/redlock/internal/script"
	"github.com/redlock-go/redlock/internal/workers"
)

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

	// Announced only where a waiter of this Client watches the key (so
	// other Clients' waiters may too): a lock nobody else wants costs no
	// PUBLISH on the masters. A waiter of another Client that tries the key
	// meanwhile finds it taken and marks it, and the release of a marked key
	// is announced (l.quiet).
	var announce script.Notice
	if c.wk.Listening(key) > 0 {
		announce = c.announce(script.AcquiredNotice, key, l.token, age)
	} else {
		l.quiet = true
	}
	start := time.Now()
	args := newRoundArgs(key, l.token, ttl, announce, c.guard(ttl) > 0)
	var hedge time.Duration
	reserve := c.reserves(key) // 0 without WithQuorumFirst
	if reserve != 0 {
		hedge = c.hedgeAfter(ttl)
	}
	r := c.fanOutQuorumFirst(ctx, "lock", key, c.deadline(start, ttl), nil, ttl, &acquireRound{l: l, ttl: ttl, args: args}, reserve, hedge)
	if r.unasked != 0 {
		l.widens = true
		for i, h := range l.holds {
			if r.unasked&(1<<i) != 0 {
				h.reserve() // never sent: Unlock skips it, Extend may ask it
			}
		}
	}
	if l.won(r) {
		if reserve != 0 && r.unasked == reserve {
			c.noteRound(r.elapsed())
		}
		return l, nil
	}
	// Spec step 4: release everywhere, including nodes that failed or timed
	// out, since their SET may have landed and only the reply been lost.
	l.abandon(ttl)
	return nil, r.error(ErrNotObtained)
}

// An acquireRound is attempt's call to each node (an asyncOp). The request
// is not sent once the lock gave the node up: when its worker starts late,
// or it queued, after the round was lost.
type acquireRound struct {
	l    *Lock
	ttl  time.Duration // the attempt's: l.ttl moves with Extend, under l.mu
	args *roundArgs
	take bool // Extend's, on nodes it asked (hold.ask): a later one may ask again
	// answered, when not nil, is told of each node's answer as it comes
	// (late ones too): LockMulti's refusalMarks.
	answered func(node int, a attemptAnswer)
}

func (a *acquireRound) call(ctx context.Context, n *node) (ballot, error) {
	b, err := n.acquire(ctx, a.l.holds[n.index], a.args, !a.take)
	return a.acquired(n, b, err)
}

func (a *acquireRound) start(ctx context.Context, t *nodeTask) bool {
	t.known = t.n.known.Load()
	var quick *[2][]any
	if !a.take {
		quick = t.n.quickCmds(a.args, t.known)
	}
	t.n.pipe.StartQuick(ctx, a.l.holds[t.n.index], master.LateSend{}, t.n.acquireCmd(a.args, t.known), quick, t)
	return true
}

func (a *acquireRound) reply(t *nodeTask, cmd driver.Reply) (ballot, error) {
	b, err, decided := t.n.acquireAnswer(cmd, t.known, a.args)
	if !decided {
		// The quick SET went out: the script's answer ends this call, sent
		// whatever the round decides meanwhile (quick.go's quickCmds).
		t.n.pipe.Start(t.ctx, nil, master.LateSend{}, t.n.acquireCmd(a.args, t.known), t)
		return ballot{}, errAskedAgain
	}
	return a.acquired(t.n, b, err)
}

// acquired records node n's answer in the lock's hold, and releases the
// node when the lock already gave it up.
func (a *acquireRound) acquired(n *node, b ballot, err error) (ballot, error) {
	l, h := a.l, a.l.holds[n.index]
	if errors.Is(err, master.ErrNotSent) {
		if h.finishUnsent(a.take) {
			l.releaseNode(n, a.ttl) // what an earlier call to take it left
		}
		if a.answered != nil {
			a.answered(n.index, noAnswer)
		}
		return ballot{}, errGivenUp
	}
	h.born.Store(b.mem.born)
	if err == nil && b.yes && !a.take {
		l.yeses.Add(1) // before the release below: it may be the one to announce
	}
	if h.finishCall(a.take, b.yes, err) {
		l.releaseNode(n, a.ttl)
	}
	if a.answered != nil {
		switch {
		case err != nil:
			a.answered(n.index, noAnswer)
		case b.yes:
			a.answered(n.index, answeredYes)
		default:
			a.answered(n.index, answeredNo)
		}
	}
	return b, err
}

// newLock makes the Lock an acquisition round fills in. A fresh token per
// round: a late release from an earlier, failed round can then never remove
// a key this one counted.
func (c *Client) newLock(key string, ttl time.Duration) (*Lock, error) {
	id, err := uuid.NewRandom()
	if err != nil {
		return nil, fmt.Errorf("redlock: token: %w", err)
	}
	return &Lock{c: c, lockID: lockID{key: key, token: id.String()}, life: life{ttl: ttl, shortest: ttl}, holds: newHolds(len(c.nodes))}, nil
}

// won reports whether acquisition round r obtained l with validity left,
// and if so starts its validity.
func (l *Lock) won(r *round) bool {
	until, ok := core.Lease(r.won(), r.start, r.decided, l.ttl, l.c.cfg.driftFactor)
	if !ok {
		return false
	}
	l.startValidity(until)
	return true
}

// startValidity starts l's validity, which ends at until: core.Lease's, or
// validUntil counted from before every request that set its keys was sent.
func (l *Lock) startValidity(until time.Time) {
	if l.c.cfg.obs != nil {
		l.obtained = time.Now() // only the observers' hold time needs it
	}
	l.until = until
	l.done = make(chan struct{})
	l.mu.Lock() // expire may run before the assignment is done
	l.timer = time.AfterFunc(time.Until(l.until), l.expire)
	l.mu.Unlock()
}

// releaseNode deletes key on n if it holds token, in the background, under
// the node deadline; it is clean-up whose result nobody waits for, and
// announces nothing.
func (c *Client) releaseNode(n *node, key, token string, ttl time.Duration) {
	c.releaseNodeWith(n, key, token, ttl, script.Notice{})
}

// releaseNodeWith is releaseNode announcing the release with announce.
func (c *Client) releaseNodeWith(n *node, key, token string, ttl time.Duration, announce script.Notice) {
	c.releaseNodeArgs(n, ttl, newRoundArgs(key, token, 0, announce, false))
}

// releaseNode is Client.releaseNode for l's key or keys: a failed attempt's
// clean-up, or a late yes to a lock given up already. It is silent, since
// announcing a split vote's clean-up would wake every waiter into another
// one; except once a majority of masters said yes to l's acquisition, in
// time or late (a round lost to its deadline or to the drift; or a lock
// won, whose late yeses are rare). Every master a waiter asked then
// refused it for our token, so the waiter takes the key for held, and
// waits at its longest backoff for a release: the release is announced
// where a refusal marked the key (quiet, as a quiet holder's:
// lua/release.lua; for a multi-key lock, on the channels of the marked
// keys: lua/release_multi.lua).
func (l *Lock) releaseNode(n *node, ttl time.Duration) {
	c := l.c
	var announce script.Notice
	if int(l.yeses.Load()) >= c.quorum {
		announce = c.announce(script.ReleasedNotice, l.key, l.token, 0)
	}
	args := l.args(0, announce, false)
	if announce.Channel != "" {
		args.quiet = "1"
	}
	c.releaseNodeArgs(n, ttl, args)
}

// releaseNodeArgs runs the release script with args on n in the
// background, under the node deadline of a lock of ttl.
//
// Through n's pipe, it is queued before this returns, and ahead of what is
// queued there: a clean-up deletes only its own token, which nothing
// queued sets again (the lock that held it gave the node up), and a
// waiter's next attempt, queued already behind a late reply or queued
// next, finds the key free of its last attempt's token. Queued after it,
// the next attempt could meet that token on a master, be refused, and
// sleep its whole backoff with the keys free: the clean-up announces
// nothing that would wake it.
func (c *Client) releaseNodeArgs(n *node, ttl time.Duration, args *roundArgs) {
	c.bg.Add(1)
	if n.pipe != nil {
		ctx, cancel := context.WithTimeout(context.Background(), c.nodeTimeout(ttl))
		n.pipe.StartFirst(ctx, c.keep(ttl), n.releaseCmd(args), &cleanUp{n: n, cancel: cancel, bg: &c.bg})
		return
	}
	c.workers.Run(workers.Func(func() {
		defer c.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), c.nodeTimeout(ttl))
		defer cancel()
		_, _, _ = n.release(ctx, c.keep(ttl), args)
	}))
}

// A cleanUp takes the reply of a release queued by releaseNodeArgs.
type cleanUp struct {
	n      *node
	cancel context.CancelFunc
	bg     *sync.WaitGroup // the Client's
}

func (u *cleanUp) Reply(cmd driver.Reply) {
	_, _, _ = u.n.releaseReply(cmd) // for what it tells of the node (notices refused)
	u.cancel()
	u.bg.Done()
}

// abandon gives up every node of a failed attempt and releases those that
// may hold our token; nodes still answering release themselves.
func (l *Lock) abandon(ttl time.Duration) {
	for i := range l.holds {
		if l.holds[i].abandon() {
			l.releaseNode(l.c.nodes[i], ttl)
		}
	}
}
