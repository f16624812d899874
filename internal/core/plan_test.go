package core

import (
	"math/bits"
	"testing"
	"time"
)

// I9: a hand-off skips the marker only for a TTL no longer than the
// shortest the marker recorded.
func TestTrustedHandOff(t *testing.T) {
	if !TrustedHandOff(time.Second, time.Second) || !TrustedHandOff(time.Second, 2*time.Second) {
		t.Fatal("a hand-off to a TTL the marker covers is not trusted")
	}
	if TrustedHandOff(2*time.Second, time.Second) {
		t.Fatal("a hand-off to a TTL longer than the marker recorded is trusted")
	}
}

// I10: a round waits until the node deadline, never past the validity it
// could win.
func TestRoundEnd(t *testing.T) {
	if got := RoundEnd(t0, 50*time.Millisecond, time.Second, 0.01); !got.Equal(t0.Add(50 * time.Millisecond)) {
		t.Fatalf("RoundEnd = %v, want the node deadline", got.Sub(t0))
	}
	ttl := 100 * time.Millisecond
	if got := RoundEnd(t0, time.Second, ttl, 0.01); !got.Equal(ValidUntil(t0, ttl, 0.01)) {
		t.Fatalf("RoundEnd = %v, want the validity's end %v", got.Sub(t0), ValidUntil(t0, ttl, 0.01).Sub(t0))
	}
}

// I11: masters are held in reserve only under the guard, with quorum-first
// and three masters or more; a quorum is asked first, the slow ones last,
// the same ones for one key.
func TestReserves(t *testing.T) {
	seeds := []uint64{KeyHash("a:1"), KeyHash("b:2"), KeyHash("c:3"), KeyHash("d:4"), KeyHash("e:5")}
	k := KeyHash("key")
	if Reserves(5, false, true, k, seeds, 0) != 0 || Reserves(5, true, false, k, seeds, 0) != 0 || Reserves(2, true, true, k, seeds[:2], 0) != 0 {
		t.Fatal("masters held in reserve without the guard, without quorum-first, or with two masters")
	}
	r := Reserves(5, true, true, k, seeds, 0)
	if bits.OnesCount64(r) != 5-Quorum(5) || r>>5 != 0 {
		t.Fatalf("Reserves = %05b: want %d of the 5 masters in reserve", r, 5-Quorum(5))
	}
	if Reserves(5, true, true, k, seeds, 0) != r {
		t.Fatal("one key's reserves differ between calls")
	}
	preferred := (1<<5 - 1) &^ r
	slow := uint64(1 << bits.TrailingZeros64(preferred))
	if Reserves(5, true, true, k, seeds, slow)&slow == 0 {
		t.Fatal("a slow master is still preferred while others are not slow")
	}
}

// I12: a hand-off only for a single-key lock, while valid, with notices on.
func TestMayHandOff(t *testing.T) {
	until := t0.Add(time.Second)
	if !MayHandOff(t0, until, true, true) {
		t.Fatal("a valid single-key lock with notices on may not hand off")
	}
	for _, c := range []struct {
		now               time.Time
		notices, singleKy bool
	}{{until, true, true}, {t0, false, true}, {t0, true, false}} {
		if MayHandOff(c.now, until, c.notices, c.singleKy) {
			t.Fatalf("MayHandOff(valid %v, notices %v, single key %v) = true", c.now.Before(until), c.notices, c.singleKy)
		}
	}
}

// I13: a local waiter goes first only while no other Client is heard, or
// every one heard announces itself.
func TestLocalFirst(t *testing.T) {
	if !LocalFirst(false, false) || !LocalFirst(true, true) {
		t.Fatal("a local waiter may not go first with nobody else heard, or every other Client announcing itself")
	}
	if LocalFirst(true, false) {
		t.Fatal("a local waiter goes first past a Client that does not announce itself")
	}
}

// I14: an Unlock holds the unheard masters back only once a round was
// timed, and with twice the hedge left.
func TestUnlockReserves(t *testing.T) {
	hedge := 10 * time.Millisecond
	if r, w := UnlockReserves(0b100, true, hedge, time.Second); r != 0b100 || w != hedge {
		t.Fatalf("UnlockReserves = %b, %v; want the unheard master after the hedge", r, w)
	}
	for _, c := range []struct {
		timed bool
		left  time.Duration
	}{{false, time.Second}, {true, 2*hedge - 1}} {
		if r, _ := UnlockReserves(0b100, c.timed, hedge, c.left); r != 0 {
			t.Fatalf("UnlockReserves(timed %v, left %v) holds %b back", c.timed, c.left, r)
		}
	}
}

// I15: only an extension that lengthens the lock takes masters.
func TestWidens(t *testing.T) {
	until := ValidUntil(t0, time.Second, 0.01)
	if Widens(t0.Add(time.Millisecond), 500*time.Millisecond, 0.01, until) {
		t.Fatal("an extension that ends before the lock does widens it")
	}
	if !Widens(t0.Add(time.Millisecond), 2*time.Second, 0.01, until) {
		t.Fatal("an extension that lengthens the lock does not widen it")
	}
}

// TestHedgeAfter: I16.
func TestHedgeAfter(t *testing.T) {
	for _, c := range []struct{ deadline, usual, want time.Duration }{
		{time.Second, 0, 500 * time.Millisecond},
		{time.Second, time.Millisecond, 3 * time.Millisecond},
		{time.Second, time.Microsecond, MinHedge},
		{time.Second, time.Second, 500 * time.Millisecond},
	} {
		if got := HedgeAfter(c.deadline, c.usual); got != c.want {
			t.Errorf("HedgeAfter(%v, %v) = %v, want %v", c.deadline, c.usual, got, c.want)
		}
	}
	if got := Usual(0, 8*time.Millisecond); got != 8*time.Millisecond {
		t.Errorf("the first round's time is averaged to %v", got)
	}
	if got := Usual(8*time.Millisecond, 16*time.Millisecond); got != 9*time.Millisecond {
		t.Errorf("Usual(8ms, 16ms) = %v, want 9ms", got)
	}
}

// TestAsksReserves: I17.
func TestAsksReserves(t *testing.T) {
	for _, c := range []struct {
		reserve       uint64
		before, after int
		want          bool
	}{
		{0b11000, 1, 2, false}, // a counted yes
		{0b11000, 1, 1, true},  // a no, an error, a yes held back
		{0, 1, 1, false},       // nothing held back
	} {
		if got := AsksReserves(c.reserve, c.before, c.after); got != c.want {
			t.Errorf("AsksReserves(%b, %d, %d) = %v", c.reserve, c.before, c.after, got)
		}
	}
}

// TestRemoteSkips: I18.
func TestRemoteSkips(t *testing.T) {
	if RemoteSkips(false, false) || RemoteSkips(false, true) {
		t.Error("a hand-off skips a master that did not refuse the lock")
	}
	if !RemoteSkips(true, false) {
		t.Error("a hand-off asks a master the lock's token is known not to be on")
	}
	if RemoteSkips(true, true) {
		t.Error("a hand-off skips a master no notice told of, where a missed hand-off may have put the token")
	}
}
