// The round: one request fanned out to every master in parallel, each under
// its own deadline, decided by majority; and the hold that tracks one
// acquire call past its round.

package redlock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/core"
)

// quorum is the number of votes that make a majority of n nodes.
func quorum(n int) int { return core.Quorum(n) }

// A round is one operation sent to every node in parallel and decided by
// majority. It is decided the moment the outcome is known: a majority voted
// yes, or so many voted no or failed that a majority is out of reach. Nodes
// that have not answered by then are not waited for; their goroutines finish
// on their own (see hold for what a late acquire reply does).
type round struct {
	op, key string
	quorum  int
	start   time.Time
	tally   core.Tally   // the votes, and the decision (internal/core)
	decided time.Time    // when the deciding reply arrived or the deadline passed
	failed  []*NodeError // the nodes that voted no or failed before the decision
	refused int          // how many of failed answered no, or yes in quarantine: none holds the lock for us
	// The restart guard (guard.go), when guardTTL is not 0.
	guardTTL time.Duration

	nodes   int       // how many nodes the round had
	unasked uint64    // the reserves it decided without asking (a bit per node; fanOutQuorumFirst)
	obs     *roundObs // what the observers need, when the Client has any (observe.go)
}

// A roundObs is what the observers need of a round: its caller's ctx, op,
// key and start, for every node's reply, and the answers counted before
// the decision. Made only for a Client with observers, so that a round
// without costs one pointer.
type roundObs struct {
	caller       context.Context
	op, key      string
	start        time.Time
	deadline     time.Time // when the round stops waiting
	nodeDeadline time.Time // the masters' deadline: deadline, or later when the lock's validity ends first
	answers      []answer  // written by the round's goroutine only
}

// An answer is a node's vote as an observed round counted it.
type answer struct {
	node int
	yes  bool
	at   time.Time
}

func (r *round) won() bool { return r.tally.Won() }

// elapsed is how long the round took to decide.
func (r *round) elapsed() time.Duration { return r.decided.Sub(r.start) }

func (r *round) error(outcome error) *QuorumError {
	return &QuorumError{
		Op: r.op, Key: r.key, Quorum: r.quorum, Votes: r.tally.Yes,
		Elapsed: r.elapsed(), Nodes: r.failed, outcome: outcome, nodes: r.nodes,
	}
}

// nodeCall is what a round does on one node. It runs in its own goroutine,
// may outlive the round, and returns the node's ballot: yes, or no with a
// nil error; or an error.
type nodeCall func(ctx context.Context, n *node) (ballot, error)

// A ballot is a node's answer: its vote, and what it reported of its
// memory, for the restart guard.
type ballot struct {
	yes    bool
	mem    memory
	holder int64 // a refusal's: the holder's fingerprint (acquire.lua); 0: none named
}

type vote struct {
	node int
	ballot
	err error
	at  time.Time
}

// fanOut sends call to every node not skipped, each under its own deadline,
// and returns the decided round. skip[i], when not nil, is node i's failure,
// counted without sending anything. The deadline is enforced here, whatever
// the driver's own timeouts: a node that has not answered by then counts as
// failed with ErrNodeTimeout. If ctx ends first, the nodes not yet answered
// count as failed with ctx.Err().
//
// guardTTL, when not 0, puts the round under the restart guard for a
// request of that TTL (guard.go): a yes from a master whose memory is
// younger than the guard counts only once the round knows that no majority
// remembers further back.
func (c *Client) fanOut(ctx context.Context, op, key string, dl roundDeadline, skip []error, guardTTL time.Duration, call nodeCall) *round {
	return c.fanOutAsync(ctx, op, key, dl, skip, guardTTL, call)
}

// An asyncOp is a round's call that can also be made in two halves, for
// the nodes whose requests go through a pipe (pipe.start): start queues
// node t.n's request without blocking, with t as its replyTo, or reports
// false when it cannot (then the round runs call on a worker); reply turns
// the request's reply into the node's ballot, on the goroutine that
// received it, and must not block. start may also vote at once, with
// t.vote, and report true. Under load a request then costs no goroutine a
// wake-up but the round's own, where a blocking call costs three. (One
// value per round implements it: no closure per round or node.)
type asyncOp interface {
	call(ctx context.Context, n *node) (ballot, error)
	start(ctx context.Context, t *nodeTask) bool
	reply(t *nodeTask, cmd reply) (ballot, error)
}

// A nodeCall is an asyncOp that never starts: it always blocks, on a
// worker.
func (f nodeCall) call(ctx context.Context, n *node) (ballot, error) { return f(ctx, n) }
func (nodeCall) start(context.Context, *nodeTask) bool               { return false }
func (nodeCall) reply(*nodeTask, reply) (ballot, error) {
	panic("redlock: a nodeCall's request is never started")
}

// fanOutAsync is fanOut for an asyncOp: its calls to the nodes that have a
// pipe are started when op.start can.
func (c *Client) fanOutAsync(ctx context.Context, op, key string, dl roundDeadline, skip []error, guardTTL time.Duration, async asyncOp) *round {
	return c.fanOutQuorumFirst(ctx, op, key, dl, skip, guardTTL, async, 0, 0)
}

// fanOutQuorumFirst is fanOutAsync holding the nodes of reserve (a bit per node)
// back (quorumfirst.go): they are asked only once the others cannot decide the
// round alone (a no, an error, a vote the restart guard holds back) or
// have not done so within hedge. The reserves never asked are left in the
// round's unasked.
func (c *Client) fanOutQuorumFirst(ctx context.Context, op, key string, dl roundDeadline, skip []error, guardTTL time.Duration, async asyncOp, reserve uint64, hedge time.Duration) *round {
	deadline := dl.at
	n := len(c.nodes)
	r := c.newRound(op, key, guardTTL)
	if c.cfg.obs != nil {
		r.obs = &roundObs{caller: ctx, op: op, key: key, start: r.start, deadline: dl.at, nodeDeadline: dl.node, answers: make([]answer, 0, n)}
	}
	votes := make(chan vote, n) // buffered: a late node never blocks
	pending := make([]bool, n)
	npending := 0
	for i, nd := range c.nodes {
		if skip != nil && skip[i] != nil {
			r.tally.Fail()
			r.record(nd, skip[i], r.start)
			reserve &^= 1 << i // never asked, as a reserve or otherwise
			continue
		}
		pending[i] = true
		npending++
	}
	// One context for the round's calls, ended by the deadline or once the
	// last call returned (calls outlive the round).
	nctx, calls := newRoundCtx(ctx, deadline, npending)
	calls.obs = r.obs
	tasks := make([]nodeTask, n)
	ask := func(i int) {
		tasks[i] = nodeTask{c: c, n: c.nodes[i], op: async, ctx: nctx, votes: votes, calls: calls}
		c.bg.Add(1)
		if c.nodes[i].pipe == nil || !async.start(nctx, &tasks[i]) {
			c.workers.Run(&tasks[i])
		}
	}
	for i := range c.nodes {
		if pending[i] && reserve&(1<<i) == 0 {
			ask(i)
		}
	}
	var hedged <-chan time.Time
	if reserve != 0 {
		t := hedgeTimers.Get().(*time.Timer)
		t.Reset(hedge)
		defer func() {
			t.Stop() // Go 1.23 on: no stale fire is left in t.C after Stop
			hedgeTimers.Put(t)
		}()
		hedged = t.C
	}
	askReserves := func() {
		for i := range c.nodes {
			if reserve&(1<<i) != 0 {
				ask(i)
			}
		}
		reserve, hedged = 0, nil
	}

	take := func(v vote) {
		pending[v.node] = false
		npending--
		yes := r.tally.Yes
		r.count(ctx, c, v)
		if reserve != 0 && r.tally.Yes <= yes {
			// Not a yes the round can count: the nodes asked cannot
			// decide it alone.
			if v.err != nil {
				c.nodes[v.node].markSlow()
			}
			askReserves()
		}
	}
	// The round's context is its one deadline mechanism: it ends at the
	// deadline, with the caller's ctx, or once every call returned (and
	// voted).
	for npending > 0 && !r.tally.Decided() {
		select {
		case v := <-votes:
			take(v)
			continue
		case <-hedged:
			// The nodes asked are slower than the Client's rounds
			// usually are: ask the rest, and ask those less first.
			for i, p := range pending {
				if p && reserve&(1<<i) == 0 {
					c.nodes[i].markSlow()
				}
			}
			askReserves()
			continue
		case <-nctx.Done():
		}
		select {
		case v := <-votes: // a vote already in beats the end of the round
			take(v)
			continue
		default:
		}
		if err := ctx.Err(); err != nil {
			r.decided = time.Now()
			r.failPending(c.nodes, pending, err)
		} else {
			r.decided = deadline
			r.failPending(c.nodes, pending, ErrNodeTimeout)
		}
		npending = 0
	}
	if reserve != 0 { // decided without them: never asked
		r.unasked = reserve
		for i := range c.nodes {
			if reserve&(1<<i) != 0 {
				calls.returned() // counted in newRoundCtx, never run
			}
		}
	}
	for _, o := range r.tally.End() { // G4
		r.outcome(ctx, c, o, vote{})
	}
	if r.decided.IsZero() { // every node was skipped
		r.decided = r.start
	}
	c.observeRound(ctx, r)
	return r
}

// A nodeTask is a round's call to one node, run by a worker.
type nodeTask struct {
	c     *Client
	n     *node
	op    asyncOp
	ctx   context.Context
	votes chan<- vote
	calls *roundCalls
	known *knownMemory // what a started request told the master of its memory
}

// run makes the blocking call, on a worker.
func (t *nodeTask) Run() { t.vote(t.op.call(t.ctx, t.n)) }

// reply takes a started request's reply.
func (t *nodeTask) reply(cmd *redis.Cmd) { t.vote(t.op.reply(t, cmd)) }

// vote counts the node's ballot in the round; the call is over.
func (t *nodeTask) vote(b ballot, err error) {
	at := time.Now()
	t.observeReply(b, err, at)
	t.votes <- vote{node: t.n.index, ballot: b, err: err, at: at} // buffered: never blocks
	t.calls.returned()                                            // after the vote: nctx ends with every vote in
	t.c.bg.Done()
}

// roundCalls ends a round's context once its last call returned.
type roundCalls struct {
	running atomic.Int32
	cancel  context.CancelFunc

	obs *roundObs // the round's, for the observers; nil: none
}

// newRoundCtx returns the context of a round's n calls: ctx until deadline,
// and until the last of them returned.
func newRoundCtx(ctx context.Context, deadline time.Time, n int) (context.Context, *roundCalls) {
	nctx, cancel := context.WithDeadline(ctx, deadline)
	rc := &roundCalls{cancel: cancel}
	rc.running.Store(int32(n))
	if n == 0 {
		cancel()
	}
	return nctx, rc
}

func (rc *roundCalls) returned() {
	if rc.running.Add(-1) == 0 {
		rc.cancel()
	}
}

// newRound returns a round of op on key, under the restart guard for a
// request of guardTTL when it is not 0: its tally knows the age of each
// master's memory as the Client last learned it (guard.go, G2).
func (c *Client) newRound(op, key string, guardTTL time.Duration) *round {
	n := len(c.nodes)
	r := &round{op: op, key: key, quorum: c.quorum, start: time.Now(), guardTTL: guardTTL, nodes: n}
	r.tally = core.NewTally(n, guardTTL > 0, c.cfg.strictGuard, memorySlack)
	if guardTTL > 0 {
		for i, nd := range c.nodes {
			if k := nd.known.Load(); k != nil {
				r.tally.Know(i, k.since)
			}
		}
	}
	return r
}

// count records one node's answer.
func (r *round) count(ctx context.Context, c *Client, v vote) {
	// Votes can come in out of the order of their replies (a node's
	// observer runs between its reply and its vote): the round was
	// decided no earlier than the latest reply it counted.
	if v.at.After(r.decided) {
		r.decided = v.at
	}
	if r.obs != nil {
		r.obs.answers = append(r.obs.answers, answer{node: v.node, yes: v.yes && v.err == nil, at: v.at})
	}
	var guard time.Duration
	if r.guardTTL > 0 {
		// It learns the longest TTL v reports: the guard may grow.
		c.learn(v.mem)
		guard = c.guard(r.guardTTL)
	}
	cv := core.Vote{Node: v.node, Yes: v.yes, Err: v.err != nil, At: v.at,
		Mem: core.Memory{Reported: v.mem.reported, Age: v.mem.age, Longest: v.mem.longest, Born: v.mem.born}}
	for _, o := range r.tally.Count(cv, guard) {
		r.outcome(ctx, c, o, v)
	}
}

// outcome records a vote the tally did not count: v's own (a no, an
// error), or a young yes it decided (guard.go).
func (r *round) outcome(ctx context.Context, c *Client, o core.Outcome, v vote) {
	nd := c.nodes[o.Node]
	switch o.Kind {
	case core.Refused:
		r.record(nd, ErrNodeRefused, o.At)
		r.failed[len(r.failed)-1].holder = v.holder
	case core.Errored:
		r.record(nd, c.nodeErr(ctx, v.err), o.At)
	case core.Quarantined:
		r.record(nd, errQuarantinedWitness, o.At)
	default:
		r.record(nd, errQuarantinedUnknown, o.At)
	}
}

func (r *round) record(nd *node, err error, at time.Time) {
	// A quarantined master stays out for at least the lock's TTL: for
	// Extend it is as good as a no.
	if errors.Is(err, ErrNodeRefused) || errors.Is(err, ErrNodeQuarantined) {
		r.refused++
	}
	r.failed = append(r.failed, &NodeError{Node: nd.index, Addr: nd.addr, Latency: at.Sub(r.start), Err: err})
}

// failPending counts every node still pending as failed with err.
func (r *round) failPending(nodes []*node, pending []bool, err error) {
	for i, p := range pending {
		if p {
			r.tally.Fail()
			r.record(nodes[i], err, r.decided)
		}
	}
}

// nodeErr names a node's error for the caller: the caller's own
// cancellation as ctx.Err(), and the node's deadline (which the driver
// reports as context.DeadlineExceeded when ContextTimeoutEnabled is set) as
// ErrNodeTimeout, so that errors.Is(err, context.DeadlineExceeded) only ever
// means the caller's context.
func (c *Client) nodeErr(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return ErrNodeTimeout
	}
	return err
}

// A hold is one node's part in one lock: the state of its acquire call, so
// that neither a failed attempt nor Unlock can miss a key set by a reply that
// arrived after the round was decided.
//
// Exactly one side releases the node: whoever comes second of "the acquire
// call returned" (finish) and "the lock gave the node up" (abandon). When the
// late side is the acquire goroutine itself, its release is sent after its
// SET was answered, never before it on another connection.
type hold struct {
	born atomic.Int64 // which memory of the master holds our key (guard.go); 0: unknown

	mu sync.Mutex
	// done is closed when the acquire call returned. A call that asks the
	// node again (retake) replaces it with an open one: read it under mu.
	done      chan struct{}
	mayHold   bool // it returned yes or an error: the key may hold our token
	abandoned bool // the lock gave this node up: a late yes must be released
	// reserved: the acquisition decided without asking this node (quorumfirst.go)
	// and nothing was sent; Extend may still ask it (ask), and until then
	// the node counts as one that refused.
	reserved bool
	// retake: the key may be missing here while the lock holds (a call to
	// take it failed or found it taken, or a hand-off left the master
	// free), so Extend asks the node to take it again (ask), with the
	// acquire script, which also lengthens our key where it is.
	retake bool
	// closed: Unlock began, and no Extend asks the node any more
	// (giveUpReserved), whatever a call already asking it answers.
	closed bool
	// unheard: the lock was taken on a hand-off's notices, none of them
	// from this node (markUnheard), and nothing told of our token here
	// since: Unlock's rounds hold it back, as a reserve.
	unheard bool
}

func newHolds(n int) []*hold {
	hs, all := make([]*hold, n), make([]hold, n) // two allocations, not n+1
	for i := range hs {
		all[i].done = make(chan struct{})
		hs[i] = &all[i]
	}
	return hs
}

// finish records the acquire call's result and reports whether the caller
// must now release the node, because the lock already gave it up.
func (h *hold) finish(yes bool, err error) (release bool) { return h.finishCall(false, yes, err) }

// finishCall is finish; take: the call asked the node to take the key
// after the lock was won (Extend's, through ask), and unless it said yes,
// a later Extend may ask again.
func (h *hold) finishCall(take, yes bool, err error) (release bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if take {
		h.retake = !yes
	}
	if yes {
		h.unheard = false
	}
	h.mayHold = yes || err != nil
	close(h.done)
	return h.abandoned && h.mayHold
}

// finishUnsent records that the call was never sent, and reports whether
// the caller must release the node. The key is as the node's last call left
// it: nothing for an acquisition's, but a call that asks the node again
// (take) may follow one that failed after setting our key.
func (h *hold) finishUnsent(take bool) (release bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if take {
		h.retake = true
	}
	close(h.done)
	return h.abandoned && h.mayHold
}

func (h *hold) finished() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.finishedLocked()
}

func (h *hold) finishedLocked() bool {
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

// abandon gives the node up and reports whether the caller must release it
// now: only when the acquire call already returned and may have set the key.
// If the call is still running, finish will report the release to it.
func (h *hold) abandon() (release bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.abandoned {
		return false
	}
	h.abandoned = true
	return h.finishedLocked() && h.mayHold
}

// send reports whether the acquire call may still be sent: not when the
// lock already gave the node up, as happens when a goroutine starts late,
// after the round was decided and the lock released. A request never sent
// needs no release, and cannot hold the key against the next holder.
func (h *hold) send() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.abandoned
}

// refused reports whether the node's acquire call answered no, or was
// never sent (reserved), so the key there is known not to hold our token.
func (h *hold) refused() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reserved || h.finishedLocked() && !h.mayHold
}

// reserve records that the acquisition decided without asking the node.
func (h *hold) reserve() {
	h.mu.Lock()
	h.reserved = true
	h.mu.Unlock()
}

// mayRetake records that the key may be missing here although the lock
// holds: a hand-off left the master free (Client.handedLock).
func (h *hold) mayRetake() {
	h.mu.Lock()
	h.retake = true
	h.mu.Unlock()
}

// markUnheard records, for a lock taken on a hand-off's notices, that no
// notice told of our token on the node: Unlock's rounds ask the node only
// when the others cannot decide them alone, and the sweep of the nodes
// never heard releases it otherwise (Client.narrowHanded). Extend and Fence
// ask it as any other.
func (h *hold) markUnheard() {
	h.mu.Lock()
	h.unheard = true
	h.mu.Unlock()
}

// tokenSeen records that a notice, or an Extend's yes, told of our token on
// the node, so that Unlock asks it as one that holds it, even where its
// last call answered no (an Extend asked it to take the key before the
// hand-off landed: an adversary review), and reports whether Unlock does:
// not while an Extend's call asks it (its answer decides), and the sweep
// then releases it.
func (h *hold) tokenSeen() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unheard = false
	if !h.finishedLocked() {
		return false
	}
	h.mayHold = true
	return true
}

// isUnheard reports whether the node is unheard (markUnheard), whatever
// its last call answered: a hand-off may have put our token there since,
// with a notice this Client missed.
func (h *hold) isUnheard() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.unheard && !h.reserved
}

// giveUpReserved ends the asking: no Extend asks the node after this. It
// gives the node up if it is reserved, and reports whether it was: nothing
// was sent there. A call already asking it keeps the hold pending, for
// Unlock to wait on.
func (h *hold) giveUpReserved() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	if h.reserved {
		h.abandoned = true
	}
	return h.reserved
}

// askable reports whether ask would take the node now.
func (h *hold) askable() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.abandoned && !h.closed && (h.reserved || h.retake && h.finishedLocked())
}

// ask takes the node for an acquire call of its own (Extend's): a
// reserved node, or one to take again (retake) whose last call returned.
// false when neither, or the lock gave it up. After true, the call must
// finish the hold with finishCall(true, …); until then the hold is pending again,
// and await waits for it.
func (h *hold) ask() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.abandoned || h.closed:
		return false
	case h.reserved:
		h.reserved = false
		return true
	case h.retake && h.finishedLocked():
		h.retake = false
		h.done = make(chan struct{})
		return true
	}
	return false
}

// await waits, within ctx, for the acquire call on this node, so that an
// Extend or Unlock right after a lock was won does not overtake a SET that
// is still on its way: the node was merely slower than the majority. It
// returns ErrNodeRefused when the node refused the lock, and ctx's error if
// the call is still running.
func (h *hold) await(ctx context.Context) error {
	h.mu.Lock()
	reserved, done := h.reserved, h.done
	h.mu.Unlock()
	if reserved {
		// Never sent: nothing to wait for. An Extend that asks it now
		// finishes the hold itself, and releases the node if the lock gave
		// it up meanwhile.
		return ErrNodeRefused
	}
	select {
	case <-done: // an answer already in beats a ctx that also ended
	default:
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if h.refused() {
		return ErrNodeRefused
	}
	return nil
}
