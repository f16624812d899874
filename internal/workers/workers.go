// Package workers runs a Client's calls to the masters on pooled
// goroutines, so that a call does not start a goroutine and grow its stack
// through go-redis's call chain each time.
package workers

import (
	"sync"
	"time"
)

// idleFor is how long a worker waits for another call before it ends:
// a burst's workers serve the next burst, and a quiet Client keeps none.
const idleFor = 2 * time.Second

// A Task is what a worker runs. A round hands its workers pointers into
// one slice of tasks, which costs one allocation, not one closure per node.
type Task interface{ Run() }

// Func runs a function as a Task.
type Func func()

// Run calls f.
func (f Func) Run() { f() }

// A Pool runs tasks on pooled goroutines. A task handed to Run goes to the
// worker that became idle last (its stack is the warmest), or to a new one
// when none is idle. Handing over costs a mutex and a send on the worker's
// own one-slot channel: no select, no timer per task. One timer for the
// whole pool ends the workers idle for idleFor; Close ends the rest.
//
// Every task must be registered in the Client's bg before Run is called, so
// that the Client's Close, which waits for bg first and then calls Close,
// never sees a worker start after Close.
type Pool struct {
	mu     sync.Mutex
	idle   []*worker // oldest first
	closed bool
	sweep  *time.Timer // armed while a worker is idle
	wg     sync.WaitGroup
}

type worker struct {
	tasks chan Task // one slot: run never blocks; nil ends the worker
	since time.Time // idle since
}

// New returns an empty pool: it starts a worker at the first Run.
func New() *Pool { return &Pool{} }

// Run runs t on the worker that became idle last, or on a new one.
func (w *Pool) Run(t Task) {
	w.mu.Lock()
	if n := len(w.idle); n > 0 {
		wk := w.idle[n-1]
		w.idle[n-1] = nil
		w.idle = w.idle[:n-1]
		w.mu.Unlock()
		wk.tasks <- t
		return
	}
	w.mu.Unlock()
	w.wg.Add(1)
	go w.work(&worker{tasks: make(chan Task, 1)}, t)
}

// work runs t, then whatever the worker is handed, until it is handed nil.
func (w *Pool) work(wk *worker, t Task) {
	defer w.wg.Done()
	for t != nil && w.park(wk, t) {
		t = <-wk.tasks
	}
}

// park runs t, then puts wk on the idle stack; false when the pool closed.
func (w *Pool) park(wk *worker, t Task) bool {
	t.Run()
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	wk.since = now
	w.idle = append(w.idle, wk)
	if w.sweep == nil {
		w.sweep = time.AfterFunc(idleFor, w.retire)
	}
	return true
}

// retire ends the workers idle for idleFor, and runs again while any
// worker is idle.
func (w *Pool) retire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	n := 0
	for n < len(w.idle) && now.Sub(w.idle[n].since) >= idleFor {
		w.idle[n].tasks <- nil
		n++
	}
	rest := copy(w.idle, w.idle[n:])
	clear(w.idle[rest:])
	w.idle = w.idle[:rest]
	switch {
	case w.closed:
	case len(w.idle) > 0:
		w.sweep.Reset(idleFor - now.Sub(w.idle[0].since))
	default:
		w.sweep = nil
	}
}

// Close ends every worker and waits for them; the Client's Close calls it
// after bg.Wait, once no task is running or can be handed over.
func (w *Pool) Close() {
	w.mu.Lock()
	w.closed = true
	if w.sweep != nil {
		w.sweep.Stop()
	}
	for _, wk := range w.idle {
		wk.tasks <- nil
	}
	w.idle = nil
	w.mu.Unlock()
	w.wg.Wait()
}
