// Per-master auto-pipelining: the script calls queued for one master go out
// together, as one pipeline (driver.Conn's DoMulti), while the previous
// batch is on its way.

package master

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/redlock-go/redlock/driver"
	"github.com/redlock-go/redlock/internal/workers"
)

// DefaultBatchLimit is how many requests one pipeline to a master carries
// at most (WithBatchLimit).
const DefaultBatchLimit = 128

// MaxStalledBatches caps the batches a master may have in flight when all
// of them are past their requests' deadlines: a master that hangs costs at
// most this many connections.
const MaxStalledBatches = 4

// A Pipe sends one master's requests. A request that finds the pipe idle
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
// After a network error a driver may send a pipeline again, whole, on a new
// connection, as it may send a lone command again (go-redis does): the scripts are written to
// be run twice (an acquisition finds its own token and says yes; an
// extension or a hand-off finds the key as it left it). A release run again
// after it deleted the key answers "not ours", and that master counts as
// failed for its Unlock: an error that overstates, never a key left behind.
type Pipe struct {
	client driver.Conn
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

// NewPipe returns the pipe of the master that client reaches, sending at
// most limit requests per batch; a sender runs only for a request
// registered in bg, on a goroutine that spawn starts.
func NewPipe(client driver.Conn, limit int, bg *sync.WaitGroup, spawn func(workers.Task)) *Pipe {
	return &Pipe{client: client, limit: limit, bg: bg, spawn: spawn}
}

// Queued reports how many requests wait for a batch.
func (p *Pipe) Queued() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue)
}

// Do runs a script command (evalsha's arguments) on the master through the
// pipe and returns its reply.
// When the pipe is idle, the calling goroutine sends the batch itself.
func (p *Pipe) Do(ctx context.Context, send SendCheck, keep LateSend, args []any) driver.Reply {
	return p.DoQuick(ctx, send, keep, args, nil)
}

// DoQuick is Do for a request that plain commands may stand in for: see
// StartQuick.
func (p *Pipe) DoQuick(ctx context.Context, send SendCheck, keep LateSend, args []any, quick *[2][]any) driver.Reply {
	r, start := p.enqueue(ctx, send, keep, args, quick, nil, false)
	if start {
		p.serve()
	}
	<-r.done
	reply := r.reply
	*r = request{done: r.done}
	requests.Put(r)
	return reply
}

// Start queues a script command (evalsha's arguments) for the master and
// returns at once; to takes its reply (see replyTo). When the pipe is idle,
// a worker sends it. The caller must be registered in the Client's bg until
// to has the reply.
func (p *Pipe) Start(ctx context.Context, send SendCheck, keep LateSend, args []any, to replyTo) {
	p.StartQuick(ctx, send, keep, args, nil, to)
}

// StartQuick is Start for a script command that plain commands, quick, may
// stand in for: quick[0], then quick[1] when not nil, later in the same
// pipeline, so that the master runs it after quick[0] on the same
// connection (driver.Conn's DoMulti); the quick requests of a batch that
// share their quick[1] (the same slice) share one, sent after all of their
// quick[0] (a batch of acquisitions reads the master's marker once). They go instead of args when the
// request shares its batch with others, as under load, where they cost the
// master less than the script; a request alone goes as args, since a
// pipeline of two commands costs the client more than one command (with
// go-redis, a dozen allocations more). The reply tells which went: Pair's,
// a [2]any, for quick, or an error.
func (p *Pipe) StartQuick(ctx context.Context, send SendCheck, keep LateSend, args []any, quick *[2][]any, to replyTo) {
	if _, start := p.enqueue(ctx, send, keep, args, quick, to, false); start {
		p.spawn(p)
	}
}

// StartFirst is start for a clean-up (Client.releaseNodeArgs): the request
// goes ahead of every request queued, behind only the batches on their way.
func (p *Pipe) StartFirst(ctx context.Context, keep LateSend, args []any, to replyTo) {
	if _, start := p.enqueue(ctx, nil, keep, args, nil, to, true); start {
		p.spawn(p)
	}
}

// enqueue queues a request, last or first, and reports whether the caller
// must start a sender for it (mayStart).
func (p *Pipe) enqueue(ctx context.Context, send SendCheck, keep LateSend, args []any, quick *[2][]any, to replyTo, first bool) (r *request, start bool) {
	r = requests.Get().(*request)
	r.ctx, r.args, r.quick, r.send, r.keep, r.to = ctx, args, quick, send, keep, to
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
