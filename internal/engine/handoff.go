// The hand-off: Unlock passing a lock straight to the next waiter in one
// round (the Client's own, or another Client's that asked: wants.go), and
// what a failed one leaves to Unlock.

package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/redlock-go/redlock/internal/core"
	"github.com/redlock-go/redlock/internal/master"
	"github.com/redlock-go/redlock/internal/script"
	"github.com/redlock-go/redlock/internal/wait"
)

// recipient picks who Unlock hands the lock to, claiming it: the waiter
// that asked first, of this Client (u.hasTurn: the lock holds the Client's
// turn for key, so its local waiters queue behind it) or of another that
// announced itself (wants.go); or nobody. Only as core.MayHandOff allows
// (I12), and a local waiter only as core.LocalFirst does (I13).
func (l *Lock) recipient(u unlocking) recipient {
	c := l.c
	if c.cfg.test.noHandOff || !core.MayHandOff(time.Now(), u.until, !c.noticesOff(), l.keys == nil) {
		return recipient{}
	}
	var since time.Time // when the next local waiter queued; zero: none
	if u.hasTurn {
		since, _ = c.turns.HeadSince(l.key)
	}
	if !c.cfg.test.noRemoteHandOff {
		if w := c.wk.ClaimWant(l.key, since); w != nil {
			return recipient{remote: w}
		}
	}
	if since.IsZero() {
		return recipient{}
	}
	// WantsKnown locks and scans the line: asked only once others were
	// seen, since LocalFirst(false, …) is true.
	seen := c.wk.OthersSeen(l.key)
	if core.LocalFirst(seen, seen && c.wk.WantsKnown(l.key)) {
		if next := c.turns.Claim(l.key); next != nil {
			return recipient{local: next}
		}
	}
	return recipient{}
}

// noticesOff reports whether this Client cannot hear other Clients' waiters
// (WithoutNotices, or a master refusing notices): it then never hands a lock
// over, since a waiter of another Client that only polls would never find
// the key free, and its next local waiter backs off before its first
// attempt, leaving the key free long enough for them.
func (c *Client) noticesOff() bool {
	if c.cfg.noNotices {
		return true
	}
	for _, n := range c.nodes {
		if n.refusesNotices() {
			return true
		}
	}
	return false
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

// A recipient is who a hand-off gives the lock to: the Client's next local
// waiter, or a waiter of another Client that asked for the key (wants.go).
// The zero recipient is nobody.
type recipient struct {
	local  *wait.Waiter[Lock]
	remote *wait.Want
}

func (to recipient) ttl() time.Duration {
	if to.remote != nil {
		return to.remote.TTL
	}
	return to.local.TTL
}

// handOff gives the lock to a recipient in one round instead of a release
// round and an acquisition round: on every node the hand-off script
// replaces our token with the recipient's for its TTL, so the key is never
// free in between. ttl is our lock's. The round is won when a majority of
// nodes replaced our token.
//
// A local waiter gets a fresh token (the script also takes the key where it
// is free), and a won round obtains its lock, whose validity is computed as
// for any acquisition, from the round's start: handOff serves it. A waiter
// of another Client gets the token it announced, and learns from the
// nodes' notices that it holds the key (wants.go): it counts them, not this
// round, so its token is never rolled back here, whatever the round's
// outcome; that is the waiter's to do.
//
// Won, it releases our token on the nodes where the script failed (a
// master at maxmemory answers OOM), where it may be left. Lost, it rolls a
// local waiter's new token back and returns the calls, from which Unlock's
// deletes learn what is left. Either way our lock ended when the round was
// decided.
func (l *Lock) handOff(ctx context.Context, to recipient, ttl time.Duration) handOffResult {
	c := l.c
	ho := l.newHandOffRound(to, ttl)
	if ho == nil {
		return handOffResult{}
	}
	var skip []error
	var unheard uint64
	var hedge time.Duration
	if ho.remote {
		skip = ho.remoteSkips()
		unheard, hedge = l.unlockReserves(ho.nttl)
	}
	own := c.wk.Listening(l.key)
	start := time.Now()
	r := c.fanOutQuorumFirst(context.WithoutCancel(ctx), "hand_off", l.key, c.deadline(start, ho.nttl), skip, ho.nttl, nodeCall(ho.on), unheard, hedge)
	if r.won() && r.unasked == unheard {
		c.noteRound(r.elapsed()) // decided without its reserves: the usual time (unlockReserves)
	}
	ho.settleUnasked(r)
	if ho.remote || ho.heard.Load() > own {
		c.wk.OthersListen(l.key, false)
	}
	l.endBy(r.decided)
	if ho.remote {
		return ho.endRemote(r, to.remote)
	}
	return ho.endLocal(r, to.local)
}

// newHandOffRound makes the hand-off of l to to: the new lock, with
// another Client's waiter's token (to.remote) or a new one of ours, and the
// notice that announces it. nil: no new lock could be made.
func (l *Lock) newHandOffRound(to recipient, ttl time.Duration) *handOffRound {
	c := l.c
	nttl := to.ttl()
	var nl *Lock
	var announce script.Notice
	if to.remote != nil {
		nl = &Lock{c: c, lockID: lockID{key: l.key, token: to.remote.Token}, life: life{ttl: nttl}, holds: newHolds(len(c.nodes))}
		announce = script.NewNotice(script.HandedNotice, l.key, to.remote.Client, to.remote.Token, 0)
		announce.Channel = script.HandOffChannel(l.key, to.remote.Client) // its Client alone hears it (of this version)
	} else {
		var err error
		if nl, err = c.newLock(l.key, nttl); err != nil {
			return nil
		}
		announce = c.announce(script.AcquiredNotice, l.key, nl.token, 0)
	}
	ho := &handOffRound{
		l: l, nl: nl, ttl: ttl, nttl: nttl, remote: to.remote != nil,
		calls: &handOffCalls{
			holds:    newHolds(len(c.nodes)),
			replaced: make([]bool, len(c.nodes)),
			budget:   time.Now().Add(c.nodeTimeout(ttl)),
		},
	}
	ho.args = newRoundArgs(l.key, l.token, nttl, announce, c.guard(nttl) > 0)
	ho.args.newToken = nl.token
	ho.args.trusted = boolArg(l.trustedHandOff(nttl))
	ho.args.remote = boolArg(ho.remote)
	return ho
}

// remoteSkips is which masters a hand-off to another Client's waiter
// skips (core.RemoteSkips, I18); those it asks only when the others cannot
// decide the round alone are its reserves (Lock.unlockReserves).
func (ho *handOffRound) remoteSkips() []error {
	skip := make([]error, len(ho.l.holds))
	for i, h := range ho.l.holds {
		if !core.RemoteSkips(h.refused(), h.isUnheard()) {
			continue
		}
		skip[i] = ErrNodeRefused
		ho.nl.holds[i].finish(false, nil)
		ho.calls.holds[i].finish(false, nil)
	}
	return skip
}

// settleUnasked finishes the holds of the masters r never asked: nothing
// of the new token is there. Won, the sweep of the nodes never heard
// releases ours (cleanUp does not); lost, Unlock's release may ask them (a
// failed call: ours may be there).
func (ho *handOffRound) settleUnasked(r *round) {
	for i := range ho.nl.holds {
		if r.unasked&(1<<i) == 0 {
			continue
		}
		ho.nl.holds[i].finish(false, nil)
		if r.won() {
			ho.calls.holds[i].finish(false, nil)
		} else {
			ho.calls.holds[i].finish(false, master.ErrNotSent)
		}
	}
}

// endRemote ends a decided hand-off to another Client's waiter: the new
// lock is the waiter's, won or not.
func (ho *handOffRound) endRemote(r *round, to *wait.Want) handOffResult {
	c := ho.l.c
	for _, h := range ho.nl.holds {
		h.abandon() // what is not sent yet is not sent; the rest is the waiter's
	}
	if !r.won() {
		return handOffResult{decided: r.decided, lost: ho.calls}
	}
	ho.cleanUp()
	c.wk.HandedOver(ho.l.key, to)
	c.cfg.test.remoteHandOffs.Add(1)
	return handOffResult{handed: true, decided: r.decided}
}

// endLocal ends a decided hand-off to one of our own waiters: won, the
// waiter is served the new lock; lost, the new lock is abandoned.
func (ho *handOffRound) endLocal(r *round, to *wait.Waiter[Lock]) handOffResult {
	c, nl := ho.l.c, ho.nl
	if !nl.won(r) {
		nl.abandon(ho.nttl)
		return handOffResult{decided: r.decided, lost: ho.calls}
	}
	ho.cleanUp()
	nl.passTurnAtEnd(c.turns.Passer(ho.l.key))
	to.Serve(nl)
	c.cfg.test.handOffs.Add(1)
	return handOffResult{handed: true, decided: r.decided}
}

// trustedHandOff reports whether a hand-off of our lock to a TTL of nttl
// may skip the restart guard's memory report where the key holds our
// token (core.TrustedHandOff, I9; lua/handoff.lua). Unlock hands off only
// while our lock is valid, and every script that set or extended our key
// recorded at least l.shortest in the marker.
func (l *Lock) trustedHandOff(nttl time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return core.TrustedHandOff(nttl, l.shortest)
}

// A handOffResult is how a hand-off round ended.
type handOffResult struct {
	handed  bool          // a majority replaced our token: next has its lock
	decided time.Time     // when the round was decided (zero if none ran)
	lost    *handOffCalls // when not handed: what the round left, for Unlock
}

// A handOffRound is a hand-off in flight: our lock l passing to nl.
type handOffRound struct {
	l, nl  *Lock
	ttl    time.Duration // l's, to release its token
	nttl   time.Duration // nl's: the calls may outlive the round, never read nl.ttl there
	calls  *handOffCalls
	remote bool         // nl's token is another Client's waiter's: never released here
	args   *roundArgs   // the script's: our token, nl's, nttl, the notice, the guard
	heard  atomic.Int64 // the most subscribers an acquired notice reached
}

// on runs the hand-off script on node n. Only a node that held our token
// votes yes: the lock passes as a whole from a majority of ours, or not at
// all.
func (ho *handOffRound) on(ctx context.Context, n *node) (ballot, error) {
	l, nl, c := ho.l, ho.nl, ho.l.c
	// Our own SET first: a hand-off that overtook it would find the key
	// free and leave our late SET behind.
	_ = l.holds[n.index].await(ctx)
	// Not sent once the new lock gave the node up (the round was lost): it
	// could only put there a token that would need a release.
	state, receivers, mem, err := n.handOff(ctx, nl.holds[n.index], ho.args)
	born := mem.born
	if state == handOffReplaced && !mem.reported {
		born = l.holds[n.index].born.Load() // the memory that held our key holds the new one
	}
	nl.holds[n.index].born.Store(born)
	maxInto(&ho.heard, receivers)
	switch {
	case errors.Is(err, master.ErrNotSent):
		// Nothing of the new token there; our own is, as before: the
		// call's hold below tells Unlock to delete it.
		nl.holds[n.index].finish(false, nil)
		err = errGivenUp
	case nl.holds[n.index].finish(err == nil && state != handOffRefused, err) && !ho.remote:
		c.releaseNode(n, l.key, nl.token, ho.nttl)
	}
	replaced := err == nil && state == handOffReplaced
	ho.calls.replaced[n.index] = replaced
	if ho.calls.holds[n.index].finish(false, err) {
		// Given up before it answered, and it failed: our token may be
		// there.
		c.releaseNode(n, l.key, l.token, ho.ttl)
	}
	return ballot{yes: replaced, mem: mem}, err
}

// cleanUp, after a won hand-off, releases what it may have left of our
// token, since Unlock sends no deletes: where the script failed (now or
// when it answers), and where our own SET had not answered yet.
func (ho *handOffRound) cleanUp() {
	l, c := ho.l, ho.l.c
	for i, n := range c.nodes {
		if ho.calls.holds[i].abandon() {
			c.releaseNode(n, l.key, l.token, ho.ttl)
		}
		if h := l.holds[i]; !h.finished() && h.abandon() {
			c.releaseNode(n, l.key, l.token, ho.ttl)
		}
	}
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
