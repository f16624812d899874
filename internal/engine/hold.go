// The hold: one acquire call on one master, tracked past its round: what
// it left there, whether it may still be sent, and what a later Extend,
// hand-off or Unlock may ask of the master.

package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// A hold is one node's part in one lock: the state of its acquire call, so
// that neither a failed attempt nor Unlock can miss a key set by a reply that
// arrived after the round was decided.
//
// Exactly one side releases the node: whoever comes second of "the acquire
// call returned" (finish) and "the lock gave the node up" (abandon). When the
// late side is the acquire goroutine itself, its release is sent after its
// SET was answered, never before it on another connection.
type hold struct {
	born atomic.Int64 // which memory of the master holds our key (guard.go); 0: unknown

	mu sync.Mutex
	// done is closed when the acquire call returned. A call that asks the
	// node again (retake) replaces it with an open one: read it under mu.
	done      chan struct{}
	mayHold   bool // it returned yes or an error: the key may hold our token
	abandoned bool // the lock gave this node up: a late yes must be released
	// reserved: the acquisition decided without asking this node (quorumfirst.go)
	// and nothing was sent; Extend may still ask it (ask), and until then
	// the node counts as one that refused.
	reserved bool
	// retake: the key may be missing here while the lock holds (a call to
	// take it failed or found it taken, or a hand-off left the master
	// free), so Extend asks the node to take it again (ask), with the
	// acquire script, which also lengthens our key where it is.
	retake bool
	// closed: Unlock began, and no Extend asks the node any more
	// (giveUpReserved), whatever a call already asking it answers.
	closed bool
	// unheard: the lock was taken on a hand-off's notices, none of them
	// from this node (markUnheard), and nothing told of our token here
	// since: Unlock's rounds hold it back, as a reserve.
	unheard bool
}

func newHolds(n int) []*hold {
	hs, all := make([]*hold, n), make([]hold, n) // two allocations, not n+1
	for i := range hs {
		all[i].done = make(chan struct{})
		hs[i] = &all[i]
	}
	return hs
}

// finish records the acquire call's result and reports whether the caller
// must now release the node, because the lock already gave it up.
func (h *hold) finish(yes bool, err error) (release bool) { return h.finishCall(false, yes, err) }

// finishCall is finish; take: the call asked the node to take the key
// after the lock was won (Extend's, through ask), and unless it said yes,
// a later Extend may ask again.
func (h *hold) finishCall(take, yes bool, err error) (release bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if take {
		h.retake = !yes
	}
	if yes {
		h.unheard = false
	}
	h.mayHold = yes || err != nil
	close(h.done)
	return h.abandoned && h.mayHold
}

// finishUnsent records that the call was never sent, and reports whether
// the caller must release the node. The key is as the node's last call left
// it: nothing for an acquisition's, but a call that asks the node again
// (take) may follow one that failed after setting our key.
func (h *hold) finishUnsent(take bool) (release bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if take {
		h.retake = true
	}
	close(h.done)
	return h.abandoned && h.mayHold
}

func (h *hold) finished() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.finishedLocked()
}

func (h *hold) finishedLocked() bool {
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

// abandon gives the node up and reports whether the caller must release it
// now: only when the acquire call already returned and may have set the key.
// If the call is still running, finish will report the release to it.
func (h *hold) abandon() (release bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.abandoned {
		return false
	}
	h.abandoned = true
	return h.finishedLocked() && h.mayHold
}

// Send reports whether the acquire call may still be sent: not when the
// lock already gave the node up, as happens when a goroutine starts late,
// after the round was decided and the lock released. A request never sent
// needs no release, and cannot hold the key against the next holder.
func (h *hold) Send() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.abandoned
}

// refused reports whether the node's acquire call answered no, or was
// never sent (reserved), so the key there is known not to hold our token.
func (h *hold) refused() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reserved || h.finishedLocked() && !h.mayHold
}

// reserve records that the acquisition decided without asking the node.
func (h *hold) reserve() {
	h.mu.Lock()
	h.reserved = true
	h.mu.Unlock()
}

// mayRetake records that the key may be missing here although the lock
// holds: a hand-off left the master free (Client.handedLock).
func (h *hold) mayRetake() {
	h.mu.Lock()
	h.retake = true
	h.mu.Unlock()
}

// markUnheard records, for a lock taken on a hand-off's notices, that no
// notice told of our token on the node: Unlock's rounds ask the node only
// when the others cannot decide them alone, and the sweep of the nodes
// never heard releases it otherwise (Client.narrowHanded). Extend and Fence
// ask it as any other.
func (h *hold) markUnheard() {
	h.mu.Lock()
	h.unheard = true
	h.mu.Unlock()
}

// tokenSeen records that a notice, or an Extend's yes, told of our token on
// the node, so that Unlock asks it as one that holds it, even where its
// last call answered no (an Extend asked it to take the key before the
// hand-off landed: an adversary review), and reports whether Unlock does:
// not while an Extend's call asks it (its answer decides), and the sweep
// then releases it.
func (h *hold) tokenSeen() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unheard = false
	if !h.finishedLocked() {
		return false
	}
	h.mayHold = true
	return true
}

// isUnheard reports whether the node is unheard (markUnheard), whatever
// its last call answered: a hand-off may have put our token there since,
// with a notice this Client missed.
func (h *hold) isUnheard() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.unheard && !h.reserved
}

// giveUpReserved ends the asking: no Extend asks the node after this. It
// gives the node up if it is reserved, and reports whether it was: nothing
// was sent there. A call already asking it keeps the hold pending, for
// Unlock to wait on.
func (h *hold) giveUpReserved() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	if h.reserved {
		h.abandoned = true
	}
	return h.reserved
}

// askable reports whether ask would take the node now.
func (h *hold) askable() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.abandoned && !h.closed && (h.reserved || h.retake && h.finishedLocked())
}

// ask takes the node for an acquire call of its own (Extend's): a
// reserved node, or one to take again (retake) whose last call returned.
// false when neither, or the lock gave it up. After true, the call must
// finish the hold with finishCall(true, …); until then the hold is pending again,
// and await waits for it.
func (h *hold) ask() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.abandoned || h.closed:
		return false
	case h.reserved:
		h.reserved = false
		return true
	case h.retake && h.finishedLocked():
		h.retake = false
		h.done = make(chan struct{})
		return true
	}
	return false
}

// await waits, within ctx, for the acquire call on this node, so that an
// Extend or Unlock right after a lock was won does not overtake a SET that
// is still on its way: the node was merely slower than the majority. It
// returns ErrNodeRefused when the node refused the lock, and ctx's error if
// the call is still running.
func (h *hold) await(ctx context.Context) error {
	h.mu.Lock()
	reserved, done := h.reserved, h.done
	h.mu.Unlock()
	if reserved {
		// Never sent: nothing to wait for. An Extend that asks it now
		// finishes the hold itself, and releases the node if the lock gave
		// it up meanwhile.
		return ErrNodeRefused
	}
	select {
	case <-done: // an answer already in beats a ctx that also ended
	default:
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if h.refused() {
		return ErrNodeRefused
	}
	return nil
}

// refusedNodes marks the nodes that refused the lock when it was taken:
// Extend and Unlock need not ask them, and count them as refusals.
func (l *Lock) refusedNodes() []error {
	skip := make([]error, len(l.holds))
	for i, h := range l.holds {
		if h.refused() {
			skip[i] = ErrNodeRefused
		}
	}
	return skip
}

// unheardNodes are, a bit per node, the nodes of a lock taken on a
// hand-off's notices that none came from (Client.narrowHanded): Unlock's
// rounds hold them back (fanOutQuorumFirst's reserve), asking them only
// when the others cannot decide the round alone; the sweep of the nodes
// never heard releases our token on those never asked. (Left out
// altogether, they made an Unlock report a lock held on a majority as not
// held when one heard master failed and our token was on an unheard one,
// whose notices this Client missed: an adversary review.)
func (l *Lock) unheardNodes() (mask uint64) {
	for i, h := range l.holds {
		if h.isUnheard() {
			mask |= 1 << i
		}
	}
	return mask
}

// unlockReserves are the reserves of one of Unlock's rounds (unheardNodes)
// and how long the round waits for the other nodes before it asks them
// (hedgeAfter; ttl is the round's): three of the Client's usual rounds.
// None until the Client has timed a round: half the node deadline would
// leave a reserve asked then too little of its own (an adversary review: a
// heard master hung and an unheard one answering in 600 ms of a 1 s node
// deadline, the Unlock reported a lock held on a majority as not held).
// None either when the validity left is less than twice the hedge, since
// the round counts only if decided within it (a second review: with two
// heard masters hung, an Unlock 100 ms before the end waited out a 125 ms
// hedge). A reserve still gets the node deadline less the hedge to answer.
func (l *Lock) unlockReserves(ttl time.Duration) (reserve uint64, hedge time.Duration) {
	if reserve = l.unheardNodes(); reserve == 0 || l.c.usualRound.Load() == 0 {
		return 0, 0
	}
	hedge = l.c.hedgeAfter(ttl)
	l.mu.Lock()
	left := time.Until(l.until)
	l.mu.Unlock()
	if left < 2*hedge {
		return 0, 0
	}
	return reserve, hedge
}

// giveUpReserves gives up the nodes the acquisition never asked
// (quorumfirst.go), and ends the asking of those to take again, so that no
// Extend asks them after Unlock began.
func (l *Lock) giveUpReserves() {
	if !l.widens {
		return // no hold to give up: nothing on Unlock's path by default
	}
	for _, h := range l.holds {
		h.giveUpReserved()
	}
}

// extendSkips is refusedNodes for Extend, which asks the nodes the
// acquisition never asked, or where the key may be missing, to take the
// key (quorumfirst.go), when it lengthens the lock.
func (l *Lock) extendSkips(lengthens bool) (skip []error, widen bool) {
	skip = l.refusedNodes()
	if !l.widens || !lengthens {
		return skip, false
	}
	for i, h := range l.holds {
		if h.askable() {
			skip[i], widen = nil, true
		}
	}
	return skip, widen
}

// refusalAsVote turns ErrNodeRefused into a no vote (false, nil) for fanOut.
func refusalAsVote(err error) error {
	if errors.Is(err, ErrNodeRefused) {
		return nil
	}
	return err
}
