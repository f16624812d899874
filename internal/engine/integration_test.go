package engine

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The integration tier: five real redis-server processes per test, driven
// through go-redis clients with go-redis's default options (3 s read timeout,
// 3 retries), as users run them.

func TestRealAllMasksOfTakenNodes(t *testing.T) {
	r := startReal(t, 5)
	checkAllMasks(t, r.client(), r)
}

// TestRealPausedNodeDoesNotDelayTheLock: one master is SIGSTOPped. go-redis
// would wait 3 s per read on it; TryLock must not.
func TestRealPausedNodeDoesNotDelayTheLock(t *testing.T) {
	r := startReal(t, 5)
	nodeTimeout := 100 * time.Millisecond
	c := r.client(WithNodeTimeout(nodeTimeout))
	r.servers[2].Pause()
	start := time.Now()
	l, err := c.TryLock(bg, "k", 10*time.Second)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("TryLock with one paused node: %v", err)
	}
	if limit := nodeTimeout + scaled(500*time.Millisecond); took > limit {
		t.Fatalf("TryLock took %v with one paused node, want under %v", took, limit)
	}
	if err := l.Unlock(bg); err != nil {
		t.Fatalf("Unlock with one paused node: %v", err)
	}
}

// TestRealPausedNodesFailAtTheNodeDeadline: two masters paused and one
// taken, so only the deadline decides. It must be ours, not the driver's.
func TestRealPausedNodesFailAtTheNodeDeadline(t *testing.T) {
	r := startReal(t, 5)
	nodeTimeout := 100 * time.Millisecond
	c := r.client(WithNodeTimeout(nodeTimeout))
	r.take(0, "k", "other", time.Minute)
	r.servers[3].Pause()
	r.servers[4].Pause()
	start := time.Now()
	_, err := c.TryLock(bg, "k", 10*time.Second)
	took := time.Since(start)
	if !errors.Is(err, ErrNotObtained) || !errors.Is(err, ErrNodeTimeout) {
		t.Fatalf("TryLock: %v, want ErrNotObtained with node timeouts", err)
	}
	if limit := nodeTimeout + scaled(500*time.Millisecond); took < nodeTimeout || took > limit {
		t.Fatalf("TryLock took %v, want between %v and %v", took, nodeTimeout, limit)
	}
	// Once the paused nodes resume, their queued SETs land and are released.
	r.servers[3].Resume()
	r.servers[4].Resume()
	settle(c)
	if r.count("k", "") != 4 {
		t.Fatalf("keys left after the failed attempt: %q", r.values("k"))
	}
}

func TestRealLockMatchesBothSentinelsWhenCtxEnds(t *testing.T) {
	r := startReal(t, 5)
	c := r.client()
	if _, err := c.TryLock(bg, "k", time.Minute); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
	defer cancel()
	_, err := c.Lock(ctx, "k", time.Minute)
	if !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock: %v; want ErrNotObtained and context.DeadlineExceeded", err)
	}
}

func TestRealExtendAfterExpiryIsNotHeldAndLeavesNoKey(t *testing.T) {
	r := startReal(t, 5)
	ttl := scaled(100 * time.Millisecond)
	c := r.client(WithNodeTimeout(ttl / 2))
	l, err := c.TryLock(bg, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	settle(c)
	set := time.Now()
	// Wait until every key has expired on its node: they were all set
	// before set, so by set+ttl+slack Redis has let them go.
	time.Sleep(time.Until(set.Add(ttl + 10*time.Millisecond)))
	if err := l.Extend(bg, time.Minute); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Extend after expiry: %v, want ErrNotHeld", err)
	}
	settle(c)
	if r.count("k", "") != 5 {
		t.Fatalf("Extend re-created the expired key: %q", r.values("k"))
	}
}

func TestRealUnlockAfterTakeoverLeavesTheNewHoldersKeys(t *testing.T) {
	r := startReal(t, 5)
	ttl := scaled(100 * time.Millisecond)
	c := r.client(WithNodeTimeout(ttl / 2))
	first, err := c.TryLock(bg, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	other, err := New(r.clients)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	second, err := other.Lock(context.Background(), "k", time.Minute) // waits until the first expires
	if err != nil {
		t.Fatal(err)
	}
	settle(other)
	held := r.count("k", second.Token())
	if err := first.Unlock(bg); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("stale Unlock: %v, want ErrNotHeld", err)
	}
	settle(c)
	if got := r.count("k", second.Token()); got != held || held < 3 {
		t.Fatalf("stale Unlock touched the new holder's keys: %d before, %d after", held, got)
	}
}

func TestRealContendingGoroutinesNeverOverlap(t *testing.T) {
	r := startReal(t, 5)
	contend(t, r.clients, 16, 10)
}
