package core

import "slices"

// A Retired is a waiter's Client's record of one of its tokens once the
// waiter is done waiting on it (it gave up, or took the lock a hand-off
// gave it): a hand-off may still land on a master after that, with the
// token nobody would release. It records, per master, whether the token is
// released there (or will be by the lock's Unlock), and the sweep that
// releases it on the others (R1–R3 in doc.go). The zero Retired is ready;
// it is not safe for concurrent use.
type Retired struct {
	released []bool // per master; nil: none yet
	sweeping bool   // the sweep is scheduled, or ran
	swept    bool   // it ran
}

// Heard records the masters heard handing the token the key before its
// waiter took the lock (nil: none): the lock's Unlock releases them.
func (r *Retired) Heard(heard []bool) {
	if heard == nil {
		return
	}
	r.grow(len(heard))
	for i, h := range heard {
		r.released[i] = r.released[i] || h
	}
}

// Late decides a hand-off notice that master, of n, put the token there
// after the waiter was done (R1, R2). held: the lock the token gave is not
// let go (nor unlocked, nor passed on); covered: its Unlock, which comes
// after the notice, releases master; decided: its Unlock is decided (true
// when there is no lock: the waiter gave up). release: release the token
// on master now; sweep: schedule the sweep, once per token, and again for a
// notice after it ran.
func (r *Retired) Late(master, n int, held, covered, decided bool) (release, sweep bool) {
	r.grow(n)
	release = !held && decided
	if !held {
		// A hand-off landed after the waiter was done with the token: a
		// round (another, from a holder that missed the withdrawal, may
		// follow or have come first) may have put it on any master, its
		// other notices lost. What was released before says nothing of
		// it: every master is to be released again, by a sweep of its own
		// if one ran.
		clear(r.released)
		r.sweeping = r.sweeping && !r.swept
		r.swept = false
	}
	sweep = !held && !r.sweeping
	r.released[master] = r.released[master] || covered || release
	r.sweeping = r.sweeping || sweep
	return release, sweep
}

// Unlocked decides, as the Unlock of the lock the token gave ends, whether
// to schedule the sweep of the masters never heard (R2): once, and only
// while one is not released.
func (r *Retired) Unlocked() (sweep bool) {
	if r.sweeping || r.released != nil && !slices.Contains(r.released, false) {
		return false
	}
	r.sweeping = true
	return true
}

// Sweep is the sweep running, over n masters: it returns those to release
// the token on (not released yet), and marks them all released (R2).
func (r *Retired) Sweep(n int) (release []bool) {
	r.grow(n)
	release = make([]bool, n)
	for i, done := range r.released {
		release[i] = !done
		r.released[i] = true
	}
	r.swept = true
	return release
}

// CutShort reports whether the sweep was scheduled and has not run: Close,
// which ends its wait, releases the token itself (R3).
func (r *Retired) CutShort() bool { return r.sweeping && !r.swept }

// Unheard reports whether master was never heard handing the token the
// key, nor released it.
func (r *Retired) Unheard(master int) bool { return r.released == nil || !r.released[master] }

func (r *Retired) grow(n int) {
	if r.released == nil {
		r.released = make([]bool, n)
	}
}
