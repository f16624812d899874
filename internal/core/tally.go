package core

import "time"

// A Memory is what a master reports of its memory with a vote, for the
// restart guard: when it began (Born, in ms of the master's clock: which
// memory it is), how old it is, and the longest TTL granted there since.
type Memory struct {
	Reported bool // false: none (guard off, an error, an op without one)
	Age      time.Duration
	Longest  time.Duration
	Born     int64
}

// A Vote is one master's answer in a round: yes or no, or a failure (an
// error, a timeout), with its memory, and when it arrived.
type Vote struct {
	Node int
	Yes  bool
	Err  bool // the answer was an error: it reports nothing
	Mem  Memory
	At   time.Time
}

// An Outcome is what became of a master's vote that did not count as yes.
type Outcome struct {
	Node int
	Kind Kind
	At   time.Time
}

// Kind says why a vote did not count.
type Kind int

// The kinds of Outcome.
const (
	Refused     Kind = iota + 1 // the master answered no
	Errored                     // the answer was an error
	Quarantined                 // I3: a young yes, and a master remembers further back
	Unknown                     // I5: a young yes the round ended on before it could tell
)

// A Tally decides one round over n masters: I1, and the restart guard's
// rules I3–I5 for the yes votes of masters whose memory is younger than
// the guard. A Tally is not safe for concurrent use: one goroutine, the
// round's, feeds it.
type Tally struct {
	n, quorum int
	guarded   bool          // the round is under the restart guard
	strict    bool          // I4 waits for every master's report
	slack     time.Duration // how much older a witness must be (I3)

	// Yes is how many yes votes count; Failed how many masters cannot
	// count for the round (no, error, quarantined, not asked).
	Yes, Failed int

	masters  []master // by node: what the guard knows of each (one allocation a round)
	reported int      // how many masters reported their memory
	held     []young  // young yes votes not decided yet
	counted  []young  // yes votes counted with a memory, while the guard may grow
	out      []Outcome
}

// A master is what a guarded round knows of one master's memory.
type master struct {
	reported bool      // it reported its memory in this round
	born     time.Time // when that memory began, by the Client's clock (At − Age)
	known    time.Time // when it began as the Client knew at the round's start; zero: unknown
}

// A young is a yes with a reported memory, held back or counted.
type young struct {
	node int
	age  time.Duration
	at   time.Time
	born time.Time // by the Client's clock: at − age
}

// NewTally returns the tally of a round over n masters; guarded puts it
// under the restart guard, strict waits for every master's report (I4),
// slack is how much older than a young master's memory a witness's must
// be (I3). Know tells it what the Client knew of each master before the
// round: a master known to be older than a young one must report before
// that young one counts (I4).
//
// Memories are compared by when they began on the Client's clock (a
// reply's arrival less the age it reports), not by their ages, which the
// masters report at different moments.
func NewTally(n int, guarded, strict bool, slack time.Duration) Tally {
	t := Tally{n: n, quorum: Quorum(n), guarded: guarded, strict: strict, slack: slack}
	if guarded {
		t.masters = make([]master, n)
	}
	return t
}

// Know records that the Client knew, before the round, that node's memory
// began at born by its own clock. Only a guarded tally keeps it.
func (t *Tally) Know(node int, born time.Time) {
	if t.guarded {
		t.masters[node].known = born
	}
}

// Quorum is how many yes votes win the round.
func (t *Tally) Quorum() int { return t.quorum }

// Won reports whether the round has its majority (I1).
func (t *Tally) Won() bool { return t.Yes >= t.quorum }

// Decided reports whether the outcome is known: a majority counted, or
// too many masters cannot count for one (I1).
func (t *Tally) Decided() bool { return t.Yes >= t.quorum || t.Failed > t.n-t.quorum }

// Fail counts a master that cannot count for the round without a vote:
// never asked, or still pending when the round ended.
func (t *Tally) Fail() { t.Failed++ }

// Count counts v, with guard the restart guard's length as of v (0 when
// off: it may grow as masters report longer TTLs). It returns the votes
// that did not count, v's and those of earlier young votes it decided;
// the slice is valid until the next call.
func (t *Tally) Count(v Vote, guard time.Duration) []Outcome {
	t.out = t.out[:0]
	born := v.At.Add(-v.Mem.Age)
	reported := !v.Err && v.Mem.Reported
	if t.guarded {
		m := &t.masters[v.Node]
		m.reported, m.born = reported, born
		t.recheck(guard)
	}
	switch {
	case v.Yes && !v.Err && guard > 0 && reported && v.Mem.Age < guard:
		t.held = append(t.held, young{node: v.Node, age: v.Mem.Age, at: v.At, born: born})
	case v.Yes && !v.Err:
		t.Yes++
		if guard > 0 && reported {
			t.counted = append(t.counted, young{node: v.Node, age: v.Mem.Age, at: v.At, born: born})
		}
	case !v.Err:
		t.fail(v.Node, Refused, v.At)
	default:
		t.fail(v.Node, Errored, v.At)
	}
	if t.guarded {
		if reported {
			// Only a report tells the round that this master remembers
			// no further back: an error may come from the witness.
			t.reported++
		}
		t.settle()
	}
	return t.out
}

// End decides the young votes still held when the round ends (I5): none
// counts, since a master that did not report may be the witness.
func (t *Tally) End() []Outcome {
	t.out = t.out[:0]
	for _, h := range t.held {
		t.fail(h.node, Unknown, h.at)
	}
	t.held = nil
	return t.out
}

func (t *Tally) fail(node int, k Kind, at time.Time) {
	t.Failed++
	t.out = append(t.out, Outcome{Node: node, Kind: k, At: at})
}

// settle decides the held votes it can: quarantined once a witness
// answered (I3), counted once enough masters reported (I4).
func (t *Tally) settle() {
	enough := Witnessed(t.n) // I4
	if t.strict {
		enough = t.n
	}
	kept := t.held[:0]
	for _, h := range t.held {
		switch {
		case t.olderThan(h.born):
			t.fail(h.node, Quarantined, h.at)
		case t.reported >= enough && !t.knownOlder(h.born):
			t.Yes++
		default:
			kept = append(kept, h)
		}
	}
	t.held = kept
}

// recheck holds back again the counted votes whose memory is younger than
// guard, which grew during the round (a master reported a longer TTL).
func (t *Tally) recheck(guard time.Duration) {
	kept := t.counted[:0]
	for _, v := range t.counted {
		if v.age < guard {
			t.Yes--
			t.held = append(t.held, v)
		} else {
			kept = append(kept, v)
		}
	}
	t.counted = kept
}

// knownOlder reports whether a master that has not reported in this round
// was known, when it started, to be older than a memory born at born by
// more than the slack: it may be the witness, and the round waits for it
// (I4).
func (t *Tally) knownOlder(born time.Time) bool {
	for _, m := range t.masters {
		if !m.reported && !m.known.IsZero() && m.known.Before(born.Add(-t.slack)) {
			return true
		}
	}
	return false
}

// olderThan reports whether a master reported a memory older than one born
// at born by more than the slack (I3).
func (t *Tally) olderThan(born time.Time) bool {
	for _, m := range t.masters {
		if m.reported && m.born.Before(born.Add(-t.slack)) {
			return true
		}
	}
	return false
}
