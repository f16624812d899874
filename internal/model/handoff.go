package model

import (
	"fmt"
	"strings"
	"time"

	"github.com/redlock-go/redlock/internal/core"
)

// The hand-off world: Client A holds the key on three masters; a waiter
// of Client B has announced its want, token tb, and A's line (core.Line)
// heard it. B's waiter may give up at any moment: B stops expecting tb
// (core.Expected) and publishes the withdrawal, which reaches A late or
// twice; a copy of the want may reach A late too, after the withdrawal (a
// master that was paused sends it then). A unlocks whenever: it hands the key to the want first in its
// line, or releases it. Each master that replaced A's token with tb
// announces it to B, late or twice; B counts the notices for a
// token it expects, and releases tb on a master whose notice came for a
// token it no longer expects (a late hand-off). The same core code the
// library runs makes every decision.
//
// At every state the checker holds: no two holders at once; A hands
// nothing to a want whose withdrawal it heard (W1); and once no message is
// on its way, every master holds nothing or a live holder's token. No
// message is lost here: a lost notice leaves a token that the engine's
// sweeps (internal/engine/retired.go) or the key's TTL remove, outside
// this world.

const (
	hoWaiting  = iota // B's waiter expects tb
	hoGaveUp          // it gave up: tb is no longer expected
	hoHolding         // a quorum of notices made the lock B's
	hoUnlocked        // B unlocked it
	hoNone     = 0    // a master's key: nothing
	hoTA       = 1    // A's token
	hoTB       = 2    // B's waiter's token
	hoQuorum   = 2
	hoDups     = 1 // messages delivered twice, at most
)

// lateHandOffKept, set by a test, makes B keep a late hand-off's token:
// the positive control of the leftover check.
var lateHandOffKept bool

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
}

var hoT0 = time.Unix(0, 0)

// newHoWorld is the start: A holds, B's want is in A's line, B expects tb.
func newHoWorld() *hoWorld {
	w := &hoWorld{val: [nMasters]int8{hoTA, hoTA, hoTA}, aHolds: true, b: hoWaiting, dups: hoDups, lateCopy: 1}
	w.line.Heard("b", "tb", time.Second, hoT0, []bool{true, true, true}, nMasters)
	w.exp.Expect("tb", nMasters, struct{}{})
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
		"withdraw": "A hears tb's withdrawal",
		"wantcopy": "A hears a copy of tb's want, late",
		"unlock":   "A unlocks",
		"handed":   fmt.Sprintf("B hears master %d hand it tb", a.master),
		"bunlock":  "B unlocks",
	}[a.kind]
	if a.dup {
		s += " (again: a duplicate)"
	}
	return s
}

// enabled lists the steps w can take.
func (w *hoWorld) enabled() []hoAction {
	var as []hoAction
	if w.b == hoWaiting {
		as = append(as, hoAction{kind: "giveup"})
	}
	if w.withdrawal > 0 {
		as = append(as, hoAction{kind: "withdraw"})
		if w.dups > 0 {
			as = append(as, hoAction{kind: "withdraw", dup: true})
		}
	}
	if w.lateCopy > 0 {
		as = append(as, hoAction{kind: "wantcopy"})
	}
	if w.aHolds {
		as = append(as, hoAction{kind: "unlock"})
	}
	for m := range w.handed {
		if w.handed[m] > 0 {
			as = append(as, hoAction{kind: "handed", master: m})
			if w.dups > 0 {
				as = append(as, hoAction{kind: "handed", master: m, dup: true})
			}
		}
	}
	if w.b == hoHolding {
		as = append(as, hoAction{kind: "bunlock"})
	}
	return as
}

// step takes a, deciding by the core, and records a violation.
func (w *hoWorld) step(a hoAction) {
	if a.dup {
		w.dups--
	}
	switch a.kind {
	case "giveup":
		w.b = hoGaveUp
		for m, heard := range w.exp.Unexpect("tb") {
			if heard && w.val[m] == hoTB {
				w.val[m] = hoNone // a waiter that gives up releases its token where heard
			}
		}
		w.withdrawal++
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
		for m := range w.val {
			switch {
			case w.val[m] != hoTA:
			case to != nil:
				w.val[m], w.handed[m] = hoTB, w.handed[m]+1
			default:
				w.val[m] = hoNone
			}
		}
	case "handed":
		if !a.dup {
			w.handed[a.master]--
		}
		_, expected, reached := w.exp.From("tb", a.master, hoQuorum)
		switch {
		case !expected && !lateHandOffKept && w.b != hoHolding && w.val[a.master] == hoTB:
			w.val[a.master] = hoNone // a late hand-off: released
		case reached && w.b == hoWaiting:
			w.b = hoHolding
		}
	case "bunlock":
		w.b = hoUnlocked
		for m := range w.val {
			if w.val[m] == hoTB {
				w.val[m] = hoNone
			}
		}
	}
	if w.aHolds && w.b == hoHolding {
		w.violation = "two holders: A and B"
	}
}

// quiet reports whether no message is on its way.
func (w *hoWorld) quiet() bool {
	return w.withdrawal == 0 && w.lateCopy == 0 && w.handed == [nMasters]int8{}
}

// leftover is a violation once w is quiet: a master holding a token no
// live holder has.
func (w *hoWorld) leftover() string {
	if !w.quiet() {
		return ""
	}
	for m, v := range w.val {
		if v == hoTA && !w.aHolds || v == hoTB && w.b != hoHolding {
			return fmt.Sprintf("master %d holds %s's token, and nobody holds the lock (no message is on its way)", m, map[int8]string{hoTA: "A", hoTB: "B's waiter"}[v])
		}
	}
	return ""
}

// key is w's state as the checker tells states apart.
func (w *hoWorld) key() string {
	return fmt.Sprint(w.violation, w.val, w.aHolds, w.aHeardOut, w.b, w.withdrawal, w.lateCopy, w.handed, w.dups,
		len(w.line.Wants), w.line.Finished("tb"), w.exp.Len(), w.exp.Count("tb"))
}

// CheckHandOff explores the hand-off world breadth-first and returns the
// shortest trace to a violation, if any.
func CheckHandOff() Result {
	type node struct {
		path []hoAction
	}
	replay := func(path []hoAction) *hoWorld {
		w := newHoWorld()
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
