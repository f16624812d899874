// Fence against tampered counters, a second caller's ctx and Cluster ACLs:
// regressions from an adversarial review.

package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/redistest"
	"github.com/redlock-go/redlock/internal/script"
)

// A counter seeded high (a migration from another fencing scheme, e.g. a
// nanosecond timestamp) must not go through a Lua number (a double) on its
// way back: above 2^53 two holders got the same fence (found by an
// adversarial review).
func TestFenceCounterPast2To53StillGrows(t *testing.T) {
	r := startReal(t, 5)
	c := r.client()
	const seed = "9007199254740993" // 2^53 + 1
	for i := range 5 {
		if err := r.admin[i].Set(bg, script.FenceKey("k", false), seed, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var last uint64
	for i := range 4 {
		l := mustLock(t, c, "k", time.Minute)
		f, err := l.Fence(bg)
		if err != nil {
			t.Fatalf("holder %d: %v", i, err)
		}
		ctr, _ := r.admin[0].Get(bg, script.FenceKey("k", false)).Result()
		t.Logf("holder %d: fence %d, counter on master 0 %s", i, f, ctr)
		if f <= last {
			t.Errorf("holder %d: fence %d is not above the previous holder's %d", i, f, last)
		}
		last = f
		if err := l.Unlock(bg); err != nil {
			t.Fatal(err)
		}
		settle(c)
	}
}

// Someone SET the counter to a negative number. The lock is held on every
// master: Fence must not report ErrNotHeld (the lock is gone), but an error
// that says what is wrong.
func TestFenceOfATamperedCounterIsAnErrorNotNotHeld(t *testing.T) {
	r := startReal(t, 5)
	c := r.client()
	for i := range 5 {
		if err := r.admin[i].Set(bg, script.FenceKey("k", false), "-1", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	l := mustLock(t, c, "k", time.Minute)
	f, err := l.Fence(bg)
	t.Logf("Fence = %d, %v; key held on %d masters, Until in %v", f, err, r.count("k", l.Token()), time.Until(l.Until()).Round(time.Second))
	if errors.Is(err, ErrNotHeld) || !errors.Is(err, ErrNotObtained) || !strings.Contains(err.Error(), "not a positive integer") {
		t.Errorf("Fence with a counter of -1 everywhere = %d, %v; want ErrNotObtained naming the counter", f, err)
	}
	// And the lock itself still extends fine.
	if err := l.Extend(bg, time.Minute); err != nil {
		t.Fatalf("Extend: %v", err)
	}
}

// A second Fence with a short ctx waiting behind a first one whose masters
// are slow (here held for 1 s) returns when its ctx ends.
func TestFenceWaitingForAnotherHonoursItsCtx(t *testing.T) {
	r := startReal(t, 5)
	c := r.client(WithNodeTimeout(2 * time.Second))
	l := mustLock(t, c, "k", time.Minute)
	gate := make(chan struct{})
	arrived := make(chan struct{}, 5)
	hookAll(r.clients, &scriptHook{script: script.Fence, before: func(context.Context) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		<-gate
	}})
	go func() { _, _ = l.Fence(bg) }()
	<-arrived
	ctx, cancel := context.WithTimeout(bg, 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	go func() { time.Sleep(time.Second); close(gate) }()
	f, err := l.Fence(ctx)
	took := time.Since(start)
	if took > 500*time.Millisecond || !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Fence with a 20ms ctx returned (%d, %v) after %v; want ErrNotObtained and DeadlineExceeded at once", f, err, took.Round(time.Millisecond))
	}
}

// The README's ACL for Fence on Redis Cluster masters, where the counter of
// lk:42 is {lk:42}:redlock-fence.
func TestFenceUnderTheREADMEsACLOnClusterMasters(t *testing.T) {
	var clients []redis.UniversalClient
	for range 3 {
		cl := redistest.StartCluster(t, 1)
		a := cl.Masters[0].Client(nil)
		args := []any{"ACL", "SETUSER", "u", "reset", "on", ">pw"}
		for _, rule := range append(slices.Clone(aclWithoutNotices), "+incr", "~{lk:*", "+cluster", "+command", "+ping", "+info") {
			args = append(args, rule)
		}
		if err := a.Do(bg, args...).Err(); err != nil {
			t.Fatal(err)
		}
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Username: "u", Password: "pw"})
		t.Cleanup(func() { _ = cc.Close() })
		clients = append(clients, cc)
	}
	c, err := New(clients, WithoutNotices())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	l, err := c.TryLock(bg, "lk:42", time.Minute)
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	if err := l.Extend(bg, time.Minute); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	f, err := l.Fence(bg)
	t.Logf("Fence = %d, %v", f, err)
	if err != nil {
		t.Errorf("Fence under the README's ACL (~lk:* ~{lk:* +incr) on Cluster masters: %v", err)
	}
}

// A Fence whose ctx has already ended, with no other Fence running, answers
// as the lock's state says (the cached fence, or ErrNotHeld), never "waiting
// for another Fence" (found by the fault generator: a select between a free
// gate and a done ctx picked either).
func TestFenceWithAnEndedCtxAndNoOtherCall(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client()
	l := mustLock(t, c, "k", time.Minute)
	f, err := l.Fence(bg)
	if err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(bg)
	cancel()
	for range 200 {
		if got, err := l.Fence(done); err != nil || got != f {
			t.Fatalf("cached Fence with an ended ctx = %d, %v; want %d", got, err, f)
		}
	}
	if err := l.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	for range 200 {
		if _, err := l.Fence(done); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("Fence after Unlock with an ended ctx = %v, want ErrNotHeld", err)
		}
	}
}
