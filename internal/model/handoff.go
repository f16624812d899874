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
// tb announces it to B, late or twice; B counts the notices for a token it
// expects, and releases tb on a master whose notice came for a token it no
// longer expects and whose lock it let go (a late hand-off). Once B holds
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
// shows what releasing it would break) leaves tb to its TTL. No message is
// lost here: a lost notice leaves a token that the engine's sweeps
// (internal/engine/retired.go) or the key's TTL remove, outside this
// world.

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

	closing bool // B's Close withdrew tb, and waits out the node deadline before it releases tb
	closed  bool // B's Close is done: B hears nothing more
	passed  bool // B passed its lock on by its token (Lock.Token) to Client C
	cHolds  bool // C holds it (Resume)
	resumes int8 // C's Resumes
	deaf    bool // Client D heard tb's want and missed its withdrawal (B's publish of it did not reach D)
	dHolds  bool // D holds the key
	dLocks  int8 // D's acquisitions
	dHanded bool // D's Unlock handed the key to tb
	dLine   core.Line
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

func (a hoAction) String() string {
	s := map[string]string{
		"giveup":   "B's waiter gives up: B withdraws tb's want",
		"bclose":   "B's Client closes while its waiter waits: it withdraws tb's want",
		"cdone":    "B's Close has waited out the node deadline: it releases tb on every master",
		"withdraw": "A hears tb's withdrawal",
		"wantcopy": "A hears a copy of tb's want, late",
		"unlock":   "A unlocks",
		"handed":   fmt.Sprintf("B hears master %d hand it tb", a.master),
		"bunlock":  "B unlocks",
		"pass":     "B passes its lock on to Client C by its token",
		"resume":   "C resumes the lock by its token",
		"cunlock":  "C unlocks it",
		"dlock":    "Client D (which heard tb's want, and missed its withdrawal) takes the key where it is free",
		"dunlock":  "D unlocks",
	}[a.kind]
	if a.dup {
		s += " (again: a duplicate)"
	}
	return s
}

// enabled lists the steps w can take.
func (w *hoWorld) enabled() []hoAction {
	var as []hoAction
	add := func(kind string, on bool) {
		if on {
			as = append(as, hoAction{kind: kind})
		}
	}
	add("giveup", w.b == hoWaiting)
	add("bclose", w.b == hoWaiting)
	add("cdone", w.closing && (closeReleasesAtOnce || w.aHeardOut || !w.aHolds))
	if w.withdrawal > 0 {
		as = append(as, hoAction{kind: "withdraw"})
		if w.dups > 0 {
			as = append(as, hoAction{kind: "withdraw", dup: true})
		}
	}
	add("wantcopy", w.lateCopy > 0)
	add("unlock", w.aHolds)
	for m := range w.handed {
		if w.handed[m] > 0 {
			as = append(as, hoAction{kind: "handed", master: m})
			if w.dups > 0 {
				as = append(as, hoAction{kind: "handed", master: m, dup: true})
			}
		}
	}
	add("bunlock", w.b == hoHolding && !w.passed)
	add("pass", w.b == hoHolding && !w.passed)
	add("resume", w.passed && !w.cHolds && w.resumes < 2 && w.count(hoTB) >= hoQuorum)
	add("cunlock", w.cHolds)
	add("dlock", w.deaf && !w.dHolds && w.dLocks < 1 && w.count(hoNone) >= hoQuorum)
	add("dunlock", w.dHolds)
	return as
}

// count returns how many masters hold v.
func (w *hoWorld) count(v int8) int {
	n := 0
	for _, x := range w.val {
		if x == v {
			n++
		}
	}
	return n
}

// step takes a, deciding by the core, and records a violation.
func (w *hoWorld) step(a hoAction) {
	if a.dup {
		w.dups--
	}
	switch a.kind {
	case "giveup", "bclose":
		w.b = hoGaveUp
		for m, heard := range w.exp.Unexpect("tb") {
			if heard && w.val[m] == hoTB {
				w.val[m] = hoNone // a waiter that gives up releases its token where heard
			}
		}
		w.withdrawal++
		w.closing = a.kind == "bclose"
	case "cdone":
		w.closing, w.closed = false, true
		w.set(hoTB, hoNone)
	case "withdraw":
		if !a.dup {
			w.withdrawal--
		}
		w.line.Heard("b", "tb", 0, hoT0, []bool{true, true, true}, nMasters)
		w.aHeardOut = true
	case "wantcopy":
		w.lateCopy--
		w.line.Heard("b", "tb", time.Second, hoT0, []bool{true, true, true}, nMasters)
	case "unlock":
		w.aHolds = false
		to := w.line.Claim(hoT0, time.Time{}, hoQuorum)
		if to != nil && w.aHeardOut {
			w.violation = "A handed the key to a want whose withdrawal it heard (W1)"
		}
		w.handOff(hoTA, to != nil)
	case "handed":
		if !a.dup {
			w.handed[a.master]--
		}
		w.heard(a.master)
	case "bunlock":
		w.b = hoUnlocked
		w.set(hoTB, hoNone)
	case "pass":
		w.passed = true
	case "resume":
		w.cHolds, w.resumes = true, w.resumes+1
	case "cunlock":
		w.cHolds = false
		w.set(hoTB, hoNone)
	case "dlock":
		w.dHolds, w.dLocks = true, w.dLocks+1
		w.set(hoNone, hoTD)
	case "dunlock":
		w.dHolds = false
		w.dHanded = w.dLine.Claim(hoT0, time.Time{}, hoQuorum) != nil
		w.handOff(hoTD, w.dHanded)
	}
	w.violation += w.unsafe()
}

// set replaces every master's from with to.
func (w *hoWorld) set(from, to int8) {
	for m := range w.val {
		if w.val[m] == from {
			w.val[m] = to
		}
	}
}

// handOff is a holder's Unlock, of token from: to tb where from holds the
// key, each master announcing it to B, when toB; a release otherwise.
func (w *hoWorld) handOff(from int8, toB bool) {
	for m := range w.val {
		switch {
		case w.val[m] != from:
		case toB:
			w.val[m], w.handed[m] = hoTB, w.handed[m]+1
		default:
			w.val[m] = hoNone
		}
	}
}

// heard is B's Client hearing master m's notice that it handed tb.
func (w *hoWorld) heard(m int) {
	if w.closed {
		return // its subscriptions are closed
	}
	_, expected, reached := w.exp.From("tb", m, hoQuorum)
	switch {
	case w.passed && passedOnReleased && w.val[m] == hoTB:
		w.val[m] = hoNone
	case !expected && !lateHandOffKept && w.b != hoHolding && w.val[m] == hoTB:
		w.val[m] = hoNone // a late hand-off: released
	case reached && w.b == hoWaiting:
		w.b = hoHolding
		w.exp.Unexpect("tb") // the lock has the token now (the engine's retired tokens)
	}
}

// unsafe returns the safety property w breaks, or "": two holders at
// once, or a holder whose token a quorum of the masters do not hold
// (another Client could take the key).
func (w *hoWorld) unsafe() string {
	holders := map[string]int8{}
	if w.aHolds {
		holders["A"] = hoTA
	}
	if w.b == hoHolding && !w.passed {
		holders["B"] = hoTB
	}
	if w.cHolds {
		holders["C"] = hoTB
	}
	if w.dHolds {
		holders["D"] = hoTD
	}
	if len(holders) > 1 {
		return fmt.Sprintf("two holders at once: %v", holders)
	}
	for who, t := range holders {
		if w.count(t) < hoQuorum {
			return fmt.Sprintf("%s holds the lock, and only %d masters hold its token", who, w.count(t))
		}
	}
	return ""
}

// quiet reports whether no message is on its way.
func (w *hoWorld) quiet() bool {
	return w.withdrawal == 0 && w.lateCopy == 0 && w.handed == [nMasters]int8{} && !w.closing
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
		hoTB: w.b == hoHolding && (!w.passed || w.resumes == 0) || w.cHolds || limit}
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
		w.closing, w.closed, w.passed, w.cHolds, w.resumes, w.dHolds, w.dLocks, w.dHanded, w.dLine.Finished("tb"))
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
