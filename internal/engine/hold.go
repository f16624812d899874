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

	"github.com/redlock-go/redlock/internal/core"
)

// A hold is one node's part in one lock: core.Hold (H1–H4 there), under a
// mutex, with the channel that tells when the call returned. Exactly one
// side releases the node: whoever comes second of "the call returned"
// (finish) and "the lock gave the node up" (abandon). When the late side
// is the call's goroutine itself, its release is sent after its SET was
// answered, never before it on another connection.
type hold struct {
	born atomic.Int64 // which memory of the master holds our key (guard.go); 0: unknown

	mu sync.Mutex
	// returned says that the call returned; a call that asks the node
	// again (ask) makes it false again. done, made only when somebody
	// waits (doneChan), is closed when it turns true. Both under mu.
	returned bool
	done     chan struct{}
	st       core.Hold
}

func newHolds(n int) []*hold {
	hs, all := make([]*hold, n), make([]hold, n) // two allocations, not n+1
	for i := range hs {
		all[i].st = core.NewHold()
		hs[i] = &all[i]
	}
	return hs
}

// doneChan returns a channel closed once the call returned (closedChan,
// lock.go's, when it has). Called with mu held.
func (h *hold) doneChan() chan struct{} {
	if h.returned {
		return closedChan
	}
	if h.done == nil {
		h.done = make(chan struct{})
	}
	return h.done
}

// markReturned records that the call returned, and wakes its waiters.
// Called with mu held.
func (h *hold) markReturned() {
	h.returned = true
	if h.done != nil {
		close(h.done)
		h.done = nil
	}
}

// finish records the acquire call's result and reports whether the caller
// must now release the node, because the lock already gave it up.
func (h *hold) finish(yes bool, err error) (release bool) { return h.finishCall(false, yes, err) }

// finishCall is finish; take: the call asked the node to take the key
// after the lock was won (Extend's, through ask).
func (h *hold) finishCall(take, yes bool, err error) (release bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	release = h.st.Finish(take, yes, err != nil)
	h.markReturned()
	return release
}

// finishUnsent records that the call was never sent (core.Hold.FinishUnsent).
func (h *hold) finishUnsent(take bool) (release bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	release = h.st.FinishUnsent(take)
	h.markReturned()
	return release
}

func (h *hold) finished() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.st.Finished()
}

// locked runs f on the hold's state under its mutex.
func (h *hold) locked(f func(*core.Hold) bool) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return f(&h.st)
}

// abandon gives the node up (core.Hold.Abandon).
func (h *hold) abandon() (release bool) { return h.locked((*core.Hold).Abandon) }

// Send reports whether the call may still be sent (core.Hold.Send).
func (h *hold) Send() bool { return h.locked((*core.Hold).Send) }

// refused reports whether the node's call answered no, or was never sent
// (core.Hold.Refused).
func (h *hold) refused() bool { return h.locked((*core.Hold).Refused) }

// reserve records that the acquisition decided without asking the node.
func (h *hold) reserve() {
	h.mu.Lock()
	h.st.Reserve()
	h.mu.Unlock()
}

// mayRetake records that the key may be missing here although the lock
// holds: a hand-off left the master free (Client.handedLock).
func (h *hold) mayRetake() {
	h.mu.Lock()
	h.st.MayRetake()
	h.mu.Unlock()
}

// markUnheard records that no hand-off notice told of our token on the
// node (core.Hold.MarkUnheard; Client.narrowHanded).
func (h *hold) markUnheard() {
	h.mu.Lock()
	h.st.MarkUnheard()
	h.mu.Unlock()
}

// tokenSeen records that a notice, or an Extend's yes, told of our token on
// the node (core.Hold.TokenSeen), and reports whether Unlock asks it.
func (h *hold) tokenSeen() bool { return h.locked((*core.Hold).TokenSeen) }

// isUnheard reports whether the node is unheard (core.Hold.IsUnheard).
func (h *hold) isUnheard() bool { return h.locked((*core.Hold).IsUnheard) }

// giveUpReserved ends the asking (core.Hold.GiveUpReserved).
func (h *hold) giveUpReserved() bool { return h.locked((*core.Hold).GiveUpReserved) }

// askable reports whether ask would take the node now.
func (h *hold) askable() bool { return h.locked((*core.Hold).Askable) }

// ask takes the node for a call of its own (core.Hold.Ask). After true,
// the call must finish the hold with finishCall(true, …); until then the
// hold is pending again, and await waits for it.
func (h *hold) ask() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	ok, reopened := h.st.Ask()
	if reopened {
		h.returned = false
	}
	return ok
}

// await waits, within ctx, for the acquire call on this node, so that an
// Extend or Unlock right after a lock was won does not overtake a SET that
// is still on its way: the node was merely slower than the majority. It
// returns ErrNodeRefused when the node refused the lock, and ctx's error if
// the call is still running.
func (h *hold) await(ctx context.Context) error {
	h.mu.Lock()
	reserved, done := h.st.Reserved(), h.doneChan()
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
// never heard releases our token on those never asked. They are held
// back, not left out: when a heard master fails, our token may be on an
// unheard one whose notices this Client missed, and the Unlock needs it to
// report a lock held on a majority as held.
func (l *Lock) unheardNodes() (mask uint64) {
	for i, h := range l.holds {
		if h.isUnheard() {
			mask |= 1 << i
		}
	}
	return mask
}

// unlockReserves are the reserves of one of Unlock's rounds, and how long
// the round waits for the other nodes before it asks them
// (core.UnlockReserves, I14): the nodes never heard (unheardNodes), after
// three of the Client's usual rounds (hedgeAfter; ttl is the round's). A
// reserve still gets the node deadline less the hedge to answer.
func (l *Lock) unlockReserves(ttl time.Duration) (reserve uint64, hedge time.Duration) {
	unheard := l.unheardNodes()
	if unheard == 0 {
		return 0, 0
	}
	l.mu.Lock()
	left := time.Until(l.until)
	l.mu.Unlock()
	return core.UnlockReserves(unheard, l.c.usualRound.Load() != 0, l.c.hedgeAfter(ttl), left)
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
