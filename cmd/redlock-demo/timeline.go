// The picture of a run (-timeline run.html): one self-contained HTML page
// with an inline SVG, one lane per worker (its waits and holds), one lane
// per master (up or down, and every answer it gave), and a lane of every
// hold at once, where an overlap would show in red; a -fault run's phases
// under the time axis. This file records the run; timelinepage.go draws it.

package main

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/redlock-go/redlock"
)

type tlKind int

const (
	tlWait   tlKind = iota // waiting for the lock
	tlGaveUp               // waited, and gave up
	tlHold                 // held it
	tlLost                 // held it, and Unlock found it lost
)

type tlSpan struct {
	lane     int // worker, from 0
	kind     tlKind
	from, to time.Duration
}

type tlMark struct {
	lane    int // worker (refused attempts) or master
	master  bool
	outcome redlock.NodeOutcome // for masters (NodeQuarantined: a yes the restart guard set aside); for a worker's lost attempt, NodeRefused (contended) or NodeFailed
	at      time.Duration
}

type tlDown struct {
	master   int
	from, to time.Duration // to 0: until the end
}

// A tlPhase is a stretch of a -fault run, from its start to the next
// phase's or the end.
type tlPhase struct {
	label []string // its name under the time axis, a line each
	about string   // the whole story, for its tooltip
	from  time.Duration
}

// A timeline records a run for the page.
type timeline struct {
	start   time.Time
	workers int
	addrs   []string

	mu     sync.Mutex
	spans  []tlSpan
	marks  []tlMark
	downs  []tlDown
	phases []tlPhase
	end    time.Duration
}

func newTimeline(workers int, addrs []string) *timeline {
	return &timeline{start: time.Now(), workers: workers, addrs: addrs}
}

func (t *timeline) since(at time.Time) time.Duration { return at.Sub(t.start) }

func (t *timeline) span(lane int, kind tlKind, from, to time.Time) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.spans = append(t.spans, tlSpan{lane: lane, kind: kind, from: t.since(from), to: t.since(to)})
}

func (t *timeline) masterDown(i int) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.downs = append(t.downs, tlDown{master: i, from: time.Since(t.start)})
}

func (t *timeline) masterUp(i int) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for j := range t.downs {
		if d := &t.downs[j]; d.master == i && d.to == 0 {
			d.to = time.Since(t.start)
		}
	}
}

// phase marks the start of a phase of the run: about tells it, label names
// it on the page in a line or two.
func (t *timeline) phase(about string, label ...string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.phases = append(t.phases, tlPhase{label: label, about: about, from: time.Since(t.start)})
}

// workerKey tags a worker's Lock calls' ctx, so that the observer can put
// their refused attempts on its lane.
type workerKey struct{}

// observer marks every master's answers and every vote the restart guard
// set aside, and every lost attempt on its worker's lane: refused, or
// failed.
func (t *timeline) observer() redlock.Observer {
	return redlock.Observer{
		NodeReply: func(e redlock.NodeReplyEvent) {
			if e.Outcome == redlock.NodeCanceled || e.Outcome == redlock.NodePending {
				return
			}
			t.mu.Lock()
			defer t.mu.Unlock()
			t.marks = append(t.marks, tlMark{lane: e.Node, master: true, outcome: e.Outcome, at: time.Since(t.start)})
		},
		Round: func(e redlock.RoundEvent) {
			t.quarantined(e)
			w, ok := e.Ctx.Value(workerKey{}).(int)
			if !ok || e.Op != "lock" || e.Won() {
				return
			}
			// Refused when a master said the key was another's; otherwise
			// the masters failed or timed out: no contention to show.
			out := redlock.NodeFailed
			for _, n := range e.Nodes {
				if n.Outcome == redlock.NodeRefused {
					out = redlock.NodeRefused
				}
			}
			t.mu.Lock()
			defer t.mu.Unlock()
			t.marks = append(t.marks, tlMark{lane: w, outcome: out, at: time.Since(t.start)})
		},
	}
}

// quarantined marks the masters whose yes in e the restart guard set
// aside. A master's reply does not say so (it said yes, and is marked so):
// only the round does.
func (t *timeline) quarantined(e redlock.RoundEvent) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, n := range e.Nodes {
		if n.Outcome == redlock.NodeQuarantined {
			t.marks = append(t.marks, tlMark{lane: n.Node, master: true, outcome: n.Outcome, at: time.Since(t.start)})
		}
	}
}

// withWorker returns ctx tagged with worker w (from 1).
func withWorker(ctx context.Context, w int) context.Context {
	return context.WithValue(ctx, workerKey{}, w-1)
}

// overlaps returns the intervals where two holds (or lost holds) overlap.
func overlaps(spans []tlSpan) [][2]time.Duration {
	var holds []tlSpan
	for _, s := range spans {
		if s.kind == tlHold || s.kind == tlLost {
			holds = append(holds, s)
		}
	}
	slices.SortFunc(holds, func(a, b tlSpan) int { return int(a.from - b.from) })
	var out [][2]time.Duration
	var end time.Duration
	for i, h := range holds {
		if i > 0 && h.from < end {
			out = append(out, [2]time.Duration{h.from, min(h.to, end)})
		}
		end = max(end, h.to)
	}
	return out
}
