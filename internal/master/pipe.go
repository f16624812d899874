// Per-master auto-pipelining: the script calls queued for one master go out
// together, as one go-redis pipeline, while the previous batch is on its way.

package master

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/script"
	"github.com/redlock-go/redlock/internal/workers"
)

// DefaultBatchLimit is how many requests one pipeline to a master carries
// at most (WithBatchLimit).
const DefaultBatchLimit = 128

// maxStalledBatches caps the batches a master may have in flight when all
// of them are past their requests' deadlines: a master that hangs costs at
// most this many connections.
const MaxStalledBatches = 4

// A request is one script call on its way to a master.
type request struct {
	// ctx carries the request's deadline and the caller's cancellation:
	// a request whose ctx ended before its batch went out is not sent.
	ctx  context.Context
	args []any // the script command's (evalsha's)
	// send, when not nil, is asked just before the request goes out: false
	// means the request is no longer wanted and is not sent (errNotSent).
	send SendCheck
	// keep, when not zero, lets the request go out after its ctx's
	// deadline passed (a release: see Client.keep).
	keep LateSend

	cmd  *redis.Cmd    // the reply, or why there is none
	done chan struct{} // receives once cmd is final; buffered, so requests are reused
	to   replyTo       // not nil: the request was started, and to takes the reply instead
}

// A replyTo takes the reply of a request made with start, once, on the
// goroutine that received it (or that dropped the request). It must not
// block: the replies of the rest of the batch wait for it.
type replyTo interface{ Reply(cmd *redis.Cmd) }

// requests are reused: a request and its channel cost allocations on every
// call to every master.
var requests = sync.Pool{New: func() any { return &request{done: make(chan struct{}, 1)} }}

// A sendCheck says, just before a request goes out, whether it is still
// wanted: a *hold, whose acquisition may have given the node up meanwhile.
// (An interface, not a func: a method value is an allocation per call.)
type SendCheck interface{ Send() bool }

// errNotSent is a request's error when its send check said no.
var ErrNotSent = errors.New("redlock: request not sent: no longer wanted")

// finish makes r's reply final, with err when not nil; r belongs to its
// caller again, or, when it was started, the reply goes to r.to and r back
// to the pool.
func (r *request) finish(err error) {
	if err != nil {
		r.cmd = redis.NewCmd(r.ctx)
		r.cmd.SetErr(err)
	}
	if to := r.to; to != nil {
		cmd := r.cmd
		*r = request{done: r.done}
		requests.Put(r)
		to.Reply(cmd)
		return
	}
	r.done <- struct{}{}
}

// unsent reports why r is no longer to be sent at now; nil: it is. A
// request is not sent once its ctx ended, unless it is kept (a release)
// and only its deadline passed, before keep.
func (r *request) unsent(now time.Time) error {
	err := r.ctx.Err()
	if err == nil || (now.Before(r.keep.Until) && errors.Is(err, context.DeadlineExceeded)) {
		return nil
	}
	return err
}

// sendBy is when r must go out at the latest, as of now: its ctx's
// deadline, or keep once that passed; false when it has neither.
func (r *request) sendBy(now time.Time) (time.Time, bool) {
	d, ok := r.ctx.Deadline()
	if ok && !now.Before(d) && !r.keep.Until.IsZero() {
		return r.keep.Until, true
	}
	return d, ok
}

// A lateSend lets a request go out after its ctx's deadline passed, until
// until, with wait to be answered once it goes; zero, it does not.
type LateSend struct {
	Until time.Time
	Wait  time.Duration
}

// late reports whether r goes out after its ctx's deadline, kept; its ctx
// is then done, and it is sent with a deadline of its own: now + keep.wait.
func (r *request) late() bool { return !r.keep.Until.IsZero() && r.ctx.Err() != nil }

// A pipe sends one master's requests. A request that finds the pipe idle
// goes out at once, alone; those that arrive while a batch is on its way
// queue, and go out together, in the order they came, when it returns.
// So there is one live batch per master at a time, and no request overtakes
// an earlier one, but for clean-ups (startFirst): a failed attempt's
// release goes ahead of the queue, so that the next attempt does not find
// the token it deletes.
//
// A request never waits behind a batch for more than half of the time it
// has left when it queues: by then the batch is stalled, far slower than
// the master answers when it is well (a hung connection, a slow reply), and
// the queue goes out beside it, on another connection; at most
// maxStalledBatches at once, so that a hung master costs a bounded number
// of connections; past that, what queues can only wait, and is dropped
// unsent at its deadline (sweepGrain later at most); a release waits on
// until its keep (Client.keep), and goes out late. Requests beside a
// stalled batch may overtake those in it.
// Nothing relies on the order between them: a request that must follow
// another (a release after its SET, an Extend or a hand-off after the
// acquisition) is made only once the other's reply is in, as without
// batching.
//
// After a network error go-redis sends a pipeline again, whole, on a new
// connection, as it sends a lone command again: the scripts are written to
// be run twice (an acquisition finds its own token and says yes; an
// extension or a hand-off finds the key as it left it). A release run again
// after it deleted the key answers "not ours", and that master counts as
// failed for its Unlock: an error that overstates, never a key left behind.
type Pipe struct {
	client redis.UniversalClient
	limit  int
	bg     *sync.WaitGroup    // the Client's: a sender runs only for a registered request
	spawn  func(workers.Task) // runs a sender on another goroutine (the Client's workers)

	mu      sync.Mutex
	queue   []*request
	out     []*batch     // batches on their way
	senders int          // goroutines sending batches
	stalled int          // of which are waiting on a stalled batch
	due     time.Time    // when the queue must go out even if a batch is still on its way; zero: no timer
	timer   *time.Timer  // fires at due
	sent    map[any]bool // the scripts (SHA1) a batch sent with their source (withSources)
}

// newPipe returns the pipe of the master that client reaches, sending at
// most limit requests per batch; a sender runs only for a request
// registered in bg, on a goroutine that spawn starts.
func NewPipe(client redis.UniversalClient, limit int, bg *sync.WaitGroup, spawn func(workers.Task)) *Pipe {
	return &Pipe{client: client, limit: limit, bg: bg, spawn: spawn}
}

// queued reports how many requests wait for a batch.
func (p *Pipe) Queued() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue)
}

// A batch is the requests one sender has sent in one pipeline.
type batch struct {
	stalled bool // guarded by the pipe's mu
	reqs    []*request
}

// batches are reused, with their slices: one per request to an idle master
// otherwise.
var batches = sync.Pool{New: func() any { return new(batch) }}

// do runs a script command (evalsha's arguments) on the master through the
// pipe and returns its reply.
// When the pipe is idle, the calling goroutine sends the batch itself.
func (p *Pipe) Do(ctx context.Context, send SendCheck, keep LateSend, args []any) *redis.Cmd {
	r, start := p.enqueue(ctx, send, keep, args, nil, false)
	if start {
		p.serve()
	}
	<-r.done
	cmd := r.cmd
	*r = request{done: r.done}
	requests.Put(r)
	return cmd
}

// start queues a script command (evalsha's arguments) for the master and
// returns at once; to takes its reply (see replyTo). When the pipe is idle,
// a worker sends it. The caller must be registered in the Client's bg until
// to has the reply.
func (p *Pipe) Start(ctx context.Context, send SendCheck, keep LateSend, args []any, to replyTo) {
	if _, start := p.enqueue(ctx, send, keep, args, to, false); start {
		p.spawn(p)
	}
}

// startFirst is start for a clean-up (Client.releaseNodeArgs): the request
// goes ahead of every request queued, behind only the batches on their way.
func (p *Pipe) StartFirst(ctx context.Context, keep LateSend, args []any, to replyTo) {
	if _, start := p.enqueue(ctx, nil, keep, args, to, true); start {
		p.spawn(p)
	}
}

// enqueue queues a request, last or first, and reports whether the caller
// must start a sender for it (mayStart).
func (p *Pipe) enqueue(ctx context.Context, send SendCheck, keep LateSend, args []any, to replyTo, first bool) (r *request, start bool) {
	r = requests.Get().(*request)
	r.ctx, r.args, r.send, r.keep, r.to = ctx, args, send, keep, to
	p.mu.Lock()
	defer p.mu.Unlock()
	if first {
		p.queue = slices.Insert(p.queue, 0, r)
	} else {
		p.queue = append(p.queue, r)
	}
	start = p.mayStart()
	if !start && p.senders > 0 {
		p.wait(r, time.Now())
	}
	return r, start
}

// serve sends one batch in the calling goroutine, then leaves whatever
// queued meanwhile to a sender goroutine: the caller's own reply is in.
func (p *Pipe) serve() {
	if !p.sendNext() {
		p.bg.Done()
		return
	}
	p.mu.Lock()
	more := len(p.queue) > 0
	if !more {
		p.senders--
	}
	p.mu.Unlock()
	if more {
		p.spawn(p) // takes over this sender's count and registration
		return
	}
	p.bg.Done()
}

// wait sets the pipe's timer so that r, queued behind a batch, goes out
// within half of the time it has left. Called with mu held.
func (p *Pipe) wait(r *request, now time.Time) {
	d, ok := r.sendBy(now)
	if !ok {
		return
	}
	p.arm(now.Add(d.Sub(now)/2), now)
}

// arm sets the pipe's timer to due unless it is set earlier already. Called
// with mu held.
func (p *Pipe) arm(due, now time.Time) {
	if !p.due.IsZero() && !due.Before(p.due) {
		return
	}
	p.due = due
	if p.timer == nil {
		p.timer = time.AfterFunc(due.Sub(now), p.stall)
	} else {
		p.timer.Reset(due.Sub(now))
	}
}

// sweepGrain is how late past its deadline a request queued behind stalled
// batches, with no sender left to start, is dropped: the drops of requests
// made close together then take one wake-up, not one each.
const sweepGrain = time.Millisecond

// mayStart reports whether a new sender must start for the queue, and
// counts it: when every sender is waiting on a stalled batch. Called with
// mu held.
func (p *Pipe) mayStart() bool {
	if len(p.queue) == 0 || p.senders > p.stalled || p.senders >= MaxStalledBatches {
		return false
	}
	p.senders++
	p.bg.Add(1) // a sender's own registration; the queued request's caller is registered: no Wait has returned
	return true
}

// run sends batches until the queue is empty. A pipe is the task its
// workers run (no method value to allocate for each start).
func (p *Pipe) Run() {
	defer p.bg.Done()
	for p.sendNext() {
	}
}

// sendNext sends the next batch; false when its sender stops: the queue was
// empty, or it gave way to another sender (done).
func (p *Pipe) sendNext() bool {
	b := p.take()
	if b == nil {
		return false
	}
	p.send(b.reqs)
	return p.done(b)
}

// take removes the next batch of requests from the queue; nil, and the
// sender stops, when it is empty.
func (p *Pipe) take() *batch {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.queue) == 0 {
		p.senders--
		return nil
	}
	n := min(len(p.queue), p.limit)
	b := batches.Get().(*batch)
	b.reqs = append(b.reqs[:0], p.queue[:n]...)
	rest := copy(p.queue, p.queue[n:])
	clear(p.queue[rest:])
	p.queue = p.queue[:rest]
	switch {
	case rest == 0 && !p.due.IsZero():
		p.due = time.Time{}
		p.timer.Stop()
	case rest > 0:
		// More than a batch queued: what stays behind this one waits for
		// it, so its time counts (stall may have cleared the timer).
		now := time.Now()
		for _, r := range p.queue {
			p.wait(r, now)
		}
	}
	p.out = append(p.out, b)
	return b
}

// done records that b's replies are in, and reports whether its sender goes
// on with the queue: not when b stalled and another sender took over, so
// that batches go out one at a time again.
func (p *Pipe) done(b *batch) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.out = slices.DeleteFunc(p.out, func(o *batch) bool { return o == b })
	stalled := b.stalled
	clear(b.reqs) // finished: they belong to their callers again
	b.reqs, b.stalled = b.reqs[:0], false
	batches.Put(b)
	if !stalled {
		return true
	}
	p.stalled--
	if p.senders > p.stalled+1 {
		p.senders--
		return false
	}
	return true
}

// send sends the requests still wanted as one pipeline and finishes every
// request.
func (p *Pipe) send(reqs []*request) {
	live := reqs[:0]
	var latest time.Time
	now := time.Now()
	for _, r := range reqs {
		if err := r.unsent(now); err != nil {
			r.finish(err)
			continue
		}
		if r.send != nil && !r.send.Send() {
			r.finish(ErrNotSent)
			continue
		}
		live = append(live, r)
		d, ok := r.ctx.Deadline()
		if r.late() {
			d, ok = now.Add(r.keep.Wait), true
		}
		if ok && d.After(latest) {
			latest = d
		}
	}
	if len(live) == 0 {
		return
	}
	// A lone request goes with its own context, as it would unbatched. A
	// pipeline has its own: the latest deadline of its requests, for a
	// driver that honours deadlines (ContextTimeoutEnabled), and no
	// caller's cancellation: one caller giving up must not fail the others.
	ctx := context.Background()
	if len(live) == 1 {
		ctx = live[0].ctx
		if live[0].late() {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), now.Add(live[0].keep.Wait))
			defer cancel()
		}
	} else if !latest.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, latest)
		defer cancel()
	}
	p.exec(ctx, live)
}

// exec runs the requests as one pipeline, and those the master did not know
// the script of again with the script's source, then finishes them all.
func (p *Pipe) exec(ctx context.Context, reqs []*request) {
	if len(reqs) == 1 { // a lone request: a plain command costs less
		r := reqs[0]
		r.cmd = Run(ctx, p.client, r.args)
		r.finish(nil)
		return
	}
	p.withSources(reqs)
	pl := p.client.Pipeline()
	for _, r := range reqs {
		r.cmd = redis.NewCmd(ctx, r.args...)
		_ = pl.Process(ctx, r.cmd)
	}
	_, _ = pl.Exec(ctx)
	var again []*request
	for _, r := range reqs {
		if isNoScript(r.cmd.Err()) {
			if eval := script.AsEval(r.args); eval != nil {
				r.args = eval
				again = append(again, r)
				continue
			}
		}
		r.finish(nil)
	}
	if len(again) == 0 {
		return
	}
	// A restarted or flushed script cache. The replies that came in order
	// are in; these run after them, still in their own order.
	pl = p.client.Pipeline()
	for _, r := range again {
		r.cmd = redis.NewCmd(ctx, r.args...)
		_ = pl.Process(ctx, r.cmd)
	}
	_, _ = pl.Exec(ctx)
	for _, r := range again {
		r.finish(nil)
	}
}

// withSources turns into EVAL, with the script's source, each request of
// a batch whose script no batch sent so yet. A request that a master
// answers NOSCRIPT runs again after the rest of its batch (exec), and so
// after requests made after it: a lost attempt's clean-up, queued ahead of
// the waiter's next attempt (startFirst), came after it and let it be
// refused for the waiter's own last token, at each script's first use on
// each master (a stress run of the wait tests, six race binaries side by
// side, saw it). Once a master has run a script's source, it knows the
// script until it restarts or its script cache is flushed; then NOSCRIPT
// and the run again are left (rare).
func (p *Pipe) withSources(reqs []*request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range reqs {
		if len(r.args) < 2 || r.args[0] != "evalsha" || p.sent[r.args[1]] {
			continue
		}
		if eval := script.AsEval(r.args); eval != nil {
			if p.sent == nil {
				p.sent = map[any]bool{}
			}
			p.sent[r.args[1]] = true
			r.args = eval
		}
	}
}

// stall runs when a queued request has waited half of its time: it marks
// the batches on their way as stalled and starts another sender for the
// queue. It drops the queued requests whose deadline passed too, which
// would not be sent anyway.
func (p *Pipe) stall() {
	p.mu.Lock()
	now := time.Now()
	if p.due.IsZero() || now.Before(p.due) {
		p.mu.Unlock() // the queue went out, or the timer was moved
		return
	}
	p.due = time.Time{}
	for _, b := range p.out {
		if !b.stalled {
			b.stalled = true
			p.stalled++
		}
	}
	var expired []*request
	var earliest time.Time // of the deadlines still queued
	kept := p.queue[:0]
	for _, r := range p.queue {
		if r.unsent(now) != nil {
			expired = append(expired, r)
			continue
		}
		kept = append(kept, r)
		if d, ok := r.sendBy(now); ok && (earliest.IsZero() || d.Before(earliest)) {
			earliest = d
		}
	}
	clear(p.queue[len(kept):])
	p.queue = kept
	start := p.mayStart()
	if !start && len(p.queue) > 0 && p.senders == p.stalled && !earliest.IsZero() {
		// Every sender is on a stalled batch, and no more may start: what
		// queued can only wait; wake at its first deadline to drop it.
		p.arm(earliest.Add(sweepGrain), now)
	}
	// Otherwise a live sender takes the queue, and take arms the timer for
	// what it leaves.
	p.mu.Unlock()
	for _, r := range expired {
		r.finish(r.unsent(now))
	}
	if start {
		p.spawn(p)
	}
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}
