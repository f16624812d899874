// Rendering the world's steps for a trace.

package model

import (
	"fmt"
	"slices"
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
	case aResend:
		return prefix + fmt.Sprintf("master %d runs client %d's request, whose reply is lost: the driver sends it again", name, c)
	case aHandOff:
		return prefix + fmt.Sprintf("client %d unlocks, handing the key to its next local waiter (token %d replaces %d)", c, s.c[c].token(int(c))+1, s.c[c].token(int(c)))
	case aAcquire, aAcquireReplyLost:
		return prefix + describeRequest(cfg, s, a, name)
	}
	return prefix + "?"
}

// describeRequest renders the delivery of a request in flight: an acquire,
// an extend or a hand-off, and whether its reply was lost.
func describeRequest(cfg Config, s state, a action, name int) string {
	c, m := a.client, a.master
	lost := ""
	if a.kind == aAcquireReplyLost {
		lost = ", the reply lost"
	}
	n := s
	switch s.c[c].net[m] {
	case handoffReq:
		yes, age := handOff(cfg, &n, int(c), int(m))
		return fmt.Sprintf("master %d runs client %d's hand-off: yes=%v memory age=%d%s", name, c, yes, age, lost)
	case extendReq:
		yes, age := extendMaster(cfg, &n, int(m), s.c[c].token(int(c)), s.c[c].ext, s.c[c].set[m])
		return fmt.Sprintf("master %d runs client %d's extend: yes=%v memory age=%d%s", name, c, yes, age, lost)
	}
	yes, age := acquire(cfg, &n, int(m), s.c[c].token(int(c)))
	if s.c[c].phase == releasing {
		lost = ", and then its release (given up meanwhile)"
	}
	return fmt.Sprintf("master %d runs client %d's acquire: yes=%v memory age=%d%s", name, c, yes, age, lost)
}
