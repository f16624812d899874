// Releases, and a driver's re-sends.

package model

import "github.com/redlock-go/redlock/internal/core"

// releaseEarly, set by a test, makes a release go out to a master whose
// acquire is still in flight, as if it did not wait for the acquire's
// reply: the positive control of the check that an Unlock which returned
// nil leaves none of its tokens behind (TestModelFindsAReleaseThatOvertakesItsAcquire).
var releaseEarly = false

// lostRoundKept, set by a test, makes a Client that lost a round leave its
// keys where it set them: the positive control of the check that a key
// holds nothing or a live holder's token (TestModelFindsALostRoundsKeysLeft).
var lostRoundKept = false

// release releases client ci's key (Redlock spec, step 4) on every master
// but lost (-1: none) and those whose acquire is still in flight, in one
// step: the holder's window is over, and no other Client can tell the
// releases' order apart from their effects on its own attempts, which each
// interleaving of those attempts covers. As the engine's, a release to a
// master waits for the reply of the acquire sent there (a driver may run
// it again until then), and follows it once it comes (deliver). unlock:
// this is Unlock's release, whose verdict is core.Released's; when it
// returns nil, the checker remembers the token on the masters the release
// reached (ghost.gone).
func release(s *state, ci, lost int, unlock bool) {
	c := &s.c[ci]
	var reached [nMasters]bool
	deleted := 0
	for m := range s.m {
		if m == lost || (c.net[m] == acquireReq || c.net[m] == handoffReq) && !releaseEarly {
			continue
		}
		reached[m] = true
		if !unlock && lostRoundKept {
			continue
		}
		if s.m[m].Release(s.now, c.token(ci)) {
			deleted++
		}
		if c.prev != 0 {
			s.m[m].Release(s.now, c.prev) // a lost hand-off's: the holder's token, where it is left
		}
	}
	if lost >= 0 && s.m[lost].Val == c.token(ci) {
		s.g[lost].left = c.token(ci) // Redlock leaves it to its TTL
	}
	if unlock && c.phase == holding && core.Released(deleted >= core.Quorum(nMasters), at(s.now), at(c.until)) {
		for m, r := range reached {
			if r {
				s.g[m].gone = c.token(ci)
			}
		}
	}
	if c.net == [nMasters]int8{} {
		c.phase, c.attempt, c.prev = idle, c.attempt+1, 0
		return
	}
	c.phase = releasing
}

// unset is lua/release.lua on master m for client ci's token, and for the
// token a lost hand-off was to replace.
func unset(s *state, ci, m int) {
	s.m[m].Release(s.now, s.c[ci].token(ci))
	if p := s.c[ci].prev; p != 0 {
		s.m[m].Release(s.now, p)
	}
}

// rerun is a driver's re-send (go-redis's MaxRetries): master m runs
// client ci's request in flight, the reply is lost to a network error,
// and the driver sends the request again, so that it is still in flight.
func rerun(cfg Config, s *state, ci, m int) {
	c := &s.c[ci]
	switch c.net[m] {
	case extendReq:
		lateExtend(cfg, s, ci, m)
		return
	case handoffReq:
		handOff(cfg, s, ci, m)
		return
	}
	acquire(cfg, s, m, c.token(ci))
}

// lateExtend is client ci's extend request running on master m. One that
// lands after its Unlock began, on a master that lost its data meanwhile,
// puts the key back by its repair (lua/extend.lua): the README's limit, a
// stray key on that master until its TTL that no holder counts. The
// checker lets it stay (ghost.left), and it voids the master's ghost.gone.
func lateExtend(cfg Config, s *state, ci, m int) (yes bool, age int8) {
	c := &s.c[ci]
	had := s.m[m].Val == c.token(ci) && s.m[m].live(s.now)
	restarted := c.set[m] >= 0 && s.m[m].Born != c.set[m]
	yes, age = extendMaster(cfg, s, m, c.token(ci), c.ext, c.set[m])
	if c.phase == releasing && restarted && !had && s.m[m].Val == c.token(ci) {
		s.g[m].left, s.g[m].gone = c.token(ci), 0
	}
	return yes, age
}
