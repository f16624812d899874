// End to end: redlock Clients over the adapter's Conns.

package drivertest

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/driver"
	"github.com/redlock-go/redlock/internal/redistest"
)

// client returns a redlock Client over conns, closed when t ends.
func client(t *testing.T, conns []driver.Conn, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	c, err := redlock.NewFromDrivers(conns, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// absent fails t unless key is missing on every master.
func absent(t *testing.T, conns []driver.Conn, key string) {
	t.Helper()
	for i, c := range conns {
		if r := c.Do(ctx(t), "get", key); !errors.Is(r.Err, driver.ErrNil) {
			t.Fatalf("master %d: GET %s = %#v, want driver.ErrNil", i, key, r)
		}
	}
}

// lock: New refuses one server given twice; a Client takes a lock on
// every master, extends it, draws a fencing token, releases it, and takes
// it again.
func (s *suite) lock(t *testing.T) {
	conns := s.conns(t)
	twice := []driver.Conn{conns[0], s.dial(t, s.servers[0].Addr), conns[1]}
	if c, err := redlock.NewFromDrivers(twice); !errors.Is(err, redlock.ErrInvalidArgument) {
		if err == nil {
			_ = c.Close()
		}
		t.Fatalf("NewFromDrivers with one server twice: %v, want ErrInvalidArgument", err)
	}
	c := client(t, conns)
	const key = "dt:lock"
	l, err := c.TryLock(ctx(t), key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for i, conn := range conns {
		if v := do(t, conn, "get", key); v != l.Token() {
			t.Fatalf("master %d holds %#v, want the token %q", i, v, l.Token())
		}
	}
	if err := l.Extend(ctx(t), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if pttl, _ := do(t, conns[0], "pttl", key).(int64); pttl <= 10000 {
		t.Fatalf("PTTL after Extend to 20 s = %d ms", pttl)
	}
	if f, err := l.Fence(ctx(t)); err != nil || f == 0 {
		t.Fatalf("Fence = %d, %v", f, err)
	}
	if held, err := l.Held(ctx(t)); err != nil || !held {
		t.Fatalf("Held = %v, %v", held, err)
	}
	if err := l.Unlock(ctx(t)); err != nil {
		t.Fatal(err)
	}
	absent(t, conns, key)
	if _, err := l.Fence(ctx(t)); err == nil {
		t.Fatal("Fence after Unlock: no error")
	}
	l, err = c.TryLock(ctx(t), key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx(t)); err != nil {
		t.Fatal(err)
	}
}

// scriptCacheFlushed: the masters forget the library's scripts (SCRIPT
// FLUSH, as after a restart) under a held lock: Extend, Unlock and the
// next TryLock run them again from their source.
func (s *suite) scriptCacheFlushed(t *testing.T) {
	conns := s.conns(t)
	c := client(t, conns, redlock.WithBatchLimit(1)) // each call alone: the NOSCRIPT fallback, not a batch's EVAL
	const key = "dt:flushed"
	l, err := c.TryLock(ctx(t), key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	flush := func() {
		for _, conn := range conns {
			do(t, conn, "script", "flush")
		}
	}
	flush()
	if err := l.Extend(ctx(t), 10*time.Second); err != nil {
		t.Fatalf("Extend after SCRIPT FLUSH: %v", err)
	}
	flush()
	if err := l.Unlock(ctx(t)); err != nil {
		t.Fatalf("Unlock after SCRIPT FLUSH: %v", err)
	}
	absent(t, conns, key)
	flush()
	l, err = c.TryLock(ctx(t), key, 10*time.Second)
	if err != nil {
		t.Fatalf("TryLock after SCRIPT FLUSH: %v", err)
	}
	if err := l.Unlock(ctx(t)); err != nil {
		t.Fatal(err)
	}
}

// exclusion: two Clients, each over its own Conns, contend for one key: a
// held key refuses the other's TryLock; the other's Lock waits, and gets
// the key once it is released (woken by the release's notice, well
// before its backoff); then both take it in turns, never at once.
func (s *suite) exclusion(t *testing.T) {
	backoff := redlock.WithRetryDelay(redistest.Scaled(3*time.Second), redistest.Scaled(3*time.Second))
	a, b := client(t, s.conns(t), backoff), client(t, s.conns(t))
	const key = "dt:contended"
	la, err := a.TryLock(ctx(t), key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryLock(ctx(t), key, 10*time.Second); !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("TryLock of a held key: %v, want ErrNotObtained", err)
	}
	got := make(chan error, 1)
	var lb *redlock.Lock
	go func() {
		var err error
		lb, err = b.Lock(ctx(t), key, 10*time.Second)
		got <- err
	}()
	// b subscribes after its first attempt fails; its Lock is woken by
	// a's release once it listens on a majority.
	if err := waitSubscribed(t, s.conns(t), key); err != nil {
		t.Fatal(err)
	}
	if err := la.Unlock(ctx(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(redistest.Scaled(5 * time.Second)):
		t.Fatal("the waiting Lock did not get the released key")
	}
	if err := lb.Unlock(ctx(t)); err != nil {
		t.Fatal(err)
	}

	var inside atomic.Int32
	workers := []*redlock.Client{a, b, a, b}
	inParallel(t, "contending workers", len(workers), func(i int) error {
		for range 10 {
			l, err := workers[i].Lock(ctx(t), key, 10*time.Second)
			if err != nil {
				return fmt.Errorf("worker %d: %w", i, err)
			}
			n := inside.Add(1)
			inside.Add(-1)
			if err := l.Unlock(ctx(t)); err != nil {
				return fmt.Errorf("worker %d: %w", i, err)
			}
			if n != 1 {
				return fmt.Errorf("worker %d: %d holders at once", i, n)
			}
		}
		return nil
	})
}

// waitSubscribed waits until a majority of the masters have a subscriber
// on a channel of key's (the library's notice channel), polling PUBSUB:
// the servers' state is the only signal there is.
func waitSubscribed(t *testing.T, conns []driver.Conn, key string) error {
	deadline := time.Now().Add(redistest.Scaled(5 * time.Second))
	for {
		n := 0
		for _, c := range conns {
			if v, _ := c.Do(ctx(t), "pubsub", "channels", "*"+key+"*").Val.([]any); len(v) > 0 {
				n++
			}
		}
		if n > len(conns)/2 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no subscriber to %s's channels on a majority of the masters", key)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
