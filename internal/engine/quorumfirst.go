// Quorum-first acquisition (WithQuorumFirst): an attempt asks a bare
// majority of the masters first, and the rest only when those cannot
// decide it alone.

package engine

import (
	"context"
	"sync"
	"time"

	"github.com/redlock-go/redlock/internal/core"
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

// markSlow makes n asked after the others for slowFor.
func (n *node) markSlow() { n.slowUntil.Store(time.Now().Add(slowFor).UnixNano()) }

// reserves returns the nodes an attempt on key holds in reserve, a bit per
// node (core.Reserves, I11): all but a quorum, the preferred nodes (see
// above). 0: every node is asked at once.
func (c *Client) reserves(key string) uint64 {
	if !core.HoldsReserves(len(c.nodes), c.cfg.guard > 0, c.cfg.quorumFirst) {
		return 0 // the default: no clock read, no hash
	}
	now := time.Now().UnixNano()
	var slow uint64
	for i, nd := range c.nodes {
		if nd.slowUntil.Load() > now {
			slow |= 1 << i
		}
	}
	return core.Reserves(len(c.nodes), c.cfg.guard > 0, c.cfg.quorumFirst, core.KeyHash(key), c.seeds, slow)
}

// hedgeAfter is how long a quorum-first round of ttl waits for its
// preferred nodes before it asks the reserves (core.HedgeAfter, I16).
func (c *Client) hedgeAfter(ttl time.Duration) time.Duration {
	return core.HedgeAfter(c.nodeTimeout(ttl), time.Duration(c.usualRound.Load()))
}

// noteRound records how long a won round took that asked no reserve (a
// quorum-first acquisition, an Unlock's release or hand-off), in usualRound
// (core.Usual; a lost update under concurrency costs nothing).
func (c *Client) noteRound(d time.Duration) {
	c.usualRound.Store(int64(core.Usual(time.Duration(c.usualRound.Load()), d)))
}

// hedgeTimers are the quorum-first rounds' hedge timers, stopped: a round that
// decides before its hedge, as nearly all do, then costs no new timer.
var hedgeTimers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// fanOutQuorumFirst is fanOutAsync holding the nodes of reserve (a bit per node)
// back (quorumfirst.go): they are asked only once the others cannot decide the
// round alone (a no, an error, a vote the restart guard holds back) or
// have not done so within hedge. The reserves never asked are left in the
// round's unasked.
func (c *Client) fanOutQuorumFirst(ctx context.Context, op, key string, dl roundDeadline, skip []error, guardTTL time.Duration, async asyncOp, reserve uint64, hedge time.Duration) *round {
	n := len(c.nodes)
	r := c.newRound(op, key, guardTTL)
	if c.cfg.obs != nil {
		r.obs = &roundObs{caller: ctx, op: op, key: key, start: r.start, deadline: dl.at, nodeDeadline: dl.node, answers: make([]answer, 0, n)}
	}
	f := fan{c: c, r: r, ctx: ctx, async: async, deadline: dl.at, reserve: reserve,
		votes: make(chan vote, n), pending: make([]bool, n), tasks: make([]nodeTask, n)}
	f.skip(skip)
	// One context for the round's calls, ended by the deadline or once the
	// last call returned (calls outlive the round).
	f.nctx, f.calls = newRoundCtx(ctx, dl.at, f.npending)
	f.calls.obs = r.obs
	for i := range c.nodes {
		if f.pending[i] && f.reserve&(1<<i) == 0 {
			f.ask(i)
		}
	}
	if f.reserve != 0 {
		t := hedgeTimers.Get().(*time.Timer)
		t.Reset(hedge)
		defer func() {
			t.Stop() // Go 1.23 on: no stale fire is left in t.C after Stop
			hedgeTimers.Put(t)
		}()
		f.hedged = t.C
	}
	f.wait()
	f.end()
	return r
}

// A fan is one round of fanOutQuorumFirst on its way: the nodes it still
// waits for, the reserves it holds back, and the calls it made. Only the
// round's goroutine touches it.
type fan struct {
	c        *Client
	r        *round
	ctx      context.Context // the caller's
	nctx     context.Context // the calls', ended by the deadline or once the last returned
	calls    *roundCalls
	async    asyncOp
	deadline time.Time
	votes    chan vote // buffered: a late node never blocks
	pending  []bool    // asked or to be asked, and not yet counted
	npending int
	reserve  uint64           // the nodes held back, a bit each, until hedged fires or a call fails
	hedged   <-chan time.Time // nil: no reserve left
	tasks    []nodeTask
}

// skip counts the nodes skip names as failed, without asking them, and
// marks the others pending.
func (f *fan) skip(skip []error) {
	for i, nd := range f.c.nodes {
		if skip != nil && skip[i] != nil {
			f.r.tally.Fail()
			f.r.record(nd, skip[i], f.r.start)
			f.reserve &^= 1 << i // never asked, as a reserve or otherwise
			continue
		}
		f.pending[i] = true
		f.npending++
	}
}

// ask sends the round's call to node i.
func (f *fan) ask(i int) {
	c := f.c
	f.tasks[i] = nodeTask{c: c, n: c.nodes[i], op: f.async, ctx: f.nctx, votes: f.votes, calls: f.calls}
	c.bg.Add(1)
	if c.nodes[i].pipe == nil || !f.async.start(f.nctx, &f.tasks[i]) {
		c.workers.Run(&f.tasks[i])
	}
}

// askReserves asks the nodes held back.
func (f *fan) askReserves() {
	for i := range f.c.nodes {
		if f.reserve&(1<<i) != 0 {
			f.ask(i)
		}
	}
	f.reserve, f.hedged = 0, nil
}

// take counts v; a vote that is not a yes the round can count asks the
// reserves: the nodes asked cannot decide it alone.
func (f *fan) take(v vote) {
	f.pending[v.node] = false
	f.npending--
	yes := f.r.tally.Yes
	f.r.count(f.ctx, f.c, v)
	if core.AsksReserves(f.reserve, yes, f.r.tally.Yes) {
		if v.err != nil {
			f.c.nodes[v.node].markSlow()
		}
		f.askReserves()
	}
}

// wait counts votes until the round is decided or every call returned. The
// round's context is its one deadline mechanism: it ends at the deadline,
// with the caller's ctx, or once every call returned (and voted).
func (f *fan) wait() {
	for f.npending > 0 && !f.r.tally.Decided() {
		select {
		case v := <-f.votes:
			f.take(v)
			continue
		case <-f.hedged:
			// The nodes asked are slower than the Client's rounds
			// usually are: ask the rest, and ask those less first.
			for i, p := range f.pending {
				if p && f.reserve&(1<<i) == 0 {
					f.c.nodes[i].markSlow()
				}
			}
			f.askReserves()
			continue
		case <-f.nctx.Done():
		}
		select {
		case v := <-f.votes: // a vote already in beats the end of the round
			f.take(v)
			continue
		default:
		}
		if err := f.ctx.Err(); err != nil {
			f.r.decided = time.Now()
			f.r.failPending(f.c.nodes, f.pending, err)
		} else {
			f.r.decided = f.deadline
			f.r.failPending(f.c.nodes, f.pending, ErrNodeTimeout)
		}
		f.npending = 0
	}
}

// end closes the decided round: the reserves never asked, the guard's
// last outcomes (G4), and the observers.
func (f *fan) end() {
	r, c := f.r, f.c
	if f.reserve != 0 { // decided without them: never asked
		r.unasked = f.reserve
		for i := range c.nodes {
			if f.reserve&(1<<i) != 0 {
				f.calls.returned() // counted in newRoundCtx, never run
			}
		}
	}
	for _, o := range r.tally.End() { // G4
		r.outcome(f.ctx, c, o, vote{})
	}
	if r.decided.IsZero() { // every node was skipped
		r.decided = r.start
	}
	c.observeRound(f.ctx, r)
}
