package model

// A Master is a simulated master, what the model keeps of one: the lock
// key's value and expiry, and when its memory marker was made, in ticks;
// with a Go rendering of each script the model runs on it. A differential
// test (the root package's TestModelMastersAnswerAsRedisDoes) holds these
// renderings to the real scripts on redis-server.
type Master struct {
	Val  int8 // the token whose key the master holds, 0: none
	Exp  int8 // when the key expires
	Born int8 // when the memory marker was made; -1: none
}

// memory is lua/memory.lua at now: a missing marker is made, born now; it
// returns the memory's age (-1 with the guard off), never negative.
func (m *Master) memory(now int8, guard bool) int8 {
	if !guard {
		return -1
	}
	if m.Born < 0 {
		m.Born = now
	}
	return max(0, now-m.Born)
}

// live reports whether the key holds a value at now.
func (m *Master) live(now int8) bool { return m.Val != 0 && m.Exp > now }

// Acquire is lua/acquire.lua at now: a free key is taken for token for
// ttl; a key token holds already lives at least ttl more; another's is
// left alone.
func (m *Master) Acquire(now, token, ttl int8, guard bool) (yes bool, age int8) {
	age = m.memory(now, guard)
	switch {
	case !m.live(now):
		m.Val, m.Exp = token, now+ttl
		return true, age
	case m.Val == token:
		m.Exp = max(m.Exp, now+ttl)
		return true, age
	}
	return false, age
}

// Extend is lua/extend.lua at now: a key token holds lives at least ttl
// more, never shortened. Its repair: with the guard on, a missing key is
// set again for token, for ttl, when the master's memory began since the
// lock was set there (since: when that memory began; -1: the Client does
// not know, and nothing is repaired).
func (m *Master) Extend(now, token, ttl int8, guard bool, since int8) (yes bool, age int8) {
	age = m.memory(now, guard)
	if !m.live(now) && guard && since >= 0 && (since != m.Born || repairsAnyKey) {
		m.Val, m.Exp = token, now+ttl
		return true, age
	}
	if m.Val != token || !m.live(now) {
		return false, age
	}
	if shortens {
		m.Exp = now + ttl
	} else {
		m.Exp = max(m.Exp, now+ttl)
	}
	return true, age
}

// repairsAnyKey makes Extend's repair put back any missing key, not only
// one a restart lost: the positive control of the repair world
// (TestModelFindsARepairOfAKeyTheMasterDidNotLose).
var repairsAnyKey = false

// shortens makes Extend shorten keys as a plain PEXPIRE would: the
// positive control of the model's Extend (TestModelFindsAnExtendThatShortensTheKey).
var shortens = false

// HandOff is lua/handoff.lua for the Client's next local waiter at now: a
// key from holds is given to to for ttl, a free key is taken for to, and
// another's is left alone. The model always reads the memory marker (the
// script skips it for a trusted hand-off, I9: not explored here).
func (m *Master) HandOff(now, from, to, ttl int8, guard bool) (yes bool, age int8) {
	age = m.memory(now, guard)
	switch {
	case m.live(now) && m.Val == to:
		return true, age // a re-send
	case !m.live(now) || m.Val == from || handOffTakesAnyKey:
		m.Val, m.Exp = to, now+ttl
		return true, age
	}
	return false, age
}

// handOffTakesAnyKey makes the hand-off replace any key, not only the
// holder's: the positive control of the local hand-off world
// (TestModelFindsAHandOffThatTakesAnotherClientsKey).
var handOffTakesAnyKey = false

// Release is lua/release.lua at now: the key is deleted if token holds it.
func (m *Master) Release(now, token int8) bool {
	if m.Val != token || !m.live(now) {
		return false
	}
	m.Val, m.Exp = 0, 0
	return true
}

// Restart is a restart without data: no key, no marker.
func (m *Master) Restart() { *m = Master{Born: -1} }

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

// acquire is lua/acquire.lua on master m at s.now. A master whose clock
// runs fast (cfg.Fast) counts the key's TTL out early.
func acquire(cfg Config, s *state, m int, token int8) (yes bool, age int8) {
	yes, age = s.m[m].Acquire(s.now, token, int8(cfg.TTL-cfg.Fast), cfg.Guard > 0)
	if age >= 0 {
		marked(s)
	}
	return yes, age
}

// handOff is lua/handoff.lua on master m at s.now, for client ci's next
// local waiter.
func handOff(cfg Config, s *state, ci, m int) (yes bool, age int8) {
	c := &s.c[ci]
	yes, age = s.m[m].HandOff(s.now, c.prev, c.token(ci), int8(cfg.TTL-cfg.Fast), cfg.Guard > 0)
	if age >= 0 {
		marked(s)
	}
	return yes, age
}

// extendMaster is lua/extend.lua on master m at s.now.
func extendMaster(cfg Config, s *state, m int, token, ttl, since int8) (yes bool, age int8) {
	yes, age = s.m[m].Extend(s.now, token, ttl-int8(cfg.Fast), cfg.Guard > 0, since)
	if age >= 0 {
		marked(s)
	}
	return yes, age
}
