// The -fence mode: Kleppmann's scenario on the demo's timeline. Holder A is
// paused past its lock's validity and then writes with its stale fence,
// once to a record that checks fences and once to one that does not.

package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redlock-go/redlock"
)

// fenceTTL is -ttl's default with -fence: A's lock, which its pause outlasts.
const fenceTTL = 300 * time.Millisecond

// fencedRecord is the record behind a storage service. With check set it
// keeps the highest fence it accepted and refuses a write with a lower one,
// or with that one from another writer, atomically with the write: here
// under one mutex, in a real store in the same conditional update or
// transaction as the write (a check made beforehand is the race again).
type fencedRecord struct {
	check bool

	mu     sync.Mutex
	value  string
	fence  uint64 // of the accepted write that set value
	writer string // its lock token
}

// write sets the record to value for writer, which holds fence.
func (r *fencedRecord) write(value, writer string, fence uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.check && (fence < r.fence || fence == r.fence && writer != r.writer) {
		return fmt.Errorf("stale fence %d: the record already accepted fence %d", fence, r.fence)
	}
	r.value, r.fence, r.writer = value, fence, writer
	return nil
}

// read returns the record's value and the fence it was written with.
func (r *fencedRecord) read() (string, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.value, r.fence
}

// fenceStory is one telling of the scenario: its record, the signals that
// order it, and what it showed. A and B each set their own fields.
type fenceStory struct {
	record  *fencedRecord
	aPaused chan struct{} // A has its fence and pauses
	bWrote  chan struct{} // B's write was accepted
	aWrote  chan struct{} // A's late write was answered

	fenceA, fenceB  uint64
	untilA, lockedB time.Time
	lateWrite       error // the record's answer to A's late write
	final           string
	finalFence      uint64
}

// runFence tells the story twice, with a record that checks fences and
// with one that does not, and prints the summary. Holder A is the demo's
// Client; holder B another Client, as another process would be.
func (d *demo) runFence(ctx context.Context) error {
	b, err := newLockClient(d.m, d.o.ttl)
	if err != nil {
		return err
	}
	defer func() { _ = b.Close() }()
	var stories []*fenceStory
	for _, check := range []bool{true, false} {
		what := "the record checks fences"
		if !check {
			what = "control: the record does not check fences"
		}
		d.say("%s", what)
		s := &fenceStory{record: &fencedRecord{check: check},
			aPaused: make(chan struct{}), bWrote: make(chan struct{}), aWrote: make(chan struct{})}
		if err := d.tellFence(ctx, b, s); err != nil {
			return err
		}
		stories = append(stories, s)
	}
	d.fenceSummary(stories)
	return nil
}

// tellFence runs holder A on the demo's Client and holder B on b, and
// reads the record once both are done.
func (d *demo) tellFence(ctx context.Context, b *redlock.Client, s *fenceStory) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errB := make(chan error, 1)
	go func() {
		err := d.fenceHolderB(ctx, b, s)
		if err != nil {
			cancel() // A must not wait for a write that will not come
		}
		errB <- err
	}()
	errA := d.fenceHolderA(ctx, s)
	if errA != nil {
		cancel()
	}
	if err := errors.Join(errA, <-errB); err != nil {
		return err
	}
	s.final, s.finalFence = s.record.read()
	return nil
}

// fenceHolderA takes the lock and its fence, pauses until its validity
// ended and B wrote, then writes with the fence it got before the pause.
func (d *demo) fenceHolderA(ctx context.Context, s *fenceStory) error {
	waitCtx, cancel := context.WithTimeout(ctx, d.o.wait)
	defer cancel()
	l, err := d.c.Lock(waitCtx, resource, d.o.ttl)
	if err != nil {
		return fmt.Errorf("holder A: %w", err)
	}
	defer close(s.aWrote)
	if s.fenceA, err = l.Fence(ctx); err != nil {
		return fmt.Errorf("holder A: fence: %w", err)
	}
	s.untilA = l.Until()
	d.logf("holder A  holds    fence %-4d validity left %-8v then pauses before its write (a GC pause)",
		s.fenceA, time.Until(s.untilA).Round(time.Millisecond))
	close(s.aPaused)
	if err := d.fencePause(ctx, l, s); err != nil {
		return err
	}
	s.lateWrite = s.record.write("A", l.Token(), s.fenceA)
	verdict := "accepted: it overwrites B's write"
	if s.lateWrite != nil {
		verdict = "REJECTED: " + s.lateWrite.Error()
	}
	d.logf("holder A  resumes  %v after its validity ended; writes with fence %d: %s",
		time.Since(s.untilA).Round(time.Millisecond), s.fenceA, verdict)
	if err := l.Unlock(context.Background()); errors.Is(err, redlock.ErrNotHeld) {
		d.logf("holder A  unlock   fails: the lock was not held (ErrNotHeld)")
	} else if err != nil {
		return fmt.Errorf("holder A: unlock: %w", err)
	}
	return nil
}

// fencePause is A's simulated GC pause. A real one waits on nothing; this
// one lasts until A's validity ended and B, the next holder, wrote.
func (d *demo) fencePause(ctx context.Context, l *redlock.Lock, s *fenceStory) error {
	select {
	case <-l.Done():
		d.logf("holder A  validity ended (Done closed) while it is paused")
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-s.bWrote:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// fenceHolderB waits for the lock A holds, writes with its own fence, and
// keeps the lock until A's late write was answered.
func (d *demo) fenceHolderB(ctx context.Context, b *redlock.Client, s *fenceStory) error {
	select {
	case <-s.aPaused:
	case <-ctx.Done():
		return ctx.Err()
	}
	d.logf("holder B  waits    for the lock A holds")
	t0 := time.Now()
	waitCtx, cancel := context.WithTimeout(ctx, d.o.ttl+d.o.wait)
	defer cancel()
	l, err := b.Lock(waitCtx, resource, d.o.ttl)
	if err != nil {
		return fmt.Errorf("holder B: %w", err)
	}
	s.lockedB = time.Now()
	if s.fenceB, err = l.Fence(ctx); err != nil {
		return fmt.Errorf("holder B: fence: %w", err)
	}
	d.logf("holder B  holds    fence %-4d waited %v", s.fenceB, time.Since(t0).Round(time.Millisecond))
	if err := s.record.write("B", l.Token(), s.fenceB); err != nil {
		return fmt.Errorf("holder B: write: %w", err)
	}
	d.logf("holder B  writes   with fence %d: accepted", s.fenceB)
	close(s.bWrote)
	select {
	case <-s.aWrote:
	case <-ctx.Done():
	}
	d.logf("holder B  releases")
	if err := l.Unlock(context.Background()); err != nil {
		return fmt.Errorf("holder B: unlock: %w", err)
	}
	return nil
}

// fenceSummary says what each telling showed, and whether fencing held:
// the checking record refused A's stale write and kept B's.
func (d *demo) fenceSummary(stories []*fenceStory) {
	d.mu.Lock()
	defer d.mu.Unlock()
	w := d.out
	fmt.Fprintf(w, "\nsummary\n")
	held := true
	for _, s := range stories {
		name := "record checking fences:"
		if !s.record.check {
			name = "record without the check:"
		}
		outcome := fmt.Sprintf("stale write (fence %d) REJECTED; record keeps B's write (fence %d)", s.fenceA, s.finalFence)
		if s.lateWrite == nil {
			outcome = fmt.Sprintf("stale write (fence %d) LANDED over B's (fence %d): B's update lost", s.fenceA, s.fenceB)
		}
		fmt.Fprintf(w, "  %-26s%s\n", name, outcome)
		fmt.Fprintf(w, "  %-26sB after A's validity ended: %v; fence B > fence A: %v\n", "",
			s.lockedB.After(s.untilA), s.fenceB > s.fenceA)
		if s.record.check && (s.lateWrite == nil || s.final != "B") {
			held = false
		}
	}
	if held {
		fmt.Fprintf(w, "  fencing held: the paused holder's stale write was rejected\n")
	} else {
		fmt.Fprintf(w, "  FENCING FAILED: the paused holder's stale write landed on the checking record\n")
	}
}
