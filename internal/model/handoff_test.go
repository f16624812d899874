package model

import (
	"strings"
	"testing"
)

// TestHandOffModel explores the hand-off world (handoff.go): a holder's
// line of other Clients' wants (core.Line) and a waiter's Client's count
// of its hand-off notices (core.Expected) and of the tokens it is done
// with (core.Retired), with the withdrawal and the notices late,
// duplicated or lost, the waiter's Client closing, and its lock
// passed on to another Client by its token; then the same world with a
// holder that missed the withdrawal. It fails with the shortest trace to a
// hand-off to a withdrawn want, two holders, a holder whose token a quorum
// no longer holds, or a token nobody holds left on a master once no
// message is on its way (but for the two limits that holder brings).
func TestHandOffModel(t *testing.T) {
	for _, deaf := range []bool{false, true} {
		r := CheckHandOff(deaf)
		t.Logf("a holder that missed the withdrawal: %v: %s", deaf, handOffTrace(r))
		if r.Violation != "" {
			t.Fatal(handOffTrace(r))
		}
		if !r.Complete {
			t.Fatalf("stopped at %d states", r.States)
		}
	}
}

// The positive control: a waiter's Client that keeps a late hand-off's
// token leaves it on the masters, and the checker says how.
func TestHandOffModelFindsAKeptLateHandOff(t *testing.T) {
	lateHandOffKept = true
	defer func() { lateHandOffKept = false }()
	r := CheckHandOff(false)
	t.Log(handOffTrace(r))
	if !strings.Contains(r.Violation, "nobody holds the lock") {
		t.Fatal("no violation with late hand-offs kept: the checker cannot see a token left behind")
	}
}

// Close releases its waiters' tokens only once the node deadline has
// passed since it withdrew them: released at once, a hand-off from a
// holder that has not heard the withdrawal yet leaves the token behind.
func TestHandOffModelFindsACloseThatDoesNotWait(t *testing.T) {
	closeReleasesAtOnce = true
	defer func() { closeReleasesAtOnce = false }()
	r := CheckHandOff(false)
	t.Log(handOffTrace(r))
	if !strings.Contains(r.Violation, "nobody holds the lock") {
		t.Fatal("no token left behind by a Close that does not wait")
	}
}

// The limits, reached: a holder that missed a want's withdrawal hands
// the key to its token after the waiter's Client closed, or after the
// lock it got was passed on by its token and unlocked where it was
// resumed. The token then stays on the masters to its TTL: nobody's, but
// no second holder (TestHandOffModel holds every safety property with
// that holder in the world).
func TestHandOffModelReachesTheLimits(t *testing.T) {
	for _, limit := range []*bool{&closedIsLeftover, &passedOnIsLeftover} {
		*limit = true
		r := CheckHandOff(true)
		*limit = false
		t.Log(handOffTrace(r))
		if !strings.Contains(r.Violation, "nobody holds the lock") {
			t.Fatal("the limit's scene is out of the world's reach")
		}
	}
}

// Why the resumed lock's limit stays: a notice that tb was handed cannot
// tell the Client that passed the lock on whether the token is held where
// it was resumed. Releasing tb on such a notice leaves the resumed lock
// on a minority of the masters, and the checker says how.
func TestHandOffModelFindsAPassedOnTokenReleased(t *testing.T) {
	passedOnReleased = true
	defer func() { passedOnReleased = false }()
	r := CheckHandOff(true)
	t.Log(handOffTrace(r))
	if !strings.Contains(r.Violation, "C holds the lock, and only") {
		t.Fatal("no resumed lock found on a minority: the checker cannot see a passed-on token released")
	}
}
