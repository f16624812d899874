// Waiters that ask other Clients' holders for the key, and holders that
// hand it to them: one round per turn across processes.

package wait

import (
	"time"

	"github.com/redlock-go/redlock/internal/core"
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
	// repetition (core.Line).
	WantFresh = core.WantFresh
)

// A Want is a waiter of another Client that asked for a key: the
// protocol core's (core.Line).
type Want = core.Want

// expected is what this Client keeps with one of its announced tokens
// (core.Expected counts the masters that handed the key to it).
type expected struct {
	won chan struct{} // closed once a majority handed the key to the token
	ttl time.Duration // the TTL the want asked for
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
	e, ok, reached := kw.Expects.From(token, node, quorum)
	if reached {
		close(e.won)
	}
	return ok
}

// ClaimWant returns the want that asked first, if it asked before since (a
// local waiter's arrival; zero: there is none), and records it served;
// nil if there is none (core.Line.Claim).
func (w *Waker) ClaimWant(key string, since time.Time) *Want {
	w.Mu.Lock()
	defer w.Mu.Unlock()
	kw := w.Keys[key]
	if kw == nil {
		return nil
	}
	return kw.Line.Claim(time.Now(), since, w.Cfg.Quorum)
}

// WantsKnown reports whether other Clients' waiters announce themselves for
// key: their wants are in line with this Client's own waiters.
func (w *Waker) WantsKnown(key string) bool {
	w.Mu.Lock()
	defer w.Mu.Unlock()
	kw := w.Keys[key]
	return kw != nil && len(kw.Line.Fresh(time.Now())) > 0
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
	won := make(chan struct{})
	h.Kw.Expects.Expect(token, len(h.W.Nodes), expected{won: won, ttl: ttl})
	return won
}

// Unexpect stops counting for token, and reports which nodes handed the
// key to it; nil when none did.
func (h *Watcher) Unexpect(token string) (heard []bool) {
	h.W.Mu.Lock()
	defer h.W.Mu.Unlock()
	return h.Kw.Expects.Unexpect(token) // nobody writes it once it is no longer expected
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
		for token, e := range kw.Expects.Drain() {
			out = append(out, Ticket{Key: key, Token: token, TTL: e.ttl})
		}
	}
	return out
}
