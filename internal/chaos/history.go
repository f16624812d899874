// History: every holder's validity window and the overlap check, plus the
// read-sleep-write counter invariant.

package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A History records every successful acquisition's validity window on the
// one process clock and finds overlaps. All clients of a test run in one
// process, so the windows of different holders are directly comparable and
// the check is exact: a holder's window is [acquire returned, min(validity
// end, Unlock called)], and two windows on the same key that intersect mean
// two holders believed they held the lock at once.
//
// A History also keeps the counter invariant: Section does a read, sleep,
// write increment of its key's counter inside the window, which loses an
// update whenever two sections interleave.
type History struct {
	origin time.Time

	mu     sync.Mutex
	holds  []*Hold
	events []event

	counters  sync.Map // key → *atomic.Int64
	completed atomic.Int64
}

type event struct {
	at   time.Duration
	key  string // "" for an event of the whole cluster, such as a fault
	what string
}

// A Hold is one holder's window.
type Hold struct {
	h      *History
	holder string
	key    string
	token  string
	start  time.Time

	mu       sync.Mutex
	until    time.Time // validity end, moved by extensions
	released time.Time // when Unlock was called; zero until then
}

// NewHistory starts an empty history; times print relative to now.
func NewHistory() *History { return &History{origin: time.Now()} }

// Note records a fault or other event, printed with the history.
func (h *History) Note(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, event{at: time.Since(h.origin), what: fmt.Sprintf(format, args...)})
}

// NoteKey records an event about one key, printed with the history and
// with Excerpts of that key.
func (h *History) NoteKey(key, format string, args ...any) {
	e := event{at: time.Since(h.origin), key: key, what: fmt.Sprintf(format, args...)}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, e)
}

// Acquired records that holder obtained key with token, valid until until.
// Call it right after the acquire call returned: the window starts now.
func (h *History) Acquired(holder, key, token string, until time.Time) *Hold {
	x := &Hold{h: h, holder: holder, key: key, token: token, start: time.Now(), until: until}
	h.mu.Lock()
	h.holds = append(h.holds, x)
	h.mu.Unlock()
	return x
}

// Extended records a successful extension to until.
func (x *Hold) Extended(until time.Time) {
	x.mu.Lock()
	x.until = until
	x.mu.Unlock()
}

// Told records the validity end until that the holder learned at time
// at (Until read after an Extend returned, whatever it returned): the
// window now runs to until. An end already past when the holder learned it
// (the lock was found lost) ends the window at at instead, unless it ended
// earlier: until then the holder acted on what it had been told before.
func (x *Hold) Told(until, at time.Time) {
	x.mu.Lock()
	switch {
	case !until.Before(at):
		x.until = until
	case at.Before(x.until):
		x.until = at
	}
	x.mu.Unlock()
}

// Releasing records that Unlock is about to be called: the window ends now
// if it has not already.
func (x *Hold) Releasing() {
	x.mu.Lock()
	if x.released.IsZero() {
		x.released = time.Now()
	}
	x.mu.Unlock()
}

// ReleasingBy records that the holder stopped trusting the lock now, or at
// end if that came first (the lock's validity end, which the holder learns
// of a scheduling delay later): the window ends then, if it has not
// already.
func (x *Hold) ReleasingBy(end time.Time) {
	x.mu.Lock()
	if x.released.IsZero() {
		x.released = time.Now()
		if end.Before(x.released) {
			x.released = end
		}
	}
	x.mu.Unlock()
}

// End is the end of the window: the validity end or the release, whichever
// came first.
func (x *Hold) End() time.Time {
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.released.IsZero() && x.released.Before(x.until) {
		return x.released
	}
	return x.until
}

// Section is the critical section of the counter invariant: read the shared
// counter, sleep for work, write it back plus one — but only while the
// window is still open, as a careful holder would. It reports whether the
// write happened (the section completed).
func (x *Hold) Section(work time.Duration) bool {
	counter := x.h.counter(x.key)
	v := counter.Load()
	time.Sleep(work) // the work itself, not synchronisation
	if !time.Now().Before(x.End()) {
		return false
	}
	counter.Store(v + 1)
	x.h.completed.Add(1)
	return true
}

// counter is key's counter.
func (h *History) counter(key string) *atomic.Int64 {
	c, _ := h.counters.LoadOrStore(key, new(atomic.Int64))
	return c.(*atomic.Int64)
}

// SectionWhile is Section for a holder that learns the end of its window
// from done (a Do's fn context) rather than from a validity end: it does
// not write once done is closed.
func (x *Hold) SectionWhile(done <-chan struct{}, work time.Duration) bool {
	select {
	case <-done:
		return false
	default:
	}
	counter := x.h.counter(x.key)
	v := counter.Load()
	time.Sleep(work) // the work itself, not synchronisation
	select {
	case <-done:
		return false
	default:
	}
	if !time.Now().Before(x.End()) {
		return false
	}
	counter.Store(v + 1)
	x.h.completed.Add(1)
	return true
}

// An Overlap is two windows on one key that intersect.
type Overlap struct {
	Key         string
	First, Then string // "holder token [start, end]" of each
	By          time.Duration
	At          time.Time // when the later window started
}

func (o Overlap) String() string {
	return fmt.Sprintf("key %q: %s overlaps %s by %v", o.Key, o.Then, o.First, o.By)
}

// Overlaps sweeps the windows of each key in order of start and returns
// every window that starts before an earlier one ended.
func (h *History) Overlaps() []Overlap {
	type win struct {
		x          *Hold
		start, end time.Time
	}
	h.mu.Lock()
	byKey := map[string][]win{}
	for _, x := range h.holds {
		byKey[x.key] = append(byKey[x.key], win{x, x.start, x.End()})
	}
	h.mu.Unlock()

	var out []Overlap
	for key, ws := range byKey {
		slices.SortFunc(ws, func(a, b win) int { return a.start.Compare(b.start) })
		var open *win // the window, among those started so far, that ends last
		for i := range ws {
			w := &ws[i]
			if !w.end.After(w.start) {
				continue // empty: validity had ended when acquire returned
			}
			if open != nil && w.start.Before(open.end) {
				out = append(out, Overlap{Key: key, First: h.describe(open.x), Then: h.describe(w.x), By: open.end.Sub(w.start), At: w.start})
			}
			if open == nil || w.end.After(open.end) {
				open = w
			}
		}
	}
	return out
}

// Acquisitions is how many windows were recorded.
func (h *History) Acquisitions() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.holds)
}

// Counter returns the sum of the keys' counters and the number of
// completed sections; they are equal unless two sections on a key
// interleaved.
func (h *History) Counter() (value, completed int64) {
	h.counters.Range(func(_, c any) bool {
		value += c.(*atomic.Int64).Load()
		return true
	})
	return value, h.completed.Load()
}

func (h *History) describe(x *Hold) string {
	return fmt.Sprintf("%s (token %.8s) [%v, %v]", x.holder, x.token, x.start.Sub(h.origin), x.End().Sub(h.origin))
}

// String prints the history: every window and event in time order.
func (h *History) String() string {
	return h.excerpt(func(string, time.Duration, time.Duration) bool { return true })
}

// Excerpt prints, in time order, the windows on key that intersect
// [from, to], and the events of key and of the whole cluster in that span:
// the part of a long history that explains a failure there.
func (h *History) Excerpt(key string, from, to time.Time) string {
	lo, hi := from.Sub(h.origin), to.Sub(h.origin)
	return h.excerpt(func(k string, start, end time.Duration) bool {
		return (k == "" || k == key) && start <= hi && end >= lo
	})
}

// excerpt prints the windows and events for which keep (key, start, end)
// holds; an event is an instant.
func (h *History) excerpt(keep func(key string, start, end time.Duration) bool) string {
	h.mu.Lock()
	var lines []event
	for _, e := range h.events {
		if keep(e.key, e.at, e.at) {
			lines = append(lines, e)
		}
	}
	holds := slices.Clone(h.holds)
	h.mu.Unlock()
	for _, x := range holds {
		start, end := x.start.Sub(h.origin), x.End().Sub(h.origin)
		if keep(x.key, start, end) {
			lines = append(lines, event{at: start, what: "hold " + h.describe(x) + " key " + x.key})
		}
	}
	slices.SortStableFunc(lines, func(a, b event) int { return cmp.Compare(a.at, b.at) })
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "%12v  %s\n", l.at.Round(time.Microsecond), l.what)
	}
	return b.String()
}
