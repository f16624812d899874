// The world's transitions: what may happen next in a state, and each
// step's effect on the masters and the clients, deciding by internal/core.

package model

import (
	"math/bits"

	"github.com/redlock-go/redlock/internal/core"
)

// An action is one step of the world: its kind, the Client and the master.
type action struct {
	kind   int8
	client int8
	master int8
}

// successors calls emit with every state one step from s.
func successors(cfg Config, s state, emit func(action, state)) {
	worldSteps(cfg, &s, emit)
	for ci := range s.c {
		switch s.c[ci].phase {
		case idle:
			startSteps(cfg, &s, ci, emit)
		case acquiring:
			if int(s.now) >= int(s.c[ci].start)+cfg.NodeTimeout {
				n := s
				decide(cfg, &n, ci, true)
				emit(action{kind: aDeadline, client: int8(ci)}, n)
			}
		case holding:
			holdingSteps(cfg, &s, ci, emit)
		}
		deliverSteps(cfg, &s, ci, emit)
	}
}

// worldSteps are the clock's tick and the masters' restarts.
func worldSteps(cfg Config, s *state, emit func(action, state)) {
	if int(s.now) < cfg.Horizon {
		n := *s
		n.now++
		emit(action{kind: aTick}, n)
	}
	for i := range s.m {
		// A restart comes more than the slack after every marker's birth:
		// one within the slack of a marker's birth (a fresh deployment's
		// first rounds, a master marked late) is not seen (the README's
		// limit).
		seen := cfg.Guard == 0 || s.first >= 0 && settled(cfg, *s)
		if int(s.restarts) < cfg.Restarts && seen && (s.m[i].Born >= 0 || s.m[i].Val != 0) {
			n := *s
			n.restarts++
			n.m[i].Restart()
			emit(action{kind: aRestart, master: int8(i)}, n)
		}
	}
}

// startSteps are an idle client's attempts: its first one makes it (New)
// reaching some of the masters only.
func startSteps(cfg Config, s *state, ci int, emit func(action, state)) {
	c := &s.c[ci]
	if int(c.attempt) >= cfg.attempts(ci) {
		return
	}
	for reached := range 1 << nMasters {
		missed := nMasters - bits.OnesCount(uint(reached))
		if c.made && reached != 0 || !c.made && int(s.unreached)+missed > cfg.Unreached {
			continue // New, just before the first attempt, reaches the masters in reached
		}
		n := *s
		if !c.made {
			n.unreached += int8(missed)
			newClient(cfg, &n, ci, reached)
		}
		nc := &n.c[ci]
		nc.phase, nc.start, nc.nvotes, nc.votes = acquiring, s.now, 0, [nMasters]vote{}
		nc.set = [nMasters]int8{-1, -1, -1}
		for m := range nc.net {
			nc.net[m] = acquireReq
		}
		emit(action{kind: aStart, client: int8(ci), master: int8(reached)}, n)
	}
}

// holdingSteps are a holder's: an extension, its deadline, an Unlock, and
// an Unlock whose release a master loses.
func holdingSteps(cfg Config, s *state, ci int, emit func(action, state)) {
	c := &s.c[ci]
	if ci == 0 && !c.extOn && int(c.exts) < cfg.Extends && c.until > s.now {
		for _, ttl := range []int8{int8(cfg.TTL / 2), int8(2 * cfg.TTL)} {
			n := *s
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
		n := *s
		decideExtend(cfg, &n, ci, true)
		emit(action{kind: aExtendDeadline, client: int8(ci)}, n)
	}
	if cfg.Local && ci == 0 && int(c.attempt)+1 < cfg.Attempts && !c.extOn && c.net == [nMasters]int8{} {
		n := *s
		nc := &n.c[ci]
		nc.prev = nc.token(ci)
		nc.attempt++
		nc.phase, nc.start, nc.nvotes, nc.votes = acquiring, s.now, 0, [nMasters]vote{}
		nc.set = [nMasters]int8{-1, -1, -1}
		for m := range nc.net {
			nc.net[m] = handoffReq
		}
		emit(action{kind: aHandOff, client: int8(ci)}, n)
	}
	n := *s
	release(&n, ci, -1, true)
	emit(action{kind: aUnlock, client: int8(ci)}, n)
	for m := range s.m {
		if int(s.losses) < cfg.Losses && s.m[m].Val == c.token(ci) {
			n := *s
			n.losses++
			release(&n, ci, m, true)
			emit(action{kind: aUnlockLost, client: int8(ci), master: int8(m)}, n)
		}
	}
}

// deliverSteps are a client's requests on their way: each delivered, or
// its reply lost.
func deliverSteps(cfg Config, s *state, ci int, emit func(action, state)) {
	c := &s.c[ci]
	for m, in := range c.net {
		if in == none {
			continue
		}
		n := *s
		deliver(cfg, &n, ci, m, false)
		emit(action{kind: aAcquire, client: int8(ci), master: int8(m)}, n)
		if int(s.resends) < cfg.Resends {
			n := *s
			n.resends++
			rerun(cfg, &n, ci, m)
			emit(action{kind: aResend, client: int8(ci), master: int8(m)}, n)
		}
		if int(s.losses) < cfg.Losses && (c.phase == acquiring || in == extendReq && c.phase == holding && c.extOn) {
			n := *s
			n.losses++
			deliver(cfg, &n, ci, m, true)
			emit(action{kind: aAcquireReplyLost, client: int8(ci), master: int8(m)}, n)
		}
	}
}

// deliver runs client ci's request in flight to master m; replyLost: the
// master ran it, but the Client never hears the reply.
func deliver(cfg Config, s *state, ci, m int, replyLost bool) {
	c := &s.c[ci]
	if c.net[m] == handoffReq {
		deliverHandOff(cfg, s, ci, m, replyLost)
		return
	}
	if c.net[m] == extendReq {
		c.net[m] = none
		yes, age := lateExtend(cfg, s, ci, m)
		switch {
		case c.phase == releasing:
			if c.net == [nMasters]int8{} {
				c.phase, c.attempt = idle, c.attempt+1
			}
		case c.phase == holding && c.extOn && !replyLost:
			c.record(m, yes, age, s.now)
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
		c.record(m, yes, age, s.now)
		decide(cfg, s, ci, false)
	} // holding: the key is the lock's, released with it
}

// record takes master m's answer of now into the round under way: what the
// Client learns of the master's memory (node.memory), the memory that holds
// our key (hold.born), and the vote.
func (c *client) record(m int, yes bool, age, now int8) {
	if age >= 0 {
		c.known[m] = now - age
		if yes {
			c.set[m] = now - age
		}
	}
	c.votes[c.nvotes] = vote{node: int8(m), yes: yes, age: age, at: now}
	c.nvotes++
}

// deliverHandOff runs client ci's hand-off request in flight to master m,
// as deliver does an acquire's. Once the round is won and every request of
// it ran, the holder's token is nowhere: each master replaced it, or never
// had it.
func deliverHandOff(cfg Config, s *state, ci, m int, replyLost bool) {
	c := &s.c[ci]
	c.net[m] = none
	yes, age := handOff(cfg, s, ci, m)
	switch {
	case c.phase == releasing: // the round was lost meanwhile: both tokens are released after
		unset(s, ci, m)
		if c.net == [nMasters]int8{} {
			c.phase, c.attempt, c.prev = idle, c.attempt+1, 0
		}
	case c.phase == acquiring && !replyLost:
		c.record(m, yes, age, s.now)
		decide(cfg, s, ci, false)
	}
	if c.phase == holding && c.net == [nMasters]int8{} {
		c.prev = 0
	}
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
	until, _ := core.Extend(at(c.until), t.Won(), refused, nMasters, at(c.start), at(s.now), tick(int(c.ext)), cfg.Drift)
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
	if until, ok := core.Lease(t.Won(), at(c.start), at(decided), tick(cfg.TTL), cfg.Drift); ok {
		c.phase = holding
		c.until = int8(until.Sub(at(0)) / tickLen) // rounds down: a window no longer than the core's
		return
	}
	release(s, ci, -1, false)
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
	aResend         // a driver runs a request in flight, loses its reply, and sends it again
	aHandOff        // a holder's Unlock hands the key to its Client's next local waiter
)
