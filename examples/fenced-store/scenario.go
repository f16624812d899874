// Kleppmann's scenario, played once against a given store: holder A is
// paused past its lock's validity, holder B takes the lock and writes, and
// then A, resuming, writes with its stale fence.

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/redlock-go/redlock"
)

const (
	item   = "invoice:42" // the lock's key, and the store's item it guards
	valueA = "written by A"
	valueB = "written by B"

	ttlA  = 300 * time.Millisecond // short, so that A's pause outlasts it
	ttlB  = 2 * time.Second
	waitB = 5 * time.Second // at most, for the lock A holds
)

// outcome is what one run of the scenario showed.
type outcome struct {
	fenceA, fenceB uint64
	untilA         time.Time // when A's validity ended
	lockedB        time.Time // when B's Lock returned the lock
	lateWrite      error     // the store's answer to A's write after its pause
	final          string    // the item's value at the end
	finalFence     uint64    // and the fence it was written with
}

// scenario is one run: two holders, as two processes would be, each with
// its own redlock.Client, and the signals that order the story.
type scenario struct {
	a, b  *redlock.Client
	store *Store
	out   io.Writer
	start time.Time
	mu    sync.Mutex // guards out

	aPaused chan struct{} // closed when A has its fence and pauses
	bWrote  chan struct{} // closed when B's write was accepted
	aWrote  chan struct{} // closed when A's late write was answered

	o outcome // A and B each set their own fields; read after both ended
}

// play runs the scenario once, narrating it to out, and returns what
// happened. a and b must be Clients on the same masters.
func play(ctx context.Context, a, b *redlock.Client, store *Store, out io.Writer) (outcome, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := &scenario{
		a: a, b: b, store: store, out: out, start: time.Now(),
		aPaused: make(chan struct{}), bWrote: make(chan struct{}), aWrote: make(chan struct{}),
	}
	errB := make(chan error, 1)
	go func() {
		err := s.holderB(ctx)
		if err != nil {
			cancel() // A must not wait for a write that will not come
		}
		errB <- err
	}()
	errA := s.holderA(ctx)
	if errA != nil {
		cancel()
	}
	if err := errors.Join(errA, <-errB); err != nil {
		return s.o, err
	}
	s.o.final, s.o.finalFence, _ = store.Read(item)
	return s.o, nil
}

// logf prints one timeline line: the time since the run began, who acts,
// and what happens.
func (s *scenario) logf(who, format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.out, "%7.3fs  %-5s  ", time.Since(s.start).Seconds(), who)
	fmt.Fprintf(s.out, format+"\n", args...)
}

// holderA takes the lock, gets its fence, checks its validity, pauses past
// it, and then writes with the fence it got before the pause.
func (s *scenario) holderA(ctx context.Context) error {
	l, err := s.a.Lock(ctx, item, ttlA)
	if err != nil {
		return fmt.Errorf("holder A: lock: %w", err)
	}
	defer close(s.aWrote)
	fence, err := l.Fence(ctx)
	if err != nil {
		return fmt.Errorf("holder A: fence: %w", err)
	}
	s.o.fenceA, s.o.untilA = fence, l.Until()
	s.logf("A", "takes the lock for %v and gets fence %d", ttlA, fence)
	s.logf("A", "checks: still valid for %v, so it starts its write ... and pauses (a GC pause, simulated)",
		time.Until(l.Until()).Round(time.Millisecond))
	close(s.aPaused)

	if err := s.pause(ctx, l); err != nil {
		return err
	}
	s.logf("A", "resumes, %v after its validity ended, and writes %q with fence %d",
		time.Since(l.Until()).Round(time.Millisecond), valueA, fence)
	s.o.lateWrite = s.store.Write(item, valueA, l.Token(), fence)
	if s.o.lateWrite != nil {
		s.logf("store", "REJECTS A's write: %v", s.o.lateWrite)
	} else {
		s.logf("store", "accepts A's write: it overwrites B's, while B holds the lock")
	}
	if err := l.Unlock(ctx); errors.Is(err, redlock.ErrNotHeld) {
		s.logf("A", "Unlock: the lock was not held (ErrNotHeld): A learns it too late")
	} else if err != nil {
		return fmt.Errorf("holder A: unlock: %w", err)
	}
	return nil
}

// pause is A's simulated GC pause. A real pause waits on nothing and can
// last any time; this one lasts until the two events that make the story
// have happened: A's validity ended (Done is closed), and B, the next
// holder, wrote.
func (s *scenario) pause(ctx context.Context, l *redlock.Lock) error {
	select {
	case <-l.Done():
	case <-ctx.Done():
		return ctx.Err()
	}
	s.logf("", "A's validity ends (Done is closed, Until has passed); A is paused and cannot notice")
	select {
	case <-s.bWrote:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// holderB is another process: once A has paused, it asks for the lock,
// waits until it can have it, gets a fence, writes, and keeps the lock
// until A's late write was answered.
func (s *scenario) holderB(ctx context.Context) error {
	select {
	case <-s.aPaused:
	case <-ctx.Done():
		return ctx.Err()
	}
	s.logf("B", "asks for the lock; A holds it, so B waits")
	t0 := time.Now()
	waitCtx, cancel := context.WithTimeout(ctx, waitB)
	defer cancel()
	l, err := s.b.Lock(waitCtx, item, ttlB)
	if err != nil {
		return fmt.Errorf("holder B: lock: %w", err)
	}
	s.o.lockedB = time.Now()
	fence, err := l.Fence(ctx)
	if err != nil {
		return fmt.Errorf("holder B: fence: %w", err)
	}
	s.o.fenceB = fence
	s.logf("B", "takes the lock after waiting %v, and gets fence %d", time.Since(t0).Round(time.Millisecond), fence)
	if err := s.store.Write(item, valueB, l.Token(), fence); err != nil {
		return fmt.Errorf("holder B: write: %w", err)
	}
	s.logf("store", "accepts B's write %q with fence %d", valueB, fence)
	close(s.bWrote)
	select {
	case <-s.aWrote:
	case <-ctx.Done():
	}
	if err := l.Unlock(ctx); err != nil {
		return fmt.Errorf("holder B: unlock: %w", err)
	}
	s.logf("B", "releases the lock")
	return nil
}
