// Tally: operations counted by kind and outcome.

package chaos

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

// A Tally counts operations by kind and outcome, so that a randomized test
// can show which paths it exercised and fail when one never succeeded. It
// is safe for concurrent use.
type Tally struct {
	mu     sync.Mutex
	kinds  []string // in order of first use
	counts map[string]map[string]int64
}

// Add counts one operation of kind that ended with outcome.
func (t *Tally) Add(kind, outcome string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.counts == nil {
		t.counts = map[string]map[string]int64{}
	}
	m := t.counts[kind]
	if m == nil {
		m = map[string]int64{}
		t.counts[kind] = m
		t.kinds = append(t.kinds, kind)
	}
	m[outcome]++
}

// Count is how many operations of kind ended with outcome.
func (t *Tally) Count(kind, outcome string) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.counts[kind][outcome]
}

// Calls is how many operations of kind were counted.
func (t *Tally) Calls(kind string) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var n int64
	for _, c := range t.counts[kind] {
		n += c
	}
	return n
}

// String prints one line per kind: its calls, then each outcome's count,
// most frequent first.
func (t *Tally) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	for _, k := range t.kinds {
		type oc struct {
			name string
			n    int64
		}
		var ocs []oc
		var calls int64
		for name, n := range t.counts[k] {
			ocs = append(ocs, oc{name, n})
			calls += n
		}
		slices.SortFunc(ocs, func(a, b oc) int {
			if a.n != b.n {
				return int(b.n - a.n)
			}
			return strings.Compare(a.name, b.name)
		})
		fmt.Fprintf(&b, "%-22s %7d", k, calls)
		for _, o := range ocs {
			fmt.Fprintf(&b, "  %s %d", o.name, o.n)
		}
		b.WriteByte('\n')
	}
	return b.String()
}
