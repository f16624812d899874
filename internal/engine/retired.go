// The holder's side of a hand-off to another Client's waiter, once the
// waiter's Client has its lock or gave up: the tokens it retired, the
// late hand-offs to them it hears and releases, and the sweeps of the
// masters it never heard from.

package engine

import (
	"cmp"
	"maps"
	"time"

	"github.com/redlock-go/redlock/internal/core"
	"github.com/redlock-go/redlock/internal/script"
	"github.com/redlock-go/redlock/internal/wait"
)

// A retiredToken is a token of this Client's wants that a hand-off may
// still reach after the waiter is done with it: the waiter gave up (l is
// nil), or took the lock l a hand-off gave it, which a late hand-off to a
// node may outlive.
type retiredToken struct {
	key   string
	ttl   time.Duration
	l     *Lock
	at    time.Time    // retired then
	until time.Time    // forgotten then: a hand-off lands only while its holder's key lives
	rt    core.Retired // where it is released, and its sweep (sweepLateHandOff): write r back after a change
}

// retire remembers token of key, wanted for ttl, with the lock it gave (nil
// when none), for lateHandOff.
func (c *Client) retire(key, token string, ttl time.Duration, l *Lock) {
	now := time.Now()
	keep := 2 * max(ttl, time.Duration(c.longestTTL.Load()), wait.WantFresh)
	c.retiredMu.Lock()
	defer c.retiredMu.Unlock()
	if c.retired == nil {
		c.retired = map[string]retiredToken{}
	}
	if len(c.retired)%64 == 0 { // now and then, forget what no hand-off can reach
		maps.DeleteFunc(c.retired, func(_ string, r retiredToken) bool { return now.After(r.until) })
	}
	c.retired[token] = retiredToken{key: key, ttl: ttl, l: l, at: now, until: now.Add(keep)}
}

// lateTickets returns the wants this Client retired since, or whose late
// hand-off's sweep Close cut short, with no lock of them or one its Unlock
// released: a hand-off on its way to one of them
// may land once Close stopped hearing the notices that lateHandOff acts on
// (a holder that missed the withdrawal hands over to a want it heard
// within wantFresh), and would keep the key for its TTL with nobody to
// release it. Not a lock whose validity only ended here: its token may be
// another holder's now (Lock.Token, then Resume), and deleting it would let
// a second holder in (TestCloseLeavesAHandedLockResumedElsewhere).
func (c *Client) lateTickets(since time.Time) []wait.Ticket {
	type late struct {
		wait.Ticket
		l *Lock
	}
	var recent []late
	c.retiredMu.Lock()
	for token, r := range c.retired {
		if !r.at.Before(since) || r.rt.CutShort() { // or a sweep Close cut short
			recent = append(recent, late{wait.Ticket{Key: r.key, Token: token, TTL: r.ttl}, r.l})
		}
	}
	c.retiredMu.Unlock()
	var out []wait.Ticket
	for _, r := range recent {
		if r.l != nil && !r.l.letGo() {
			continue // held, or passed on: not ours to release
		}
		out = append(out, r.Ticket)
	}
	return out
}

// lateHandOff releases token on node, where a hand-off just put it, when
// token is a want this Client is done with: its waiter gave up, or took
// the lock and let it go (Lock.letGo). The hand-off reached that node late,
// after the waiter stopped counting, or after the lock's own release went
// by, and would keep the key there for the TTL. (While the lock is held,
// its Unlock releases the node: the notice makes it ask the node, if it
// would not have (Lock.heardOn), unless an Extend's call is asking it; the
// sweep of the nodes not heard releases it then, after the Unlock.) Not a
// lock whose validity only ended
// here: its token may be another holder's now (Lock.Token, then Resume),
// whose Extend may count this node
// (TestALateHandOffLeavesAHandedLockResumedElsewhere).
//
// Not while the lock's own Unlock is undecided: its hand-off of the token
// to the next waiter may still be queued for node, and a release put ahead
// of it would take away the key it passes on
// (TestALateHandOffLeavesTheLocksOwnHandOffOnItsWay). The first such notice
// schedules the release on every node not released here yet
// (sweepLateHandOff).
func (c *Client) lateHandOff(key, token string, node int) {
	// Under retiredMu throughout: narrowHanded must not leave a node out
	// of the lock's Unlock once it is marked released here.
	c.retiredMu.Lock()
	r, ok := c.retired[token]
	if !ok || r.key != key {
		c.retiredMu.Unlock()
		return
	}
	// held: the lock is not let go; covered: its Unlock, which comes after
	// this notice, releases node.
	held, covered, decided := false, false, true
	if r.l != nil {
		held, covered = r.l.heardOn(node)
	}
	if !held && r.l != nil {
		decided, _ = r.l.unlockDecided()
	}
	now, sweep := r.rt.Late(node, len(c.nodes), held, covered, decided)
	c.retired[token] = r
	c.retiredMu.Unlock()
	if held || c.enter() != nil {
		return
	}
	if now {
		// Announced: the waiters heard the key go to token, and wait for
		// its release.
		c.releaseNodeWith(c.nodes[node], key, token, r.ttl, c.announce(script.ReleasedNotice, key, token, 0))
	}
	if sweep {
		c.bg.Add(1) // Close cuts it short, and waits for it: the first late notice's sweep
		go c.sweepLateHandOff(key, token, cmp.Or(c.cfg.test.lateSweep, c.longestNodeTimeout()))
	}
	c.bg.Done()
}

// heardHandOff records the nodes heard handing token the key before its
// waiter took the lock (nil: none), for sweepUnheard: the lock's Unlock
// releases them.
func (c *Client) heardHandOff(token string, heard []bool) {
	c.retiredMu.Lock()
	defer c.retiredMu.Unlock()
	if r, ok := c.retired[token]; ok && heard != nil {
		r.rt.Heard(heard)
		c.retired[token] = r
	}
}

// narrowHanded, for a lock its waiter took on a hand-off's notices
// (takeHanded), makes its Unlock hold back the nodes never heard handing
// it the key, as reserves of its rounds (Lock.unlockReserves): there the
// key is free or another's, unless this Client missed a notice, and the
// sweep of the nodes never heard releases our token after the Unlock
// anyway (sweepUnheard), so asking them in the Unlock too would cost a
// contended turn a release on each. A notice heard later, or an Extend's
// yes, makes them nodes the Unlock asks as any other (lateHandOff,
// hold.tokenSeen). Only Unlock holds them back: Extend and Fence ask them,
// since a node this Client is deaf to may hold our token (counted as a
// refusal, it could make Extend give a held lock up), and a lock Extend
// gives up is released on them (abandon).
func (c *Client) narrowHanded(token string) {
	c.retiredMu.Lock()
	defer c.retiredMu.Unlock()
	r, ok := c.retired[token]
	if !ok || r.l == nil {
		return
	}
	for i, h := range r.l.holds {
		if r.rt.Unheard(i) {
			h.markUnheard()
		}
	}
}

// sweepUnheard, as the Unlock of a lock a hand-off gave ends, schedules the
// release of its token on the nodes never heard handing it the key
// (sweepLateHandOff): a hand-off that lands on one after the Unlock, with a
// notice this Client does not hear, would keep the key for the TTL, and no
// late notice would start a sweep (the fault generator's property 6
// checks it). Whether this Client hears a
// node is not known: go-redis subscribes again after a lost connection
// without a word, and a refusal for want of channel rights (ACL) then goes
// unseen. Most such nodes were never handed the key (the hand-off's round
// was decided before its request to them went out, or a quorum-first lock
// asked a majority only), so this costs a contended turn a release on each.
// It runs once the Unlock is decided, and the longest node deadline after
// the Unlock ended: the hand-off that gave the lock has reached every node
// it will in time by then, unless its giver's node deadline is longer than
// this Client's (TestAHandOffThatReachesAMasterUnheardAfterTheWaitersUnlockIsReleased
// stages a late one). It counts from the Unlock's end, not from when the
// lock was taken: a hand-off may land after the Unlock. The caller holds a
// registration in c.bg.
func (c *Client) sweepUnheard(key, token string) {
	c.retiredMu.Lock()
	r, ok := c.retired[token]
	sweep := ok && r.key == key && r.l != nil && r.rt.Unlocked()
	if sweep {
		c.retired[token] = r
	}
	c.retiredMu.Unlock()
	if sweep {
		c.bg.Add(1) // Close cuts it short, and waits for it
		go c.sweepLateHandOff(key, token, cmp.Or(c.cfg.test.lateSweep, c.longestNodeTimeout()))
	}
}

// sweepLateHandOff releases token, late handed key, on the nodes where
// lateHandOff did not: the hand-off went to every node, and this Client may
// not hear some of them (its subscription there was refused while the
// master's channel rights were revoked, or was not confirmed yet), where
// the key would stay for the TTL with nobody to release it (the fault
// generator's property 6, once in a rehearsal: a holder that missed a
// served want's withdrawal handed the key to it). It runs the longest node
// deadline after the first late notice, when the hand-off has reached
// every node it will in time, and once the lock's own Unlock is decided
// (lateHandOff). A notice heard after it is released at once. The caller
// holds a registration in c.bg for it. Close ends the wait: it releases
// the token itself, with those of the wants retired lately, once it waited
// out the node deadline (lateTickets).
func (c *Client) sweepLateHandOff(key, token string, after time.Duration) {
	defer c.bg.Done()
	t := time.NewTimer(after)
	defer t.Stop()
	select {
	case <-t.C:
	case <-c.closing:
		return
	}
	r, ok := c.doneWith(key, token)
	if !ok {
		return
	}
	if r.l != nil {
		if decided, ch := r.l.unlockDecided(); !decided {
			<-ch // within the node deadline of its rounds
		}
	}
	c.retiredMu.Lock()
	r, ok = c.retired[token]
	var release []bool
	if ok {
		release = r.rt.Sweep(len(c.nodes))
		c.retired[token] = r
	}
	c.retiredMu.Unlock()
	if !ok {
		return
	}
	announce := c.announce(script.ReleasedNotice, key, token, 0)
	for i, n := range c.nodes {
		if release[i] {
			c.releaseNodeWith(n, key, token, r.ttl, announce)
		}
	}
}

// doneWith returns what this Client retired of token, when it is a want
// of key it is done with: its waiter gave up, or took the lock and let it
// go (Lock.letGo).
func (c *Client) doneWith(key, token string) (retiredToken, bool) {
	c.retiredMu.Lock()
	r, ok := c.retired[token]
	c.retiredMu.Unlock()
	if !ok || r.key != key || (r.l != nil && !r.l.letGo()) {
		return r, false
	}
	return r, true
}

// longestNodeTimeout bounds the node deadline of every round of this
// Client's, whatever its TTL.
func (c *Client) longestNodeTimeout() time.Duration {
	if c.cfg.nodeTimeout > 0 {
		return c.cfg.nodeTimeout
	}
	return DefaultMaxNodeTimeout
}

// isRetired reports whether token, one of this Client's wants, is done
// with: served, or given up.
func (c *Client) isRetired(token string) bool {
	c.retiredMu.Lock()
	defer c.retiredMu.Unlock()
	_, ok := c.retired[token]
	return ok
}
