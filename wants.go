// Waiters that ask other Clients' holders for the key, and holders that
// hand it to them: one round per turn across processes.

package redlock

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/redlock-go/redlock/internal/script"
)

// Across processes, a turn would otherwise cost a release round, a notice,
// and the waiters' acquisition rounds, of which all but one lose and roll
// back. Instead:
//
//   - A waiter that finds the key held by another Client announces itself:
//     it publishes "wanted <client> <token> <ttl>" on the key's notice
//     channel, on one node, with a token it drew for the purpose. Every
//     Client that watches the key hears it, and keeps the want, one per
//     Client, for wantFresh; the waiter repeats it every wantRefresh while
//     it waits.
//   - A holder's Unlock hands the lock to the waiter that asked first, of
//     any Client (handoff.go): the hand-off script replaces the holder's
//     token with the waiter's, and publishes "handed <client> <token>" on
//     each node where it did, and nowhere else, on the waiter's Client's
//     own channel for the key (handedChannel): the other Clients that watch
//     the key would only drop the want on hearing it, and five notices per
//     turn to each of them took about a third of a turn across processes
//     (eight Clients, two cores).
//   - The waiter counts those notices. Once a majority of nodes sent one, it
//     holds the lock: every one of those nodes replaced a lock that was
//     valid when the hand-off began, so none has forgotten a lock that
//     matters there (see trustedHandOff), and each set the waiter's key
//     after the waiter announced itself: the key lives at least the TTL
//     from the announcement. So the waiter's validity is counted from the
//     moment it sent its first announcement, like an acquisition's from the
//     round's start. When a long wait has eaten half of it, the waiter first
//     confirms the lock with an extension round, counted from that round's
//     start. Its Client then withdraws the served want ("wanted … 0", on
//     one node), so that the other Clients do not hand the key to it
//     again; one that missed the withdrawal hands the key to a token the
//     Client no longer waits on, which the Client hears and releases
//     (lateHandOff): a turn lost, never a lock.
//
// The waiter's token is its own to release. The holder never rolls it
// back, even when its round reached no majority in time: the notices are
// the facts the waiter acts on, and a release the waiter cannot see coming
// would take keys from under it. A waiter that gives up (ctx, Close, or it
// took the key by an attempt of its own) withdraws its want ("wanted …
// 0"), and releases its token where a hand-off may have put it. A waiter
// that dies while a holder hands it the key costs that key its TTL, as a
// holder that dies does.
//
// A waiter that hears nothing keeps its backoff timer: a lost announcement
// or lost notices cost a wait, never safety. While its want is out, the
// timer runs at the longest backoff (the holder hands over without it), and
// when it fires the waiter asks the nodes whether its token holds the key
// (an extension round, which sets nothing where it does not), then makes an
// attempt of its own with a fresh token.

const (
	// wantRefresh is how often a waiter repeats its want.
	wantRefresh = time.Second
	// wantFresh is how long a holder keeps a want it heard, since its last
	// repetition.
	wantFresh = 3 * wantRefresh
)

// A want is a waiter of another Client that asked for a key.
type want struct {
	client, token string
	ttl           time.Duration
	at            time.Time // when its token was first heard: its place in line
	seen          time.Time // when it was last heard
	// deaf lists the nodes whose notices this Client may have missed since
	// the want was last heard: its subscription there was not confirmed
	// then, or was confirmed again after a lost connection, or ended. Once a
	// majority is deaf, this Client heard too little of the key to trust
	// the want to be live (its withdrawal, on one node, may have gone
	// unheard; from a Client before handedChannel, so may a hand-off to it,
	// announced on the key's channel on a majority): it is doubtful, and
	// gets no hand-off until its waiter repeats it.
	deaf  []bool
	ndeaf int
}

// hearFrom starts w's deaf list anew: the nodes whose subscription subs
// (nil: none yet) has not confirmed, of n.
func (w *want) hearFrom(subs []bool, n int) {
	w.deaf, w.ndeaf = w.deaf[:0], 0
	for i := range n {
		deaf := subs == nil || !subs[i]
		w.deaf = append(w.deaf, deaf)
		if deaf {
			w.ndeaf++
		}
	}
}

// doubtful reports whether w may be over unheard: a majority of the nodes
// were deaf since it was last heard.
func (w *want) doubtful(quorum int) bool { return w.ndeaf >= quorum }

// expected is one of this Client's announced tokens: which nodes handed
// the key to it.
type expected struct {
	nodes []bool
	n     int
	won   chan struct{} // closed once a majority did
	ttl   time.Duration // the TTL the want asked for
}

// wanted records another Client's want heard at now: a new token takes that
// Client's place in line, a repetition keeps it, ttl 0 withdraws it (only
// that token: a Client's newer want outlives an older one's withdrawal). A want
// of a token withdrawn or served already is a late copy (a master that was
// paused sends it after the withdrawal, sent to another): it is ignored.
func (kw *keyWatch) wanted(client, token string, ttl time.Duration, now time.Time, nodes int) {
	if kw.finished(token) {
		return
	}
	if ttl == 0 {
		kw.finish(token)
	}
	for i, w := range kw.wants {
		if w.client != client {
			continue
		}
		if ttl > 0 && w.token == token {
			w.seen = now
			w.hearFrom(kw.subs, nodes)
			return
		}
		if ttl == 0 && w.token != token {
			break // an older want's withdrawal: the Client's newer want stands
		}
		kw.wants = append(kw.wants[:i], kw.wants[i+1:]...)
		break
	}
	if ttl > 0 {
		w := &want{client: client, token: token, ttl: ttl, at: now, seen: now}
		w.hearFrom(kw.subs, nodes)
		kw.wants = append(kw.wants, w)
	}
}

// deafTo records that the watch may have missed node's notices (its
// subscription there ended, or was confirmed again after a lost
// connection): among them, perhaps, those that a want was served.
func (kw *keyWatch) deafTo(node int) {
	for _, w := range kw.wants {
		if node < len(w.deaf) && !w.deaf[node] {
			w.deaf[node] = true
			w.ndeaf++
		}
	}
}

// served drops the want of token: a node handed it the key.
func (kw *keyWatch) served(token string) {
	kw.finish(token)
	for i, w := range kw.wants {
		if w.token == token {
			kw.wants = append(kw.wants[:i], kw.wants[i+1:]...)
			return
		}
	}
}

// finish records that token's want is over (withdrawn or served).
func (kw *keyWatch) finish(token string) {
	if !kw.finished(token) {
		kw.done[kw.nextDone] = token
		kw.nextDone = (kw.nextDone + 1) % len(kw.done)
	}
}

// finished reports whether token's want was recorded as over.
func (kw *keyWatch) finished(token string) bool {
	for _, t := range kw.done {
		if t == token {
			return true
		}
	}
	return false
}

// fresh drops the wants not repeated for wantFresh and returns the rest.
func (kw *keyWatch) fresh(now time.Time) []*want {
	kept := kw.wants[:0]
	for _, w := range kw.wants {
		if now.Sub(w.seen) < wantFresh {
			kept = append(kept, w)
		}
	}
	clear(kw.wants[len(kept):])
	kw.wants = kept
	return kept
}

// handed counts node's notice that it handed the key to this Client's
// token, and reports whether a waiter expects it. Notices of different
// hand-off rounds add up, a lost round's too: each put the token on its
// node after the want's first announcement, with the want's TTL, so it
// stays there past the validity takeHanded gives the lock (from that
// announcement, less drift); only this Client deletes it, and a master
// that loses it by a restart is held back by the restart guard for longer
// (TestAWaiterCountsALostHandOffRoundsMaster).
func (kw *keyWatch) handed(token string, node, quorum int) bool {
	e := kw.expects[token]
	if e == nil {
		return false
	}
	if !e.nodes[node] {
		e.nodes[node] = true
		if e.n++; e.n == quorum {
			close(e.won)
		}
	}
	return true
}

// A retiredToken is a token of this Client's wants that a hand-off may
// still reach after the waiter is done with it: the waiter gave up (l is
// nil), or took the lock l a hand-off gave it, which a late hand-off to a
// node may outlive.
type retiredToken struct {
	key   string
	ttl   time.Duration
	l     *Lock
	at    time.Time // retired then
	until time.Time // forgotten then: a hand-off lands only while its holder's key lives
	// late: per node, whether a late hand-off to it was released there
	// (lateHandOff, sweepLateHandOff); nil before the first.
	late     []bool
	sweeping bool // sweepLateHandOff is scheduled, or ran
	swept    bool // it ran
}

// retire remembers token of key, wanted for ttl, with the lock it gave (nil
// when none), for lateHandOff.
func (c *Client) retire(key, token string, ttl time.Duration, l *Lock) {
	now := time.Now()
	keep := 2 * max(ttl, time.Duration(c.longestTTL.Load()), wantFresh)
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
func (c *Client) lateTickets(since time.Time) []ticket {
	type late struct {
		ticket
		l *Lock
	}
	var recent []late
	c.retiredMu.Lock()
	for token, r := range c.retired {
		if !r.at.Before(since) || (r.sweeping && !r.swept) { // or a sweep Close cut short
			recent = append(recent, late{ticket{key: r.key, token: token, ttl: r.ttl}, r.l})
		}
	}
	c.retiredMu.Unlock()
	var out []ticket
	for _, r := range recent {
		if r.l != nil && !r.l.letGo() {
			continue // held, or passed on: not ours to release
		}
		out = append(out, r.ticket)
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
	held, covered := false, false
	if r.l != nil {
		held, covered = r.l.heardOn(node)
	}
	now := !held
	if !held && r.l != nil {
		now, _ = r.l.unlockDecided()
	}
	sweep := !held && !r.sweeping // once per token
	if r.late == nil {
		r.late = make([]bool, len(c.nodes))
	}
	r.late[node] = r.late[node] || covered || now
	r.sweeping = r.sweeping || sweep
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
	r, ok := c.retired[token]
	if !ok || heard == nil {
		return
	}
	if r.late == nil {
		r.late = make([]bool, len(c.nodes))
	}
	for i, h := range heard {
		r.late[i] = r.late[i] || h
	}
	c.retired[token] = r
}

// narrowHanded, for a lock its waiter took on a hand-off's notices
// (takeHanded), makes its Unlock hold back the nodes never heard handing
// it the key, as reserves of its rounds (Lock.unlockReserves): there the
// key is free or another's, unless this Client missed a notice, and the
// sweep of the nodes never heard releases our token after the Unlock
// anyway (sweepUnheard). (A contended turn asked them all, and then swept
// them: 24.1 server commands per acquisition in the contended benchmark,
// 18.2 without the Unlock's.) A notice heard later, or an Extend's yes,
// makes them nodes the Unlock asks as any other (lateHandOff,
// hold.tokenSeen). Only Unlock holds them back: Extend and Fence ask them
// (a node this Client is deaf to may hold our token: an Extend that
// counted them as refusals gave a held lock up, an adversary review), and
// a lock Extend gives up is released on them (abandon).
func (c *Client) narrowHanded(token string) {
	c.retiredMu.Lock()
	defer c.retiredMu.Unlock()
	r, ok := c.retired[token]
	if !ok || r.l == nil {
		return
	}
	for i, h := range r.l.holds {
		if r.late == nil || !r.late[i] {
			h.markUnheard()
		}
	}
}

// sweepUnheard, as the Unlock of a lock a hand-off gave ends, schedules the
// release of its token on the nodes never heard handing it the key
// (sweepLateHandOff): a hand-off that lands on one after the Unlock, with a
// notice this Client does not hear, would keep the key for the TTL, and no
// late notice would start a sweep (the fault generator's property 6, in two
// rehearsals, on the one master left late). Whether this Client hears a
// node is not known: go-redis subscribes again after a lost connection
// without a word, and a refusal for want of channel rights (ACL) then goes
// unseen. Most such nodes were never handed the key (the hand-off's round
// was decided before its request to them went out, or a quorum-first lock
// asked a majority only), so this costs a contended turn a release on each.
// It runs once the Unlock is decided, and the longest node deadline after
// the Unlock ended: the hand-off that gave the lock has reached every node
// it will in time by then, unless its giver's node deadline is longer than
// this Client's (TestAHandOffThatReachesAMasterUnheardAfterTheWaitersUnlockIsReleased
// stages a late one; counting from when the lock was taken missed one that
// landed after the Unlock, an adversary review). The caller holds a
// registration in c.bg.
func (c *Client) sweepUnheard(key, token string) {
	c.retiredMu.Lock()
	r, ok := c.retired[token]
	sweep := ok && r.key == key && r.l != nil && !r.sweeping && (r.late == nil || slices.Contains(r.late, false))
	if sweep {
		r.sweeping = true
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
	released := slices.Clone(r.late)
	if ok {
		for i := range r.late {
			r.late[i] = true
		}
		r.swept = true
		c.retired[token] = r
	}
	c.retiredMu.Unlock()
	if !ok {
		return
	}
	announce := c.announce(script.ReleasedNotice, key, token, 0)
	for i, n := range c.nodes {
		if i >= len(released) || !released[i] {
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

// claimWant returns the want that asked first, if it asked before since (a
// local waiter's arrival; zero: there is none), and forgets it; nil if
// there is none.
func (w *waker) claimWant(key string, since time.Time) *want {
	w.mu.Lock()
	defer w.mu.Unlock()
	kw := w.keys[key]
	if kw == nil {
		return nil
	}
	var first *want
	for _, x := range kw.fresh(time.Now()) {
		if x.doubtful(w.cfg.quorum) {
			continue // it may have been served: handed again, nobody would hold its token
		}
		if first == nil || x.at.Before(first.at) {
			first = x
		}
	}
	if first == nil || (!since.IsZero() && !first.at.Before(since)) {
		return nil
	}
	kw.served(first.token)
	return first
}

// wantsKnown reports whether other Clients' waiters announce themselves for
// key: their wants are in line with this Client's own waiters.
func (w *waker) wantsKnown(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	kw := w.keys[key]
	return kw != nil && len(kw.fresh(time.Now())) > 0
}

// handedOver records this Client's hand-off of key to another Client's
// waiter, before the nodes' notices come back: the key is taken, so that
// this Client's next waiter asks for it instead of making an attempt.
func (w *waker) handedOver(key string, to *want) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if kw := w.keys[key]; kw != nil {
		kw.event(taken, true, to.token)
	}
}

// expect starts counting the nodes that hand key to token, wanted for ttl,
// and returns the channel closed once a majority did.
func (h *watcher) expect(token string, ttl time.Duration) <-chan struct{} {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	if h.kw.expects == nil {
		h.kw.expects = map[string]*expected{}
	}
	e := &expected{nodes: make([]bool, len(h.w.nodes)), won: make(chan struct{}), ttl: ttl}
	h.kw.expects[token] = e
	return e.won
}

// unexpect stops counting for token, and reports whether any node handed
// the key to it.
func (h *watcher) unexpect(token string) (heard []bool) {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	e := h.kw.expects[token]
	delete(h.kw.expects, token)
	if e == nil || e.n == 0 {
		return nil
	}
	return e.nodes // nobody writes it once it is no longer expected
}

// subscribed reports whether the subscriptions to key's notices and to the
// Client's hand-offs of it (handedChannel) are confirmed on a majority of
// nodes, which a waiter needs to count their hand-offs.
func (h *watcher) subscribed() bool {
	if h == nil {
		return false
	}
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	return h.kw.nsubs >= h.w.cfg.quorum && h.kw.nhsubs >= h.w.cfg.quorum
}

// handedOn records that node confirmed the subscription to the Client's
// handedChannel of the key (on), or its end; once a majority confirmed it,
// the key's waiters are woken, as for the key's own channel (confirmed).
// A hand-off missed while it was down costs its waiter the backoff (probe),
// never a lock: nothing else is told on it.
func (kw *keyWatch) handedOn(node int, on bool, nodes, quorum int) {
	if kw.hsubs == nil {
		kw.hsubs = make([]bool, nodes)
	}
	if kw.hsubs[node] == on {
		return
	}
	kw.hsubs[node] = on
	if !on {
		kw.nhsubs--
		return
	}
	if kw.nhsubs++; kw.nhsubs == quorum {
		kw.wake()
	}
}

// gaps is how many times the key's subscription may have missed notices
// (keyWatch.gaps); 0 for a nil watch.
func (h *watcher) gaps() int {
	if h == nil {
		return 0
	}
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	return h.kw.gaps
}

// A wantOut is a waiter's announcement: its token, and when it was first
// and last sent.
type wantOut struct {
	token     string
	first, at time.Time
	handed    <-chan struct{} // closed once a majority of nodes handed the key to token
}

// announce sends, or repeats every wantRefresh, the waiter's want of the
// key, when the Client may hand locks to other Clients' waiters and its
// subscription can hear the hand-off. A want that no node took is dropped.
func (lp *waitLoop) announce() {
	c := lp.c
	if lp.w == nil || c.cfg.test.noRemoteHandOff || c.noticesOff() || !lp.w.subscribed() {
		return
	}
	if lp.want != nil && !lp.want.at.IsZero() && time.Since(lp.want.at) < c.wantRefresh() {
		return
	}
	if err := c.enter(); err != nil {
		return // Close withdraws what is out
	}
	if lp.want == nil {
		id, err := uuid.NewRandom()
		if err != nil {
			c.bg.Done()
			return
		}
		token := id.String()
		lp.want = &wantOut{token: token, handed: lp.w.expect(token, lp.ttl)}
	}
	now := time.Now() // before it is sent: the validity of a hand-off to it counts from here
	if lp.want.first.IsZero() {
		lp.want.first = now
		lp.arm(lp.timeout())
	}
	lp.want.at = now
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
	}(lp.key, lp.want.token, lp.ttl)
}

// isRetired reports whether token, one of this Client's wants, is done
// with: served, or given up.
func (c *Client) isRetired(token string) bool {
	c.retiredMu.Lock()
	defer c.retiredMu.Unlock()
	_, ok := c.retired[token]
	return ok
}

// wantRefresh is how often the Client's waiters repeat their wants.
func (c *Client) wantRefresh() time.Duration {
	if d := c.cfg.test.wantRefresh; d > 0 {
		return d
	}
	return wantRefresh
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
		if isNoPerm(err) {
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
// ErrClosed. (Without this, a Close between the hand-off's wake-up and
// unexpect released the token of the lock the call then returned, valid
// for most of its TTL and held by nobody on the masters: an adversary
// review, TestCloseDuringATakenHandOffReturnsNoLock.)
func (lp *waitLoop) takeHanded() (*Lock, error) {
	c, a := lp.c, lp.want
	if h := c.cfg.test.takingHandOff; h != nil {
		h()
	}
	if err := c.enter(); err != nil {
		return nil, lp.closedWhileWaiting()
	}
	defer c.bg.Done()
	l := c.handedLock(lp.key, a.token, lp.ttl, true)
	c.retire(lp.key, a.token, lp.ttl, l) // before unexpect: no notice falls between
	c.heardHandOff(a.token, lp.w.unexpect(a.token))
	lp.want = nil
	lp.served(a.token)
	if validity(lp.ttl, time.Since(a.first), c.cfg.driftFactor) >= lp.ttl/2 {
		c.narrowHanded(a.token)
		l.startValidity(validUntil(a.first, lp.ttl, c.cfg.driftFactor))
		c.cfg.test.handedLocks.Add(1)
		return l, nil
	}
	won, err := lp.confirm(l)
	if won {
		return l, nil
	}
	// Given up: a late hand-off is released, and so is the token by a
	// Close that began meanwhile (lateTickets), once this returns.
	c.retire(lp.key, a.token, lp.ttl, nil)
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
	l := &Lock{c: c, key: key, token: token, ttl: ttl, shortest: ttl, holds: newHolds(len(c.nodes)), widens: widen}
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
	a, c := lp.want, lp.c
	if a == nil || a.first.IsZero() {
		return nil, nil
	}
	if err := c.enter(); err != nil {
		return nil, lp.closedWhileWaiting()
	}
	defer c.bg.Done()
	l := c.handedLock(lp.key, a.token, lp.ttl, true)
	if won, err := lp.confirm(l); !won || err != nil {
		return nil, err // the want is still out: the call withdraws it, or Close does
	}
	if h := c.cfg.test.takingHandOff; h != nil {
		h()
	}
	c.retire(lp.key, a.token, lp.ttl, l)
	c.heardHandOff(a.token, lp.w.unexpect(a.token))
	lp.want = nil
	lp.served(a.token)
	return l, nil
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
	if h := c.wk.existing(lp.key); h != nil {
		time.AfterFunc(wantFresh, h.close)
	}
}

// withdraw, when the waiter's call ends without the lock its want asked
// for, tells the holders to forget the want, and releases its token where a
// hand-off may have put it, in the background.
func (lp *waitLoop) withdraw() {
	a := lp.want
	if a == nil {
		return
	}
	lp.want = nil
	c := lp.c
	if err := c.enter(); err != nil {
		return // Close withdraws what is still expected
	}
	c.retire(lp.key, a.token, lp.ttl, nil) // before unexpect: no notice falls between
	c.withdraw(lp.key, a.token, lp.ttl, lp.w.unexpect(a.token) != nil)
	c.bg.Done()
	// Keep hearing the key a while, so that a hand-off already on its way
	// to the token is heard, and released (lateHandOff).
	if h := c.wk.existing(lp.key); h != nil {
		time.AfterFunc(wantFresh, h.close)
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
// release it from now on (an adversary review: the key taken for its TTL, 4
// runs of 4).
func (c *Client) withdrawAll(out, late []ticket) {
	if len(out) == 0 && len(late) == 0 {
		return
	}
	for _, t := range out {
		c.withdraw(t.key, t.token, t.ttl, false)
	}
	c.withdrawEverywhere(late)
	time.Sleep(max(c.cfg.nodeTimeout, DefaultMaxNodeTimeout))
	if h := c.cfg.test.closeReleasing; h != nil {
		h()
	}
	for _, t := range append(out, late...) {
		for _, n := range c.nodes {
			c.releaseNode(n, t.key, t.token, t.ttl)
		}
	}
}

// withdrawEverywhere publishes the withdrawal of each of tickets on every
// node, as one pipeline per node, all at once, and returns once every node
// took them, or after the node deadline of the longest TTL asked for (a
// call still running then ends in the background). The caller is Close,
// which releases the tickets' tokens only after: a release before a
// withdrawal lands may come before a hand-off to the token by a Client
// that has not heard it yet (an adversary review: the key taken for its
// TTL, with a few hundred tickets withdrawn one round trip at a time).
func (c *Client) withdrawEverywhere(tickets []ticket) {
	if len(tickets) == 0 {
		return
	}
	var longest time.Duration
	channels, messages := make([]string, len(tickets)), make([]string, len(tickets))
	for i, t := range tickets {
		longest = max(longest, t.ttl)
		msg := script.NewNotice(script.WantedNotice, t.key, c.id, t.token, 0)
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
					chs[i] = n.channelOf(t.key, channels[i])
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

// A ticket is a want of this Client's still out: its key and token, and
// the TTL it asked for.
type ticket struct {
	key, token string
	ttl        time.Duration
}

// outstanding returns the wants still expected, and forgets them (Close
// withdraws them).
func (w *waker) outstanding() []ticket {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []ticket
	for key, kw := range w.keys {
		for token, e := range kw.expects {
			out = append(out, ticket{key: key, token: token, ttl: e.ttl})
		}
		kw.expects = nil
	}
	return out
}
