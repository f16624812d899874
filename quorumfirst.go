// Quorum-first acquisition (WithQuorumFirst): an attempt asks a bare
// majority of the masters first, and the rest only when those cannot
// decide it alone.

package redlock

import (
	"sync"
	"time"
)

// An acquisition that asks every master sends n scripts where a majority
// of them decides it: under load the masters' CPU, and the Client's, go to
// votes nobody waits for, and Unlock then sends n deletes. So, with
// WithQuorumFirst, an attempt asks a quorum first, the preferred nodes, and holds the others in
// reserve. It asks the reserves too, at once, when a preferred node cannot
// count towards the majority (it answered no, failed, or the restart guard
// holds its vote back, which needs every master's report), or when the
// preferred nodes have not decided the round within a few of the Client's
// usual rounds (hedgeAfter). Nothing about the majority changes: the lock
// is held when a majority of all the masters holds its token, and the
// validity counts from before the first request, as with every master
// asked.
//
// The preferred nodes are the first of the masters by a rendezvous hash of
// the key and each master's address, so that Clients contending for a key
// ask the same ones first (one lost vote sends both to every master, as
// before), and the keys spread evenly over the masters. A master that
// failed or was slower than a hedge is asked after the others for
// slowFor: a hung master costs one hedge, not one per attempt.
//
// A lock taken so lives on a bare majority. Extend asks the reserves the
// lock never asked to take the key too (the acquire script, under the
// lock's validity), so a lock kept extended is on every master again from
// its first extension that lengthens it (a shorter one confirms Until,
// which a key taken now cannot vouch for), and survives masters failing
// as one taken on all of them. Unlock and Fence do not ask them: nothing of the lock is there.
// A call that did not take the key (the master failed, another token's
// leftover held it, the ctx ended) leaves the node to the next Extend
// (hold.retake); the acquire script lengthens our key where such a call
// did set it after all. A lock handed to another Client's waiter asks
// every master so at its first Extend: that hand-off leaves free masters
// free, and the waiter cannot tell which the giver never had. Unlock ends
// the asking before its hand-off or deletes (giveUpReserves).

// slowFor is how long a master that failed, or did not answer a lean
// round before its hedge, is asked after the others.
const slowFor = time.Second

// minHedge is the least time a quorum-first round waits for its preferred nodes
// before it asks the reserves.
const minHedge = 500 * time.Microsecond

// markSlow makes n asked after the others for slowFor.
func (n *node) markSlow() { n.slowUntil.Store(time.Now().Add(slowFor).UnixNano()) }

// reserves returns the nodes an attempt on key holds in reserve, a bit per
// node: all but a quorum, the preferred nodes (see above). 0: every node is
// asked at once, as without WithQuorumFirst or with fewer than three
// masters.
func (c *Client) reserves(key string) uint64 {
	n := len(c.nodes)
	// Without the restart guard a master that restarts empty would take a
	// bare majority's lock down with it: every master is asked.
	if !c.cfg.quorumFirst || c.cfg.guard == 0 || n < 3 || n > 64 {
		return 0
	}
	now := time.Now().UnixNano()
	kh := fnv64(key)
	var chosen uint64
	for range c.quorum {
		best, bestSlow, bestRank := -1, false, uint64(0)
		for i, nd := range c.nodes {
			if chosen&(1<<i) != 0 {
				continue
			}
			slow := nd.slowUntil.Load() > now
			rank := mix64(kh ^ nd.seed)
			if best < 0 || (bestSlow && !slow) || (slow == bestSlow && rank < bestRank) {
				best, bestSlow, bestRank = i, slow, rank
			}
		}
		chosen |= 1 << best
	}
	return (1<<n - 1) &^ chosen
}

// hedgeAfter is how long a quorum-first round of ttl waits for its preferred nodes
// before it asks the reserves: three of the Client's usual quorum-first
// rounds, at least minHedge, at most half the node deadline; half the node
// deadline until a round was won (the first ones dial, and load scripts).
func (c *Client) hedgeAfter(ttl time.Duration) time.Duration {
	most := c.nodeTimeout(ttl) / 2
	usual := time.Duration(c.usualRound.Load())
	if usual == 0 {
		return most
	}
	return min(max(3*usual, minHedge), most)
}

// noteRound records how long a won round took that asked no reserve (a
// quorum-first acquisition, an Unlock's release or hand-off), in usualRound
// (a moving average; a lost update under concurrency costs nothing).
func (c *Client) noteRound(d time.Duration) {
	old := c.usualRound.Load()
	if old == 0 {
		c.usualRound.Store(int64(d))
		return
	}
	c.usualRound.Store(old + (int64(d)-old)/8)
}

// fnv64 is the 64-bit FNV-1a hash of s.
func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// mix64 is splitmix64's finalizer: every bit of x moves every bit of the
// result.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// hedgeTimers are the quorum-first rounds' hedge timers, stopped: a round that
// decides before its hedge, as nearly all do, then costs no new timer.
var hedgeTimers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}
