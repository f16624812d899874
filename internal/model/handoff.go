package model

import (
	"fmt"
	"strings"
	"time"

	"github.com/redlock-go/redlock/internal/core"
)

// The hand-off world: Client A holds the key on three masters; a waiter
// of Client B has announced its want, token tb, and A's line (core.Line)
// heard it. B's waiter may give up at any moment, or B's Client close
// while it waits: B stops expecting tb (core.Expected) and publishes the
// withdrawal, which reaches A late or twice; a copy of the want may reach
// A late too, after the withdrawal (a master that was paused sends it
// then). A closing Client releases tb on every master once the node
// deadline has passed since the withdrawal: by then A heard it, or A's
// hand-off landed. A unlocks whenever: it hands the key to the want first
// in its line, or releases it. Each master that replaced A's token with
// tb announces it to B, late, twice, or not at all (B's subscription
// there dropped: up to two notices, B hearing one of each round at
// least); B counts the notices for a token it expects, asks the masters
// when its waiter's timer fires (and takes the lock it finds on a
// quorum), and, for a token it no longer expects and whose lock it let go,
// releases tb where the notice came from and sweeps the other masters
// (core.Retired: a late hand-off). Once B holds
// the lock, it may unlock it, or pass it on to Client C by its token,
// which resumes it and unlocks it. With deaf, Client D heard tb's want
// and missed its withdrawal (B's publish of it did not reach D): D takes
// the key once it is free, and its Unlock hands it to tb. The same core
// code the library runs makes every decision.
//
// At every step the checker holds: A hands nothing to a want whose
// withdrawal it heard (W1); no two holders at once; every holder's token
// on a quorum of the masters (no other Client could take the key). Once
// no message is on its way, every master holds nothing or a live holder's
// token, but for the two limits D brings: its hand-off to tb after B's
// Client closed, or after B passed the lock on (whoever has the token may
// resume it: B cannot tell, and TestHandOffModelFindsAPassedOnTokenReleased
// shows what releasing it would break) leaves tb to its TTL. A round of
// which B hears no notice at all is outside this world: nothing tells B
// of it, and tb stays to its TTL.

const (
	hoWaiting  = iota // B's waiter expects tb
	hoGaveUp          // it gave up: tb is no longer expected
	hoHolding         // a quorum of notices made the lock B's
	hoUnlocked        // B unlocked it
	hoNone     = 0    // a master's key: nothing
	hoTA       = 1    // A's token
	hoTB       = 2    // B's waiter's token
	hoTD       = 3    // D's token
	hoQuorum   = 2
	hoDups     = 1 // messages delivered twice, at most
	hoLost     = 2 // hand-off notices lost, at most; B hears one of each round at least
)

// lateHandOffKept, set by a test, makes B keep a late hand-off's token:
// the positive control of the leftover check.
var lateHandOffKept bool

// passedOnReleased, set by a test, makes B release its token on a master
// whose hand-off notice comes once B passed the lock on: the fix the
// resumed lock's limit would need (TestHandOffModelFindsAPassedOnTokenReleased).
var passedOnReleased bool

// passedOnIsLeftover and closedIsLeftover, set by a test, count a token
// D handed to B's waiter once B passed its lock on, or closed, as a
// leftover: the scenes of the limits (TestHandOffModelReachesTheLimits).
var passedOnIsLeftover, closedIsLeftover bool

// closeReleasesAtOnce, set by a test, makes B's Close release its token
// without waiting out the node deadline (TestHandOffModelFindsACloseThatDoesNotWait).
var closeReleasesAtOnce bool

// hoWorld is one state of the hand-off world.
type hoWorld struct {
	val        [nMasters]int8
	aHolds     bool
	aHeardOut  bool // A heard tb's withdrawal
	b          int8
	withdrawal int8 // tb's withdrawal on its way to A
	lateCopy   int8 // a copy of tb's want on its way to A (a master that was paused)
	handed     [nMasters]int8
	dups       int8
	line       core.Line
	exp        core.Expected[struct{}]
	violation  string

	closing  bool // B's Close withdrew tb, and waits out the node deadline before it releases tb
	closed   bool // B's Close is done: B hears nothing more
	passed   bool // B passed its lock on by its token (Lock.Token) to Client C
	cHolds   bool // C holds it (Resume)
	resumes  int8 // C's Resumes
	deaf     bool // Client D heard tb's want and missed its withdrawal (B's publish of it did not reach D)
	dHolds   bool // D holds the key
	dLocks   int8 // D's acquisitions
	dHanded  bool // D's Unlock handed the key to tb
	dLine    core.Line
	lost     int8         // hand-off notices lost so far
	ret      core.Retired // B's record of tb once its waiter is done with it
	sweepDue bool         // B's sweep of tb is scheduled and has not run
	heardOne bool         // B heard a hand-off notice since the last round to tb
}

var hoT0 = time.Unix(0, 0)

// newHoWorld is the start: A holds, B's want is in A's line, B expects tb.
func newHoWorld(deaf bool) *hoWorld {
	w := &hoWorld{val: [nMasters]int8{hoTA, hoTA, hoTA}, aHolds: true, b: hoWaiting, dups: hoDups, lateCopy: 1, deaf: deaf}
	w.line.Heard("b", "tb", time.Second, hoT0, []bool{true, true, true}, nMasters)
	w.exp.Expect("tb", nMasters, struct{}{})
	w.dLine.Heard("b", "tb", time.Second, hoT0, []bool{true, true, true}, nMasters) // D never hears tb's withdrawal
	return w
}

// hoAction is one step: its kind and, for a notice, its master.
type hoAction struct {
	kind   string
	master int
	dup    bool
}

// quiet reports whether no message is on its way.
func (w *hoWorld) quiet() bool {
	return w.withdrawal == 0 && w.lateCopy == 0 && w.handed == [nMasters]int8{} && !w.closing && !w.sweepDue
}

// leftover is a violation once w is quiet: a master holding a token no
// live holder has (a lock passed on is live until it is resumed and
// unlocked). But for the limits: a hand-off from a holder that
// missed tb's withdrawal (D) leaves tb to its TTL once B's Client closed,
// or passed the lock on (whoever has its token may resume it).
func (w *hoWorld) leftover() string {
	if !w.quiet() {
		return ""
	}
	limit := w.dHanded && (w.closed && !closedIsLeftover || w.passed && !passedOnIsLeftover)
	live := map[int8]bool{hoTA: w.aHolds, hoTD: w.dHolds,
		hoTB: w.b == hoWaiting || w.b == hoHolding && (!w.passed || w.resumes == 0) || w.cHolds || limit}
	for m, v := range w.val {
		if v != hoNone && !live[v] {
			return fmt.Sprintf("master %d holds %s's token, and nobody holds the lock (no message is on its way)", m, map[int8]string{hoTA: "A", hoTB: "B's waiter", hoTD: "D"}[v])
		}
	}
	return ""
}

// key is w's state as the checker tells states apart.
func (w *hoWorld) key() string {
	return fmt.Sprint(w.violation, w.val, w.aHolds, w.aHeardOut, w.b, w.withdrawal, w.lateCopy, w.handed, w.dups,
		len(w.line.Wants), w.line.Finished("tb"), w.exp.Len(), w.exp.Count("tb"),
		w.closing, w.closed, w.passed, w.cHolds, w.resumes, w.dHolds, w.dLocks, w.dHanded, w.dLine.Finished("tb"),
		w.lost, w.sweepDue, w.heardOne, w.ret.CutShort(), w.ret.Unheard(0), w.ret.Unheard(1), w.ret.Unheard(2))
}

// CheckHandOff explores the hand-off world breadth-first and returns the
// shortest trace to a violation, if any. deaf adds Client D, a holder that
// heard tb's want and missed its withdrawal.
func CheckHandOff(deaf bool) Result {
	type node struct {
		path []hoAction
	}
	replay := func(path []hoAction) *hoWorld {
		w := newHoWorld(deaf)
		for _, a := range path {
			w.step(a)
		}
		return w
	}
	seen := map[string]bool{}
	queue := []node{{}}
	var r Result
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		w := replay(n.path)
		if seen[w.key()] {
			continue
		}
		seen[w.key()] = true
		r.States++
		r.Depth = max(r.Depth, len(n.path))
		if v := w.violation + w.leftover(); v != "" {
			r.Violation = v
			for i, a := range n.path {
				r.Trace = append(r.Trace, fmt.Sprintf("%2d. %v", i+1, a))
			}
			return r
		}
		for _, a := range w.enabled() {
			queue = append(queue, node{path: append(n.path[:len(n.path):len(n.path)], a)})
		}
	}
	r.Complete = true
	return r
}

// handOffTrace renders a Result of CheckHandOff.
func handOffTrace(r Result) string {
	if r.Violation == "" {
		return fmt.Sprintf("%d states, depth %d, no violation", r.States, r.Depth)
	}
	return fmt.Sprintf("violation after %d states: %s\n%s", r.States, r.Violation, strings.Join(r.Trace, "\n"))
}
