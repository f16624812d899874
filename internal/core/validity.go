package core

import (
	"math"
	"time"
)

// ClockPrecision is the fixed part of the drift allowance: Redis expires
// keys with millisecond resolution, so the spec adds 2 ms to the
// proportional part.
const ClockPrecision = 2 * time.Millisecond

// Quorum is the majority of n masters: n/2+1 (I1).
func Quorum(n int) int { return n/2 + 1 }

// Witnessed is how many of n masters must report their memory, none older,
// before a young yes counts (I4): n − Quorum(n) + 2, at most n. Any
// majority that granted a lock still alive then shares at least two
// masters with the reports, each remembering since before that lock unless
// it lost its data; so as long as at most one master lost its data within
// the guard, one of them reports an older memory (I3). Fewer reports do
// not tell a master that lost its data from masters never marked (every
// script that could mark them failed, or never reached them): all look as
// young as each other.
func Witnessed(n int) int { return min(n, n-Quorum(n)+2) }

// NeedsWitnesses reports whether an extension round of a lock on n masters
// must also ask the masters that refused the lock (refused of them) for
// their memory's report, when known of the others are known to hold its
// key with a memory they reported: under the guard, with fewer than
// Witnessed(n) known, a young yes could not count without them (I4).
func NeedsWitnesses(refused, known, n int) bool { return refused > 0 && known < Witnessed(n) }

// Drift is the time a lock of the given ttl gives up for clock drift:
// ttl·factor + 2 ms (Redlock spec, step 3). factor must be in [0, 1) and ttl
// non-negative; the result is then in [ClockPrecision, ttl+ClockPrecision).
func Drift(ttl time.Duration, factor float64) time.Duration {
	// ttl·factor < ttl for factor < 1, and float64 rounding can push a
	// product near MaxInt64 up to 2^63, which does not convert back.
	d := float64(ttl) * factor
	if d >= math.MaxInt64-float64(ClockPrecision) {
		return math.MaxInt64
	}
	return time.Duration(d) + ClockPrecision
}

// Validity is how long a lock can still be trusted once its acquisition
// took elapsed: ttl − elapsed − drift (Redlock spec, step 3). A result ≤ 0
// means the lock must be treated as not obtained. elapsed is measured on
// the monotonic clock from before the first request to the deciding reply,
// so it is never negative; the subtraction saturates instead of wrapping.
func Validity(ttl, elapsed time.Duration, factor float64) time.Duration {
	return SubSat(SubSat(ttl, elapsed), Drift(ttl, factor))
}

// ValidUntil is the end of a lock's validity when its acquisition started
// at start: start + ttl − drift (I2). It does not depend on how long the
// acquisition took, since every key was set after start and so expires
// after start+ttl.
func ValidUntil(start time.Time, ttl time.Duration, factor float64) time.Time {
	return start.Add(SubSat(ttl, Drift(ttl, factor)))
}

// SubSat returns a − b for non-negative b, saturating at math.MinInt64.
func SubSat(a, b time.Duration) time.Duration {
	if a < math.MinInt64+b {
		return math.MinInt64
	}
	return a - b
}

// Lease decides the lock of an acquisition round that started at start and
// was decided at decided: ok when the round was won (I1) with validity left
// (Redlock spec, step 3), and then the lock is valid until ValidUntil(start)
// (I2).
func Lease(won bool, start, decided time.Time, ttl time.Duration, factor float64) (until time.Time, ok bool) {
	if !won || Validity(ttl, decided.Sub(start), factor) <= 0 {
		return time.Time{}, false
	}
	return ValidUntil(start, ttl, factor), true
}

// An Extension is what an extension round means for a lock.
type Extension int

// The kinds of Extension.
const (
	Extended  Extension = iota + 1 // won in time: the lock lives until the later end
	Undecided                      // neither: the lock may still be held until its end
	Lost                           // no majority holds the token, or the round ended after the lock
)

// Released reports whether an Unlock's round (a release, or a hand-off)
// proves the lock was held to its end: won, and decided before until (I7).
func Released(won bool, decided, until time.Time) bool { return won && decided.Before(until) }

// Extend decides an extension round of a lock valid until until, over n
// masters: started at start, decided at decided, won or not (I1), with
// refused masters saying the token is gone. Won before until with
// validity left, the lock lives until the later of until and
// ValidUntil(start) (I6: an extension never moves the end earlier, and
// never revives a lock whose end passed, since the keys of a round decided
// after it may have expired and been taken). Lost, it ends at the earlier
// of until and decided.
func Extend(until time.Time, won bool, refused, n int, start, decided time.Time, ttl time.Duration, factor float64) (time.Time, Extension) {
	settled := refused > n-Quorum(n) || !decided.Before(until)
	switch {
	case won && !settled && Validity(ttl, decided.Sub(start), factor) > 0:
		if end := ValidUntil(start, ttl, factor); end.After(until) {
			return end, Extended
		}
		return until, Extended
	case !settled:
		return until, Undecided
	case decided.Before(until):
		return decided, Lost
	}
	return until, Lost
}

// Handed decides the validity of a lock that a hand-off to another
// Client's waiter gave it (I8). Every hand-off to the waiter's token ran
// after the waiter first announced it, at first, so every key it set
// expires after first + ttl: the lock is valid until ValidUntil(first,
// ttl, factor). When less than half the ttl is left of that at now,
// confirm is true and until zero: the waiter confirms the key with an
// extension round of its own, and the lock is valid from that round's
// start, as after any acquisition.
func Handed(first, now time.Time, ttl time.Duration, factor float64) (until time.Time, confirm bool) {
	if Validity(ttl, now.Sub(first), factor) < ttl/2 {
		return time.Time{}, true
	}
	return ValidUntil(first, ttl, factor), false
}
