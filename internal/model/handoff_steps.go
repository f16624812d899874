// The hand-off world's steps: what may happen next, and each step's
// effect, deciding by internal/core.

package model

import (
	"fmt"
	"time"
)

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
		"lose":     fmt.Sprintf("master %d's notice that it handed tb is lost (B's subscription there dropped)", a.master),
		"probe":    "B's waiter asks the masters, and finds tb on a quorum: it takes the lock",
		"sweep":    "B's sweep of tb runs: it releases tb where it was not released",
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
			if w.lost < hoLost && (w.heardOne || w.onItsWay() > 1) {
				as = append(as, hoAction{kind: "lose", master: m})
			}
		}
	}
	add("probe", w.b == hoWaiting && w.count(hoTB) >= hoQuorum)
	add("sweep", w.sweepDue)
	add("bunlock", w.b == hoHolding && !w.passed)
	add("pass", w.b == hoHolding && !w.passed)
	add("resume", w.passed && !w.cHolds && w.resumes < 2 && w.count(hoTB) >= hoQuorum)
	add("cunlock", w.cHolds)
	add("dlock", w.deaf && !w.dHolds && w.dLocks < 1 && w.count(hoNone) >= hoQuorum)
	add("dunlock", w.dHolds)
	return as
}

// onItsWay returns how many hand-off notices are on their way to B.
func (w *hoWorld) onItsWay() int {
	n := 0
	for _, h := range w.handed {
		n += int(h)
	}
	return n
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
		if w.exp.Unexpect("tb") != nil {
			w.set(hoTB, hoNone) // a waiter that gives up releases its token everywhere
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
	case "handed", "lose", "probe", "sweep":
		w.stepWaiter(a)
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

// stepWaiter takes the steps of B's Client as a waiter: a master's notice
// heard or lost, the probe, the sweep.
func (w *hoWorld) stepWaiter(a hoAction) {
	switch a.kind {
	case "handed":
		if !a.dup {
			w.handed[a.master]--
		}
		w.heard(a.master)
		w.heardOne = true
	case "lose":
		w.handed[a.master]--
		w.lost++
	case "probe":
		w.b = hoHolding
		w.ret.Heard(w.exp.Unexpect("tb"))
	case "sweep":
		w.sweepDue = false
		for m, r := range w.ret.Sweep(nMasters) {
			if r && w.val[m] == hoTB {
				w.val[m] = hoNone
			}
		}
	}
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
			w.heardOne = false
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
	case !expected:
		// A late hand-off (core.Retired, R1 and R2): released here at once
		// once B let its lock go (or gave up), and the sweep scheduled.
		release, sweep := w.ret.Late(m, nMasters, w.b == hoHolding, false, true)
		if release && !lateHandOffKept && w.val[m] == hoTB {
			w.val[m] = hoNone
		}
		w.sweepDue = w.sweepDue || sweep && !lateHandOffKept
	case reached && w.b == hoWaiting:
		w.b = hoHolding
		w.ret.Heard(w.exp.Unexpect("tb")) // the lock has the token now (the engine's retired tokens)
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
