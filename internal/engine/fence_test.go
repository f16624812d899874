package engine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/redistest"
	"github.com/redlock-go/redlock/internal/script"
)

// Fences of one key grow from holder to holder, and one holder gets the
// same fence each time it asks.
func TestFenceGrowsFromHolderToHolder(t *testing.T) {
	r := startReal(t, 5)
	c := r.client()
	var last uint64
	for i := range 10 {
		l := mustLock(t, c, "k", time.Minute)
		f, err := l.Fence(bg)
		if err != nil {
			t.Fatalf("holder %d: Fence: %v", i, err)
		}
		if f <= last {
			t.Fatalf("holder %d: fence %d, not above the previous holder's %d", i, f, last)
		}
		if again, err := l.Fence(bg); err != nil || again != f {
			t.Fatalf("holder %d: second Fence = %d, %v; want %d again", i, again, err, f)
		}
		last = f
		if err := l.Unlock(bg); err != nil {
			t.Fatal(err)
		}
	}
}

// The write-back: when the counters of a lock's majority differ, the fence
// is the largest and is written back to a majority before Fence returns, so
// a later holder whose majority shares only one master with this one's
// still gets a larger fence. A holds masters 0-2, and master 0's counter
// has a longer history; B then holds 2-4. Without the write-back B's fence
// would be 2, under A's 101.
func TestFenceIsAboveAnEarlierHoldersAcrossDifferentMajorities(t *testing.T) {
	r := startReal(t, 5)
	c := r.client()
	for i := range 5 { // counters with different histories
		v := 0
		if i == 0 {
			v = 100
		}
		if err := r.admin[i].Set(bg, script.FenceKey("k", false), v, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	r.take(3, "k", "other", time.Minute)
	r.take(4, "k", "other", time.Minute)
	a := mustLock(t, c, "k", time.Minute)
	fa, err := a.Fence(bg)
	if err != nil || fa != 101 {
		t.Fatalf("A's Fence = %d, %v; want 101", fa, err)
	}
	if err := a.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	settle(c)
	for i := range 5 {
		if err := r.admin[i].Del(bg, "k").Err(); err != nil {
			t.Fatal(err)
		}
	}
	r.take(0, "k", "other", time.Minute)
	r.take(1, "k", "other", time.Minute)
	b := mustLock(t, c, "k", time.Minute)
	fb, err := b.Fence(bg)
	if err != nil {
		t.Fatal(err)
	}
	if fb <= fa {
		t.Fatalf("B's fence %d is not above A's %d", fb, fa)
	}
}

// A master of the holder's majority that loses its counter (here its whole
// data) does not let a later fence repeat: a new counter starts at the
// master's clock in microseconds, above every fence issued from older
// readings. Found by the fault suite's checking store; the guard is off for
// B so that it may use the master at once.
func TestFenceSurvivesAMasterLosingItsCounter(t *testing.T) {
	r := startReal(t, 5)
	r.take(3, "k", "other", time.Minute)
	r.take(4, "k", "other", time.Minute)
	a := mustLock(t, r.client(), "k", time.Minute) // masters 0-2
	fa, err := a.Fence(bg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.admin[2].FlushAll(bg).Err(); err != nil { // master 2 restarts empty
		t.Fatal(err)
	}
	r.take(0, "k", "other2", time.Minute) // B gets 2-4
	r.take(1, "k", "other2", time.Minute)
	for _, i := range []int{3, 4} {
		if err := r.admin[i].Del(bg, "k").Err(); err != nil {
			t.Fatal(err)
		}
	}
	b := mustLock(t, r.client(WithRestartGuard(0)), "k", time.Minute)
	fb, err := b.Fence(bg)
	if err != nil {
		t.Fatal(err)
	}
	if fb <= fa {
		t.Fatalf("B's fence %d is not above A's %d after master 2 lost its counter", fb, fa)
	}
}

func TestFenceOfAnEndedLockIsNotHeld(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client()
	l := mustLock(t, c, "k", time.Second)
	if err := l.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Fence(bg); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Fence after Unlock: %v, want ErrNotHeld", err)
	}

	short := mustLock(t, c, "short", scaled(200*time.Millisecond))
	<-short.Done()
	if _, err := short.Fence(bg); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Fence after the validity ended: %v, want ErrNotHeld", err)
	}

	// A fence drawn earlier is not returned once the lock has ended.
	held := mustLock(t, c, "held", time.Minute)
	if _, err := held.Fence(bg); err != nil {
		t.Fatal(err)
	}
	if err := held.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	if f, err := held.Fence(bg); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Fence after Unlock, with a fence drawn before: %d, %v; want ErrNotHeld", f, err)
	}
}

// A lock whose token a majority no longer holds gets no fence; one whose
// masters cannot answer gets ErrNotObtained, and may ask again.
func TestFenceWithoutAMajority(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client(WithNodeTimeout(50 * time.Millisecond))
	l := mustLock(t, c, "k", time.Minute)
	m.fastForward(2 * time.Minute) // the keys expired on every master ...
	for i := range 3 {
		m.take(i, "k", "other", time.Minute) // ... and another holder took three
	}
	if _, err := l.Fence(bg); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Fence of a lock taken over: %v, want ErrNotHeld", err)
	}

	l2 := mustLock(t, c, "k2", time.Minute)
	var unblock []func()
	for i := range 3 {
		_, u := m.block(i)
		unblock = append(unblock, u)
	}
	_, err := l2.Fence(bg)
	var qe *QuorumError
	if !errors.Is(err, ErrNotObtained) || errors.Is(err, ErrNotHeld) || !errors.As(err, &qe) {
		t.Fatalf("Fence with three masters hung: %v, want ErrNotObtained with a *QuorumError", err)
	}
	for _, u := range unblock {
		u()
	}
	if f, err := l2.Fence(bg); err != nil || f == 0 {
		t.Fatalf("Fence once the masters answer again: %d, %v", f, err)
	}
}

func TestConcurrentFencesAgree(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client()
	l := mustLock(t, c, "k", time.Minute)
	fences := make([]uint64, 8)
	var wg sync.WaitGroup
	for i := range fences {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := l.Fence(bg)
			if err != nil {
				t.Error(err)
			}
			fences[i] = f
		}()
	}
	wg.Wait()
	for _, f := range fences {
		if f != fences[0] || f == 0 {
			t.Fatalf("concurrent Fences returned %v, want one fence", fences)
		}
	}
}

// Do's function finds its lock, and so its fence, in its context.
func TestFenceInsideDo(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client()
	var fences []uint64
	for range 3 {
		err := c.Do(bg, "k", time.Minute, func(ctx context.Context) error {
			f, err := LockFromContext(ctx).Fence(ctx)
			fences = append(fences, f)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if fences[0] >= fences[1] || fences[1] >= fences[2] {
		t.Fatalf("fences inside Do: %v, want increasing", fences)
	}
	if l := LockFromContext(bg); l != nil {
		t.Fatalf("LockFromContext of a context without a lock = %v", l)
	}
	if _, err := LockFromContext(bg).Fence(bg); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Fence of no lock: %v, want ErrNotHeld", err)
	}
}

// A lock handed to the next local waiter gets a larger fence than its
// previous holder's.
func TestHandedLockGetsALargerFence(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client()
	holder, err := c.Lock(bg, "k", time.Minute) // Lock, not TryLock: it holds the turn
	if err != nil {
		t.Fatal(err)
	}
	fh, err := holder.Fence(bg)
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan lockResult, 1)
	go func() {
		l, err := c.Lock(bg, "k", time.Minute)
		res <- lockResult{l, err}
	}()
	queued(t, c, "k", 1)
	if err := holder.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	got := <-res
	if got.err != nil {
		t.Fatal(got.err)
	}
	if n := c.cfg.test.handOffs.Load(); n != 1 {
		t.Fatalf("%d hand-offs, want 1", n)
	}
	fw, err := got.l.Fence(bg)
	if err != nil || fw <= fh {
		t.Fatalf("the waiter's fence = %d, %v; want above the holder's %d", fw, err, fh)
	}
}

// On Redis Cluster masters the counter lives in the lock key's hash slot,
// with or without a hash tag in the key.
func TestFenceOnClusterMasters(t *testing.T) {
	var nodes []*redistest.Cluster
	for range 3 {
		nodes = append(nodes, redistest.StartCluster(t, 3))
	}
	var clients []redis.UniversalClient
	for _, cl := range nodes {
		clients = append(clients, cl.Client(cl.Masters[0].Addr))
	}
	c, err := New(clients)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	for _, key := range []string{"plain", "user:{42}:invoice", "a{b"} {
		var last uint64
		for i := range 3 {
			l := mustLock(t, c, key, time.Minute)
			f, err := l.Fence(bg)
			if err != nil || f <= last {
				t.Fatalf("key %q, holder %d: Fence = %d, %v; want above %d", key, i, f, err, last)
			}
			last = f
			if err := l.Unlock(bg); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestFenceKey(t *testing.T) {
	for _, tc := range []struct {
		key     string
		cluster bool
		want    string
	}{
		{"k", false, "k" + script.FenceSuffix},
		{"k", true, "{k}" + script.FenceSuffix},
		{"user:{42}", true, "user:{42}" + script.FenceSuffix}, // its tag hashes both
		{"a{b", true, "{a{b}" + script.FenceSuffix},           // no tag: the whole key is the new tag
		{"a{}b", true, "a{}b" + script.FenceSuffix},           // an empty tag is none, and its '}' defeats a new one
		{"a}b", true, "a}b" + script.FenceSuffix},             // cannot be tagged: another slot
	} {
		if got := script.FenceKey(tc.key, tc.cluster); got != tc.want {
			t.Errorf("fenceKey(%q, %v) = %q, want %q", tc.key, tc.cluster, got, tc.want)
		}
	}
}

func TestFenceFrom(t *testing.T) {
	for _, tc := range []struct {
		values []uint64
		f      uint64
		held   int
	}{
		{[]uint64{5, 5, 5, 0, 0}, 5, 3},
		{[]uint64{101, 1, 1, 0, 0}, 101, 1}, // needs a write-back
		{[]uint64{3, 4, 4, 4, 2}, 4, 3},
		{[]uint64{0, 0, 0, 0, 0}, 0, 0},
	} {
		if f, held := fenceFrom(tc.values); f != tc.f || held != tc.held {
			t.Errorf("fenceFrom(%v) = %d, %d; want %d, %d", tc.values, f, held, tc.f, tc.held)
		}
	}
}

// FuzzFenceFrom: the fence is one of the values and none is above it, and
// held counts exactly the masters at it.
func FuzzFenceFrom(f *testing.F) {
	f.Add(uint64(1), uint64(1), uint64(1), uint64(0), uint64(0))
	f.Add(uint64(101), uint64(1), uint64(2), uint64(0), uint64(7))
	f.Fuzz(func(t *testing.T, a, b, c, d, e uint64) {
		values := []uint64{a, b, c, d, e}
		got, held := fenceFrom(values)
		n := 0
		for _, v := range values {
			if v > got {
				t.Fatalf("fenceFrom(%v) = %d, below %d", values, got, v)
			}
			if v == got && v > 0 {
				n++
			}
		}
		if n != held || (got > 0) != (n > 0) {
			t.Fatalf("fenceFrom(%v) = %d held on %d, want %d", values, got, held, n)
		}
	})
}
