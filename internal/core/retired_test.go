package core

import (
	"slices"
	"testing"
)

// R1: a late hand-off's token is released at once only when its waiter's
// Client is done with it and the lock's Unlock is decided; while the lock
// is held, it is left to the lock's Unlock (and counted released when that
// Unlock covers the master).
func TestRetiredLateNotice(t *testing.T) {
	var r Retired
	if release, sweep := r.Late(0, 3, true, true, false); release || sweep {
		t.Fatalf("a late notice while the lock is held: release %v, sweep %v; want neither", release, sweep)
	}
	if r.Unheard(0) {
		t.Fatal("a master the lock's Unlock covers is left unreleased")
	}
	if release, _ := r.Late(1, 3, false, false, false); release {
		t.Fatal("a late hand-off released while the lock's Unlock is undecided")
	}
	var gaveUp Retired
	if release, sweep := gaveUp.Late(2, 3, false, false, true); !release || !sweep {
		t.Fatalf("a late notice for a token given up: release %v, sweep %v; want both", release, sweep)
	}
}

// R2: one sweep at a time per token, which releases every master not
// released since the last late notice.
func TestRetiredSweep(t *testing.T) {
	var r Retired
	r.Heard([]bool{true, false, false})
	if _, sweep := r.Late(1, 3, false, false, true); !sweep {
		t.Fatal("the first late notice schedules no sweep")
	}
	if _, sweep := r.Late(2, 3, false, false, true); sweep || r.Unlocked() {
		t.Fatal("a second sweep scheduled for one token")
	}
	if !r.CutShort() {
		t.Fatal("a scheduled sweep that has not run is not Close's to do (R3)")
	}
	if got := r.Sweep(3); !slices.Equal(got, []bool{true, true, false}) {
		t.Fatalf("the sweep releases %v; want every master but the last one released at once", got)
	}
	if r.CutShort() {
		t.Fatal("a sweep that ran is still Close's to do")
	}
	var u Retired
	u.Heard([]bool{true, false, true})
	if !u.Unlocked() {
		t.Fatal("an Unlock with a master never heard schedules no sweep")
	}
	if got := u.Sweep(3); !slices.Equal(got, []bool{false, true, false}) {
		t.Fatalf("the sweep releases %v; want the master never heard alone", got)
	}
	var all Retired
	all.Heard([]bool{true, true, true})
	if all.Unlocked() {
		t.Fatal("an Unlock that releases every master schedules a sweep")
	}
}

// R2: a late notice after the sweep ran (a later round, from a holder that
// missed the withdrawal) schedules another sweep, over every master.
func TestRetiredSweepsALaterRoundAgain(t *testing.T) {
	var r Retired
	r.Late(0, 3, false, false, true)
	r.Sweep(3)
	release, sweep := r.Late(1, 3, false, false, true)
	if !release || !sweep {
		t.Fatalf("a late notice after the sweep ran: release %v, sweep %v; want both", release, sweep)
	}
	if got := r.Sweep(3); !slices.Equal(got, []bool{true, false, true}) {
		t.Fatalf("the second sweep releases %v; want every master but the one released at once", got)
	}
	var held Retired
	held.Late(0, 3, false, false, true)
	held.Sweep(3)
	if _, sweep := held.Late(1, 3, true, false, true); sweep {
		t.Fatal("a late notice for a lock still held schedules a sweep")
	}
}
