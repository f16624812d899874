// The restart guard: a master that lost its data does not vote until every
// lock it may have forgotten has expired (Redlock spec, "delayed restarts").

package redlock

import (
	"strings"
	"time"
)

// A master that restarts without persistence (or is flushed, or fails over
// to an empty replica) forgets the keys of locks it granted. Were its yes
// counted at once, a second holder could win a majority with it while the
// first still counts on it: chaos scenario 10. So each master keeps a
// marker of when its memory began (lua/memory.lua), and reports the
// memory's age with every vote. A yes from a master whose memory is younger
// than the guard is held back until the round knows more:
//
//   - it is not counted (ErrNodeQuarantined) as soon as any master answers
//     with a memory older than its own by more than memorySlack: that
//     master remembers a time the young one has forgotten, when it may have
//     granted a lock still alive. One witness is enough: the masters of a
//     lock that kept their data hold its key, and answer;
//   - it is counted once every master has reported its memory and none is
//     older: nobody remembers further back. In a fresh deployment every
//     marker is born in the same few rounds, so nothing stalls there;
//   - it is not counted when the round ends (the node deadline, the
//     caller's ctx) before every master reported: the one that did not may
//     be the witness. An answer that is an error reports nothing (a master
//     at maxmemory, a refused connection), nor does one from a master whose
//     ACL user cannot read the marker. So a fresh deployment with a master
//     down takes no lock until its markers are older than the guard.
//
// Its key is set all the same, so it protects the lock from then on, and is
// released with the lock. A master that restarted with its data (the
// marker is persisted with the keys) is as old as before, and counts at
// once. When a majority loses its data at once, its young votes stay out
// for the guard as long as one master that kept its data answers: no second
// holder gets in before the first one's TTL is over.

// memorySlack is how much older than a master's memory the others' must be
// for it to count as having lost its data: more than the spread of a fresh
// deployment's markers, all born in its first rounds.
const memorySlack = time.Second

// markerKey is the master's memory marker that the scripts read: one per
// plain master; on a Redis Cluster master it must share the lock key's hash
// slot, so it is one per hash tag (inSlotOf), which knows only since that
// tag was first used there.
func markerKey(key string, cluster bool) string {
	if !cluster {
		return plainMarkerKey
	}
	return inSlotOf(key, markerSuffix)
}

const (
	plainMarkerKey = "redlock:memory"  // a plain master's marker
	markerSuffix   = ":redlock-memory" // a cluster master's, after the key's hash tag
)

// ownKey reports whether key is a name the library uses for its own keys
// (a memory marker, a fence counter): a lock on it would overwrite them.
func ownKey(key string) bool {
	return key == plainMarkerKey || strings.HasSuffix(key, markerSuffix) || strings.HasSuffix(key, fenceSuffix)
}

// memory is what a master reports of its memory with a vote.
type memory struct {
	reported bool          // false: none (no marker rights, an error, or an op without one)
	age      time.Duration // since its memory began
	longest  time.Duration // the longest TTL granted there since
	born     int64         // when its memory began, in ms of its clock: which memory it is
}

// knownMemory is what the Client last learned of a master's memory: when
// it began by the master's clock (which memory it is), and by the Client's.
// The scripts are told born, and when the marker still says so, they skip
// reading the master's clock: the Client counts the age on its own, from
// since. since is when the reply that reported the age arrived less that
// age, so it is late by the reply's way back: the age counted from it is a
// little young, never old, which errs on the guard's side.
type knownMemory struct {
	born    int64
	since   time.Time
	bornArg any // born, boxed once for the scripts
}

func newKnownMemory(born int64, since time.Time) *knownMemory {
	return &knownMemory{born: born, since: since, bornArg: born}
}

// arg is what a script is told the Client knows: born, or 0 for nothing.
func (k *knownMemory) arg() any {
	if k == nil {
		return int64(0)
	}
	return k.bornArg
}

// memory reads a voting script's report (age, longest, born) of n's memory,
// given k, what the request told the script; age < 0 means none, -2 the
// memory the request said it knew (k). A new memory is remembered.
func (n *node) memory(k *knownMemory, age, longest, born int64) memory {
	m := memory{reported: true, longest: time.Duration(longest) * time.Millisecond, born: born}
	switch {
	case age == -2 && k != nil && k.born == born:
		m.age = time.Since(k.since)
	case age == -2:
		m.age = 0 // the script answered for a memory it was not told of: trust none of it
	case age < 0:
		return memory{}
	default:
		m.age = time.Duration(age) * time.Millisecond
		if k == nil || k.born != born {
			n.known.Store(newKnownMemory(born, time.Now().Add(-m.age)))
		}
	}
	return m
}

// guard is the restart guard for a request of ttl: 0 when it is off;
// otherwise the longest of WithRestartGuard's value, ttl, and the longest
// TTL this Client has used or heard of.
func (c *Client) guard(ttl time.Duration) time.Duration {
	if c.cfg.guard == 0 {
		return 0
	}
	return max(c.cfg.guard, ttl, time.Duration(c.longestTTL.Load()))
}

// learn raises the longest TTL this Client has heard of to what a master
// reported.
func (c *Client) learn(m memory) {
	for {
		cur := c.longestTTL.Load()
		if !m.reported || int64(m.longest) <= cur || c.longestTTL.CompareAndSwap(cur, int64(m.longest)) {
			return
		}
	}
}

// A heldVote is a yes from a master whose memory is younger than the guard,
// waiting for the round to know whether any master remembers further back.
type heldVote struct {
	node int
	age  time.Duration
	at   time.Time
}

// settleHeld decides the held votes it can (see the comment at the top):
// recorded as ErrNodeQuarantined once an answer is older, counted once all
// masters reported their memory.
func (r *round) settleHeld(nodes []*node) {
	kept := r.held[:0]
	for _, h := range r.held {
		switch {
		case olderThan(r.mems, h.age):
			r.record(nodes[h.node], ErrNodeQuarantined, h.at)
		case r.reported == len(nodes):
			r.yes++
		default:
			kept = append(kept, h)
		}
	}
	r.held = kept
}

// recheck holds back again the counted votes whose memory is younger than
// guard, which grew during the round (a master reported a longer TTL).
func (r *round) recheck(guard time.Duration) {
	kept := r.counted[:0]
	for _, v := range r.counted {
		if v.age < guard {
			r.yes--
			r.held = append(r.held, v)
		} else {
			kept = append(kept, v)
		}
	}
	r.counted = kept
}

// endHeld records the votes still held when the round ends (its deadline,
// or the caller's ctx) as not counted: a master that did not answer in time
// may be the one that remembers, and counting them then would let a second
// holder in whenever the masters that kept their data are slow.
func (r *round) endHeld(nodes []*node) {
	for _, h := range r.held {
		r.record(nodes[h.node], ErrNodeQuarantined, h.at)
	}
	r.held = nil
}

// olderThan reports whether a master answered with a memory older than age
// by more than memorySlack.
func olderThan(mems []memory, age time.Duration) bool {
	for _, m := range mems {
		if m.reported && m.age > age+memorySlack {
			return true
		}
	}
	return false
}
