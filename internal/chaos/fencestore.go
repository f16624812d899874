// FenceStore: the resource that fencing tokens protect, played for the
// fault suite, and the check of the fences its writers obtained; and
// WatchDataLoss, which tells it when a master came back without its data.

package chaos

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// A FenceStore plays the resource a lock's fencing tokens protect
// (Kleppmann's storage service): per key, Write accepts a write only if its
// fence is above every fence the store accepted for that key before, or
// equal to the highest from the holder that wrote it (a holder may write
// twice). Refusing a lower fence is the store doing its job: that is how a
// holder paused past its validity is kept from acting after the next one.
//
// The store also records every fence the holders obtained (Obtained), and
// Check finds where the fences themselves broke their guarantee, whatever
// the store accepted:
//
//   - backwards: holder B's Fence call began after holder A's returned,
//     yet B's fence is below A's. In particular B's acquisition began after
//     A had its fence, the order the library documents; the Fence calls'
//     order is checked because it holds just as well: A's fence sits on a
//     majority's counters before A's Fence returns, B's first round
//     increments the counters of a majority after B's Fence began, the two
//     majorities share a master, and a counter never goes down while its
//     master keeps its data. So every pair ordered by acquisition is
//     checked, and so is a hand-off's waiter, whose Lock call began long
//     before.
//   - repeated: two holders of a key obtained the same fence, in whatever
//     order (the second is backwards too when the calls did not overlap).
//   - changed: one holder obtained two different fences.
//   - refused: the store refused a write at a moment its holder was still
//     valid (before the Until it passed to Write). The higher fence it lost
//     to was drawn while that holder was valid, so two holders held the key
//     at once or their fences disagree with the order of their locks.
//
// A master restarted without its data (or flushed) may have forgotten the
// counters under an earlier fence; DataLoss excuses the pairs of fences
// such a loss falls between, and only those.
//
// Holders are named by the caller, one name per lock (a token, or a name
// with a sequence number). A FenceStore is safe for concurrent use.
type FenceStore struct {
	origin time.Time
	hist   *History

	mu       sync.Mutex
	top      map[string]fenceTop // by key: the highest fence accepted
	byHolder map[string]*FenceRecord
	records  []*FenceRecord
	writes   []*FenceWrite
	losses   []dataLoss
	changed  []FenceViolation
}

// A FenceRecord is one holder's fence of one key and the times around it.
type FenceRecord struct {
	Key, Holder string
	Fence       uint64
	Acquiring   time.Time // the acquisition call (TryLock, Lock, Do) began
	Acquired    time.Time // it returned (Do: fn started)
	Asked       time.Time // the holder's first successful Fence call began
	Got         time.Time // and returned
}

// A FenceWrite is one write the store was asked to make.
type FenceWrite struct {
	Key, Holder string
	Fence       uint64
	At          time.Time
	Until       time.Time // the holder's validity end as it knew it
	Accepted    bool
	// The highest fence accepted for the key before this write, and whose.
	Top       uint64
	TopHolder string
}

// Valid reports whether the write came before its holder's validity ended.
func (w *FenceWrite) Valid() bool { return w.At.Before(w.Until) }

type fenceTop struct {
	fence  uint64
	holder string
}

// A FenceViolation is one broken guarantee that Check (or Obtained) found.
type FenceViolation struct {
	Kind        string // "backwards", "repeated", "changed", "refused"
	Key         string
	First, Then FenceRecord // A and B; for "refused", the writer is Then
	At          time.Time   // when it showed: B's fence, or the refused write
	Msg         string
}

func (v FenceViolation) String() string { return v.Msg }

// NewFenceStore returns an empty store. Times print relative to h's start
// when h is not nil, and the store notes each fence and each refused write
// in h, so that its excerpts show them among the faults; otherwise
// relative to now.
func NewFenceStore(h *History) *FenceStore {
	s := &FenceStore{origin: time.Now(), hist: h, top: map[string]fenceTop{}, byHolder: map[string]*FenceRecord{}}
	if h != nil {
		s.origin = h.origin
	}
	return s
}

// Obtained records that r.Holder obtained r.Fence for r.Key. A holder that
// asks again records the same fence again, which changes nothing; a
// different fence is a violation ("changed").
func (s *FenceStore) Obtained(r FenceRecord) {
	s.mu.Lock()
	prev := s.byHolder[r.Holder]
	if prev == nil {
		rec := r
		s.byHolder[r.Holder] = &rec
		s.records = append(s.records, &rec)
	} else if prev.Fence != r.Fence || prev.Key != r.Key {
		s.changed = append(s.changed, FenceViolation{
			Kind: "changed", Key: r.Key, First: *prev, Then: r, At: r.Got,
			Msg: fmt.Sprintf("key %q: holder %s obtained fence %d at %v, then fence %d (key %q) at %v: one lock, two fences",
				prev.Key, r.Holder, prev.Fence, s.at(prev.Got), r.Fence, r.Key, s.at(r.Got)),
		})
	}
	s.mu.Unlock()
	if s.hist != nil && prev == nil {
		s.hist.NoteKey(r.Key, "fence %d for %s (Fence called %v, acquisition began %v)", r.Fence, r.Holder, s.at(r.Asked), s.at(r.Acquiring))
	}
}

// Write is the protected write of holder with fence to key, by a holder
// valid until until: it is accepted (true) if fence is above the highest
// fence accepted for key, or equal to it and from the same holder.
func (s *FenceStore) Write(key, holder string, fence uint64, until time.Time) bool {
	s.mu.Lock()
	at := time.Now()
	top, ok := s.top[key]
	accepted := !ok || fence > top.fence || (fence == top.fence && holder == top.holder)
	w := &FenceWrite{Key: key, Holder: holder, Fence: fence, At: at, Until: until, Accepted: accepted, Top: top.fence, TopHolder: top.holder}
	s.writes = append(s.writes, w)
	if accepted {
		s.top[key] = fenceTop{fence, holder}
	}
	s.mu.Unlock()
	if !accepted && s.hist != nil {
		valid := "past its validity"
		if w.Valid() {
			valid = "still valid"
		}
		s.hist.NoteKey(key, "store refused %s's write of fence %d (%s): %s wrote %d", holder, fence, valid, top.holder, top.fence)
	}
	return accepted
}

// Check returns every violation (see FenceStore), in order of when each
// showed. Call it once the holders are done.
func (s *FenceStore) Check() []FenceViolation {
	out, _ := s.check()
	return out
}

func (s *FenceStore) check() (out []FenceViolation, st FenceStats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out = append(out, s.changed...)
	byKey := map[string][]*FenceRecord{}
	for _, r := range s.records {
		byKey[r.Key] = append(byKey[r.Key], r)
	}
	st.Keys, st.Fences, st.Losses = len(byKey), len(s.records), len(s.losses)
	for _, key := range slicesSortedKeys(byKey) {
		rs := byKey[key]
		slices.SortFunc(rs, func(a, b *FenceRecord) int { return a.Got.Compare(b.Got) })
		out = append(out, s.repeated(key, rs)...)
		out = append(out, s.backwards(key, rs, &st)...)
	}
	out = append(out, s.refused(&st)...)
	slices.SortStableFunc(out, func(a, b FenceViolation) int { return a.At.Compare(b.At) })
	return out, st
}

// repeated is the violations of key's records rs (in order of return)
// where two holders obtained one fence.
func (s *FenceStore) repeated(key string, rs []*FenceRecord) (out []FenceViolation) {
	byFence := map[uint64][]*FenceRecord{}
	for _, r := range rs {
		byFence[r.Fence] = append(byFence[r.Fence], r)
	}
	for _, same := range byFence {
		for i, a := range same {
			for _, b := range same[i+1:] {
				if s.excusedEither(a, b) {
					continue
				}
				first, then := a, b
				if b.Asked.Before(a.Asked) {
					first, then = b, a
				}
				out = append(out, FenceViolation{
					Kind: "repeated", Key: key, First: *first, Then: *then, At: b.Got,
					Msg: fmt.Sprintf("key %q: fence %d obtained by two holders: %s and %s", key, a.Fence, s.describe(first), s.describe(then)),
				})
			}
		}
	}
	return out
}

// backwards is the violations of key's records rs (in order of return)
// where a fence went backwards, over ordered pairs: a's Fence returned
// before b's began (the a's of b are a prefix of rs). One violation per b,
// against the highest fence it fell under; st counts the pairs.
func (s *FenceStore) backwards(key string, rs []*FenceRecord, st *FenceStats) (out []FenceViolation) {
	for _, b := range rs {
		var worst *FenceRecord
		for i, a := range rs {
			if !a.Got.Before(b.Asked) {
				break
			}
			successive := i+1 == len(rs) || !rs[i+1].Got.Before(b.Asked)
			st.Pairs++
			if successive {
				st.Successive++
			}
			if s.excused(a, b) {
				st.Excused++
				if successive {
					st.SuccessiveExcused++
				}
				continue
			}
			if b.Fence < a.Fence && (worst == nil || a.Fence > worst.Fence) {
				worst = a
			}
		}
		if a := worst; a != nil {
			order := "its Fence call began after A's returned"
			if a.Got.Before(b.Acquiring) {
				order = "its acquisition began after A's Fence returned"
			}
			out = append(out, FenceViolation{
				Kind: "backwards", Key: key, First: *a, Then: *b, At: b.Got,
				Msg: fmt.Sprintf("key %q: fence went backwards: B = %s got fence %d, below A = %s's %d, though %s",
					key, s.describe(b), b.Fence, s.describe(a), a.Fence, order),
			})
		}
	}
	return out
}

// refused is the violations where the store refused a valid holder's
// write; st counts the writes.
func (s *FenceStore) refused(st *FenceStats) (out []FenceViolation) {
	for _, w := range s.writes {
		st.Writes++
		if w.Accepted {
			st.Accepted++
			continue
		}
		st.Refused++
		if !w.Valid() {
			st.RefusedStale++
			continue
		}
		writer, top := s.byHolder[w.Holder], s.byHolder[w.TopHolder]
		if writer != nil && top != nil && s.excusedEither(writer, top) {
			continue // the writer's fence may have fallen under the top's through the loss
		}
		v := FenceViolation{Kind: "refused", Key: w.Key, At: w.At,
			Msg: fmt.Sprintf("key %q: the store refused %s's write of fence %d at %v, while it was valid until %v: %s had written %d",
				w.Key, w.Holder, w.Fence, s.at(w.At), s.at(w.Until), w.TopHolder, w.Top)}
		if writer != nil {
			v.Then = *writer
		}
		if top != nil {
			v.First = *top
		}
		out = append(out, v)
	}
	return out
}
