package core

import (
	"testing"
	"time"
)

var t0 = time.Unix(1000, 0)

func yes(node int, age time.Duration) Vote {
	return Vote{Node: node, Yes: true, Mem: Memory{Reported: true, Age: age}, At: t0}
}

func no(node int, age time.Duration) Vote {
	return Vote{Node: node, Mem: Memory{Reported: true, Age: age}, At: t0}
}

// I4: the reports a young yes needs share two masters with any majority.
func TestWitnessed(t *testing.T) {
	for n, want := range map[int]int{1: 1, 2: 2, 3: 3, 4: 3, 5: 4, 6: 4, 7: 5, 9: 6} {
		got := Witnessed(n)
		if got != want {
			t.Errorf("Witnessed(%d) = %d, want %d", n, got, want)
		}
		if n > 1 && got+Quorum(n)-n < 2 {
			t.Errorf("Witnessed(%d) = %d shares fewer than two masters with a majority", n, got)
		}
	}
}

// I1: a majority wins; more than n − quorum failures lose.
func TestTallyMajority(t *testing.T) {
	tl := NewTally(5, false, false, time.Second)
	for i := range 2 {
		tl.Count(Vote{Node: i, Yes: true, At: t0}, 0)
	}
	if tl.Decided() {
		t.Fatal("decided on 2 of 5 yes votes")
	}
	tl.Count(Vote{Node: 2, Yes: true, At: t0}, 0)
	if !tl.Won() || !tl.Decided() {
		t.Fatal("3 of 5 yes votes did not win")
	}
	lost := NewTally(5, false, false, time.Second)
	lost.Count(Vote{Node: 0, At: t0}, 0)
	lost.Count(Vote{Node: 1, Err: true, At: t0}, 0)
	lost.Fail()
	if !lost.Decided() || lost.Won() {
		t.Fatal("3 of 5 failures did not lose")
	}
}

// I2: validity counts from the round's start, and none is left after ttl − drift.
func TestLease(t *testing.T) {
	ttl := time.Second
	until, ok := Lease(true, t0, t0.Add(100*time.Millisecond), ttl, 0.01)
	if !ok || !until.Equal(t0.Add(ttl-Drift(ttl, 0.01))) {
		t.Fatalf("Lease = %v, %v; want start + ttl − drift", until, ok)
	}
	if _, ok := Lease(true, t0, t0.Add(ttl), ttl, 0.01); ok {
		t.Fatal("a lease with no validity left")
	}
	if _, ok := Lease(false, t0, t0, ttl, 0.01); ok {
		t.Fatal("a lease for a lost round")
	}
}

// I3, I4, I5: a young yes is quarantined by an older report, counts once
// Witnessed(n) masters reported (all, when strict) unless a master known to
// be older has not reported, and does not count when the round ends first.
func TestTallyGuard(t *testing.T) {
	const g = time.Minute
	old, young := time.Hour, time.Second
	cases := []struct {
		name   string
		strict bool
		known  []time.Time
		votes  []Vote
		won    bool
		kinds  []Kind // of the outcomes after End
	}{
		{"witness", false, nil, []Vote{yes(0, young), yes(1, old), yes(2, old)}, false, []Kind{Quarantined}},
		{"fresh, a majority reported", false, nil, []Vote{yes(0, young), yes(1, young), yes(2, young)}, false, []Kind{Unknown, Unknown, Unknown}},
		{"fresh, Witnessed reported", false, nil, []Vote{yes(0, young), yes(1, young), no(3, young), yes(2, young)}, true, []Kind{Refused}},
		{"strict waits for all", true, nil, []Vote{yes(0, young), yes(1, young), yes(2, young)}, false, []Kind{Unknown, Unknown, Unknown}},
		{"a known older master yet to report", false, []time.Time{{}, {}, {}, t0.Add(-old), {}},
			[]Vote{yes(0, young), yes(1, young), yes(2, young)}, false, []Kind{Unknown, Unknown, Unknown}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tl := NewTally(5, true, tc.strict, time.Second)
			for i, k := range tc.known {
				if !k.IsZero() {
					tl.Know(i, k)
				}
			}
			var kinds []Kind
			for _, v := range tc.votes {
				for _, o := range tl.Count(v, g) {
					kinds = append(kinds, o.Kind)
				}
			}
			for _, o := range tl.End() {
				kinds = append(kinds, o.Kind)
			}
			if tl.Won() != tc.won || len(kinds) != len(tc.kinds) {
				t.Fatalf("won %v, outcomes %v; want %v, %v", tl.Won(), kinds, tc.won, tc.kinds)
			}
			for i := range kinds {
				if kinds[i] != tc.kinds[i] {
					t.Fatalf("outcomes %v, want %v", kinds, tc.kinds)
				}
			}
		})
	}
}

// I6: an extension moves the end only later, only when decided in time.
func TestExtendVerdict(t *testing.T) {
	ttl, f := 10*time.Second, 0.01
	until := t0.Add(5 * time.Second)
	later := ValidUntil(t0, ttl, f)
	cases := []struct {
		name    string
		until   time.Time
		won     bool
		refused int
		decided time.Time
		ttl     time.Duration
		end     time.Time
		v       Extension
	}{
		{"won in time, longer", until, true, 0, t0.Add(time.Second), ttl, later, Extended},
		{"won in time, shorter", until, true, 0, t0.Add(100 * time.Millisecond), time.Second, until, Extended},
		{"won after the end", until, true, 0, until, ttl, until, Lost},
		{"a majority refused", until, false, 3, t0.Add(time.Second), ttl, t0.Add(time.Second), Lost},
		{"undecided", until, false, 1, t0.Add(time.Second), ttl, until, Undecided},
	}
	for _, tc := range cases {
		end, v := Extend(tc.until, tc.won, tc.refused, 5, t0, tc.decided, tc.ttl, f)
		if !end.Equal(tc.end) || v != tc.v {
			t.Errorf("%s: %v, %v; want %v, %v", tc.name, end, v, tc.end, tc.v)
		}
	}
}

// TestNeedsWitnesses (I4): an extension asks the masters that refused the
// lock only when some did, and fewer than Witnessed(n) are known to hold
// the key.
func TestNeedsWitnesses(t *testing.T) {
	for _, c := range []struct {
		refused, known, n int
		want              bool
	}{
		{0, 3, 5, false}, {2, 3, 5, true}, {1, 4, 5, false}, {1, 2, 3, true}, {3, 0, 3, true}, {0, 0, 3, false},
	} {
		if got := NeedsWitnesses(c.refused, c.known, c.n); got != c.want {
			t.Errorf("NeedsWitnesses(%d, %d, %d) = %v, want %v", c.refused, c.known, c.n, got, c.want)
		}
	}
}

// TestReleased (I7): an Unlock proves the lock held to its end only with a
// round won and decided before the end.
func TestReleased(t *testing.T) {
	end := t0.Add(time.Second)
	for _, c := range []struct {
		won     bool
		decided time.Time
		want    bool
	}{
		{true, t0, true}, {false, t0, false}, {true, end, false}, {true, end.Add(time.Millisecond), false},
	} {
		if got := Released(c.won, c.decided, end); got != c.want {
			t.Errorf("Released(%v, %v, end) = %v, want %v", c.won, c.decided.Sub(end), got, c.want)
		}
	}
}

// I8: a handed lock is valid from its want's first announcement, not from
// when the notices came; with less than half its ttl left, it is confirmed.
func TestHanded(t *testing.T) {
	ttl := time.Second
	until, confirm := Handed(t0, t0.Add(100*time.Millisecond), ttl, 0.01)
	if confirm || !until.Equal(ValidUntil(t0, ttl, 0.01)) {
		t.Fatalf("Handed 100 ms after the want = %v, %v; want the want's start + ttl − drift", until, confirm)
	}
	if _, confirm := Handed(t0, t0.Add(ttl/2), ttl, 0.01); !confirm {
		t.Fatal("a handed lock with less than half its ttl left is not confirmed")
	}
	if _, confirm := Handed(t0, t0.Add(2*ttl), ttl, 0.01); !confirm {
		t.Fatal("a handed lock whose want's ttl is over is not confirmed")
	}
}
