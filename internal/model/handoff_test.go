package model

import "testing"

// TestHandOffModel explores the hand-off world (handoff.go): a holder's
// line of other Clients' wants (core.Line) and a waiter's Client's count
// of its hand-off notices (core.Expected), with the withdrawal and the
// notices late, duplicated or lost. It fails with the shortest trace to a
// hand-off to a withdrawn want, two holders, or a token nobody holds left
// on a master once no message is on its way.
func TestHandOffModel(t *testing.T) {
	r := CheckHandOff()
	t.Log(handOffTrace(r))
	if r.Violation != "" {
		t.Fatal(handOffTrace(r))
	}
	if !r.Complete {
		t.Fatalf("stopped at %d states", r.States)
	}
}

// The positive control: a waiter's Client that keeps a late hand-off's
// token leaves it on the masters, and the checker says how.
func TestHandOffModelFindsAKeptLateHandOff(t *testing.T) {
	lateHandOffKept = true
	defer func() { lateHandOffKept = false }()
	r := CheckHandOff()
	t.Log(handOffTrace(r))
	if r.Violation == "" {
		t.Fatal("no violation with late hand-offs kept: the checker cannot see a token left behind")
	}
}
