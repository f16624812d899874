package engine

import (
	"math"
	"testing"
	"time"
)

func TestDrift(t *testing.T) {
	for _, tc := range []struct {
		ttl    time.Duration
		factor float64
		want   time.Duration
	}{
		{10 * time.Second, 0.01, 100*time.Millisecond + 2*time.Millisecond},
		{time.Second, 0.01, 10*time.Millisecond + 2*time.Millisecond},
		{time.Second, 0, 2 * time.Millisecond},
		{0, 0.01, 2 * time.Millisecond},
		{math.MaxInt64, 0.9999999999999999, math.MaxInt64}, // saturates, does not wrap
	} {
		if got := drift(tc.ttl, tc.factor); got != tc.want {
			t.Errorf("drift(%v, %v) = %v, want %v", tc.ttl, tc.factor, got, tc.want)
		}
	}
}

func TestValidity(t *testing.T) {
	for _, tc := range []struct {
		ttl, elapsed time.Duration
		want         time.Duration
	}{
		{10 * time.Second, 0, 10*time.Second - 102*time.Millisecond},
		{10 * time.Second, 50 * time.Millisecond, 10*time.Second - 152*time.Millisecond},
		{time.Second, 988 * time.Millisecond, 0}, // exactly used up: not valid
		{time.Second, 2 * time.Second, -time.Second - 12*time.Millisecond},
		{2 * time.Millisecond, 0, -20 * time.Microsecond},
		{0, math.MaxInt64, math.MinInt64}, // saturates instead of wrapping
	} {
		if got := validity(tc.ttl, tc.elapsed, 0.01); got != tc.want {
			t.Errorf("validity(%v, %v) = %v, want %v", tc.ttl, tc.elapsed, got, tc.want)
		}
	}
}

func TestTTLLeavesValidity(t *testing.T) {
	for _, tc := range []struct {
		ttl  time.Duration
		want bool
	}{
		{-time.Second, false},
		{0, false},
		{2 * time.Millisecond, false},
		{3 * time.Millisecond, true},
		{time.Hour, true},
	} {
		if got := ttlLeavesValidity(tc.ttl, 0.01); got != tc.want {
			t.Errorf("ttlLeavesValidity(%v) = %v, want %v", tc.ttl, got, tc.want)
		}
	}
}

func TestValidUntil(t *testing.T) {
	start := time.Now()
	got := validUntil(start, time.Second, 0.01)
	if want := start.Add(988 * time.Millisecond); !got.Equal(want) {
		t.Fatalf("validUntil = start+%v, want start+988ms", got.Sub(start))
	}
}

// FuzzValidity checks the arithmetic's invariants over its whole domain: the
// drift is at least the clock precision and less than ttl+precision, validity
// never exceeds ttl − drift, it shrinks as elapsed grows, and nothing wraps.
func FuzzValidity(f *testing.F) {
	f.Add(int64(10*time.Second), int64(time.Millisecond), 0.01)
	f.Add(int64(3*time.Millisecond), int64(0), 0.5)
	f.Add(int64(math.MaxInt64), int64(math.MaxInt64), 0.999)
	f.Fuzz(func(t *testing.T, ttlN, elapsedN int64, factor float64) {
		if ttlN < 0 || elapsedN < 0 || !(factor >= 0 && factor < 1) {
			t.Skip() // outside the domain: New and checkTTL reject these
		}
		ttl, elapsed := time.Duration(ttlN), time.Duration(elapsedN)
		d := drift(ttl, factor)
		if d < clockPrecision {
			t.Fatalf("drift(%v, %v) = %v < clock precision", ttl, factor, d)
		}
		if ttl < math.MaxInt64-clockPrecision && d > ttl+clockPrecision {
			t.Fatalf("drift(%v, %v) = %v > ttl+precision", ttl, factor, d)
		}
		v := validity(ttl, elapsed, factor)
		if v > ttl-d {
			t.Fatalf("validity(%v, %v, %v) = %v > ttl-drift = %v", ttl, elapsed, factor, v, ttl-d)
		}
		if v2 := validity(ttl, elapsed/2, factor); v2 < v {
			t.Fatalf("validity grew with elapsed: %v at %v, %v at %v", v2, elapsed/2, v, elapsed)
		}
		if v > 0 && (ttl-elapsed-d != v) {
			t.Fatalf("validity(%v, %v, %v) = %v, want %v", ttl, elapsed, factor, v, ttl-elapsed-d)
		}
		if ttlLeavesValidity(ttl, factor) != (validity(ttl, 0, factor) > 0) {
			t.Fatal("ttlLeavesValidity disagrees with validity")
		}
	})
}
