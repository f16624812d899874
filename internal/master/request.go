// A request: one script call on its way to a master through a pipe, and
// when it may still be sent.

package master

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redlock-go/redlock/driver"
)

// A request is one script call on its way to a master.
type request struct {
	// ctx carries the request's deadline and the caller's cancellation:
	// a request whose ctx ended before its batch went out is not sent.
	ctx  context.Context
	args []any // the script command's (evalsha's)
	// quick, when not nil, is plain commands that may stand in for args
	// (Pipe.StartQuick): quick[0], then quick[1] when not nil, later in the
	// same pipeline, so that the master runs it after quick[0] on the same
	// connection; requests of a batch that share their quick[1] (the same
	// slice) share one, sent after all of their quick[0]. They go instead
	// of args when the request shares its batch with others; the reply is
	// then Pair's.
	quick *[2][]any
	// send, when not nil, is asked just before the request goes out: false
	// means the request is no longer wanted and is not sent (errNotSent).
	send SendCheck
	// keep, when not zero, lets the request go out after its ctx's
	// deadline passed (a release: see Client.keep).
	keep LateSend

	reply driver.Reply  // the reply, or why there is none
	done  chan struct{} // receives once reply is final; buffered, so requests are reused
	to    replyTo       // not nil: the request was started, and to takes the reply instead
}

// A replyTo takes the reply of a request made with start, once, on the
// goroutine that received it (or that dropped the request). It must not
// block: the replies of the rest of the batch wait for it.
type replyTo interface{ Reply(r driver.Reply) }

// requests are reused: a request and its channel cost allocations on every
// call to every master.
var requests = sync.Pool{New: func() any { return &request{done: make(chan struct{}, 1)} }}

// A SendCheck says, just before a request goes out, whether it is still
// wanted: a *hold, whose acquisition may have given the node up meanwhile.
// (An interface, not a func: a method value is an allocation per call.)
type SendCheck interface{ Send() bool }

// ErrNotSent is a request's error when its send check said no.
var ErrNotSent = errors.New("redlock: request not sent: no longer wanted")

// finish makes r's reply final, with err when not nil; r belongs to its
// caller again, or, when it was started, the reply goes to r.to and r back
// to the pool.
func (r *request) finish(err error) {
	if err != nil {
		r.reply = driver.Reply{Err: err}
	}
	if to := r.to; to != nil {
		reply := r.reply
		*r = request{done: r.done}
		requests.Put(r)
		to.Reply(reply)
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

// A LateSend lets a request go out after its ctx's deadline passed, until
// until, with wait to be answered once it goes; zero, it does not.
type LateSend struct {
	Until time.Time
	Wait  time.Duration
}

// late reports whether r goes out after its ctx's deadline, kept; its ctx
// is then done, and it is sent with a deadline of its own: now + keep.wait.
func (r *request) late() bool { return !r.keep.Until.IsZero() && r.ctx.Err() != nil }
