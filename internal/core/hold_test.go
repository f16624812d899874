package core

import "testing"

// H1: exactly one side releases: the second of the call's return and the
// lock giving the master up, and only when the call may have set the key.
func TestHoldReleasesOnce(t *testing.T) {
	for _, c := range []struct {
		name          string
		yes, failed   bool
		abandonFirst  bool
		wantRelease   bool
		wantByAbandon bool
	}{
		{"yes, then given up", true, false, false, true, true},
		{"given up, then yes", true, false, true, true, false},
		{"given up, then an error", false, true, true, true, false},
		{"no, then given up", false, false, false, false, false},
		{"given up, then no", false, false, true, false, false},
	} {
		h := NewHold()
		var byFinish, byAbandon bool
		if c.abandonFirst {
			byAbandon = h.Abandon()
			byFinish = h.Finish(false, c.yes, c.failed)
		} else {
			byFinish = h.Finish(false, c.yes, c.failed)
			byAbandon = h.Abandon()
		}
		if byFinish && byAbandon || (byFinish || byAbandon) != c.wantRelease || byAbandon != c.wantByAbandon {
			t.Errorf("%s: released by Finish %v, by Abandon %v", c.name, byFinish, byAbandon)
		}
		if h.Abandon() {
			t.Errorf("%s: a second Abandon releases again", c.name)
		}
	}
}

// H2: nothing is sent once the lock gave the master up.
func TestHoldSendsNothingGivenUp(t *testing.T) {
	h := NewHold()
	if !h.Send() {
		t.Fatal("a pending call may not be sent")
	}
	h.Abandon()
	if h.Send() {
		t.Fatal("a call is sent after the lock gave its master up")
	}
}

// H3: a reserved master counts as refused; Extend may ask it, or retake a
// master whose call failed, until Unlock begins.
func TestHoldReservesAndRetakes(t *testing.T) {
	h := NewHold()
	h.Reserve()
	if !h.Refused() || !h.Askable() {
		t.Fatal("a reserved master is not refused and askable")
	}
	if ok, reopened := h.Ask(); !ok || reopened {
		t.Fatalf("Ask of a reserved master = %v, %v; want it taken, not reopened", ok, reopened)
	}
	h.Finish(true, false, true) // Extend's call failed: the key may be set, or missing
	if !h.Askable() {
		t.Fatal("a master whose taking failed is not asked again")
	}
	if ok, reopened := h.Ask(); !ok || !reopened || h.Finished() {
		t.Fatal("a master to take again is not reopened")
	}
	h.Finish(true, false, false)
	h.GiveUpReserved()
	if h.Askable() {
		t.Fatal("a master is still askable after Unlock began")
	}
	r := NewHold()
	r.Reserve()
	if !r.GiveUpReserved() || r.Send() {
		t.Fatal("Unlock does not give a reserved master up")
	}
	u := NewHold()
	u.FinishUnsent(true)
	if !u.Askable() {
		t.Fatal("an unsent retake is not asked again")
	}
}

// H4: an unheard master is held back by Unlock until a notice or a yes
// tells of the token; then Unlock asks it as one that holds it.
func TestHoldUnheardUntilSeen(t *testing.T) {
	h := NewHold()
	h.Finish(false, false, false)
	h.MarkUnheard()
	if !h.IsUnheard() {
		t.Fatal("a master marked unheard is not")
	}
	if !h.TokenSeen() || h.IsUnheard() || h.Refused() {
		t.Fatal("a master a notice told of is still unheard, or refused")
	}
	p := NewHold()
	p.MarkUnheard()
	if p.TokenSeen() {
		t.Fatal("Unlock asks a master whose call is still asking it")
	}
	if p.IsUnheard() {
		t.Fatal("a master a notice told of is still unheard")
	}
}
