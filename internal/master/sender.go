// A pipe's senders: taking a batch off the queue, sending it as one
// pipeline, handing out its replies, and stalled batches.

package master

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/redlock-go/redlock/driver"
	"github.com/redlock-go/redlock/internal/script"
)

// A batch is the requests one sender has sent in one pipeline.
type batch struct {
	stalled bool // guarded by the pipe's mu
	reqs    []*request
}

// batches are reused, with their slices: one per request to an idle master
// otherwise.
var batches = sync.Pool{New: func() any { return new(batch) }}

// Run sends batches until the queue is empty. A pipe is the task its
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
		r.reply = Script(ctx, p.client, r.args)
		r.finish(nil)
		return
	}
	p.withSources(reqs)
	p.pipeline(ctx, reqs)
	var again []*request
	for _, r := range reqs {
		if isNoScript(r.reply.Err) {
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
	p.pipeline(ctx, again)
	for _, r := range again {
		r.finish(nil)
	}
}

// pipeline sends reqs' commands as one pipeline and sets their replies. A
// driver that returns fewer replies than commands (a broken contract)
// leaves the rest with errShortPipeline.
func (p *Pipe) pipeline(ctx context.Context, reqs []*request) {
	cmds := make([][]any, 0, len(reqs)+1)
	at := make([]int, len(reqs)) // where each request's command (its quick first one) is in cmds
	// The quick requests' second command, when they share one (the same
	// slice: a master's marker GET), goes once, after all of their first
	// ones: it runs after each of them on the connection, which is all a
	// quick request asks of it (StartQuick).
	var shared []any
	for i, r := range reqs {
		at[i] = len(cmds)
		switch {
		case r.quick == nil:
			cmds = append(cmds, r.args)
		case r.quick[1] == nil:
			cmds = append(cmds, r.quick[0])
		case shared == nil || sameCmd(shared, r.quick[1]):
			shared = r.quick[1]
			cmds = append(cmds, r.quick[0])
		default:
			cmds = append(cmds, r.quick[0], r.quick[1])
		}
	}
	if shared != nil {
		cmds = append(cmds, shared)
	}
	replies := p.client.DoMulti(ctx, cmds...)
	reply := func(i int) driver.Reply {
		if i < len(replies) {
			return replies[i]
		}
		return driver.Reply{Err: errShortPipeline}
	}
	for i, r := range reqs {
		switch {
		case r.quick == nil:
			r.reply = reply(at[i])
		case r.quick[1] == nil:
			r.reply = Pair(reply(at[i]), driver.Reply{})
		case sameCmd(shared, r.quick[1]):
			r.reply = Pair(reply(at[i]), reply(len(cmds)-1))
		default:
			r.reply = Pair(reply(at[i]), reply(at[i]+1))
		}
	}
}

// sameCmd reports whether a and b are the same command slice.
func sameCmd(a, b []any) bool { return len(a) > 0 && len(a) == len(b) && &a[0] == &b[0] }

// Pair is the reply of a request sent as its quick commands (StartQuick),
// the second one's reply zero when there is none: when either
// failed, the first error, a nil reply not counting (driver.ErrNil);
// otherwise Val is a [2]any of the two replies' values (nil for a nil
// reply).
func Pair(first, second driver.Reply) driver.Reply {
	var v [2]any
	for i, r := range [2]driver.Reply{first, second} {
		if r.Err != nil && !errors.Is(r.Err, driver.ErrNil) {
			return driver.Reply{Err: r.Err}
		}
		v[i] = r.Val
	}
	return driver.Reply{Val: v}
}

// errShortPipeline is a request's error when the driver's DoMulti returned
// no reply for it.
var errShortPipeline = errors.New("redlock: the driver returned fewer replies than the pipeline's commands")

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
		if r.quick != nil || len(r.args) < 2 || r.args[0] != "evalsha" || p.sent[r.args[1]] {
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
