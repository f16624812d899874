package chaos

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
)

// fenced records by hand that holder obtained fence, with its acquisition
// beginning at acq and its Fence call running from asked to got (offsets
// from the store's origin).
func fenced(s *FenceStore, holder string, fence uint64, acq, asked, got time.Duration) {
	s.Obtained(FenceRecord{
		Key: "k", Holder: holder, Fence: fence,
		Acquiring: s.origin.Add(acq), Acquired: s.origin.Add(acq + ms),
		Asked: s.origin.Add(asked), Got: s.origin.Add(got),
	})
}

func kinds(vs []FenceViolation) string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Kind+" "+v.First.Holder+"<"+v.Then.Holder)
	}
	return strings.Join(out, ", ")
}

func TestFenceStoreAcceptsOnlyHigherFences(t *testing.T) {
	s := NewFenceStore(nil)
	valid := time.Now().Add(time.Hour)
	for _, w := range []struct {
		key, holder string
		fence       uint64
		want        bool
	}{
		{"k", "a", 3, true},
		{"k", "a", 3, true},  // the same holder again
		{"k", "b", 3, false}, // the same fence from another holder
		{"k", "b", 2, false}, // lower
		{"k", "c", 4, true},
		{"k", "a", 3, false}, // a's fence, now below c's
		{"j", "b", 1, true},  // keys are apart
	} {
		if got := s.Write(w.key, w.holder, w.fence, valid); got != w.want {
			t.Fatalf("Write(%s, %s, %d) = %v, want %v\n%s", w.key, w.holder, w.fence, got, w.want, s)
		}
	}
	st := s.Stats()
	if st.Writes != 7 || st.Accepted != 4 || st.Refused != 3 || st.RefusedStale != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// The order that counts is between Fence calls: a lower fence from a call
// that overlapped the other's is no violation; from one that began after
// the other returned it is, and the message says when the acquisition
// also came after.
func TestFenceStoreFindsFencesGoingBackwards(t *testing.T) {
	s := NewFenceStore(nil)
	fenced(s, "A", 5, 0, 10*ms, 20*ms)
	fenced(s, "B", 4, 15*ms, 18*ms, 30*ms) // overlaps A's call: no order
	fenced(s, "C", 6, 25*ms, 40*ms, 50*ms)
	if vs := s.Check(); len(vs) != 0 {
		t.Fatalf("violations %v", vs)
	}
	fenced(s, "D", 3, 5*ms, 60*ms, 70*ms) // a waiter: Lock began early, Fence late
	fenced(s, "E", 5, 80*ms, 90*ms, 95*ms)
	vs := s.Check()
	if got := kinds(vs); got != "backwards C<D, repeated A<E, backwards C<E" {
		t.Fatalf("violations %q, want A and E repeated, D and E below C:\n%s", got, s.Report(10))
	}
	if !strings.Contains(vs[0].Msg, "its Fence call began after A's returned") ||
		!strings.Contains(vs[2].Msg, "its acquisition began after A's Fence returned") {
		t.Fatalf("messages:\n%v\n%v", vs[0], vs[2])
	}
	if st := s.Stats(); st.Pairs != 9 || st.Successive != 3 || st.Fences != 5 {
		t.Fatalf("stats %+v, want 9 ordered pairs of 5 fences, 3 successive", st)
	}
}

func TestFenceStoreFindsOneHolderWithTwoFences(t *testing.T) {
	s := NewFenceStore(nil)
	fenced(s, "A", 5, 0, 10*ms, 20*ms)
	fenced(s, "A", 5, 0, 30*ms, 31*ms) // asked again: the same fence
	if vs := s.Check(); len(vs) != 0 {
		t.Fatalf("violations %v", vs)
	}
	fenced(s, "A", 7, 0, 40*ms, 41*ms)
	if got := kinds(s.Check()); got != "changed A<A" {
		t.Fatalf("violations %q, want A's fence changed", got)
	}
}

// A refusal is a violation only while the writer is valid, and a loss
// between the two fences excuses it.
func TestFenceStoreRefusalOfAValidHolder(t *testing.T) {
	s := NewFenceStore(nil)
	fenced(s, "A", 5, 0, 10*ms, 20*ms)
	fenced(s, "B", 6, 30*ms, 40*ms, 50*ms)
	s.Write("k", "B", 6, time.Now().Add(time.Hour))
	if s.Write("k", "A", 5, time.Now().Add(-time.Millisecond)) {
		t.Fatal("a stale write was accepted")
	}
	if vs := s.Check(); len(vs) != 0 {
		t.Fatalf("refusing a stale holder: violations %v", vs)
	}
	s.Write("k", "A", 5, time.Now().Add(time.Hour))
	if got := kinds(s.Check()); got != "refused B<A" {
		t.Fatalf("violations %q, want A refused while valid", got)
	}
	if st := s.Stats(); st.Refused != 2 || st.RefusedStale != 1 {
		t.Fatalf("stats %+v", st)
	}
	s.DataLoss(s.origin.Add(25*ms), s.origin.Add(28*ms), "test")
	if vs := s.Check(); len(vs) != 0 {
		t.Fatalf("refusal across a data loss: violations %v", vs)
	}
}

// A data loss excuses the pairs it falls between, and no others: not a
// fence drawn while the master was down, not one after it.
func TestFenceStoreDataLossExcusesOnlyThePairsAcrossIt(t *testing.T) {
	s := NewFenceStore(nil)
	// The master was last seen with its data at 100 ms (down from then),
	// and first with its new data after 200 ms.
	s.DataLoss(s.origin.Add(100*ms), s.origin.Add(200*ms), "node 0 restarted empty")
	fenced(s, "A", 5, 0, 50*ms, 60*ms)
	fenced(s, "B", 3, 110*ms, 120*ms, 130*ms) // during the outage: no excuse
	fenced(s, "C", 5, 150*ms, 210*ms, 220*ms) // across it from A: excused
	fenced(s, "D", 2, 230*ms, 240*ms, 250*ms) // below C, after the loss: not
	got := kinds(s.Check())
	if got != "backwards A<B, backwards C<D" {
		t.Fatalf("violations %q, want B below A and D below C:\n%s", got, s.Report(10))
	}
	if st := s.Stats(); st.Excused != 2 || st.Successive != 3 || st.SuccessiveExcused != 0 || st.Losses != 1 {
		t.Fatalf("stats %+v, want A–C and A–D excused, neither successive (B came between)", st)
	}
	if r := s.Report(1); !strings.Contains(r, "2 fence violations") || !strings.Contains(r, "… and 1 more") ||
		!strings.Contains(r, "data loss (node 0 restarted empty)") {
		t.Fatalf("report:\n%s", r)
	}
}

func TestFenceStoreNotesInTheHistory(t *testing.T) {
	h := NewHistory()
	s := NewFenceStore(h)
	fenced(s, "A", 5, 0, 10*ms, 20*ms)
	fenced(s, "B", 6, 30*ms, 40*ms, 50*ms)
	s.Write("k", "B", 6, time.Now().Add(time.Hour))
	s.Write("k", "A", 5, time.Now().Add(-time.Millisecond))
	out := h.String()
	for _, want := range []string{"fence 5 for A", "fence 6 for B", "store refused A's write of fence 5 (past its validity): B wrote 6"} {
		if !strings.Contains(out, want) {
			t.Fatalf("history lacks %q:\n%s", want, out)
		}
	}
	if s.origin != h.origin {
		t.Fatal("the store's times are not the history's")
	}
}

func TestFenceStoreIsSafeForConcurrentUse(t *testing.T) {
	s := NewFenceStore(NewHistory())
	var wg sync.WaitGroup
	var mu sync.Mutex
	next := uint64(0)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				mu.Lock() // fences in the order of their times, as a majority's counters give them
				next++
				f := next
				now := time.Now()
				mu.Unlock()
				holder := string(rune('a'+g)) + string(rune('0'+i%10)) + string(rune('0'+i/10))
				s.Obtained(FenceRecord{Key: "k", Holder: holder, Fence: f, Acquiring: now, Acquired: now, Asked: now, Got: now})
				s.Write("k", holder, f, now.Add(time.Hour))
			}
		}()
	}
	wg.Wait()
	// Writes can land out of fence order (valid ones refused), but the
	// fences themselves are all distinct and, by call order, increasing.
	for _, v := range s.Check() {
		if v.Kind != "refused" {
			t.Fatalf("violation %v", v)
		}
	}
	if st := s.Stats(); st.Fences != 400 || st.Writes != 400 {
		t.Fatalf("stats %+v", st)
	}
}

// WatchDataLoss against a real restart without persistence: the loss it
// reports lies within the fault, and no fence drawn while the master was
// down is excused.
func TestWatchDataLossBoundsARestartWithoutData(t *testing.T) {
	ctx := context.Background()
	c := Start(t, 3, Options{ClockNode: -1})
	sched := c.NewSchedule(ScheduleOptions{Seed: 1, NodeDeadline: 50 * ms, MaxTTL: 300 * ms, MaxFaulty: 1})
	s := NewFenceStore(nil)
	watchCtx, stop := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { defer close(watched); s.WatchDataLoss(watchCtx, c, sched, 2*ms) }()

	for _, n := range c.Nodes {
		if err := n.Admin.Set(ctx, "k", "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * ms) // polls before the fault
	struck := time.Now()
	i, err := sched.Strike(KilledEmpty, rand.New(rand.NewPCG(1, 2)))
	if err != nil || i < 0 {
		t.Fatalf("Strike: %d, %v", i, err)
	}
	killed := time.Now()
	time.Sleep(100 * ms) // down, and seen down
	healing := time.Now()
	sched.change.Lock()
	err = sched.heal(i)
	sched.change.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	healed := time.Now()
	time.Sleep(20 * ms) // a poll sees it healed
	stop()
	<-watched

	if n, _ := c.Nodes[i].Admin.Exists(ctx, "k").Result(); n != 0 {
		t.Fatalf("node %d kept its key across KilledEmpty", i)
	}
	if len(s.losses) != 1 {
		t.Fatalf("losses %+v, want one", s.losses)
	}
	l := s.losses[0]
	if !l.oldBefore.After(struck) || l.oldBefore.After(healing) || l.newAfter.Before(killed) ||
		!l.newAfter.Before(healed) || l.newAfter.Before(l.oldBefore) {
		t.Fatalf("loss old data until %v, new from %v; want within the outage: struck %v, killed by %v, healing %v, healed %v",
			s.at(l.oldBefore), s.at(l.newAfter), s.at(struck), s.at(killed), s.at(healing), s.at(healed))
	}
	// Two fences drawn while the node was down are still checked.
	mid := l.oldBefore.Add(l.newAfter.Sub(l.oldBefore) / 2)
	s.Obtained(FenceRecord{Key: "k", Holder: "A", Fence: 5, Acquiring: l.oldBefore, Acquired: l.oldBefore, Asked: l.oldBefore.Add(ms), Got: mid})
	s.Obtained(FenceRecord{Key: "k", Holder: "B", Fence: 4, Acquiring: mid.Add(ms), Acquired: mid.Add(ms), Asked: mid.Add(ms), Got: l.newAfter.Add(-ms)})
	if got := kinds(s.Check()); got != "backwards A<B" {
		t.Fatalf("violations %q, want B below A though both fences came while the node was down", got)
	}
}
