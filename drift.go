// Validity arithmetic: ttl − elapsed − drift, on the monotonic clock. The
// protocol core (internal/core) owns it; these are the names the shell
// uses.

package redlock

import (
	"time"

	"github.com/redlock-go/redlock/internal/core"
)

// clockPrecision is the fixed part of the drift allowance (core.ClockPrecision).
const clockPrecision = core.ClockPrecision

// DefaultDriftFactor is the share of the TTL set aside for clock drift between
// the client and the masters (Redlock spec: 0.01).
const DefaultDriftFactor = 0.01

// drift is core.Drift: ttl·factor + 2 ms (Redlock spec, step 3).
func drift(ttl time.Duration, factor float64) time.Duration { return core.Drift(ttl, factor) }

// validity is core.Validity: ttl − elapsed − drift; ≤ 0 means not obtained.
func validity(ttl, elapsed time.Duration, factor float64) time.Duration {
	return core.Validity(ttl, elapsed, factor)
}

// validUntil is core.ValidUntil: start + ttl − drift (I2).
func validUntil(start time.Time, ttl time.Duration, factor float64) time.Time {
	return core.ValidUntil(start, ttl, factor)
}

// ttlLeavesValidity reports whether ttl leaves any validity at all after drift, i.e.
// whether validity(ttl, 0, factor) > 0.
func ttlLeavesValidity(ttl time.Duration, factor float64) bool {
	return validity(ttl, 0, factor) > 0
}
