// Where the Client emits its events to the observers (observe.go), and how
// it classes a round's and a node's outcomes for them.

package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// start runs the observers' Start for a call: the context the call works
// with.
func (c *Client) start(ctx context.Context, op, key string) context.Context {
	if o := c.cfg.obs; o != nil && o.Start != nil && ctx != nil {
		return o.Start(ctx, op, key)
	}
	return ctx
}

// observeAcquire reports TryLock's or Lock's return.
func (c *Client) observeAcquire(ctx context.Context, op, key string, began time.Time, err error) {
	if o := c.cfg.obs; o != nil && o.Acquire != nil {
		o.Acquire(AcquireEvent{Ctx: ctx, Op: op, Key: key, Wait: time.Since(began), Outcome: acquireOutcome(ctx, err), Err: err})
	}
}

// acquireOutcome classifies an acquisition's error.
func acquireOutcome(ctx context.Context, err error) AcquireOutcome {
	if err == nil {
		return AcquireObtained
	}
	if !errors.Is(err, ErrNotObtained) || errors.Is(err, ErrClosed) {
		return AcquireFailed
	}
	var qe *QuorumError
	if errors.As(err, &qe) {
		switch qe.cause() {
		case causeContended:
			return AcquireContended
		case causeUnreachable:
			return AcquireMajorityUnreachable
		}
	}
	if ctx != nil && ctx.Err() != nil {
		return AcquireCtxEnded
	}
	if qe != nil && qe.Votes >= qe.Quorum {
		return AcquireFailed // no validity left
	}
	return AcquireContended
}

// A roundCause is why a round that did not win failed.
type roundCause int

// cause tells what put a majority out of reach. Failures (timeouts,
// errors, and quarantined masters, whose yes cannot count: none of them
// says another token holds the key) only when they alone rule it out (more
// than n−quorum) or nothing was refused: a master that refused holds the key for another token, so a
// round that lost to refusals and a failing master lost to a holder, and
// "contended" is the answer an operator can act on. The caller's ctx
// ending says nothing of the masters and counts for neither.
func (e *QuorumError) cause() roundCause {
	if e.Votes >= e.Quorum {
		return causeNone
	}
	refused, failed := 0, 0
	for _, ne := range e.Nodes {
		switch {
		case errors.Is(ne.Err, ErrNodeRefused):
			refused++
		case errors.Is(ne.Err, context.Canceled), errors.Is(ne.Err, context.DeadlineExceeded):
		default:
			failed++
		}
	}
	switch {
	case failed > e.nodes-e.Quorum:
		return causeUnreachable
	case refused > 0:
		return causeContended
	case failed > 0:
		return causeUnreachable
	}
	return causeNone
}

// errValidityEnded is the Err of a request the library cut short because
// its lock's validity ended before the masters' deadline.
var errValidityEnded = errors.New("redlock: the lock's validity ended before the master answered")

// cutByValidity reports whether a request that timed out, answering at
// at, was cut short by the library at the end of its lock's validity (an
// Extend or Fence at the last moment), before the masters' deadline: that
// says nothing of the master. A driver's own timeout (a socket deadline:
// its read timeout) still does, and so does a request outstanding at the
// masters' deadline.
func (rc *roundObs) cutByValidity(out NodeOutcome, err error, at time.Time) bool {
	return out == NodeTimeout && rc.deadline.Before(rc.nodeDeadline) &&
		!at.Before(rc.deadline) && at.Before(rc.nodeDeadline) && !errors.Is(err, os.ErrDeadlineExceeded)
}

// nodeOutcome classifies a request's error on a node; caller is the ctx of
// the call that made the round.
func nodeOutcome(caller context.Context, yes bool, err error) (NodeOutcome, error) {
	switch {
	case err == nil && yes:
		return NodeYes, nil
	case err == nil:
		return NodeRefused, nil
	case errors.Is(err, ErrNodeQuarantined):
		return NodeQuarantined, err
	case caller != nil && caller.Err() != nil && !errors.Is(err, ErrNodeTimeout):
		return NodeCanceled, err
	case errors.Is(err, ErrNodeTimeout):
		return NodeTimeout, err
	case errors.Is(err, context.DeadlineExceeded), isNetTimeout(err):
		return NodeTimeout, fmt.Errorf("%w (%w)", ErrNodeTimeout, err)
	case errors.Is(err, context.Canceled):
		return NodeCanceled, err
	}
	return NodeFailed, err
}

func isNetTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// nodeHealth is a master's state for NodeState: failing or not. Its
// changes, and their events, are made under mu, so that a master's events
// alternate in the order of its changes whatever goroutines observe them.
type nodeHealth struct {
	failing     atomic.Bool // read without mu on every reply: a change is rare
	quarantined atomic.Bool
	mu          sync.Mutex
}

// observeReply reports one node's answer to a round's request, and the
// node's state when it changed.
func (t *nodeTask) observeReply(b ballot, err error, at time.Time) {
	o, rc := t.c.cfg.obs, t.calls.obs
	if o == nil || rc == nil || errors.Is(err, errGivenUp) {
		return
	}
	out, err := nodeOutcome(rc.caller, b.yes, err)
	switch {
	case out == NodeCanceled && !at.Before(rc.nodeDeadline):
		// The caller left, but the request outlived the node deadline
		// (a driver that does not end it with ctx): the master did not
		// answer in time, whoever was still waiting.
		out, err = NodeTimeout, fmt.Errorf("%w (%w)", ErrNodeTimeout, err)
	case rc.cutByValidity(out, err, at):
		out, err = NodeCanceled, errValidityEnded
	}
	if o.NodeReply != nil {
		o.NodeReply(NodeReplyEvent{Ctx: rc.caller, Op: rc.op, Key: rc.key, Node: t.n.index, Addr: t.n.addr, Outcome: out, Latency: at.Sub(rc.start), Err: err})
	}
	t.n.observeState(o, rc.op, out, err)
}

// observeState reports a change of n's state that outcome of a request of
// op makes.
func (n *node) observeState(o *Observer, op string, out NodeOutcome, err error) {
	var failing bool
	switch out {
	case NodeTimeout, NodeFailed:
		failing = true
	case NodeYes, NodeRefused:
		if (out == NodeYes && op == "unlock") || (out == NodeRefused && op != "lock") {
			// No sign of recovery: a master at maxmemory refuses every
			// grant, yet still deletes, and answers "not ours" to the
			// releases, extensions and fences of locks it never got;
			// counted, it would flap on every lock. A lock's refusal is
			// an answer after a write was tried (the key is another's).
			return
		}
		err = nil
	default:
		return
	}
	if n.health.failing.Load() == failing {
		return // no change: no lock
	}
	n.health.mu.Lock()
	defer n.health.mu.Unlock()
	if n.health.failing.Load() == failing {
		return
	}
	n.health.failing.Store(failing)
	if o.NodeState != nil {
		o.NodeState(NodeStateEvent{Node: n.index, Addr: n.addr, Healthy: !failing, Outcome: out, Err: err})
	}
}

// refusedNoticeBy records that n refused a notice with err, and reports it
// unless n was known to refuse them already.
func (n *node) refusedNoticeBy(err error) {
	o := n.obs
	if o == nil || o.NoticesDegraded == nil {
		n.refusedNotice()
		return
	}
	n.health.mu.Lock()
	defer n.health.mu.Unlock()
	already := n.refusesNotices()
	n.refusedNotice()
	if !already {
		o.NoticesDegraded(NoticesDegradedEvent{Node: n.index, Addr: n.addr, Err: err})
	}
}

// observeRound reports a decided round; caller is the ctx of its call.
func (c *Client) observeRound(caller context.Context, r *round) {
	o := c.cfg.obs
	if o == nil || r.obs == nil {
		return
	}
	if o.Quarantine != nil {
		out := make([]bool, len(c.nodes))
		for _, ne := range r.failed {
			if errors.Is(ne.Err, ErrNodeQuarantined) {
				out[ne.Node] = true
				if c.nodes[ne.Node].health.quarantined.CompareAndSwap(false, true) {
					o.Quarantine(QuarantineEvent{Ctx: caller, Op: r.op, Key: r.key, Node: ne.Node, Addr: ne.Addr})
				}
			}
		}
		// A yes counted again where the guard applies ends the
		// quarantine: the next one is news. (A release's yes is not a
		// vote the guard could hold back.)
		for _, a := range r.obs.answers {
			if a.yes && !out[a.node] && r.guardTTL > 0 {
				c.nodes[a.node].health.quarantined.Store(false)
			}
		}
	}
	if o.Round == nil {
		return
	}
	nodes := make([]NodeResult, len(c.nodes))
	for i, n := range c.nodes {
		nodes[i] = NodeResult{Node: i, Addr: n.addr, Outcome: NodePending, Latency: r.elapsed()}
	}
	for _, a := range r.obs.answers {
		if a.yes {
			nodes[a.node].Outcome, nodes[a.node].Latency = NodeYes, a.at.Sub(r.start)
		}
	}
	for _, ne := range r.failed {
		out, err := nodeOutcome(caller, false, ne.Err)
		if errors.Is(ne.Err, ErrNodeRefused) {
			out, err = NodeRefused, nil
		}
		if r.obs.cutByValidity(out, err, r.start.Add(ne.Latency)) {
			out, err = NodeCanceled, errValidityEnded
		}
		nodes[ne.Node] = NodeResult{Node: ne.Node, Addr: ne.Addr, Outcome: out, Latency: ne.Latency, Err: err}
	}
	o.Round(RoundEvent{Ctx: caller, Op: r.op, Key: r.key, Votes: r.tally.Yes, Quorum: r.quorum, Elapsed: r.elapsed(), Nodes: nodes})
}

const (
	causeNone        roundCause = iota // it won, or nothing says
	causeContended                     // a master refused: another token held the key
	causeUnreachable                   // only failures (timeouts, errors, quarantine), or too many of them
)
