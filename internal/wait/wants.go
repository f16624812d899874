// Waiters that ask other Clients' holders for the key, and holders that
// hand it to them: one round per turn across processes.

package wait

import (
	"time"
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
	// WantRefresh is how often a waiter repeats its want.
	WantRefresh = time.Second
	// WantFresh is how long a holder keeps a want it heard, since its last
	// repetition.
	WantFresh = 3 * WantRefresh
)

// A Want is a waiter of another Client that asked for a key.
type Want struct {
	Client, Token string
	TTL           time.Duration
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
func (w *Want) hearFrom(subs []bool, n int) {
	w.deaf, w.ndeaf = w.deaf[:0], 0
	for i := range n {
		deaf := subs == nil || !subs[i]
		w.deaf = append(w.deaf, deaf)
		if deaf {
			w.ndeaf++
		}
	}
}

// Doubtful reports whether w may be over unheard: a majority of the nodes
// were deaf since it was last heard.
func (w *Want) Doubtful(quorum int) bool { return w.ndeaf >= quorum }

// expected is one of this Client's announced tokens: which nodes handed
// the key to it.
type expected struct {
	nodes []bool
	N     int
	won   chan struct{} // closed once a majority did
	ttl   time.Duration // the TTL the want asked for
}

// wanted records another Client's want heard at now: a new token takes that
// Client's place in line, a repetition keeps it, ttl 0 withdraws it (only
// that token: a Client's newer want outlives an older one's withdrawal). A want
// of a token withdrawn or served already is a late copy (a master that was
// paused sends it after the withdrawal, sent to another): it is ignored.
func (kw *KeyWatch) wanted(client, token string, ttl time.Duration, now time.Time, nodes int) {
	if kw.Finished(token) {
		return
	}
	if ttl == 0 {
		kw.finish(token)
	}
	for i, w := range kw.Wants {
		if w.Client != client {
			continue
		}
		if ttl > 0 && w.Token == token {
			w.seen = now
			w.hearFrom(kw.subs, nodes)
			return
		}
		if ttl == 0 && w.Token != token {
			break // an older want's withdrawal: the Client's newer want stands
		}
		kw.Wants = append(kw.Wants[:i], kw.Wants[i+1:]...)
		break
	}
	if ttl > 0 {
		w := &Want{Client: client, Token: token, TTL: ttl, at: now, seen: now}
		w.hearFrom(kw.subs, nodes)
		kw.Wants = append(kw.Wants, w)
	}
}

// deafTo records that the watch may have missed node's notices (its
// subscription there ended, or was confirmed again after a lost
// connection): among them, perhaps, those that a want was served.
func (kw *KeyWatch) deafTo(node int) {
	for _, w := range kw.Wants {
		if node < len(w.deaf) && !w.deaf[node] {
			w.deaf[node] = true
			w.ndeaf++
		}
	}
}

// served drops the want of token: a node handed it the key.
func (kw *KeyWatch) served(token string) {
	kw.finish(token)
	for i, w := range kw.Wants {
		if w.Token == token {
			kw.Wants = append(kw.Wants[:i], kw.Wants[i+1:]...)
			return
		}
	}
}

// finish records that token's want is over (withdrawn or served).
func (kw *KeyWatch) finish(token string) {
	if !kw.Finished(token) {
		kw.done[kw.nextDone] = token
		kw.nextDone = (kw.nextDone + 1) % len(kw.done)
	}
}

// Finished reports whether token's want was recorded as over.
func (kw *KeyWatch) Finished(token string) bool {
	for _, t := range kw.done {
		if t == token {
			return true
		}
	}
	return false
}

// fresh drops the wants not repeated for wantFresh and returns the rest.
func (kw *KeyWatch) fresh(now time.Time) []*Want {
	kept := kw.Wants[:0]
	for _, w := range kw.Wants {
		if now.Sub(w.seen) < WantFresh {
			kept = append(kept, w)
		}
	}
	clear(kw.Wants[len(kept):])
	kw.Wants = kept
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
func (kw *KeyWatch) handed(token string, node, quorum int) bool {
	e := kw.Expects[token]
	if e == nil {
		return false
	}
	if !e.nodes[node] {
		e.nodes[node] = true
		if e.N++; e.N == quorum {
			close(e.won)
		}
	}
	return true
}

// ClaimWant returns the want that asked first, if it asked before since (a
// local waiter's arrival; zero: there is none), and forgets it; nil if
// there is none.
func (w *Waker) ClaimWant(key string, since time.Time) *Want {
	w.Mu.Lock()
	defer w.Mu.Unlock()
	kw := w.Keys[key]
	if kw == nil {
		return nil
	}
	var first *Want
	for _, x := range kw.fresh(time.Now()) {
		if x.Doubtful(w.Cfg.Quorum) {
			continue // it may have been served: handed again, nobody would hold its token
		}
		if first == nil || x.at.Before(first.at) {
			first = x
		}
	}
	if first == nil || (!since.IsZero() && !first.at.Before(since)) {
		return nil
	}
	kw.served(first.Token)
	return first
}

// WantsKnown reports whether other Clients' waiters announce themselves for
// key: their wants are in line with this Client's own waiters.
func (w *Waker) WantsKnown(key string) bool {
	w.Mu.Lock()
	defer w.Mu.Unlock()
	kw := w.Keys[key]
	return kw != nil && len(kw.fresh(time.Now())) > 0
}

// HandedOver records this Client's hand-off of key to another Client's
// waiter, before the nodes' notices come back: the key is taken, so that
// this Client's next waiter asks for it instead of making an attempt.
func (w *Waker) HandedOver(key string, to *Want) {
	w.Mu.Lock()
	defer w.Mu.Unlock()
	if kw := w.Keys[key]; kw != nil {
		kw.event(Taken, true, to.Token)
	}
}

// Expect starts counting the nodes that hand key to token, wanted for ttl,
// and returns the channel closed once a majority did.
func (h *Watcher) Expect(token string, ttl time.Duration) <-chan struct{} {
	h.W.Mu.Lock()
	defer h.W.Mu.Unlock()
	if h.Kw.Expects == nil {
		h.Kw.Expects = map[string]*expected{}
	}
	e := &expected{nodes: make([]bool, len(h.W.Nodes)), won: make(chan struct{}), ttl: ttl}
	h.Kw.Expects[token] = e
	return e.won
}

// Unexpect stops counting for token, and reports whether any node handed
// the key to it.
func (h *Watcher) Unexpect(token string) (heard []bool) {
	h.W.Mu.Lock()
	defer h.W.Mu.Unlock()
	e := h.Kw.Expects[token]
	delete(h.Kw.Expects, token)
	if e == nil || e.N == 0 {
		return nil
	}
	return e.nodes // nobody writes it once it is no longer expected
}

// Subscribed reports whether the subscriptions to key's notices and to the
// Client's hand-offs of it (handedChannel) are confirmed on a majority of
// nodes, which a waiter needs to count their hand-offs.
func (h *Watcher) Subscribed() bool {
	if h == nil {
		return false
	}
	h.W.Mu.Lock()
	defer h.W.Mu.Unlock()
	return h.Kw.Nsubs >= h.W.Cfg.Quorum && h.Kw.Nhsubs >= h.W.Cfg.Quorum
}

// handedOn records that node confirmed the subscription to the Client's
// handedChannel of the key (on), or its end; once a majority confirmed it,
// the key's waiters are woken, as for the key's own channel (confirmed).
// A hand-off missed while it was down costs its waiter the backoff (probe),
// never a lock: nothing else is told on it.
func (kw *KeyWatch) handedOn(node int, on bool, nodes, quorum int) {
	if kw.hsubs == nil {
		kw.hsubs = make([]bool, nodes)
	}
	if kw.hsubs[node] == on {
		return
	}
	kw.hsubs[node] = on
	if !on {
		kw.Nhsubs--
		return
	}
	if kw.Nhsubs++; kw.Nhsubs == quorum {
		kw.wake()
	}
}

// Gaps is how many times the key's subscription may have missed notices
// (keyWatch.gaps); 0 for a nil watch.
func (h *Watcher) Gaps() int {
	if h == nil {
		return 0
	}
	h.W.Mu.Lock()
	defer h.W.Mu.Unlock()
	return h.Kw.Gaps
}

// A Ticket is a want of this Client's still out: its key and token, and
// the TTL it asked for.
type Ticket struct {
	Key, Token string
	TTL        time.Duration
}

// Outstanding returns the wants still expected, and forgets them (Close
// withdraws them).
func (w *Waker) Outstanding() []Ticket {
	w.Mu.Lock()
	defer w.Mu.Unlock()
	var out []Ticket
	for key, kw := range w.Keys {
		for token, e := range kw.Expects {
			out = append(out, Ticket{Key: key, Token: token, TTL: e.ttl})
		}
		kw.Expects = nil
	}
	return out
}
