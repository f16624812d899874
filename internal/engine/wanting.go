// The waiter's side of a hand-off from another Client: announcing its
// want, taking the lock the notices hand it, confirming it, and
// withdrawing the want.

package engine

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/redlock-go/redlock/internal/core"
	"github.com/redlock-go/redlock/internal/master"
	"github.com/redlock-go/redlock/internal/script"
	"github.com/redlock-go/redlock/internal/wait"
)

// announce sends, or repeats every wantRefresh, the waiter's want of the
// key, when the Client may hand locks to other Clients' waiters and its
// subscription can hear the hand-off. A want that no node took is dropped.
func (lp *waitLoop) announce() {
	c := lp.c
	if lp.w == nil || c.cfg.test.noRemoteHandOff || c.noticesOff() || !lp.w.Subscribed() {
		return
	}
	if !lp.core.Announcing(time.Now(), c.wantRefresh()) {
		return
	}
	if err := c.enter(); err != nil {
		return // Close withdraws what is out
	}
	token := lp.core.Out.Token
	if token == "" {
		id, err := uuid.NewRandom()
		if err != nil {
			c.bg.Done()
			return
		}
		token = id.String()
		lp.handed = lp.w.Expect(token, lp.ttl)
	}
	// Stamped before it is sent: the validity of a hand-off to it counts
	// from its first announcement (I8, A1).
	lp.arm(lp.core.Announced(token, time.Now(), lp.heard()))
	// In the background: a hung master must not hold the waiter past its
	// ctx, nor keep it from a hand-off.
	go func(key, token string, ttl time.Duration) {
		defer c.bg.Done()
		c.publishWant(key, token, ttl, ttl)
		if c.isRetired(token) {
			// Served (or given up) while this copy was on its way: a
			// Client that missed the hand-off's notices would take it for
			// a live want, and hand the key to a token nobody waits for.
			// A withdrawal after it ends the want there too.
			c.publishWant(key, token, 0, ttl)
		}
		if f := c.cfg.test.announced; f != nil {
			f()
		}
	}(lp.key, token, lp.ttl)
}

// wantRefresh is how often the Client's waiters repeat their wants.
func (c *Client) wantRefresh() time.Duration {
	if d := c.cfg.test.wantRefresh; d > 0 {
		return d
	}
	return wait.WantRefresh
}

// publishWant publishes a waiter's want of key for token and ttl (0:
// withdrawn) on one node, the next in turn that takes it within the node
// deadline of a lock of lockTTL; false when none did. The caller holds a
// registration in c.bg.
func (c *Client) publishWant(key, token string, ttl, lockTTL time.Duration) bool {
	msg := script.NewNotice(script.WantedNotice, key, c.id, token, int(ttl.Milliseconds()))
	first := int(c.wantNode.Add(1))
	for i := range c.nodes {
		n := c.nodes[(first+i)%len(c.nodes)]
		if !n.refusesNotices() && c.publishOn(n, msg, c.nodeTimeout(lockTTL)) {
			return true
		}
	}
	return false
}

// publishOn publishes msg on n and reports whether n took it within
// timeout, which the Client enforces whatever the go-redis client's own
// timeouts are; a call still running then ends in the background. A master
// that refuses it for lack of channel rights (ACL) gets no notices for a
// while. The caller holds a registration in c.bg.
func (c *Client) publishOn(n *node, msg script.Notice, timeout time.Duration) bool {
	done := make(chan error, 1)
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		done <- n.conn.Publish(ctx, n.channelOf(msg.Key, msg.Channel), msg.Message)
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-done:
		if master.IsNoPerm(err) {
			n.refusedNoticeBy(err)
		}
		return err == nil
	case <-t.C:
		return false
	}
}

// takeHanded makes the lock a hand-off gave the waiter's want: valid from
// the want's first announcement, or, when less than half the TTL is left of
// that, confirmed by an extension round and valid from its start. nil when
// the confirmation did not hold: the waiter's token is released, and the
// waiter waits on.
//
// It holds Close off until the want is no longer expected. A Close that
// began first withdraws the want and releases its token on every node
// (outstanding), so the lock is not the caller's: the call returns
// ErrClosed: a Close between the hand-off's wake-up and unexpect must not
// release the token of a lock the call then returns
// (TestCloseDuringATakenHandOffReturnsNoLock).
func (lp *waitLoop) takeHanded() (*Lock, error) {
	c, a := lp.c, lp.core.Out
	if h := c.cfg.test.takingHandOff; h != nil {
		h()
	}
	if err := c.enter(); err != nil {
		return nil, lp.closedWhileWaiting()
	}
	defer c.bg.Done()
	l := c.handedLock(lp.key, a.Token, lp.ttl, true)
	c.retire(lp.key, a.Token, lp.ttl, l) // before unexpect: no notice falls between
	c.heardHandOff(a.Token, lp.w.Unexpect(a.Token))
	lp.over()
	lp.served(a.Token)
	if until, confirm := core.Handed(a.First, time.Now(), lp.ttl, c.cfg.driftFactor); !confirm {
		c.narrowHanded(a.Token)
		l.startValidity(until)
		c.cfg.test.handedLocks.Add(1)
		return l, nil
	}
	won, err := lp.confirm(l)
	if won {
		return l, nil
	}
	// Given up: a late hand-off is released, and so is the token by a
	// Close that began meanwhile (lateTickets), once this returns.
	c.retire(lp.key, a.Token, lp.ttl, nil)
	if err != nil {
		return nil, err
	}
	l.abandon(lp.ttl)
	return nil, nil
}

// handedLock is a lock that a hand-off may have given token, before its
// validity starts: our token may be on every node, so Extend and Unlock ask
// them all. widen: the lock came from another Client's hand-off, which
// leaves a master free where the giver's key was not (a quorum-first
// lock's unasked masters, or one that lost it): Extend asks every master
// to take the key where it is missing, as the giver's own Extend would
// have (quorumfirst.go).
func (c *Client) handedLock(key, token string, ttl time.Duration, widen bool) *Lock {
	l := &Lock{c: c, lockID: lockID{key: key, token: token}, life: life{ttl: ttl, shortest: ttl}, holds: newHolds(len(c.nodes)), acquired: acquired{widens: widen}}
	for _, h := range l.holds {
		h.finish(true, nil)
		if widen {
			h.mayRetake()
		}
	}
	return l
}

// confirm asks every node whether l's token holds the key, lengthening it
// to the TTL where it does (an extension round, which sets nothing where it
// does not): won when a majority does, and l is then valid from the round's
// start.
func (lp *waitLoop) confirm(l *Lock) (won bool, err error) {
	c := lp.c
	if h := c.cfg.test.confirming; h != nil {
		h()
	}
	if err := c.enter(); err != nil {
		return false, lp.closedWhileWaiting()
	}
	defer c.bg.Done()
	start := time.Now()
	args := newRoundArgs(lp.key, l.token, lp.ttl, script.Notice{}, c.guard(lp.ttl) > 0)
	r := c.fanOut(lp.ctx, "confirm", lp.key, c.deadline(start, lp.ttl), nil, lp.ttl, func(ctx context.Context, n *node) (ballot, error) {
		return n.extend(ctx, args, 0)
	})
	if !l.won(r) {
		return false, nil
	}
	c.cfg.test.handedLocks.Add(1)
	return true, nil
}

// probe, when the backoff timer fires while the waiter's want is out, asks
// the nodes whether a hand-off gave the key to the want's token with
// notices this Client did not hear (its subscription was down, or not yet
// up on a node): the lock, or nil. It releases nothing: a hand-off may be
// on its way still.
//
// Like takeHanded, it holds Close off until the want is no longer
// expected: a Close that began first releases the want's token, and one
// that begins later waits, and leaves the lock to the caller.
func (lp *waitLoop) probe() (*Lock, error) {
	a, c := lp.core.Out, lp.c
	if a.First.IsZero() {
		return nil, nil
	}
	if err := c.enter(); err != nil {
		return nil, lp.closedWhileWaiting()
	}
	defer c.bg.Done()
	l := c.handedLock(lp.key, a.Token, lp.ttl, true)
	if won, err := lp.confirm(l); !won || err != nil {
		return nil, err // the want is still out: the call withdraws it, or Close does
	}
	if h := c.cfg.test.takingHandOff; h != nil {
		h()
	}
	c.retire(lp.key, a.Token, lp.ttl, l)
	c.heardHandOff(a.Token, lp.w.Unexpect(a.Token))
	lp.over()
	lp.served(a.Token)
	return l, nil
}

// over ends the want: served, or withdrawn.
func (lp *waitLoop) over() core.Announcement {
	lp.handed = nil
	return lp.core.Over()
}

// served, once a hand-off gave the waiter's want of token the key, tells
// the other Clients' holders that the want is over ("wanted … 0", as a
// withdrawal), in the background. They heard nothing of the hand-off, which
// only this Client hears (handedChannel), and would hand the key to the
// want again while they keep it (wantFresh). The key's watch stays that
// long, so that a hand-off by a holder that missed the withdrawal is heard,
// and released (lateHandOff): it costs a turn, never a lock. The caller
// holds a registration in c.bg.
func (lp *waitLoop) served(token string) {
	c := lp.c
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		c.publishWant(lp.key, token, 0, lp.ttl)
	}()
	if h := c.wk.Existing(lp.key); h != nil {
		time.AfterFunc(wait.WantFresh, h.Close)
	}
}

// withdraw, when the waiter's call ends without the lock its want asked
// for, tells the holders to forget the want, and releases its token where a
// hand-off may have put it, in the background.
func (lp *waitLoop) withdraw() {
	a := lp.over()
	if a.Token == "" {
		return
	}
	c := lp.c
	if err := c.enter(); err != nil {
		return // Close withdraws what is still expected
	}
	c.retire(lp.key, a.Token, lp.ttl, nil) // before unexpect: no notice falls between
	c.withdraw(lp.key, a.Token, lp.ttl, lp.w.Unexpect(a.Token) != nil)
	c.bg.Done()
	// Keep hearing the key a while, so that a hand-off already on its way
	// to the token is heard, and released (lateHandOff).
	if h := c.wk.Existing(lp.key); h != nil {
		time.AfterFunc(wait.WantFresh, h.Close)
	}
}

// withdraw tells other Clients' holders to forget the want of key for
// token, and, when a node was heard handing the key to it, releases the
// token on every node; in the background. The caller holds a registration
// in c.bg, or is Close.
func (c *Client) withdraw(key, token string, ttl time.Duration, heard bool) {
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		c.publishWant(key, token, 0, ttl)
		if heard {
			for _, n := range c.nodes {
				c.releaseNode(n, key, token, ttl)
			}
		}
	}()
}

// withdrawAll is Close's withdraw of the wants still out: it tells the
// holders, waits out a hand-off already on its way to them (the node
// deadline: Close no longer hears the notices that would tell), and then
// releases their tokens on every node. The caller is Close.
//
// It releases the tokens of late too, the wants retired lately
// (lateTickets), withdrawn already, each on one node (withdraw, served),
// after it withdrew them again on every node (withdrawEverywhere): a Client
// that missed that one (its subscription there dropped meanwhile) keeps the
// want for wantFresh, and would hand the key to it, where nobody would
// release it from now on: the key taken for its TTL.
func (c *Client) withdrawAll(out, late []wait.Ticket) {
	if len(out) == 0 && len(late) == 0 {
		return
	}
	for _, t := range out {
		c.withdraw(t.Key, t.Token, t.TTL, false)
	}
	c.withdrawEverywhere(late)
	time.Sleep(max(c.cfg.nodeTimeout, DefaultMaxNodeTimeout))
	if h := c.cfg.test.closeReleasing; h != nil {
		h()
	}
	for _, t := range append(out, late...) {
		for _, n := range c.nodes {
			c.releaseNode(n, t.Key, t.Token, t.TTL)
		}
	}
}

// withdrawEverywhere publishes the withdrawal of each of tickets on every
// node, as one pipeline per node, all at once, and returns once every node
// took them, or after the node deadline of the longest TTL asked for (a
// call still running then ends in the background). The caller is Close,
// which releases the tickets' tokens only after: a release before a
// withdrawal lands may come before a hand-off to the token by a Client
// that has not heard it yet, and the key would be taken for its TTL. All
// at once, not one round trip per ticket: Close may withdraw hundreds.
func (c *Client) withdrawEverywhere(tickets []wait.Ticket) {
	if len(tickets) == 0 {
		return
	}
	var longest time.Duration
	channels, messages := make([]string, len(tickets)), make([]string, len(tickets))
	for i, t := range tickets {
		longest = max(longest, t.TTL)
		msg := script.NewNotice(script.WantedNotice, t.Key, c.id, t.Token, 0)
		channels[i], messages[i] = msg.Channel, msg.Message
	}
	timeout := c.nodeTimeout(longest)
	done := make(chan struct{}, len(c.nodes))
	sent := 0
	for _, n := range c.nodes {
		if n.refusesNotices() {
			continue
		}
		sent++
		c.bg.Add(1)
		go func() {
			defer c.bg.Done()
			chs := channels
			if n.isCluster() {
				chs = make([]string, len(tickets))
				for i, t := range tickets {
					chs[i] = n.channelOf(t.Key, channels[i])
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			_ = n.conn.PublishAll(ctx, chs, messages)
			done <- struct{}{}
		}()
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	for range sent {
		select {
		case <-done:
		case <-t.C:
			return
		}
	}
}
