// Package redlocktest runs Redis masters in the test's own process, so that
// code which takes redlock locks can be tested without a Redis server:
// including the paths where a lock is not obtained (ErrNotObtained), is
// lost while held (ErrLockLost, a Do whose ctx ends) or is no longer held at
// Unlock (ErrNotHeld).
//
// The masters are miniredis servers (github.com/alicebob/miniredis/v2),
// each on its own loopback port, with their clocks in real time: a key
// expires when its TTL has passed. Faults are per master: Down and Up, Pause,
// Latency, LoseData; and per key: Expire and Steal, which end a lock as
// expiry or another holder would. Held and Free look into the masters
// directly, bypassing the Client.
//
// The masters start as a deployment that has run for a while, so that the
// restart guard (see WithRestartGuard) lets locks be taken at once even
// with a master Down; LoseData makes a master a restarted one, whose vote
// sits the guard out.
package redlocktest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/mini"
	"github.com/redlock-go/redlock/internal/script"
)

// Masters is a set of in-process masters. Its methods are safe for
// concurrent use; a master is named by its index, 0 to Len()-1, and an
// index out of range fails the test.
type Masters struct {
	t       testing.TB
	servers []*mini.Server
	clients []redis.UniversalClient

	closeOnce sync.Once

	mu     sync.Mutex
	paused map[int]chan struct{} // closed by the resume Pause returned
	delay  map[int]time.Duration
}

// established is how old the masters' memories are said to be when they
// start: older than any restart guard a test would set.
const established = 24 * time.Hour

// Start starts n masters (n >= 1; the Redlock algorithm wants an odd
// number, usually 3 or 5) and stops them when the test ends. It fails t if
// they cannot start.
func Start(t testing.TB, n int) *Masters {
	t.Helper()
	m, err := run(t, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// Run starts n masters outside a test (in an example, or a program); Close
// stops them. A misuse that fails the test of Start's masters (a master
// index out of range, an Up of a running master) panics on Run's.
func Run(n int) (*Masters, error) { return run(nil, n) }

func run(t testing.TB, n int) (*Masters, error) {
	if n < 1 {
		return nil, fmt.Errorf("redlocktest: %d masters, want at least 1", n)
	}
	m := &Masters{t: t, paused: map[int]chan struct{}{}, delay: map[int]time.Duration{}}
	for i := range n {
		s, err := mini.Run()
		if err == nil {
			err = age(s, established)
		}
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("redlocktest: master %d: %w", i, err)
		}
		s.SetPreHook(func(string, []string) error { m.hold(i); return nil })
		m.servers = append(m.servers, s)
		m.clients = append(m.clients, redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second}))
	}
	return m, nil
}

// Close releases the commands a Pause holds, then stops every master and
// closes the clients Clients returned. Start's masters are closed when the
// test ends.
func (m *Masters) Close() {
	m.closeOnce.Do(func() {
		m.resumeAll()
		for i, s := range m.servers {
			_ = m.clients[i].Close()
			s.Close()
		}
	})
}

// age writes the memory marker the restart guard reads: the master's memory
// began d ago, by its own clock.
func age(s *mini.Server, d time.Duration) error {
	born := time.Now().Add(-d).UnixMilli()
	return s.Set(script.MarkerKey("", false), fmt.Sprintf("%d 0", born))
}

// Len returns how many masters there are.
func (m *Masters) Len() int { return len(m.servers) }

// Addrs returns the masters' addresses, host:port, in index order.
func (m *Masters) Addrs() []string {
	addrs := make([]string, len(m.servers))
	for i, s := range m.servers {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Clients returns a go-redis client for each master, in index order: what
// redlock.New takes. They are closed when the test ends; a test may use
// them, but should not close them.
func (m *Masters) Clients() []redis.UniversalClient {
	return append([]redis.UniversalClient(nil), m.clients...)
}

// NewClient returns a redlock Client over every master, with opts. When
// the test ends it releases the commands a Pause holds, then closes the
// Client (Close waits for the replies it is owed). It fails t if
// redlock.New returns an error.
func (m *Masters) NewClient(t testing.TB, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	c, err := redlock.New(m.Clients(), opts...)
	if err != nil {
		t.Fatalf("redlock.New: %v", err)
	}
	t.Cleanup(func() {
		m.resumeAll()
		_ = c.Close()
	})
	return c
}

func (m *Masters) server(i int) *mini.Server {
	if i < 0 || i >= len(m.servers) {
		m.fail("master %d of %d", i, len(m.servers))
	}
	return m.servers[i]
}

// fail ends the test, or panics outside one (Run).
func (m *Masters) fail(format string, args ...any) {
	msg := "redlocktest: " + fmt.Sprintf(format, args...)
	if m.t == nil {
		panic(msg)
	}
	m.t.Helper()
	m.t.Fatal(msg)
}
