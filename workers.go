// The Client's workers: pooled goroutines that run the calls to the
// masters, so that a call does not start a goroutine and grow its stack
// through go-redis's call chain each time.

package redlock

import (
	"sync"
	"time"
)

// workerIdle is how long a worker waits for another call before it ends:
// a burst's workers serve the next burst, and a quiet Client keeps none.
const workerIdle = 2 * time.Second

// workers runs functions on pooled goroutines. A function handed to run
// goes to a worker that is idle, or to a new one when none is; each worker
// ends after workerIdle without work, or once closing is closed and it is
// idle. Every function run must be registered in the Client's bg before
// run is called, so that Close, which waits for bg first, then for the
// workers (wait), never sees a worker start after it.
type workers struct {
	tasks   chan task // unbuffered: a send succeeds only into an idle worker
	closing <-chan struct{}
	wg      sync.WaitGroup
}

func newWorkers(closing <-chan struct{}) *workers {
	return &workers{tasks: make(chan task), closing: closing}
}

// A task is what a worker runs. A round hands its workers pointers into
// one slice of tasks, which costs one allocation, not one closure per node.
type task interface{ run() }

// taskFunc runs a function as a task.
type taskFunc func()

func (f taskFunc) run() { f() }

// run runs f on an idle worker, or on a new one.
func (w *workers) run(f task) {
	select {
	case w.tasks <- f:
	default:
		w.wg.Add(1)
		go w.work(f)
	}
}

// work runs f, then whatever it is handed, until it has been idle for
// workerIdle or the Client closes.
func (w *workers) work(f task) {
	defer w.wg.Done()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		f.run()
		idle.Reset(workerIdle)
		select {
		case f = <-w.tasks:
		case <-idle.C:
			return
		case <-w.closing:
			return
		}
	}
}

// wait waits for every worker to end; called by Close after bg.Wait, once
// no function is running or can be handed over.
func (w *workers) wait() { w.wg.Wait() }
