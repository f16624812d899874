// Validity arithmetic: ttl − elapsed − drift, on the monotonic clock.

package redlock

import (
	"math"
	"time"
)

// clockPrecision is the fixed part of the drift allowance: Redis expires keys
// with millisecond resolution, so the spec adds 2 ms to the proportional part.
const clockPrecision = 2 * time.Millisecond

// DefaultDriftFactor is the share of the TTL set aside for clock drift between
// the client and the masters (Redlock spec: 0.01).
const DefaultDriftFactor = 0.01

// drift is the time a lock of the given ttl gives up for clock drift:
// ttl·factor + 2 ms (Redlock spec, step 3). factor must be in [0, 1) and ttl
// non-negative; the result is then in [clockPrecision, ttl+clockPrecision).
func drift(ttl time.Duration, factor float64) time.Duration {
	// ttl·factor < ttl for factor < 1, and float64 rounding can push a
	// product near MaxInt64 up to 2^63, which does not convert back.
	d := float64(ttl) * factor
	if d >= math.MaxInt64-float64(clockPrecision) {
		return math.MaxInt64
	}
	return time.Duration(d) + clockPrecision
}

// validity is how long a lock can still be trusted once its acquisition took
// elapsed: ttl − elapsed − drift (Redlock spec, step 3). A result ≤ 0 means
// the lock must be treated as not obtained. elapsed is measured on the
// monotonic clock from before the first request to the deciding reply, so it
// is never negative; the subtraction saturates instead of wrapping.
func validity(ttl, elapsed time.Duration, factor float64) time.Duration {
	return subSat(subSat(ttl, elapsed), drift(ttl, factor))
}

// validUntil is the end of a lock's validity when its acquisition started at
// start: start + ttl − drift. It does not depend on how long the acquisition
// took, since every key was set after start and so expires after start+ttl.
func validUntil(start time.Time, ttl time.Duration, factor float64) time.Time {
	return start.Add(subSat(ttl, drift(ttl, factor)))
}

// subSat returns a − b for non-negative b, saturating at math.MinInt64.
func subSat(a, b time.Duration) time.Duration {
	if a < math.MinInt64+b {
		return math.MinInt64
	}
	return a - b
}

// ttlLeavesValidity reports whether ttl leaves any validity at all after drift, i.e.
// whether validity(ttl, 0, factor) > 0.
func ttlLeavesValidity(ttl time.Duration, factor float64) bool {
	return validity(ttl, 0, factor) > 0
}
