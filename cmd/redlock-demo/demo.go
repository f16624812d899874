// The demo's run: contending workers, the timeline, the fault phases and the
// summary.

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlock-go/redlock"
)

const resource = "record:42"

// nodeTimeout is the per-master deadline: generous for masters on this
// machine or a LAN, and short enough that a stopped one costs little.
const nodeTimeout = 50 * time.Millisecond

// demo runs the workers and keeps the evidence: the record, how many held
// the lock at once, the waits and the failures.
type demo struct {
	o     options
	m     *masters
	c     *redlock.Client
	out   io.Writer
	start time.Time

	mu       sync.Mutex // guards out, waits, failures, record
	waits    []time.Duration
	failures map[string]int

	tl    *timeline    // -timeline; nil: none
	stats *masterStats // the operators' table: this phase's replies (-fault), or the run's
	total *masterStats // the run's, in -fault mode

	record      int // updated read-sleep-write under the lock: lost updates show overlap
	holders     atomic.Int32
	maxHolders  atomic.Int32
	waiting     atomic.Int32
	completions atomic.Int64
}

func newDemo(o options, m *masters, out io.Writer) (*demo, error) {
	start := time.Now()
	stats := newMasterStats(m.addrs)
	opts := []redlock.Option{redlock.WithObserver(stats.observer())}
	var tl *timeline
	if o.timeline != "" {
		tl = newTimeline(o.workers, m.addrs)
		tl.start = start
		opts = append(opts, redlock.WithObserver(tl.observer()))
	}
	c, err := newLockClient(m, o.ttl, opts...)
	if err != nil {
		return nil, err
	}
	return &demo{
		o: o, m: m, c: c, out: out, start: start, failures: map[string]int{},
		tl: tl, stats: stats, total: newMasterStats(m.addrs),
	}, nil
}

// newLockClient returns a redlock Client on the masters, with the demo's
// per-master deadline and short retry delays, and a restart guard as long
// as the demo's TTL (and any longer TTL the masters report), so that a
// master restarted empty sits out one TTL, not a minute.
func newLockClient(m *masters, ttl time.Duration, opts ...redlock.Option) (*redlock.Client, error) {
	return redlock.New(m.clients, append([]redlock.Option{
		redlock.WithNodeTimeout(nodeTimeout),
		redlock.WithRetryDelay(2*time.Millisecond, 50*time.Millisecond),
		redlock.WithRestartGuard(ttl),
	}, opts...)...)
}

func (d *demo) close() { _ = d.c.Close() }

func (d *demo) logf(format string, args ...any) {
	if d.o.quiet {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, "%7.3fs  ", time.Since(d.start).Seconds())
	fmt.Fprintf(d.out, format+"\n", args...)
}

// say prints a line even with -quiet: phase changes in -fault mode.
func (d *demo) say(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, "%7.3fs  == ", time.Since(d.start).Seconds())
	fmt.Fprintf(d.out, format+"\n", args...)
}

// runFor runs the workers until ctx ends or for dur.
func (d *demo) runFor(ctx context.Context, dur time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	var wg sync.WaitGroup
	for w := 1; w <= d.o.workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if d.o.parallel {
					d.updateUnlocked(w)
				} else {
					d.updateLocked(ctx, w)
				}
			}
		}()
	}
	wg.Wait()
	return nil
}

// updateLocked is one worker's turn: wait for the lock, update the record,
// release.
func (d *demo) updateLocked(ctx context.Context, w int) {
	waitCtx, cancel := context.WithTimeout(withWorker(ctx, w), d.o.wait)
	defer cancel()
	t0 := time.Now()
	d.waiting.Add(1)
	l, err := d.c.Lock(waitCtx, resource, d.o.ttl)
	d.waiting.Add(-1)
	waited := time.Since(t0)
	if err != nil {
		if ctx.Err() != nil {
			return // the demo is over, not a failure
		}
		d.tl.span(w-1, tlGaveUp, t0, time.Now())
		cause := failureCause(err, len(d.m.clients))
		d.fail(cause)
		d.logf("worker %2d  gave up after %v: %s", w, waited.Round(time.Millisecond), cause)
		return
	}
	d.mu.Lock()
	d.waits = append(d.waits, waited)
	d.mu.Unlock()
	d.logf("worker %2d  holds    waited %-8v validity left %-8v (%d waiting)",
		w, waited.Round(100*time.Microsecond), time.Until(l.Until()).Round(time.Millisecond), d.waiting.Load())

	got := time.Now()
	d.tl.span(w-1, tlWait, t0, got)
	held, _ := d.work()

	// Logged before Unlock, so that the next holder's line cannot come first.
	d.logf("worker %2d  releases held %v", w, held.Round(100*time.Microsecond))
	kind, released := tlHold, time.Now()
	if err := l.Unlock(context.Background()); err != nil {
		d.fail("unlock: " + failureCause(err, len(d.m.clients)))
		d.logf("worker %2d  UNLOCK FAILED: %v", w, err)
		kind = tlLost
	}
	d.tl.span(w-1, kind, got, released)
}

// updateUnlocked is the same work with no lock at all.
func (d *demo) updateUnlocked(w int) {
	t0 := time.Now()
	held, inside := d.work()
	d.tl.span(w-1, tlHold, t0, time.Now())
	d.logf("worker %2d  updated  in %v; %d workers were inside when it began", w, held.Round(100*time.Microsecond), inside)
}

// work reads the record, works on it for the hold time, and writes it back:
// two workers inside at once lose an update. It returns how long that took
// and how many workers, itself included, were inside when it began.
func (d *demo) work() (held time.Duration, inside int32) {
	t0 := time.Now()
	n := d.holders.Add(1)
	for {
		if old := d.maxHolders.Load(); n <= old || d.maxHolders.CompareAndSwap(old, n) {
			break
		}
	}
	d.mu.Lock()
	v := d.record
	d.mu.Unlock()
	time.Sleep(d.o.hold) // the work itself
	d.mu.Lock()
	d.record = v + 1
	d.mu.Unlock()
	d.holders.Add(-1)
	d.completions.Add(1)
	return time.Since(t0), n
}

func (d *demo) fail(cause string) {
	d.mu.Lock()
	d.failures[cause]++
	d.mu.Unlock()
}

// failureCause names why a lock operation over n masters failed, for the
// timeline and the summary.
func failureCause(err error, n int) string {
	var qe *redlock.QuorumError
	if errors.Is(err, redlock.ErrNotHeld) {
		return "lock lost before release"
	}
	if !errors.As(err, &qe) {
		if errors.Is(err, context.DeadlineExceeded) {
			return "contended: wait timed out" // before an attempt could start
		}
		return err.Error()
	}
	// An attempt is decided as soon as a majority is out of reach, so it
	// may count only some of the masters that are down. It was contention
	// when refusals alone ruled out a majority, or when nothing but
	// refusals and our own wait's end went wrong.
	down, refused := 0, 0
	for _, ne := range qe.Nodes {
		switch {
		case errors.Is(ne, redlock.ErrNodeRefused):
			refused++
		case !errors.Is(ne, context.DeadlineExceeded) && !errors.Is(ne, context.Canceled):
			down++
		}
	}
	if down == 0 || refused > n-qe.Quorum {
		return "contended: wait timed out"
	}
	return "majority unreachable: masters failing"
}

// runFaults stops one, two, then three embedded masters, a phase each, and
// then brings them all back.
func (d *demo) runFaults(ctx context.Context) error {
	n := d.m.embedded.Len()
	quorum := n/2 + 1
	// phase runs one: what tells it, label names it on the timeline.
	phase := func(what string, label ...string) error {
		d.say("%s", what)
		d.tl.phase(what, label...)
		err := d.runFor(ctx, d.o.duration)
		rows := d.stats.take()
		d.total.add(rows)
		d.mu.Lock()
		fmt.Fprintf(d.out, "          the masters in this phase:\n")
		d.stats.print(d.out, "          ", rows)
		d.mu.Unlock()
		return err
	}
	if err := phase(fmt.Sprintf("all %d masters up", n), fmt.Sprintf("all %d up", n), fmt.Sprintf("quorum %d", quorum)); err != nil {
		return err
	}
	for down := 1; down <= n-quorum+1 && ctx.Err() == nil; down++ {
		d.m.stop(down - 1)
		d.tl.masterDown(down - 1)
		up := n - down
		expect, state := "the lock keeps working", fmt.Sprintf("%d of %d up", up, n)
		if up < quorum {
			expect, state = "no majority: every attempt must fail cleanly", state+": no majority"
		}
		if err := phase(fmt.Sprintf("master %d (%s) stopped: %d of %d up, quorum %d: %s",
			down, d.m.addrs[down-1], up, n, quorum, expect), mastersUpTo(down)+" down", state); err != nil {
			return err
		}
	}
	for i := 0; i < n-quorum+1; i++ {
		d.m.startEmpty(i)
		d.tl.masterUp(i)
	}
	return phase(fmt.Sprintf("all masters restarted, %d of them empty: those sit out the restart guard (the TTL, %v), then the lock recovers", n-quorum+1, d.o.ttl),
		mastersUpTo(n-quorum+1)+" restarted", fmt.Sprintf("restart guard: %v", d.o.ttl))
}

// mastersUpTo names masters 1 to k, for a phase's label.
func mastersUpTo(k int) string {
	if k == 1 {
		return "master 1"
	}
	return fmt.Sprintf("masters 1–%d", k)
}

func (d *demo) summary() {
	d.mu.Lock()
	defer d.mu.Unlock()
	w := d.out
	fmt.Fprintf(w, "\nsummary\n")
	fmt.Fprintf(w, "  updates completed:        %d\n", d.completions.Load())
	fmt.Fprintf(w, "  record value:             %d (lost updates: %d)\n", d.record, d.completions.Load()-int64(d.record))
	fmt.Fprintf(w, "  max concurrent holders:   %d\n", d.maxHolders.Load())
	if !d.o.parallel {
		fmt.Fprintf(w, "  acquisitions:             %d\n", len(d.waits))
		if len(d.waits) > 0 {
			s := slices.Clone(d.waits)
			slices.Sort(s)
			fmt.Fprintf(w, "  wait p50 / p99 / max:     %v / %v / %v\n",
				pct(s, 50).Round(100*time.Microsecond), pct(s, 99).Round(100*time.Microsecond), s[len(s)-1].Round(100*time.Microsecond))
		}
		fmt.Fprintf(w, "  failures:                 %d\n", sum(d.failures))
		causes := make([]string, 0, len(d.failures))
		for c := range d.failures {
			causes = append(causes, c)
		}
		slices.Sort(causes)
		for _, c := range causes {
			fmt.Fprintf(w, "    %-46s %d\n", c, d.failures[c])
		}
	}
	rows := d.stats.take()
	if d.o.fault {
		d.total.add(rows)
		rows = d.total.take()
	}
	if !d.o.parallel {
		fmt.Fprintf(w, "  the masters (replies to this Client; p50/p99: reply latency):\n")
		d.stats.print(w, "    ", rows)
	}
	if d.maxHolders.Load() > 1 {
		fmt.Fprintf(w, "  MUTUAL EXCLUSION VIOLATED: %d workers were inside at once\n", d.maxHolders.Load())
	} else {
		fmt.Fprintf(w, "  mutual exclusion held: never more than one worker inside\n")
	}
}

// pct returns the p-th percentile of sorted (nearest rank).
func pct(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	return sorted[max(i-1, 0)]
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
