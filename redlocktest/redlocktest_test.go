package redlocktest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redlocktest"
)

// recorder is a testing.TB that records failures instead of failing.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func TestAssertHeldAndAssertFreeSeeTheMasters(t *testing.T) {
	m := redlocktest.Start(t, 5)
	c := m.NewClient(t)
	ctx := context.Background()
	l, err := c.Lock(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var r recorder
	m.AssertHeld(&r, l)
	m.AssertFree(&r, "other")
	if len(r.errs) != 0 {
		t.Fatalf("a held lock and a free key: %q", r.errs)
	}
	m.AssertFree(&r, "k")
	if len(r.errs) < 3 {
		t.Errorf("AssertFree of a key held on a majority reported %q, want a failure per master", r.errs)
	}
	r.errs = nil
	m.Expire("k")
	m.AssertHeld(&r, l)
	if len(r.errs) != 1 {
		t.Errorf("AssertHeld of an expired lock reported %q, want one failure", r.errs)
	}
	if err := l.Unlock(ctx); !errors.Is(err, redlock.ErrNotHeld) {
		t.Errorf("Unlock after Expire: %v, want ErrNotHeld", err)
	}
}

func TestAMinorityDownKeepsTheLockAndUpBringsItsDataBack(t *testing.T) {
	m := redlocktest.Start(t, 5)
	c := m.NewClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Lock(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	m.Down(0)
	m.Down(1)
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatalf("Extend with 3 of 5 up: %v", err)
	}
	if v := m.Votes("k", l.Token()); v < 3 {
		t.Errorf("Votes = %d, want a majority (a Down master keeps its data)", v)
	}
	m.Down(2)
	if err := l.Extend(ctx, time.Minute); err == nil {
		t.Error("Extend with 2 of 5 up succeeded")
	}
	m.Up(0)
	m.Up(1)
	m.Up(2)
	if _, err := c.Lock(ctx, "other", time.Minute); err != nil {
		t.Errorf("Lock with every master Up again: %v", err)
	}
}

func TestPauseTimesAMasterOutUntilResumed(t *testing.T) {
	m := redlocktest.Start(t, 3)
	c := m.NewClient(t, redlock.WithNodeTimeout(50*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resume := m.Pause(0)
	m.Pause(1) // left paused: the test's end releases it
	_, err := c.TryLock(ctx, "k", time.Minute)
	if !errors.Is(err, redlock.ErrNotObtained) || !errors.Is(err, redlock.ErrNodeTimeout) {
		t.Fatalf("TryLock with 2 of 3 paused: %v, want ErrNotObtained and ErrNodeTimeout", err)
	}
	resume()
	resume() // a second call is harmless
	l, err := c.Lock(ctx, "k2", time.Minute)
	if err != nil {
		t.Fatalf("Lock with 2 of 3 answering: %v", err)
	}
	m.AssertHeld(t, l)
}

func TestLatencyOverTheNodeTimeoutIsATimeout(t *testing.T) {
	m := redlocktest.Start(t, 3)
	c := m.NewClient(t, redlock.WithNodeTimeout(50*time.Millisecond))
	for i := range 3 {
		m.Latency(i, 300*time.Millisecond)
	}
	_, err := c.TryLock(context.Background(), "k", time.Minute)
	if !errors.Is(err, redlock.ErrNodeTimeout) {
		t.Fatalf("TryLock with every master slower than the node timeout: %v, want ErrNodeTimeout", err)
	}
	for i := range 3 {
		m.Latency(i, 0)
	}
	// Commands already sent still drain their delay: Lock retries past them.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Lock(ctx, "k", time.Minute); err != nil {
		t.Fatalf("Lock once the latency is gone: %v", err)
	}
}

func TestAMasterThatLostItsDataSitsTheGuardOut(t *testing.T) {
	m := redlocktest.Start(t, 3)
	c := m.NewClient(t, redlock.WithRestartGuard(time.Minute))
	ctx := context.Background()
	m.LoseData(0)
	m.Down(1)
	// Masters 0 (new memory) and 2 answer: 0's vote is set aside for the
	// guard, so no majority.
	_, err := c.TryLock(ctx, "k", time.Second)
	if !errors.Is(err, redlock.ErrNotObtained) || !errors.Is(err, redlock.ErrNodeQuarantined) {
		t.Fatalf("TryLock with a restarted master and one down: %v, want ErrNotObtained and ErrNodeQuarantined", err)
	}
	_ = c.Close() // waits for the failed attempt's releases
	m.AssertFree(t, "k")
}

func TestStealKeepsOthersOutAndDoReportsTheLoss(t *testing.T) {
	m := redlocktest.Start(t, 5)
	c := m.NewClient(t)
	ctx := context.Background()
	err := c.Do(ctx, "k", 300*time.Millisecond, func(ctx context.Context) error {
		m.Steal("k", time.Minute)
		<-ctx.Done()
		return nil
	})
	if !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Do whose key was stolen: %v, want ErrLockLost", err)
	}
	if v := m.Votes("k", redlocktest.StolenToken); v != 5 {
		t.Errorf("the stolen key is on %d masters, want 5", v)
	}
	if _, err := c.TryLock(ctx, "k", time.Minute); !errors.Is(err, redlock.ErrNotObtained) {
		t.Errorf("TryLock of a stolen key: %v, want ErrNotObtained", err)
	}
}

func TestRunRefusesNoMasters(t *testing.T) {
	if _, err := redlocktest.Run(0); err == nil {
		t.Fatal("Run(0) succeeded")
	}
}

// The test docs/testing.md shows.
func TestRefreshStopsWhenTheLockIsLost(t *testing.T) {
	ctx := context.Background()
	masters := redlocktest.Start(t, 5) // stopped when the test ends
	c := masters.NewClient(t)          // redlock.New over them, closed when the test ends
	err := c.Do(ctx, "cache:refresh", time.Second, func(ctx context.Context) error {
		masters.Steal("cache:refresh", time.Minute) // another holder takes the key
		<-ctx.Done()                                // Do ends fn's ctx ...
		return nil
	})
	if !errors.Is(err, redlock.ErrLockLost) { // ... and says so
		t.Fatal(err)
	}
}
