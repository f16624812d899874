package core

import (
	"testing"
	"time"
)

// TestAWantsFirstAnnouncementNeverMoves: A1. A hand-off's validity counts
// from the want's first announcement, so no repetition may move it.
func TestAWantsFirstAnnouncementNeverMoves(t *testing.T) {
	var w Waiter
	w.Start(WaitFirst, false, Heard{})
	const refresh = time.Second
	if !w.Announcing(t0, refresh) {
		t.Fatal("a want never sent is not announced")
	}
	w.Announced("tok", t0, Heard{})
	if w.Announcing(t0.Add(refresh-1), refresh) {
		t.Fatal("a want is repeated before its refresh")
	}
	if !w.Announcing(t0.Add(refresh), refresh) {
		t.Fatal("a want is not repeated after its refresh")
	}
	w.Announced("other", t0.Add(refresh), Heard{})
	if w.Out.First != t0 || w.Out.At != t0.Add(refresh) || w.Out.Token != "tok" {
		t.Fatalf("after a repetition the want is %+v: its first announcement or token moved", w.Out)
	}
	if a := w.Over(); a.Token != "tok" || w.Out != (Announcement{}) {
		t.Fatalf("Over returned %+v and left %+v", a, w.Out)
	}
}

// TestTheFirstAnnouncementWaitsLongestOnlyWhileTheKeyIsHeld: A4. Once its
// want is out, the waiter waits the longest backoff, but only while one
// holder is known to hold the key: one that was released before the
// Client heard has nobody to hand it over.
func TestTheFirstAnnouncementWaitsLongestOnlyWhileTheKeyIsHeld(t *testing.T) {
	for _, c := range []struct {
		name      string
		heldByOne bool
		heard     Heard
		want      TimerKind
	}{
		{"held by one, by the refusals", true, Heard{Subscribed: true}, Longest},
		{"held by another, by the notices", false, Heard{HeldByOther: true, Subscribed: true}, Longest},
		{"refusals for several holders", false, Heard{Subscribed: true}, Backoff},
	} {
		t.Run(c.name, func(t *testing.T) {
			var w Waiter
			if got := w.Failed(c.heldByOne, true, 0, c.heard); got != (Timer{Backoff, 0}) {
				t.Fatalf("before the want is out, the wait is %+v", got)
			}
			if got := w.Announced("tok", t0, c.heard); got.Kind != c.want {
				t.Fatalf("the first announcement arms %+v, want kind %v", got, c.want)
			}
			if got := w.Announced("tok", t0.Add(time.Second), c.heard); got.Kind != Keep {
				t.Fatalf("a repetition arms %+v", got)
			}
		})
	}
	t.Run("a refusal heard unsubscribed says nothing", func(t *testing.T) {
		var w Waiter
		w.Failed(true, false, 0, Heard{Subscribed: true})
		if got := w.Announced("tok", t0, Heard{Subscribed: true}); got.Kind != Backoff {
			t.Fatalf("the first announcement arms %+v", got)
		}
	})
	t.Run("a release heard ends it", func(t *testing.T) {
		var w Waiter
		w.Failed(true, true, 0, Heard{Subscribed: true})
		w.Announced("tok", t0, Heard{Subscribed: true})
		if got, _ := w.Woke(Noticed, Heard{Released: true, Subscribed: true}); got != (Timer{Contention, 1}) || w.State != JitterFirst {
			t.Fatalf("a release arms %+v in state %v", got, w.State)
		}
		if got, stood := w.Woke(Noticed, Heard{Taken: true, Subscribed: true}); !stood || got != (Timer{Backoff, 0}) || w.State != WaitFirst {
			t.Fatalf("a take in the slot arms %+v, stood down %v, in state %v", got, stood, w.State)
		}
	})
}

// TestTheBackoffFollowsTheFailedAttempts: A4. The backoff after the k-th
// failed attempt, from 0.
func TestTheBackoffFollowsTheFailedAttempts(t *testing.T) {
	var w Waiter
	if got := w.Start(WaitFirst, false, Heard{}); got != (Timer{Backoff, 0}) {
		t.Fatalf("a call that starts by waiting arms %+v", got)
	}
	for k := range 3 {
		if got := w.Failed(false, true, 0, Heard{}); got != (Timer{Backoff, k}) {
			t.Fatalf("failure %d arms %+v", k+1, got)
		}
	}
	if got := w.NotHanded(Heard{}); got != (Timer{Backoff, 2}) || w.State != WaitFirst {
		t.Fatalf("a hand-off not taken arms %+v in state %v", got, w.State)
	}
}

// TestAWaiterThatMayHaveMissedNoticesAttemptsAndAnnouncesAgain: A2. A gap in
// the watch since the last attempt sends the waiter to attempt, probing
// first, and its want goes out again at once.
func TestAWaiterThatMayHaveMissedNoticesAttemptsAndAnnouncesAgain(t *testing.T) {
	var w Waiter
	w.Failed(true, true, 3, Heard{Subscribed: true, Gaps: 3})
	w.Announced("tok", t0, Heard{})
	if w.Woke(Noticed, Heard{Subscribed: true, Gaps: 3}); w.State != WaitFirst {
		t.Fatalf("a notice with no gap moved the waiter to %v", w.State)
	}
	if w.Woke(Noticed, Heard{Subscribed: false, Gaps: 4}); w.State != WaitFirst {
		t.Fatalf("a gap while unsubscribed moved the waiter to %v", w.State)
	}
	w.Woke(Noticed, Heard{Subscribed: true, Gaps: 4})
	if w.State != AttemptNow || !w.Probes() {
		t.Fatalf("after a gap the waiter is in %v, probing %v", w.State, w.Probes())
	}
	if !w.Announcing(t0.Add(time.Millisecond), time.Hour) {
		t.Fatal("after a gap the want is not announced again")
	}
	if w.Out.First != t0 {
		t.Fatal("a gap moved the want's first announcement")
	}
}

// TestAWaiterThatStartsWaitingTrustsWhatItsWatchHeard: a call that starts by
// waiting counts gaps from its watch's, not from zero.
func TestAWaiterThatStartsWaitingTrustsWhatItsWatchHeard(t *testing.T) {
	var w Waiter
	w.Start(WaitFirst, false, Heard{Subscribed: true, Gaps: 2})
	if w.Woke(Noticed, Heard{Subscribed: true, Gaps: 2}); w.State != WaitFirst {
		t.Fatalf("a notice with no new gap moved the waiter to %v", w.State)
	}
}

// TestOnlyAnAttemptAfterAContentionDelaySkipsTheProbe: A3.
func TestOnlyAnAttemptAfterAContentionDelaySkipsTheProbe(t *testing.T) {
	var w Waiter
	if w.Start(JitterFirst, false, Heard{}); !w.Probes() {
		t.Fatal("a first attempt does not probe")
	}
	w.Woke(Fired, Heard{})
	if w.State != AttemptNow || w.Probes() || !w.Delayed() {
		t.Fatalf("after the contention delay: state %v, probes %v", w.State, w.Probes())
	}
	w.Failed(false, true, 0, Heard{})
	w.Woke(Fired, Heard{})
	if w.State != AttemptNow || !w.Probes() {
		t.Fatalf("after the backoff: state %v, probes %v", w.State, w.Probes())
	}
	if w.Woke(HandedTo, Heard{}); w.State != HandedOver {
		t.Fatalf("a hand-off moved the waiter to %v", w.State)
	}
}

// TestHeldByOneNeedsAQuorumOfRefusalsForOneHolder.
func TestHeldByOneNeedsAQuorumOfRefusalsForOneHolder(t *testing.T) {
	for _, c := range []struct {
		holders []int64
		want    bool
	}{
		{[]int64{7, 7, 7, 0, 0}, true},
		{[]int64{0, 7, 0, 7, 7}, true},
		{[]int64{7, 8, 9, 0, 0}, false},
		{[]int64{7, 7, 0, 0, 0}, false},
		{nil, false},
	} {
		if got := HeldByOne(c.holders, 3); got != c.want {
			t.Errorf("HeldByOne(%v, 3) = %v", c.holders, got)
		}
	}
}
