package core

import (
	"testing"
	"time"
)

// all is a subscription confirmed on every one of n masters.
func all(n int) []bool {
	s := make([]bool, n)
	for i := range s {
		s[i] = true
	}
	return s
}

// TestLineWithdrawnWantGetsNoHandOff (W1): a withdrawn want is over; its
// late copy does not put it back, and no hand-off goes to it.
func TestLineWithdrawnWantGetsNoHandOff(t *testing.T) {
	var l Line
	l.Heard("b", "tb", time.Second, t0, all(3), 3)
	l.Heard("b", "tb", 0, t0.Add(time.Millisecond), all(3), 3)
	if w := l.Claim(t0.Add(2*time.Millisecond), time.Time{}, 2); w != nil {
		t.Fatalf("a withdrawn want was handed the key: %+v", w)
	}
	l.Heard("b", "tb", time.Second, t0.Add(3*time.Millisecond), all(3), 3) // a late copy
	if w := l.Claim(t0.Add(4*time.Millisecond), time.Time{}, 2); w != nil {
		t.Fatalf("a late copy of a withdrawn want was handed the key: %+v", w)
	}
	l.Heard("c", "tc", time.Second, t0, all(3), 3)
	if w := l.Claim(t0.Add(time.Millisecond), time.Time{}, 2); w == nil || w.Token != "tc" {
		t.Fatalf("Claim = %+v, want tc's", w)
	}
	if w := l.Claim(t0.Add(time.Millisecond), time.Time{}, 2); w != nil {
		t.Fatalf("a served want was handed the key again: %+v", w)
	}
}

// TestLineDoubtfulWantIsPassedOver (W2): a want a quorum of masters may
// have missed notices of gets no hand-off until it is heard again.
func TestLineDoubtfulWantIsPassedOver(t *testing.T) {
	var l Line
	l.Heard("b", "tb", time.Second, t0, all(3), 3)
	l.Deaf(0)
	if l.Wants[0].Doubtful(2) {
		t.Fatal("a want one master of three may have missed is doubtful")
	}
	l.Deaf(1)
	if w := l.Claim(t0, time.Time{}, 2); w != nil {
		t.Fatalf("a want a quorum may have missed was handed the key: %+v", w)
	}
	l.Heard("b", "tb", time.Second, t0.Add(time.Millisecond), all(3), 3)
	if w := l.Claim(t0.Add(time.Millisecond), time.Time{}, 2); w == nil {
		t.Fatal("a want heard again is still passed over")
	}
}

// TestLineOrder (W3): the want heard first is served first; a repetition
// keeps its place; a stale want and one after since are not served.
func TestLineOrder(t *testing.T) {
	var l Line
	l.Heard("b", "tb", time.Second, t0, all(3), 3)
	l.Heard("c", "tc", time.Second, t0.Add(time.Millisecond), all(3), 3)
	l.Heard("b", "tb", time.Second, t0.Add(2*time.Millisecond), all(3), 3) // a repetition
	if w := l.Claim(t0.Add(3*time.Millisecond), t0.Add(time.Millisecond/2), 2); w != nil && w.Token != "tb" {
		t.Fatalf("Claim = %s, want tb, first in line", w.Token)
	}
	if w := l.Claim(t0.Add(3*time.Millisecond), t0.Add(time.Millisecond/2), 2); w != nil {
		t.Fatalf("tc, heard after the local waiter came, was served before it: %+v", w)
	}
	if w := l.Claim(t0.Add(WantFresh+2*time.Millisecond), time.Time{}, 2); w != nil {
		t.Fatalf("a want not repeated for WantFresh was served: %+v", w)
	}
}

// TestLineWithdrawalOfAnOlderToken (W4): a Client's newer want outlives
// the withdrawal of its older token.
func TestLineWithdrawalOfAnOlderToken(t *testing.T) {
	var l Line
	l.Heard("b", "old", time.Second, t0, all(3), 3)
	l.Heard("b", "new", time.Second, t0.Add(time.Millisecond), all(3), 3)
	l.Heard("b", "old", 0, t0.Add(2*time.Millisecond), all(3), 3)
	if w := l.Claim(t0.Add(3*time.Millisecond), time.Time{}, 2); w == nil || w.Token != "new" {
		t.Fatalf("Claim = %+v, want b's newer want", w)
	}
}

// TestExpectedCountsOnlyTokensItWaitsOn (W5): a notice counts for a token
// still expected, each master once; the count reaches a quorum once.
func TestExpectedCountsOnlyTokensItWaitsOn(t *testing.T) {
	var e Expected[string]
	if _, ok, _ := e.From("t", 0, 2); ok {
		t.Fatal("a notice counted for a token never expected")
	}
	e.Expect("t", 3, "x")
	if v, ok, reached := e.From("t", 0, 2); !ok || reached || v != "x" {
		t.Fatalf("first notice: %q %v %v", v, ok, reached)
	}
	if _, _, reached := e.From("t", 0, 2); reached {
		t.Fatal("a master counted twice reached the quorum")
	}
	if _, _, reached := e.From("t", 2, 2); !reached {
		t.Fatal("two masters of three did not reach the quorum")
	}
	if heard := e.Unexpect("t"); len(heard) != 3 || !heard[0] || heard[1] || !heard[2] {
		t.Fatalf("Unexpect = %v, want masters 0 and 2", heard)
	}
	if _, ok, _ := e.From("t", 1, 2); ok {
		t.Fatal("a notice counted for a token no longer expected")
	}
	if e.Count("t") != 0 || e.Len() != 0 {
		t.Fatalf("after Unexpect: count %d, len %d", e.Count("t"), e.Len())
	}
}
