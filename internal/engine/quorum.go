// The round: one request fanned out to every master in parallel, each under
// its own deadline, decided by majority; and the hold that tracks one
// acquire call past its round.

package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/redlock-go/redlock/driver"

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
	reply(t *nodeTask, cmd driver.Reply) (ballot, error)
}

// A nodeCall is an asyncOp that never starts: it always blocks, on a
// worker.
func (f nodeCall) call(ctx context.Context, n *node) (ballot, error) { return f(ctx, n) }
func (nodeCall) start(context.Context, *nodeTask) bool               { return false }
func (nodeCall) reply(*nodeTask, driver.Reply) (ballot, error) {
	panic("redlock: a nodeCall's request is never started")
}

// fanOutAsync is fanOut for an asyncOp: its calls to the nodes that have a
// pipe are started when op.start can.
func (c *Client) fanOutAsync(ctx context.Context, op, key string, dl roundDeadline, skip []error, guardTTL time.Duration, async asyncOp) *round {
	return c.fanOutQuorumFirst(ctx, op, key, dl, skip, guardTTL, async, 0, 0)
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

// Run makes the blocking call, on a worker.
func (t *nodeTask) Run() { t.vote(t.op.call(t.ctx, t.n)) }

// Reply takes a started request's reply; errAskedAgain from the op's
// reply means that it started another request with t as its replyTo, whose
// reply votes.
func (t *nodeTask) Reply(cmd driver.Reply) {
	b, err := t.op.reply(t, cmd)
	if err == errAskedAgain { //nolint:errorlint // a sentinel of this file's own, never wrapped
		return
	}
	t.vote(b, err)
}

// errAskedAgain is an asyncOp's reply when it asked the node again.
var errAskedAgain = errors.New("redlock: asked again")

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
