package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// A job system's hand-over: one process takes the lock, another resumes it
// by its token and finishes the job: extends, fences and unlocks it.
func TestResumeContinuesALockInAnotherClient(t *testing.T) {
	r := startReal(t, 5)
	first, worker := r.client(), r.client()
	l, err := first.TryLock(bg, "job:1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	f1, err := l.Fence(bg)
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	l2, err := worker.Resume(bg, "job:1", l.Token(), 2*time.Second)
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	returned := time.Now()
	if l2.Key() != "job:1" || l2.Token() != l.Token() {
		t.Fatalf("resumed lock is %q/%q, want job:1/%s", l2.Key(), l2.Token(), l.Token())
	}
	// Validity counts from the resume round's start, for the TTL Resume
	// asked, not the key's longer TTL.
	earliest, latest := validUntil(before, 2*time.Second, DefaultDriftFactor), validUntil(returned, 2*time.Second, DefaultDriftFactor)
	if u := l2.Until(); u.Before(earliest) || u.After(latest) {
		t.Fatalf("Until is %v after Resume began, want ttl − drift from the round's start (%v)", u.Sub(before), earliest.Sub(before))
	}
	r.assertUntilTrue(l2)
	if f2, err := l2.Fence(bg); err != nil || f2 <= f1 {
		t.Fatalf("resumed lock's Fence = %d, %v; want above the first holder's %d", f2, err, f1)
	}
	if err := l2.Extend(bg, 3*time.Second); err != nil {
		t.Fatalf("Extend of the resumed lock: %v", err)
	}
	r.assertUntilTrue(l2)
	if err := l2.Unlock(bg); err != nil {
		t.Fatalf("Unlock of the resumed lock: %v", err)
	}
	settle(worker) // Unlock returns at a majority; the last release may be in flight
	if n := r.count("job:1", l.Token()); n != 0 {
		t.Fatalf("%d masters still hold the token after the resumed lock's Unlock", n)
	}
	// Both Locks were the same lock: the first holder's is gone too.
	if err := l.Extend(bg, time.Minute); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("the first holder's Extend after the resumed lock's Unlock = %v, want ErrNotHeld", err)
	}
	if _, err := first.TryLock(bg, "job:1", time.Second); err != nil {
		t.Fatalf("TryLock after the resumed lock's Unlock: %v", err)
	}
}

// Resume of a token that does not hold the key (another's holds it, it
// was released, it expired, or it holds only a minority) is ErrNotHeld, and
// leaves every master as it was: it never creates, lengthens another's, or
// deletes a key.
func TestResumeOfATokenThatDoesNotHoldTheKeyChangesNothing(t *testing.T) {
	r := startReal(t, 5)
	c := r.client()

	holder := mustLock(t, c, "held", 10*time.Second)
	stranger := uuid.NewString()
	_, err := c.Resume(bg, "held", stranger, time.Minute)
	var qe *QuorumError
	if !errors.Is(err, ErrNotHeld) || !errors.As(err, &qe) || !errors.Is(err, ErrNodeRefused) {
		t.Fatalf("Resume with another's token = %v, want ErrNotHeld with the masters' refusals", err)
	}
	settle(c) // a refusal Resume did not wait for has landed
	if n := r.count("held", holder.Token()); n != 5 {
		t.Fatalf("the holder's key is on %d masters after a stranger's Resume, want 5", n)
	}
	for i, d := range r.pttls("held") {
		if d > 10*time.Second {
			t.Fatalf("master %d: the holder's key was lengthened to %v by a stranger's Resume", i, d)
		}
	}

	released, err := c.TryLock(bg, "released", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := released.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	settle(c) // Unlock returns at a majority: the last release may be in flight
	if _, err := c.Resume(bg, "released", released.Token(), time.Minute); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Resume of a released lock = %v, want ErrNotHeld", err)
	}
	settle(c) // a reply Resume did not wait for has landed
	if n := r.count("released", released.Token()); n != 0 {
		t.Fatalf("Resume re-created a released key on %d masters", n)
	}

	minority, err := c.TryLock(bg, "minority", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	settle(c)          // the SETs a majority did not wait for have landed
	for i := range 3 { // as if three masters lost it
		if err := r.admin[i].Del(bg, "minority").Err(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Resume(bg, "minority", minority.Token(), time.Minute); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Resume of a token two masters of five hold = %v, want ErrNotHeld", err)
	}
	settle(c)
	if got := r.values("minority"); got[0] != "" || got[1] != "" || got[2] != "" {
		t.Fatalf("Resume re-created the key where it was lost: %q", got)
	}

	short, err := c.TryLock(bg, "expired", scaled(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	<-short.Done()
	for bound := time.Now().Add(scaled(5 * time.Second)); r.count("expired", short.Token()) > 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(bound) {
			t.Fatalf("the key did not expire: PTTLs %v", r.pttls("expired"))
		}
	}
	if _, err := c.Resume(bg, "expired", short.Token(), time.Minute); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Resume of an expired lock = %v, want ErrNotHeld: %q, PTTLs %v", err, r.values("expired"), r.pttls("expired"))
	}
	settle(c)
	if n := r.count("expired", short.Token()); n != 0 {
		t.Fatalf("Resume re-created an expired key on %d masters", n)
	}
}

// A Resume that a majority refused (the token is gone from them) leaves
// no key of that token behind, even where it lengthened one: no lock
// holds the token any more, and nobody would release it. (Found by an
// adversary pass: the minority's keys lived on for the Resume's TTL, an
// hour, and with one free master down nobody could take the key.)
func TestFailedResumeLeavesNoLongerKey(t *testing.T) {
	r := startReal(t, 5)
	c := r.client()
	l := mustLock(t, c, "k", 10*time.Second)
	for i := range 3 { // as if three masters lost it
		if err := r.admin[i].Del(bg, "k").Err(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Resume(bg, "k", l.Token(), time.Hour); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Resume of a token three masters of five lost = %v, want ErrNotHeld", err)
	}
	settle(c)
	for i, d := range r.pttls("k") {
		if d > 10*time.Second {
			t.Fatalf("master %d: the failed Resume left the key for another %v: PTTLs %v", i, d, r.pttls("k"))
		}
	}
}

// A Resume whose ctx ends, or that meets a majority of hung masters, is
// ErrNotHeld (with ctx's error) within the node deadline, and leaves the
// first holder's lock held.
func TestResumeThatCannotReachAMajorityLeavesTheLockToItsHolder(t *testing.T) {
	r := startReal(t, 5)
	c := r.client(WithNodeTimeout(scaled(100 * time.Millisecond)))
	l, err := c.TryLock(bg, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	settle(c) // the SETs a majority did not wait for have landed
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if _, err := c.Resume(ctx, "k", l.Token(), time.Second); !errors.Is(err, ErrNotHeld) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Resume with an ended ctx = %v, want ErrNotHeld and context.Canceled", err)
	}
	for i := 2; i < 5; i++ {
		r.servers[i].Pause()
	}
	start := time.Now()
	_, err = c.Resume(bg, "k", l.Token(), time.Second)
	if !errors.Is(err, ErrNotHeld) || !errors.Is(err, ErrNodeTimeout) {
		t.Fatalf("Resume with three masters of five hung = %v, want ErrNotHeld with their timeouts", err)
	}
	if took := time.Since(start); took > scaled(100*time.Millisecond)+scaled(time.Second) {
		t.Fatalf("Resume took %v against hung masters, past its node deadline", took)
	}
	for i := 2; i < 5; i++ {
		r.servers[i].Resume()
	}
	if n := r.count("k", l.Token()); n != 5 {
		t.Fatalf("the holder's key is on %d masters after failed Resumes, want 5: %q, PTTLs %v", n, r.values("k"), r.pttls("k"))
	}
	if err := l.Extend(bg, 10*time.Second); err != nil {
		t.Fatalf("the holder's Extend after failed Resumes: %v", err)
	}
}

func TestResumeRejectsBadInput(t *testing.T) {
	r := startReal(t, 3)
	c := r.client()
	token := uuid.NewString()
	for _, tc := range []struct {
		name       string
		ctx        context.Context
		key, token string
		ttl        time.Duration
	}{
		{"nil ctx", nil, "k", token, time.Second},
		{"empty key", bg, "", token, time.Second},
		{"zero ttl", bg, "k", token, 0},
		{"empty token", bg, "k", "", time.Second},
		{"not a token", bg, "k", "not-a-token", time.Second},
		{"an upper-case token", bg, "k", strings.ToUpper(token), time.Second},
		{"a marked token", bg, "k", token + "~", time.Second},
		{"a token in braces", bg, "k", "{" + token + "}", time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := c.Resume(tc.ctx, tc.key, tc.token, tc.ttl)
			if l != nil || !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("Resume = %v, %v; want ErrInvalidArgument", l, err)
			}
		})
	}
	_ = c.Close()
	if _, err := c.Resume(bg, "k", token, time.Second); !errors.Is(err, ErrClosed) {
		t.Fatalf("Resume after Close = %v, want ErrClosed", err)
	}
}
