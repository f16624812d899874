// Data losses the fence store excuses: a master that restarted without its
// data may let a fence repeat or go backwards, and the store says so.

package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"
)

// A dataLoss: every command that met the master's old data ran before
// oldBefore, every one that met its new (emptied) data after newAfter.
type dataLoss struct {
	oldBefore, newAfter time.Time
	what                string
}

// DataLoss records that a master lost its data (a restart without
// persistence, a FLUSHALL): every command that met its old data ran before
// oldBefore, and every one that met the new data after newAfter. For a
// master that was down in between, oldBefore may be earlier than newAfter
// (a moment it was seen down, then the last such moment); when only the
// fault's start and end are known, pass its end as oldBefore and its start
// as newAfter. Check then excuses a pair of fences A, B only if A's Fence
// call began before oldBefore and B's returned after newAfter: A's counter
// writes may have met the old data and B's the new.
func (s *FenceStore) DataLoss(oldBefore, newAfter time.Time, what string) {
	s.mu.Lock()
	s.losses = append(s.losses, dataLoss{oldBefore, newAfter, what})
	s.mu.Unlock()
	if s.hist != nil {
		s.hist.Note("data loss (%s): old data until %v at the latest, new data from %v at the earliest", what, s.at(oldBefore), s.at(newAfter))
	}
}

// excused reports whether a data loss may separate a's counter writes
// from b's: a's Fence began before the loss, b's ended after it.
func (s *FenceStore) excused(a, b *FenceRecord) bool {
	for _, l := range s.losses {
		if a.Asked.Before(l.oldBefore) && b.Got.After(l.newAfter) {
			return true
		}
	}
	return false
}

// excusedEither is excused for a pair in either order: two fences whose
// calls may have overlapped.
func (s *FenceStore) excusedEither(a, b *FenceRecord) bool {
	return s.excused(a, b) || s.excused(b, a)
}

// WatchDataLoss tells s, until ctx ends, of every restart without data
// (KilledEmpty) that sched gives a node of c, with the tightest bounds it
// can prove. Every poll it reads the schedule's faults; while a node is
// KilledEmpty it dials the node's server directly (no proxy): a refused
// connection shows that the old process is gone (the kill came before) and
// that the new one is not listening yet (the restart comes after). So the
// loss is reported with oldBefore the end of the first refused dial and
// newAfter the start of the last one, and pairs of fences drawn while the
// node was down are not excused. If no dial was refused (the watcher was
// starved), the whole fault is reported, from the poll before it was seen
// to the poll that saw it over; and a gap between polls longer than the
// shortest KilledEmpty (sched's MaxTTL), in which one might have come and
// gone unseen, is reported as a loss too. Run it in its own goroutine.
func (s *FenceStore) WatchDataLoss(ctx context.Context, c *Cluster, sched *Schedule, poll time.Duration) {
	w := &lossWatch{s: s, c: c, poll: poll, eps: make([]lossEpisode, len(c.Nodes))}
	minDown := sched.opt.MaxTTL
	prev := time.Now()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			now := time.Now()
			for i := range w.eps {
				if w.eps[i].open {
					w.close(i, now)
				}
			}
			return
		case <-tick.C:
		}
		before := time.Now()
		faults := sched.Health().Faults()
		after := time.Now()
		if minDown > 0 && before.Sub(prev) >= minDown {
			s.DataLoss(after, prev, fmt.Sprintf("the watcher did not poll for %v", before.Sub(prev).Round(time.Millisecond)))
		}
		for i, f := range faults {
			w.saw(i, f, prev, after)
		}
		prev = before
	}
}

// A lossWatch is WatchDataLoss's record of each node's episode of being
// killed empty.
type lossWatch struct {
	s    *FenceStore
	c    *Cluster
	poll time.Duration
	eps  []lossEpisode
}

type lossEpisode struct {
	open                bool
	seenFrom            time.Time // the poll before the fault was seen
	firstDead, lastDead time.Time
}

// saw records node i's fault f, polled between prev and after: an episode
// opens with KilledEmpty, and closes, as a data loss, with any other.
func (w *lossWatch) saw(i int, f Fault, prev, after time.Time) {
	e := &w.eps[i]
	if f != KilledEmpty {
		if e.open {
			w.close(i, after)
		}
		return
	}
	if !e.open {
		*e = lossEpisode{open: true, seenFrom: prev}
	}
	if start, end, ok := w.dead(i); ok {
		if e.firstDead.IsZero() {
			e.firstDead = end
		}
		e.lastDead = start
	}
}

// dead reports whether node i refused a connection between start and end.
func (w *lossWatch) dead(i int) (start, end time.Time, ok bool) {
	start = time.Now()
	conn, err := net.DialTimeout("tcp", w.c.Nodes[i].Server.Addr, w.poll)
	end = time.Now()
	if err == nil {
		_ = conn.Close()
		return start, end, false
	}
	return start, end, errors.Is(err, syscall.ECONNREFUSED)
}

// close ends node i's episode at now, as a data loss over the time it was
// seen dead, or since the poll before it was seen when never.
func (w *lossWatch) close(i int, now time.Time) {
	e := &w.eps[i]
	what := fmt.Sprintf("node %d restarted empty", i)
	if e.firstDead.IsZero() {
		w.s.DataLoss(now, e.seenFrom, what+", never seen down")
	} else {
		w.s.DataLoss(e.firstDead, e.lastDead, what)
	}
	*e = lossEpisode{}
}
