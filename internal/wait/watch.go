// What a Client knows of a key from its notices, and how its waiters act on
// it: seniority slots after a release, standing down when another takes it.

package wait

import (
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/redlock-go/redlock/internal/core"
)

// A slot, the spacing between waiters of different seniority, in attempt
// durations: long enough for the one in the slot before to take the lock
// and announce it.
const (
	minSlotFactor  = 1
	initSlotFactor = 2
	maxSlotFactor  = 8
)

// event is the latest state of a key, as the notices tell it.
type event int

// Approach is how a Lock call starts, given what its Client knows of the key
// (core.Waiter's states).
type Approach = core.Approach

// KeyWatch is what a Client knows of one key from its notices.
type KeyWatch struct {
	refs   int
	linger *time.Timer // unsubscribes once refs has stayed 0 for subscriptionLinger

	Ch       chan struct{} // closed, and replaced, on each new event
	Latest   event
	foreign  bool      // the latest event came from another Client
	Holder   string    // the token of the latest taken event, until released
	othersAt time.Time // when another Client's lock or release was last heard

	released [8]string // tokens whose release was heard: each node repeats it
	nextRel  int
	releases int // how many of them: a release's repeats wake the waiters, and only this tells a new one
	// NodeReleases counts the release notices heard from each node, repeats
	// included: a LockMulti waiter tries again when a node that refused its
	// attempt announces a release after it did (refusalMarks).
	NodeReleases []int
	votes        [8]tokenVotes // nodes that announced each recent acquisition
	nextVote     int

	Line    core.Line               // other Clients' waiters that asked for the key (wants.go)
	Expects core.Expected[expected] // this Client's waiters' announced tokens
	subs    []bool                  // nodes where the subscription to the key is confirmed
	Nsubs   int
	hsubs   []bool // nodes where the subscription to the Client's handedChannel of the key is
	Nhsubs  int
	// Gaps counts the times the subscription may have missed notices: it
	// became active (a majority confirmed it), or a node confirmed it again
	// (a driver re-subscribes after a lost connection, silently).
	Gaps int

	Round  time.Duration // attempt duration, moving average
	Factor float64       // a slot is factor × round
	Depth  float64       // the age at which waiters lately won the key
}

type tokenVotes struct {
	token string
	nodes []bool
	n     int
}

// A Watcher is one waiter's reference to a keyWatch. Its methods may be
// called on a nil *watcher, which knows nothing (notices are off).
type Watcher struct {
	W    *Waker
	Key  string
	Kw   *KeyWatch
	once sync.Once
	// What the reference saw when it was taken (sinceTaken).
	taken                    <-chan struct{}
	takenReleases, takenGaps int
}

// Close drops the reference; the subscription lingers a while after the
// last one.
func (h *Watcher) Close() {
	if h == nil {
		return
	}
	h.once.Do(func() {
		w, kw := h.W, h.Kw
		w.Mu.Lock()
		defer w.Mu.Unlock()
		if kw.refs--; kw.refs > 0 || w.closed {
			return
		}
		kw.linger = time.AfterFunc(w.Cfg.Linger, func() {
			w.Mu.Lock()
			defer w.Mu.Unlock()
			if kw.refs == 0 && w.Keys[h.Key] == kw && !w.closed {
				delete(w.Keys, h.Key)
				w.queue(subOp{false, h.Key})
			}
		})
	})
}

// Events returns the channel closed at the next event. Take it before an
// attempt, so that an event during the attempt is not missed.
func (h *Watcher) Events() <-chan struct{} {
	if h == nil {
		return nil
	}
	h.W.Mu.Lock()
	defer h.W.Mu.Unlock()
	return h.Kw.Ch
}

// ReleasesSince returns the channel closed at the key's next notice, and
// how many releases the key had so far, read together: a waiter that acts
// only on a new release (LockMulti) tells one from a wake by a release's
// repeat, or by any other notice.
func (h *Watcher) ReleasesSince() (<-chan struct{}, int) {
	if h == nil {
		return nil, 0
	}
	h.W.Mu.Lock()
	defer h.W.Mu.Unlock()
	return h.Kw.Ch, h.Kw.releases
}

// SinceTaken returns what the reference saw when it was taken: the key's
// events channel (closed at the first event since), and how many releases
// the key and gaps its subscription had. A waiter that subscribes after
// its failed attempt counts from its watch, not from when it looks: its
// subscription may become active (a gap) or hear a release before it
// would have asked, and that wake may be the only one it gets: counted
// from later, the waiter would sleep its whole backoff with the key free.
func (h *Watcher) SinceTaken() (events <-chan struct{}, releases, gaps int) {
	if h == nil {
		return nil, 0, 0
	}
	return h.taken, h.takenReleases, h.takenGaps
}

// NodeReleases returns how many release notices of the key node
// announced so far.
func (h *Watcher) NodeReleases(node int) int {
	if h == nil {
		return 0
	}
	h.W.Mu.Lock()
	defer h.W.Mu.Unlock()
	if node >= len(h.Kw.NodeReleases) {
		return 0
	}
	return h.Kw.NodeReleases[node]
}

// ReleasedSince reports whether the key was released (its latest event),
// and a node announced a release since marks (by node, -1: not asked).
func (h *Watcher) ReleasedSince(marks []int) bool {
	if h == nil {
		return false
	}
	h.W.Mu.Lock()
	defer h.W.Mu.Unlock()
	if h.Kw.Latest != Released {
		return false
	}
	for n, m := range marks {
		if m >= 0 && n < len(h.Kw.NodeReleases) && h.Kw.NodeReleases[n] > m {
			return true
		}
	}
	return false
}

// Latest returns the key's latest event.
func (h *Watcher) Latest() event {
	if h == nil {
		return NoEvent
	}
	h.W.Mu.Lock()
	defer h.W.Mu.Unlock()
	return h.Kw.Latest
}

// HeldByOther reports whether the key's latest event is another Client's
// taking it.
func (h *Watcher) HeldByOther() bool {
	if h == nil {
		return false
	}
	h.W.Mu.Lock()
	defer h.W.Mu.Unlock()
	return h.Kw.Latest == Taken && h.Kw.foreign
}

// Approach tells how a Lock call should start.
func (h *Watcher) Approach() Approach {
	if h == nil {
		return AttemptNow
	}
	h.W.Mu.Lock()
	defer h.W.Mu.Unlock()
	kw := h.Kw
	switch {
	case kw.Latest == Taken && kw.foreign:
		return WaitFirst
	case kw.Latest == Released && time.Since(kw.othersAt) < h.W.Cfg.Linger:
		return JitterFirst
	}
	return AttemptNow
}

// Delay draws the wait before an attempt after a release, for a waiter that
// has seen age releases go to others. Waiters go in order of seniority: one
// slot for each release fewer than the recent winners had seen, plus a
// random part of a slot. The longest waiter thus usually goes first, and
// the next ones hear it take the key before their turn and stand down.
func (h *Watcher) Delay(age int) time.Duration {
	h.W.Mu.Lock()
	defer h.W.Mu.Unlock()
	kw := h.Kw
	slot := time.Duration(kw.Factor * float64(kw.Round))
	ahead := max(0, min(math.Round(kw.Depth)-float64(age), 64))
	// Never longer than the backoff could be: notices steer the order, the
	// timer bounds the wait.
	return min(time.Duration(ahead)*slot+rand.N(slot/2+1), h.W.Cfg.MaxDelay)
}

// Attempted records how long an attempt took and, for one made after a
// delay, whether it lost to another waiter's (which widens the window).
func (h *Watcher) Attempted(took time.Duration, delayed, lost bool) {
	if h == nil {
		return
	}
	h.W.Mu.Lock()
	defer h.W.Mu.Unlock()
	if h.Kw.Round == 0 {
		h.Kw.Round = took
	}
	h.Kw.Round += (took - h.Kw.Round) / 4
	if delayed && lost {
		h.Kw.Factor = min(1.25*h.Kw.Factor, maxSlotFactor)
	}
}

// StoodDown records that another waiter took the lock before this one's
// delay ran out: the slots separated them, so they may narrow a little.
func (h *Watcher) StoodDown() {
	h.W.Mu.Lock()
	defer h.W.Mu.Unlock()
	h.Kw.Factor = max(h.Kw.Factor*0.98, minSlotFactor)
}

// event records a new event and wakes the watchers. The release of a token
// other than the holder's is not news: it comes from a node whose notices
// lag, after a majority already gave the key to the next holder. Nor is a
// release already heard (from another node, or noted by Unlock), but while
// nobody took the key since, it wakes the watchers again: a release reaches
// the nodes one by one, and a waiter that tried on the first one's notice
// may have lost to the nodes it had not reached yet; this node's notice
// says it has now, so no waiter sleeps its longest backoff with the key
// free.
func (kw *KeyWatch) event(e event, foreign bool, token string) {
	switch e {
	case Released:
		if kw.Holder != "" && kw.Holder != token {
			return
		}
		if kw.wasReleased(token) {
			if kw.Latest == Released {
				kw.wake()
			}
			return
		}
		kw.released[kw.nextRel] = token
		kw.nextRel = (kw.nextRel + 1) % len(kw.released)
		kw.releases++
		kw.Holder = ""
	case Taken:
		kw.Holder = token
	}
	kw.Latest, kw.foreign = e, foreign
	kw.wake()
}

// wake wakes the key's waiters, to look at what they know again.
func (kw *KeyWatch) wake() {
	close(kw.Ch)
	kw.Ch = make(chan struct{})
}

func (kw *KeyWatch) wasReleased(token string) bool {
	for _, t := range kw.released {
		if t == token {
			return true
		}
	}
	return false
}

// vote counts node's announcement that it gave the key to token and returns
// how many distinct nodes did.
func (kw *KeyWatch) vote(token string, node, nodes int) int {
	for i := range kw.votes {
		v := &kw.votes[i]
		if v.token == token {
			if !v.nodes[node] {
				v.nodes[node] = true
				v.n++
			}
			return v.n
		}
	}
	v := &kw.votes[kw.nextVote]
	kw.nextVote = (kw.nextVote + 1) % len(kw.votes)
	*v = tokenVotes{token: token, nodes: make([]bool, nodes), n: 1}
	v.nodes[node] = true
	return 1
}

// The events a Watcher records of a key.
const (
	NoEvent  event = iota
	Released       // the last holder released the key
	Taken          // a majority of nodes gave the key to one token
)

// How a Lock call starts (Watcher.Approach).
const (
	AttemptNow  = core.AttemptNow  // no contention known: try at once
	JitterFirst = core.JitterFirst // just released, others are waiting: draw a delay
	WaitFirst   = core.WaitFirst   // another Client holds it: wait for the release
)
