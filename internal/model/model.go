// Package model is an explicit-state model checker of redlock's protocol
// core. It drives internal/core, the code the library itself runs to
// decide a round and a lock's validity, against simulated masters (a Go
// rendering of lua/acquire.lua, lua/release.lua and lua/memory.lua: key,
// value, expiry, memory marker), and explores every interleaving of a small
// world breadth-first, up to a bound, with state hashing, as TLC and
// stateright do. At every state it checks that no two holders' validity
// windows overlap, and more (below). A violation comes back as the
// shortest trace that reaches it, in readable steps.
//
// The world: three masters and two Clients, each making Attempts
// acquisitions of one key and releasing what it took; requests and replies
// delayed (time passes between any two steps), reordered and lost; a
// request a driver runs twice, the second time after the round decided
// (go-redis's re-send after a network error); masters restarted without
// their data, and Extend's repair of the key they lost; a holder paused
// past its validity (it releases whenever, or
// never); masters whose clocks run fast, within the drift the Clients
// allow; a Client with a second local waiter, to which its holder's
// Unlock may hand the key in one round (lua/handoff.lua). One tick is 10 ms. At every state the checker holds (checks.go):
// no two holders' validity windows overlap; a key holds nothing or a live
// Client's token (but where Redlock leaves it: a lost release); after an
// Unlock that returned nil, none of its tokens is on a master its release
// reached.
//
// A second, smaller world (handoff.go, CheckHandOff) drives the hand-off
// to another Client's waiter: a holder's line of wants (core.Line) and a
// waiter's count of notices (core.Expected), with withdrawals, late copies
// and duplicated notices, the waiter's Client closing, its lock passed on
// by its token and resumed elsewhere, and a holder that missed a
// withdrawal.
package model

import (
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"time"
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
	Resends     int  // requests a driver runs twice, at most (release.go)
	Local       bool // client 0 has a second local waiter: its Unlock may hand the key to it (handoff.lua)
	Fast        int  // every master's clock runs fast: its keys expire this many ticks early
	MaxStates   int  // stop after this many states (0: no limit)

	Drift float64 // the Clients' drift factor (core.Drift)
}

// DefaultConfig is the world of the restart guard CI explores (18.9
// million states): restarts, masters New does not reach, lost replies.
func DefaultConfig() Config {
	return Config{TTL: 4, NodeTimeout: 1, Guard: 8, Slack: 1, Horizon: 4, Attempts: 1, Restarts: 1, Losses: 1, Unreached: 2, MaxStates: 30_000_000, Drift: 0.01}
}

// ExtendConfig is the world of Extend CI explores (4.9 million states):
// client 0 extends its lock once, shorter or longer, under lost replies,
// without restarts. make model WORLD=all explores it with the guard's
// world at once.
func ExtendConfig() Config {
	c := DefaultConfig()
	c.Extends, c.Restarts, c.Unreached = 1, 0, 0
	return c
}

// ResendConfig is the world of a driver's re-sends CI explores (4.9
// million states): any one request run twice, the second time after the
// round decided, the lock extended or released; without the guard (a
// fresh deployment's rounds would wait for every master) and restarts.
func ResendConfig() Config {
	c := ExtendConfig()
	c.Guard, c.Losses, c.Resends = 0, 0, 1
	return c
}

// RepairConfig is the world of Extend's repair CI explores (6.6 million
// states): client 0 extends its lock once, shorter or longer, and a master
// restarts without its data; no lost messages.
func RepairConfig() Config {
	c := ExtendConfig()
	c.Restarts, c.Losses = 1, 0
	return c
}

// DriftConfig is the world of clock drift CI explores (3.7 million
// states): every master's clock runs fast, so that a key lives a tick
// (10 ms) less than its TTL, within the drift the Clients allow (a factor
// of 0.2: 10 ms of a 40 ms TTL); no restarts.
func DriftConfig() Config {
	c := DefaultConfig()
	c.Drift, c.Fast, c.Restarts = 0.2, 1, 0
	return c
}

// attempts is how many acquisitions client ci makes: in the local world,
// client 1 makes one, and contends with client 0's two waiters.
func (cfg Config) attempts(ci int) int {
	if cfg.Local && ci != 0 {
		return 1
	}
	return cfg.Attempts
}

// LocalConfig is the world of the local hand-off CI explores: client 0
// has two local waiters, and its first's Unlock may hand the key straight
// to the second (the hand-off script, one round); client 1 contends with
// one acquisition; lost replies, the guard, no restarts.
func LocalConfig() Config {
	c := DefaultConfig()
	c.Local, c.Attempts, c.Restarts, c.Unreached = true, 2, 0, 0
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
	handoffReq // a hand-off request to the Client's next local waiter, the same way
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
	set     [nMasters]int8 // when the memory that holds the lock's key on each master began, as a yes told it; -1: none
	prev    int8           // while a hand-off to the next local waiter is under way or cleaned up: the token it replaces; 0: none
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
	resends   int8
	m         [nMasters]Master
	g         [nMasters]ghost
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
			s0.c[i].known[m], s0.c[i].set[m] = -1, -1
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
		if s.g[i].left != s.m[i].Val {
			s.g[i].left = 0 // the leftover expired
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
		if c.phase == idle && int(c.attempt) >= cfg.attempts(i) {
			c.made, c.known = false, [nMasters]int8{-1, -1, -1}
		}
		if c.phase == idle || cfg.Extends == 0 || cfg.Restarts == 0 {
			c.set = [nMasters]int8{-1, -1, -1} // read by a repair alone, which needs an Extend and a restart
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
	const width = 5 + nClients*6
	var keys [nMasters][width]int8
	for i := range s.m {
		k := &keys[i]
		k[0], k[1], k[2], k[3], k[4] = s.m[i].Val, s.m[i].Exp, s.m[i].Born, s.g[i].left, s.g[i].gone
		for ci := range s.c {
			c := &s.c[ci]
			o := 5 + ci*6
			k[o], k[o+1], k[o+2], k[o+5] = c.known[i], c.net[i], -1, c.set[i]
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
		s.m[j], s.g[j] = old.m[i], old.g[i]
		for ci := range s.c {
			s.c[ci].known[j], s.c[ci].net[j], s.c[ci].set[j] = old.c[ci].known[i], old.c[ci].net[i], old.c[ci].set[i]
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
