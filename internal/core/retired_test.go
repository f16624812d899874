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

// R2: one sweep per token, which releases every master not released yet,
// once.
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
	if got := r.Sweep(3); !slices.Equal(got, []bool{false, false, false}) {
		t.Fatalf("the sweep releases %v; want none: every master was released", got)
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
