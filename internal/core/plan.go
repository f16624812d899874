package core

import "time"

// TrustedHandOff reports whether a hand-off of a valid lock to a TTL of
// nttl may skip the restart guard's memory report where the key holds the
// lock's token (I9). shortest is the shortest TTL any script recorded in
// the marker as it set or extended the lock's keys: when nttl is no
// longer, the marker already covers the new key, as the guard's length
// needs. (No other lock was valid since our key was set on such a master,
// in its present memory; any later holder must win a majority that meets
// one of the new lock's masters, whose guard is that holder's to apply.)
func TrustedHandOff(nttl, shortest time.Duration) bool { return nttl <= shortest }

// RoundEnd is when a round of a lock of ttl, started at start, stops
// waiting for the masters (I10): at the node deadline, start +
// nodeTimeout, but never past the end of the validity it could win, since
// a later yes would be worthless.
func RoundEnd(start time.Time, nodeTimeout, ttl time.Duration, factor float64) time.Time {
	d := start.Add(nodeTimeout)
	if end := ValidUntil(start, ttl, factor); end.Before(d) {
		return end
	}
	return d
}

// Reserves returns the masters a quorum-first round on a key holds in
// reserve, a bit per master: all but Quorum(n), the preferred ones. 0:
// every master is asked at once (I11). A round holds masters back only
// under the restart guard, with quorumFirst and 3 to 64 masters: without
// the guard, a master that restarts empty would take a lock on a bare
// majority down with it. The preferred masters are the first by a
// rendezvous hash of the key (keyHash, KeyHash) and each master's seed,
// the slow ones last, so that Clients contending for a key ask the same
// ones first and keys spread evenly.
// slow has a bit per master asked after the others.
func Reserves(n int, guarded, quorumFirst bool, keyHash uint64, seeds []uint64, slow uint64) uint64 {
	if !HoldsReserves(n, guarded, quorumFirst) {
		return 0
	}
	var chosen uint64
	for range Quorum(n) {
		best, bestSlow, bestRank := -1, false, uint64(0)
		for i := range n {
			if chosen&(1<<i) != 0 {
				continue
			}
			isSlow, rank := slow&(1<<i) != 0, mix64(keyHash^seeds[i])
			if best < 0 || (bestSlow && !isSlow) || (isSlow == bestSlow && rank < bestRank) {
				best, bestSlow, bestRank = i, isSlow, rank
			}
		}
		chosen |= 1 << best
	}
	return (1<<n - 1) &^ chosen
}

// HoldsReserves reports whether a round over n masters may hold some in
// reserve (I11): only under the restart guard (guarded), with quorumFirst
// and 3 to 64 masters.
func HoldsReserves(n int, guarded, quorumFirst bool) bool {
	return quorumFirst && guarded && n >= 3 && n <= 64
}

// KeyHash is the 64-bit FNV-1a hash of s: a key's, or a master's address,
// for Reserves.
func KeyHash(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// mix64 is splitmix64's finalizer: every bit of x moves every bit of the
// result.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// MayHandOff reports whether an Unlock may hand the key to a waiter
// instead of releasing it (I12): only a single-key lock, while it is valid
// at now (a hand-off after until would give a waiter keys that may have
// expired and been taken), and while notices are on (a waiter of another
// Client that only polls would never find the key free).
func MayHandOff(now, until time.Time, noticesOn, singleKey bool) bool {
	return singleKey && noticesOn && now.Before(until)
}

// LocalFirst reports whether this Client's next local waiter may have the
// key when no other Client's waiter asked before it (I13): only while
// every other Client heard to want the key lately announced itself
// (wantsKnown), or none was heard (othersSeen false). One that only waits
// for a release would otherwise starve.
func LocalFirst(othersSeen, wantsKnown bool) bool { return !othersSeen || wantsKnown }

// UnlockReserves decides which masters an Unlock's round of a handed lock
// holds back (I14): those never heard handing it the key (unheard, a bit
// per master), asked only once the others cannot decide the round alone,
// or after hedge. None until the Client has timed a round (timed): a
// guessed hedge could leave a reserve too little of the node deadline to
// answer. None either when less than twice the hedge is left of the
// validity (left): the round counts only if decided within it.
func UnlockReserves(unheard uint64, timed bool, hedge, left time.Duration) (reserve uint64, wait time.Duration) {
	if unheard == 0 || !timed || left < 2*hedge {
		return 0, 0
	}
	return unheard, hedge
}

// Widens reports whether an extension round of ttl, started at start, of a
// lock valid until until may ask the masters that lack the key to take it
// (I15): only when it lengthens the lock. A key it takes lives from this
// round on, for ttl, and vouches for no earlier end; a shorter extension
// confirms the lock's end, which only keys that held its token already can.
func Widens(start time.Time, ttl time.Duration, factor float64, until time.Time) bool {
	return ValidUntil(start, ttl, factor).After(until)
}

// MinHedge is the least time a quorum-first round waits for its preferred
// masters before it asks the reserves.
const MinHedge = 500 * time.Microsecond

// HedgeAfter is how long a quorum-first round waits for its preferred
// masters before it asks the reserves (I16): three of the Client's usual
// rounds (usual: 0 until one was timed), at least MinHedge, at most half
// the node deadline; half the node deadline until a round was timed (the
// first ones dial, and load scripts).
func HedgeAfter(nodeDeadline, usual time.Duration) time.Duration {
	most := nodeDeadline / 2
	if usual == 0 {
		return most
	}
	return min(max(3*usual, MinHedge), most)
}

// Usual is the moving average of a Client's won rounds that asked no
// reserve, after one of d (old: the average so far; 0: none).
func Usual(old, d time.Duration) time.Duration {
	if old == 0 {
		return d
	}
	return old + (d-old)/8
}

// AsksReserves reports whether a quorum-first round asks its reserves at
// once, on a vote of a master it asked (I17): when the vote did not add a
// counted yes (a no, an error, a yes the restart guard holds back): the
// masters asked cannot decide the round alone. yesBefore and yesAfter are
// the counted yes votes before and after the vote.
func AsksReserves(reserve uint64, yesBefore, yesAfter int) bool {
	return reserve != 0 && yesAfter <= yesBefore
}

// RemoteSkips reports whether a hand-off to another Client's waiter skips
// a master (I18): only where the lock's call was refused, so its token is
// known not to be there (for another Client's waiter the script leaves a
// free key, or another's, alone), and the master is not one no hand-off
// notice told of (unheard, of a lock taken on a hand-off's notices): a
// hand-off may have put the token there after the refusal, with a notice
// the Client missed.
func RemoteSkips(refused, unheard bool) bool { return refused && !unheard }
