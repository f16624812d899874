// The restart guard: a master that lost its data does not vote until every
// lock it may have forgotten has expired (Redlock spec, "delayed restarts").

package engine

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redlock-go/redlock/driver"
	"github.com/redlock-go/redlock/internal/master"
	"github.com/redlock-go/redlock/internal/script"
)

// A master that restarts without persistence (or is flushed, or fails over
// to an empty replica) forgets the keys of locks it granted. Were its yes
// counted at once, a second holder could win a majority with it while the
// first still counts on it: chaos scenario 10. So each master keeps a
// marker of when its memory began (lua/memory.lua), and reports the
// memory's age with every vote. A yes from a master whose memory is younger
// than the guard is held back until the round knows more:
//
//   - G1: it is not counted (ErrNodeQuarantined) as soon as any master
//     answers with a memory older than its own by more than memorySlack:
//     that master remembers a time the young one has forgotten, when it may
//     have granted a lock still alive.
//   - G2: it is counted once core.Witnessed(n) = n − n/2 + 1 masters have
//     reported their memory (4 of 5, 5 of 7, all of 3), none is older, and
//     no master this Client knew to be older (from an earlier report, or
//     New's check) is yet to report. A live lock's majority then shares two
//     masters with the reports, each marked before that lock; one of them
//     is a witness unless both lost their data. A master never marked
//     (every script that could mark it failed, or never reached it) looks
//     as young as one that lost its data, so fewer reports cannot tell a
//     single loss from a fresh deployment. So a fresh deployment of five
//     masters takes locks at once with one master down; two masters losing
//     their data within the guard is outside this rule (G3 covers it).
//     Extend, under the guard, also asks the masters that refused the lock,
//     for their reports (Lock.needsWitnesses).
//   - G3: with WithStrictRestartGuard, it is counted only once every master
//     has reported: any minority losing its data at once is then covered
//     too, at the price of a fresh deployment with a master down taking no
//     lock until its markers are older than the guard.
//   - G4: it is not counted when the round ends (the node deadline, the
//     caller's ctx) before G2 or G3 decided it: the reports missing may be
//     the witness's. An answer that is an error reports nothing (a master
//     at maxmemory, a refused connection).
//   - G5: the guard never switches itself off: a marker the Client cannot
//     read or write makes the script fail (lua/memory.lua), so the master
//     casts no vote at all, and New refuses such credentials where it can
//     ask (checkGuardRights).
//
// Its key is set all the same, so it protects the lock from then on, and is
// released with the lock. A master that restarted with its data (the
// marker is persisted with the keys) is as old as before, and counts at
// once.

// memorySlack is how much older than a master's memory the others' must be
// for it to count as having lost its data: more than the spread of a fresh
// deployment's markers, all born in its first rounds.
const memorySlack = time.Second

// checkGuardRights runs lua/guard_check.lua on n's plain marker (on every
// shard of a Ring): it does to the marker what every vote does, and on a
// single master the Client learns its memory's age, as from a vote. It returns
// an error matching ErrGuardRights when the master refuses for want of a
// right, and nil otherwise: on success, and on any other failure (a master
// down or slow, at maxmemory), which the votes meet in their turn. A Redis
// Cluster node is not checked: its markers are one per hash tag.
func checkGuardRights(ctx context.Context, n *node) error {
	check := func(ctx context.Context, d driver.Conn) (v [3]int64, err error) {
		err = replyInts(master.Script(ctx, d, script.GuardCheck.Evalsha(1, script.PlainMarkerKey)), v[:], "guard check")
		return v, err
	}
	var err error
	switch n.topo.Kind {
	case driver.Cluster:
		return nil
	case driver.Ring:
		var mu sync.Mutex
		_ = eachServer(ctx, n, func(ctx context.Context, _ string, s driver.Conn) {
			if _, e := check(ctx, s); missingRight(e) {
				mu.Lock()
				err = e
				mu.Unlock()
			}
		})
	default:
		// One master: the Client learns its memory's age (G2).
		var v [3]int64
		if v, err = check(ctx, n.conn.D); err == nil {
			n.memory(nil, v[0], v[1], v[2])
		}
	}
	if !missingRight(err) {
		return nil
	}
	return err
}

// guardRightsMissing returns the error New reports when some nodes refused
// checkGuardRights (errs, by node; nil where it passed or was not asked):
// the first such node's refusal, the others' indexes, and the remedies.
func guardRightsMissing(nodes []*node, errs []error) error {
	first := -1
	var others []string
	for i, err := range errs {
		switch {
		case err == nil:
		case first < 0:
			first = i
		default:
			others = append(others, strconv.Itoa(i))
		}
	}
	if first < 0 {
		return nil
	}
	also := ""
	if len(others) > 0 {
		also = " (and so did nodes " + strings.Join(others, ", ") + ")"
	}
	return fmt.Errorf("%w: node %d (%s) refused the marker %q or a command it needs: %v%s; "+
		"grant the user the key and the commands (ACL SETUSER <user> ~%s +get +set +time), "+
		"or turn the guard off with WithRestartGuard(0) to accept that a master restarting without its data may let a second holder in",
		ErrGuardRights, first, nodes[first].addr, script.PlainMarkerKey, errs[first], also, script.PlainMarkerKey)
}

// missingRight reports whether err is a server's refusal for want of an ACL
// right: of a key (NOPERM), or of a command a script calls.
func missingRight(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "NOPERM") || strings.Contains(msg, "can't run this command")
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
	since   time.Time // when the memory began, by the Client's clock
	bornArg any       // born, boxed once for the scripts
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
// given k, what the request told the script; age -1 means none (the guard
// is off), -2 the memory the request said it knew (k). Any other negative
// age (a master's clock stepped back past its marker's birth, or a script
// older than memory.lua's clamp) is the youngest memory: 0, never none. A
// new memory is remembered.
func (n *node) memory(k *knownMemory, age, longest, born int64) memory {
	m := memory{reported: true, longest: time.Duration(longest) * time.Millisecond, born: born}
	switch {
	case age == -2 && k != nil && k.born == born:
		m.age = time.Since(k.since)
	case age == -2:
		m.age = 0 // the script answered for a memory it was not told of: trust none of it
	case age == -1:
		return memory{}
	default:
		m.age = time.Duration(max(age, 0)) * time.Millisecond
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

// The decisions are internal/core's Tally (I3–I5 there: G1, G2/G3, G4);
// the round (quorum.go) feeds it each vote with the guard's length.

// The two ways a young vote is quarantined: what the round knows of it.
var (
	errQuarantinedWitness = fmt.Errorf("%w: another master remembers further back, so it may have lost its data", ErrNodeQuarantined)
	errQuarantinedUnknown = fmt.Errorf("%w: cannot tell whether it lost its data: too few masters reported their memory in time", ErrNodeQuarantined)
)
