// Package model is an explicit-state model checker of redlock's protocol
// core. It drives internal/core, the code the library itself runs to
// decide a round and a lock's validity, against simulated masters (a Go
// rendering of lua/acquire.lua, lua/release.lua and lua/memory.lua: key,
// value, expiry, memory marker), and explores every interleaving of a small
// world breadth-first, up to a bound, with state hashing, as TLC and
// stateright do. At every state it checks that no two holders' validity
// windows overlap. A violation comes back as the shortest trace that
// reaches it, in readable steps.
//
// The world: three masters and two Clients, each making Attempts
// acquisitions of one key and releasing what it took; requests and replies
// delayed (time passes between any two steps), reordered and lost; masters
// restarted without their data; a holder paused past its validity (it
// releases whenever, or never). One tick is 10 ms of a clock that
// every party shares (a Client's and the masters' clocks agree: drift is
// not modelled).
package model

import (
	"fmt"
	"hash/maphash"
	"math/bits"
	"slices"
	"strings"
	"time"

	"github.com/redlock-go/redlock/internal/core"
)

// The world's size.
const (
	nMasters = 3
	nClients = 2
)

// Config bounds the world the checker explores.
type Config struct {
	TTL         int  // the locks' TTL, in ticks
	NodeTimeout int  // how long a round waits for the masters, in ticks
	Guard       int  // the restart guard (at least the longest TTL, 2·TTL with Extends); 0: off
	Slack       int  // how much older a witness's memory must be (I3)
	Strict      bool // the strict guard (I4: every master's report)
	Horizon     int  // the last tick explored
	Attempts    int  // acquisitions per Client
	Restarts    int  // master restarts without data, at most
	Losses      int  // requests or replies lost, at most
	Unreached   int  // masters New's check did not reach, at most, in all
	Extends     int  // extensions per lock of client 0, each to a TTL of TTL/2 or 2·TTL
	MaxStates   int  // stop after this many states (0: no limit)
}

// DefaultConfig is the world of the restart guard CI explores (18.6
// million states): restarts, masters New does not reach, lost replies.
func DefaultConfig() Config {
	return Config{TTL: 4, NodeTimeout: 1, Guard: 8, Slack: 1, Horizon: 4, Attempts: 1, Restarts: 1, Losses: 1, Unreached: 2, MaxStates: 30_000_000}
}

// ExtendConfig is the world of Extend CI explores (4.7 million states):
// client 0 extends its lock once, shorter or longer, under lost replies,
// without restarts. Both worlds together, with Unreached 0, are 29 million
// states (make model WORLD=all).
func ExtendConfig() Config {
	c := DefaultConfig()
	c.Extends, c.Restarts, c.Unreached = 1, 0, 0
	return c
}

// AllConfig is both worlds at once: restarts, lost replies and Extend
// (New reaches every master).
func AllConfig() Config {
	c := DefaultConfig()
	c.Extends, c.Unreached, c.MaxStates = 1, 0, 0
	return c
}

// What a Client has in flight to one master.
const (
	none       = iota
	acquireReq // an acquire request: the master runs it and the Client hears the reply in one step, or the reply is lost
	extendReq  // an extend request, the same way
)

type vote struct {
	node int8
	yes  bool
	age  int8 // the memory's age reported; -1: none
	at   int8
}

// Client phases.
const (
	idle = iota
	acquiring
	holding
	releasing
)

type client struct {
	phase   int8
	made    bool           // New has run: it asked every master's memory
	known   [nMasters]int8 // when each master's memory began, as the Client last learned it; -1: unknown
	attempt int8           // acquisitions started
	start   int8
	until   int8 // holding: the end of its validity
	ext     int8 // the TTL of the last extension round, while it is under way or a request of it is in flight
	extOn   bool // holding: an extension round is under way
	exts    int8 // extension rounds started for the current lock
	nvotes  int8
	votes   [nMasters]vote
	net     [nMasters]int8 // none or acquireReq
}

// token is client i's token for its current attempt: never 0, which is no
// token.
func (c *client) token(i int) int8 { return int8(i*8 + int(c.attempt) + 1) }

type state struct {
	first     int8 // when the deployment's first marker was made; -1: none yet
	now       int8
	restarts  int8
	losses    int8
	unreached int8
	m         [nMasters]Master
	c         [nClients]client
}

// Result is what a run of the checker found.
type Result struct {
	States    int      // distinct states explored
	Depth     int      // the deepest level reached
	Complete  bool     // every reachable state within the bounds was explored
	Violation string   // the property broken, or ""
	Trace     []string // the shortest path to it, one step a line
}

// Check explores the world cfg bounds, breadth-first, one level of
// states at a time. It keeps a 64-bit fingerprint of every state seen
// (as TLC does: two states that share one are taken for one, with odds of
// about 10⁻⁵ at ten million states) and, for each, its parent and the
// action that led to it, so that a violation's trace is the shortest.
func Check(cfg Config) Result {
	s0 := state{first: -1}
	for i := range s0.m {
		s0.m[i].Born = -1
	}
	for i := range s0.c {
		for m := range s0.c[i].known {
			s0.c[i].known[m] = -1
		}
	}
	seed := maphash.MakeSeed()
	seen := newFingerprints()
	seen.add(maphash.Comparable(seed, s0))
	steps := []step{{parent: -1}}
	level, levelIdx := []state{s0}, []int32{0}
	res := Result{Complete: true}
	for depth := 0; len(level) > 0; depth++ {
		res.Depth = depth
		var next []state
		var nextIdx []int32
		for k, s := range level {
			if v := violation(cfg, s); v != "" {
				res.Violation = v
				res.Trace = trace(cfg, s0, steps, levelIdx[k])
				res.States, res.Complete = len(steps), false
				return res
			}
			if cfg.MaxStates > 0 && len(steps) >= cfg.MaxStates {
				res.Complete = false
				continue
			}
			successors(cfg, s, func(a action, n state) {
				canon(cfg, &n)
				h := maphash.Comparable(seed, n)
				if !seen.add(h) {
					return
				}
				steps = append(steps, step{parent: levelIdx[k], act: a})
				next = append(next, n)
				nextIdx = append(nextIdx, int32(len(steps)-1))
			})
		}
		level, levelIdx = next, nextIdx
	}
	res.States = len(steps)
	return res
}

// A step is how a state was first reached: from its parent, by act.
type step struct {
	parent int32
	act    action
}

// trace replays the actions from s0 to step i and renders each.
func trace(cfg Config, s0 state, steps []step, i int32) []string {
	var acts []action
	for ; i > 0; i = steps[i].parent {
		acts = append(acts, steps[i].act)
	}
	var out []string
	s, names := s0, identity // names: each canonical master's number in s0
	for k := len(acts) - 1; k >= 0; k-- {
		a := acts[k]
		out = append(out, a.describe(cfg, s, names))
		successors(cfg, s, func(b action, n state) {
			if b == a {
				perm := canon(cfg, &n)
				s = n
				old := names
				for j, i := range perm {
					names[j] = old[i]
				}
			}
		})
	}
	return out
}

// canon forgets what no later step can tell apart, so that states that
// differ only there are one: an expired key, a decided round's votes, a
// validity window that is over, a Client that is done.
func canon(cfg Config, s *state) (perm [nMasters]int) {
	for i := range s.m {
		if s.m[i].Val != 0 && s.m[i].Exp <= s.now {
			s.m[i].Val, s.m[i].Exp = 0, 0
		}
	}
	for i := range s.c {
		c := &s.c[i]
		if c.phase != acquiring && !c.extOn {
			c.start, c.nvotes, c.votes = 0, 0, [nMasters]vote{}
		}
		inFlight := false
		for _, r := range c.net {
			inFlight = inFlight || r == extendReq
		}
		if !c.extOn && !inFlight {
			c.ext = 0
		}
		if c.phase == holding && c.until <= s.now {
			c.until = 0
		}
		if c.phase == idle && int(c.attempt) >= cfg.Attempts {
			c.made, c.known = false, [nMasters]int8{-1, -1, -1}
		}
	}
	return symmetric(s)
}

// The identity numbering of the masters.
var identity = [nMasters]int{0, 1, 2}

// symmetric renumbers the masters in the order of what each holds and
// what each Client knows of it and has in flight to it: the masters are
// interchangeable, so states that differ only in their numbering are one
// (symmetry reduction, as TLC's SYMMETRY).
func symmetric(s *state) [nMasters]int {
	const width = 3 + nClients*5
	var keys [nMasters][width]int8
	for i := range s.m {
		k := &keys[i]
		k[0], k[1], k[2] = s.m[i].Val, s.m[i].Exp, s.m[i].Born
		for ci := range s.c {
			c := &s.c[ci]
			o := 3 + ci*5
			k[o], k[o+1], k[o+2] = c.known[i], c.net[i], -1
			for v := range c.votes[:c.nvotes] {
				if int(c.votes[v].node) == i {
					k[o+2], k[o+3], k[o+4] = int8(v), c.votes[v].age, boolInt8(c.votes[v].yes)
				}
			}
		}
	}
	perm := identity
	slices.SortStableFunc(perm[:], func(a, b int) int { return slices.Compare(keys[a][:], keys[b][:]) })
	if perm == identity {
		return perm
	}
	var inv [nMasters]int8
	for j, i := range perm {
		inv[i] = int8(j)
	}
	old := *s
	for j, i := range perm {
		s.m[j] = old.m[i]
		for ci := range s.c {
			s.c[ci].known[j], s.c[ci].net[j] = old.c[ci].known[i], old.c[ci].net[i]
		}
	}
	for ci := range s.c {
		c := &s.c[ci]
		for v := range c.votes[:c.nvotes] {
			c.votes[v].node = inv[c.votes[v].node]
		}
	}
	return perm
}

func boolInt8(b bool) int8 {
	if b {
		return 1
	}
	return 0
}

// violation returns the safety property s breaks, or "".
func violation(_ Config, s state) string {
	for i := range s.c {
		for j := i + 1; j < len(s.c); j++ {
			a, b := &s.c[i], &s.c[j]
			if a.phase == holding && b.phase == holding && s.now < a.until && s.now < b.until {
				return fmt.Sprintf("two holders at tick %d: client %d until %d, client %d until %d", s.now, i, a.until, j, b.until)
			}
		}
	}
	return ""
}

// An action is one step of the world: its kind, the Client and the master.
type action struct {
	kind   int8
	client int8
	master int8
}

// The kinds of action.
const (
	aTick = iota
	aRestart
	aStart
	aDeadline
	aUnlock
	aUnlockLost
	aAcquire
	aAcquireReplyLost
	aExtend         // a holder starts an extension round to TTL master (reused as the TTL)
	aExtendDeadline // its round reaches its deadline
)

// describe renders a for a trace, from the state s it was taken in, with
// each master by its name in the trace's first state.
func (a action) describe(cfg Config, s state, names [nMasters]int) string {
	c, m := a.client, a.master
	name := names[max(0, min(int(m), nMasters-1))]
	prefix := fmt.Sprintf("t=%d ", s.now)
	switch a.kind {
	case aTick:
		return fmt.Sprintf("t=%d", s.now+1)
	case aRestart:
		return prefix + fmt.Sprintf("master %d restarts without its data", name)
	case aStart:
		made := ""
		if !s.c[c].made {
			var reached []int
			for i := range nMasters {
				if m&(1<<i) != 0 {
					reached = append(reached, names[i])
				}
			}
			slices.Sort(reached)
			made = fmt.Sprintf(" (made now: New's check reaches masters %v)", reached)
		}
		return prefix + fmt.Sprintf("client %d starts acquiring (token %d)%s", c, s.c[c].token(int(c)), made)
	case aDeadline:
		return prefix + fmt.Sprintf("client %d's round reaches its deadline", c)
	case aUnlock:
		return prefix + fmt.Sprintf("client %d unlocks", c)
	case aUnlockLost:
		return prefix + fmt.Sprintf("client %d unlocks; its release to master %d is lost", c, name)
	case aExtend:
		return prefix + fmt.Sprintf("client %d starts extending to a TTL of %d (its lock valid until %d)", c, m, s.c[c].until)
	case aExtendDeadline:
		return prefix + fmt.Sprintf("client %d's extension round reaches its deadline", c)
	case aAcquire, aAcquireReplyLost:
		if s.c[c].net[m] == extendReq {
			n := s
			yes, age := extendMaster(cfg, &n, int(m), s.c[c].token(int(c)), s.c[c].ext)
			lost := ""
			if a.kind == aAcquireReplyLost {
				lost = ", the reply lost"
			}
			return prefix + fmt.Sprintf("master %d runs client %d's extend: yes=%v memory age=%d%s", name, c, yes, age, lost)
		}
		n := s
		yes, age := acquire(cfg, &n, int(m), s.c[c].token(int(c)))
		lost := ""
		if a.kind == aAcquireReplyLost {
			lost = ", the reply lost"
		}
		if s.c[c].phase == releasing {
			lost = ", and then its release (given up meanwhile)"
		}
		return prefix + fmt.Sprintf("master %d runs client %d's acquire: yes=%v memory age=%d%s", name, c, yes, age, lost)
	}
	return prefix + "?"
}

// successors calls emit with every state one step from s.
func successors(cfg Config, s state, emit func(action, state)) {
	if int(s.now) < cfg.Horizon {
		n := s
		n.now++
		emit(action{kind: aTick}, n)
	}
	for i := range s.m {
		// A restart comes more than the slack after every marker's birth:
		// one within the slack of a marker's birth (a fresh deployment's
		// first rounds, a master marked late) is not seen (the README's
		// limit).
		seen := cfg.Guard == 0 || s.first >= 0 && settled(cfg, s)
		if int(s.restarts) < cfg.Restarts && seen && (s.m[i].Born >= 0 || s.m[i].Val != 0) {
			n := s
			n.restarts++
			n.m[i].Restart()
			emit(action{kind: aRestart, master: int8(i)}, n)
		}
	}
	for ci := range s.c {
		c := &s.c[ci]
		switch c.phase {
		case idle:
			if int(c.attempt) >= cfg.Attempts {
				break
			}
			for reached := range 1 << nMasters {
				missed := nMasters - bits.OnesCount(uint(reached))
				if c.made && reached != 0 || !c.made && int(s.unreached)+missed > cfg.Unreached {
					continue // New, just before the first attempt, reaches the masters in reached
				}
				n := s
				if !c.made {
					n.unreached += int8(missed)
					newClient(cfg, &n, ci, reached)
				}
				nc := &n.c[ci]
				nc.phase, nc.start, nc.nvotes, nc.votes = acquiring, s.now, 0, [nMasters]vote{}
				for m := range nc.net {
					nc.net[m] = acquireReq
				}
				emit(action{kind: aStart, client: int8(ci), master: int8(reached)}, n)
			}
		case acquiring:
			if int(s.now) >= int(c.start)+cfg.NodeTimeout {
				n := s
				decide(cfg, &n, ci, true)
				emit(action{kind: aDeadline, client: int8(ci)}, n)
			}
		case holding:
			if ci == 0 && !c.extOn && int(c.exts) < cfg.Extends && c.until > s.now {
				for _, ttl := range []int8{int8(cfg.TTL / 2), int8(2 * cfg.TTL)} {
					n := s
					nc := &n.c[ci]
					nc.ext, nc.extOn, nc.exts, nc.start, nc.nvotes, nc.votes = ttl, true, nc.exts+1, s.now, 0, [nMasters]vote{}
					for m := range nc.net {
						if nc.net[m] == none {
							nc.net[m] = extendReq
						}
					}
					emit(action{kind: aExtend, client: int8(ci), master: ttl}, n)
				}
			}
			if c.extOn && int(s.now) >= int(c.start)+cfg.NodeTimeout {
				n := s
				decideExtend(cfg, &n, ci, true)
				emit(action{kind: aExtendDeadline, client: int8(ci)}, n)
			}
			n := s
			release(&n, ci, -1)
			emit(action{kind: aUnlock, client: int8(ci)}, n)
			for m := range s.m {
				if int(s.losses) < cfg.Losses && s.m[m].Val == c.token(ci) {
					n := s
					n.losses++
					release(&n, ci, m)
					emit(action{kind: aUnlockLost, client: int8(ci), master: int8(m)}, n)
				}
			}
		}
		for m, in := range c.net {
			if in == none {
				continue
			}
			n := s
			deliver(cfg, &n, ci, m, false)
			emit(action{kind: aAcquire, client: int8(ci), master: int8(m)}, n)
			if int(s.losses) < cfg.Losses && (c.phase == acquiring || in == extendReq && c.phase == holding && c.extOn) {
				n := s
				n.losses++
				deliver(cfg, &n, ci, m, true)
				emit(action{kind: aAcquireReplyLost, client: int8(ci), master: int8(m)}, n)
			}
		}
	}
}

// deliver runs client ci's request in flight to master m; replyLost: the
// master ran it, but the Client never hears the reply.
func deliver(cfg Config, s *state, ci, m int, replyLost bool) {
	c := &s.c[ci]
	if c.net[m] == extendReq {
		c.net[m] = none
		yes, age := extendMaster(cfg, s, m, c.token(ci), c.ext)
		switch {
		case c.phase == releasing:
			if c.net == [nMasters]int8{} {
				c.phase, c.attempt = idle, c.attempt+1
			}
		case c.phase == holding && c.extOn && !replyLost:
			if age >= 0 {
				c.known[m] = s.now - age
			}
			c.votes[c.nvotes] = vote{node: int8(m), yes: yes, age: age, at: s.now}
			c.nvotes++
			decideExtend(cfg, s, ci, false)
		}
		return
	}
	if c.net[m] != acquireReq {
		return
	}
	c.net[m] = none
	yes, age := acquire(cfg, s, m, c.token(ci))
	switch {
	case c.phase == releasing: // given up meanwhile: the key it may have set is released after
		unset(s, ci, m)
		if c.net == [nMasters]int8{} {
			c.phase, c.attempt = idle, c.attempt+1
		}
	case c.phase == acquiring && !replyLost:
		if age >= 0 {
			c.known[m] = s.now - age // what the Client learns of the master (node.memory)
		}
		c.votes[c.nvotes] = vote{node: int8(m), yes: yes, age: age, at: s.now}
		c.nvotes++
		decide(cfg, s, ci, false)
	} // holding: the key is the lock's, released with it
}

// unset is lua/release.lua on master m for client ci's token.
func unset(s *state, ci, m int) {
	s.m[m].Release(s.now, s.c[ci].token(ci))
}

// newClient is New's guard check (lua/guard_check.lua) on the masters in
// the bit set reached (the others do not answer in time): it makes a
// missing marker, and the Client learns each memory's age.
func newClient(cfg Config, s *state, ci, reached int) {
	c := &s.c[ci]
	c.made = true
	if cfg.Guard == 0 {
		return
	}
	for m := range s.m {
		if reached&(1<<m) != 0 {
			markMemory(s, m)
			c.known[m] = s.m[m].Born
		}
	}
}

// settled reports whether every marker was born more than the slack ago.
func settled(cfg Config, s state) bool {
	for _, m := range s.m {
		if m.Born >= 0 && int(s.now) <= int(m.Born)+cfg.Slack {
			return false
		}
	}
	return true
}

// markMemory is lua/memory.lua's first script on master m: a missing
// marker is made, born now.
func markMemory(s *state, m int) {
	s.m[m].memory(s.now, true)
	marked(s)
}

// marked records the deployment's first marker, once one was made.
func marked(s *state) {
	if s.first < 0 {
		s.first = s.now
	}
}

// acquire is lua/acquire.lua on master m at s.now.
func acquire(cfg Config, s *state, m int, token int8) (yes bool, age int8) {
	yes, age = s.m[m].Acquire(s.now, token, int8(cfg.TTL), cfg.Guard > 0)
	if age >= 0 {
		marked(s)
	}
	return yes, age
}

// extendMaster is lua/extend.lua on master m at s.now.
func extendMaster(cfg Config, s *state, m int, token, ttl int8) (yes bool, age int8) {
	yes, age = s.m[m].Extend(s.now, token, ttl, cfg.Guard > 0)
	if age >= 0 {
		marked(s)
	}
	return yes, age
}

// decideExtend replays client ci's extension votes through the core's
// tally and, once decided (or at the deadline), applies core.Extend to the
// lock's end. A request still in flight is left to land: it only lengthens
// our key.
func decideExtend(cfg Config, s *state, ci int, deadline bool) {
	c := &s.c[ci]
	t, refused := tally(cfg, c)
	if !t.Decided() && !deadline {
		return
	}
	t.End()
	until, _ := core.Extend(at(c.until), t.Won(), refused, nMasters, at(c.start), at(s.now), tick(int(c.ext)), 0.01)
	c.until = int8(until.Sub(at(0)) / tickLen)
	c.extOn, c.start, c.nvotes, c.votes = false, 0, 0, [nMasters]vote{}
}

// tally replays client ci's votes through the core's tally, failing the
// masters that did not answer, and returns it with how many said no.
func tally(cfg Config, c *client) (core.Tally, int) {
	t := core.NewTally(nMasters, cfg.Guard > 0, cfg.Strict, tick(cfg.Slack))
	for m, b := range c.known {
		if b >= 0 {
			t.Know(m, at(b))
		}
	}
	guard := tick(max(cfg.Guard, cfg.TTL, int(c.ext)))
	if cfg.Guard == 0 {
		guard = 0
	}
	refused := 0
	for _, v := range c.votes[:c.nvotes] {
		if !v.yes {
			refused++
		}
		t.Count(core.Vote{Node: int(v.node), Yes: v.yes, At: at(v.at),
			Mem: core.Memory{Reported: v.age >= 0, Age: tick(int(v.age)), Longest: tick(max(cfg.TTL, int(c.ext)))}}, guard)
	}
	return t, refused
}

// decide replays client ci's votes through the core's tally and, when it is
// decided (or the deadline has come), takes the lock or releases all.
func decide(cfg Config, s *state, ci int, deadline bool) {
	c := &s.c[ci]
	t := core.NewTally(nMasters, cfg.Guard > 0, cfg.Strict, tick(cfg.Slack))
	for m, b := range c.known {
		if b >= 0 {
			t.Know(m, at(b)) // a no-op without the guard
		}
	}
	guard := tick(max(cfg.Guard, cfg.TTL))
	if cfg.Guard == 0 {
		guard = 0
	}
	voted := [nMasters]bool{}
	for _, v := range c.votes[:c.nvotes] {
		voted[v.node] = true
		t.Count(core.Vote{Node: int(v.node), Yes: v.yes, At: at(v.at),
			Mem: core.Memory{Reported: v.age >= 0, Age: tick(int(v.age)), Longest: tick(cfg.TTL)}}, guard)
	}
	if !t.Decided() && !deadline {
		return
	}
	if !t.Decided() {
		for _, v := range voted {
			if !v {
				t.Fail()
			}
		}
	}
	t.End()
	decided := s.now
	if until, ok := core.Lease(t.Won(), at(c.start), at(decided), tick(cfg.TTL), 0.01); ok {
		c.phase = holding
		c.until = int8(until.Sub(at(0)) / tickLen) // rounds down: a window no longer than the core's
		return
	}
	release(s, ci, -1)
}

// release releases client ci's key on every master (Redlock spec, step 4)
// but lost (-1: none), in one step: the holder's window is over, and no
// other Client can tell the releases' order apart from their effects on
// its own attempts, which each interleaving of those attempts covers. A
// request still in flight is followed by its release once it ran.
func release(s *state, ci, lost int) {
	c := &s.c[ci]
	for m := range s.m {
		if m != lost {
			unset(s, ci, m)
		}
	}
	if c.net == [nMasters]int8{} {
		c.phase, c.attempt = idle, c.attempt+1
		return
	}
	c.phase = releasing
}

// A tick is 10 ms: the drift allowance's fixed 2 ms then leaves a TTL of a
// few ticks most of its validity.
const tickLen = 10 * time.Millisecond

func tick(n int) time.Duration { return time.Duration(n) * tickLen }

func at(n int8) time.Time { return time.Unix(0, 0).Add(tick(int(n))) }

// String renders a result for a test's log.
func (r Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d states, depth %d, complete %v", r.States, r.Depth, r.Complete)
	if r.Violation != "" {
		fmt.Fprintf(&b, "\nVIOLATION: %s\ntrace:\n  %s", r.Violation, strings.Join(r.Trace, "\n  "))
	}
	return b.String()
}
