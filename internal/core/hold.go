package core

// A Hold is one master's part in one lock: the state of the call that
// asked it to take the key, tracked past its round, so that neither a
// failed attempt nor Unlock misses a key a late reply set (H1–H4 in
// doc.go). The shell keeps it under a mutex, with a channel closed when
// the call returns; NewHold's is pending. It is not safe for concurrent
// use.
type Hold struct {
	pending   bool // the call has not returned
	mayHold   bool // it returned yes or an error: the key may hold our token
	abandoned bool // the lock gave this master up: a late yes must be released
	// reserved: the acquisition decided without asking this master
	// (quorum-first) and nothing was sent; Extend may still ask it (Ask),
	// and until then it counts as one that refused.
	reserved bool
	// retake: the key may be missing here while the lock holds (a call to
	// take it failed or found it taken, or a hand-off left the master
	// free), so Extend asks the master to take it again (Ask), with the
	// acquire script, which also lengthens our key where it is.
	retake bool
	// closed: Unlock began, and no Extend asks the master any more
	// (GiveUpReserved), whatever a call already asking it answers.
	closed bool
	// unheard: the lock was taken on a hand-off's notices, none of them
	// from this master (MarkUnheard), and nothing told of our token here
	// since: Unlock's rounds hold it back, as a reserve.
	unheard bool
}

// NewHold returns the hold of a call on its way.
func NewHold() Hold { return Hold{pending: true} }

// Finish records the call's result (yes; failed: an error, so the key may
// be set) and reports whether the caller must now release the master,
// because the lock already gave it up (H1). take: the call asked the
// master to take the key after the lock was won (Extend's, through Ask),
// and unless it said yes, a later Extend may ask again.
func (h *Hold) Finish(take, yes, failed bool) (release bool) {
	if take {
		h.retake = !yes
	}
	if yes {
		h.unheard = false
	}
	h.mayHold = yes || failed
	h.pending = false
	return h.abandoned && h.mayHold
}

// FinishUnsent records that the call was never sent, and reports whether
// the caller must release the master. The key is as the master's last call
// left it: nothing for an acquisition's, but a call that asks the master
// again (take) may follow one that failed after setting our key.
func (h *Hold) FinishUnsent(take bool) (release bool) {
	if take {
		h.retake = true
	}
	h.pending = false
	return h.abandoned && h.mayHold
}

// Finished reports whether the call returned.
func (h *Hold) Finished() bool { return !h.pending }

// Abandon gives the master up and reports whether the caller must release
// it now: only when the call already returned and may have set the key
// (H1). If the call is still running, Finish reports the release to it.
func (h *Hold) Abandon() (release bool) {
	if h.abandoned {
		return false
	}
	h.abandoned = true
	return !h.pending && h.mayHold
}

// Send reports whether the call may still be sent (H2): not once the lock
// gave the master up, as when a goroutine starts late, after the round was
// decided and the lock released. A request never sent needs no release,
// and cannot hold the key against the next holder.
func (h *Hold) Send() bool { return !h.abandoned }

// Refused reports whether the call answered no, or was never sent
// (reserved), so the key there is known not to hold our token.
func (h *Hold) Refused() bool {
	return h.reserved || !h.pending && !h.mayHold
}

// Reserve records that the acquisition decided without asking the master.
func (h *Hold) Reserve() { h.reserved = true }

// Reserved reports whether the master is held in reserve: never asked.
func (h *Hold) Reserved() bool { return h.reserved }

// MayRetake records that the key may be missing here although the lock
// holds: a hand-off left the master free.
func (h *Hold) MayRetake() { h.retake = true }

// MarkUnheard records, for a lock taken on a hand-off's notices, that no
// notice told of our token on the master: Unlock's rounds ask it only when
// the others cannot decide them alone (H4). Extend and Fence ask it as any
// other.
func (h *Hold) MarkUnheard() { h.unheard = true }

// TokenSeen records that a notice, or an Extend's yes, told of our token on
// the master, so that Unlock asks it as one that holds it, even where its
// last call answered no (H4), and reports whether Unlock does: not while a
// call asks it (its answer decides).
func (h *Hold) TokenSeen() bool {
	h.unheard = false
	if h.pending {
		return false
	}
	h.mayHold = true
	return true
}

// IsUnheard reports whether the master is unheard (MarkUnheard), whatever
// its last call answered: a hand-off may have put our token there since,
// with a notice this Client missed.
func (h *Hold) IsUnheard() bool { return h.unheard && !h.reserved }

// GiveUpReserved ends the asking (H3): no Extend asks the master after
// this. It gives the master up if it is reserved, and reports whether it
// was: nothing was sent there. A call already asking it stays pending.
func (h *Hold) GiveUpReserved() bool {
	h.closed = true
	if h.reserved {
		h.abandoned = true
	}
	return h.reserved
}

// Askable reports whether Ask would take the master now.
func (h *Hold) Askable() bool {
	return !h.abandoned && !h.closed && (h.reserved || h.retake && !h.pending)
}

// Ask takes the master for a call of its own (Extend's, H3): a reserved
// master, or one to take again (retake) whose last call returned. false
// when neither, or the lock gave it up, or Unlock began. After true, the
// call must finish the hold with Finish(true, …); reopened: the hold is
// pending again (the shell opens a new channel).
func (h *Hold) Ask() (ok, reopened bool) {
	switch {
	case h.abandoned || h.closed:
		return false, false
	case h.reserved:
		h.reserved = false
		return true, false
	case h.retake && !h.pending:
		h.retake = false
		h.pending = true
		return true, true
	}
	return false, false
}
