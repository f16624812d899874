// Validity arithmetic: ttl − elapsed − drift, on the monotonic clock. The
// protocol core (internal/core) owns it; these are the names the shell
// uses.

package engine

import (
	"fmt"
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

func (c *Client) checkTTL(ttl time.Duration) (time.Duration, error) {
	ttl = ttl.Truncate(time.Millisecond)
	if !ttlLeavesValidity(ttl, c.cfg.driftFactor) {
		return 0, fmt.Errorf("%w: ttl %v leaves no validity after drift %v", ErrInvalidArgument, ttl, drift(ttl, c.cfg.driftFactor))
	}
	return ttl, nil
}

// nodeTimeout is the per-node deadline for a request about a lock of ttl.
func (c *Client) nodeTimeout(ttl time.Duration) time.Duration {
	if c.cfg.nodeTimeout > 0 {
		return c.cfg.nodeTimeout
	}
	return min(ttl/10, DefaultMaxNodeTimeout)
}

// deadline is when a round started at start stops waiting for nodes: at the
// node deadline, but never past the end of the validity it could win, since
// a later yes would be worthless.
func (c *Client) deadline(start time.Time, ttl time.Duration) roundDeadline {
	// A master that cannot answer within the validity it could win is
	// failing, for a lock: this cap is the masters' deadline too.
	return nodeDeadline(core.RoundEnd(start, c.nodeTimeout(ttl), ttl, c.cfg.driftFactor))
}

// A roundDeadline is when a round stops waiting (at), and the masters'
// deadline (node), which is later when the lock's validity ends the round
// first (an Extend or Fence at the last moment). A request the library
// cut short at at, before node, says nothing of its master.
type roundDeadline struct{ at, node time.Time }

// nodeDeadline is a round that waits until the masters' deadline d.
func nodeDeadline(d time.Time) roundDeadline { return roundDeadline{at: d, node: d} }

// until is d ending at end, if that is sooner.
func (d roundDeadline) until(end time.Time) roundDeadline {
	if end.Before(d.at) {
		d.at = end
	}
	return d
}
