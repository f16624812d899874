package chaos

import (
	"strings"
	"testing"
	"time"
)

// hold builds a window by hand: [start, until], released at released if set.
func hold(h *History, holder string, start, until, released time.Duration) *Hold {
	x := &Hold{h: h, holder: holder, key: "k", token: holder, start: h.origin.Add(start), until: h.origin.Add(until)}
	if released > 0 {
		x.released = h.origin.Add(released)
	}
	h.holds = append(h.holds, x)
	return x
}

const ms = time.Millisecond

func TestOverlapsFindsIntersectingWindows(t *testing.T) {
	h := NewHistory()
	hold(h, "a", 0, 100*ms, 0)
	hold(h, "b", 90*ms, 200*ms, 0)
	got := h.Overlaps()
	if len(got) != 1 || got[0].By != 10*ms {
		t.Fatalf("Overlaps = %v, want one of 10ms", got)
	}
}

func TestOverlapsAcceptsBackToBackWindows(t *testing.T) {
	h := NewHistory()
	hold(h, "a", 0, 100*ms, 0)
	hold(h, "b", 100*ms, 200*ms, 0)
	hold(h, "c", 200*ms, 300*ms, 0)
	if got := h.Overlaps(); len(got) != 0 {
		t.Fatalf("Overlaps = %v, want none", got)
	}
}

func TestOverlapsUsesTheEarlierOfReleaseAndValidity(t *testing.T) {
	h := NewHistory()
	hold(h, "a", 0, 100*ms, 50*ms) // released early: window ends at 50ms
	hold(h, "b", 60*ms, 200*ms, 0)
	if got := h.Overlaps(); len(got) != 0 {
		t.Fatalf("released window: Overlaps = %v, want none", got)
	}
	h = NewHistory()
	a := hold(h, "a", 0, 100*ms, 0)
	a.Extended(h.origin.Add(300 * ms)) // extension lengthens it
	hold(h, "b", 250*ms, 400*ms, 0)
	if got := h.Overlaps(); len(got) != 1 {
		t.Fatalf("extended window: Overlaps = %v, want one", got)
	}
}

func TestOverlapsComparesWithTheLongestOpenWindow(t *testing.T) {
	h := NewHistory()
	hold(h, "long", 0, 1000*ms, 0)
	hold(h, "short", 10*ms, 20*ms, 0)  // overlaps long
	hold(h, "late", 500*ms, 600*ms, 0) // overlaps long, not short
	if got := h.Overlaps(); len(got) != 2 {
		t.Fatalf("Overlaps = %v, want two", got)
	}
}

func TestOverlapsIsPerKey(t *testing.T) {
	h := NewHistory()
	hold(h, "a", 0, 100*ms, 0)
	b := hold(h, "b", 50*ms, 150*ms, 0)
	b.key = "other"
	if got := h.Overlaps(); len(got) != 0 {
		t.Fatalf("Overlaps = %v, want none across keys", got)
	}
}

func TestSectionLosesAnUpdateWhenSectionsInterleave(t *testing.T) {
	h := NewHistory()
	far := time.Hour
	a := h.Acquired("a", "k", "a", time.Now().Add(far))
	b := h.Acquired("b", "k", "b", time.Now().Add(far))
	done := make(chan bool)
	go func() { done <- a.Section(50 * ms) }()
	b.Section(50 * ms)
	<-done
	if v, n := h.Counter(); v == n {
		t.Fatalf("counter %d equals completed sections %d although the sections ran together", v, n)
	}
}

func TestSectionDoesNotWriteAfterTheWindowEnded(t *testing.T) {
	h := NewHistory()
	x := h.Acquired("a", "k", "a", time.Now().Add(ms))
	if x.Section(5 * ms) {
		t.Fatal("Section wrote after the validity ended")
	}
	if v, n := h.Counter(); v != 0 || n != 0 {
		t.Fatalf("counter %d, completed %d; want 0, 0", v, n)
	}
}

func TestToldMovesTheEndButALostLockEndsItWhenLearned(t *testing.T) {
	h := NewHistory()
	x := hold(h, "a", 0, 100*ms, 0)
	x.Told(h.origin.Add(300*ms), h.origin.Add(50*ms)) // extended
	if got := x.End().Sub(h.origin); got != 300*ms {
		t.Fatalf("after an extension End = %v, want 300ms", got)
	}
	x.Told(h.origin.Add(200*ms), h.origin.Add(60*ms)) // a shorter end, told in time
	if got := x.End().Sub(h.origin); got != 200*ms {
		t.Fatalf("after a shorter end End = %v, want 200ms", got)
	}
	x.Told(h.origin.Add(70*ms), h.origin.Add(90*ms)) // found lost at 70ms, learned at 90ms
	if got := x.End().Sub(h.origin); got != 90*ms {
		t.Fatalf("after the loss End = %v, want 90ms, when the holder learned it", got)
	}
}

func TestExcerptKeepsTheKeyAndTheClusterEvents(t *testing.T) {
	h := NewHistory()
	hold(h, "a", 0, 100*ms, 0)
	b := hold(h, "b", 0, 100*ms, 0)
	b.key = "other"
	h.Note("fault")
	h.NoteKey("other", "elsewhere")
	got := h.Excerpt("k", h.origin, time.Now().Add(time.Second))
	if !strings.Contains(got, "hold a") || !strings.Contains(got, "fault") ||
		strings.Contains(got, "hold b") || strings.Contains(got, "elsewhere") {
		t.Fatalf("Excerpt of k:\n%s", got)
	}
}
