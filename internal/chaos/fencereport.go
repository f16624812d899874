// The fence store's reports: its statistics, its violations and its
// excerpts of the history, as text.

package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// FenceStats is what a FenceStore saw.
type FenceStats struct {
	Keys, Fences          int // distinct keys and holders with a fence
	Writes, Accepted      int
	Refused, RefusedStale int // RefusedStale: refused after the holder's validity ended
	// Ordered pairs of fences (A's Fence returned before B's began)
	// checked, and how many a data loss excused; and of those the
	// successive ones, A the last fence returned before B's began.
	Pairs, Excused                int
	Successive, SuccessiveExcused int
	Losses                        int
}

func (s FenceStats) String() string {
	return fmt.Sprintf("%d fences on %d keys; %d writes: %d accepted, %d refused (%d of holders past their validity); "+
		"%d successive pairs checked (%d excused), %d ordered pairs in all (%d excused), %d data losses",
		s.Fences, s.Keys, s.Writes, s.Accepted, s.Refused, s.RefusedStale, s.Successive, s.SuccessiveExcused, s.Pairs, s.Excused, s.Losses)
}

// Stats returns what the store saw and how many pairs Check examines.
func (s *FenceStore) Stats() FenceStats {
	_, st := s.check()
	return st
}

// Report is Check's violations, at most limit of them, each with the part
// of the store's history that shows it; "" when there are none.
func (s *FenceStore) Report(limit int) string {
	vs := s.Check()
	if len(vs) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d fence violations\n", len(vs))
	for i, v := range vs {
		if i == limit {
			fmt.Fprintf(&b, "… and %d more\n", len(vs)-limit)
			break
		}
		from := v.At
		for _, r := range []FenceRecord{v.First, v.Then} {
			if !r.Acquiring.IsZero() && r.Acquiring.Before(from) {
				from = r.Acquiring
			}
		}
		fmt.Fprintf(&b, "%s (%s)\nthe store's history of %q from then:\n%s", v.Msg, v.Kind, v.Key, s.Excerpt(v.Key, from, v.At))
	}
	return b.String()
}

// describe prints a record: holder, fence and its times.
func (s *FenceStore) describe(r *FenceRecord) string {
	return fmt.Sprintf("%s [acquiring %v, acquired %v, Fence %v → %v]", r.Holder, s.at(r.Acquiring), s.at(r.Acquired), s.at(r.Asked), s.at(r.Got))
}

func (s *FenceStore) at(t time.Time) time.Duration {
	if t.IsZero() {
		return 0
	}
	return t.Sub(s.origin).Round(time.Microsecond)
}

// String prints every fence and write, in time order.
func (s *FenceStore) String() string {
	return s.excerpt(func(string, time.Time, time.Time) bool { return true })
}

// Excerpt prints, in time order, the fences of key whose acquisition to
// Fence span meets [from, to], the writes to key in it, and the data losses
// around it.
func (s *FenceStore) Excerpt(key string, from, to time.Time) string {
	return s.excerpt(func(k string, start, end time.Time) bool {
		return (k == "" || k == key) && !start.After(to) && !end.Before(from)
	})
}

func (s *FenceStore) excerpt(keep func(key string, start, end time.Time) bool) string {
	type line struct {
		at   time.Time
		what string
	}
	var lines []line
	s.mu.Lock()
	for _, r := range s.records {
		if keep(r.Key, r.Acquiring, r.Got) {
			lines = append(lines, line{r.Got, fmt.Sprintf("fence %d: %s key %s", r.Fence, s.describe(r), r.Key)})
		}
	}
	for _, w := range s.writes {
		if !keep(w.Key, w.At, w.At) {
			continue
		}
		what := "accepted"
		if !w.Accepted {
			what = fmt.Sprintf("REFUSED (highest %d by %s)", w.Top, w.TopHolder)
		}
		valid := "valid"
		if !w.Valid() {
			valid = fmt.Sprintf("validity ended at %v", s.at(w.Until))
		}
		lines = append(lines, line{w.At, fmt.Sprintf("write fence %d by %s (%s): %s, key %s", w.Fence, w.Holder, valid, what, w.Key)})
	}
	for _, l := range s.losses {
		lo, hi := l.oldBefore, l.newAfter
		if hi.Before(lo) {
			lo, hi = hi, lo
		}
		if keep("", lo, hi) {
			lines = append(lines, line{lo, fmt.Sprintf("data loss (%s): old data until %v, new from %v", l.what, s.at(l.oldBefore), s.at(l.newAfter))})
		}
	}
	s.mu.Unlock()
	slices.SortStableFunc(lines, func(a, b line) int { return a.at.Compare(b.at) })
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "%12v  %s\n", s.at(l.at), l.what)
	}
	return b.String()
}

func slicesSortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, cmp.Compare[string])
	return keys
}
