package core

import "time"

// An Approach is what a waiting Lock call does next (Waiter.State).
type Approach int

// A waiting Lock call's states.
const (
	AttemptNow  Approach = iota // make an attempt
	JitterFirst                 // just released, others are waiting: wait out a contention delay
	WaitFirst                   // another Client holds it: wait for the release, or a hand-off
	HandedOver                  // a hand-off gave the call's want the key: take the lock
)

// A Wake is what ended a waiter's sleep.
type Wake int

// What ends a waiter's sleep.
const (
	Fired    Wake = iota // its timer
	Noticed              // the key's next notice
	HandedTo             // a majority of masters handed the key to its want
)

// Heard is what the key's watch knows when a waiter's event is decided.
type Heard struct {
	Released    bool // the latest notice: the last holder released the key
	Taken       bool // the latest notice: a majority gave the key to one token
	HeldByOther bool // another Client holds the key, as far as the notices tell
	Subscribed  bool // the watch hears every master
	Gaps        int  // how many times the watch may have missed notices
}

// A TimerKind is how the shell arms a waiter's timer (Timer).
type TimerKind int

// How a waiter's timer is armed.
const (
	Keep       TimerKind = iota // leave it as it is
	Backoff                     // the backoff after the N-th failed attempt, from 0
	Longest                     // the longest backoff
	Contention                  // the contention delay of a waiter that saw N releases go to others
)

// A Timer is what a waiter's event asks of its timer.
type Timer struct {
	Kind TimerKind
	N    int
}

// An Announcement is a waiter's want, as it sends it to other Clients'
// holders: its token, and when it was first and last sent. The zero
// Announcement is none.
type Announcement struct {
	Token     string
	First, At time.Time
}

// A Waiter is one Lock call's wait for a contended key: its attempts, the
// waits between them, and its want (A1–A4 in doc.go). The shell (the
// engine's wait loop) makes the attempts, sends the announcements, arms the
// timer and reads the watch; it feeds the Waiter what happened, and does
// what it returns. It is not safe for concurrent use.
type Waiter struct {
	State   Approach
	Out     Announcement // its want; zero: none
	fails   int          // failed attempts
	age     int          // releases seen go to other waiters
	delayed bool         // the next attempt follows a contention delay
	held    bool         // an attempt made while subscribed found the key held by one holder, and no release was heard since
	// gaps is the watch's Gaps as of the last attempt. When it moves, a
	// release since may have gone unheard, and a holder that took the key
	// quietly will announce its release only if marked: the waiter tries
	// again, and takes the key or marks it for its holder's release.
	gaps int
}

// Start begins the wait where the watch's approach says (a WaitFirst when
// backOffFirst), and returns what to arm the timer with. A call that starts
// by waiting trusts what the watch heard so far.
func (w *Waiter) Start(a Approach, backOffFirst bool, h Heard) Timer {
	w.State, w.gaps = a, h.Gaps
	if backOffFirst {
		w.State = WaitFirst
	}
	switch w.State {
	case JitterFirst:
		return Timer{Contention, 0}
	case WaitFirst:
		return w.waitForRelease(h)
	}
	return Timer{}
}

// Age is how many releases the waiter saw go to other waiters.
func (w *Waiter) Age() int { return w.age }

// Delayed reports whether the next attempt follows a contention delay.
func (w *Waiter) Delayed() bool { return w.delayed }

// Probes reports whether the attempt about to be made first asks the
// masters whether a hand-off gave the want the key with notices the Client
// did not hear (A3): every attempt but one after a contention delay.
func (w *Waiter) Probes() bool { return !w.delayed }

// Failed records an attempt that lost the round: heldByOne, its refusals
// named one holder for a majority; subscribed and gaps, the watch as the
// attempt began. It returns what to arm the timer with.
func (w *Waiter) Failed(heldByOne, subscribed bool, gaps int, h Heard) Timer {
	w.held = subscribed && heldByOne
	w.gaps = gaps
	w.fails++
	w.delayed = false
	return w.waitForRelease(h)
}

// NotHanded records a hand-off the waiter could not take (its confirmation
// lost): it waits again.
func (w *Waiter) NotHanded(h Heard) Timer { return w.waitForRelease(h) }

// Woke decides a sleep that k ended, in WaitFirst or JitterFirst, and
// returns what to arm the timer with, and whether the waiter stood down: a
// JitterFirst waiter whose slot another took (the shell tells the watch).
func (w *Waiter) Woke(k Wake, h Heard) (t Timer, stoodDown bool) {
	switch {
	case k == HandedTo:
		w.State = HandedOver
	case w.State == JitterFirst && k == Fired:
		w.State, w.delayed = AttemptNow, true
	case w.State == JitterFirst && h.Taken:
		return w.waitForRelease(h), true
	case w.State == JitterFirst:
	case k == Fired:
		w.State = AttemptNow
	case h.Released:
		w.held = false
		w.age++
		w.State = JitterFirst
		return Timer{Contention, w.age}, false
	case h.Gaps != w.gaps && h.Subscribed:
		// A2: notices may have gone unheard, a hand-off's among them:
		// probe, then attempt; other Clients may have missed notices too,
		// and doubt the want (W2): it goes out again.
		w.State, w.delayed = AttemptNow, false
		w.Out.At = time.Time{}
	}
	return Timer{}, false
}

// Announcing reports whether the want goes out now (A1): it was never
// sent, it is doubted, or it was last sent refresh ago or more.
func (w *Waiter) Announcing(now time.Time, refresh time.Duration) bool {
	return w.Out.At.IsZero() || now.Sub(w.Out.At) >= refresh
}

// Announced records the want sent at now, a new one with token when none
// is out; now is read before the copy is sent. The first announcement
// stamps First, which a hand-off's validity counts from (I8), and no
// repetition moves it (A1); it re-arms the timer (the returned Timer).
func (w *Waiter) Announced(token string, now time.Time, h Heard) Timer {
	if w.Out.Token == "" {
		w.Out.Token = token
	}
	w.Out.At = now
	if !w.Out.First.IsZero() {
		return Timer{}
	}
	w.Out.First = now
	return w.timeout(h)
}

// Over ends the want (served, or withdrawn) and returns it.
func (w *Waiter) Over() Announcement {
	a := w.Out
	w.Out = Announcement{}
	return a
}

// waitForRelease moves to WaitFirst and returns its timer (A4).
func (w *Waiter) waitForRelease(h Heard) Timer {
	w.State = WaitFirst
	return w.timeout(h)
}

// timeout is how long the waiter waits before its next attempt (A4): the
// backoff after its latest failed attempt (the k-th, from 0); or, while its want is out and another Client holds the key (its
// notices said so, or an attempt made while subscribed found it held by
// one holder, and no release was heard since), the longest backoff: that
// holder hands the key over without the timer, which is then only for
// lost notices. A key released before the Client's subscription is free
// with nobody to hand it over: the backoff finds it.
func (w *Waiter) timeout(h Heard) Timer {
	if !w.Out.First.IsZero() && (w.held || h.HeldByOther) {
		return Timer{Kind: Longest}
	}
	return Timer{Backoff, max(w.fails-1, 0)}
}

// HeldByOne reports whether a failed attempt's refusals name one holder
// for at least quorum masters: holders[i] is master i's refusal's holder
// fingerprint, 0 when it did not refuse for a named holder. Refusals for
// different holders (other waiters' leftovers, each its own token, lost in
// a split vote and being released silently) say nothing of the sort:
// waiting for a hand-off then would wait the longest backoff for one nobody
// makes.
func HeldByOne(holders []int64, quorum int) bool {
	for i, a := range holders {
		if a == 0 {
			continue
		}
		n := 0
		for _, b := range holders[i:] {
			if b == a {
				n++
			}
		}
		if n >= quorum {
			return true
		}
	}
	return false
}
